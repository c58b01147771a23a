//! Message groups: the messages of one group (a put's group key, within
//! its channel) are delivered in sequence order, one at a time.
//!
//! A group lives in its queue's own half (a DLQ keeps a dead letter's key
//! but does not order by it) while it has members: its messages that are
//! visible, delayed or leased, by sequence number (a deferred message is
//! set aside and rejoins at its place when it is received again). Only the
//! first member, the head, may be delivered, and only while no message of
//! the group is leased. The channel's rings hold an entry for each group
//! whose head may be given (`queued`; the entry names the group and a
//! ticket, not the message) beside its ungrouped visible messages, at the
//! head's priority level, so receives take groups in turn as they take
//! messages in turn: a group whose head was delivered joins the back of
//! the ring when it is free again.
//!
//! Every change goes through the ledger ([`Shard::enter_state`],
//! [`Shard::leave_state`], [`Shard::detach`]), which calls `group_join`,
//! `group_leave`, `group_quit` and `group_refresh` here;
//! `check_invariants` recomputes all of it (`check_groups`, in invariants.rs).

use std::hash::BuildHasher;

use super::*;

/// What a group counts against `max_stored_bytes` while it has messages
/// (its slot and ticket, the table's entry, its key's allocation, its
/// members' ring at its smallest; its key's bytes beside): 189 bytes with
/// a 10-byte key, measured (`--example memory -- --groups`).
pub const GROUP_OVERHEAD_BYTES: u64 = 192;

/// What a grouped message counts against `max_stored_bytes` beyond an
/// ungrouped one (its boxed extra part and its place among its group's
/// members): 94 bytes, measured.
pub const GROUPED_MESSAGE_BYTES: u64 = 96;

/// [`GROUPED_MESSAGE_BYTES`] for a message that is grouped, else 0.
pub(crate) fn grouped_bytes(grouped: bool) -> u64 {
    if grouped {
        GROUPED_MESSAGE_BYTES
    } else {
        0
    }
}

/// What a group with key `key` holds.
pub(crate) fn group_bytes(key: &str) -> u64 {
    GROUP_OVERHEAD_BYTES + key.len() as u64
}

/// A grouped message's group: its key and, while it is a member, the
/// group's index in its sub-queue's table (`NIL` otherwise).
pub(super) struct GroupRef {
    pub(super) key: Arc<str>,
    pub(super) id: u32,
    /// In its group's members now.
    pub(super) member: bool,
}

impl GroupRef {
    /// A message's group `key`, not yet joined.
    pub(super) fn new(key: Arc<str>) -> GroupRef {
        GroupRef {
            key,
            id: NIL,
            member: false,
        }
    }
}

pub(super) struct Group {
    pub(super) key: Arc<str>,
    pub(super) channel: u32,
    /// Members by sequence number: `(seq, slot)`.
    pub(super) members: VecDeque<(u64, u32)>,
    /// The first and last members' sequence numbers (while it has
    /// members): joining and leaving at the ends reads no member.
    pub(super) first: u64,
    pub(super) last: u64,
    /// Its leased message (`NIL`: none).
    pub(super) busy: u32,
    /// Its head while the head is on the channel's ring (counted in the
    /// channel's `ready`).
    pub(super) queued: Option<u32>,
    /// The queued head's priority level (the ring it is on).
    pub(super) queued_level: u8,
    /// Members delayed: while none is, its head is visible unless leased
    /// (known without reading the head's record).
    pub(super) delayed: u32,
}

/// A ring entry that names a group's queued head rather than a message:
/// the group's index and its ticket, a count of its queuings kept per index
/// for good (an entry left behind by an earlier queuing, of this group or of
/// one that had its index before, is told by its ticket and skipped). Message
/// handles never set this bit (message slots stay below 2^30).
const GROUP_TAG: u64 = 1 << 63;

fn group_handle(g: u32, ticket: u32) -> u64 {
    GROUP_TAG | u64::from(g) << 32 | u64::from(ticket)
}

/// A sub-queue's groups.
#[derive(Default)]
pub(super) struct Groups {
    pub(super) slots: Vec<Option<Group>>,
    /// Each index's latest ticket.
    tickets: Vec<u32>,
    /// Where the tickets of an index made again start: above every ticket
    /// of the indexes given back ([`Groups::trim`]).
    ticket_floor: u32,
    free: Vec<u32>,
    /// Group indexes by (channel, key).
    index: hashbrown::HashTable<u32>,
    hasher: hashbrown::DefaultHashBuilder,
    /// Groups with a leased message.
    pub(super) busy: u64,
}

