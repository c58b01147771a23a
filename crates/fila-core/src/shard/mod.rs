//! One shard: the queues that hash to it, their messages, one timing wheel and
//! the parked receives. A shard is plain single-threaded state; its owner
//! (a server's event loop, or the in-process engine's per-shard lock)
//! serializes the calls, and nothing here is shared with another shard.
//!
//! Messages live in one slab of [`Record`]s per shard. A queue is two
//! sub-queues, the queue itself and its DLQ; each has channels, and each
//! channel a [`ReadyRing`] of the handles of its visible messages. A handle is
//! the slot and the low 32 bits of the generation the message had when it
//! became visible, so an entry left behind by a message that expired (or
//! moved) is recognised and skipped when popped instead of being searched for.
//!
//! Time moves only in [`Shard::advance`], one distinct deadline at a time, and
//! the timers due at one instant run in a fixed order (messages before redrive
//! ticks before long-poll deadlines; messages by queue name, sub-queue and
//! sequence number). That order is what the reference model reproduces.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use hashbrown::HashMap;

use crate::budget::{Budget, ShardBudget, CHANNEL_OVERHEAD_BYTES, DEAD_LETTER_OVERHEAD_BYTES};
use crate::error::Error;
use crate::event::{Event, EventSink, MessageView, Spot};
use crate::lease::StateWord;
use crate::lease::{LeaseEnd, MessageState, Refused};
use crate::limits::{PEEK_MAX, REDRIVE_BATCH_MAX};
use crate::payload::{Payload, PayloadPool};
use crate::receipt::{Receipt, ReceiptKey};
use crate::ring::ReadyRing;
use crate::types::*;
use crate::wheel::{TimerKey, TimingWheel};

mod expiry;
mod image;
mod sub;

use expiry::{ExpiryCursor, COVERED};
use sub::{Links, SeqIndex, SubQueue};

const NIL: u32 = u32::MAX;
const MAIN: u32 = 0;
const DLQ: u32 = 1;

/// A sub-queue of this shard: a queue's slot, which half of it (the queue
/// itself or its DLQ) and the half's epoch. A purge starts a new epoch: the
/// records of the old one are gone at once for everything but the sweep
/// that frees them ([`Shard::sweep`]). Queue slots stay below 2^30.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct SubId(u32);

impl SubId {
    /// No sub-queue (a free slot's).
    const NONE: SubId = SubId(NIL);

    fn new(queue: u32, epoch: u32, dlq: bool) -> SubId {
        debug_assert!(queue < 1 << 30 && epoch < 2);
        SubId(queue << 2 | epoch << 1 | u32::from(dlq))
    }
    /// The queue's slot.
    fn queue(self) -> u32 {
        self.0 >> 2
    }
    fn is_dlq(self) -> bool {
        self.0 & 1 == DLQ
    }
    /// Its half's index in the queue's `subs`.
    fn half(self) -> usize {
        (self.0 & 1) as usize
    }
    fn epoch(self) -> u32 {
        (self.0 >> 1) & 1
    }
}

/// What a parked receive is completed with: messages, an empty list when its
/// wait ended, or `queue_deleted`.
pub type Notify = Box<dyn FnOnce(Result<Vec<Message>, Error>) + Send>;

/// Who hears of a parked receive's answer.
pub enum Wake {
    /// Its `Notify` is called with the answer (by whoever takes the
    /// completion: [`crate::Engine`] calls it, outside any lock).
    Call(Notify),
    /// Its answer is handed out as a [`Completion`] under its [`WaitId`]:
    /// the caller keeps what it needs to deliver it (an event loop keeps
    /// the connection and request) under that id.
    Report,
}

/// A parked receive's answer, taken with `take_completions`.
pub struct Completion {
    /// The receive, as its parking named it.
    pub wait: WaitId,
    /// Who hears of it.
    pub wake: Wake,
    /// Messages, an empty list when its wait ended, or `queue_deleted`.
    pub result: Result<Vec<Message>, Error>,
}

/// Names a parked receive, for [`crate::Engine::cancel_wait`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WaitId {
    pub(crate) shard: u16,
    pub(crate) slot: u32,
    pub(crate) stamp: u32,
    pub(crate) reserved: u64,
}

