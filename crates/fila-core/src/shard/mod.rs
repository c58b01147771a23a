//! One shard: the queues that hash to it, their messages, one timing wheel and
//! the parked receives. A shard is plain single-threaded state; its owner
//! (the engine's per-shard lock today, a server's event loop tomorrow)
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

use bytes::Bytes;
use hashbrown::HashMap;

use crate::budget::{Budget, ShardBudget};
use crate::error::Error;
use crate::event::{Event, EventSink, MessageView, Spot};
use crate::lease::StateWord;
use crate::lease::{LeaseEnd, MessageState, Refused};
use crate::limits::PEEK_MAX;
use crate::receipt::{Receipt, ReceiptKey};
use crate::ring::ReadyRing;
use crate::types::*;
use crate::wheel::{TimerKey, TimingWheel};

mod image;

const NIL: u32 = u32::MAX;
const MAIN: u32 = 0;
const DLQ: u32 = 1;

/// What a parked receive is completed with: messages, an empty list when its
/// wait ended, or `queue_deleted`.
pub type Notify = Box<dyn FnOnce(Result<Vec<Message>, Error>) + Send>;

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
}

/// The answer to a receive.
#[derive(Debug)]
pub enum Received {
    /// Messages now, or an empty list when the receive did not wait.
    Ready(Vec<Message>),
    /// Nothing yet: the receive is parked and its `Notify` will be called.
    Parked(WaitId),
}

#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Timer(u64);

impl Timer {
    const KIND: u64 = 3 << 62;
    const MESSAGE: u64 = 0;
    const REDRIVE: u64 = 1 << 62;
    const WAITER: u64 = 2 << 62;

    fn new(kind: u64, index: u32) -> Timer {
        Timer(kind | u64::from(index))
    }
    fn kind(self) -> u64 {
        self.0 & Self::KIND
    }
    fn index(self) -> u32 {
        self.0 as u32
    }
}

/// Rarely present parts of a message, boxed to keep [`Record`] small.
#[derive(Default)]
struct Extra {
    attributes: Option<Attributes>,
    dead_letter: Option<Arc<DeadLetter>>,
    /// The id it had before it moved between queues.
    id: Option<MessageId>,
}

/// One message slot.
struct Record {
    payload: Bytes,
    word: StateWord,
    seq: u64,
    inserted_at: u64,
    expires_at: u64,
    visible_at: u64,
    extra: Option<Box<Extra>>,
    /// Owning sub-queue: `queue slot << 1 | dlq`.
    q: u32,
    channel: u32,
    timer: u32,
}

impl Record {
    fn empty() -> Record {
        Record {
            payload: Bytes::new(),
            word: StateWord::new(),
            seq: 0,
            inserted_at: 0,
            expires_at: 0,
            visible_at: 0,
            extra: None,
            q: NIL,
            channel: 0,
            timer: NIL,
        }
    }
}

struct Channel {
    name: Option<Arc<str>>,
    /// A visible message popped and put back (it did not fit a receive's
    /// byte budget): the channel's next, before the ring.
    front: Option<u64>,
    ring: ReadyRing,
    /// Neighbours in the sub-queue's round of channels with visible
    /// messages (`NIL` at the ends), and whether it is in the round.
    prev: u32,
    next: u32,
    in_round: bool,
    visible: u32,
    held: u64,
    bytes: u64,
}

impl Channel {
    fn new(name: Option<Arc<str>>) -> Channel {
        Channel {
            name,
            front: None,
            ring: ReadyRing::default(),
            prev: NIL,
            next: NIL,
            in_round: false,
            visible: 0,
            held: 0,
            bytes: 0,
        }
    }
}

/// Sequence numbers to slots. The queue's own messages are appended in
/// sequence order, so a log with lazy removal serves (an entry is live when
/// its slot still holds that sequence number in this sub-queue); the DLQ
/// receives messages out of order and keeps a tree.
enum SeqIndex {
    Log {
        seqs: VecDeque<u64>,
        slots: VecDeque<u32>,
    },
    Tree(BTreeMap<u64, u32>),
}

impl SeqIndex {
    fn insert(&mut self, seq: u64, slot: u32) {
        match self {
            SeqIndex::Log { seqs, slots } => {
                debug_assert!(seqs.back().is_none_or(|last| *last < seq));
                seqs.push_back(seq);
                slots.push_back(slot);
            }
            SeqIndex::Tree(t) => {
                t.insert(seq, slot);
            }
        }
    }

    fn remove(&mut self, seq: u64) {
        if let SeqIndex::Tree(t) = self {
            t.remove(&seq);
        }
    }

    /// Candidates with sequence number `>= from`, in order.
    fn from(&self, from: u64) -> Box<dyn Iterator<Item = (u64, u32)> + '_> {
        match self {
            SeqIndex::Log { seqs, slots } => {
                let start = seqs.partition_point(|s| *s < from);
                Box::new(
                    seqs.range(start..)
                        .copied()
                        .zip(slots.range(start..).copied()),
                )
            }
            SeqIndex::Tree(t) => Box::new(t.range(from..).map(|(s, slot)| (*s, *slot))),
        }
    }

    fn get(&self, seq: u64) -> Option<u32> {
        match self {
            SeqIndex::Log { seqs, slots } => seqs.binary_search(&seq).ok().map(|i| slots[i]),
            SeqIndex::Tree(t) => t.get(&seq).copied(),
        }
    }
}

#[derive(Default)]
struct Counts {
    visible: u64,
    in_flight: u64,
    delayed: u64,
    deferred: u64,
}

impl Counts {
    fn of(&mut self, state: MessageState) -> &mut u64 {
        match state {
            MessageState::Visible => &mut self.visible,
            MessageState::InFlight => &mut self.in_flight,
            MessageState::Delayed => &mut self.delayed,
            MessageState::Deferred => &mut self.deferred,
            MessageState::Free => unreachable!("a free slot has no count"),
        }
    }
}

struct SubQueue {
    channels: Vec<Channel>,
    channel_ids: HashMap<Arc<str>, u32>,
    free_channels: Vec<u32>,
    /// Channels with visible messages, in round-robin order: a doubly
    /// linked list through the channels, so entering, leaving and rotating
    /// are O(1) however many channels there are.
    round: Links,
    /// The named channels of the round by name, so a prefix filter finds
    /// its next channel in O(log channels).
    round_names: BTreeMap<Arc<str>, u32>,
    /// The channel a prefix-filtered receive was last served from: the
    /// next one starts after it (round-robin in name order).
    prefix_cursor: Option<Arc<str>>,
    index: SeqIndex,
    counts: Counts,
    held: u64,
    /// Parked receives, first come first served: a doubly linked list
    /// through [`WaiterSlot`]s, so any one leaves in O(1).
    waiters: Links,
}

/// Head and tail of an intrusive list (a sub-queue's round of channels, or
/// its parked receives); `NIL` when empty.
#[derive(Clone, Copy)]
struct Links {
    head: u32,
    tail: u32,
}

impl Links {
    const EMPTY: Links = Links {
        head: NIL,
        tail: NIL,
    };
}

impl SubQueue {
    fn new(dlq: bool) -> SubQueue {
        SubQueue {
            channels: vec![Channel::new(None)],
            channel_ids: HashMap::new(),
            free_channels: Vec::new(),
            round: Links::EMPTY,
            round_names: BTreeMap::new(),
            prefix_cursor: None,
            index: if dlq {
                SeqIndex::Tree(BTreeMap::new())
            } else {
                SeqIndex::Log {
                    seqs: VecDeque::new(),
                    slots: VecDeque::new(),
                }
            },
            counts: Counts::default(),
            held: 0,
            waiters: Links::EMPTY,
        }
    }

    fn channel_id(&mut self, name: Option<&Arc<str>>) -> u32 {
        let Some(name) = name else { return 0 };
        if let Some(id) = self.channel_ids.get(name) {
            return *id;
        }
        let id = match self.free_channels.pop() {
            Some(id) => {
                self.channels[id as usize] = Channel::new(Some(name.clone()));
                id
            }
            None => {
                self.channels.push(Channel::new(Some(name.clone())));
                (self.channels.len() - 1) as u32
            }
        };
        self.channel_ids.insert(name.clone(), id);
        id
    }

    fn channel_held(&self, name: Option<&str>) -> (u64, u64) {
        let id = match name {
            None => 0,
            Some(n) => match self.channel_ids.get(n) {
                Some(id) => *id,
                None => return (0, 0),
            },
        };
        let c = &self.channels[id as usize];
        (c.held, c.bytes)
    }

    /// Puts a channel that has visible messages again into the round, at
    /// the back (or the front).
    fn enter_round(&mut self, channel: u32, front: bool) {
        let c = &mut self.channels[channel as usize];
        debug_assert!(!c.in_round);
        c.in_round = true;
        if let Some(name) = &c.name {
            self.round_names.insert(name.clone(), channel);
        }
        self.link(channel, front);
    }

