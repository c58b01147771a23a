//! Time: the shard's clock moves only in [`Shard::advance`], one distinct
//! deadline at a time; the timers due at one instant run in a fixed order
//! (messages by queue name, sub-queue and sequence number, then redrive
//! ticks, then long-poll deadlines), the order the reference model
//! reproduces. A message's timer is its lease end, delay end or expiry
//! (or, for most visible messages, its queue's expiry cursor: expiry.rs).

use super::*;

/// What a pending timer is for. At one instant they run messages first,
/// then redrive ticks, then long-poll deadlines (the variants' order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Timer {
    /// A message's lease end, delay end or expiry: its slot.
    Message(u32),
    /// A paced redrive's next tick: its queue's slot.
    Redrive(u32),
    /// A parked receive's deadline: its waiter slot.
    Waiter(u32),
    /// A queue's expiry cursor (shard/expiry.rs): its queue's slot. Turned
    /// into the message timers it stands for before an instant's timers run.
    Expiry(u32),
    /// A queue's oldest remembered deduplication id expires (dedup.rs):
    /// its queue's slot.
    Dedup(u32),
}

impl Timer {
    /// Rank among timers due at one instant.
    pub(super) fn rank(self) -> u8 {
        match self {
            Timer::Message(_) | Timer::Expiry(_) => 0,
            Timer::Redrive(_) | Timer::Dedup(_) => 1,
            Timer::Waiter(_) => 2,
        }
    }
}

/// A [`Timer`] as the wheel keeps it: its kind in the top two bits, its
/// slot in the other 30 (4 bytes a timer, not 8; slots stay below 2^30).
/// A queue's two timers of its own (its expiry cursor, its dedup expiry)
/// share the last kind, told apart by the slot's top bit: queue slots stay
/// below 2^29.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Packed(u32);

const SLOT_BITS: u32 = 30;
/// In the last kind: a dedup timer rather than an expiry cursor.
const DEDUP_BIT: u32 = 1 << 29;
const SLOT_MASK: u32 = (1 << SLOT_BITS) - 1;

impl Default for Packed {
    /// The wheel's placeholder in free entries; never fires.
    fn default() -> Packed {
        Packed(SLOT_MASK)
    }
}

impl From<Timer> for Packed {
    fn from(t: Timer) -> Packed {
        let (kind, slot) = match t {
            Timer::Message(s) => (0, s),
            Timer::Redrive(s) => (1, s),
            Timer::Waiter(s) => (2, s),
            Timer::Expiry(s) => {
                assert!(s < DEDUP_BIT, "queue slots stay below 2^29");
                (3, s)
            }
            Timer::Dedup(s) => {
                assert!(s < DEDUP_BIT, "queue slots stay below 2^29");
                (3, s | DEDUP_BIT)
            }
        };
        assert!(slot < SLOT_MASK, "slots stay below 2^30");
        Packed(kind << SLOT_BITS | slot)
    }
}

impl From<Packed> for Timer {
    fn from(p: Packed) -> Timer {
        let slot = p.0 & SLOT_MASK;
        match p.0 >> SLOT_BITS {
            0 => Timer::Message(slot),
            1 => Timer::Redrive(slot),
            2 => Timer::Waiter(slot),
            _ if slot & DEDUP_BIT != 0 => Timer::Dedup(slot & !DEDUP_BIT),
            _ => Timer::Expiry(slot),
        }
    }
}

impl Shard {
    /// Runs every timer due at or before `now`, one instant at a time.
    pub fn advance(&mut self, now: u64) {
        self.advance_within(now, usize::MAX);
    }

    /// Runs the timers due before an operation, within the shard's timer
    /// budget ([`Shard::set_timer_budget`]).
    pub(crate) fn catch_up(&mut self, now: u64) {
        self.advance_within(now, self.timer_budget);
    }