impl WaitId {
    /// The answer bytes this parked receive may be completed with: its
    /// `max_answer_bytes`, lowered to what `max_messages` of its queue's
    /// largest messages could need (0 when it had no limit). A server holds
    /// this much output room for it until the answer comes.
    pub fn reserved_bytes(&self) -> u64 {
        self.reserved
    }

    /// The shard it is parked on.
    pub fn shard(&self) -> usize {
        usize::from(self.shard)
    }
}

/// The answer to a receive.
#[derive(Debug)]
pub enum Received {
    /// Messages now, or an empty list when the receive did not wait.
    Ready(Vec<Message>),
    /// Nothing yet: the receive is parked and completed later (see
    /// [`Wake`]).
    Parked(WaitId),
}

/// Rarely present parts of a message, boxed to keep [`Record`] small.
#[derive(Default)]
struct Extra {
    attributes: Option<Attributes>,
    dead_letter: Option<Arc<DeadLetter>>,
    /// The id it had before it moved between queues.
    id: Option<MessageId>,
    /// Its group, when it was put with a key.
    group: Option<groups::GroupRef>,
    /// Its failed attempts, when its queue keeps them and it failed.
    attempts: Option<Attempts>,
}

/// One message slot.
struct Record {
    /// The payload's buffer (its first `len` bytes); `None` when empty.
    body: Option<Arc<[u8]>>,
    word: StateWord,
    seq: u64,
    /// When it was put (its low [`INSERTED_BITS`] bits, ms since the epoch)
    /// and, in the bits above, when it was first received: seconds after
    /// that, plus one (0: not yet, or not known — a restart forgets it).
    /// Read through [`Record::inserted`] and [`Record::first_received`].
    inserted_at: u64,
    expires_at: u64,
    visible_at: u64,
    extra: Option<Box<Extra>>,
    /// Owning sub-queue.
    q: SubId,
    channel: u32,
    timer: u32,
    /// The payload's length (its low [`LEN_BITS`] bits) and its priority
    /// level less one (the 4 bits above): [`Record::len`],
    /// [`Record::level`].
    len: u32,
}

/// Bits of [`Record::inserted_at`] that hold the put time (until 2109).
const INSERTED_BITS: u32 = 42;
const INSERTED_MASK: u64 = (1 << INSERTED_BITS) - 1;
/// The most seconds after its put a first receive is kept as (48 days,
/// more than the longest retention).
const FIRST_RECEIVE_SECS_MAX: u64 = (1 << (64 - INSERTED_BITS)) - 2;

impl Record {
    /// When it was put.
    fn inserted(&self) -> u64 {
        self.inserted_at & INSERTED_MASK
    }

    /// Sets when it was put (forgetting a first receive).
    fn set_inserted(&mut self, at: u64) {
        self.inserted_at = at & INSERTED_MASK;
    }

    /// When it was first received, to the second after its put.
    fn first_received(&self) -> Option<u64> {
        let stored = self.inserted_at >> INSERTED_BITS;
        (stored != 0).then(|| self.inserted() + (stored - 1) * 1000)
    }

    /// Notes a receive at `now`: the first one is kept.
    fn note_received(&mut self, now: u64) {
        if self.inserted_at >> INSERTED_BITS == 0 {
            let secs = (now.saturating_sub(self.inserted()) / 1000).min(FIRST_RECEIVE_SECS_MAX);
            self.inserted_at |= (secs + 1) << INSERTED_BITS;
        }
    }

    fn empty() -> Record {
        Record {
            body: None,
            len: 0,
            word: StateWord::new(),
            seq: 0,
            inserted_at: 0,
            expires_at: 0,
            visible_at: 0,
            extra: None,
            q: SubId::NONE,
            channel: 0,
            timer: NIL,
        }
    }
}

struct RedriveJob {
    remaining: Option<u64>,
    rate: u32,
    timer: TimerKey,
}

#[derive(Default)]
struct Counters {
    puts: u64,
    deliveries: u64,
    deletes: u64,
    expiries: u64,
    dead_letterings: u64,
    redriven: u64,
    retries: u64,
}