    /// Links a channel into the round list at the back (or the front).
    fn link(&mut self, channel: u32, front: bool) {
        let (head, tail) = (self.round.head, self.round.tail);
        let c = &mut self.channels[channel as usize];
        if front {
            c.prev = NIL;
            c.next = head;
            if head == NIL {
                self.round.tail = channel;
            } else {
                self.channels[head as usize].prev = channel;
            }
            self.round.head = channel;
        } else {
            c.next = NIL;
            c.prev = tail;
            if tail == NIL {
                self.round.head = channel;
            } else {
                self.channels[tail as usize].next = channel;
            }
            self.round.tail = channel;
        }
    }

    /// Takes a channel out of the round (no visible message left).
    fn leave_round(&mut self, channel: u32) {
        let c = &mut self.channels[channel as usize];
        if !c.in_round {
            return;
        }
        c.in_round = false;
        if let Some(name) = &c.name {
            self.round_names.remove(name);
        }
        self.unlink(channel);
    }

    /// Unlinks a channel from the round list.
    fn unlink(&mut self, channel: u32) {
        let c = &mut self.channels[channel as usize];
        let (prev, next) = (c.prev, c.next);
        c.prev = NIL;
        c.next = NIL;
        if prev == NIL {
            self.round.head = next;
        } else {
            self.channels[prev as usize].next = next;
        }
        if next == NIL {
            self.round.tail = prev;
        } else {
            self.channels[next as usize].prev = prev;
        }
    }

    /// Moves a channel that just gave a message to the back of the round.
    fn rotate(&mut self, channel: u32) {
        if self.channels[channel as usize].in_round && self.round.tail != channel {
            self.unlink(channel);
            self.link(channel, false);
        }
    }

