//! The engine: queues hashed across shards, each behind its own lock, and the
//! typed API of SPEC §1–3.
//!
//! A call hashes the queue name to its shard, locks that shard only, advances
//! it to the clock's time and runs the operation. What the operation produced
//! for others is handed on after the lock is released: parked receives it
//! completed get their `Notify` called, and dead letters bound for a
//! dead-letter target on another queue are delivered to that queue's shard
//! (or come back to the source's own DLQ when the target is gone or full).
//! No call ever holds two shard locks at once.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_utils::CachePadded;

use crate::budget::{Budget, EngineLimits};
use crate::clock::Clock;
use crate::error::Error;
use crate::event::{EngineImage, EventSink};
use crate::limits::BATCH_LEN_MAX;
use crate::receipt::{Receipt, ReceiptKey};
use crate::shard::{Notify, Outbound, Received, Shard, WaitId};
use crate::types::*;

/// The in-process engine.
pub struct Engine {
    /// Padded so that one shard's lock never shares a cache line with
    /// another's.
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    budget: Arc<Budget>,
    clock: Arc<dyn Clock>,
    next_queue_id: AtomicU32,
    /// Dead letters taken out of their source shard and not yet in their
    /// target's (or back in their source's DLQ): changed only while the
    /// shard concerned is locked, so with every shard locked it is exact.
    in_transit: AtomicU64,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("shards", &self.shards.len())
            .field("clock", &self.clock)
            .finish()
    }
}

type Completions = Vec<(Notify, Result<Vec<Message>, Error>)>;

fn check_batch(field: &'static str, len: usize) -> Result<(), Error> {
    if len == 0 || len > BATCH_LEN_MAX {
        return Err(Error::invalid(
            field,
            format!("must hold 1..={BATCH_LEN_MAX} entries (got {len})"),
        ));
    }
    Ok(())
}

impl Engine {
    /// An engine with `shards` shards (at least one) reading time from
    /// `clock`, signing receipts with a key drawn from the OS at random.
    pub fn new(shards: usize, clock: Arc<dyn Clock>) -> Engine {
        Engine::with_receipt_key(shards, clock, ReceiptKey::random())
    }

    /// [`Engine::new`] with a given receipt key (tests, benches).
    pub fn with_receipt_key(shards: usize, clock: Arc<dyn Clock>, key: ReceiptKey) -> Engine {
        let shards = shards.clamp(1, usize::from(u16::MAX));
        let now = clock.now_ms();
        let budget = Arc::new(Budget::new(EngineLimits::default()));
        Engine {
            shards: (0..shards)
                .map(|i| {
                    CachePadded::new(Mutex::new(Shard::new(i as u16, now, key, budget.clone())))
                })
                .collect(),
            budget,
            clock,
            next_queue_id: AtomicU32::new(1),
            in_transit: AtomicU64::new(0),
        }
    }

    /// Sets the server-wide limits (they apply to later puts and creates;
    /// nothing stored is dropped when they shrink).
    pub fn set_limits(&self, limits: EngineLimits) {
        self.budget.set_limits(limits);
    }

    /// The limits in force.
    pub fn limits(&self) -> EngineLimits {
        self.budget.limits()
    }

    /// Bytes the stored messages count against
    /// [`EngineLimits::max_stored_bytes`].
    pub fn stored_bytes(&self) -> u64 {
        self.budget.stored_bytes()
    }

    /// Queues that exist.
    pub fn queue_count(&self) -> u64 {
        self.budget.queues()
    }

    /// Message slots allocated across shards, live or free: what deleting
    /// and purging give back shows here.
    pub fn message_slots(&self) -> usize {
        (0..self.shards.len())
            .map(|i| self.lock(i).message_slots())
            .sum()
    }

