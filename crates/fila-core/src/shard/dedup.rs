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

/// One remembered put, in the order of the puts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    key: u128,
    seq: u64,
    expires_at: u64,
}

/// A queue's remembered ids: the slots in put order, and an index from a
/// key to its slot (its absolute place: slots popped before it, plus its
/// place in the ring) — 32 bytes a slot and 9 a bucket of the index, about
/// 52 bytes an id at a million of them.
#[derive(Default)]
pub(super) struct DedupTable {
    slots: VecDeque<Slot>,
    /// Slots popped from the front so far.
    popped: u64,
    /// Each remembered key's slot, by absolute place.
    index: hashbrown::HashTable<u64>,
    /// The timer at the front slot's expiry.
    timer: Option<TimerKey>,
}

/// The index's hash of a key: its low bits (keys are SipHash outputs).
fn spread(key: u128) -> u64 {
    key as u64
}

impl DedupTable {
    /// Ids remembered.
    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    fn slot(&self, abs: u64) -> &Slot {
        &self.slots[(abs - self.popped) as usize]
    }

    /// The slot remembering `key`, if any (expired or not).
    fn find(&self, key: u128) -> Option<&Slot> {
        self.index
            .find(spread(key), |&abs| self.slot(abs).key == key)
            .map(|&abs| self.slot(abs))
    }

    /// Remembers `key` in a new slot; `true` when it replaced an expired
    /// slot of the same key not dropped yet.
    fn push(&mut self, slot: Slot) -> bool {
        let abs = self.popped + self.slots.len() as u64;
        let key = slot.key;
        self.slots.push_back(slot);
        let (slots, popped) = (&self.slots, self.popped);
        let at = |abs: u64| &slots[(abs - popped) as usize];
        match self.index.find_mut(spread(key), |&a| at(a).key == key) {
            Some(a) => {
                *a = abs;
                true
            }
            None => {
                self.index
                    .insert_unique(spread(key), abs, |&a| spread(at(a).key));
                false
            }
        }
    }

    /// Pops the front slot; answers it and whether it was its key's
    /// current one (then the key is forgotten).
    fn pop(&mut self) -> Option<(Slot, bool)> {
        let slot = self.slots.pop_front()?;
        let abs = self.popped;
        self.popped += 1;
        let current = match self.index.find_entry(spread(slot.key), |&a| a == abs) {
            Ok(e) => {
                e.remove();
                true
            }
            Err(_) => false,
        };
        Some((slot, current))
    }

    /// Whether its timer is pending.
    pub(super) fn has_timer(&self) -> bool {
        self.timer.is_some()
    }

    /// Its own bookkeeping: every key's slot holds that key, and a timer is
    /// pending exactly when some slot is.
    pub(super) fn check(&self) -> Result<(), String> {
        for &abs in self.index.iter() {
            if abs < self.popped || abs >= self.popped + self.slots.len() as u64 {
                return Err(format!("an index entry points past the slots ({abs})"));
            }
            let key = self.slot(abs).key;
            if self.find(key).map(|s| s as *const Slot) != Some(self.slot(abs) as *const Slot) {
                return Err(format!("key {key:032x} is not found at its own slot"));
            }
        }
        if self.timer.is_some() == self.slots.is_empty() {
            return Err(format!(
                "{} slots, timer pending: {}",
                self.slots.len(),
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
            .find(key)
            .filter(|s| s.expires_at > now)
            .map(|s| s.seq)
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
        let replaced = table.push(Slot {
            key,
            seq,
            expires_at,
        });
        let first = table.timer.is_none();
        if replaced {
            // An expired id not dropped yet: remembered again, counted once.
            self.budget.release(DEDUP_ENTRY_BYTES);
        }
        if first {
            let timer = self.wheel.insert(expires_at, Timer::Dedup(qslot).into());
            self.queue_mut(qslot).dedup.as_mut().expect("made").timer = Some(timer);
        }
    }

    /// The queue's dedup timer fired at `now`: drops the expired slots at
    /// the front and sets the timer at the next one's expiry.
    pub(super) fn dedup_tick(&mut self, qslot: u32, now: u64) {
        let Some(table) = self.queue_mut(qslot).dedup.as_mut() else {
            return;
        };
        table.timer = None;
        let mut freed = 0u64;
        while table.slots.front().is_some_and(|s| s.expires_at <= now) {
            if let Some((_, true)) = table.pop() {
                freed += 1;
            }
        }
        let next = table.slots.front().map(|s| s.expires_at);
        if table.slots.len() * 4 < table.slots.capacity() {
            // Give back what a burst of puts grew.
            table.slots.shrink_to(table.slots.len() * 2);
            let slots = &table.slots;
            let popped = table.popped;
            table
                .index
                .shrink_to(0, |&a| spread(slots[(a - popped) as usize].key));
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
        self.budget.release(table.len() as u64 * DEDUP_ENTRY_BYTES);
    }

    /// A queue's remembered ids as saved (those not expired at `now`), in
    /// the order they were remembered.
    pub(super) fn dedup_image(&self, qslot: u32, now: u64) -> Vec<DedupImage> {
        let Some(table) = self.queue(qslot).dedup.as_ref() else {
            return Vec::new();
        };
        table
            .index
            .iter()
            .map(|&abs| (abs, table.slot(abs)))
            .filter(|(_, s)| s.expires_at > now)
            .map(|(abs, s)| {
                let image = DedupImage {
                    key: s.key,
                    seq: s.seq,
                    expires_at_ms: s.expires_at,
                };
                (abs, image)
            })
            // In the order remembered.
            .collect::<std::collections::BTreeMap<_, _>>()
            .into_values()
            .collect()
    }

    /// Restores a queue's remembered ids (those not expired at `now`, in
    /// the order they expire), counted whatever the limit (they were
    /// counted when remembered).
    pub(super) fn dedup_restore(&mut self, qslot: u32, entries: &[DedupImage], now: u64) {
        let mut live: Vec<&DedupImage> = entries.iter().filter(|e| e.expires_at_ms > now).collect();
        if live.is_empty() {
            return;
        }
        live.sort_by_key(|e| (e.expires_at_ms, e.seq));
        let mut table = DedupTable::default();
        let mut kept = 0u64;
        for e in &live {
            let replaced = table.push(Slot {
                key: e.key,
                seq: e.seq,
                expires_at: e.expires_at_ms,
            });
            kept += u64::from(!replaced);
        }
        self.budget.force(kept * DEDUP_ENTRY_BYTES);
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