    /// The next channel with visible messages whose name starts with the
    /// (non-empty) `prefix`: the first after the prefix cursor, else the
    /// first of all.
    fn next_with_prefix(&self, prefix: &str) -> Option<u32> {
        use std::ops::Bound;
        let matching = |(name, id): (&Arc<str>, &u32)| name.starts_with(prefix).then_some(*id);
        if let Some(cursor) = self
            .prefix_cursor
            .as_deref()
            .filter(|c| c.starts_with(prefix))
        {
            let after = self
                .round_names
                .range::<str, _>((Bound::Excluded(cursor), Bound::Unbounded))
                .next()
                .and_then(matching);
            if after.is_some() {
                return after;
            }
        }
        self.round_names
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .next()
            .and_then(matching)
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
}

struct Queue {
    id: u32,
    name: Arc<str>,
    settings: QueueSettings,
    subs: [SubQueue; 2],
    next_seq: u64,
    messages: u64,
    bytes: u64,
    counters: Counters,
    redrive: Option<RedriveJob>,
}

struct Waiter {
    q: u32,
    max: u32,
    /// Answer bytes at most.
    budget: u64,
    visibility_ms: u64,
    filter: Option<ChannelFilter>,
    notify: Option<Notify>,
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
    payload: Bytes,
    attributes: Option<Attributes>,
    channel: Option<Arc<str>>,
    id: MessageId,
    delivery_count: u32,
    dead_letter: Arc<DeadLetter>,
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
    wheel: TimingWheel<Timer>,
    fired: Vec<(u64, Timer)>,
    waiters: Vec<WaiterSlot>,
    free_waiters: Vec<u32>,
    waiter_order: u64,
    /// Sub-queues that gained visible messages since waiters were last served.
    gained: Vec<u32>,
    completions: Vec<(Notify, Result<Vec<Message>, Error>)>,
    outbox: Vec<Outbound>,
    journal: Option<Box<dyn EventSink>>,
}

macro_rules! emit {
    ($self:ident, $event:expr) => {
        if let Some(mut journal) = $self.journal.take() {
            journal.record(&$event);
            $self.journal = Some(journal);
        }
    };
}

/// Bytes a message holds against its queue's `max_bytes`: payload plus
/// attribute keys and values.
fn attributes_bytes(attributes: Option<&Attributes>) -> u64 {
    attributes.map_or(0, |a| {
        a.iter()
            .map(|(k, v)| (k.len() + v.len()) as u64)
            .sum::<u64>()
    })
}

impl Record {
    fn bytes(&self) -> u64 {
        self.payload.len() as u64
            + attributes_bytes(self.extra.as_ref().and_then(|e| e.attributes.as_ref()))
    }
}

fn message_id(queue_id: u32, seq: u64) -> MessageId {
    MessageId((u128::from(queue_id) << 64) | u128::from(seq))
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
            budget: ShardBudget::new(budget),
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
            completions: Vec::new(),
            outbox: Vec::new(),
            journal: None,
        }
    }

    /// Installs the sink that receives this shard's events.
    pub fn set_journal(&mut self, sink: Option<Box<dyn EventSink>>) {
        self.journal = sink;
    }

    /// Message slots allocated, live or free.
    pub fn message_slots(&self) -> usize {
        self.records.len()
    }

    /// The earliest time at which [`Shard::advance`] has work, if any.
    pub fn next_deadline(&self) -> Option<u64> {
        self.wheel.next_deadline()
    }

    pub(crate) fn take_completions(&mut self) -> Vec<(Notify, Result<Vec<Message>, Error>)> {
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

    fn sub_mut(&mut self, q: u32) -> &mut SubQueue {
        &mut self.queue_mut(q >> 1).subs[(q & 1) as usize]
    }

    fn sub(&self, q: u32) -> &SubQueue {
        &self.queue(q >> 1).subs[(q & 1) as usize]
    }

    /// Whether `slot` holds message `seq` of sub-queue `q`.
    fn live(&self, slot: u32, q: u32, seq: u64) -> bool {
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

    // ----- time -------------------------------------------------------------

    /// Runs every timer due at or before `now`, one instant at a time.
    pub fn advance(&mut self, now: u64) {
        let now = now.max(self.now);
        while let Some(next) = self.wheel.next_deadline() {
            if next > now {
                break;
            }
            let mut fired = std::mem::take(&mut self.fired);
            self.wheel.advance(next, &mut fired);
            // The wheel let go of these timers: forget their keys first, so
            // that handling one event cannot cancel another's spent timer.
            for (_, timer) in &fired {
                match timer.kind() {
                    Timer::MESSAGE => self.records[timer.index() as usize].timer = NIL,
                    Timer::WAITER => {
                        if let Some(w) = self.waiters[timer.index() as usize].waiter.as_mut() {
                            w.timer = None;
                        }
                    }
                    _ => {}
                }
            }
            fired.sort_unstable_by(|a, b| self.timer_order(a, b));
            for (deadline, timer) in fired.drain(..) {
                self.now = self.now.max(deadline);
                match timer.kind() {
                    Timer::MESSAGE => self.message_timer(timer.index(), deadline),
                    Timer::REDRIVE => self.redrive_tick(timer.index(), deadline),
                    _ => self.waiter_deadline(timer.index()),
                }
                self.serve_gained();
            }
            self.fired = fired;
        }
        self.wheel.advance(now, &mut self.fired);
        debug_assert!(self.fired.is_empty(), "every due timer ran above");
        self.now = now;
    }

    fn timer_order(&self, a: &(u64, Timer), b: &(u64, Timer)) -> std::cmp::Ordering {
        a.0.cmp(&b.0)
            .then(a.1.kind().cmp(&b.1.kind()))
            .then_with(|| match a.1.kind() {
                Timer::MESSAGE => {
                    let (ra, rb) = (
                        &self.records[a.1.index() as usize],
                        &self.records[b.1.index() as usize],
                    );
                    self.queue(ra.q >> 1)
                        .name
                        .cmp(&self.queue(rb.q >> 1).name)
                        .then((ra.q & 1).cmp(&(rb.q & 1)))
                        .then(ra.seq.cmp(&rb.seq))
                }
                Timer::REDRIVE => self
                    .queue(a.1.index())
                    .name
                    .cmp(&self.queue(b.1.index()).name),
                _ => {
                    let order = |t: Timer| {
                        self.waiters[t.index() as usize]
                            .waiter
                            .as_ref()
                            .map_or(0, |w| w.order)
                    };
                    order(a.1).cmp(&order(b.1))
                }
            })
    }

    fn message_timer(&mut self, slot: u32, t: u64) {
        let r = &self.records[slot as usize];
        let word = r.word.load();
        if r.timer != NIL || word.state == MessageState::Free {
            // An earlier event at this instant already moved the message on.
            return;
        }
        let expired = r.expires_at <= t;
        match word.state {
            MessageState::Delayed | MessageState::InFlight if !expired => {
                if word.state == MessageState::InFlight {
                    let ended = r.word.end_lease(word.generation, LeaseEnd::Release);
                    debug_assert!(ended.is_ok());
                    self.leave_state(slot, MessageState::InFlight);
                } else {
                    let shifted = r.word.shift(MessageState::Delayed, MessageState::Visible);
                    debug_assert!(shifted.is_ok());
                    self.leave_state(slot, MessageState::Delayed);
                }
                self.enter_visible(slot);
            }
            MessageState::Free | MessageState::Deferred => {}
            _ => self.expire(slot, t),
        }
    }

    /// Ends a message whose time ran out: to the DLQ when the queue says so,
    /// else gone.
    fn expire(&mut self, slot: u32, t: u64) {
        let q = self.records[slot as usize].q;
        let queue = self.queue_mut(q >> 1);
        queue.counters.expiries += 1;
        if q & 1 == MAIN && queue.settings.dead_letter_on_expiration {
            self.dead_letter_slot(slot, DeadLetterReason::Expired, t);
            return;
        }
        emit!(
            self,
            Event::Removed {
                at: self.spot(slot)
            }
        );
        self.remove(slot);
    }

    // ----- record bookkeeping -----------------------------------------------

    fn alloc(&mut self) -> u32 {
        match self.free_slots.pop() {
            Some(slot) => slot,
            None => {
                let mut record = Record::empty();
                record.word = StateWord::free_at(self.generation_floor);
                self.records.push(record);
                u32::try_from(self.records.len() - 1).expect("fewer than 2^32 messages per shard")
            }
        }
    }

    fn set_timer(&mut self, slot: u32, deadline: u64) {
        let timer = self.records[slot as usize].timer;
        if timer == NIL {
            let key = self
                .wheel
                .insert(deadline, Timer::new(Timer::MESSAGE, slot));
            self.records[slot as usize].timer = key.index();
        } else {
            self.wheel.reset(TimerKey::from_index(timer), deadline);
        }
    }

    fn clear_timer(&mut self, slot: u32) {
        let timer = std::mem::replace(&mut self.records[slot as usize].timer, NIL);
        if timer != NIL {
            self.wheel.cancel(TimerKey::from_index(timer));
        }
    }

    /// Counts a message out of `state` (the ring entry of a visible message
    /// stays behind and is skipped when popped).
    fn leave_state(&mut self, slot: u32, state: MessageState) {
        let (q, channel) = {
            let r = &self.records[slot as usize];
            (r.q, r.channel)
        };
        let sub = self.sub_mut(q);
        *sub.counts.of(state) -= 1;
        if state == MessageState::Visible {
            let c = &mut sub.channels[channel as usize];
            c.visible -= 1;
            if c.visible == 0 {
                c.front = None;
                c.ring.clear();
                c.ring.shrink_if_empty();
                sub.leave_round(channel);
            }
        }
    }

    /// Counts a message into `state`; a visible one is pushed on its ring.
    fn enter_state(&mut self, slot: u32, state: MessageState) {
        let (q, channel, generation) = {
            let r = &self.records[slot as usize];
            (r.q, r.channel, r.word.load().generation)
        };
        let sub = self.sub_mut(q);
        *sub.counts.of(state) += 1;
        if state == MessageState::Visible {
            let c = &mut sub.channels[channel as usize];
            c.ring.push_or_grow(handle(slot, generation));
            c.visible += 1;
            if c.visible == 1 {
                sub.enter_round(channel, false);
            }
            if !self.gained.contains(&q) {
                self.gained.push(q);
            }
        }
    }

    /// Makes a message that is now visible findable, with its expiry timer.
    fn enter_visible(&mut self, slot: u32) {
        self.enter_state(slot, MessageState::Visible);
        let expires_at = self.records[slot as usize].expires_at;
        self.set_timer(slot, expires_at);
    }

    /// Adds a message to sub-queue `q`'s channel, totals and index.
    fn attach(&mut self, slot: u32, q: u32, channel: Option<&Arc<str>>) {
        let (seq, len) = {
            let r = &self.records[slot as usize];
            (r.seq, r.bytes())
        };
        let queue = self.queue_mut(q >> 1);
        queue.messages += 1;
        queue.bytes += len;
        let sub = &mut queue.subs[(q & 1) as usize];
        let id = sub.channel_id(channel);
        let c = &mut sub.channels[id as usize];
        c.held += 1;
        c.bytes += len;
        sub.held += 1;
        sub.index.insert(seq, slot);
        let r = &mut self.records[slot as usize];
        r.q = q;
        r.channel = id;
    }

    /// Takes a message out of its sub-queue's channel, totals and index
    /// (its state count is [`Shard::leave_state`]'s business).
    fn detach(&mut self, slot: u32) {
        let (q, channel, seq, len) = {
            let r = &self.records[slot as usize];
            (r.q, r.channel, r.seq, r.bytes())
        };
        let queue = self.queue_mut(q >> 1);
        queue.messages -= 1;
        queue.bytes -= len;
        let sub = &mut queue.subs[(q & 1) as usize];
        sub.held -= 1;
        sub.index.remove(seq);
        let c = &mut sub.channels[channel as usize];
        c.held -= 1;
        c.bytes -= len;
        if c.held == 0 && channel != 0 {
            debug_assert_eq!(c.visible, 0);
            let name = c.name.take().expect("named channel");
            sub.channel_ids.remove(&name);
            sub.channels[channel as usize] = Channel::new(None);
            sub.free_channels.push(channel);
        }
        self.maybe_compact(q, seq);
    }

    /// Drops dead entries of a queue's sequence log once they outnumber the
    /// live ones, so deletions in any order keep the log proportional.
    fn maybe_compact(&mut self, q: u32, seq: u64) {
        if q & 1 == DLQ {
            return;
        }
        let records = &self.records;
        let queue = self.queues[(q >> 1) as usize].as_mut().expect("live");
        let held = queue.subs[MAIN as usize].held;
        let SeqIndex::Log { seqs, slots } = &mut queue.subs[MAIN as usize].index else {
            return;
        };
        let live = |s: u64, slot: u32| {
            records.get(slot as usize).is_some_and(|r| {
                r.q == q && r.seq == s && r.word.load().state != MessageState::Free
            })
        };
        if seqs.front() == Some(&seq) {
            // First in, first out: the message leaving is the oldest. Drop its
            // entry and any dead ones behind it.
            seqs.pop_front();
            slots.pop_front();
            while let (Some(s), Some(slot)) = (seqs.front(), slots.front()) {
                if live(*s, *slot) {
                    break;
                }
                seqs.pop_front();
                slots.pop_front();
            }
        } else if seqs.len() as u64 > 2 * held + 32 {
            // Out of order: compact once dead entries outnumber live ones, so
            // the cost stays amortized O(1) per message.
            let mut kept = 0;
            for i in 0..seqs.len() {
                if live(seqs[i], slots[i]) {
                    seqs[kept] = seqs[i];
                    slots[kept] = slots[i];
                    kept += 1;
                }
            }
            seqs.truncate(kept);
            slots.truncate(kept);
            seqs.shrink_to(kept * 2);
            slots.shrink_to(kept * 2);
        }
    }

    /// Removes a message for good: counts, channel, index, timer, slot.
    fn remove(&mut self, slot: u32) {
        let state = self.records[slot as usize].word.load().state;
        self.leave_state(slot, state);
        self.remove_uncounted(slot);
    }

    /// [`Shard::remove`] for a message already counted out of its state.
    fn remove_uncounted(&mut self, slot: u32) {
        self.detach(slot);
        self.free(slot);
    }

    fn free(&mut self, slot: u32) {
        self.clear_timer(slot);
        self.budget
            .release_message(self.records[slot as usize].bytes());
        let r = &mut self.records[slot as usize];
        if r.word.load().state != MessageState::Free {
            r.word.free();
        }
        r.payload = Bytes::new();
        r.extra = None;
        r.q = NIL;
        self.free_slots.push(slot);
    }

    fn message(&self, slot: u32, state: State, receipt: Option<Receipt>) -> Message {
        let r = &self.records[slot as usize];
        let queue = self.queue(r.q >> 1);
        let extra = r.extra.as_deref();
        Message {
            id: extra
                .and_then(|e| e.id)
                .unwrap_or_else(|| message_id(queue.id, r.seq)),
            seq: r.seq,
            payload: r.payload.clone(),
            attributes: extra.and_then(|e| e.attributes.clone()),
            channel: queue.subs[(r.q & 1) as usize].channels[r.channel as usize]
                .name
                .clone(),
            inserted_at_ms: r.inserted_at,
            expires_at_ms: r.expires_at,
            next_visible_at_ms: r.visible_at,
            delivery_count: r.word.load().delivery_count,
            state,
            receipt,
            dead_letter: extra.and_then(|e| e.dead_letter.clone()),
        }
    }

    /// Where the message in `slot` is.
    fn spot(&self, slot: u32) -> Spot {
        let r = &self.records[slot as usize];
        Spot {
            queue: self.queue(r.q >> 1).id,
            dlq: r.q & 1 == DLQ,
            seq: r.seq,
        }
    }

    /// The message in `slot` as an event shows it.
    fn view(&self, slot: u32) -> MessageView<'_> {
        let r = &self.records[slot as usize];
        let extra = r.extra.as_deref();
        MessageView {
            at: self.spot(slot),
            id: extra.and_then(|e| e.id),
            payload: &r.payload,
            attributes: extra.and_then(|e| e.attributes.as_ref()),
            channel: self.sub(r.q).channels[r.channel as usize].name.as_deref(),
            inserted_at_ms: r.inserted_at,
            visible_at_ms: r.visible_at,
            expires_at_ms: r.expires_at,
            delivery_count: r.word.load().delivery_count,
            dead_letter: extra.and_then(|e| e.dead_letter.as_deref()),
        }
    }

    fn public_state(&self, slot: u32) -> State {
        let r = &self.records[slot as usize];
        match r.word.load().state {
            MessageState::Visible if r.q & 1 == DLQ => State::DeadLettered,
            MessageState::Visible => State::Visible,
            MessageState::InFlight => State::InFlight,
            MessageState::Delayed => State::Delayed,
            MessageState::Deferred => State::Deferred,
            MessageState::Free => unreachable!("peek shows live messages"),
        }
    }

    // ----- queues -----------------------------------------------------------

    /// Creates a queue (idempotent when the settings match).
    pub fn create_queue(
        &mut self,
        name: &str,
        settings: QueueSettings,
        id: impl FnOnce() -> u32,
    ) -> Result<bool, Error> {
        if let Some(slot) = self.names.get(name) {
            let existing = &self.queue(*slot).settings;
            return match existing.first_difference(&settings) {
                None => Ok(false),
                Some(field) => Err(Error::QueueExists {
                    name: name.to_owned(),
                    field,
                }),
            };
        }
        self.budget.shared.reserve_queue()?;
        let name: Arc<str> = Arc::from(name);
        let queue = Queue {
            id: id(),
            name: name.clone(),
            settings,
            subs: [SubQueue::new(false), SubQueue::new(true)],
            next_seq: 1,
            messages: 0,
            bytes: 0,
            counters: Counters::default(),
            redrive: None,
        };
        let slot = match self.free_queues.pop() {
            Some(slot) => {
                self.queues[slot as usize] = Some(queue);
                slot
            }
            None => {
                self.queues.push(Some(queue));
                (self.queues.len() - 1) as u32
            }
        };
        self.names.insert(name.clone(), slot);
        self.sorted_names.insert(name.clone());
        emit!(
            self,
            Event::QueueSet {
                queue: self.queue(slot).id,
                name: &self.queue(slot).name,
                settings: &self.queue(slot).settings,
            }
        );
        Ok(true)
    }

    /// Whether a queue exists.
    pub fn has_queue(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    /// A queue's settings.
    pub fn settings(&self, name: &str) -> Result<QueueSettings, Error> {
        Ok(self.queue(self.queue_slot(name)?).settings.clone())
    }

    /// Applies `update` to a queue's settings in one step, validating the
    /// result; answers the settings now in force.
    pub fn update_settings(
        &mut self,
        name: &str,
        update: &SettingsUpdate,
    ) -> Result<QueueSettings, Error> {
        let slot = self.queue_slot(name)?;
        let next = update.apply(&self.queue(slot).settings);
        next.validate()?;
        self.queue_mut(slot).settings = next.clone();
        emit!(
            self,
            Event::QueueSet {
                queue: self.queue(slot).id,
                name: &self.queue(slot).name,
                settings: &self.queue(slot).settings,
            }
        );
        Ok(next)
    }

    /// Up to `limit` names starting with `prefix` and sorting after
    /// `after`, in order: O(log queues + limit).
    pub fn list(&self, prefix: &str, after: &str, limit: usize) -> Vec<String> {
        use std::ops::Bound;
        let start: Bound<&str> = if after >= prefix {
            Bound::Excluded(after)
        } else {
            Bound::Included(prefix)
        };
        self.sorted_names
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|n| n.starts_with(prefix))
            .take(limit)
            .map(|n| n.to_string())
            .collect()
    }

    /// Deletes a queue, its DLQ and every message; parked receives on it get
    /// `queue_deleted`.
    pub fn delete_queue(&mut self, name: &str) -> Result<(), Error> {
        let slot = self.queue_slot(name)?;
        let id = self.queue(slot).id;
        self.purge_sub(slot << 1 | MAIN);
        self.purge_sub(slot << 1 | DLQ);
        for dlq in [MAIN, DLQ] {
            while let Some(w) = self.first_waiter(slot << 1 | dlq) {
                if let Some(waiter) = self.take_waiter(w) {
                    if let Some(notify) = waiter.notify {
                        self.completions
                            .push((notify, Err(Error::QueueDeleted(name.to_owned()))));
                    }
                }
            }
        }
        if let Some(job) = self.queue_mut(slot).redrive.take() {
            self.wheel.cancel(job.timer);
        }
        self.names.remove(name);
        self.sorted_names.remove(name);
        self.queues[slot as usize] = None;
        self.free_queues.push(slot);
        self.gained.retain(|q| q >> 1 != slot);
        self.budget.shared.release_queue();
        self.trim();
        emit!(self, Event::QueueDeleted { queue: id });
        Ok(())
    }

    /// Removes every message of the queue or of its DLQ, in every state.
    pub fn purge(&mut self, addr: Address<'_>) -> Result<(), Error> {
        let slot = self.queue_slot(addr.queue)?;
        let q = slot << 1 | u32::from(addr.dlq);
        self.purge_sub(q);
        if addr.dlq {
            if let Some(job) = self.queue_mut(slot).redrive.take() {
                self.wheel.cancel(job.timer);
            }
        }
        self.trim();
        emit!(
            self,
            Event::Purged {
                queue: self.queue(slot).id,
                dlq: addr.dlq,
            }
        );
        Ok(())
    }

    fn purge_sub(&mut self, q: u32) {
        let slots: Vec<u32> = self
            .sub(q)
            .index
            .from(0)
            .filter(|(seq, slot)| self.live(*slot, q, *seq))
            .map(|(_, slot)| slot)
            .collect();
        let mut bytes = 0;
        for slot in &slots {
            bytes += self.records[*slot as usize].bytes();
            self.free(*slot);
        }
        let queue = self.queue_mut(q >> 1);
        queue.messages -= slots.len() as u64;
        queue.bytes -= bytes;
        let sub = &mut queue.subs[(q & 1) as usize];
        let waiters = sub.waiters;
        *sub = SubQueue::new(q & 1 == DLQ);
        sub.waiters = waiters;
    }

    /// A queue's stats.
    pub fn stats(&mut self, name: &str) -> Result<QueueStats, Error> {
        let slot = self.queue_slot(name)?;
        let q = slot << 1 | MAIN;
        let oldest = self
            .sub(q)
            .index
            .from(0)
            .find(|(seq, s)| self.live(*s, q, *seq))
            .map(|(_, s)| self.records[s as usize].inserted_at);
        let queue = self.queue(slot);
        let main = &queue.subs[MAIN as usize];
        let dlq = &queue.subs[DLQ as usize];
        Ok(QueueStats {
            visible: main.counts.visible,
            in_flight: main.counts.in_flight,
            delayed: main.counts.delayed,
            deferred: main.counts.deferred,
            dead_lettered: dlq.held,
            bytes: queue.bytes,
            oldest_age_ms: oldest.map_or(0, |t| self.now.saturating_sub(t)),
            puts: queue.counters.puts,
            deliveries: queue.counters.deliveries,
            deletes: queue.counters.deletes,
            expiries: queue.counters.expiries,
            dead_letterings: queue.counters.dead_letterings,
            redriven: queue.counters.redriven,
        })
    }

    // ----- put --------------------------------------------------------------

    fn check_capacity(&self, slot: u32, channel: Option<&str>, len: u64) -> Result<(), Error> {
        let queue = self.queue(slot);
        let s = &queue.settings;
        let full = |limit: &'static str, max: u64| Error::QueueFull {
            name: queue.name.to_string(),
            limit,
            max,
        };
        if queue.messages + 1 > s.max_messages {
            return Err(full("max_messages", s.max_messages));
        }
        if queue.bytes + len > s.max_bytes {
            return Err(full("max_bytes", s.max_bytes));
        }
        if s.channel_capacity_pct < 100 {
            let pct = u64::from(s.channel_capacity_pct);
            let (held, bytes) = queue.subs[MAIN as usize].channel_held(channel);
            let max_messages = (s.max_messages * pct / 100).max(1);
            let max_bytes = (s.max_bytes * pct / 100).max(1);
            if held + 1 > max_messages {
                return Err(full("channel share of max_messages", max_messages));
            }
            if bytes + len > max_bytes {
                return Err(full("channel share of max_bytes", max_bytes));
            }
        }
        Ok(())
    }

    /// Puts a batch (already checked for length); each entry answers alone.
    pub fn put(
        &mut self,
        name: &str,
        batch: Vec<NewMessage>,
        now: u64,
    ) -> Result<Vec<EntryResult<PutReceipt>>, Error> {
        self.advance(now);
        let qslot = self.queue_slot(name)?;
        let now = self.now;
        let answers = batch
            .into_iter()
            .map(|m| self.put_one(qslot, m, now))
            .collect();
        self.serve_gained();
        Ok(answers)
    }

    fn put_one(&mut self, qslot: u32, m: NewMessage, now: u64) -> EntryResult<PutReceipt> {
        let queue = self.queue(qslot);
        m.validate(&queue.settings, now)?;
        let attributes_len: usize = m.attributes.iter().map(|(k, v)| k.len() + v.len()).sum();
        self.check_capacity(
            qslot,
            m.channel.as_deref(),
            (m.payload.len() + attributes_len) as u64,
        )?;
        let lifetime = m.ttl_ms.unwrap_or(queue.settings.retention_ms);
        self.budget
            .reserve_message((m.payload.len() + attributes_len) as u64)?;
        let visible_at = match m.availability {
            Availability::Now => now,
            Availability::DelayMs(d) => now + d,
            Availability::At(at) => at.max(now),
        };
        let channel: Option<Arc<str>> = m.channel.map(Arc::from);
        let extra = if m.attributes.is_empty() {
            None
        } else {
            let attributes: Attributes = m
                .attributes
                .into_iter()
                .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
                .collect();
            Some(Box::new(Extra {
                attributes: Some(attributes),
                ..Extra::default()
            }))
        };
        let queue = self.queue_mut(qslot);
        let seq = queue.next_seq;
        queue.next_seq += 1;
        queue.counters.puts += 1;
        let queue_id = queue.id;
        let slot = self.alloc();
        let r = &mut self.records[slot as usize];
        // The payload may be a slice of a larger buffer (a connection's read
        // buffer): keep a copy of its own bytes only, so a stored message
        // never pins more memory than it is counted for.
        r.payload = if m.payload.is_empty() {
            Bytes::new()
        } else {
            Bytes::copy_from_slice(&m.payload)
        };
        r.seq = seq;
        r.inserted_at = now;
        r.expires_at = now + lifetime;
        r.visible_at = visible_at;
        r.extra = extra;
        let state = if visible_at > now {
            MessageState::Delayed
        } else {
            MessageState::Visible
        };
        let occupied = r.word.occupy(state, 0);
        debug_assert!(occupied.is_ok());
        self.attach(slot, qslot << 1 | MAIN, channel.as_ref());
        emit!(
            self,
            Event::Stored {
                message: self.view(slot),
                from: None,
            }
        );
        if state == MessageState::Delayed {
            self.enter_state(slot, MessageState::Delayed);
            self.set_timer(slot, visible_at);
        } else {
            self.enter_visible(slot);
        }
        Ok(PutReceipt {
            id: message_id(queue_id, seq),
            seq,
        })
    }

    /// Cancels a delayed or scheduled message before it becomes visible.
    pub fn cancel_scheduled(&mut self, name: &str, seq: u64, now: u64) -> Result<(), Error> {
        self.advance(now);
        let qslot = self.queue_slot(name)?;
        let q = qslot << 1 | MAIN;
        let slot = self
            .sub(q)
            .index
            .get(seq)
            .filter(|slot| self.live(*slot, q, seq))
            .filter(|slot| self.records[*slot as usize].word.load().state == MessageState::Delayed)
            .ok_or(Error::NotFound {
                seq,
                what: "scheduled",
            })?;
        emit!(
            self,
            Event::Removed {
                at: self.spot(slot)
            }
        );
        self.remove(slot);
        Ok(())
    }

    // ----- receive ----------------------------------------------------------

    /// Takes up to `take.max` visible messages of sub-queue `q`, fairly across
    /// channels, leasing each (or only counting it, with visibility 0).
    fn take_visible(&mut self, q: u32, take: &Take<'_>, out: &mut Vec<Message>) {
        let now = self.now;
        let mut quick_looks: Vec<u32> = Vec::new();
        let mut used = 0u64;
        while (out.len() as u32) < take.max {
            let Some(channel) = self.pick_channel(q, take.filter) else {
                break;
            };
            let Some(slot) = self.pop_visible(q, channel) else {
                continue;
            };
            if take.budget != u64::MAX {
                let size = self.answer_size(slot);
                if used + size > take.budget {
                    // Too big for what is left of this answer: it stays the
                    // channel's next message.
                    self.put_back(slot);
                    break;
                }
                used += size;
            }
            if let Some(ChannelFilter::Prefix(p)) = take.filter {
                if !p.is_empty() {
                    let sub = self.sub_mut(q);
                    sub.prefix_cursor = sub.channels[channel as usize].name.clone();
                }
            }
            let qslot = q >> 1;
            let max_deliveries = self.queue(qslot).settings.max_deliveries;
            let r = &self.records[slot as usize];
            let count = r.word.load().delivery_count;
            if q & 1 == MAIN && max_deliveries > 0 && count >= max_deliveries {
                self.sub_mut(q).rotate(channel);
                self.dead_letter_uncounted(slot, DeadLetterReason::MaxDeliveries, now);
                continue;
            }
            self.sub_mut(q).rotate(channel);
            let message = self.deliver(slot, MessageState::Visible, take.visibility_ms);
            if take.visibility_ms == 0 {
                quick_looks.push(slot);
            }
            out.push(message);
        }
        for slot in quick_looks {
            self.enter_state(slot, MessageState::Visible);
        }
    }

    /// [`answer_bytes`] of the message in `slot`.
    fn answer_size(&self, slot: u32) -> u64 {
        let r = &self.records[slot as usize];
        let extra = r.extra.as_deref();
        answer_bytes(
            r.payload.len(),
            extra.and_then(|e| e.attributes.as_ref()),
            self.sub(r.q).channels[r.channel as usize].name.as_deref(),
            extra.and_then(|e| e.dead_letter.as_deref()),
        )
    }

    /// Undoes [`Shard::pop_visible`]: the message is visible again, first
    /// in its channel.
    fn put_back(&mut self, slot: u32) {
        let (q, channel, generation) = {
            let r = &self.records[slot as usize];
            (r.q, r.channel, r.word.load().generation)
        };
        let sub = self.sub_mut(q);
        sub.counts.visible += 1;
        let c = &mut sub.channels[channel as usize];
        debug_assert!(c.front.is_none(), "a popped message was the front");
        c.front = Some(handle(slot, generation));
        c.visible += 1;
        if c.visible == 1 {
            sub.enter_round(channel, true);
        }
    }

    /// The channel the next message comes from: without a filter (or with
    /// `*`, which passes everything) the round's head; an exact filter's
    /// channel; for a prefix, the next matching channel in name order after
    /// the last one a prefix receive was served from. O(log channels) at
    /// most.
    fn pick_channel(&self, q: u32, filter: Option<&ChannelFilter>) -> Option<u32> {
        let sub = self.sub(q);
        let head = (sub.round.head != NIL).then_some(sub.round.head);
        match filter {
            None => head,
            Some(ChannelFilter::Prefix(p)) if p.is_empty() => head,
            Some(ChannelFilter::Exact(name)) => sub
                .channel_ids
                .get(name.as_str())
                .copied()
                .filter(|c| sub.channels[*c as usize].visible > 0),
            Some(ChannelFilter::Prefix(p)) => sub.next_with_prefix(p),
        }
    }

    /// Pops the next live handle of a channel with visible messages and
    /// counts it out of the visible state.
    fn pop_visible(&mut self, q: u32, channel: u32) -> Option<u32> {
        loop {
            let c = &mut self.sub_mut(q).channels[channel as usize];
            let h = match c.front.take() {
                Some(h) => h,
                None => c.ring.pop()?,
            };
            let slot = (h >> 32) as u32;
            let Some(r) = self.records.get(slot as usize) else {
                continue; // left behind by a message whose slot was trimmed
            };
            let w = r.word.load();
            if r.q == q
                && w.state == MessageState::Visible
                && (w.generation & 0xFFFF_FFFF) == (h & 0xFFFF_FFFF)
            {
                self.leave_state(slot, MessageState::Visible);
                return Some(slot);
            }
        }
    }

    /// Delivers a message (already counted out of `from`): the state word
    /// decides, the lease timer is set, the answer is built.
    fn deliver(&mut self, slot: u32, from: MessageState, visibility_ms: u64) -> Message {
        let now = self.now;
        let quick_look = visibility_ms == 0;
        let word = self.records[slot as usize]
            .word
            .deliver(from, quick_look)
            .expect("the shard owns the message");
        let r = &mut self.records[slot as usize];
        r.visible_at = now + visibility_ms;
        let q = r.q;
        let queue = self.queue_mut(q >> 1);
        queue.counters.deliveries += 1;
        let queue_id = queue.id;
        let receipt = self.key.mint(queue_id, slot, word.generation);
        emit!(
            self,
            Event::Delivered {
                at: self.spot(slot),
                count: word.delivery_count,
            }
        );
        let state = if quick_look {
            if q & 1 == DLQ {
                State::DeadLettered
            } else {
                State::Visible
            }
        } else {
            self.enter_state(slot, MessageState::InFlight);
            self.set_timer(slot, now + visibility_ms);
            State::InFlight
        };
        self.message(slot, state, Some(receipt))
    }

    /// Receives from the queue or its DLQ. With nothing to give and a wait,
    /// the receive is parked and `notify` is called later; otherwise `notify`
    /// is dropped unused.
    pub fn receive(
        &mut self,
        addr: Address<'_>,
        opts: &ReceiveOptions,
        notify: Option<Notify>,
        now: u64,
    ) -> Result<Received, Error> {
        opts.validate()?;
        self.advance(now);
        let qslot = self.queue_slot(addr.queue)?;
        let q = qslot << 1 | u32::from(addr.dlq);
        let settings = &self.queue(qslot).settings;
        let visibility_ms = opts.visibility_ms.unwrap_or(settings.visibility_timeout_ms);
        let wait_ms = opts.wait_ms.unwrap_or(settings.receive_wait_default_ms);
        let mut out = Vec::with_capacity(opts.max_messages as usize);
        let budget = opts.max_answer_bytes.unwrap_or(u64::MAX);
        self.take_visible(
            q,
            &Take {
                max: opts.max_messages,
                budget,
                visibility_ms,
                filter: opts.channel.as_ref(),
            },
            &mut out,
        );
        let parked = if out.is_empty() && wait_ms > 0 {
            // A parked receive with a budget holds only the room its answer
            // could need; one without stays without.
            let largest = answer_bytes_max(self.queue(qslot).settings.max_message_bytes);
            let budget = if budget == u64::MAX {
                budget
            } else {
                budget.min(largest.saturating_mul(u64::from(opts.max_messages)))
            };
            notify.map(|notify| self.park(q, opts, visibility_ms, wait_ms, budget, notify))
        } else {
            None
        };
        self.serve_gained();
        Ok(match parked {
            Some(id) => Received::Parked(id),
            None => Received::Ready(out),
        })
    }

    fn park(
        &mut self,
        q: u32,
        opts: &ReceiveOptions,
        visibility_ms: u64,
        wait_ms: u64,
        budget: u64,
        notify: Notify,
    ) -> WaitId {
        let slot = match self.free_waiters.pop() {
            Some(slot) => slot,
            None => {
                self.waiters.push(WaiterSlot {
                    stamp: 0,
                    waiter: None,
                    prev: NIL,
                    next: NIL,
                });
                (self.waiters.len() - 1) as u32
            }
        };
        let timer = self
            .wheel
            .insert(self.now + wait_ms, Timer::new(Timer::WAITER, slot));
        self.waiter_order += 1;
        let w = &mut self.waiters[slot as usize];
        w.waiter = Some(Waiter {
            q,
            max: opts.max_messages,
            budget,
            visibility_ms,
            filter: opts.channel.clone(),
            notify: Some(notify),
            timer: Some(timer),
            order: self.waiter_order,
        });
        let stamp = w.stamp;
        self.link_waiter(q, slot);
        WaitId {
            shard: self.id,
            slot,
            stamp,
            reserved: if budget == u64::MAX { 0 } else { budget },
        }
    }

    fn first_waiter(&self, q: u32) -> Option<u32> {
        let head = self.sub(q).waiters.head;
        (head != NIL).then_some(head)
    }

    /// Appends a parked receive to sub-queue `q`'s list.
    fn link_waiter(&mut self, q: u32, slot: u32) {
        let tail = self.sub(q).waiters.tail;
        {
            let w = &mut self.waiters[slot as usize];
            w.prev = tail;
            w.next = NIL;
        }
        if tail == NIL {
            self.sub_mut(q).waiters.head = slot;
        } else {
            self.waiters[tail as usize].next = slot;
        }
        self.sub_mut(q).waiters.tail = slot;
    }

    /// Takes a parked receive out of sub-queue `q`'s list, in O(1).
    fn unlink_waiter(&mut self, q: u32, slot: u32) {
        let (prev, next) = {
            let w = &mut self.waiters[slot as usize];
            let links = (w.prev, w.next);
            w.prev = NIL;
            w.next = NIL;
            links
        };
        if prev == NIL {
            self.sub_mut(q).waiters.head = next;
        } else {
            self.waiters[prev as usize].next = next;
        }
        if next == NIL {
            self.sub_mut(q).waiters.tail = prev;
        } else {
            self.waiters[next as usize].prev = prev;
        }
    }

    /// Unlinks and frees a parked receive; its `Notify` is the caller's.
    fn take_waiter(&mut self, slot: u32) -> Option<Waiter> {
        let q = self.waiters[slot as usize].waiter.as_ref()?.q;
        if self
            .queues
            .get((q >> 1) as usize)
            .is_some_and(|x| x.is_some())
        {
            self.unlink_waiter(q, slot);
        }
        let w = &mut self.waiters[slot as usize];
        let waiter = w.waiter.take()?;
        w.stamp = w.stamp.wrapping_add(1);
        self.free_waiters.push(slot);
        if let Some(timer) = waiter.timer {
            self.wheel.cancel(timer);
        }
        Some(waiter)
    }

    /// Forgets a parked receive (its connection went away). Its `Notify` is
    /// dropped uncalled. Returns whether it was still parked.
    pub fn cancel_wait(&mut self, id: WaitId) -> bool {
        let Some(w) = self.waiters.get(id.slot as usize) else {
            return false;
        };
        if w.stamp != id.stamp || w.waiter.is_none() {
            return false;
        }
        self.take_waiter(id.slot).expect("checked above");
        true
    }

    fn waiter_deadline(&mut self, slot: u32) {
        // The deadline fired: the wheel already let go of the timer.
        let Some(mut waiter) = self.take_waiter(slot) else {
            return;
        };
        if let Some(notify) = waiter.notify.take() {
            self.completions.push((notify, Ok(Vec::new())));
        }
    }

    /// Serves parked receives of every sub-queue that gained visible
    /// messages, first come first served.
    fn serve_gained(&mut self) {
        while !self.gained.is_empty() {
            let q = self.gained.remove(0);
            if self
                .queues
                .get((q >> 1) as usize)
                .is_none_or(|x| x.is_none())
            {
                continue;
            }
            let mut next = self.sub(q).waiters.head;
            while next != NIL && self.sub(q).counts.visible > 0 {
                let slot = next;
                next = self.waiters[slot as usize].next;
                let waiter = self.waiters[slot as usize].waiter.as_ref().expect("parked");
                let (max, budget, visibility_ms, filter) = (
                    waiter.max,
                    waiter.budget,
                    waiter.visibility_ms,
                    waiter.filter.clone(),
                );
                let mut out = Vec::new();
                self.take_visible(
                    q,
                    &Take {
                        max,
                        budget,
                        visibility_ms,
                        filter: filter.as_ref(),
                    },
                    &mut out,
                );
                if out.is_empty() {
                    continue;
                }
                let mut waiter = self.take_waiter(slot).expect("parked");
                if let Some(notify) = waiter.notify.take() {
                    self.completions.push((notify, Ok(out)));
                }
            }
        }
    }

    // ----- receipts ---------------------------------------------------------

    /// The slot a receipt names, if it belongs to sub-queue `q` of this queue.
    fn resolve(&self, q: u32, receipt: &Receipt) -> Result<u32, Error> {
        self.key.verify(receipt)?;
        let queue = self.queue(q >> 1);
        if receipt.queue_id != queue.id {
            return Err(Error::ReceiptStale);
        }
        match self.records.get(receipt.slot as usize) {
            Some(r) if r.q == q => Ok(receipt.slot),
            // The tag proved this engine issued it: a slot given back since
            // (the slab was trimmed) held a lease that has ended.
            Some(_) | None => Err(Error::ReceiptStale),
        }
    }

    fn end_lease(&mut self, q: u32, receipt: &Receipt, end: LeaseEnd) -> Result<u32, Error> {
        let slot = self.resolve(q, receipt)?;
        self.records[slot as usize]
            .word
            .end_lease(receipt.generation, end)
            .map_err(|refused| match refused {
                Refused::Stale | Refused::WrongState(_) => Error::ReceiptStale,
            })?;
        self.leave_state(slot, MessageState::InFlight);
        Ok(slot)
    }

    /// Deletes leased messages by receipt.
    pub fn delete(
        &mut self,
        addr: Address<'_>,
        receipts: &[Receipt],
        now: u64,
    ) -> Result<Vec<EntryResult<()>>, Error> {
        self.advance(now);
        let qslot = self.queue_slot(addr.queue)?;
        let q = qslot << 1 | u32::from(addr.dlq);
        let answers = receipts
            .iter()
            .map(|receipt| {
                let slot = self.end_lease(q, receipt, LeaseEnd::Delete)?;
                self.queue_mut(qslot).counters.deletes += 1;
                emit!(
                    self,
                    Event::Removed {
                        at: self.spot(slot)
                    }
                );
                self.detach(slot);
                self.free(slot);
                Ok(())
            })
            .collect();
        Ok(answers)
    }

    /// Moves leases' next-visible times; 0 releases the message at once.
    /// Answers each entry's new next-visible time.
    pub fn update_visibility(
        &mut self,
        addr: Address<'_>,
        changes: &[VisibilityChange],
        now: u64,
    ) -> Result<Vec<EntryResult<u64>>, Error> {
        self.advance(now);
        let qslot = self.queue_slot(addr.queue)?;
        let q = qslot << 1 | u32::from(addr.dlq);
        let now = self.now;
        let answers = changes
            .iter()
            .map(|change| {
                crate::error::check_range(
                    "timeout_ms",
                    change.timeout_ms,
                    0,
                    crate::limits::VISIBILITY_MS_MAX,
                    " ms",
                )?;
                let visible_at = now + change.timeout_ms;
                if change.timeout_ms == 0 {
                    let slot = self.end_lease(q, &change.receipt, LeaseEnd::Release)?;
                    self.records[slot as usize].visible_at = visible_at;
                    if self.records[slot as usize].expires_at <= now {
                        // Its lease outlived its life: it expires as it is released.
                        self.enter_state(slot, MessageState::Visible);
                        self.expire(slot, now);
                    } else {
                        self.enter_visible(slot);
                    }
                } else {
                    let slot = self.resolve(q, &change.receipt)?;
                    self.records[slot as usize]
                        .word
                        .hold(change.receipt.generation)
                        .map_err(|_| Error::ReceiptStale)?;
                    self.records[slot as usize].visible_at = visible_at;
                    self.set_timer(slot, visible_at);
                }
                Ok(visible_at)
            })
            .collect();
        self.serve_gained();
        Ok(answers)
    }

    /// Defers a leased message: only receive-deferred can take it again.
    pub fn defer(&mut self, name: &str, receipt: &Receipt, now: u64) -> Result<(), Error> {
        self.advance(now);
        let qslot = self.queue_slot(name)?;
        let slot = self.end_lease(qslot << 1 | MAIN, receipt, LeaseEnd::Defer)?;
        self.clear_timer(slot);
        self.enter_state(slot, MessageState::Deferred);
        emit!(
            self,
            Event::Deferred {
                at: self.spot(slot),
                deferred: true,
            }
        );
        Ok(())
    }

    /// Dead-letters a leased message with the consumer's reason.
    pub fn dead_letter(
        &mut self,
        name: &str,
        receipt: &Receipt,
        reason: String,
        description: String,
        now: u64,
    ) -> Result<(), Error> {
        if reason.len() > crate::limits::DEAD_LETTER_REASON_LEN_MAX {
            return Err(Error::invalid(
                "reason",
                format!(
                    "at most {} bytes (got {})",
                    crate::limits::DEAD_LETTER_REASON_LEN_MAX,
                    reason.len()
                ),
            ));
        }
        if description.len() > crate::limits::DEAD_LETTER_DESCRIPTION_LEN_MAX {
            return Err(Error::invalid(
                "description",
                format!(
                    "at most {} bytes (got {})",
                    crate::limits::DEAD_LETTER_DESCRIPTION_LEN_MAX,
                    description.len()
                ),
            ));
        }
        self.advance(now);
        let qslot = self.queue_slot(name)?;
        let q = qslot << 1 | MAIN;
        let slot = self.resolve(q, receipt)?;
        self.records[slot as usize]
            .word
            .hold(receipt.generation)
            .map_err(|_| Error::ReceiptStale)?;
        let now = self.now;
        self.dead_letter_slot(
            slot,
            DeadLetterReason::Consumer {
                reason,
                description,
            },
            now,
        );
        self.serve_gained();
        Ok(())
    }

    /// Moves a main-queue message (in any state) to the DLQ or the target.
    fn dead_letter_slot(&mut self, slot: u32, reason: DeadLetterReason, t: u64) {
        let state = self.records[slot as usize].word.load().state;
        self.leave_state(slot, state);
        self.dead_letter_uncounted(slot, reason, t);
    }

    /// [`Shard::dead_letter_slot`] for a message already counted out of its
    /// state (popped from its ring by a receive).
    fn dead_letter_uncounted(&mut self, slot: u32, reason: DeadLetterReason, t: u64) {
        let q = self.records[slot as usize].q;
        debug_assert_eq!(q & 1, MAIN);
        let qslot = q >> 1;
        let queue = self.queue_mut(qslot);
        queue.counters.dead_letterings += 1;
        let source = queue.name.clone();
        let target = queue.settings.dead_letter_target.clone();
        let retention = queue.settings.retention_ms;
        let info = Arc::new(DeadLetter {
            source_queue: source.clone(),
            at_ms: t,
            reason,
            delivery_count: self.records[slot as usize].word.load().delivery_count,
        });
        // A dead letter forwarded here from another queue that dies again
        // stays in this queue's own DLQ: a message is forwarded at most once,
        // so two queues targeting each other cannot pass it back and forth.
        let forwarded = self.records[slot as usize]
            .extra
            .as_ref()
            .is_some_and(|e| e.dead_letter.is_some());
        let state = self.records[slot as usize].word.load().state;
        if let Some(target) = target.filter(|t| **t != *source && !forwarded) {
            let message = self.message(slot, State::DeadLettered, None);
            self.outbox.push(Outbound {
                target,
                source_queue: self.queue(qslot).id,
                source,
                source_seq: message.seq,
                inserted_at: message.inserted_at_ms,
                at_ms: t,
                payload: message.payload,
                attributes: message.attributes,
                channel: message.channel,
                id: message.id,
                delivery_count: message.delivery_count,
                dead_letter: info,
            });
            self.remove_uncounted(slot);
            return;
        }
        let channel = self.sub(q).channels[self.records[slot as usize].channel as usize]
            .name
            .clone();
        let from = self.spot(slot);
        self.detach(slot);
        let r = &mut self.records[slot as usize];
        r.word.shift(state, MessageState::Visible).expect("owned");
        r.expires_at = t + retention;
        r.visible_at = t;
        r.extra.get_or_insert_with(Box::default).dead_letter = Some(info);
        self.attach(slot, qslot << 1 | DLQ, channel.as_ref());
        emit!(
            self,
            Event::Stored {
                message: self.view(slot),
                from: Some(from),
            }
        );
        self.enter_visible(slot);
    }

    /// Takes deferred messages by sequence number, leasing each like a
    /// receive. Expired ones are expired now and answer `expired`.
    pub fn receive_deferred(
        &mut self,
        name: &str,
        seqs: &[u64],
        visibility_ms: Option<u64>,
        now: u64,
    ) -> Result<Vec<EntryResult<Message>>, Error> {
        if let Some(v) = visibility_ms {
            crate::error::check_range(
                "visibility_ms",
                v,
                0,
                crate::limits::VISIBILITY_MS_MAX,
                " ms",
            )?;
        }
        self.advance(now);
        let qslot = self.queue_slot(name)?;
        let q = qslot << 1 | MAIN;
        let settings = &self.queue(qslot).settings;
        let visibility_ms = visibility_ms.unwrap_or(settings.visibility_timeout_ms);
        let max_deliveries = settings.max_deliveries;
        let now = self.now;
        let answers = seqs
            .iter()
            .map(|&seq| {
                let slot = self
                    .sub(q)
                    .index
                    .get(seq)
                    .filter(|slot| self.live(*slot, q, seq))
                    .filter(|slot| {
                        self.records[*slot as usize].word.load().state == MessageState::Deferred
                    })
                    .ok_or(Error::NotFound {
                        seq,
                        what: "deferred",
                    })?;
                let r = &self.records[slot as usize];
                if r.expires_at <= now {
                    self.expire(slot, now);
                    return Err(Error::Expired { seq });
                }
                if max_deliveries > 0 && r.word.load().delivery_count >= max_deliveries {
                    self.dead_letter_slot(slot, DeadLetterReason::MaxDeliveries, now);
                    return Err(Error::NotFound {
                        seq,
                        what: "deliverable deferred (max_deliveries reached: dead-lettered)",
                    });
                }
                self.leave_state(slot, MessageState::Deferred);
                emit!(
                    self,
                    Event::Deferred {
                        at: self.spot(slot),
                        deferred: false,
                    }
                );
                let message = self.deliver(slot, MessageState::Deferred, visibility_ms);
                if visibility_ms == 0 {
                    self.enter_visible(slot);
                }
                Ok(message)
            })
            .collect();
        self.serve_gained();
        Ok(answers)
    }

    /// Messages in sequence order from `from`, in every state, unchanged.
    pub fn peek(
        &mut self,
        addr: Address<'_>,
        from: u64,
        max: u32,
        now: u64,
    ) -> Result<Vec<Message>, Error> {
        crate::error::check_range("max_messages", max.into(), 1, PEEK_MAX.into(), "")?;
        self.advance(now);
        let qslot = self.queue_slot(addr.queue)?;
        let q = qslot << 1 | u32::from(addr.dlq);
        let slots: Vec<u32> = self
            .sub(q)
            .index
            .from(from)
            .filter(|(seq, slot)| self.live(*slot, q, *seq))
            .map(|(_, slot)| slot)
            .take(max as usize)
            .collect();
        Ok(slots
            .into_iter()
            .map(|slot| self.message(slot, self.public_state(slot), None))
            .collect())
    }

    // ----- redrive ----------------------------------------------------------

    /// Moves visible dead letters back to the queue in sequence order: up to
    /// `max` (all when `None`), at most `rate` a second when given.
    pub fn redrive(
        &mut self,
        name: &str,
        max: Option<u64>,
        rate: Option<u32>,
        now: u64,
    ) -> Result<RedriveOutcome, Error> {
        if max == Some(0) {
            return Err(Error::invalid(
                "max_messages",
                "must be at least 1 when given",
            ));
        }
        if rate == Some(0) {
            return Err(Error::invalid(
                "rate_per_second",
                "must be at least 1 when given",
            ));
        }
        self.advance(now);
        let qslot = self.queue_slot(name)?;
        if let Some(job) = self.queue_mut(qslot).redrive.take() {
            self.wheel.cancel(job.timer);
        }
        let now = self.now;
        let first = match rate {
            None => max.unwrap_or(u64::MAX),
            Some(r) => max.unwrap_or(u64::MAX).min(u64::from(r)),
        };
        let moved = self.redrive_move(qslot, first, now);
        let left = self.sub(qslot << 1 | DLQ).counts.visible;
        let remaining = max.map(|m| m - moved);
        let mut scheduled = 0;
        if let Some(rate) = rate {
            if moved == first && remaining != Some(0) && left > 0 {
                scheduled = remaining.map_or(left, |r| r.min(left));
                let timer = self
                    .wheel
                    .insert(now + 1_000, Timer::new(Timer::REDRIVE, qslot));
                self.queue_mut(qslot).redrive = Some(RedriveJob {
                    remaining,
                    rate,
                    timer,
                });
            }
        }
        self.serve_gained();
        Ok(RedriveOutcome { moved, scheduled })
    }

    fn redrive_tick(&mut self, qslot: u32, t: u64) {
        let Some(job) = self.queue_mut(qslot).redrive.take() else {
            return;
        };
        let batch = job.remaining.unwrap_or(u64::MAX).min(u64::from(job.rate));
        let moved = self.redrive_move(qslot, batch, t);
        let remaining = job.remaining.map(|r| r - moved);
        if moved == batch && remaining != Some(0) && self.sub(qslot << 1 | DLQ).counts.visible > 0 {
            let timer = self
                .wheel
                .insert(t + 1_000, Timer::new(Timer::REDRIVE, qslot));
            self.queue_mut(qslot).redrive = Some(RedriveJob {
                remaining,
                rate: job.rate,
                timer,
            });
        }
    }

    fn redrive_move(&mut self, qslot: u32, max: u64, t: u64) -> u64 {
        let dlq = qslot << 1 | DLQ;
        let slots: Vec<u32> = self
            .sub(dlq)
            .index
            .from(0)
            .map(|(_, slot)| slot)
            .filter(|slot| self.records[*slot as usize].word.load().state == MessageState::Visible)
            .take(usize::try_from(max).unwrap_or(usize::MAX))
            .collect();
        for &slot in &slots {
            let channel = self.sub(dlq).channels[self.records[slot as usize].channel as usize]
                .name
                .clone();
            let id = self.message(slot, State::DeadLettered, None).id;
            self.leave_state(slot, MessageState::Visible);
            self.detach(slot);
            let queue = self.queue_mut(qslot);
            let seq = queue.next_seq;
            queue.next_seq += 1;
            queue.counters.redriven += 1;
            let retention = queue.settings.retention_ms;
            let r = &mut self.records[slot as usize];
            let from_seq = r.seq;
            r.seq = seq;
            r.inserted_at = t;
            r.expires_at = t + retention;
            r.visible_at = t;
            let extra = r.extra.get_or_insert_with(Box::default);
            extra.dead_letter = None;
            extra.id = Some(id);
            r.word
                .shift(MessageState::Visible, MessageState::Visible)
                .expect("owned");
            r.word.set_delivery_count(0);
            self.attach(slot, qslot << 1 | MAIN, channel.as_ref());
            let from = Spot {
                queue: self.queue(qslot).id,
                dlq: true,
                seq: from_seq,
            };
            emit!(
                self,
                Event::Stored {
                    message: self.view(slot),
                    from: Some(from),
                }
            );
            self.enter_visible(slot);
        }
        slots.len() as u64
    }

    // ----- dead-letter targets ------------------------------------------------

    /// Takes in a dead letter from another queue as a new visible message.
    // The dead letter comes back whole when refused; it is moved, not copied.
    #[allow(clippy::result_large_err)]
    pub(crate) fn accept_forward(&mut self, out: Outbound, now: u64) -> Result<(), Outbound> {
        self.advance(now);
        let Ok(qslot) = self.queue_slot(&out.target) else {
            return Err(out);
        };
        let len = out.payload.len() as u64 + attributes_bytes(out.attributes.as_ref());
        if self
            .check_capacity(qslot, out.channel.as_deref(), len)
            .is_err()
            || self.budget.reserve_message(len).is_err()
        {
            return Err(out);
        }
        let now = self.now;
        let queue = self.queue_mut(qslot);
        let seq = queue.next_seq;
        queue.next_seq += 1;
        queue.counters.puts += 1;
        let retention = queue.settings.retention_ms;
        let slot = self.alloc();
        let r = &mut self.records[slot as usize];
        r.payload = out.payload;
        r.seq = seq;
        r.inserted_at = now;
        r.expires_at = now + retention;
        r.visible_at = now;
        r.extra = Some(Box::new(Extra {
            attributes: out.attributes,
            dead_letter: Some(out.dead_letter),
            id: Some(out.id),
        }));
        // It starts afresh in its target: no deliveries there yet (its
        // earlier count stays in its dead-letter record).
        r.word.occupy(MessageState::Visible, 0).expect("free slot");
        self.attach(slot, qslot << 1 | MAIN, out.channel.as_ref());
        let from = Spot {
            queue: out.source_queue,
            dlq: false,
            seq: out.source_seq,
        };
        emit!(
            self,
            Event::Stored {
                message: self.view(slot),
                from: Some(from),
            }
        );
        self.enter_visible(slot);
        self.serve_gained();
        Ok(())
    }

    /// Takes back a dead letter that its target could not take, into the
    /// source queue's own DLQ. Dropped if the source is gone too.
    pub(crate) fn accept_bounce(&mut self, out: Outbound, now: u64) {
        self.advance(now);
        let Ok(qslot) = self.queue_slot(&out.source) else {
            return;
        };
        let retention = self.queue(qslot).settings.retention_ms;
        // It was stored before it left: keep it whatever the budget says.
        self.budget
            .force_message(out.payload.len() as u64 + attributes_bytes(out.attributes.as_ref()));
        let slot = self.alloc();
        let r = &mut self.records[slot as usize];
        let at = out.at_ms;
        r.payload = out.payload;
        r.seq = out.source_seq;
        r.inserted_at = out.inserted_at;
        r.expires_at = at + retention;
        r.visible_at = at;
        r.extra = Some(Box::new(Extra {
            attributes: out.attributes,
            dead_letter: Some(out.dead_letter),
            id: Some(out.id),
        }));
        r.word
            .occupy(MessageState::Visible, out.delivery_count)
            .expect("free slot");
        self.attach(slot, qslot << 1 | DLQ, out.channel.as_ref());
        let from = Spot {
            queue: out.source_queue,
            dlq: false,
            seq: out.source_seq,
        };
        emit!(
            self,
            Event::Stored {
                message: self.view(slot),
                from: Some(from),
            }
        );
        self.enter_visible(slot);
        self.serve_gained();
    }
}
