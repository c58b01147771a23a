//! Deduplication ids: each queue remembers the ids of its recent puts for
//! its `dedup_window_ms`, so a producer that resends after a timeout or a
//! reconnect stores nothing twice.
//!
//! A queue's table maps a 128-bit key (SipHash-1-3 of the id, or of the
//! payload and attributes for a queue with `content_dedup`) to the
//! sequence number of the put that stored it and when the entry expires.
//! Keys are remembered in the order they were put — the order they expire
//! in while the window stays the same — and one timer per queue, at the
//! oldest key's expiry, drops the expired ones from the front: no scan.
//! A lookup checks the entry's own expiry too, so an entry kept past its
//! time (behind an older one after the window was made shorter) is never
//! taken for a duplicate. Each entry counts [`DEDUP_ENTRY_BYTES`] against
//! the server's `max_stored_bytes`, and a queue holds at most
//! [`DEDUP_ENTRIES_MAX`] (a put with a new id past it is refused).
//!
//! The table is logged (a put's `Stored` event carries the key it
//! remembers, so no log keeps one without the other; expiry is time, not
//! an event) and saved with its queue.

use std::hash::Hasher;

use siphasher::sip128::{Hasher128, SipHasher13};

use super::*;
use crate::event::DedupImage;
use crate::limits::DEDUP_ENTRIES_MAX;

/// What one remembered id counts against `max_stored_bytes`: the map's
/// entry (key, sequence number, expiry and the map's own bytes) and its
/// place in the expiry order.
pub const DEDUP_ENTRY_BYTES: u64 = 64;

/// One remembered put.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct DedupEntry {
    seq: u64,
    expires_at: u64,
}

/// A queue's remembered ids.
#[derive(Default)]
pub(super) struct DedupTable {
    entries: HashMap<u128, DedupEntry>,
    /// Keys in the order they were remembered (a key remembered again after
    /// it expired may also stand further ahead, stale: skipped).
    order: VecDeque<u128>,
    /// The timer at the front key's expiry.
    timer: Option<TimerKey>,
}

impl DedupTable {
    /// Ids remembered.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether its timer is pending.
    pub(super) fn has_timer(&self) -> bool {
        self.timer.is_some()
    }

    /// Its own bookkeeping: every key remembered is in the expiry order,
    /// and a timer is pending exactly when some key is.
    pub(super) fn check(&self) -> Result<(), String> {
        if self.order.len() < self.entries.len() {
            return Err(format!(
                "{} remembered, {} in the expiry order",
                self.entries.len(),
                self.order.len()
            ));
        }
        let ordered: std::collections::HashSet<&u128> = self.order.iter().collect();
        if let Some(k) = self.entries.keys().find(|k| !ordered.contains(k)) {
            return Err(format!("key {k:032x} is not in the expiry order"));
        }
        if self.timer.is_some() == self.order.is_empty() {
            return Err(format!(
                "{} keys in order, timer pending: {}",
                self.order.len(),
                self.timer.is_some()
            ));
        }
        Ok(())
    }
}

fn hasher(domain: u8) -> SipHasher13 {
    // A fixed key: the keys are logged and must mean the same after a
    // restart. Who can put to a queue can name any id it likes anyway.
    let mut h = SipHasher13::new_with_keys(0x6669_6c61_6465_6475, 0x7020_6b65_7973_2031);
    h.write_u8(domain);
    h
}

/// The key of a deduplication id.
pub fn dedup_key(id: &str) -> u128 {
    let mut h = hasher(b'i');
    h.write(id.as_bytes());
    h.finish128().as_u128()
}

/// The key of a message's content: its payload and attributes (each with
/// its length, so no two contents share their bytes).
pub fn content_key(payload: &[u8], attributes: &[(String, String)]) -> u128 {
    let mut h = hasher(b'c');
    h.write_u64(payload.len() as u64);
    h.write(payload);
    h.write_u64(attributes.len() as u64);
    for (k, v) in attributes {
        h.write_u64(k.len() as u64);
        h.write(k.as_bytes());
        h.write_u64(v.len() as u64);
        h.write(v.as_bytes());
    }
    h.finish128().as_u128()
}

impl Shard {
    /// The deduplication key of `m`'s put to queue `qslot`: its id's, or
    /// its content's when the queue says so; none without either.
    pub(super) fn dedup_key_of(&self, qslot: u32, m: &NewMessage) -> Option<u128> {
        match &m.dedup_id {
            Some(id) => Some(dedup_key(id)),
            None if self.queue(qslot).settings.content_dedup => {
                Some(content_key(&m.payload, &m.attributes))
            }
            None => None,
        }
    }

    /// The sequence number of the put that remembered `key`, if it is
    /// still within its window at `now`.
    pub(super) fn dedup_hit(&self, qslot: u32, key: u128, now: u64) -> Option<u64> {
        let table = self.queue(qslot).dedup.as_ref()?;
        table
            .entries
            .get(&key)
            .filter(|e| e.expires_at > now)
            .map(|e| e.seq)
    }

