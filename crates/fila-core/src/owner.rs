//! `Owner`: the shards one thread owns, and the typed API of SPEC §1–3 on
//! them, with no lock.
//!
//! A server gives each event loop an `Owner` holding the shards that loop
//! owns; the loop runs every request for a queue of those shards itself and
//! is the only thread that ever touches them. The in-process [`Engine`]
//! keeps one `Owner` (of one shard) behind a mutex per shard and runs the
//! same calls.
//!
//! What a call produced for others is left for the caller to hand on:
//! parked receives it completed ([`Owner::take_completions`]: a `Notify`
//! to call outside any lock, or a completion reported under its `WaitId`) and dead letters bound for a queue of a
//! shard this owner does not hold ([`Owner::take_transit`]). Dead letters
//! between two shards of the same owner are delivered at once.
//!
//! [`Engine`]: crate::Engine

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::budget::{Budget, EngineLimits};
use crate::clock::Clock;
use crate::error::Error;
use crate::event::{EventSink, ExportCursor, ImagePart, QueueImage};
use crate::limits::BATCH_LEN_MAX;
use crate::receipt::{Receipt, ReceiptKey};
use crate::shard::{Completion, Outbound, Received, Shard, WaitId, Wake};
use crate::types::*;

mod moves;

/// Far timers a shard moves down its wheel ahead of their time in one
/// [`Owner::advance`] (23–34 µs a call at the median with 2 000 000 timers
/// pending, docs/benchmarks.md: a million take some 1 000 turns of the
/// 65 s they have).
pub const EARLY_MOVES_PER_TURN: usize = 1_024;

/// What every owner of one engine shares: the budget, the clock, queue
/// ids, the count of dead letters between shards. All atomics.
pub(crate) struct Core {
    pub(crate) budget: Arc<Budget>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) next_queue_id: AtomicU32,
    /// Dead letters taken out of their source shard and not yet in their
    /// target's (or back in their source's DLQ).
    pub(crate) in_transit: AtomicU64,
    pub(crate) shards: usize,
}

impl Core {
    pub(crate) fn shard_of(&self, name: &str) -> usize {
        shard_of(name, self.shards)
    }
}

/// The shard of `shards` that owns the queue `name` (FNV-1a of the name).
pub fn shard_of(name: &str, shards: usize) -> usize {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for b in name.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    (h % shards.max(1) as u64) as usize
}

/// Which of `owners` owners holds shard `shard` when an engine is split
/// ([`crate::Engine::into_owners`]): the one place that says it, so a
/// server routing requests and the split that gave out the shards agree.
pub fn owner_of_shard(shard: usize, owners: usize) -> usize {
    shard % owners.max(1)
}

/// The engine-wide figures any thread may read (all atomics): what a
/// metrics scrape or a server-stats answer shows without asking an owner.
#[derive(Clone)]
pub struct Totals(pub(crate) Arc<Core>);

impl std::fmt::Debug for Totals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Totals")
            .field("shards", &self.0.shards)
            .finish_non_exhaustive()
    }
}

impl Totals {
    /// Bytes held by the stored messages (payloads, attributes, the
    /// engine's bookkeeping for each, dead-letter records, channels).
    pub fn stored_bytes(&self) -> u64 {
        self.0.budget.stored_bytes()
    }
    /// Bytes counted against the server's limit: what is stored and the
    /// room shards took ahead for their next messages.
    pub fn reserved_bytes(&self) -> u64 {
        self.0.budget.reserved_bytes()
    }
    /// Queues that exist.
    pub fn queue_count(&self) -> u64 {
        self.0.budget.queues()
    }
    /// The limits in force.
    pub fn limits(&self) -> EngineLimits {
        self.0.budget.limits()
    }
    /// How many shards.
    pub fn shard_count(&self) -> usize {
        self.0.shards
    }
    /// The shard that owns the queue `name`.
    pub fn shard_of(&self, name: &str) -> usize {
        self.0.shard_of(name)
    }
    /// The clock's time.
    pub fn now_ms(&self) -> u64 {
        self.0.clock.now_ms()
    }
    /// Sets whether the log's disk takes more messages: puts are refused
    /// (`resource_exhausted`) while it does not.
    pub fn set_disk(&self, state: crate::budget::DiskState) {
        self.0.budget.set_disk(state);
    }
    /// Whether the log's disk takes more messages.
    pub fn disk(&self) -> crate::budget::DiskState {
        self.0.budget.disk()
    }
    /// Dead letters between shards right now (a consistent image can be
    /// taken only when this is 0 with every owner stopped).
    pub fn in_transit(&self) -> u64 {
        self.0.in_transit.load(Ordering::Acquire)
    }
    /// The id the next new queue gets.
    pub fn next_queue_id(&self) -> u32 {
        self.0.next_queue_id.load(Ordering::Acquire)
    }
}