struct Queue {
    id: u32,
    name: Arc<str>,
    settings: QueueSettings,
    times: QueueTimes,
    /// The queue and its DLQ, each in its current epoch.
    subs: [SubQueue; 2],
    /// Each half's current epoch.
    epochs: [u32; 2],
    /// Each half's previous epoch while a purge's sweep frees its records.
    purged: [Option<Box<SubQueue>>; 2],
    next_seq: u64,
    messages: u64,
    bytes: u64,
    counters: Counters,
    redrive: Option<RedriveJob>,
    /// Its move tasks, oldest first: the last ones ended and the one
    /// running (whose timer is `redrive`).
    moves: Vec<MoveTask>,
    /// Deleted: no longer named, its messages swept out a budget at a time
    /// ([`Shard::sweep`]); its slot is free once they are all gone.
    dropping: bool,
    /// The deduplication ids it remembers (none yet: `None`).
    dedup: Option<Box<dedup::DedupTable>>,
}

struct Waiter {
    q: SubId,
    max: u32,
    /// Answer bytes at most.
    budget: u64,
    visibility_ms: u64,
    filter: Option<ChannelFilter>,
    /// Its name, as its parking answered it.
    id: WaitId,
    wake: Wake,
    /// `None` once the deadline has fired.
    timer: Option<TimerKey>,
    /// Registration order, for a fixed order among deadlines at one instant.
    order: u64,
}

struct WaiterSlot {
    stamp: u32,
    waiter: Option<Waiter>,
    /// Neighbours in the sub-queue's [`Links`] while parked.
    prev: u32,
    next: u32,
}

/// A dead letter on its way to another queue (the dead-letter target).
pub(crate) struct Outbound {
    pub(crate) target: String,
    /// The source queue's id.
    pub(crate) source_queue: u32,
    pub(crate) source: Arc<str>,
    pub(crate) source_seq: u64,
    inserted_at: u64,
    pub(crate) at_ms: u64,
    payload: Payload,
    attributes: Option<Attributes>,
    channel: Option<Arc<str>>,
    group: Option<Arc<str>>,
    priority: u8,
    id: MessageId,
    delivery_count: u32,
    dead_letter: Option<Arc<DeadLetter>>,
    attempts: Option<Attempts>,
    /// A move task's message (not a dead letter): its task, and whether
    /// it left its source's DLQ.
    pub(crate) moving: Option<MoveRef>,
}

/// Which move task a message in transit belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MoveRef {
    pub(crate) task: u64,
    pub(crate) from_dlq: bool,
}

impl Outbound {
    /// Message `m`, leaving queue `source` (its id and name) at `at_ms`,
    /// on its way to `target`.
    pub(super) fn of(
        m: Message,
        target: String,
        (source_queue, source): (u32, Arc<str>),
        at_ms: u64,
        dead_letter: Option<Arc<DeadLetter>>,
        moving: Option<MoveRef>,
    ) -> Outbound {
        Outbound {
            target,
            source_queue,
            source,
            source_seq: m.seq,
            inserted_at: m.inserted_at_ms,
            at_ms,
            payload: m.payload,
            attributes: m.attributes,
            channel: m.channel,
            group: m.group,
            priority: m.priority,
            id: m.id,
            delivery_count: m.delivery_count,
            dead_letter,
            attempts: m.attempts,
            moving,
        }
    }

    /// The order dead letters are delivered in, whatever the order their
    /// timers ran in: by time, then source queue, then the source's
    /// sequence.
    pub(crate) fn delivery_order(a: &Outbound, b: &Outbound) -> std::cmp::Ordering {
        a.at_ms
            .cmp(&b.at_ms)
            .then_with(|| a.source.cmp(&b.source))
            .then(a.source_seq.cmp(&b.source_seq))
    }
}

/// Receive parameters resolved against the queue's settings.
struct Take<'a> {
    max: u32,
    /// Answer bytes at most ([`answer_bytes`]).
    budget: u64,
    visibility_ms: u64,
    filter: Option<&'a ChannelFilter>,
}

