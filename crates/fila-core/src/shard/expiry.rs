//! Expiry in sequence order: a queue's own messages put with its retention
//! expire in the order they were put (their expiries never decrease along
//! the sequence log while the retention stays), so one timer per queue —
//! its expiry cursor — stands for all of their expiries, and a visible
//! message "covered" by it has no timer of its own (`Record::timer` is
//! `COVERED`): a put sets no timer, a receive cancels none.
//!
//! The cursor is a sequence number and a timer set at the earliest expiry
//! among the covered messages at or after it. When the timer fires, the
//! cursor walks the log: covered messages due by then are fired as their
//! own timers would have been (they join the instant's other timers and are
//! run in the same order); leased, delayed, deferred, removed and uncovered
//! entries are passed, each once; the first covered message not yet due
//! sets the timer again. A message that leaves the visible state loses its
//! cover for good (when it becomes visible again it gets a timer of its
//! own), so a cursor never has to walk back. A walk passes at most the
//! entries its caller's timer budget allows, then goes on at the next turn
//! (at the same instant: the only way an instant's timers are split).

use super::*;

/// `Record::timer` of a visible message whose expiry its queue's cursor
/// keeps.
pub(super) const COVERED: u32 = u32::MAX - 1;

/// A queue's expiry cursor (its main half only: the DLQ takes messages out
/// of sequence order and keeps a timer for each).
#[derive(Default)]
pub(super) struct ExpiryCursor {
    /// Log entries below this sequence number have been walked.
    next: u64,
    /// Set at or before the earliest expiry of the covered messages at or
    /// after `next`; `None` when there are none.
    timer: Option<TimerKey>,
    /// The expiry of the last message covered: a new one is covered only
    /// at or after it, so covered expiries never decrease along the log.
    last: u64,
}

impl Shard {
    /// Puts a new visible message of sub-queue `q` under its queue's
    /// cursor, when it can be: in the queue's own half (not its DLQ), and
    /// expiring no earlier than the last message covered. Answers whether
    /// it did; if not, the caller sets the message a timer of its own.
    pub(super) fn cover(&mut self, slot: u32, q: SubId) -> bool {
        if q.is_dlq() {
            return false;
        }
        let expires_at = self.records[slot as usize].expires_at;
        let queue = self.queues[q.queue() as usize].as_mut().expect("live");
        let cursor = &mut queue.subs[MAIN as usize].expiry;
        if cursor.timer.is_none() {
            // Nothing covered is pending: the order starts again (after a
            // retention was shortened, say).
            cursor.last = 0;
        }
        if expires_at < cursor.last {
            return false;
        }
        cursor.last = expires_at;
        if cursor.timer.is_none() {
            cursor.timer = Some(
                self.wheel
                    .insert(expires_at, Timer::Expiry(q.queue()).into()),
            );
        }
        self.records[slot as usize].timer = COVERED;
        true
    }

    /// The cursor of queue `qslot` fired at `t`: pushes its covered
    /// messages due by `t` onto `fired` as message timers, passing at most
    /// `limit` other log entries, and sets its timer again. Answers the
    /// entries passed.
    pub(super) fn walk_expiries(
        &mut self,
        qslot: u32,
        t: u64,
        limit: usize,
        fired: &mut Vec<(u64, Packed)>,
    ) -> usize {
        let q = self.sub_id(qslot, false);
        let records = &self.records;
        let queue = self.queues[qslot as usize].as_mut().expect("live");
        let sub = &mut queue.subs[MAIN as usize];
        sub.expiry.timer = None;
        let SeqIndex::Log { seqs, slots } = &sub.index else {
            unreachable!("a queue's own half keeps a log");
        };
        let mut passed = 0;
        let mut again = None;
        for i in seqs.partition_point(|s| *s < sub.expiry.next)..seqs.len() {
            let (seq, slot) = (seqs[i], slots[i]);
            let r = &records[slot as usize];
            if r.q == q && r.seq == seq && r.timer == COVERED {
                debug_assert_eq!(r.word.load().state, MessageState::Visible);
                if r.expires_at > t {
                    again = Some(r.expires_at);
                    break;
                }
                // Due: it runs with the instant's other timers, counted as
                // they are.
                fired.push((r.expires_at, Timer::Message(slot).into()));
            } else {
                if passed == limit {
                    // Out of budget: on at the next turn, at this instant.
                    again = Some(t);
                    break;
                }
                passed += 1;
            }
            sub.expiry.next = seq + 1;
        }
        if let Some(at) = again {
            sub.expiry.timer = Some(self.wheel.insert(at, Timer::Expiry(qslot).into()));
        }
        passed
    }

    /// Cancels the timer of queue `qslot`'s cursor: the queue is deleted,
    /// or its own half purged (the fresh half starts a cursor of its own).
    pub(super) fn stop_cursor(&mut self, qslot: u32) {
        let queue = self.queues[qslot as usize].as_mut().expect("live");
        if let Some(timer) = queue.subs[MAIN as usize].expiry.timer.take() {
            self.wheel.cancel(timer);
        }
    }

    /// For `check_invariants`: a covered message's cursor has not walked
    /// past it and fires no later than it expires.
    pub(super) fn check_cover(&self, slot: u32) -> Result<(), String> {
        let r = &self.records[slot as usize];
        if r.q.is_dlq() || r.word.load().state != MessageState::Visible {
            return Err(format!(
                "slot {slot} is covered but not a visible message of a queue's own half"
            ));
        }
        if self.queue(r.q.queue()).dropping {
            // Deleted: its cursor stopped, its messages go with the sweep.
            return Ok(());
        }
        let cursor = &self.sub(r.q).expiry;
        let fires = cursor.timer.map(|k| self.wheel.deadline(k));
        if r.seq < cursor.next || fires.is_none_or(|at| at > r.expires_at) {
            return Err(format!(
                "slot {slot} (seq {}, expires {}) is covered by a cursor at seq {} firing at {fires:?}",
                r.seq, r.expires_at, cursor.next
            ));
        }
        Ok(())
    }