impl Groups {
    fn hash(&self, channel: u32, key: &str) -> u64 {
        self.hasher.hash_one((channel, key))
    }

    /// Groups with members.
    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    /// What they hold against the budget (given back when their epoch is
    /// purged).
    pub(super) fn bytes(&self) -> u64 {
        self.slots
            .iter()
            .flatten()
            .map(|g| group_bytes(&g.key))
            .sum()
    }

    /// The group of `key` in `channel`, if it has members.
    pub(super) fn find(&self, channel: u32, key: &str) -> Option<u32> {
        let slots = &self.slots;
        self.index
            .find(self.hash(channel, key), |&g| {
                slots[g as usize]
                    .as_ref()
                    .is_some_and(|x| x.channel == channel && *x.key == *key)
            })
            .copied()
    }

    pub(super) fn get(&self, g: u32) -> &Group {
        self.slots[g as usize].as_ref().expect("a live group")
    }

    pub(super) fn get_mut(&mut self, g: u32) -> &mut Group {
        self.slots[g as usize].as_mut().expect("a live group")
    }

    /// The group of `key` in `channel`, made when new (`true`).
    fn find_or_make(&mut self, channel: u32, key: &Arc<str>) -> (u32, bool) {
        if let Some(g) = self.find(channel, key) {
            return (g, false);
        }
        let group = Group {
            key: key.clone(),
            channel,
            members: VecDeque::new(),
            first: 0,
            last: 0,
            busy: NIL,
            queued: None,
            queued_level: 1,
            delayed: 0,
        };
        let g = match self.free.pop() {
            Some(g) => {
                self.slots[g as usize] = Some(group);
                g
            }
            None => {
                self.slots.push(Some(group));
                self.tickets.push(self.ticket_floor);
                u32::try_from(self.slots.len() - 1)
                    .ok()
                    .filter(|g| *g < 1 << 31)
                    .expect("fewer than 2^31 groups")
            }
        };
        let hash = self.hash(channel, key);
        let slots = &self.slots;
        let hasher = &self.hasher;
        self.index.insert_unique(hash, g, |&x| {
            let x = slots[x as usize].as_ref().expect("indexed groups are live");
            hasher.hash_one((x.channel, &*x.key))
        });
        (g, true)
    }

    /// A new ticket of group `g`, for its head's ring entry.
    fn next_ticket(&mut self, g: u32) -> u32 {
        let t = &mut self.tickets[g as usize];
        *t = t.wrapping_add(1);
        *t
    }

    /// The queued head a group ring entry names, if the entry is still
    /// the group's latest.
    fn queued_by(&self, h: u64) -> Option<u32> {
        let g = ((h & !GROUP_TAG) >> 32) as usize;
        let group = self.slots.get(g)?.as_ref()?;
        (self.tickets[g] == h as u32).then_some(group.queued?)
    }

    /// Forgets an emptied group; answers its key.
    fn drop_group(&mut self, g: u32) -> Arc<str> {
        let group = self.slots[g as usize].take().expect("a live group");
        debug_assert!(group.members.is_empty() && group.busy == NIL && group.queued.is_none());
        let hash = self.hash(group.channel, &group.key);
        if let Ok(entry) = self.index.find_entry(hash, |&x| x == g) {
            entry.remove();
        }
        self.free.push(g);
        self.trim();
        group.key
    }

    /// Once fewer than a quarter of at least 1 024 indexes hold a group,
    /// gives back the free ones past the last live one (and the table's
    /// room), so a burst of groups does not keep its memory after it
    /// drains. Tickets of those indexes made again start above theirs.
    fn trim(&mut self) {
        let len = self.slots.len();
        if len < 1024 || self.len() * 4 >= len {
            return;
        }
        let keep = self
            .slots
            .iter()
            .rposition(Option::is_some)
            .map_or(0, |i| i + 1);
        if let Some(top) = self.tickets[keep..].iter().max() {
            self.ticket_floor = self.ticket_floor.max(top.wrapping_add(1));
        }
        self.slots.truncate(keep);
        self.slots.shrink_to_fit();
        self.tickets.truncate(keep);
        self.tickets.shrink_to_fit();
        self.free.retain(|g| (*g as usize) < keep);
        self.free.shrink_to_fit();
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.index.shrink_to(0, |&x| {
            let x = slots[x as usize].as_ref().expect("indexed groups are live");
            hasher.hash_one((x.channel, &*x.key))
        });
    }
}

