//! A sub-queue (the queue itself, or its DLQ): its channels and the round
//! they take turns in, its sequence index, its counts.

use super::*;

pub(super) struct Channel {
    pub(super) name: Option<Arc<str>>,
    /// A visible message popped and put back (it did not fit a receive's
    /// byte budget): the channel's next, before the ring.
    pub(super) front: Option<u64>,
    pub(super) ring: ReadyRing,
    /// Neighbours in the sub-queue's round of channels with visible
    /// messages (`NIL` at the ends), and whether it is in the round.
    pub(super) prev: u32,
    pub(super) next: u32,
    pub(super) in_round: bool,
    pub(super) visible: u32,
    /// Handles on the rings that may be given (its ungrouped visible
    /// messages and its groups' queued heads): the channel is in the round
    /// while it has one.
    pub(super) ready: u32,
    /// Rings of priority levels above 1, made with the first handle of one.
    pub(super) levels: Option<Box<Levels>>,
    pub(super) held: u64,
    pub(super) bytes: u64,
}

impl Channel {
    /// Frees an emptied channel's slot for the next channel made in it:
    /// its name goes, its ring keeps its room (up to the ring's own bound),
    /// so a channel that empties and refills allocates nothing.
    pub(super) fn vacate(&mut self) -> Option<Arc<str>> {
        debug_assert!(self.ring.is_empty() && self.front.is_none() && !self.in_round);
        self.ring.shrink_if_empty();
        (
            self.prev,
            self.next,
            self.visible,
            self.ready,
            self.held,
            self.bytes,
        ) = (NIL, NIL, 0, 0, 0, 0);
        self.levels = None;
        self.name.take()
    }

    /// Pushes a handle that may be given at priority `level`; answers
    /// whether that made the channel's [`Levels`] (its first handle above
    /// level 1), which [`LEVELS_BYTES`] then count.
    pub(super) fn push(&mut self, level: u8, h: u64) -> bool {
        self.ready += 1;
        if level == 1 && self.levels.is_none() {
            self.ring.push_or_grow(h);
            return false;
        }
        let made = self.levels.is_none();
        let ready = self.ready - 1;
        let levels = self.levels.get_or_insert_with(|| Levels::new(ready));
        levels.ready[usize::from(level - 1)] += 1;
        match level {
            1 => self.ring.push_or_grow(h),
            _ => levels.rings[usize::from(level - 2)].push_or_grow(h),
        }
        made
    }

    /// Puts a popped handle of priority `level` back first.
    pub(super) fn put_front(&mut self, level: u8, h: u64) {
        debug_assert!(self.front.is_none(), "a popped message was the front");
        self.front = Some(h);
        self.ready += 1;
        if let Some(levels) = self.levels.as_mut() {
            levels.ready[usize::from(level - 1)] += 1;
        }
    }

    /// Counts a handle of priority `level` off (its entry stays behind and
    /// is skipped when popped); answers whether none is left.
    pub(super) fn unready(&mut self, level: u8) -> bool {
        self.ready -= 1;
        if let Some(levels) = self.levels.as_mut() {
            let n = &mut levels.ready[usize::from(level - 1)];
            *n -= 1;
            if *n == 0 && level > 1 {
                let ring = &mut levels.rings[usize::from(level - 2)];
                ring.clear();
                ring.shrink_if_empty();
            }
        }
        if self.ready > 0 {
            return false;
        }
        self.front = None;
        self.ring.clear();
        self.ring.shrink_if_empty();
        true
    }

    /// The level the next delivery comes from ([`Levels::pick`];
    /// `fairness` the queue's `priority_fairness`).
    pub(super) fn pick(&mut self, fairness: u32) -> u8 {
        self.levels.as_mut().map_or(1, |l| l.pick(fairness))
    }

    /// Pops the next entry of `level`.
    pub(super) fn pop_at(&mut self, level: u8) -> Option<u64> {
        match (level, self.levels.as_mut()) {
            (1, _) | (_, None) => self.ring.pop(),
            (level, Some(levels)) => levels.rings[usize::from(level - 2)].pop(),
        }
    }