    /// Pending cursor timers, for `check_invariants`.
    pub(super) fn cursor_timers(&self) -> usize {
        self.queues
            .iter()
            .flatten()
            .filter(|q| q.subs[MAIN as usize].expiry.timer.is_some())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{Budget, EngineLimits};
    use bytes::Bytes;

    const T0: u64 = 1_700_000_000_000;

    fn shard_with_queue(retention_ms: u64) -> Shard {
        let budget = Arc::new(Budget::new(EngineLimits::default(), 1));
        let mut s = Shard::new(0, T0, ReceiptKey::random(), budget);
        let settings = QueueSettings {
            retention_ms,
            ..QueueSettings::default()
        };
        s.create_queue("q", settings, || 1).unwrap();
        s
    }

    fn put(s: &mut Shard, n: u8, now: u64) {
        let batch = (0..n)
            .map(|i| NewMessage::new(Bytes::from(vec![i])))
            .collect();
        for answer in s.put("q", batch, now).unwrap() {
            answer.unwrap();
        }
    }

    fn receive(s: &mut Shard, max: u32, visibility_ms: u64, now: u64) -> usize {
        let opts = ReceiveOptions {
            max_messages: max,
            visibility_ms: Some(visibility_ms),
            wait_ms: Some(0),
            ..ReceiveOptions::default()
        };
        match s.receive(Address::queue("q"), &opts, None, now).unwrap() {
            Received::Ready(m) => m.len(),
            Received::Parked(_) => panic!("a receive that does not wait parked"),
        }
    }

    fn visible(s: &mut Shard) -> u64 {
        s.stats("q").unwrap().visible
    }

    #[test]
    fn one_timer_stands_for_a_queues_expiries_and_fires_each_on_time() {
        let mut s = shard_with_queue(60_000);
        for i in 0..5 {
            put(&mut s, 1, T0 + i);
        }
        assert_eq!(s.wheel.len(), 1, "one cursor timer for five expiries");
        // The first is leased past its expiry: it leaves the cursor's
        // cover, and expires when its lease ends.
        assert_eq!(receive(&mut s, 1, 90_000, T0 + 10), 1);
        assert_eq!(s.wheel.len(), 2, "the cursor and the lease");
        s.check_invariants().unwrap();
        s.advance(T0 + 60_000);
        assert_eq!(visible(&mut s), 4, "none expired before its time");
        s.advance(T0 + 60_002);
        assert_eq!(visible(&mut s), 2, "the second and third expired");
        s.check_invariants().unwrap();
        s.advance(T0 + 60_004);
        assert_eq!(visible(&mut s), 0);
        assert_eq!(s.stats("q").unwrap().in_flight, 1);
        assert_eq!(s.wheel.len(), 1, "the lease alone; the cursor is idle");
        s.advance(T0 + 90_010);
        assert_eq!(s.stats("q").unwrap().in_flight, 0);
        assert!(s.wheel.is_empty());
        s.check_invariants().unwrap();
    }

    #[test]
    fn a_walk_past_many_leased_entries_takes_turns_within_the_budget() {
        let mut s = shard_with_queue(60_000);
        put(&mut s, 200, T0);
        for _ in 0..10 {
            assert_eq!(receive(&mut s, 20, 600_000, T0), 20);
        }
        put(&mut s, 10, T0 + 1);
        s.advance(T0 + 59_999);
        s.check_invariants().unwrap();
        // 200 leased entries to pass, then 10 to expire: 16 a turn.
        let mut turns = 0;
        while !s.advance_within(T0 + 60_001, 16) {
            turns += 1;
            assert!(turns < 100, "caught up");
            s.check_invariants().unwrap();
        }
        assert!(turns >= 200 / 16, "{turns} turns");
        assert_eq!(visible(&mut s), 0, "the 10 expired");
        assert_eq!(s.stats("q").unwrap().in_flight, 200);
        s.check_invariants().unwrap();
    }

    #[test]
    fn messages_due_at_one_instant_expire_together_whatever_the_budget() {
        let mut s = shard_with_queue(60_000);
        put(&mut s, 100, T0);
        s.advance(T0 + 59_999);
        assert!(s.advance_within(T0 + 60_000, 16), "one instant, one call");
        assert_eq!(visible(&mut s), 0);
        assert!(s.wheel.is_empty());
        s.check_invariants().unwrap();
    }

    #[test]
    fn a_shorter_retention_gives_new_messages_timers_of_their_own() {
        let mut s = shard_with_queue(120_000);
        put(&mut s, 3, T0);
        let update = SettingsUpdate {
            retention_ms: Some(60_000),
            ..SettingsUpdate::default()
        };
        s.update_settings("q", &update).unwrap();
        put(&mut s, 3, T0 + 1);
        assert_eq!(s.wheel.len(), 4, "the cursor, and three timers");
        s.check_invariants().unwrap();
        s.advance(T0 + 60_001);
        assert_eq!(visible(&mut s), 3, "the later three expired first");
        s.advance(T0 + 120_000);
        assert_eq!(visible(&mut s), 0);
        assert!(s.wheel.is_empty());
    }
}
