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
mod sub;

use sub::{Channel, SeqIndex, SubQueue};

const NIL: u32 = u32::MAX;
const MAIN: u32 = 0;
const DLQ: u32 = 1;

/// A sub-queue of this shard: a queue's slot and which half of it, the
/// queue itself or its DLQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct SubId(u32);

impl SubId {
    /// No sub-queue (a free slot's).
    const NONE: SubId = SubId(NIL);

    fn of(queue: u32, dlq: bool) -> SubId {
        SubId(queue << 1 | u32::from(dlq))
    }
    fn main(queue: u32) -> SubId {
        SubId::of(queue, false)
    }
    fn dlq(queue: u32) -> SubId {
        SubId::of(queue, true)
    }
    /// The queue's slot.
    fn queue(self) -> u32 {
        self.0 >> 1
    }
    fn is_dlq(self) -> bool {
        self.0 & 1 == DLQ
    }
    /// Its index in the queue's `subs`.
    fn half(self) -> usize {
        (self.0 & 1) as usize
    }
}

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

/// What a pending timer is for. At one instant they run messages first,
/// then redrive ticks, then long-poll deadlines (the variants' order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timer {
    /// A message's lease end, delay end or expiry: its slot.
    Message(u32),
    /// A paced redrive's next tick: its queue's slot.
    Redrive(u32),
    /// A parked receive's deadline: its waiter slot.
    Waiter(u32),
}

impl Default for Timer {
    /// The wheel's placeholder in free entries; never fires.
    fn default() -> Timer {
        Timer::Message(NIL)
    }
}

impl Timer {
    /// Rank among timers due at one instant.
    fn rank(self) -> u8 {
        match self {
            Timer::Message(_) => 0,
            Timer::Redrive(_) => 1,
            Timer::Waiter(_) => 2,
        }
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
    /// Owning sub-queue.
    q: SubId,
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
    q: SubId,
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
    gained: Vec<SubId>,
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

mod invariants;
mod moves;
mod queues;
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

    fn sub_mut(&mut self, q: SubId) -> &mut SubQueue {
        &mut self.queue_mut(q.queue()).subs[q.half()]
    }

    fn sub(&self, q: SubId) -> &SubQueue {
        &self.queue(q.queue()).subs[q.half()]
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
                match *timer {
                    Timer::Message(slot) => self.records[slot as usize].timer = NIL,
                    Timer::Waiter(slot) => {
                        if let Some(w) = self.waiters[slot as usize].waiter.as_mut() {
                            w.timer = None;
                        }
                    }
                    // The redrive job forgets its key when the tick runs.
                    Timer::Redrive(_) => {}
                }
            }
            fired.sort_unstable_by(|a, b| self.timer_order(a, b));
            for (deadline, timer) in fired.drain(..) {
                self.now = self.now.max(deadline);
                match timer {
                    Timer::Message(slot) => self.message_timer(slot, deadline),
                    Timer::Redrive(qslot) => self.redrive_tick(qslot, deadline),
                    Timer::Waiter(slot) => self.waiter_deadline(slot),
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
            .then(a.1.rank().cmp(&b.1.rank()))
            .then_with(|| match (a.1, b.1) {
                (Timer::Message(x), Timer::Message(y)) => {
                    let (ra, rb) = (&self.records[x as usize], &self.records[y as usize]);
                    self.queue(ra.q.queue())
                        .name
                        .cmp(&self.queue(rb.q.queue()).name)
                        .then(ra.q.is_dlq().cmp(&rb.q.is_dlq()))
                        .then(ra.seq.cmp(&rb.seq))
                }
                (Timer::Redrive(x), Timer::Redrive(y)) => {
                    self.queue(x).name.cmp(&self.queue(y).name)
                }
                (Timer::Waiter(x), Timer::Waiter(y)) => {
                    let order = |slot: u32| {
                        self.waiters[slot as usize]
                            .waiter
                            .as_ref()
                            .map_or(0, |w| w.order)
                    };
                    order(x).cmp(&order(y))
                }
                // Different kinds were ordered by rank above.
                _ => std::cmp::Ordering::Equal,
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
        let queue = self.queue_mut(q.queue());
        queue.counters.expiries += 1;
        if !q.is_dlq() && queue.settings.dead_letter_on_expiration {
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
            let key = self.wheel.insert(deadline, Timer::Message(slot));
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
    fn attach(&mut self, slot: u32, q: SubId, channel: Option<&Arc<str>>) {
        let (seq, len) = {
            let r = &self.records[slot as usize];
            (r.seq, r.bytes())
        };
        let queue = self.queue_mut(q.queue());
        queue.messages += 1;
        queue.bytes += len;
        let sub = &mut queue.subs[q.half()];
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
        let queue = self.queue_mut(q.queue());
        queue.messages -= 1;
        queue.bytes -= len;
        let sub = &mut queue.subs[q.half()];
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
    fn maybe_compact(&mut self, q: SubId, seq: u64) {
        if q.is_dlq() {
            return;
        }
        let records = &self.records;
        let queue = self.queues[q.queue() as usize].as_mut().expect("live");
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
        r.q = SubId::NONE;
        self.free_slots.push(slot);
    }

    fn message(&self, slot: u32, state: State, receipt: Option<Receipt>) -> Message {
        let r = &self.records[slot as usize];
        let queue = self.queue(r.q.queue());
        let extra = r.extra.as_deref();
        Message {
            id: extra
                .and_then(|e| e.id)
                .unwrap_or_else(|| message_id(queue.id, r.seq)),
            seq: r.seq,
            payload: r.payload.clone(),
            attributes: extra.and_then(|e| e.attributes.clone()),
            channel: queue.subs[r.q.half()].channels[r.channel as usize]
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
            queue: self.queue(r.q.queue()).id,
            dlq: r.q.is_dlq(),
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

    /// Logs the message now in `slot` as stored (moved from `from`).
    fn log_stored(&mut self, slot: u32, from: Option<Spot>) {
        emit!(
            self,
            Event::Stored {
                message: self.view(slot),
                from,
            }
        );
    }

    fn public_state(&self, slot: u32) -> State {
        let r = &self.records[slot as usize];
        match r.word.load().state {
            MessageState::Visible if r.q.is_dlq() => State::DeadLettered,
            MessageState::Visible => State::Visible,
            MessageState::InFlight => State::InFlight,
            MessageState::Delayed => State::Delayed,
            MessageState::Deferred => State::Deferred,
            MessageState::Free => unreachable!("peek shows live messages"),
        }
    }
}