/// One shard's state.
pub struct Shard {
    id: u16,
    now: u64,
    key: ReceiptKey,
    budget: ShardBudget,
    /// Generations of slots re-created after a trim start above this.
    generation_floor: u64,
    names: HashMap<Arc<str>, u32>,
    /// The same names in order, for listing by page.
    sorted_names: std::collections::BTreeSet<Arc<str>>,
    queues: Vec<Option<Queue>>,
    free_queues: Vec<u32>,
    records: Vec<Record>,
    free_slots: Vec<u32>,
    wheel: TimingWheel<Packed>,
    fired: Vec<(u64, Packed)>,
    waiters: Vec<WaiterSlot>,
    free_waiters: Vec<u32>,
    waiter_order: u64,
    /// Sub-queues that gained visible messages since waiters were last served.
    gained: Vec<SubId>,
    /// Deleted queues whose messages are still being swept out: the slot
    /// and, per sub-queue, the sequence number to go on from.
    dropping: Vec<(u32, [u64; 2])>,
    /// Purged epochs whose records are still being freed, and the sequence
    /// number to go on from.
    purging: Vec<(SubId, u64)>,
    /// The sweep's batch (kept for its room).
    sweep_batch: Vec<(u64, u32)>,
    completions: Vec<Completion>,
    outbox: Vec<Outbound>,
    /// Free payload buffers for reuse.
    pool: PayloadPool,
    journal: Option<Box<dyn EventSink>>,
    /// Changes logged so far, deliveries aside ([`Shard::changes`]).
    changes: u64,
    /// Timers an operation may run before it starts ([`Shard::advance_within`]):
    /// unlimited in the in-process engine (exact time), a constant under a
    /// server's owner, which runs the rest between its turns.
    timer_budget: usize,
    /// The top 32 bits of the ids it gives messages (`message_id`).
    id_space: u32,
}

macro_rules! emit {
    ($self:ident, $event:expr) => {
        if let Some(mut journal) = $self.journal.take() {
            let change = {
                let event = $event;
                journal.record(&event);
                !event.is_delivery()
            };
            if change {
                $self.changes += 1;
            }
            $self.journal = Some(journal);
        }
    };
}

mod admin;
mod dedup;
mod groups;
mod invariants;
mod moves;
mod queues;

pub use dedup::{content_key, dedup_key, DEDUP_ENTRY_BYTES};
pub use groups::{GROUPED_MESSAGE_BYTES, GROUP_OVERHEAD_BYTES};
mod records;
mod time;

use records::NewRecord;
use time::{Packed, Timer};
mod receipts;
mod receive;

/// Bytes a message holds against its queue's `max_bytes`: payload plus
/// attribute keys and values.
fn attributes_bytes(attributes: Option<&Attributes>) -> u64 {
    attributes.map_or(0, |a| {
        a.iter()
            .map(|(k, v)| (k.len() + v.len()) as u64)
            .sum::<u64>()
    })
}

/// Bits of [`Record::len`] that hold the payload's length (payloads are at
/// most 1 MiB).
const LEN_BITS: u32 = 24;
const LEN_MASK: u32 = (1 << LEN_BITS) - 1;

impl Record {
    /// The payload's length.
    fn len(&self) -> u32 {
        self.len & LEN_MASK
    }

    /// Its priority level (1 ..= 10).
    fn level(&self) -> u8 {
        (self.len >> LEN_BITS) as u8 + 1
    }

    /// Sets the payload's length and the priority level.
    fn set_len(&mut self, len: u32, level: u8) {
        debug_assert!(len <= LEN_MASK && (1..=16).contains(&level));
        self.len = len | u32::from(level - 1) << LEN_BITS;
    }

    /// Its payload (a reference, no copy).
    fn payload(&self) -> Payload {
        Payload::from_parts(self.body.clone(), self.len())
    }

    /// What it counts against its queue's max_bytes: payload and
    /// attributes.
    fn bytes(&self) -> u64 {
        u64::from(self.len())
            + attributes_bytes(self.extra.as_ref().and_then(|e| e.attributes.as_ref()))
    }

    /// What it counts against the server's max_stored_bytes beyond
    /// [`crate::budget::MESSAGE_OVERHEAD_BYTES`]: payload, attributes and its dead-letter
    /// record.
    fn budget_bytes(&self) -> u64 {
        let extra = self.extra.as_deref();
        self.bytes()
            + dead_letter_bytes(extra.and_then(|e| e.dead_letter.as_deref()))
            + groups::grouped_bytes(extra.is_some_and(|e| e.group.is_some()))
            + attempts_bytes(extra.and_then(|e| e.attempts.as_ref()))
    }
}

/// What a dead letter's record holds: its reason and description (a
/// consumer's, up to 4 352 bytes) and [`DEAD_LETTER_OVERHEAD_BYTES`].
pub(crate) fn dead_letter_bytes(d: Option<&DeadLetter>) -> u64 {
    d.map_or(0, |d| {
        DEAD_LETTER_OVERHEAD_BYTES
            + match &d.reason {
                DeadLetterReason::Consumer {
                    reason,
                    description,
                } => (reason.len() + description.len()) as u64,
                _ => 0,
            }
    })
}