impl Group {
    /// Adds member `(seq, slot)` (not a member) at its place: a put's at
    /// the back and a message ahead of every member at the front, knowing
    /// only the ends' sequence numbers; a message rejoining between by a
    /// search. Answers whether it is the last member now.
    fn insert(&mut self, seq: u64, slot: u32) -> bool {
        if self.members.is_empty() {
            (self.first, self.last) = (seq, seq);
            self.members.push_back((seq, slot));
            return true;
        }
        if seq > self.last {
            self.last = seq;
            self.members.push_back((seq, slot));
            return true;
        }
        if seq < self.first {
            self.first = seq;
            self.members.push_front((seq, slot));
            return false;
        }
        let at = self.members.partition_point(|(s, _)| *s < seq);
        self.members.insert(at, (seq, slot));
        false
    }

    /// Removes member `seq`: the head or the last at once, another by a
    /// search. A ring of members left mostly empty gives room back.
    fn remove(&mut self, seq: u64) {
        let cap = self.members.capacity();
        if cap > 64 && self.members.len() * 4 < cap {
            self.members.shrink_to(self.members.len() * 2);
        }
        if seq == self.first {
            self.members.pop_front();
            self.first = self.members.front().map_or(0, |(s, _)| *s);
        } else if seq == self.last {
            self.members.pop_back();
            self.last = self.members.back().map_or(0, |(s, _)| *s);
        } else {
            let at = self.members.partition_point(|(s, _)| *s < seq);
            debug_assert_eq!(self.members.get(at).map(|(s, _)| *s), Some(seq));
            self.members.remove(at);
        }
    }
}

impl Shard {
    /// The group key of the message in `slot`, when it is grouped in a
    /// queue's own half (a DLQ does not order groups).
    pub(super) fn group_key(&self, slot: u32) -> Option<&Arc<str>> {
        let r = &self.records[slot as usize];
        if r.q.is_dlq() {
            return None;
        }
        r.extra.as_deref()?.group.as_ref().map(|g| &g.key)
    }

    /// The index of the group the message in `slot` joined or is to join
    /// (`None`: none yet, or no group).
    pub(super) fn group_id(&self, slot: u32) -> Option<u32> {
        let r = &self.records[slot as usize];
        r.extra
            .as_deref()?
            .group
            .as_ref()
            .and_then(|g| (g.id != NIL).then_some(g.id))
    }

    pub(super) fn groups_mut(&mut self, q: SubId) -> &mut Groups {
        self.sub_mut(q).groups.get_or_insert_with(Box::default)
    }

    /// A grouped message enters a member `state` (visible, delayed,
    /// leased): it joins its group at its place (made when new), and the
    /// group is refreshed. Leased, the group is busy with it.
    pub(super) fn group_join(&mut self, slot: u32, state: MessageState) {
        let (q, channel, seq) = {
            let r = &self.records[slot as usize];
            (r.q, r.channel, r.seq)
        };
        let (g, member) = {
            let r = self.records[slot as usize].extra.as_deref();
            let gr = r.and_then(|e| e.group.as_ref()).expect("grouped");
            (gr.id, gr.member)
        };
        let g = if g != NIL {
            g
        } else {
            let key = self.group_key(slot).expect("grouped").clone();
            let (g, made) = self.groups_mut(q).find_or_make(channel, &key);
            if made {
                self.budget.force(group_bytes(&key));
            }
            g
        };
        if !member {
            let gr = self.records[slot as usize]
                .extra
                .as_deref_mut()
                .and_then(|e| e.group.as_mut())
                .expect("grouped");
            (gr.id, gr.member) = (g, true);
        }
        let groups = self.groups_mut(q);
        let group = groups.get_mut(g);
        // Joining behind other members: nothing changes at its head (a
        // put's usual case).
        let mut behind = false;
        if !member {
            let had = !group.members.is_empty();
            behind = group.insert(seq, slot) && had;
        }
        match state {
            MessageState::InFlight => {
                debug_assert_eq!(group.busy, NIL, "two messages of a group leased");
                group.busy = slot;
                groups.busy += 1;
            }
            MessageState::Delayed => group.delayed += 1,
            _ => {}
        }
        if behind && state != MessageState::InFlight {
            return;
        }
        self.group_refresh(q, g);
    }

    /// A grouped message leaves a state: a lease frees its group; leaving
    /// the visible state takes it off the ring's count when it was queued.
    /// The next state (or its removal) refreshes the group.
    pub(super) fn group_leave(&mut self, slot: u32, state: MessageState) {
        let Some(g) = self.group_id(slot) else { return };
        let q = self.records[slot as usize].q;
        let channel = self.records[slot as usize].channel;
        let groups = self.groups_mut(q);
        let group = groups.get_mut(g);
        match state {
            MessageState::InFlight if group.busy == slot => {
                group.busy = NIL;
                groups.busy -= 1;
            }
            MessageState::Visible if group.queued == Some(slot) => {
                group.queued = None;
                let level = group.queued_level;
                self.unready(q, channel, level);
            }
            MessageState::Delayed => group.delayed -= 1,
            _ => {}
        }
    }

