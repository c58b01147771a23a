//! A hierarchical timing wheel: four levels over 1 ms ticks, a slot of
//! level `n` spanning `256^n` ms, each level a ring of 512 slots (as wide
//! as two slots of the level above), so the wheel reaches 511 × 2^24 ms,
//! about 99 days (later deadlines wait in the last level and are placed
//! again).
//!
//! Timers live in a slab; each slot is a vector of slab indices, and each
//! timer on the wheel knows its index in its slot's vector, so insert and
//! cancel (the slot's last timer takes the cancelled one's place) are O(1)
//! and allocate nothing once the slab and the slots have grown. A slot is
//! drained by reading its vector: the deadlines of the timers it names are
//! loaded in runs of `GATHER`, loads that do not wait on each other, so the
//! cache misses of a large wheel overlap (an intrusive list would take them
//! one link at a time). Each level keeps a 512-bit occupancy mask. A timer
//! goes to the lowest level whose ring reaches its deadline (fewer than 512
//! of that level's slots ahead of the wheel's current one). Advancing finds
//! the next occupied slot with `trailing_zeros`, fires the timers that are
//! due and moves the others down a level. A timer is moved at most once per
//! level, so the cost of expiring one stays flat however many are pending.
//!
//! Moving down ahead of time: a ring is as wide as two slots of the level
//! above, so the timers of a level's next slot fit the level below from
//! the moment the wheel enters the slot before it, a whole slot's span
//! ahead of their time (65.5 s for level 2, 256 ms for level 1).
//! [`TimingWheel::migrate`] moves them down then, a bounded number per
//! call, and new timers for that slot go below at once, so no advance has
//! to move a crowded slot in one go. What is not moved by the slot's time
//! is moved when it comes due. (With rings of 256 slots, and levels chosen
//! by the highest bit in which a deadline differed from the time, leases
//! spread uniformly over a minute sent about half of them to one slot of
//! level 2, moved down in the advance at which it came due: 15–27 ms for a
//! million, the owner's loop stopped meanwhile. Now a minute ahead is
//! always within level 1's reach, and longer leases that do crowd a slot
//! of level 2 move ahead of their time.)
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
/// A slot of level `n` spans `2^(SLOT_BITS * n)` ms.
const SLOT_BITS: u32 = 8;
/// Slots of each level's ring: two slots of the level above.
const RING: u64 = 2 << SLOT_BITS;
const WORDS: usize = (RING / 64) as usize;
/// The farthest distance a timer can be placed at; beyond it, it is placed
/// at the edge and placed again when that slot comes due.
const RANGE: u64 = (RING - 1) << (SLOT_BITS * (LEVELS as u32 - 1));
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

/// The levels whose bits are set in `mask`, lowest first.
fn levels_in(mask: u8) -> impl Iterator<Item = usize> {
    (0..LEVELS).filter(move |level| mask & (1 << level) != 0)
}

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
    /// `level * RING + slot`, or one of the `PLACE_*` markers.
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

    fn get(&self, slot: usize) -> bool {
        self.0[slot / 64] & (1 << (slot % 64)) != 0
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
    /// Bit `n`: level `n` has an occupied slot.
    levels: u8,
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
    /// Timers moved from one slot to another so far.
    moves: u64,
}