/// What a channel holds while it has messages: its name and
/// [`CHANNEL_OVERHEAD_BYTES`].
pub(crate) fn channel_bytes(name: &str) -> u64 {
    CHANNEL_OVERHEAD_BYTES + name.len() as u64
}

/// A message's id: its engine's id space (0 on a single node, a cluster
/// partition's number + 1) in the top 32 bits, its queue's id in the next
/// 32, its sequence number in the low 64. Queue ids are numbered per
/// engine and sequence numbers per queue, so the space keeps the ids of two
/// partitions' queues apart.
fn message_id(space: u32, queue_id: u32, seq: u64) -> MessageId {
    MessageId((u128::from(space) << 96) | (u128::from(queue_id) << 64) | u128::from(seq))
}

fn handle(slot: u32, generation: u64) -> u64 {
    (u64::from(slot) << 32) | (generation & 0xFFFF_FFFF)
}

impl Shard {
    /// An empty shard whose time is `now`, signing receipts with `key`.
    pub(crate) fn new(id: u16, now: u64, key: ReceiptKey, budget: Arc<Budget>) -> Shard {
        Shard {
            id,
            now,
            key,
            budget: ShardBudget::new(budget, usize::from(id)),
            generation_floor: 0,
            names: HashMap::new(),
            sorted_names: std::collections::BTreeSet::new(),
            queues: Vec::new(),
            free_queues: Vec::new(),
            records: Vec::new(),
            free_slots: Vec::new(),
            wheel: TimingWheel::new(now),
            fired: Vec::new(),
            waiters: Vec::new(),
            free_waiters: Vec::new(),
            waiter_order: 0,
            gained: Vec::new(),
            dropping: Vec::new(),
            purging: Vec::new(),
            sweep_batch: Vec::new(),
            completions: Vec::new(),
            outbox: Vec::new(),
            pool: PayloadPool::default(),
            journal: None,
            changes: 0,
            timer_budget: usize::MAX,
            id_space: 0,
        }
    }

    /// Sets the id space of the ids this shard gives messages
    /// (`message_id`): a cluster partition's, set before it serves.
    pub(crate) fn set_id_space(&mut self, space: u32) {
        self.id_space = space;
    }

    /// The id of the message `seq` of the queue `queue_id`.
    fn id_of(&self, queue_id: u32, seq: u64) -> MessageId {
        message_id(self.id_space, queue_id, seq)
    }

    /// Changes this shard logged so far (to its journal; none without one),
    /// deliveries aside ([`crate::event::Event::is_delivery`]): a call that
    /// moved it made a change its answer acknowledges.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Lets the sink hand on what this shard recorded (after every call).
    pub(crate) fn publish_journal(&mut self) {
        if let Some(journal) = self.journal.as_mut() {
            journal.publish();
        }
    }

    /// Installs the sink that receives this shard's events.
    pub fn set_journal(&mut self, sink: Option<Box<dyn EventSink>>) {
        self.journal = sink;
    }

    /// Sets how many timers an operation may run before it starts
    /// (`usize::MAX`: all that are due).
    pub fn set_timer_budget(&mut self, budget: usize) {
        self.timer_budget = budget.max(1);
    }

    /// Message slots allocated, live or free.
    pub fn message_slots(&self) -> usize {
        self.records.len()
    }

    /// The earliest time at which a timer is due, a lower bound (see
    /// [`Owner::next_timer`](crate::Owner::next_timer)).
    pub fn next_timer(&self) -> Option<u64> {
        self.wheel.next_deadline()
    }

