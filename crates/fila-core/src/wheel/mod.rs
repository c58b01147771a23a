//! A hierarchical timing wheel: four levels of 256 slots over 1 ms ticks
//! (level `n` slots span `256^n` ms, so the wheel reaches 2^32 ms, about 49
//! days; later deadlines wait in the last level and are placed again).
//!
//! Timers live in a slab; each slot is a vector of slab indices, and each
//! timer on the wheel knows its index in its slot's vector, so insert and
//! cancel (the slot's last timer takes the cancelled one's place) are O(1)
//! and allocate nothing once the slab and the slots have grown. A slot is
//! drained by reading its vector: the deadlines of the timers it names are
//! loaded in runs of `GATHER`, loads that do not wait on each other, so the
//! cache misses of a large wheel overlap (an intrusive list would take them
//! one link at a time). Each level keeps a 256-bit occupancy mask; the
//! level of a timer is chosen from the highest bit in which its deadline
//! differs from the wheel's current time (`now ^ deadline`), as in tokio's
//! wheel (with wider levels: a lease of minutes or hours is moved down twice,
//! not three or four times). Advancing finds the next occupied slot with
//! `trailing_zeros`, fires the timers that are due and moves the others down
//! a level. A timer is moved at
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

mod lanes;

use lanes::Lane;

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
/// Timers whose deadlines a drain reads ahead of acting on them.
const GATHER: usize = 32;
/// The most room (timers) a drained slot's vector keeps for its next ones.
const KEEP_ROOM: usize = 1024;

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
    /// On the wheel: its index in its slot's vector. Waiting in a lane:
    /// the timer before it.
    prev: u32,
    /// Waiting in a lane: the timer after it. Free: the next free entry.
    next: u32,
    /// `level * SLOTS + slot`, or one of the `PLACE_*` markers.
    place: u16,
    /// The lane it belongs to (its head is on the wheel, the others wait
    /// with `PLACE_LANE`), or `NO_LANE`.
    lane: u16,
    value: T,
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
    /// The timers of each slot, by slab index, in no order: a slot is
    /// drained by reading a vector, so the entries it names are loaded
    /// independently of each other (not one link at a time).
    slots: Box<[Vec<u32>]>,
    /// Timers inserted with a deadline already reached.
    due: Vec<u32>,
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
            slots: (0..LEVELS * SLOTS as usize).map(|_| Vec::new()).collect(),
            due: Vec::new(),
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

    /// Gives back the room of timers long gone: when at most half of the
    /// slab is pending, the free entries past the last pending one are
    /// dropped and the allocation shrunk, and so is each slot's vector.
    /// Keys of pending timers are kept. O(slab) when it trims, so callers
    /// use it after bulk removals only.
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
        for slot in self.slots.iter_mut().chain([&mut self.due]) {
            slot.shrink_to_fit();
        }
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

    /// A lower bound of the earliest pending deadline (exact for timers that
    /// are due or within the next 256 ms), or `None` when nothing is pending.
    pub fn next_deadline(&self) -> Option<u64> {
        if !self.due.is_empty() {
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
        if !self.due.is_empty() {
            let mut list = std::mem::take(&mut self.due);
            self.drain_list(&mut list, now, fired);
            self.give_back(None, list);
        }
        if now <= self.elapsed {
            return;
        }
        while let Some((level, slot, start)) = self.next_slot() {
            if start > now {
                break;
            }
            self.elapsed = self.elapsed.max(start);
            let at = level * SLOTS as usize + slot;
            let mut list = std::mem::take(&mut self.slots[at]);
            self.occupied[level].clear(slot);
            self.drain_list(&mut list, now, fired);
            self.give_back(Some(at), list);
        }
        self.elapsed = now;
    }

    /// Fires or places again every timer of a drained slot.
    fn drain_list(&mut self, list: &mut Vec<u32>, now: u64, fired: &mut Vec<(u64, T)>) {
        if list.len() < GATHER {
            for &index in list.iter() {
                let deadline = self.entries[index as usize].deadline;
                self.drain_one(index, deadline, now, fired);
            }
            list.clear();
            return;
        }
        for chunk in list.chunks(GATHER) {
            // The entries a slot names lie anywhere in the slab: read their
            // deadlines first, in a loop of loads that do not wait on each
            // other (the CPU overlaps their cache misses), then act on them
            // from the cache.
            let mut deadlines = [0u64; GATHER];
            for (d, &index) in deadlines.iter_mut().zip(chunk) {
                *d = self.entries[index as usize].deadline;
            }
            for (&deadline, &index) in deadlines.iter().zip(chunk) {
                self.drain_one(index, deadline, now, fired);
            }
        }
        list.clear();
    }

    #[inline(always)]
    fn drain_one(&mut self, index: u32, deadline: u64, now: u64, fired: &mut Vec<(u64, T)>) {
        if deadline <= now {
            let lane = self.entries[index as usize].lane;
            fired.push((deadline, self.release(index)));
            if lane != NO_LANE {
                self.promote(lane, Some((now, fired)));
            }
        } else {
            self.place(index);
        }
    }

    /// Returns a drained slot's vector (`None`: the due list's) to keep its
    /// room for the slot's next timers, unless the slot has new ones or the
    /// room is large (a far slot refills slowly; its room is freed).
    fn give_back(&mut self, at: Option<usize>, list: Vec<u32>) {
        let slot = match at {
            Some(at) => &mut self.slots[at],
            None => &mut self.due,
        };
        if slot.is_empty() && list.capacity() <= KEEP_ROOM {
            *slot = list;
        }
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

    #[inline]
    fn place(&mut self, index: u32) {
        let deadline = self.entries[index as usize].deadline;
        if deadline <= self.elapsed {
            let entry = &mut self.entries[index as usize];
            entry.place = PLACE_DUE;
            entry.prev = self.due.len() as u32;
            self.due.push(index);
            return;
        }
        let at = deadline.min(self.elapsed + RANGE - 1);
        let significant = 63 - ((self.elapsed ^ at) | (SLOTS - 1)).leading_zeros();
        let level = ((significant / SLOT_BITS) as usize).min(LEVELS - 1);
        let slot = ((at >> (SLOT_BITS * level as u32)) & (SLOTS - 1)) as usize;
        let place = level * SLOTS as usize + slot;
        let list = &mut self.slots[place];
        let entry = &mut self.entries[index as usize];
        entry.place = place as u16;
        entry.prev = list.len() as u32;
        list.push(index);
        self.occupied[level].set(slot);
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

    /// Takes a timer off the wheel (or the due list): the last of its
    /// slot takes its place in the slot's vector.
    fn unlink(&mut self, index: u32, place: u16) {
        let list = if place == PLACE_DUE {
            &mut self.due
        } else {
            &mut self.slots[place as usize]
        };
        let at = self.entries[index as usize].prev as usize;
        debug_assert_eq!(list[at], index);
        list.swap_remove(at);
        if let Some(&moved) = list.get(at) {
            self.entries[moved as usize].prev = at as u32;
        }
        if place != PLACE_DUE && list.is_empty() {
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
mod tests;