/// A dead letter on its way between shards: to its target queue, or back
/// to its source's own DLQ when the target was gone or full.
pub struct Transit {
    pub(crate) out: Outbound,
    pub(crate) bounce: bool,
}

impl std::fmt::Debug for Transit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transit")
            .field("bounce", &self.bounce)
            .finish_non_exhaustive()
    }
}

impl Transit {
    /// Orders dead letters on their way as they were dead-lettered: by
    /// time, then source queue, then the source's sequence.
    pub(crate) fn delivery_order(a: &Transit, b: &Transit) -> std::cmp::Ordering {
        Outbound::delivery_order(&a.out, &b.out)
    }

    /// The shard it is bound for, of `shards`.
    pub fn shard(&self, shards: usize) -> usize {
        if self.bounce {
            shard_of(&self.out.source, shards)
        } else {
            shard_of(&self.out.target, shards)
        }
    }
}

type Completions = Vec<Completion>;

/// A batch's length is 1..=[`BATCH_LEN_MAX`], else `invalid_argument` on
/// `field`.
pub fn check_batch(field: &'static str, len: usize) -> Result<(), Error> {
    if len == 0 || len > BATCH_LEN_MAX {
        return Err(Error::invalid(
            field,
            format!("must hold 1..={BATCH_LEN_MAX} entries (got {len})"),
        ));
    }
    Ok(())
}

/// The checks of a create that need no shard: the name, the settings, a
/// dead-letter target other than the queue itself. Whether the target
/// exists is the caller's to check, on the target's shard.
pub fn precheck_create(name: &str, settings: &QueueSettings) -> Result<(), Error> {
    validate_queue_name("name", name)?;
    settings.validate()?;
    check_self_target(name, settings.dead_letter_target.as_deref())
}

/// [`precheck_create`] for an update: the target it names, if any, is
/// valid and not the queue itself.
pub fn precheck_update(name: &str, update: &SettingsUpdate) -> Result<(), Error> {
    if let Some(Some(target)) = &update.dead_letter_target {
        let probe = QueueSettings {
            dead_letter_target: Some(target.clone()),
            ..QueueSettings::default()
        };
        probe.validate()?;
        check_self_target(name, Some(target))?;
    }
    Ok(())
}

fn check_self_target(name: &str, target: Option<&str>) -> Result<(), Error> {
    if target == Some(name) {
        return Err(Error::invalid(
            "dead_letter_target",
            "must name another queue (leave it unset for the built-in DLQ)",
        ));
    }
    Ok(())
}