    /// [`Shard::advance`], stopping after the instant at which `budget`
    /// timers have run (an instant is not split: its timers run in their
    /// fixed order — unless an expiry cursor's walk passes more than the
    /// budget's entries, when the messages it has not reached run at the
    /// next call, still at that instant). Answers whether the shard caught
    /// up with `now`; when it did not, its time is the last instant run and
    /// the rest waits for the next call.
    pub fn advance_within(&mut self, now: u64, budget: usize) -> bool {
        let now = now.max(self.now);
        let mut ran = 0usize;
        while let Some(next) = self.wheel.next_deadline() {
            if next > now {
                break;
            }
            if ran >= budget {
                return false;
            }
            let mut fired = std::mem::take(&mut self.fired);
            self.wheel.advance(next, &mut fired);
            // Expiry cursors become the message timers they stand for.
            let mut i = 0;
            while i < fired.len() {
                if let Timer::Expiry(qslot) = Timer::from(fired[i].1) {
                    fired.swap_remove(i);
                    let limit = budget.saturating_sub(ran).max(1);
                    let passed = self.walk_expiries(qslot, next, limit, &mut fired);
                    ran = ran.saturating_add(passed);
                } else {
                    i += 1;
                }
            }
            // The wheel let go of these timers: forget their keys first, so
            // that handling one event cannot cancel another's spent timer.
            for (_, timer) in &fired {
                match Timer::from(*timer) {
                    Timer::Message(slot) => self.records[slot as usize].timer = NIL,
                    Timer::Waiter(slot) => {
                        if let Some(w) = self.waiters[slot as usize].waiter.as_mut() {
                            w.timer = None;
                        }
                    }
                    // The redrive job and the dedup table forget their keys
                    // when their timers run; cursors were walked above.
                    Timer::Redrive(_) | Timer::Expiry(_) | Timer::Dedup(_) => {}
                }
            }
            ran = ran.saturating_add(fired.len());
            fired.sort_unstable_by(|a, b| self.timer_order(a, b));
            for (deadline, timer) in fired.drain(..) {
                self.now = self.now.max(deadline);
                match Timer::from(timer) {
                    Timer::Message(slot) => self.message_timer(slot, deadline),
                    Timer::Redrive(qslot) => self.redrive_tick(qslot, deadline),
                    Timer::Waiter(slot) => self.waiter_deadline(slot),
                    Timer::Dedup(qslot) => self.dedup_tick(qslot, deadline),
                    Timer::Expiry(_) => debug_assert!(false, "cursors are walked first"),
                }
                self.serve_gained();
            }
            self.fired = fired;
        }
        self.wheel.advance(now, &mut self.fired);
        debug_assert!(self.fired.is_empty(), "every due timer ran above");
        self.now = now;
        true
    }