    pub(super) fn new(name: Option<Arc<str>>) -> Channel {
        Channel {
            name,
            front: None,
            ring: ReadyRing::default(),
            prev: NIL,
            next: NIL,
            in_round: false,
            visible: 0,
            ready: 0,
            levels: None,
            held: 0,
            bytes: 0,
        }
    }
}

/// What a channel's [`Levels`] count against `max_stored_bytes` while it
/// has them (its rings' own buffers grow with messages, which count their
/// entries).
pub(crate) const LEVELS_BYTES: u64 = std::mem::size_of::<Levels>() as u64;

/// A channel's priority levels above 1: their rings, what may be given at
/// each level, and the fairness rule's count and cursor.
pub(super) struct Levels {
    rings: [ReadyRing; 9],
    /// Handles that may be given, per level (index: level less one).
    pub(super) ready: [u32; 10],
    /// Deliveries picked while two levels or more had messages.
    chosen: u32,
    /// The level the last fair pick took from (0: none yet).
    cursor: u8,
}

impl Levels {
    fn new(level_one: u32) -> Box<Levels> {
        let mut ready = [0; 10];
        ready[0] = level_one;
        Box::new(Levels {
            rings: Default::default(),
            ready,
            chosen: 0,
            cursor: 0,
        })
    }

    /// The level the next delivery comes from: the highest with messages;
    /// but with `fairness` N > 0, every N-th pick made while two levels or
    /// more have messages comes from a lower one — the highest below the
    /// level the last such pick took from, wrapping back to the highest
    /// below the top — so every waiting level is served at least once
    /// every N × (levels waiting − 1) deliveries of its channel.
    fn pick(&mut self, fairness: u32) -> u8 {
        let top = (0..10u8)
            .rev()
            .find(|l| self.ready[usize::from(*l)] > 0)
            .map_or(1, |l| l + 1);
        let ready = self.ready;
        let below = |under: u8| (1..under).rev().find(|l| ready[usize::from(l - 1)] > 0);
        if fairness == 0 || below(top).is_none() {
            return top;
        }
        self.chosen = self.chosen.wrapping_add(1);
        if !self.chosen.is_multiple_of(fairness) {
            return top;
        }
        let level = below(self.cursor.min(top))
            .or_else(|| below(top))
            .expect("a level below the top has messages");
        self.cursor = level;
        level
    }
}

/// Sequence numbers to slots. The queue's own messages are appended in
/// sequence order, so a log with lazy removal serves (an entry is live when
/// its slot still holds that sequence number in this sub-queue); the DLQ
/// receives messages out of order and keeps a tree.
pub(super) enum SeqIndex {
    Log {
        seqs: VecDeque<u64>,
        slots: VecDeque<u32>,
    },
    Tree(BTreeMap<u64, u32>),
}

