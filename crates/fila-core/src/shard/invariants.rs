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
