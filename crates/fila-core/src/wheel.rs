//! A hierarchical timing wheel: four levels of 256 slots over 1 ms ticks
//! (level `n` slots span `256^n` ms, so the wheel reaches 2^32 ms, about 49
//! days; later deadlines wait in the last level and are placed again).
//!
//! Timers live in a slab and each slot is an intrusive doubly-linked list of
//! slab indices, so insert and cancel are O(1) and allocate nothing once the
//! slab has grown. Each level keeps a 256-bit occupancy mask; the level of a
//! timer is chosen from the highest bit in which its deadline differs from the
//! wheel's current time (`now ^ deadline`), as in tokio's wheel (with wider
//! levels: a lease of minutes or hours is moved down twice, not three or four
//! times). Advancing finds the next occupied slot with `trailing_zeros`, fires the
//! timers that are due and moves the others down a level. A timer is moved at
//! most once per level, so the cost of expiring one stays flat however many
//! are pending.
//!
//! Lanes: timers set a fixed delay after the current time (leases of one
//! visibility timeout, expiries of one retention) come due in the order
//! they were set. [`TimingWheel::insert_in_lane`] appends such a timer to
//! the lane of its delay, a list in deadline order of which only the head is
//! on the wheel; when the head fires or is cancelled the next one takes its
//! place (placed once, near its deadline: no moves down the levels). A timer
//! in a lane costs O(1) to set, cancel and fire whatever the number pending.
//! A delay gets a lane the second time it is seen in a row of its hash slot
//! (so one-off delays never take one), while one of [`LANES`] is idle; else
//! its timers go on the wheel as any other.
//!
//! The wheel knows nothing of messages: a timer carries a `T: Copy` that the
//! shard interprets (a message slot, a waiter, a redrive job).

const LEVELS: usize = 4;
const SLOT_BITS: u32 = 8;
const SLOTS: u64 = 1 << SLOT_BITS;
const WORDS: usize = (SLOTS / 64) as usize;
/// The farthest distance a timer can be placed at; beyond it, it is placed
/// at the edge and placed again when that slot comes due.
const RANGE: u64 = 1 << (SLOT_BITS as u64 * LEVELS as u64);
const NIL: u32 = u32::MAX;
/// `Entry::place` of a free slab entry.
const PLACE_FREE: u16 = u16::MAX;
/// `Entry::place` of a timer already due when it was inserted.
const PLACE_DUE: u16 = u16::MAX - 1;
/// `Entry::place` of a timer waiting in a lane behind the lane's head.
const PLACE_LANE: u16 = u16::MAX - 2;
/// `Entry::lane` of a timer in no lane.
const NO_LANE: u16 = u16::MAX;
/// Lanes a wheel keeps at most.
pub const LANES: usize = 64;
/// Slots of the table of delays seen, by which a delay earns a lane.
const SEEN: usize = 256;

/// Names one inserted timer, for [`TimingWheel::cancel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimerKey(u32);

impl TimerKey {
    /// The slab index, for storing the key compactly.
    pub fn index(self) -> u32 {
        self.0
    }

    /// Rebuilds a key from [`TimerKey::index`].
    pub fn from_index(index: u32) -> TimerKey {
        TimerKey(index)
    }
}

#[derive(Clone, Copy)]
struct Entry<T> {
    deadline: u64,
    prev: u32,
    next: u32,
    /// `level * SLOTS + slot`, or one of the `PLACE_*` markers.
    place: u16,
    /// The lane it belongs to (its head is on the wheel, the others wait
    /// with `PLACE_LANE`), or `NO_LANE`.
    lane: u16,
    value: T,
}