impl SeqIndex {
    pub(super) fn insert(&mut self, seq: u64, slot: u32) {
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

    pub(super) fn remove(&mut self, seq: u64) {
        if let SeqIndex::Tree(t) = self {
            t.remove(&seq);
        }
    }

    /// Candidates with sequence number `>= from`, in order.
    pub(super) fn from(&self, from: u64) -> Box<dyn Iterator<Item = (u64, u32)> + '_> {
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

    pub(super) fn get(&self, seq: u64) -> Option<u32> {
        match self {
            SeqIndex::Log { seqs, slots } => seqs.binary_search(&seq).ok().map(|i| slots[i]),
            SeqIndex::Tree(t) => t.get(&seq).copied(),
        }
    }
}

#[derive(Default)]
pub(super) struct Counts {
    pub(super) visible: u64,
    pub(super) in_flight: u64,
    pub(super) delayed: u64,
    pub(super) deferred: u64,
}

impl Counts {
    pub(super) fn of(&mut self, state: MessageState) -> &mut u64 {
        match state {
            MessageState::Visible => &mut self.visible,
            MessageState::InFlight => &mut self.in_flight,
            MessageState::Delayed => &mut self.delayed,
            MessageState::Deferred => &mut self.deferred,
            MessageState::Free => unreachable!("a free slot has no count"),
        }
    }
}

pub(super) struct SubQueue {
    pub(super) channels: Vec<Channel>,
    pub(super) channel_ids: HashMap<Arc<str>, u32>,
    pub(super) free_channels: Vec<u32>,
    /// Channels with visible messages, in round-robin order: a doubly
    /// linked list through the channels, so entering, leaving and rotating
    /// are O(1) however many channels there are.
    pub(super) round: Links,
    /// The named channels of the round by name, so a prefix filter finds
    /// its next channel in O(log channels).
    pub(super) round_names: BTreeMap<Arc<str>, u32>,
    /// The channel a prefix-filtered receive was last served from: the
    /// next one starts after it (round-robin in name order).
    pub(super) prefix_cursor: Option<Arc<str>>,
    pub(super) index: SeqIndex,
    pub(super) counts: Counts,
    pub(super) held: u64,
    /// Parked receives, first come first served: a doubly linked list
    /// through [`WaiterSlot`]s, so any one leaves in O(1).
    pub(super) waiters: Links,
    /// The expiries of its covered messages (the queue's own half only).
    pub(super) expiry: ExpiryCursor,
    /// Its message groups (the queue's own half only; none yet: `None`).
    pub(super) groups: Option<Box<super::groups::Groups>>,
    /// A message above priority level 1 was stored in it (a group's head's
    /// level is read from its record only then).
    pub(super) leveled: bool,
}

/// Head and tail of an intrusive list (a sub-queue's round of channels, or
/// its parked receives); `NIL` when empty.
#[derive(Clone, Copy)]
pub(super) struct Links {
    pub(super) head: u32,
    pub(super) tail: u32,
}

impl Links {
    pub(super) const EMPTY: Links = Links {
        head: NIL,
        tail: NIL,
    };
}

impl SubQueue {
    pub(super) fn new(dlq: bool) -> SubQueue {
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
            expiry: ExpiryCursor::default(),
            groups: None,
            leveled: false,
        }
    }

    /// The id of channel `name` (0 for none), made when it is new: only a
    /// new channel allocates its name.
    pub(super) fn channel_id(&mut self, name: Option<&str>) -> u32 {
        let Some(name) = name else { return 0 };
        if let Some(id) = self.channel_ids.get(name) {
            return *id;
        }
        let name: Arc<str> = Arc::from(name);
        let id = match self.free_channels.pop() {
            Some(id) => {
                self.channels[id as usize].name = Some(name.clone());
                id
            }
            None => {
                self.channels.push(Channel::new(Some(name.clone())));
                (self.channels.len() - 1) as u32
            }
        };
        self.channel_ids.insert(name, id);
        id
    }

    pub(super) fn channel_held(&self, name: Option<&str>) -> (u64, u64) {
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
    pub(super) fn enter_round(&mut self, channel: u32, front: bool) {
        let c = &mut self.channels[channel as usize];
        debug_assert!(!c.in_round);
        c.in_round = true;
        if let Some(name) = &c.name {
            self.round_names.insert(name.clone(), channel);
        }
        self.link(channel, front);
    }

    /// Links a channel into the round list at the back (or the front).
    pub(super) fn link(&mut self, channel: u32, front: bool) {
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
    pub(super) fn leave_round(&mut self, channel: u32) {
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
    pub(super) fn unlink(&mut self, channel: u32) {
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
    pub(super) fn rotate(&mut self, channel: u32) {
        if self.channels[channel as usize].in_round && self.round.tail != channel {
            self.unlink(channel);
            self.link(channel, false);
        }
    }

    /// What its channels' [`Levels`] count (given back when the half goes).
    pub(super) fn levels_bytes(&self) -> u64 {
        self.channels.iter().filter(|c| c.levels.is_some()).count() as u64 * LEVELS_BYTES
    }

    /// The next channel with visible messages whose name starts with the
    /// (non-empty) `prefix`: the first after the prefix cursor, else the
    /// first of all.
    pub(super) fn next_with_prefix(&self, prefix: &str) -> Option<u32> {
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
