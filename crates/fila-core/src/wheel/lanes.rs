//! Lanes: timers of one delay, in deadline order, of which only the head
//! is on the wheel (see the module docs of [`super`]).

use super::{List, TimerKey, TimingWheel, EMPTY, LANES, NIL, NO_LANE, PLACE_LANE, SEEN};

/// Timers of one delay in deadline order: `head` is on the wheel, the rest
/// wait in `rest` (linked through their `prev` / `next`). When the head is
/// cancelled the lane is left without one (`dirty`) until the next advance
/// or insert puts its next timer on the wheel: a run of cancels at the front
/// of a lane (the oldest messages received, the oldest leases deleted)
/// places one timer, not one per cancel.
#[derive(Clone, Copy)]
pub(super) struct Lane {
    pub(super) delay: u64,
    pub(super) head: u32,
    pub(super) rest: List,
    /// The deadline of the last timer appended.
    pub(super) last: u64,
    /// Without a head while `rest` holds timers (listed in `dirty`).
    pub(super) dirty: bool,
}

impl Lane {
    pub(super) fn is_empty(&self) -> bool {
        self.head == NIL && self.rest.head == NIL
    }
}

impl<T: Copy + Default> TimingWheel<T> {
    /// [`TimingWheel::insert`] for a timer set `delay` after the current
    /// time (`deadline` is that time plus `delay`): into the lane of
    /// `delay` when there is one or the delay earns one (see the module
    /// docs), else on the wheel. The same firing either way.
    pub fn insert_in_lane(&mut self, deadline: u64, delay: u64, value: T) -> TimerKey {
        let Some(lane) = self.lane_for(delay, deadline) else {
            return self.insert(deadline, value);
        };
        let index = self.alloc(deadline, value);
        self.entries[index as usize].lane = lane;
        let l = &mut self.lanes[lane as usize];
        l.last = deadline;
        if l.is_empty() {
            l.head = index;
            self.place(index);
        } else {
            self.entries[index as usize].place = PLACE_LANE;
            let mut rest = l.rest;
            Self::push_back(&mut self.entries, &mut rest, index);
            self.lanes[lane as usize].rest = rest;
        }
        TimerKey(index)
    }

    /// The lane a timer of `delay` due at `deadline` joins, if any.
    fn lane_for(&mut self, delay: u64, deadline: u64) -> Option<u16> {
        // The last two lanes used (a put's expiry, a receive's lease), most
        // often the same delay again.
        let [a, b] = self.last_lanes;
        let known = if self.lanes.get(a as usize).is_some_and(|l| l.delay == delay) {
            Some(a)
        } else if self.lanes.get(b as usize).is_some_and(|l| l.delay == delay) {
            self.last_lanes = [b, a];
            Some(b)
        } else {
            self.lane_of.get(&delay).copied()
        };
        if let Some(lane) = known {
            if lane != self.last_lanes[0] {
                self.last_lanes = [lane, self.last_lanes[0]];
            }
            let l = &self.lanes[lane as usize];
            // A lane holds deadlines in order; one set against an earlier
            // time than the lane's last (never, with a monotonic clock)
            // goes on the wheel.
            return (l.is_empty() || deadline >= l.last).then_some(lane);
        }
        let seen =
            &mut self.seen[(delay.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % SEEN];
        if std::mem::replace(seen, delay) != delay {
            return None;
        }
        let lane = if self.lanes.len() < LANES {
            self.lanes.push(Lane {
                delay,
                head: NIL,
                rest: EMPTY,
                last: 0,
                dirty: false,
            });
            (self.lanes.len() - 1) as u16
        } else {
            // An idle lane changes hands; none idle: the wheel.
            let idle = self.lanes.iter().position(Lane::is_empty)?;
            self.lane_of.remove(&self.lanes[idle].delay);
            self.lanes[idle].delay = delay;
            idle as u16
        };
        self.lane_of.insert(delay, lane);
        self.last_lanes = [lane, self.last_lanes[0]];
        Some(lane)
    }

    /// Lanes in use (holding timers).
    pub fn lanes_in_use(&self) -> usize {
        self.lanes.iter().filter(|l| !l.is_empty()).count()
    }

    /// Puts the next timer of every lane whose head was cancelled on the
    /// wheel.
    pub(super) fn settle(&mut self) {
        while let Some(lane) = self.dirty.pop() {
            let l = &mut self.lanes[lane as usize];
            l.dirty = false;
            if l.head == NIL {
                self.promote(lane, None);
            }
        }
    }

    /// Puts the next timer of a lane whose head left on the wheel. With
    /// `fire_until`, the ones already due by then are fired into `fired`
    /// instead (they come due at the same advance as the head).
    pub(super) fn promote(&mut self, lane: u16, mut fire_until: Option<(u64, &mut Vec<(u64, T)>)>) {
        loop {
            let l = &mut self.lanes[lane as usize];
            let next = l.rest.head;
            if next == NIL {
                l.head = NIL;
                return;
            }
            let mut rest = l.rest;
            Self::unlink_from(&mut self.entries, &mut rest, next);
            self.lanes[lane as usize].rest = rest;
            let deadline = self.entries[next as usize].deadline;
            if let Some((now, fired)) = fire_until.as_mut() {
                if deadline <= *now {
                    fired.push((deadline, self.entries[next as usize].value));
                    self.release(next);
                    continue;
                }
            }
            self.lanes[lane as usize].head = next;
            self.place(next);
            return;
        }
    }

    /// Takes a pending timer off the wheel or out of its lane (a lane's
    /// head is followed by the next); it is then in no lane.
    pub(super) fn take_out(&mut self, index: u32, place: u16) {
        let lane = std::mem::replace(&mut self.entries[index as usize].lane, NO_LANE);
        if place == PLACE_LANE {
            let l = &mut self.lanes[lane as usize];
            let mut rest = l.rest;
            Self::unlink_from(&mut self.entries, &mut rest, index);
            self.lanes[lane as usize].rest = rest;
            return;
        }
        self.unlink(index, place);
        if lane != NO_LANE {
            let l = &mut self.lanes[lane as usize];
            l.head = NIL;
            if l.rest.head != NIL && !l.dirty {
                l.dirty = true;
                self.dirty.push(lane);
            }
        }
    }
}