/// Timers of one delay in deadline order: `head` is on the wheel, the rest
/// wait in `rest` (linked through their `prev` / `next`). When the head is
/// cancelled the lane is left without one (`dirty`) until the next advance
/// or insert puts its next timer on the wheel: a run of cancels at the front
/// of a lane (the oldest messages received, the oldest leases deleted)
/// places one timer, not one per cancel.
#[derive(Clone, Copy)]
struct Lane {
    delay: u64,
    head: u32,
    rest: List,
    /// The deadline of the last timer appended.
    last: u64,
    /// Without a head while `rest` holds timers (listed in `dirty`).
    dirty: bool,
}

impl Lane {
    fn is_empty(&self) -> bool {
        self.head == NIL && self.rest.head == NIL
    }
}

/// One bit per slot of a level.
#[derive(Clone, Copy, Default)]
struct Occupancy([u64; WORDS]);

impl Occupancy {
    fn set(&mut self, slot: usize) {
        self.0[slot / 64] |= 1 << (slot % 64);
    }

    fn clear(&mut self, slot: usize) {
        self.0[slot / 64] &= !(1 << (slot % 64));
    }

    fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }

    /// The first occupied slot at or after `start`, wrapping around.
    /// The set must not be empty.
    fn first_from(&self, start: usize) -> usize {
        let first_word = start / 64;
        let masked = self.0[first_word] & (!0u64 << (start % 64));
        if masked != 0 {
            return first_word * 64 + masked.trailing_zeros() as usize;
        }
        for k in 1..=WORDS {
            let w = (first_word + k) % WORDS;
            if self.0[w] != 0 {
                return w * 64 + self.0[w].trailing_zeros() as usize;
            }
        }
        unreachable!("first_from on an empty level")
    }
}

#[derive(Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
}

const EMPTY: List = List {
    head: NIL,
    tail: NIL,
};

/// Timers keyed by deadline in milliseconds.
pub struct TimingWheel<T> {
    /// Every timer with a deadline at or before `elapsed` has been fired.
    elapsed: u64,
    occupied: [Occupancy; LEVELS],
    slots: Box<[List]>,
    /// Timers inserted with a deadline already reached.
    due: List,
    entries: Vec<Entry<T>>,
    free_head: u32,
    len: usize,
    lanes: Vec<Lane>,
    /// Lane of each delay that has one.
    lane_of: hashbrown::HashMap<u64, u16>,
    /// The last delay seen in each slot of its hash: a delay seen twice in a
    /// row earns a lane.
    seen: Box<[u64; SEEN]>,
    /// The lanes of the last two timers put in a lane.
    last_lanes: [u16; 2],
    /// Lanes whose head was cancelled: their next goes on the wheel at the
    /// next advance.
    dirty: Vec<u16>,
}

impl<T: Copy + Default> TimingWheel<T> {
    /// An empty wheel whose current time is `now`.
    pub fn new(now: u64) -> TimingWheel<T> {
        TimingWheel {
            elapsed: now,
            occupied: [Occupancy::default(); LEVELS],
            slots: vec![EMPTY; LEVELS * SLOTS as usize].into_boxed_slice(),
            due: EMPTY,
            entries: Vec::new(),
            free_head: NIL,
            len: 0,
            lanes: Vec::new(),
            lane_of: hashbrown::HashMap::new(),
            seen: Box::new([u64::MAX; SEEN]),
            last_lanes: [0, 0],
            dirty: Vec::new(),
        }
    }

    /// Gives back the slab room of timers long gone: when at most half of
    /// the slab is pending, the free entries past the last pending one are
    /// dropped and the allocation shrunk. Keys of pending timers are kept.
    /// O(slab) when it trims, so callers use it after bulk removals only.
    pub fn trim(&mut self) {
        if self.entries.len() < 1024 || self.len * 2 > self.entries.len() {
            return;
        }
        let keep = self
            .entries
            .iter()
            .rposition(|e| e.place != PLACE_FREE)
            .map_or(0, |i| i + 1);
        self.entries.truncate(keep);
        self.entries.shrink_to_fit();
        self.free_head = NIL;
        for index in (0..keep).rev() {
            if self.entries[index].place == PLACE_FREE {
                self.entries[index].next = self.free_head;
                self.free_head = index as u32;
            }
        }
    }