    /// A grouped message stops being a member (deferred, or removed from
    /// its sub-queue): it leaves its group, which is refreshed (and
    /// forgotten once empty).
    pub(super) fn group_quit(&mut self, slot: u32) {
        let Some(g) = self.group_id(slot) else { return };
        let (q, seq, channel) = {
            let r = &self.records[slot as usize];
            (r.q, r.seq, r.channel)
        };
        let member = self.records[slot as usize]
            .extra
            .as_deref()
            .and_then(|e| e.group.as_ref())
            .is_some_and(|gr| gr.member);
        let group = self.groups_mut(q).get_mut(g);
        if member {
            group.remove(seq);
        }
        if group.busy == slot {
            group.busy = NIL;
            self.groups_mut(q).busy -= 1;
        }
        let group = self.groups_mut(q).get_mut(g);
        if group.queued == Some(slot) {
            group.queued = None;
            let level = group.queued_level;
            self.unready(q, channel, level);
        }
        if let Some(r) = self.records[slot as usize]
            .extra
            .as_deref_mut()
            .and_then(|e| e.group.as_mut())
        {
            (r.id, r.member) = (NIL, false);
        }
        self.group_refresh(q, g);
    }

    /// Puts a group's head on its channel's ring when it may give it (it
    /// is visible and nothing of the group is leased), takes a head that
    /// may not off the count, forgets a group with no members.
    pub(super) fn group_refresh(&mut self, q: SubId, g: u32) {
        let (channel, head, busy, queued, delayed) = {
            let group = self.groups_mut(q).get(g);
            // The head is read only when it may be given (a leased group's
            // head is not needed).
            let head = if group.busy == NIL {
                group.members.front().map(|(_, slot)| *slot)
            } else {
                None
            };
            (group.channel, head, group.busy, group.queued, group.delayed)
        };
        if head.is_none() && busy == NIL {
            debug_assert!(queued.is_none());
            let key = self.groups_mut(q).drop_group(g);
            self.budget.release(group_bytes(&key));
            return;
        }
        // No member leased: the head is visible unless some member is
        // delayed and it is one.
        let may = busy == NIL
            && head.is_some_and(|s| {
                delayed == 0 || self.records[s as usize].word.load().state == MessageState::Visible
            });
        if may && queued == head {
            return;
        }
        if queued.is_some() {
            // Its old head is ahead of a member that rejoined, or is no
            // longer deliverable: its ring entry is left behind.
            let group = self.groups_mut(q).get_mut(g);
            group.queued = None;
            let level = group.queued_level;
            self.unready(q, channel, level);
        }
        if may {
            let head = head.expect("checked");
            // Its level is read only where a message above level 1 was
            // ever stored (the record is not otherwise needed).
            let level = if self.sub(q).leveled {
                self.records[head as usize].level()
            } else {
                1
            };
            let groups = self.groups_mut(q);
            let group = groups.get_mut(g);
            (group.queued, group.queued_level) = (Some(head), level);
            let ticket = groups.next_ticket(g);
            self.ready(q, channel, level, group_handle(g, ticket));
        }
    }

    /// The message a popped ring entry of sub-queue `q` names: a message
    /// handle's slot (its generation checked by the caller), or the queued
    /// head of the group a group entry names (`None`: the entry is stale).
    pub(super) fn slot_of_handle(&self, q: SubId, h: u64) -> Option<u32> {
        if h & GROUP_TAG == 0 {
            return Some((h >> 32) as u32);
        }
        self.sub(q).groups.as_deref()?.queued_by(h)
    }

    /// The ring entry that puts a popped group head back first: a new
    /// ticket of its group, which queues it again.
    pub(super) fn group_requeue(&mut self, q: SubId, slot: u32) -> Option<u64> {
        let g = self.group_key(slot).and(self.group_id(slot))?;
        let level = self.records[slot as usize].level();
        let groups = self.groups_mut(q);
        let group = groups.get_mut(g);
        debug_assert!(group.queued.is_none() && group.busy == NIL);
        group.queued = Some(slot);
        group.queued_level = level;
        Some(group_handle(g, groups.next_ticket(g)))
    }

