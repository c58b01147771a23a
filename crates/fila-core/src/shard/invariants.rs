//! A shard's bookkeeping checked against its records, recomputed from
//! scratch: the counts kept as operations go (each sub-queue's state counts
//! and held messages, each channel's held, visible and bytes, each queue's
//! messages and bytes), each live message's place in its sequence index and
//! its timer (visible: its expiry, or its queue's expiry cursor not past
//! it and due no later; leased or delayed: its next-visible time;
//! deferred: none), its group (`check_groups`), the free slots, and the
//! number of pending timers.
//! For tests and fuzzing: it walks everything, O(messages + timers).

use super::*;

#[derive(Default, Clone, Copy, PartialEq, Eq, Debug)]
struct ChannelTally {
    held: u64,
    visible: u64,
    bytes: u64,
}

impl Shard {
    /// `Err` names the first count or timer that disagrees with the
    /// records.
    pub fn check_invariants(&self) -> Result<(), String> {
        let fail = |what: String| Err(format!("shard {}: {what}", self.id));
        // (queue slot, sub) → (state counts, held); (.., channel) → tally.
        let mut subs: HashMap<SubId, ([u64; 4], u64)> = HashMap::new();
        let mut channels: HashMap<(SubId, u32), ChannelTally> = HashMap::new();
        let mut queue_totals: HashMap<u32, (u64, u64)> = HashMap::new();
        let mut timers = 0usize;
        for (slot, r) in self.records.iter().enumerate() {
            let slot = slot as u32;
            let state = r.word.load().state;
            if state == MessageState::Free {
                if r.q != SubId::NONE || r.timer != NIL {
                    return fail(format!("free slot {slot} still has a queue or a timer"));
                }
                continue;
            }
            if self
                .queues
                .get(r.q.queue() as usize)
                .and_then(Option::as_ref)
                .is_none()
            {
                return fail(format!("slot {slot} belongs to no queue ({:?})", r.q));
            }
            let sub = self.sub(r.q);
            if sub.index.get(r.seq) != Some(slot) {
                return fail(format!("slot {slot} (seq {}) is not in its index", r.seq));
            }
            if self.is_purged(r.q) {
                // A purged epoch's record, waiting for the sweep: it counts
                // nowhere, but its timer is still pending.
                if !self.purging.iter().any(|(q, _)| *q == r.q) {
                    return fail(format!("slot {slot} is in a purged epoch nobody sweeps"));
                }
                timers += usize::from(r.timer != NIL && r.timer != COVERED);
                continue;
            }
            let e = subs.entry(r.q).or_default();
            e.0[state as usize - 1] += 1;
            e.1 += 1;
            let c = channels.entry((r.q, r.channel)).or_default();
            c.held += 1;
            c.bytes += r.bytes();
            if state == MessageState::Visible {
                c.visible += 1;
            }
            let t = queue_totals.entry(r.q.queue()).or_default();
            t.0 += 1;
            t.1 += r.bytes();
            let want = match state {
                MessageState::Visible => Some(r.expires_at),
                MessageState::InFlight | MessageState::Delayed => Some(r.visible_at),
                _ => None,
            };
            if r.timer == COVERED {
                self.check_cover(slot).or_else(fail)?;
                continue;
            }
            let has = (r.timer != NIL).then(|| self.wheel.deadline(TimerKey::from_index(r.timer)));
            if has != want {
                return fail(format!(
                    "slot {slot} ({state:?}) has a timer at {has:?}, its state wants {want:?}"
                ));
            }
            timers += usize::from(has.is_some());
        }
        for (qslot, queue) in self.queues.iter().enumerate() {
            let Some(queue) = queue else { continue };
            let qslot = qslot as u32;
            let (messages, bytes) = queue_totals.get(&qslot).copied().unwrap_or_default();
            if (queue.messages, queue.bytes) != (messages, bytes) {
                return fail(format!(
                    "queue {}: counts {} messages, {} bytes; its records {messages}, {bytes}",
                    queue.name, queue.messages, queue.bytes
                ));
            }
            for (s, sub) in queue.subs.iter().enumerate() {
                let q = self.sub_id(qslot, s == 1);
                let (states, held) = subs.get(&q).copied().unwrap_or_default();
                let kept = [
                    sub.counts.visible,
                    sub.counts.in_flight,
                    sub.counts.delayed,
                    sub.counts.deferred,
                ];
                if kept != states || sub.held != held {
                    return fail(format!(
                        "queue {} sub {s}: counts {kept:?} held {}, its records {states:?} held {held}",
                        queue.name, sub.held
                    ));
                }
                if let Err(why) = self.check_groups(q) {
                    return fail(format!("queue {} sub {s}: {why}", queue.name));
                }
                for (id, c) in sub.channels.iter().enumerate() {
                    let got = channels.get(&(q, id as u32)).copied().unwrap_or_default();
                    let kept = ChannelTally {
                        held: c.held,
                        visible: u64::from(c.visible),
                        bytes: c.bytes,
                    };
                    if got != kept {
                        return fail(format!(
                            "queue {} sub {s} channel {id}: keeps {kept:?}, its records {got:?}",
                            queue.name
                        ));
                    }
                }
            }
            timers += usize::from(queue.redrive.is_some());
            if let Some(d) = &queue.dedup {
                if let Err(why) = d.check() {
                    return fail(format!("queue {}: deduplication ids: {why}", queue.name));
                }
                timers += usize::from(d.has_timer());
            }
        }
        timers += self.cursor_timers();
        timers += self
            .waiters
            .iter()
            .filter(|w| w.waiter.as_ref().is_some_and(|w| w.timer.is_some()))
            .count();
        if timers != self.wheel.len() {
            return fail(format!(
                "{} timers pending, the records, redrives and waiters account for {timers}",
                self.wheel.len()
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for &slot in &self.free_slots {
            let free = self
                .records
                .get(slot as usize)
                .is_some_and(|r| r.word.load().state == MessageState::Free);
            if !free || !seen.insert(slot) {
                return fail(format!(
                    "free list holds slot {slot}, which is live or listed twice"
                ));
            }
        }
        Ok(())
    }
}

impl Shard {
    /// Recomputes sub-queue `q`'s groups and its channels' ready counts from
    /// its records ([`Shard::check_invariants`]): each grouped message in a
    /// member state is a member of its group, in sequence order, and the
    /// others are not; at most one member is leased and it is the group's
    /// `busy`; the queued head is the first member, visible, of a group
    /// with none leased; each channel's `ready` is its ungrouped visible
    /// messages and its queued heads.
    fn check_groups(&self, q: SubId) -> Result<(), String> {
        let sub = self.sub(q);
        let mut members: HashMap<u32, Vec<(u64, u32)>> = HashMap::new();
        // Per channel, what may be given at each level.
        let mut ready: HashMap<u32, [u32; 10]> = HashMap::new();
        for (seq, slot) in sub.index.from(0) {
            if !self.live(slot, q, seq) {
                continue;
            }
            let r = &self.records[slot as usize];
            let state = r.word.load().state;
            let group = if q.is_dlq() {
                None
            } else {
                r.extra.as_deref().and_then(|e| e.group.as_ref())
            };
            let Some(group) = group else {
                ready.entry(r.channel).or_default()[usize::from(r.level() - 1)] +=
                    u32::from(state == MessageState::Visible);
                continue;
            };
            if state == MessageState::Deferred {
                if group.id != NIL || group.member {
                    return Err(format!(
                        "deferred message {seq} is still in group {}",
                        group.id
                    ));
                }
                continue;
            }
            let g = sub
                .groups
                .as_deref()
                .and_then(|groups| groups.slots.get(group.id as usize)?.as_ref())
                .ok_or_else(|| format!("message {seq} names group {}, which is gone", group.id))?;
            if !group.member {
                return Err(format!("message {seq} is not marked a member of its group"));
            }
            if g.key != group.key || g.channel != r.channel {
                return Err(format!(
                    "message {seq} is in group {} of another key or channel",
                    group.id
                ));
            }
            members.entry(group.id).or_default().push((seq, slot));
        }
        let mut busy = 0;
        let mut live = 0;
        if let Some(groups) = sub.groups.as_deref() {
            for (g, group) in groups.slots.iter().enumerate() {
                let Some(group) = group else { continue };
                live += 1;
                let g = g as u32;
                let want = members.remove(&g).unwrap_or_default();
                if group.members.iter().copied().collect::<Vec<_>>() != want {
                    return Err(format!(
                        "group {:?} keeps members {:?}, its records {want:?}",
                        group.key, group.members
                    ));
                }
                if want.is_empty() {
                    return Err(format!("group {:?} has no member and is kept", group.key));
                }
                if (group.first, group.last) != (want[0].0, want[want.len() - 1].0) {
                    return Err(format!(
                        "group {:?} keeps its ends as {}..{}, its members {want:?}",
                        group.key, group.first, group.last
                    ));
                }
                let leased: Vec<u32> = want
                    .iter()
                    .map(|(_, s)| *s)
                    .filter(|s| {
                        self.records[*s as usize].word.load().state == MessageState::InFlight
                    })
                    .collect();
                if leased.len() > 1 {
                    return Err(format!(
                        "group {:?} has {} messages leased",
                        group.key,
                        leased.len()
                    ));
                }
                let delayed = want
                    .iter()
                    .filter(|(_, s)| {
                        self.records[*s as usize].word.load().state == MessageState::Delayed
                    })
                    .count() as u32;
                if group.delayed != delayed {
                    return Err(format!(
                        "group {:?} counts {} delayed, its records {delayed}",
                        group.key, group.delayed
                    ));
                }
                if group.busy != leased.first().copied().unwrap_or(NIL) {
                    return Err(format!(
                        "group {:?} is busy with {}, its leased message is {leased:?}",
                        group.key, group.busy
                    ));
                }
                busy += u64::from(group.busy != NIL);
                let head = want[0].1;
                let may = group.busy == NIL
                    && self.records[head as usize].word.load().state == MessageState::Visible;
                if group.queued != may.then_some(head) {
                    return Err(format!(
                        "group {:?} has {:?} queued, its head {head} may be given: {may}",
                        group.key, group.queued
                    ));
                }
                if may && group.queued_level != self.records[head as usize].level() {
                    return Err(format!(
                        "group {:?} is queued at level {}, its head is at {}",
                        group.key,
                        group.queued_level,
                        self.records[head as usize].level()
                    ));
                }
                ready.entry(group.channel).or_default()[usize::from(group.queued_level - 1)] +=
                    u32::from(may);
            }
            if groups.busy != busy || groups.len() != live {
                return Err(format!(
                    "groups count {} busy of {}, their records {busy} of {live}",
                    groups.busy,
                    groups.len()
                ));
            }
        }
        if let Some((g, _)) = members.into_iter().next() {
            return Err(format!("messages name group {g}, which is not kept"));
        }
        for (id, c) in sub.channels.iter().enumerate() {
            let levels = ready.get(&(id as u32)).copied().unwrap_or_default();
            let want: u32 = levels.iter().sum();
            if c.ready != want || c.in_round != (want > 0) {
                return Err(format!(
                    "channel {id} counts {} ready (in the round: {}), its records {want}",
                    c.ready, c.in_round
                ));
            }
            let kept = c.levels.as_ref().map_or_else(
                || {
                    let mut one = [0; 10];
                    one[0] = c.ready;
                    one
                },
                |l| l.ready,
            );
            if kept != levels {
                return Err(format!(
                    "channel {id} counts {kept:?} ready by level, its records {levels:?}"
                ));
            }
        }
        Ok(())
    }
}