    pub(super) fn timer_order(&self, a: &(u64, Packed), b: &(u64, Packed)) -> std::cmp::Ordering {
        let (ta, tb) = (Timer::from(a.1), Timer::from(b.1));
        a.0.cmp(&b.0)
            .then(ta.rank().cmp(&tb.rank()))
            .then_with(|| match (ta, tb) {
                (Timer::Message(x), Timer::Message(y)) => {
                    let (ra, rb) = (&self.records[x as usize], &self.records[y as usize]);
                    self.queue(ra.q.queue())
                        .name
                        .cmp(&self.queue(rb.q.queue()).name)
                        .then(ra.q.is_dlq().cmp(&rb.q.is_dlq()))
                        .then(ra.seq.cmp(&rb.seq))
                }
                (Timer::Redrive(x), Timer::Redrive(y)) | (Timer::Dedup(x), Timer::Dedup(y)) => {
                    self.queue(x).name.cmp(&self.queue(y).name)
                }
                // Redrive ticks before dedup expiries (they share a rank).
                (Timer::Redrive(_), Timer::Dedup(_)) => std::cmp::Ordering::Less,
                (Timer::Dedup(_), Timer::Redrive(_)) => std::cmp::Ordering::Greater,
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

    pub(super) fn message_timer(&mut self, slot: u32, t: u64) {
        let r = &self.records[slot as usize];
        let word = r.word.load();
        if r.timer != NIL || word.state == MessageState::Free {
            // An earlier event at this instant already moved the message on.
            return;
        }
        if self.queue(r.q.queue()).dropping {
            // Its queue was deleted: it goes, with no event (the deletion
            // was one) and nowhere else.
            self.remove(slot);
            return;
        }
        if self.is_purged(r.q) {
            // Purged: it goes with no event, its epoch's counts with it.
            self.free(slot);
            return;
        }
        let expired = r.expires_at <= t;
        match word.state {
            MessageState::InFlight => {
                self.record_attempt(slot, AttemptEnd::Expired, String::new(), String::new(), t);
                self.lease_ended(slot, t)
            }
            MessageState::Delayed if !expired => {
                let shifted = r.word.shift(MessageState::Delayed, MessageState::Visible);
                debug_assert!(shifted.is_ok());
                self.leave_state(slot, MessageState::Delayed);
                self.enter_visible(slot);
            }
            MessageState::Free | MessageState::Deferred => {}
            _ => self.expire(slot, t),
        }
    }

    /// A lease that ended at `t` without a delete (it expired, or was
    /// released as failed: `visible_at` is its end, and the message has no
    /// timer): the message is delayed by its queue's retry policy
    /// ([`Shard::retry_later`]), else visible again — or it expires, when
    /// its life ran out meanwhile.
    pub(super) fn lease_ended(&mut self, slot: u32, t: u64) {
        let r = &self.records[slot as usize];
        if r.expires_at <= t {
            self.expire(slot, t);
            return;
        }
        if self.retry_at(slot).is_some_and(|at| at > t) {
            self.retry_later(slot);
            return;
        }
        let word = r.word.load();
        let ended = r.word.end_lease(word.generation, LeaseEnd::Release);
        debug_assert!(ended.is_ok());
        self.leave_state(slot, MessageState::InFlight);
        self.enter_visible(slot);
    }

    /// Keeps a failed attempt in the history of the message in `slot` (of
    /// its queue's own half, when the queue keeps any): appended, the
    /// oldest dropped past `attempt_history` or the history's bytes;
    /// counted in the stored bytes whatever the budget says (the failure
    /// happened); logged.
    pub(super) fn record_attempt(
        &mut self,
        slot: u32,
        end: AttemptEnd,
        reason: String,
        description: String,
        t: u64,
    ) {
        let r = &self.records[slot as usize];
        let keep = self.queue(r.q.queue()).settings.attempt_history;
        if r.q.is_dlq() || keep == 0 {
            return;
        }
        let attempt = Attempt {
            at_ms: t,
            delivery: r.word.load().delivery_count,
            end,
            reason,
            description,
        };
        emit!(
            self,
            Event::Attempt {
                at: self.spot(slot),
                attempt: &attempt,
            }
        );
        let r = &mut self.records[slot as usize];
        let before = r.budget_bytes();
        let extra = r.extra.get_or_insert_with(Box::default);
        let history = Arc::make_mut(extra.attempts.get_or_insert_with(Default::default));
        remember_attempt(history, attempt, keep);
        let after = r.budget_bytes();
        if after >= before {
            self.budget.force(after - before);
        } else {
            self.budget.release(before - after);
        }
    }

    /// When a message whose lease ends now (at its `visible_at`) is visible
    /// again by its queue's retry policy: the lease's end and the
    /// policy's delay for its delivery count, at most its expiry (`None`:
    /// no policy, or a dead letter's lease).
    pub(super) fn retry_at(&self, slot: u32) -> Option<u64> {
        let r = &self.records[slot as usize];
        if r.q.is_dlq() {
            return None;
        }
        let count = r.word.load().delivery_count;
        let delay = self.queue(r.q.queue()).settings.retry_delay(count, r.seq)?;
        Some(r.visible_at.saturating_add(delay).min(r.expires_at))
    }

    /// Ends a leased message's lease by its queue's retry policy: delayed
    /// until [`Shard::retry_at`] (an [`Event::Retry`]).
    pub(super) fn retry_later(&mut self, slot: u32) {
        let Some(at) = self.retry_at(slot) else {
            return;
        };
        let r = &self.records[slot as usize];
        let word = r.word.load();
        let ended = r.word.end_lease(word.generation, LeaseEnd::Release);
        debug_assert!(ended.is_ok());
        let shifted = r.word.shift(MessageState::Visible, MessageState::Delayed);
        debug_assert!(shifted.is_ok());
        self.leave_state(slot, MessageState::InFlight);
        self.records[slot as usize].visible_at = at;
        emit!(
            self,
            Event::Retry {
                at: self.spot(slot),
                visible_at: at,
            }
        );
        self.queue_mut(self.records[slot as usize].q.queue())
            .counters
            .retries += 1;
        self.enter_state(slot, MessageState::Delayed);
        self.set_timer(slot, at);
    }

    /// Ends a message whose time ran out: to the DLQ when the queue says so,
    /// else gone.
    pub(super) fn expire(&mut self, slot: u32, t: u64) {
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

    pub(super) fn set_timer(&mut self, slot: u32, deadline: u64) {
        let timer = self.records[slot as usize].timer;
        if timer == NIL || timer == COVERED {
            let key = self.wheel.insert(deadline, Timer::Message(slot).into());
            self.records[slot as usize].timer = key.index();
        } else {
            self.wheel.reset(TimerKey::from_index(timer), deadline);
        }
    }

    /// [`Shard::set_timer`] for a timer set a fixed delay after the shard's
    /// time (a lease of the visibility timeout, a new message's expiry or
    /// delay): it joins the wheel's lane of that delay, where timers of
    /// one delay come due in the order they were set at O(1) each.
    pub(super) fn set_stream_timer(&mut self, slot: u32, deadline: u64) {
        self.clear_timer(slot);
        let delay = deadline.saturating_sub(self.now);
        let key = self
            .wheel
            .insert_in_lane(deadline, delay, Timer::Message(slot).into());
        self.records[slot as usize].timer = key.index();
    }

    pub(super) fn clear_timer(&mut self, slot: u32) {
        let timer = std::mem::replace(&mut self.records[slot as usize].timer, NIL);
        if timer != NIL && timer != COVERED {
            self.wheel.cancel(TimerKey::from_index(timer));
        }
    }
}