    /// Every shard's bookkeeping recomputed from its records and compared
    /// (counts, indexes, timers, free slots); for tests and fuzzing, O(all
    /// messages). `Err` names the first disagreement.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        (0..self.shards.len()).try_for_each(|i| self.lock(i).check_invariants())
    }

    /// How many shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The shard that owns the queue `name` (FNV-1a of the name).
    pub fn shard_of(&self, name: &str) -> usize {
        let mut h: u64 = 0xCBF2_9CE4_8422_2325;
        for b in name.as_bytes() {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01B3);
        }
        (h % self.shards.len() as u64) as usize
    }

    /// The clock's time.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    fn lock(&self, index: usize) -> MutexGuard<'_, Shard> {
        // A panic while a shard was held is a bug; its state is still the
        // best there is, so keep serving rather than poison every later call.
        self.shards[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` on the shard owning `name`, then hands on what it produced.
    fn on_shard<R>(&self, name: &str, f: impl FnOnce(&mut Shard, u64) -> R) -> R {
        let now = self.clock.now_ms();
        let (result, completions, outbox) = {
            let mut shard = self.lock(self.shard_of(name));
            let result = f(&mut shard, now);
            if shard.has_output() {
                let outbox = shard.take_outbox();
                self.in_transit
                    .fetch_add(outbox.len() as u64, Ordering::AcqRel);
                (result, shard.take_completions(), outbox)
            } else {
                (result, Vec::new(), Vec::new())
            }
        };
        if !completions.is_empty() || !outbox.is_empty() {
            self.hand_on(completions, outbox, now);
        }
        result
    }

    /// Delivers dead letters to their targets, then completes parked receives.
    fn hand_on(&self, mut completions: Completions, mut outbox: Vec<Outbound>, now: u64) {
        outbox.sort_by(|a, b| {
            a.at_ms
                .cmp(&b.at_ms)
                .then_with(|| a.source.cmp(&b.source))
                .then(a.source_seq.cmp(&b.source_seq))
        });
        for out in outbox {
            let target = self.shard_of(&out.target);
            let bounced = {
                let mut shard = self.lock(target);
                let result = shard.accept_forward(out, now);
                completions.extend(shard.take_completions());
                if result.is_ok() {
                    self.in_transit.fetch_sub(1, Ordering::AcqRel);
                }
                result.err()
            };
            if let Some(out) = bounced {
                let mut shard = self.lock(self.shard_of(&out.source));
                shard.accept_bounce(out, now);
                completions.extend(shard.take_completions());
                self.in_transit.fetch_sub(1, Ordering::AcqRel);
            }
        }
        for (notify, result) in completions {
            notify(result);
        }
    }

    /// Advances every shard to the clock's time: leases end, delays and
    /// schedules come due, messages expire, long polls time out. A server
    /// calls this from its event loop; returns the earliest time at which
    /// there will be more to do.
    pub fn tick(&self) -> Option<u64> {
        let now = self.clock.now_ms();
        let mut completions = Vec::new();
        let mut outbox = Vec::new();
        let mut next: Option<u64> = None;
        for i in 0..self.shards.len() {
            let mut shard = self.lock(i);
            shard.advance(now);
            completions.extend(shard.take_completions());
            let out = shard.take_outbox();
            self.in_transit
                .fetch_add(out.len() as u64, Ordering::AcqRel);
            outbox.extend(out);
            if let Some(d) = shard.next_deadline() {
                next = Some(next.map_or(d, |n| n.min(d)));
            }
        }
        self.hand_on(completions, outbox, now);
        next
    }

    /// Installs an event sink on one shard (see [`crate::event`]).
    pub fn set_journal(&self, shard: usize, sink: Option<Box<dyn EventSink>>) {
        self.lock(shard).set_journal(sink);
    }

    /// Every queue with its messages as one consistent state: every shard
    /// is locked (in order) while `during` runs and the images are taken,
    /// so no change falls between them. A write-ahead log drains its
    /// buffers in `during`: then everything logged before is in the
    /// images and everything after comes after them. `None` (and `during`
    /// not run) while a dead letter is between two shards: try again.
    ///
    /// Costs one pass over every message with every shard held (payloads
    /// are shared, not copied).
    pub fn export(&self, during: impl FnOnce()) -> Option<EngineImage> {
        let guards: Vec<MutexGuard<'_, Shard>> =
            (0..self.shards.len()).map(|i| self.lock(i)).collect();
        if self.in_transit.load(Ordering::Acquire) != 0 {
            return None;
        }
        during();
        Some(EngineImage {
            next_queue_id: self.next_queue_id.load(Ordering::Acquire),
            queues: guards.iter().flat_map(|g| g.export()).collect(),
        })
    }

    /// Restores saved queues and messages into this engine, which must not
    /// have them already (`queue_exists`). Queue ids are kept, so message
    /// ids stay what they were; new queues get ids above every restored
    /// one. Leases are not restored: every message is visible, delayed or
    /// deferred. Nothing is refused for the limits.
    pub fn restore(&self, image: EngineImage) -> Result<(), Error> {
        self.next_queue_id
            .fetch_max(image.next_queue_id, Ordering::AcqRel);
        // Every shard's time first: restoring must not run a timer (an
        // expiry would be an event no log is listening to yet). Messages
        // already due run at the first call after.
        let now = self.clock.now_ms();
        for i in 0..self.shards.len() {
            self.lock(i).advance(now);
        }
        for image in image.queues {
            let id = image.id;
            let mut shard = self.lock(self.shard_of(&image.name));
            shard.restore_queue(image)?;
            self.next_queue_id
                .fetch_max(id.saturating_add(1), Ordering::AcqRel);
        }
        Ok(())
    }

    fn check_target(&self, name: &str, settings: &QueueSettings) -> Result<(), Error> {
        if let Some(target) = &settings.dead_letter_target {
            if target == name {
                return Err(Error::invalid(
                    "dead_letter_target",
                    "must name another queue (leave it unset for the built-in DLQ)",
                ));
            }
            if !self.lock(self.shard_of(target)).has_queue(target) {
                return Err(Error::QueueNotFound(target.clone()));
            }
        }
        Ok(())
    }

    // ----- queues -------------------------------------------------------------

    /// Creates a queue. Returns `true` when created, `false` when it already
    /// existed with the same settings; different settings are `queue_exists`.
    pub fn create_queue(&self, name: &str, settings: QueueSettings) -> Result<bool, Error> {
        validate_queue_name("name", name)?;
        settings.validate()?;
        self.check_target(name, &settings)?;
        self.on_shard(name, |s, now| {
            s.advance(now);
            s.create_queue(name, settings, || {
                self.next_queue_id.fetch_add(1, Ordering::Relaxed)
            })
        })
    }

    /// A queue's settings.
    pub fn queue_settings(&self, name: &str) -> Result<QueueSettings, Error> {
        self.on_shard(name, |s, _| s.settings(name))
    }

    /// Changes some of a queue's settings; answers the settings now in force.
    pub fn update_queue(
        &self,
        name: &str,
        update: &SettingsUpdate,
    ) -> Result<QueueSettings, Error> {
        // The target's existence is checked first, under its own shard's
        // lock; the read-modify-write of the settings is one step under
        // this queue's lock, so concurrent updates of different fields
        // both take effect.
        if let Some(Some(target)) = &update.dead_letter_target {
            let probe = QueueSettings {
                dead_letter_target: Some(target.clone()),
                ..QueueSettings::default()
            };
            probe.validate()?;
            self.check_target(name, &probe)?;
        }
        self.on_shard(name, |s, now| {
            s.advance(now);
            s.update_settings(name, update)
        })
    }

    /// Queue names starting with `prefix`, sorted (every one of them: for
    /// a bounded answer use [`Engine::list_queues_page`]).
    pub fn list_queues(&self, prefix: &str) -> Vec<String> {
        let mut names: Vec<String> = (0..self.shards.len())
            .flat_map(|i| self.lock(i).list(prefix, "", usize::MAX))
            .collect();
        names.sort_unstable();
        names
    }

    /// One page of [`Engine::list_queues`]: up to `limit` names after
    /// `after` (exclusive; "" from the start), and the `after` of the next
    /// page when more remain. Costs O(shards × (log queues + limit)).
    pub fn list_queues_page(
        &self,
        prefix: &str,
        after: &str,
        limit: usize,
    ) -> (Vec<String>, Option<String>) {
        let limit = limit.max(1);
        let mut names: Vec<String> = (0..self.shards.len())
            .flat_map(|i| self.lock(i).list(prefix, after, limit + 1))
            .collect();
        names.sort_unstable();
        let more = names.len() > limit;
        names.truncate(limit);
        let next = if more { names.last().cloned() } else { None };
        (names, next)
    }

    /// Deletes a queue and everything in it.
    pub fn delete_queue(&self, name: &str) -> Result<(), Error> {
        self.on_shard(name, |s, now| {
            s.advance(now);
            s.delete_queue(name)
        })
    }

    /// Removes every message of a queue, or of its DLQ.
    pub fn purge(&self, addr: Address<'_>) -> Result<(), Error> {
        self.on_shard(addr.queue, |s, now| {
            s.advance(now);
            s.purge(addr)
        })
    }

    /// A queue's stats.
    pub fn stats(&self, name: &str) -> Result<QueueStats, Error> {
        self.on_shard(name, |s, now| {
            s.advance(now);
            s.stats(name)
        })
    }

    // ----- messages -----------------------------------------------------------

    /// Puts 1–20 messages; each entry answers alone.
    pub fn put(
        &self,
        name: &str,
        batch: Vec<NewMessage>,
    ) -> Result<Vec<EntryResult<PutReceipt>>, Error> {
        check_batch("messages", batch.len())?;
        self.on_shard(name, |s, now| s.put(name, batch, now))
    }

    /// Cancels a delayed or scheduled message by sequence number.
    pub fn cancel_scheduled(&self, name: &str, seq: u64) -> Result<(), Error> {
        self.on_shard(name, |s, now| s.cancel_scheduled(name, seq, now))
    }

    /// Receives up to `opts.max_messages`. When none is visible and the wait
    /// (the option's, else the queue's default) is above zero, the receive is
    /// parked and `notify` is called when messages come or the wait ends
    /// (from whichever thread makes that happen, never under a shard lock).
    pub fn receive(
        &self,
        addr: Address<'_>,
        opts: &ReceiveOptions,
        notify: impl FnOnce(Result<Vec<Message>, Error>) + Send + 'static,
    ) -> Result<Received, Error> {
        self.on_shard(addr.queue, |s, now| {
            s.receive(addr, opts, Some(Box::new(notify)), now)
        })
    }

    /// Receives what is visible now, never waiting.
    pub fn receive_now(
        &self,
        addr: Address<'_>,
        opts: &ReceiveOptions,
    ) -> Result<Vec<Message>, Error> {
        match self.on_shard(addr.queue, |s, now| s.receive(addr, opts, None, now))? {
            Received::Ready(messages) => Ok(messages),
            Received::Parked(_) => unreachable!("no notify, no parking"),
        }
    }

    /// Forgets a parked receive without calling its notify. Returns whether
    /// it was still parked.
    pub fn cancel_wait(&self, id: WaitId) -> bool {
        match self.shards.get(usize::from(id.shard)) {
            Some(_) => self.lock(usize::from(id.shard)).cancel_wait(id),
            None => false,
        }
    }

    /// Changes 1–20 leases' next-visible times; answers each new time.
    pub fn update_visibility(
        &self,
        addr: Address<'_>,
        changes: &[VisibilityChange],
    ) -> Result<Vec<EntryResult<u64>>, Error> {
        check_batch("entries", changes.len())?;
        self.on_shard(addr.queue, |s, now| s.update_visibility(addr, changes, now))
    }

    /// Deletes 1–20 messages by receipt.
    pub fn delete(
        &self,
        addr: Address<'_>,
        receipts: &[Receipt],
    ) -> Result<Vec<EntryResult<()>>, Error> {
        check_batch("receipts", receipts.len())?;
        self.on_shard(addr.queue, |s, now| s.delete(addr, receipts, now))
    }

    /// Defers a leased message.
    pub fn defer(&self, name: &str, receipt: &Receipt) -> Result<(), Error> {
        self.on_shard(name, |s, now| s.defer(name, receipt, now))
    }

    /// Dead-letters a leased message with a reason and description.
    pub fn dead_letter(
        &self,
        name: &str,
        receipt: &Receipt,
        reason: &str,
        description: &str,
    ) -> Result<(), Error> {
        self.on_shard(name, |s, now| {
            s.dead_letter(
                name,
                receipt,
                reason.to_owned(),
                description.to_owned(),
                now,
            )
        })
    }

    /// Takes 1–20 deferred messages by sequence number.
    pub fn receive_deferred(
        &self,
        name: &str,
        seqs: &[u64],
        visibility_ms: Option<u64>,
    ) -> Result<Vec<EntryResult<Message>>, Error> {
        check_batch("sequence_numbers", seqs.len())?;
        self.on_shard(name, |s, now| {
            s.receive_deferred(name, seqs, visibility_ms, now)
        })
    }

    /// Up to `max` (1–100) messages from sequence number `from`, unchanged.
    pub fn peek(&self, addr: Address<'_>, from: u64, max: u32) -> Result<Vec<Message>, Error> {
        self.on_shard(addr.queue, |s, now| s.peek(addr, from, max, now))
    }

    /// Moves dead letters back to their queue: all or `max`, optionally at
    /// most `rate_per_second`.
    pub fn redrive(
        &self,
        name: &str,
        max: Option<u64>,
        rate_per_second: Option<u32>,
    ) -> Result<RedriveOutcome, Error> {
        self.on_shard(name, |s, now| s.redrive(name, max, rate_per_second, now))
    }
}
