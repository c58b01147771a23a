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
    /// Handles on the ring that may be given (its ungrouped visible
    /// messages and its groups' queued heads): the channel is in the round
    /// while it has one.
    pub(super) ready: u32,
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
        self.name.take()
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
            held: 0,
            bytes: 0,
        }
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