    /// The earliest time at which [`Shard::advance`] or
    /// [`Shard::move_timers_ahead`] has work, if any.
    pub fn next_deadline(&self) -> Option<u64> {
        match (self.wheel.next_deadline(), self.wheel.next_migration()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Moves up to `max` of the wheel's far timers down a level ahead of
    /// their time ([`TimingWheel::migrate`]): the work of a crowded far
    /// slot is spread over the owner's turns instead of done in the one
    /// advance at which the slot comes due. Changes nothing that fires.
    pub fn move_timers_ahead(&mut self, max: usize) -> usize {
        self.wheel.migrate(max)
    }

    /// Timers the wheel has moved between its slots so far (draining a
    /// slot that came due, or ahead of time), for tests that bound the
    /// work of one turn.
    #[doc(hidden)]
    pub fn timer_moves(&self) -> u64 {
        self.wheel.moves()
    }

    pub(crate) fn take_completions(&mut self) -> Vec<Completion> {
        std::mem::take(&mut self.completions)
    }

    pub(crate) fn take_outbox(&mut self) -> Vec<Outbound> {
        std::mem::take(&mut self.outbox)
    }

    pub(crate) fn has_output(&self) -> bool {
        !self.completions.is_empty() || !self.outbox.is_empty()
    }

    fn queue_slot(&self, name: &str) -> Result<u32, Error> {
        self.names
            .get(name)
            .copied()
            .ok_or_else(|| Error::QueueNotFound(name.to_owned()))
    }

    fn queue(&self, slot: u32) -> &Queue {
        self.queues[slot as usize]
            .as_ref()
            .expect("live queue slot")
    }

    fn queue_mut(&mut self, slot: u32) -> &mut Queue {
        self.queues[slot as usize]
            .as_mut()
            .expect("live queue slot")
    }

    fn sub_mut(&mut self, q: SubId) -> &mut SubQueue {
        let queue = self.queue_mut(q.queue());
        if queue.epochs[q.half()] == q.epoch() {
            &mut queue.subs[q.half()]
        } else {
            queue.purged[q.half()]
                .as_deref_mut()
                .expect("a purged epoch being swept")
        }
    }

    fn sub(&self, q: SubId) -> &SubQueue {
        let queue = self.queue(q.queue());
        if queue.epochs[q.half()] == q.epoch() {
            &queue.subs[q.half()]
        } else {
            queue.purged[q.half()]
                .as_deref()
                .expect("a purged epoch being swept")
        }
    }

    /// Queue `qslot`'s half (its DLQ when `dlq`) in its current epoch.
    fn sub_id(&self, qslot: u32, dlq: bool) -> SubId {
        SubId::new(qslot, self.queue(qslot).epochs[usize::from(dlq)], dlq)
    }

    /// Whether `q` is a purged epoch (its records are gone but for the sweep).
    fn is_purged(&self, q: SubId) -> bool {
        self.queue(q.queue()).epochs[q.half()] != q.epoch()
    }

    /// Whether `slot` holds message `seq` of sub-queue `q`.
    fn live(&self, slot: u32, q: SubId, seq: u64) -> bool {
        self.records
            .get(slot as usize)
            .is_some_and(|r| r.q == q && r.seq == seq && r.word.load().state != MessageState::Free)
    }

    /// After a bulk removal (queue delete, purge): when at least half of
    /// the message slab is free, drop the free slots past the last live one
    /// and give the memory back; the same for the wheel's slab. Slots made
    /// again later start their generations above every generation dropped,
    /// so no old receipt can name a new lease.
    fn trim(&mut self) {
        self.wheel.trim();
        let len = self.records.len();
        if len < 1024 || self.free_slots.len() * 2 < len {
            return;
        }
        let keep = self
            .records
            .iter()
            .rposition(|r| r.word.load().state != MessageState::Free)
            .map_or(0, |i| i + 1);
        for r in &self.records[keep..] {
            self.generation_floor = self.generation_floor.max(r.word.load().generation + 1);
        }
        self.records.truncate(keep);
        self.records.shrink_to_fit();
        self.free_slots.retain(|s| (*s as usize) < keep);
        self.free_slots.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record's size is most of a stored message's bookkeeping
    /// (docs/benchmarks.md "Memory per resident message"): it must not grow
    /// unnoticed.
    #[test]
    fn a_record_takes_80_bytes() {
        assert_eq!(std::mem::size_of::<Record>(), 80);
    }

    /// docs/engine.md gives what a channel's priority rings count.
    #[test]
    fn a_channels_priority_rings_count_336_bytes() {
        assert_eq!(sub::LEVELS_BYTES, 336);
    }

    #[test]
    fn timers_pack_into_four_bytes_and_back() {
        assert_eq!(std::mem::size_of::<Packed>(), 4);
        for t in [
            Timer::Message(0),
            Timer::Message((1 << 30) - 2),
            Timer::Redrive(7),
            Timer::Waiter(123_456),
            Timer::Expiry(9),
            Timer::Expiry((1 << 29) - 2),
            Timer::Dedup(0),
            Timer::Dedup((1 << 29) - 2),
        ] {
            assert_eq!(Timer::from(Packed::from(t)), t);
        }
    }
}