    /// Room for one more remembered id: the queue's limit and the
    /// server's stored bytes (reserved here; [`Shard::dedup_remember`]
    /// keeps it).
    pub(super) fn dedup_reserve(&mut self, qslot: u32) -> Result<(), Error> {
        let held = self.queue(qslot).dedup.as_ref().map_or(0, |t| t.len());
        if held as u64 >= DEDUP_ENTRIES_MAX {
            return Err(Error::QueueFull {
                name: self.queue(qslot).name.to_string(),
                limit: "deduplication ids remembered",
                max: DEDUP_ENTRIES_MAX,
            });
        }
        self.budget.reserve(DEDUP_ENTRY_BYTES)
    }

    /// Remembers `key` for the put of `seq` until `expires_at` (its room
    /// reserved by [`Shard::dedup_reserve`]; logged with the put's
    /// `Stored` event), and sets the queue's timer when it is the first.
    pub(super) fn dedup_remember(&mut self, qslot: u32, key: u128, seq: u64, expires_at: u64) {
        let table = self
            .queue_mut(qslot)
            .dedup
            .get_or_insert_with(Default::default);
        let entry = DedupEntry { seq, expires_at };
        if table.entries.insert(key, entry).is_some() {
            // An expired entry not dropped yet: replaced, counted once.
            self.budget.release(DEDUP_ENTRY_BYTES);
        }
        let table = self.queue_mut(qslot).dedup.as_mut().expect("just made");
        table.order.push_back(key);
        let first = table.timer.is_none();
        if first {
            let timer = self.wheel.insert(expires_at, Timer::Dedup(qslot).into());
            self.queue_mut(qslot).dedup.as_mut().expect("made").timer = Some(timer);
        }
    }

    /// The queue's dedup timer fired at `now`: drops the expired keys at
    /// the front of its order and sets the timer at the next one's expiry.
    pub(super) fn dedup_tick(&mut self, qslot: u32, now: u64) {
        let Some(table) = self.queue_mut(qslot).dedup.as_mut() else {
            return;
        };
        table.timer = None;
        let mut freed = 0u64;
        let mut next = None;
        while let Some(&key) = table.order.front() {
            match table.entries.get(&key) {
                Some(e) if e.expires_at > now => {
                    // Still remembered (or remembered again): the front.
                    next = Some(e.expires_at);
                    break;
                }
                Some(_) => {
                    table.entries.remove(&key);
                    freed += 1;
                }
                None => {}
            }
            table.order.pop_front();
        }
        if table.order.is_empty() {
            table.order = VecDeque::new();
        }
        if let Some(at) = next {
            let timer = self.wheel.insert(at, Timer::Dedup(qslot).into());
            self.queue_mut(qslot).dedup.as_mut().expect("kept").timer = Some(timer);
        }
        self.budget.release(freed * DEDUP_ENTRY_BYTES);
    }

    /// Forgets a deleted queue's remembered ids (their room given back,
    /// their timer cancelled).
    pub(super) fn dedup_drop(&mut self, qslot: u32) {
        let Some(table) = self.queue_mut(qslot).dedup.take() else {
            return;
        };
        if let Some(t) = table.timer {
            self.wheel.cancel(t);
        }
        self.budget
            .release(table.entries.len() as u64 * DEDUP_ENTRY_BYTES);
    }

    /// A queue's remembered ids as saved (those not expired at `now`), in
    /// the order they were remembered.
    pub(super) fn dedup_image(&self, qslot: u32, now: u64) -> Vec<DedupImage> {
        let Some(table) = self.queue(qslot).dedup.as_ref() else {
            return Vec::new();
        };
        let mut seen = std::collections::HashSet::new();
        let mut out: Vec<DedupImage> = table
            .order
            .iter()
            .rev()
            .filter(|k| seen.insert(**k))
            .filter_map(|k| {
                let e = table.entries.get(k)?;
                (e.expires_at > now).then_some(DedupImage {
                    key: *k,
                    seq: e.seq,
                    expires_at_ms: e.expires_at,
                })
            })
            .collect();
        out.reverse();
        out
    }

    /// Restores a queue's remembered ids (those not expired at `now`),
    /// counted whatever the limit (they were counted when remembered).
    pub(super) fn dedup_restore(&mut self, qslot: u32, entries: &[DedupImage], now: u64) {
        let mut live: Vec<&DedupImage> = entries.iter().filter(|e| e.expires_at_ms > now).collect();
        if live.is_empty() {
            return;
        }
        live.sort_by_key(|e| e.expires_at_ms);
        let mut table = DedupTable::default();
        for e in &live {
            let entry = DedupEntry {
                seq: e.seq,
                expires_at: e.expires_at_ms,
            };
            if table.entries.insert(e.key, entry).is_none() {
                table.order.push_back(e.key);
            }
        }
        self.budget
            .force(table.entries.len() as u64 * DEDUP_ENTRY_BYTES);
        let first = live[0].expires_at_ms;
        table.timer = Some(self.wheel.insert(first, Timer::Dedup(qslot).into()));
        self.queue_mut(qslot).dedup = Some(Box::new(table));
    }

    /// Ids the queue remembers now.
    pub(super) fn dedup_len(&self, qslot: u32) -> u64 {
        self.queue(qslot)
            .dedup
            .as_ref()
            .map_or(0, |t| t.len() as u64)
    }
}