    /// Slab entries allocated (pending or free).
    pub fn slab_len(&self) -> usize {
        self.entries.len()
    }

    /// Reserves slab room for `additional` more timers.
    pub fn reserve(&mut self, additional: usize) {
        self.entries.reserve(additional);
    }

    /// The wheel's current time: the `now` of the last advance.
    pub fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Pending timers.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The deadline of a pending timer.
    pub fn deadline(&self, key: TimerKey) -> u64 {
        self.entries[key.0 as usize].deadline
    }

    /// Adds a timer firing at `deadline`; a deadline already reached fires
    /// at the next advance.
    pub fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        let index = self.alloc(deadline, value);
        self.place(index);
        TimerKey(index)
    }

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

    fn alloc(&mut self, deadline: u64, value: T) -> u32 {
        let entry = Entry {
            deadline,
            prev: NIL,
            next: NIL,
            place: PLACE_FREE,
            lane: NO_LANE,
            value,
        };
        let index = if self.free_head != NIL {
            let index = self.free_head;
            self.free_head = self.entries[index as usize].next;
            self.entries[index as usize] = entry;
            index
        } else {
            let index = u32::try_from(self.entries.len()).expect("fewer than 2^32 timers");
            assert!(index != NIL, "fewer than 2^32 - 1 timers");
            self.entries.push(entry);
            index
        };
        self.len += 1;
        index
    }

    /// Removes a pending timer and returns its value.
    pub fn cancel(&mut self, key: TimerKey) -> T {
        let index = key.0;
        let place = self.entries[index as usize].place;
        debug_assert!(place != PLACE_FREE, "cancel of a timer that is not pending");
        self.take_out(index, place);
        self.release(index)
    }

    /// Moves a pending timer to a new deadline, keeping its key.
    pub fn reset(&mut self, key: TimerKey, deadline: u64) {
        let index = key.0;
        let place = self.entries[index as usize].place;
        debug_assert!(place != PLACE_FREE, "reset of a timer that is not pending");
        self.take_out(index, place);
        self.entries[index as usize].deadline = deadline;
        self.place(index);
    }

    /// Takes a pending timer off the wheel or out of its lane (a lane's
    /// head is followed by the next); it is then in no lane.
    fn take_out(&mut self, index: u32, place: u16) {
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

    /// Puts the next timer of every lane whose head was cancelled on the
    /// wheel.
    fn settle(&mut self) {
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
    fn promote(&mut self, lane: u16, mut fire_until: Option<(u64, &mut Vec<(u64, T)>)>) {
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

    /// A lower bound of the earliest pending deadline (exact for timers that
    /// are due or within the next 256 ms), or `None` when nothing is pending.
    pub fn next_deadline(&self) -> Option<u64> {
        if self.due.head != NIL {
            return Some(self.elapsed);
        }
        let waiting = self
            .dirty
            .iter()
            .filter_map(|&lane| {
                let first = self.lanes[lane as usize].rest.head;
                (first != NIL).then(|| self.entries[first as usize].deadline.max(self.elapsed))
            })
            .min();
        match (self.next_slot().map(|(_, _, start)| start), waiting) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Moves time to `now` and appends every timer whose deadline is at or
    /// before `now` to `fired` as `(deadline, value)`, in no particular order.
    pub fn advance(&mut self, now: u64, fired: &mut Vec<(u64, T)>) {
        self.settle();
        let mut list = std::mem::replace(&mut self.due, EMPTY);
        self.drain_list(&mut list, now, fired);
        if now <= self.elapsed {
            return;
        }
        while let Some((level, slot, start)) = self.next_slot() {
            if start > now {
                break;
            }
            self.elapsed = self.elapsed.max(start);
            let at = level * SLOTS as usize + slot;
            let mut list = std::mem::replace(&mut self.slots[at], EMPTY);
            self.occupied[level].clear(slot);
            self.drain_list(&mut list, now, fired);
        }
        self.elapsed = now;
    }

    fn drain_list(&mut self, list: &mut List, now: u64, fired: &mut Vec<(u64, T)>) {
        let mut index = list.head;
        while index != NIL {
            let entry = self.entries[index as usize];
            let next = entry.next;
            if entry.deadline <= now {
                fired.push((entry.deadline, entry.value));
                self.release(index);
                if entry.lane != NO_LANE {
                    self.promote(entry.lane, Some((now, fired)));
                }
            } else {
                self.place(index);
            }
            index = next;
        }
        *list = EMPTY;
    }

    /// The earliest occupied slot: (level, slot, start time of the slot).
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        for level in 0..LEVELS {
            let occupied = &self.occupied[level];
            if occupied.is_empty() {
                continue;
            }
            let shift = SLOT_BITS * level as u32;
            let slot_span = 1u64 << shift;
            let level_span = slot_span << SLOT_BITS;
            let now_slot = (self.elapsed >> shift) & (SLOTS - 1);
            // Occupied slots lie after the current one; the current slot can
            // be occupied only in the top level, by a timer one rotation
            // ahead, so it is searched last.
            let after = (now_slot + 1) & (SLOTS - 1);
            let slot = occupied.first_from(after as usize) as u64;
            let level_start = self.elapsed & !(level_span - 1);
            let mut start = level_start + slot * slot_span;
            if start <= self.elapsed {
                // Only the top level wraps: a timer placed beyond the end of
                // the wheel sits in a slot "behind" the current one, which
                // means one rotation ahead.
                debug_assert_eq!(level, LEVELS - 1);
                start += level_span;
            }
            return Some((level, slot as usize, start));
        }
        None
    }

    fn place(&mut self, index: u32) {
        let deadline = self.entries[index as usize].deadline;
        if deadline <= self.elapsed {
            self.entries[index as usize].place = PLACE_DUE;
            Self::push_back(&mut self.entries, &mut self.due, index);
            return;
        }
        let at = deadline.min(self.elapsed + RANGE - 1);
        let significant = 63 - ((self.elapsed ^ at) | (SLOTS - 1)).leading_zeros();
        let level = ((significant / SLOT_BITS) as usize).min(LEVELS - 1);
        let slot = ((at >> (SLOT_BITS * level as u32)) & (SLOTS - 1)) as usize;
        let place = level * SLOTS as usize + slot;
        self.entries[index as usize].place = place as u16;
        self.occupied[level].set(slot);
        Self::push_back(&mut self.entries, &mut self.slots[place], index);
    }

    fn push_back(entries: &mut [Entry<T>], list: &mut List, index: u32) {
        entries[index as usize].prev = list.tail;
        entries[index as usize].next = NIL;
        if list.tail == NIL {
            list.head = index;
        } else {
            entries[list.tail as usize].next = index;
        }
        list.tail = index;
    }

    fn unlink_from(entries: &mut [Entry<T>], list: &mut List, index: u32) {
        let Entry { prev, next, .. } = entries[index as usize];
        if prev == NIL {
            list.head = next;
        } else {
            entries[prev as usize].next = next;
        }
        if next == NIL {
            list.tail = prev;
        } else {
            entries[next as usize].prev = prev;
        }
    }

    fn unlink(&mut self, index: u32, place: u16) {
        let list = if place == PLACE_DUE {
            &mut self.due
        } else {
            &mut self.slots[place as usize]
        };
        Self::unlink_from(&mut self.entries, list, index);
        if place != PLACE_DUE && list.head == NIL {
            let level = place as usize / SLOTS as usize;
            let slot = place as usize % SLOTS as usize;
            self.occupied[level].clear(slot);
        }
    }

    fn release(&mut self, index: u32) -> T {
        let entry = &mut self.entries[index as usize];
        let value = entry.value;
        entry.value = T::default();
        entry.place = PLACE_FREE;
        entry.lane = NO_LANE;
        entry.next = self.free_head;
        self.free_head = index;
        self.len -= 1;
        value
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn fire(wheel: &mut TimingWheel<u64>, now: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        wheel.advance(now, &mut out);
        out.sort_unstable();
        out
    }

    #[test]
    fn fires_at_the_deadline_not_before() {
        let mut w = TimingWheel::new(1_000);
        w.insert(1_005, 1);
        w.insert(1_000 + 70, 2);
        w.insert(1_000 + 5_000, 3);
        assert_eq!(fire(&mut w, 1_004), vec![]);
        assert_eq!(fire(&mut w, 1_005), vec![(1_005, 1)]);
        assert_eq!(fire(&mut w, 1_069), vec![]);
        assert_eq!(fire(&mut w, 1_070), vec![(1_070, 2)]);
        assert_eq!(fire(&mut w, 5_999), vec![]);
        assert_eq!(fire(&mut w, 6_000), vec![(6_000, 3)]);
        assert!(w.is_empty());
    }

    #[test]
    fn a_past_deadline_fires_at_the_next_advance() {
        let mut w = TimingWheel::new(500);
        w.insert(10, 7);
        assert_eq!(w.next_deadline(), Some(500));
        assert_eq!(fire(&mut w, 500), vec![(10, 7)]);
    }

    #[test]
    fn cancel_and_reset() {
        let mut w = TimingWheel::new(0);
        let a = w.insert(100, 1);
        let b = w.insert(100, 2);
        let c = w.insert(200_000, 3);
        assert_eq!(w.cancel(a), 1);
        w.reset(c, 50);
        assert_eq!(fire(&mut w, 60), vec![(50, 3)]);
        w.reset(b, 1_000_000);
        assert_eq!(fire(&mut w, 999_999), vec![]);
        assert_eq!(fire(&mut w, 1_000_000), vec![(1_000_000, 2)]);
    }

    #[test]
    fn deadlines_beyond_the_range_still_fire() {
        let mut w = TimingWheel::new(0);
        w.insert(RANGE * 3 + 17, 1);
        assert_eq!(fire(&mut w, RANGE * 3 + 16), vec![]);
        assert_eq!(fire(&mut w, RANGE * 3 + 17), vec![(RANGE * 3 + 17, 1)]);
    }

    #[test]
    fn far_deadlines_near_a_window_edge() {
        let mut w = TimingWheel::new(RANGE - 5);
        let d = RANGE - 5 + RANGE - 2;
        w.insert(d, 1);
        w.insert(RANGE + 1, 2);
        assert_eq!(fire(&mut w, RANGE + 1), vec![(RANGE + 1, 2)]);
        assert_eq!(fire(&mut w, d - 1), vec![]);
        assert_eq!(fire(&mut w, d), vec![(d, 1)]);
    }

    #[test]
    fn next_deadline_is_a_lower_bound() {
        let mut w = TimingWheel::new(0);
        w.insert(10_000, 1);
        let hint = w.next_deadline().unwrap();
        assert!(hint <= 10_000);
        assert_eq!(fire(&mut w, hint.saturating_sub(1)), vec![]);
    }

    /// Random inserts, cancels and advances against a BTreeMap.
    #[test]
    fn matches_a_btreemap() {
        let mut x: u64 = 0xDEAD_BEEF_CAFE_F00D;
        let mut rand = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..20 {
            let mut now = rand(1 << 40);
            let mut w = TimingWheel::new(now);
            let mut model: BTreeMap<(u64, u64), TimerKey> = BTreeMap::new();
            for id in 0..5_000u64 {
                match rand(12) {
                    0..=2 => {
                        let spans = [10, 100, 5_000, 400_000, 100_000_000, RANGE * 2];
                        let deadline = now + rand(spans[(id % 6) as usize]);
                        let key = w.insert(deadline, id);
                        model.insert((deadline, id), key);
                    }
                    3..=5 => {
                        // Streams of a few delays (lanes), and one-off ones.
                        let delays = [0, 5, 300, 70_000, 3_000_000, RANGE + 9];
                        let delay = match rand(8) {
                            0 => rand(1 << 20),
                            k => delays[(k % 6) as usize],
                        };
                        let key = w.insert_in_lane(now + delay, delay, id);
                        model.insert((now + delay, id), key);
                    }
                    6 => {
                        if let Some((&k, &key)) =
                            model.iter().nth(rand(model.len() as u64 + 1) as usize)
                        {
                            let deadline = now + rand(100_000);
                            w.reset(key, deadline);
                            model.remove(&k);
                            model.insert((deadline, k.1), key);
                        }
                    }
                    7 => {
                        if let Some((&k, &key)) =
                            model.iter().nth(rand(model.len() as u64 + 1) as usize)
                        {
                            assert_eq!(w.cancel(key), k.1);
                            model.remove(&k);
                        }
                    }
                    _ => {
                        now += rand([3, 70, 9_000, 1_000_000][(id % 4) as usize]);
                        let got = fire(&mut w, now);
                        let mut want = Vec::new();
                        while let Some((&(d, v), _)) = model.first_key_value() {
                            if d > now {
                                break;
                            }
                            want.push((d, v));
                            model.pop_first();
                        }
                        assert_eq!(got, want, "round {round} at {now}");
                        if let Some(hint) = w.next_deadline() {
                            let first = model.first_key_value().unwrap().0 .0;
                            assert!(hint <= first, "hint {hint} after first deadline {first}");
                        }
                    }
                }
                assert_eq!(w.len(), model.len());
            }
            assert!(w.lanes.len() > 1, "streams took lanes");
        }
    }

    /// A timer's entry is most of its memory (docs/benchmarks.md "Memory per
    /// resident message"): with a 4-byte value, 24 bytes.
    #[test]
    fn an_entry_of_a_four_byte_timer_takes_24_bytes() {
        assert_eq!(std::mem::size_of::<Entry<u32>>(), 24);
    }

    #[test]
    fn a_lane_fires_in_order_and_survives_cancelling_its_head() {
        let mut w = TimingWheel::new(0);
        // The first timer of a delay goes on the wheel; the second earns
        // the lane.
        let keys: Vec<TimerKey> = (0..6u64)
            .map(|i| w.insert_in_lane(i * 10 + 1_000, 1_000, i))
            .collect();
        assert_eq!(w.lanes_in_use(), 1);
        assert_eq!(w.cancel(keys[1]), 1, "the lane's head");
        assert_eq!(w.cancel(keys[3]), 3, "one behind the head");
        assert_eq!(fire(&mut w, 1_000), vec![(1_000, 0)]);
        // Timers of one lane due by the same advance all fire in it.
        assert_eq!(
            fire(&mut w, 1_050),
            vec![(1_020, 2), (1_040, 4), (1_050, 5)]
        );
        assert!(w.is_empty());
        assert_eq!(w.lanes_in_use(), 0);
    }

    #[test]
    fn one_off_delays_never_take_a_lane_and_lanes_are_bounded() {
        let mut w = TimingWheel::new(0);
        for d in 1..=1_000u64 {
            w.insert_in_lane(d * 7, d * 7, d);
        }
        assert_eq!(w.lanes_in_use(), 0);
        for d in 1..=(LANES as u64 + 10) {
            w.insert_in_lane(d, d, d);
            w.insert_in_lane(d, d, d);
        }
        assert!(w.lanes_in_use() <= LANES);
        assert_eq!(w.len(), 1_000 + 2 * (LANES + 10));
    }
}