impl<T: Copy + Default> TimingWheel<T> {
    /// An empty wheel whose current time is `now`.
    pub fn new(now: u64) -> TimingWheel<T> {
        TimingWheel {
            elapsed: now,
            occupied: [Occupancy::default(); LEVELS],
            levels: 0,
            slots: (0..LEVELS * RING as usize).map(|_| Vec::new()).collect(),
            due: Vec::new(),
            entries: Vec::new(),
            free_head: NIL,
            len: 0,
            lanes: Vec::new(),
            lane_of: hashbrown::HashMap::new(),
            seen: Box::new([u64::MAX; SEEN]),
            last_lanes: [0, 0],
            dirty: Vec::new(),
            moves: 0,
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

    /// Timers moved from one slot to another so far: by draining a slot
    /// that came due, or by [`TimingWheel::migrate`].
    pub fn moves(&self) -> u64 {
        self.moves
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
    /// are due or within the next 512 ms), or `None` when nothing is pending.
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
            let at = level * RING as usize + slot;
            let mut list = std::mem::take(&mut self.slots[at]);
            self.clear_occupied(level, slot);
            self.drain_list(&mut list, now, fired);
            self.give_back(Some(at), list);
        }
        self.elapsed = now;
    }

    /// Moves down, ahead of their time, up to `max` timers of the next slot
    /// of each level above the first (lowest level first): from the moment
    /// the wheel enters a level's slot, the timers of the slot after it fit
    /// the level below. Nothing fires (they are all due after the wheel's
    /// time) and what fires when is unchanged: a slot whose timers were
    /// not all moved ahead is drained when it comes due. Answers how many
    /// it moved.
    pub fn migrate(&mut self, max: usize) -> usize {
        let mut moved = 0;
        for level in 1..LEVELS {
            if moved >= max {
                break;
            }
            let shift = SLOT_BITS * level as u32;
            let slot = (((self.elapsed >> shift) + 1) & (RING - 1)) as usize;
            if !self.occupied[level].get(slot) {
                continue;
            }
            let at = level * RING as usize + slot;
            let mut list = std::mem::take(&mut self.slots[at]);
            // From the vector's end: the timers left keep their indices.
            let keep = list.len().saturating_sub(max - moved);
            for chunk in list[keep..].chunks(GATHER) {
                // As in a drain: the deadlines are read first, their cache
                // misses overlapping.
                let mut deadlines = [0u64; GATHER];
                for (d, &index) in deadlines.iter_mut().zip(chunk) {
                    *d = self.entries[index as usize].deadline;
                }
                for (&deadline, &index) in deadlines.iter().zip(chunk) {
                    self.place_at(index, deadline);
                }
            }
            moved += list.len() - keep;
            self.moves += (list.len() - keep) as u64;
            list.truncate(keep);
            if list.is_empty() {
                self.clear_occupied(level, slot);
                self.give_back(Some(at), list);
            } else {
                // No timer moved lands in the slot it left: each goes a level
                // down (or, past the wheel's reach, to the last slot of it).
                debug_assert!(self.slots[at].is_empty());
                self.slots[at] = list;
            }
        }
        moved
    }

    /// When [`TimingWheel::migrate`] has timers to move next: the wheel's
    /// time while a level's next slot holds some, else when the wheel
    /// enters the slot before the first one that does; `None` when no
    /// level above the first holds a timer.
    pub fn next_migration(&self) -> Option<u64> {
        let mut first: Option<u64> = None;
        for level in levels_in(self.levels & !1) {
            let occupied = &self.occupied[level];
            let shift = SLOT_BITS * level as u32;
            let now_slot = self.elapsed >> shift;
            let from = ((now_slot + 1) & (RING - 1)) as usize;
            let slot = occupied.first_from(from);
            // 0: the next slot; RING - 1: the current one, whose time has
            // come (the next advance drains it).
            let ahead = (slot as u64).wrapping_sub(from as u64) & (RING - 1);
            let at = if ahead == 0 || ahead == RING - 1 {
                self.elapsed
            } else {
                (now_slot + ahead) << shift
            };
            first = Some(first.map_or(at, |f| f.min(at)));
        }
        first
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
            self.moves += 1;
            self.place_at(index, deadline);
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
        let mut first: Option<(usize, usize, u64)> = None;
        for level in levels_in(self.levels) {
            let occupied = &self.occupied[level];
            let shift = SLOT_BITS * level as u32;
            // A level's occupied slots lie 1 to 511 slots after the current
            // one, or on it while its time has just come (a slot of another
            // level that started at the same time was drained first).
            let now_slot = self.elapsed >> shift;
            let from = (now_slot & (RING - 1)) as usize;
            if let Some((_, _, best)) = first {
                // Its next slot cannot start before the one found below
                // (unless its current one is occupied: due now).
                if !occupied.get(from) && (now_slot + 1) << shift >= best {
                    continue;
                }
            }
            let slot = occupied.first_from(from);
            let ahead = (slot as u64).wrapping_sub(from as u64) & (RING - 1);
            let start = (now_slot + ahead) << shift;
            if first.is_none_or(|(_, _, s)| start < s) {
                first = Some((level, slot, start));
            }
        }
        first
    }

    /// The level and slot of a timer due at `deadline` (after the wheel's
    /// time): the lowest level whose ring reaches it.
    #[inline]
    fn level_and_slot(&self, deadline: u64) -> (usize, usize) {
        let at = deadline.min(self.elapsed + RANGE);
        let mut level = 0;
        while level < LEVELS - 1 {
            let shift = SLOT_BITS * level as u32;
            if (at >> shift) - (self.elapsed >> shift) < RING {
                break;
            }
            level += 1;
        }
        let slot = ((at >> (SLOT_BITS * level as u32)) & (RING - 1)) as usize;
        (level, slot)
    }

    #[inline]
    fn place(&mut self, index: u32) {
        let deadline = self.entries[index as usize].deadline;
        self.place_at(index, deadline);
    }

    /// [`TimingWheel::place`] of a timer whose deadline was read.
    #[inline]
    fn place_at(&mut self, index: u32, deadline: u64) {
        if deadline <= self.elapsed {
            let entry = &mut self.entries[index as usize];
            entry.place = PLACE_DUE;
            entry.prev = self.due.len() as u32;
            self.due.push(index);
            return;
        }
        let (level, slot) = self.level_and_slot(deadline);
        let place = level * RING as usize + slot;
        let list = &mut self.slots[place];
        let entry = &mut self.entries[index as usize];
        entry.place = place as u16;
        entry.prev = list.len() as u32;
        list.push(index);
        self.set_occupied(level, slot);
    }

    fn set_occupied(&mut self, level: usize, slot: usize) {
        self.occupied[level].set(slot);
        self.levels |= 1 << level;
    }

    fn clear_occupied(&mut self, level: usize, slot: usize) {
        self.occupied[level].clear(slot);
        if self.occupied[level].is_empty() {
            self.levels &= !(1 << level);
        }
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
            let level = place as usize / RING as usize;
            let slot = place as usize % RING as usize;
            self.clear_occupied(level, slot);
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