/// The shards one thread owns (see the module docs).
pub struct Owner {
    core: Arc<Core>,
    /// By shard index; `Some` for the shards this owner holds.
    shards: Vec<Option<Box<Shard>>>,
    completions: Completions,
    transit: Vec<Transit>,
    /// Changes the calls here logged ([`Owner::changes`]).
    changes: u64,
    /// Hand every dead letter out through [`Owner::take_transit`], even
    /// one bound for a shard held here: the in-process [`crate::Engine`]
    /// orders them across all its owners (as the model does).
    hand_out_all: bool,
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owner")
            .field("shards", &self.owned().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Owner {
    pub(crate) fn new(core: Arc<Core>) -> Owner {
        Owner {
            shards: (0..core.shards).map(|_| None).collect(),
            core,
            completions: Vec::new(),
            transit: Vec::new(),
            changes: 0,
            hand_out_all: false,
        }
    }

    /// A new empty shard `index` held here.
    pub(crate) fn with_shard(core: Arc<Core>, index: usize, key: ReceiptKey) -> Owner {
        let mut owner = Owner::new(core);
        owner.hand_out_all = true;
        let now = owner.core.clock.now_ms();
        owner.shards[index] = Some(Box::new(Shard::new(
            index as u16,
            now,
            key,
            owner.core.budget.clone(),
        )));
        owner
    }

    /// Takes over every shard `other` holds.
    pub(crate) fn absorb(&mut self, mut other: Owner) {
        for (mine, theirs) in self.shards.iter_mut().zip(other.shards.iter_mut()) {
            if let Some(s) = theirs.take() {
                *mine = Some(s);
            }
        }
        self.completions.append(&mut other.completions);
        self.transit.append(&mut other.transit);
    }

    /// The indexes of the shards held here.
    pub fn owned(&self) -> impl Iterator<Item = usize> + '_ {
        self.shards
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|_| i))
    }

    /// Whether shard `index` is held here.
    pub fn owns(&self, index: usize) -> bool {
        self.shards.get(index).is_some_and(|s| s.is_some())
    }

    /// Figures every thread may read.
    pub fn totals(&self) -> Totals {
        Totals(self.core.clone())
    }

    /// Sets how many timers an operation may run before it starts, on
    /// every shard held (see [`Shard::set_timer_budget`]).
    pub fn set_timer_budget(&mut self, budget: usize) {
        for s in self.shards.iter_mut().flatten() {
            s.set_timer_budget(budget);
        }
    }

    pub(crate) fn shard_mut(&mut self, index: usize) -> &mut Shard {
        self.shards[index]
            .as_deref_mut()
            .unwrap_or_else(|| panic!("shard {index} is not held by this owner"))
    }

    pub(crate) fn shard(&self, index: usize) -> &Shard {
        self.shards[index]
            .as_deref()
            .unwrap_or_else(|| panic!("shard {index} is not held by this owner"))
    }

    /// Runs `f` on the shard that owns `name` (which must be held here),
    /// then collects what it produced for others.
    fn on<R>(&mut self, name: &str, f: impl FnOnce(&mut Shard, u64) -> R) -> R {
        let index = self.core.shard_of(name);
        let now = self.core.clock.now_ms();
        let shard = self.shard_mut(index);
        let before = shard.changes();
        let result = f(shard, now);
        let logged = shard.changes() - before;
        self.changes += logged;
        self.collect(index, now);
        result
    }

    /// Changes the calls made here logged so far (dead letters delivered
    /// here included; timers run by [`Owner::advance`] not), deliveries
    /// aside: a call that moved it made a change its answer acknowledges,
    /// and its answer waits for the log exactly then. Nothing counts
    /// without a journal.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Moves a shard's completions and outbound dead letters out; delivers
    /// those whose target is held here.
    fn collect(&mut self, index: usize, now: u64) {
        let shard = self.shard_mut(index);
        shard.publish_journal();
        if !shard.has_output() {
            return;
        }
        let mut completions = shard.take_completions();
        let mut outbox = shard.take_outbox();
        self.completions.append(&mut completions);
        if outbox.is_empty() {
            return;
        }
        // A fixed order, whatever the order the timers ran in.
        outbox.sort_by(Outbound::delivery_order);
        self.core
            .in_transit
            .fetch_add(outbox.len() as u64, Ordering::AcqRel);
        for out in outbox {
            let t = Transit { out, bounce: false };
            if self.hand_out_all {
                self.transit.push(t);
            } else {
                self.route(t, now);
            }
        }
    }

    /// Delivers a dead letter in transit if its shard is held here, else
    /// keeps it for [`Owner::take_transit`].
    fn route(&mut self, t: Transit, now: u64) {
        let index = t.shard(self.core.shards);
        if !self.owns(index) {
            self.transit.push(t);
            return;
        }
        let shard = self.shard_mut(index);
        let before = shard.changes();
        let bounced = if t.bounce {
            shard.accept_bounce(t.out, now);
            None
        } else {
            shard.accept_forward(t.out, now).err()
        };
        shard.publish_journal();
        let logged = shard.changes() - before;
        let mut completions = shard.take_completions();
        self.changes += logged;
        self.completions.append(&mut completions);
        match bounced {
            Some(out) => self.route(Transit { out, bounce: true }, now),
            None => {
                self.core.in_transit.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Accepts a dead letter another owner handed over (its shard must be
    /// held here): into its target, or back into its source's DLQ.
    pub fn accept(&mut self, t: Transit) {
        let now = self.core.clock.now_ms();
        self.route(t, now);
    }

    /// Parked receives completed since the last call, with their answers:
    /// call each [`Wake::Call`] (outside any lock), deliver each
    /// [`Wake::Report`] to whoever parked it.
    pub fn take_completions(&mut self) -> Vec<Completion> {
        std::mem::take(&mut self.completions)
    }

    /// Dead letters bound for shards held elsewhere: hand each to the
    /// owner of [`Transit::shard`], which calls [`Owner::accept`].
    pub fn take_transit(&mut self) -> Vec<Transit> {
        std::mem::take(&mut self.transit)
    }

    /// Whether completions or dead letters in transit wait to be taken.
    pub fn has_output(&self) -> bool {
        !self.completions.is_empty() || !self.transit.is_empty()
    }

    /// Runs the timers due on every shard held, at most `budget` a shard
    /// (an instant is never split); then a shard that caught up moves up to
    /// [`EARLY_MOVES_PER_TURN`] of its far timers down ahead of their time;
    /// and sweeps out up to `budget` messages of deleted queues a shard;
    /// answers whether every shard caught up.
    pub fn advance(&mut self, budget: usize) -> bool {
        let now = self.core.clock.now_ms();
        let mut caught_up = true;
        for index in 0..self.shards.len() {
            if let Some(s) = self.shards[index].as_deref_mut() {
                let timers_run = s.advance_within(now, budget);
                if timers_run {
                    s.move_timers_ahead(EARLY_MOVES_PER_TURN);
                }
                caught_up &= timers_run;
                caught_up &= s.sweep(budget);
                self.collect(index, now);
            }
        }
        caught_up
    }

    /// Timers the wheels of the shards held here have moved between their
    /// slots so far ([`Shard::timer_moves`]).
    #[doc(hidden)]
    pub fn timer_moves(&self) -> u64 {
        self.shards.iter().flatten().map(|s| s.timer_moves()).sum()
    }

    /// The earliest time at which a shard held here has timers to run (or
    /// far timers to move down ahead of their time).
    pub fn next_deadline(&self) -> Option<u64> {
        self.shards
            .iter()
            .flatten()
            .filter_map(|s| s.next_deadline())
            .min()
    }

    /// The earliest time at which a shard held here has a timer due (a
    /// lease, a delay, an expiry or a wait that ends), a lower bound —
    /// [`Owner::next_deadline`] without the moves of far timers ahead of
    /// their time, which make nothing happen: when a message may next
    /// become visible without a request.
    pub fn next_timer(&self) -> Option<u64> {
        self.shards
            .iter()
            .flatten()
            .filter_map(|s| s.next_timer())
            .min()
    }

    /// Installs an event sink on shard `index` (held here).
    pub fn set_journal(&mut self, index: usize, sink: Option<Box<dyn EventSink>>) {
        self.shard_mut(index).set_journal(sink);
    }

    /// Message slots allocated on the shards held here, live or free.
    pub fn message_slots(&self) -> usize {
        self.shards
            .iter()
            .flatten()
            .map(|s| s.message_slots())
            .sum()
    }

    /// [`Shard::check_invariants`] on every shard held here.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        self.shards
            .iter()
            .flatten()
            .try_for_each(|s| s.check_invariants())
    }

    /// The queues of the shards held here, with their messages.
    pub fn export(&self) -> Vec<QueueImage> {
        self.shards
            .iter()
            .flatten()
            .flat_map(|s| s.export())
            .collect()
    }

    /// The next piece of the state of shard `cursor.shard` (held here),
    /// appended to `out` (see [`Shard::export_piece`]); marks the cursor
    /// done past the last shard.
    pub fn export_piece(
        &self,
        cursor: &mut ExportCursor,
        max_messages: usize,
        max_bytes: u64,
        out: &mut Vec<ImagePart>,
    ) {
        if cursor.shard < self.shards.len() {
            self.shard(cursor.shard)
                .export_piece(cursor, max_messages, max_bytes, out);
        }
        cursor.done = cursor.shard >= self.shards.len();
    }

    pub(crate) fn restore_queue(&mut self, image: QueueImage) -> Result<(), Error> {
        let index = self.core.shard_of(&image.name);
        self.shard_mut(index).restore_queue(image)
    }

    // ----- queues -------------------------------------------------------------

    /// Whether the queue `name` exists (its shard must be held here).
    pub fn has_queue(&self, name: &str) -> bool {
        self.shard(self.core.shard_of(name)).has_queue(name)
    }

    /// Creates a queue (see [`crate::Engine::create_queue`]). Whether a
    /// dead-letter target exists is not checked here: it lives on its own
    /// shard.
    pub fn create_queue(&mut self, name: &str, settings: QueueSettings) -> Result<bool, Error> {
        precheck_create(name, &settings)?;
        let core = self.core.clone();
        self.on(name, |s, now| {
            s.catch_up(now);
            s.create_queue(name, settings, || {
                core.next_queue_id.fetch_add(1, Ordering::Relaxed)
            })
        })
    }

    /// A queue's settings.
    pub fn queue_settings(&mut self, name: &str) -> Result<QueueSettings, Error> {
        self.on(name, |s, _| s.settings(name))
    }

    /// Changes some of a queue's settings (see
    /// [`crate::Engine::update_queue`]; the target's existence is not
    /// checked here).
    pub fn update_queue(
        &mut self,
        name: &str,
        update: &SettingsUpdate,
    ) -> Result<QueueSettings, Error> {
        precheck_update(name, update)?;
        self.on(name, |s, now| {
            s.catch_up(now);
            s.update_settings(name, update)
        })
    }

    /// Pauses (`paused`) or resumes the halves of a queue that `halves`
    /// names (see [`crate::Engine::pause`]); answers what is paused now.
    pub fn set_paused(&mut self, name: &str, halves: Pause, paused: bool) -> Result<Pause, Error> {
        if halves.is_none() {
            return Err(Error::invalid("pause", "names receiving, sending or both"));
        }
        self.on(name, |s, now| {
            s.catch_up(now);
            s.set_paused(name, halves, paused)
        })
    }

    /// Up to `limit` names starting with `prefix` after `after`, sorted, of
    /// the shards held here.
    pub fn list_queues(&self, prefix: &str, after: &str, limit: usize) -> Vec<String> {
        let mut names: Vec<String> = self
            .shards
            .iter()
            .flatten()
            .flat_map(|s| s.list(prefix, after, limit))
            .collect();
        names.sort_unstable();
        names.truncate(limit);
        names
    }

    /// Deletes a queue and everything in it.
    pub fn delete_queue(&mut self, name: &str) -> Result<(), Error> {
        self.on(name, |s, now| {
            s.catch_up(now);
            s.delete_queue(name)
        })
    }

    /// Removes every message of a queue, or of its DLQ.
    pub fn purge(&mut self, addr: Address<'_>) -> Result<(), Error> {
        self.on(addr.queue, |s, now| {
            s.catch_up(now);
            s.purge(addr)
        })
    }

    /// A queue's stats.
    pub fn stats(&mut self, name: &str) -> Result<QueueStats, Error> {
        self.on(name, |s, now| {
            s.catch_up(now);
            s.stats(name)
        })
    }

    // ----- messages -----------------------------------------------------------

    /// Puts 1–20 messages; each entry answers alone.
    pub fn put(
        &mut self,
        name: &str,
        batch: Vec<NewMessage>,
    ) -> Result<Vec<EntryResult<PutReceipt>>, Error> {
        check_batch("messages", batch.len())?;
        self.on(name, |s, now| s.put(name, batch, now))
    }

    /// Cancels a delayed or scheduled message by sequence number.
    pub fn cancel_scheduled(&mut self, name: &str, seq: u64) -> Result<(), Error> {
        self.on(name, |s, now| s.cancel_scheduled(name, seq, now))
    }

    /// Receives up to `opts.max_messages`; parks (completed later as
    /// `wake` says, see [`Owner::take_completions`]) when none is visible,
    /// a wait applies and `wake` is given.
    pub fn receive(
        &mut self,
        addr: Address<'_>,
        opts: &ReceiveOptions,
        wake: Option<Wake>,
    ) -> Result<Received, Error> {
        self.on(addr.queue, |s, now| s.receive(addr, opts, wake, now))
    }

    /// Forgets a parked receive; it is never completed. Returns whether
    /// it was still parked.
    pub fn cancel_wait(&mut self, id: WaitId) -> bool {
        match self.shards.get_mut(usize::from(id.shard)) {
            Some(Some(s)) => s.cancel_wait(id),
            _ => false,
        }
    }

    /// Changes 1–20 leases' next-visible times; answers each new time.
    pub fn update_visibility(
        &mut self,
        addr: Address<'_>,
        changes: &[VisibilityChange],
    ) -> Result<Vec<EntryResult<u64>>, Error> {
        check_batch("entries", changes.len())?;
        self.on(addr.queue, |s, now| s.update_visibility(addr, changes, now))
    }

    /// Updates a leased message: its payload replaced when one is given,
    /// its lease renewed under a new receipt (see
    /// [`Shard::update_message`]).
    pub fn update_message(
        &mut self,
        addr: Address<'_>,
        receipt: &Receipt,
        payload: Option<&[u8]>,
        timeout_ms: u64,
    ) -> Result<MessageUpdate, Error> {
        self.on(addr.queue, |s, now| {
            s.update_message(addr, receipt, payload, timeout_ms, now)
        })
    }

    /// Ends 1–20 leases as failed with the consumer's reason and
    /// description (see [`Shard::release`]); answers each message's next
    /// visible time.
    pub fn release(
        &mut self,
        addr: Address<'_>,
        receipts: &[Receipt],
        reason: &str,
        description: &str,
    ) -> Result<Vec<EntryResult<u64>>, Error> {
        check_batch("receipts", receipts.len())?;
        self.on(addr.queue, |s, now| {
            s.release(addr, receipts, (reason, description), now)
        })
    }

    /// Deletes 1–20 messages by receipt.
    pub fn delete(
        &mut self,
        addr: Address<'_>,
        receipts: &[Receipt],
    ) -> Result<Vec<EntryResult<()>>, Error> {
        check_batch("receipts", receipts.len())?;
        self.on(addr.queue, |s, now| s.delete(addr, receipts, now))
    }

    /// Ends the leases of an answer that could not be delivered (see
    /// [`Shard::abandon`]); `shard` (held here) is the one their queue is
    /// on.
    pub fn abandon(&mut self, shard: usize, receipts: &[Receipt]) {
        let now = self.core.clock.now_ms();
        self.shard_mut(shard).abandon(receipts, now);
        self.collect(shard, now);
    }

    /// Defers a leased message.
    pub fn defer(&mut self, name: &str, receipt: &Receipt) -> Result<(), Error> {
        self.on(name, |s, now| s.defer(name, receipt, now))
    }

    /// Dead-letters a leased message with a reason and description.
    pub fn dead_letter(
        &mut self,
        name: &str,
        receipt: &Receipt,
        reason: &str,
        description: &str,
    ) -> Result<(), Error> {
        self.on(name, |s, now| {
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
        &mut self,
        name: &str,
        seqs: &[u64],
        visibility_ms: Option<u64>,
    ) -> Result<Vec<EntryResult<Message>>, Error> {
        check_batch("sequence_numbers", seqs.len())?;
        self.on(name, |s, now| {
            s.receive_deferred(name, seqs, visibility_ms, now)
        })
    }

    /// Up to `max` (1–100) messages from sequence number `from`, unchanged.
    pub fn peek(&mut self, addr: Address<'_>, from: u64, max: u32) -> Result<Vec<Message>, Error> {
        self.on(addr.queue, |s, now| s.peek(addr, from, max, now))
    }

    /// Deletes message `seq` whatever its state (see
    /// [`crate::Engine::delete_seq`]).
    pub fn delete_seq(&mut self, addr: Address<'_>, seq: u64) -> Result<(), Error> {
        self.on(addr.queue, |s, now| s.delete_seq(addr, seq, now))
    }

    /// Dead-letters message `seq` whatever its state (see
    /// [`crate::Engine::dead_letter_seq`]).
    pub fn dead_letter_seq(
        &mut self,
        name: &str,
        seq: u64,
        reason: &str,
        description: &str,
    ) -> Result<(), Error> {
        self.on(name, |s, now| {
            s.dead_letter_seq(name, seq, reason.to_owned(), description.to_owned(), now)
        })
    }

    /// A page of a queue's channels (see [`crate::Engine::channels`]).
    pub fn channels(
        &mut self,
        name: &str,
        after: &str,
        limit: usize,
    ) -> Result<(Vec<ChannelBacklog>, Option<String>), Error> {
        self.on(name, |s, now| s.channels(name, after, limit, now))
    }
}
