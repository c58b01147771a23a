//! The engine: queues hashed across shards, each behind its own lock, and the
//! typed API of SPEC §1–3, for embedding, tests and benches.
//!
//! Each shard is an [`Owner`] of that one shard behind a mutex. A call
//! hashes the queue name to its shard, locks that shard only, advances it
//! to the clock's time and runs the operation. What the operation produced
//! for others is handed on after the lock is released: parked receives it
//! completed get their `Notify` called, and dead letters bound for a
//! dead-letter target on another queue are delivered to that queue's shard
//! (or come back to the source's own DLQ when the target is gone or full).
//! No call ever holds two shard locks at once.
//!
//! A server does not use these locks: it splits the engine into owners
//! ([`Engine::into_owners`]), one per event loop, each touched by its loop
//! only.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_utils::CachePadded;

use crate::budget::{Budget, EngineLimits};
use crate::clock::Clock;
use crate::error::Error;
use crate::event::{EngineImage, EventSink};
use crate::owner::{precheck_update, Core, Owner, Totals, Transit};
use crate::receipt::{Receipt, ReceiptKey};
use crate::shard::{Completion, Received, WaitId, Wake};
use crate::types::*;

/// The in-process engine.
pub struct Engine {
    /// Padded so that one shard's lock never shares a cache line with
    /// another's.
    shards: Box<[CachePadded<Mutex<Owner>>]>,
    core: Arc<Core>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("shards", &self.shards.len())
            .field("clock", &self.core.clock)
            .finish()
    }
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
        let core = Arc::new(Core {
            budget: Arc::new(Budget::new(EngineLimits::default(), shards)),
            clock,
            next_queue_id: AtomicU32::new(1),
            in_transit: AtomicU64::new(0),
            shards,
        });
        Engine {
            shards: (0..shards)
                .map(|i| CachePadded::new(Mutex::new(Owner::with_shard(core.clone(), i, key))))
                .collect(),
            core,
        }
    }

    /// Splits the engine into `owners` owners (at least one): shard `i`
    /// goes to owner `i % owners`. Each is then used by one thread, with no
    /// lock; operations on a shard run at most `timer_budget` due timers
    /// before they start (the owner runs the rest with
    /// [`Owner::advance`]).
    pub fn into_owners(self, owners: usize, timer_budget: usize) -> Vec<Owner> {
        let owners = owners.max(1);
        let mut out: Vec<Owner> = (0..owners).map(|_| Owner::new(self.core.clone())).collect();
        for (i, shard) in self.shards.into_vec().into_iter().enumerate() {
            let owner = CachePadded::into_inner(shard)
                .into_inner()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            out[crate::owner::owner_of_shard(i, owners)].absorb(owner);
        }
        for o in &mut out {
            o.set_timer_budget(timer_budget);
        }
        out
    }

    /// The figures any thread may read without a lock.
    pub fn totals(&self) -> Totals {
        Totals(self.core.clone())
    }

    /// Sets the server-wide limits (they apply to later puts and creates;
    /// nothing stored is dropped when they shrink).
    pub fn set_limits(&self, limits: EngineLimits) {
        self.core.budget.set_limits(limits);
    }

    /// The limits in force.
    pub fn limits(&self) -> EngineLimits {
        self.core.budget.limits()
    }

    /// Bytes held by the stored messages (payloads, attributes, the
    /// engine's bookkeeping for each, dead-letter records, channels).
    pub fn stored_bytes(&self) -> u64 {
        self.core.budget.stored_bytes()
    }

    /// Bytes counted against [`EngineLimits::max_stored_bytes`]: what is
    /// stored and the room shards took ahead for their next messages
    /// (at most 2 MiB a shard, none near the limit).
    pub fn reserved_bytes(&self) -> u64 {
        self.core.budget.reserved_bytes()
    }

    /// Queues that exist.
    pub fn queue_count(&self) -> u64 {
        self.core.budget.queues()
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
        self.core.shard_of(name)
    }

    /// The clock's time.
    pub fn now_ms(&self) -> u64 {
        self.core.clock.now_ms()
    }

    fn lock(&self, index: usize) -> MutexGuard<'_, Owner> {
        // A panic while a shard was held is a bug; its state is still the
        // best there is, so keep serving rather than poison every later call.
        self.shards[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` on the owner of `name`'s shard with its time brought to
    /// the clock's, then hands on what it produced.
    fn on_shard<R>(&self, name: &str, f: impl FnOnce(&mut Owner) -> R) -> R {
        let (result, completions, transit) = {
            let mut owner = self.lock(self.shard_of(name));
            let result = f(&mut owner);
            if owner.has_output() {
                (result, owner.take_completions(), owner.take_transit())
            } else {
                return result;
            }
        };
        self.hand_on(completions, transit);
        result
    }

    /// Delivers dead letters to their shards in the order they were
    /// dead-lettered, across all shards; one a full target refuses goes
    /// back to its source's DLQ before the next is delivered. Then
    /// completes parked receives.
    fn hand_on(&self, mut completions: Vec<Completion>, mut transit: Vec<Transit>) {
        transit.sort_by(Transit::delivery_order);
        for t in transit {
            let mut pending = vec![t];
            while let Some(t) = pending.pop() {
                let mut owner = self.lock(t.shard(self.shards.len()));
                owner.accept(t);
                completions.extend(owner.take_completions());
                pending.extend(owner.take_transit());
            }
        }
        for c in completions {
            // The engine parks only with a notify.
            if let Wake::Call(notify) = c.wake {
                notify(c.result);
            }
        }
    }

    /// Advances every shard to the clock's time: leases end, delays and
    /// schedules come due, messages expire, long polls time out. Returns
    /// the earliest time at which there will be more to do.
    pub fn tick(&self) -> Option<u64> {
        let mut completions = Vec::new();
        let mut transit = Vec::new();
        let mut next: Option<u64> = None;
        for i in 0..self.shards.len() {
            let mut owner = self.lock(i);
            owner.advance(usize::MAX);
            completions.extend(owner.take_completions());
            transit.extend(owner.take_transit());
            if let Some(d) = owner.next_deadline() {
                next = Some(next.map_or(d, |n| n.min(d)));
            }
        }
        self.hand_on(completions, transit);
        next
    }

    /// Installs an event sink on one shard (see [`crate::event`]).
    pub fn set_journal(&self, shard: usize, sink: Option<Box<dyn EventSink>>) {
        self.lock(shard).set_journal(shard, sink);
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
        let guards: Vec<MutexGuard<'_, Owner>> =
            (0..self.shards.len()).map(|i| self.lock(i)).collect();
        if self.core.in_transit.load(Ordering::Acquire) != 0 {
            return None;
        }
        during();
        Some(EngineImage {
            next_queue_id: self.core.next_queue_id.load(Ordering::Acquire),
            queues: guards.iter().flat_map(|g| g.export()).collect(),
        })
    }

    /// Runs `f` with every shard held (in order), so none changes meanwhile.
    pub fn with_every_shard_held(&self, f: &mut dyn FnMut()) {
        let _guards: Vec<MutexGuard<'_, Owner>> =
            (0..self.shards.len()).map(|i| self.lock(i)).collect();
        f();
    }

    /// The next piece of the state (see [`Owner::export_piece`]): shard by
    /// shard, each held only while its piece is taken, so the engine keeps
    /// serving between pieces. The cursor is done after the last shard.
    pub fn export_piece(
        &self,
        cursor: &mut crate::event::ExportCursor,
        max_messages: usize,
        max_bytes: u64,
    ) -> Vec<crate::event::ImagePart> {
        let mut out = Vec::new();
        if cursor.shard < self.shards.len() {
            self.lock(cursor.shard)
                .export_piece(cursor, max_messages, max_bytes, &mut out);
        }
        cursor.done = cursor.shard >= self.shards.len();
        out
    }

    /// Restores saved queues and messages into this engine, which must not
    /// have them already (`queue_exists`). Queue ids are kept, so message
    /// ids stay what they were; new queues get ids above every restored
    /// one. Leases are not restored: every message is visible, delayed or
    /// deferred. Nothing is refused for the limits.
    pub fn restore(&self, mut image: EngineImage) -> Result<(), Error> {
        // A restart ends every lease: the messages are visible again.
        for q in &mut image.queues {
            for m in &mut q.messages {
                m.lease_until_ms = 0;
            }
        }
        self.restore_leased(image)
    }

    /// Sets the id space of the message ids the engine gives (the top 32
    /// bits of a [`MessageId`], 0 unless set): each partition of a cluster
    /// has its own, so that two partitions' messages never share an id
    /// (their queue ids are numbered apart). Before it serves.
    pub fn set_id_space(&self, space: u32) {
        for i in 0..self.shards.len() {
            self.lock(i).shard_mut(i).set_id_space(space);
        }
    }

    /// [`Engine::restore`], keeping leases: a message whose
    /// `lease_until_ms` is still to come is in flight until then, its
    /// delivery count as saved, and a receipt naming it by sequence number
    /// ([`ReceiptKey::by_sequence`]) with that count ends or changes its
    /// lease here (what a cluster's new leader does); one whose lease ran
    /// out with no record of its end waits for its queue's retry policy's
    /// delay from that end, as the engine that gave the lease would have
    /// made it wait.
    pub fn restore_leased(&self, image: EngineImage) -> Result<(), Error> {
        self.core
            .next_queue_id
            .fetch_max(image.next_queue_id, Ordering::AcqRel);
        // Every shard's time first: restoring must not run a timer (an
        // expiry would be an event no log is listening to yet). Messages
        // already due run at the first call after.
        for i in 0..self.shards.len() {
            self.lock(i).advance(usize::MAX);
        }
        for image in image.queues {
            let id = image.id;
            self.lock(self.shard_of(&image.name)).restore_queue(image)?;
            self.core
                .next_queue_id
                .fetch_max(id.saturating_add(1), Ordering::AcqRel);
        }
        Ok(())
    }

    fn check_target(&self, target: Option<&String>) -> Result<(), Error> {
        if let Some(target) = target {
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
        crate::owner::precheck_create(name, &settings)?;
        self.check_target(settings.dead_letter_target.as_ref())?;
        self.on_shard(name, |o| o.create_queue(name, settings))
    }

    /// A queue's settings.
    pub fn queue_settings(&self, name: &str) -> Result<QueueSettings, Error> {
        self.on_shard(name, |o| o.queue_settings(name))
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
        precheck_update(name, update)?;
        if let Some(target) = &update.dead_letter_target {
            self.check_target(target.as_ref())?;
        }
        self.on_shard(name, |o| o.update_queue(name, update))
    }

    /// Pauses a queue's receiving, sending or both (`halves`), as Service
    /// Bus's entity status does: while receiving is paused its receives
    /// find nothing (those that wait, wait, and are served on the resume
    /// or answered empty at their wait's end) and a receive-deferred is
    /// refused `queue_paused`; while sending is paused its puts are
    /// refused `queue_paused`. Leases in flight go on (delete, extend,
    /// release, dead-letter); the DLQ, redrives, moves and dead letters
    /// arriving from another queue are not paused. Kept across restarts.
    /// Answers what is paused now.
    pub fn pause(&self, name: &str, halves: Pause) -> Result<Pause, Error> {
        self.on_shard(name, |o| o.set_paused(name, halves, true))
    }

    /// Resumes what [`Engine::pause`] paused (the halves `halves` names);
    /// answers what is paused now.
    pub fn resume(&self, name: &str, halves: Pause) -> Result<Pause, Error> {
        self.on_shard(name, |o| o.set_paused(name, halves, false))
    }

    /// Queue names starting with `prefix`, sorted (every one of them: for
    /// a bounded answer use [`Engine::list_queues_page`]).
    pub fn list_queues(&self, prefix: &str) -> Vec<String> {
        let mut names: Vec<String> = (0..self.shards.len())
            .flat_map(|i| self.lock(i).list_queues(prefix, "", usize::MAX))
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
        let names: Vec<String> = (0..self.shards.len())
            .flat_map(|i| self.lock(i).list_queues(prefix, after, limit + 1))
            .collect();
        page_of(names, limit)
    }

    /// Deletes a queue and everything in it.
    pub fn delete_queue(&self, name: &str) -> Result<(), Error> {
        self.on_shard(name, |o| o.delete_queue(name))
    }

    /// Removes every message of a queue, or of its DLQ.
    pub fn purge(&self, addr: Address<'_>) -> Result<(), Error> {
        self.on_shard(addr.queue, |o| o.purge(addr))
    }

    /// A queue's stats.
    pub fn stats(&self, name: &str) -> Result<QueueStats, Error> {
        self.on_shard(name, |o| o.stats(name))
    }

    // ----- messages -----------------------------------------------------------

    /// Puts 1–20 messages; each entry answers alone.
    pub fn put(
        &self,
        name: &str,
        batch: Vec<NewMessage>,
    ) -> Result<Vec<EntryResult<PutReceipt>>, Error> {
        self.on_shard(name, |o| o.put(name, batch))
    }

    /// Cancels a delayed or scheduled message by sequence number.
    pub fn cancel_scheduled(&self, name: &str, seq: u64) -> Result<(), Error> {
        self.on_shard(name, |o| o.cancel_scheduled(name, seq))
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
        self.on_shard(addr.queue, |o| {
            o.receive(addr, opts, Some(Wake::Call(Box::new(notify))))
        })
    }

    /// Receives what is visible now, never waiting.
    pub fn receive_now(
        &self,
        addr: Address<'_>,
        opts: &ReceiveOptions,
    ) -> Result<Vec<Message>, Error> {
        match self.on_shard(addr.queue, |o| o.receive(addr, opts, None))? {
            Received::Ready(messages) => Ok(messages),
            Received::Parked(_) => unreachable!("no wake, no parking"),
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
        self.on_shard(addr.queue, |o| o.update_visibility(addr, changes))
    }

    /// Updates a leased message: its payload replaced when one is given
    /// (within the queue's limits), its lease renewed to end `timeout_ms`
    /// from now under a new receipt, the old one stale; 0 releases it
    /// (see [`crate::Shard::update_message`]).
    pub fn update_message(
        &self,
        addr: Address<'_>,
        receipt: &Receipt,
        payload: Option<&[u8]>,
        timeout_ms: u64,
    ) -> Result<MessageUpdate, Error> {
        self.on_shard(addr.queue, |o| {
            o.update_message(addr, receipt, payload, timeout_ms)
        })
    }

    /// Ends 1–20 leases as failed with the consumer's reason and
    /// description, kept in each message's attempt history (see
    /// [`crate::Shard::release`]); answers each message's next visible
    /// time.
    pub fn release(
        &self,
        addr: Address<'_>,
        receipts: &[Receipt],
        reason: &str,
        description: &str,
    ) -> Result<Vec<EntryResult<u64>>, Error> {
        self.on_shard(addr.queue, |o| {
            o.release(addr, receipts, reason, description)
        })
    }

    /// Deletes 1–20 messages by receipt.
    pub fn delete(
        &self,
        addr: Address<'_>,
        receipts: &[Receipt],
    ) -> Result<Vec<EntryResult<()>>, Error> {
        self.on_shard(addr.queue, |o| o.delete(addr, receipts))
    }

    /// Defers a leased message.
    pub fn defer(&self, name: &str, receipt: &Receipt) -> Result<(), Error> {
        self.on_shard(name, |o| o.defer(name, receipt))
    }

    /// Ends the leases of messages received from queue `name` (or its DLQ)
    /// whose answer could not reach its consumer (a server's connection
    /// closed before the answer was written): each lease still live ends,
    /// the message visible again at once, its delivery not counted.
    pub fn abandon(&self, name: &str, receipts: &[Receipt]) {
        let shard = self.core.shard_of(name);
        self.on_shard(name, |o| o.abandon(shard, receipts));
    }

    /// Dead-letters a leased message with a reason and description.
    pub fn dead_letter(
        &self,
        name: &str,
        receipt: &Receipt,
        reason: &str,
        description: &str,
    ) -> Result<(), Error> {
        self.on_shard(name, |o| o.dead_letter(name, receipt, reason, description))
    }

    /// Takes 1–20 deferred messages by sequence number.
    pub fn receive_deferred(
        &self,
        name: &str,
        seqs: &[u64],
        visibility_ms: Option<u64>,
    ) -> Result<Vec<EntryResult<Message>>, Error> {
        self.on_shard(name, |o| o.receive_deferred(name, seqs, visibility_ms))
    }

    /// Up to `max` (1–100) messages from sequence number `from`, unchanged.
    pub fn peek(&self, addr: Address<'_>, from: u64, max: u32) -> Result<Vec<Message>, Error> {
        self.on_shard(addr.queue, |o| o.peek(addr, from, max))
    }

    /// Deletes message `seq` of the queue or its DLQ whatever its state (an
    /// operator's delete: a lease on it ends and its receipt is refused).
    pub fn delete_seq(&self, addr: Address<'_>, seq: u64) -> Result<(), Error> {
        self.on_shard(addr.queue, |o| o.delete_seq(addr, seq))
    }

    /// Dead-letters message `seq` of the queue whatever its state, with an
    /// operator's reason and description (answered as a consumer's).
    pub fn dead_letter_seq(
        &self,
        name: &str,
        seq: u64,
        reason: &str,
        description: &str,
    ) -> Result<(), Error> {
        self.on_shard(name, |o| o.dead_letter_seq(name, seq, reason, description))
    }

    /// The queue's channels with messages ready (the default channel
    /// first on the first page, then named ones in name order after
    /// `after`), at most `limit` (1–100), and the next page's `after`.
    pub fn channels(
        &self,
        name: &str,
        after: &str,
        limit: usize,
    ) -> Result<(Vec<ChannelBacklog>, Option<String>), Error> {
        self.on_shard(name, |o| o.channels(name, after, limit))
    }

    /// Moves dead letters back to their queue: all or `max`, optionally at
    /// most `rate_per_second`.
    pub fn redrive(
        &self,
        name: &str,
        max: Option<u64>,
        rate_per_second: Option<u32>,
    ) -> Result<RedriveOutcome, Error> {
        self.on_shard(name, |o| o.redrive(name, max, rate_per_second, None))
    }

    /// [`Engine::redrive`] of only the dead letters `filter` takes (docs/
    /// engine.md "Filtered redrive and move"): a cursor goes through the
    /// DLQ once; `scheduled` counts every visible dead letter left (at
    /// most `max`), matching or not.
    pub fn redrive_where(
        &self,
        name: &str,
        max: Option<u64>,
        rate_per_second: Option<u32>,
        filter: MoveFilter,
    ) -> Result<RedriveOutcome, Error> {
        self.on_shard(name, |o| {
            o.redrive(name, max, rate_per_second, Some(filter))
        })
    }

    /// Starts moving the visible messages of queue `name` (another queue's
    /// dead-letter target, say) out: each to `to`, or back to the queue it
    /// was dead-lettered from; `rate_per_second` a second (1..=10 000, all
    /// of that now), up to `max`, messages put after the start left. A
    /// task running on the queue (a move or a redrive) is cancelled. A
    /// destination that refuses a message (gone, full) fails the task and
    /// the message stays.
    pub fn start_move(
        &self,
        name: &str,
        to: Option<String>,
        max: Option<u64>,
        rate_per_second: Option<u32>,
    ) -> Result<MoveTask, Error> {
        self.on_shard(name, |o| o.start_move(name, to, max, rate_per_second, None))
    }

    /// [`Engine::start_move`] of only the messages `filter` takes.
    pub fn start_move_where(
        &self,
        name: &str,
        to: Option<String>,
        max: Option<u64>,
        rate_per_second: Option<u32>,
        filter: MoveFilter,
    ) -> Result<MoveTask, Error> {
        self.on_shard(name, |o| {
            o.start_move(name, to, max, rate_per_second, Some(filter))
        })
    }

    /// What a move out of queue `name` (its DLQ: a redrive) with `filter`
    /// would take now, from sequence number `from_seq`: how many visible
    /// messages in a look of at most [`crate::PREVIEW_LOOK_MAX`] index
    /// entries, the first [`crate::PREVIEW_SHOW_MAX`] of them, and where
    /// to go on when the look stopped before the end. `back_to_source`: a
    /// move with no destination, which leaves messages with no record of
    /// a source queue. Moves nothing.
    pub fn preview_move(
        &self,
        name: &str,
        dlq: bool,
        back_to_source: bool,
        filter: &MoveFilter,
        from_seq: u64,
    ) -> Result<MovePreview, Error> {
        self.on_shard(name, |o| {
            o.preview_move(name, dlq, back_to_source, filter, from_seq)
        })
    }

    /// Cancels move task `id` of queue `name` if it runs; answers it.
    pub fn cancel_move(&self, name: &str, id: u64) -> Result<MoveTask, Error> {
        self.on_shard(name, |o| o.cancel_move(name, id))
    }

    /// The move tasks (redrives included) queue `name` keeps, oldest first.
    pub fn moves(&self, name: &str) -> Result<Vec<MoveTask>, Error> {
        self.on_shard(name, |o| o.moves(name))
    }
}

/// Names gathered from several shards (each up to `limit + 1`) as one
/// page: the first `limit` in order, and the `after` of the next page when
/// more remain.
pub fn page_of(mut names: Vec<String>, limit: usize) -> (Vec<String>, Option<String>) {
    names.sort_unstable();
    let more = names.len() > limit;
    names.truncate(limit);
    let next = if more { names.last().cloned() } else { None };
    (names, next)
}