    /// Whether the group of a deferred message of sub-queue `q` has a
    /// message leased (its key is looked up: a deferred message is no
    /// member).
    pub(super) fn group_busy(&self, slot: u32) -> bool {
        let Some(key) = self.group_key(slot) else {
            return false;
        };
        let r = &self.records[slot as usize];
        self.sub(r.q).groups.as_deref().is_some_and(|groups| {
            groups
                .find(r.channel, key)
                .is_some_and(|g| groups.get(g).busy != NIL)
        })
    }

    /// Groups with members, and those with a leased message, of sub-queue `q`.
    pub(super) fn group_counts(&self, q: SubId) -> (u64, u64) {
        self.sub(q)
            .groups
            .as_deref()
            .map_or((0, 0), |g| (g.len() as u64, g.busy))
    }

    /// The group a put of `key` in `channel` of sub-queue `q` joins, when
    /// it has members: a reference to it that joins without a lookup and
    /// shares its key (`None`: the put makes the group).
    pub(super) fn group_of_put(
        &self,
        q: SubId,
        channel: Option<&str>,
        key: &str,
    ) -> Option<GroupRef> {
        let sub = self.sub(q);
        let groups = sub.groups.as_deref()?;
        let channel = match channel {
            None => 0,
            Some(name) => *sub.channel_ids.get(name)?,
        };
        let id = groups.find(channel, key)?;
        Some(GroupRef {
            key: groups.get(id).key.clone(),
            id,
            member: false,
        })
    }

    /// Pushes a ready handle of priority `level` on a channel's rings and
    /// counts it; the channel joins the round with its first.
    pub(super) fn ready(&mut self, q: SubId, channel: u32, level: u8, h: u64) {
        let sub = self.sub_mut(q);
        let c = &mut sub.channels[channel as usize];
        let made = c.push(level, h);
        if c.ready == 1 {
            sub.enter_round(channel, false);
        }
        if made {
            self.budget.force(super::sub::LEVELS_BYTES);
        }
        if !self.gained.contains(&q) {
            self.gained.push(q);
        }
    }

    /// Counts one ready handle of priority `level` off a channel (its
    /// entry is left behind and skipped when popped); the channel leaves
    /// the round with its last.
    pub(super) fn unready(&mut self, q: SubId, channel: u32, level: u8) {
        let sub = self.sub_mut(q);
        if sub.channels[channel as usize].unready(level) {
            sub.leave_round(channel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: usize) -> Arc<str> {
        Arc::from(format!("g{i}"))
    }

    #[test]
    fn a_drained_burst_of_groups_gives_its_indexes_back_and_tickets_never_repeat() {
        let mut groups = Groups::default();
        for i in 0..4_000 {
            assert_eq!(groups.find_or_make(0, &key(i)), (i as u32, true));
        }
        let old_ticket = groups.next_ticket(3_999);
        // Drain all but the first ten: once fewer than a quarter of the
        // indexes are live, the free ones past the last live one go (999
        // kept then: below 1 024 indexes nothing more is trimmed).
        for i in (10..4_000).rev() {
            groups.drop_group(i as u32);
        }
        assert_eq!(groups.len(), 10);
        assert_eq!(
            groups.slots.len(),
            999,
            "indexes past the last live one given back"
        );
        assert!(groups.slots.capacity() < 1024 && groups.tickets.capacity() < 1024);
        assert_eq!(
            groups.find(0, "g5"),
            Some(5),
            "the live ones are still found"
        );
        // An index made again starts its tickets above every one it had:
        // an entry left behind by the old group is never taken for it.
        for i in 0..3_000 {
            groups.find_or_make(0, &key(100_000 + i));
        }
        // The free indexes below 999 first, then indexes given back.
        let g = groups.find(0, "g102999").unwrap();
        assert_eq!(g, 3_009);
        assert_eq!(groups.queued_by(group_handle(3_999, old_ticket)), None);
        let t = groups.next_ticket(g);
        assert!(t > old_ticket, "{t} after {old_ticket}");
    }

    #[test]
    fn a_ring_of_members_left_mostly_empty_gives_room_back() {
        let mut group = Group {
            key: key(0),
            channel: 0,
            members: VecDeque::new(),
            first: 0,
            last: 0,
            busy: NIL,
            queued: None,
            queued_level: 1,
            delayed: 0,
        };
        for seq in 0..10_000 {
            group.insert(seq, seq as u32);
        }
        for seq in 0..9_990 {
            group.remove(seq);
        }
        assert!(
            group.members.capacity() < 1_000,
            "{}",
            group.members.capacity()
        );
        assert_eq!(group.members.front(), Some(&(9_990, 9_990)));
        assert_eq!((group.first, group.last), (9_990, 9_999));
    }
}
