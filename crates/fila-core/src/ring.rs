//! The visible ring: a bounded, lock-free, multi-producer multi-consumer FIFO
//! of message handles (Dmitry Vyukov's array queue), with growth when its
//! owner holds it exclusively.
//!
//! Each slot carries a stamp. For a slot at position `p` (mod capacity) the
//! stamp is `p` when the slot is free for the producer claiming position `p`,
//! and `p + 1` once that producer has written the value. A consumer claiming
//! position `p` waits for `p + 1`, reads, and sets `p + capacity`, handing the
//! slot to the producer one lap later. Head and tail are claimed by
//! compare-and-swap, so several threads may push and pop at once. Values are
//! `u64` handles stored in atomics, which keeps the ring free of `unsafe`.
//!
//! Orderings: a producer writes the value (relaxed) and then publishes the
//! stamp with `Release`; a consumer loads the stamp with `Acquire` before
//! reading the value, so it sees the value that stamp published. Head and tail
//! are only positions to claim: the stamps carry the synchronization, so their
//! compare-and-swaps are relaxed.
//!
//! The shard pushes with [`ReadyRing::push_or_grow`], which doubles the
//! capacity when the ring is full: growth needs `&mut self`, i.e. no concurrent
//! user, so it is plain code. The loom tests in `tests/loom_ring.rs` check the
//! concurrent path.

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, AtomicUsize, Ordering};

struct Slot {
    stamp: AtomicUsize,
    value: AtomicU64,
}

/// A FIFO of `u64` handles.
pub struct ReadyRing {
    head: CachePadded<AtomicUsize>,
    tail: CachePadded<AtomicUsize>,
    slots: Box<[Slot]>,
}

impl std::fmt::Debug for ReadyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadyRing")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl ReadyRing {
    /// The capacity a new ring starts with when none is given.
    pub const INITIAL_CAPACITY: usize = 8;

    /// A ring holding at least `capacity` handles (rounded up to a power of two).
    pub fn with_capacity(capacity: usize) -> ReadyRing {
        let capacity = capacity.max(2).next_power_of_two();
        let slots = (0..capacity)
            .map(|i| Slot {
                stamp: AtomicUsize::new(i),
                value: AtomicU64::new(0),
            })
            .collect();
        ReadyRing {
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
            slots,
        }
    }

    /// How many handles fit before the ring must grow.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Handles in the ring (exact when no other thread is using it).
    pub fn len(&self) -> usize {
        let tail = self.tail.load(Ordering::Acquire);
        let head = self.head.load(Ordering::Acquire);
        tail.wrapping_sub(head).min(self.capacity())
    }

    /// Whether the ring holds no handle.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends `value`, or gives it back when the ring is full.
    pub fn push(&self, value: u64) -> Result<(), u64> {
        let mut tail = self.tail.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[tail & self.mask()];
            let stamp = slot.stamp.load(Ordering::Acquire);
            let lag = stamp.wrapping_sub(tail) as isize;
            if lag == 0 {
                match self.tail.compare_exchange_weak(
                    tail,
                    tail.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        slot.value.store(value, Ordering::Relaxed);
                        slot.stamp.store(tail.wrapping_add(1), Ordering::Release);
                        return Ok(());
                    }
                    Err(current) => tail = current,
                }
            } else if lag < 0 {
                // The slot still holds the value from one lap ago: full.
                return Err(value);
            } else {
                // Another producer claimed this position; catch up.
                tail = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Removes the oldest handle.
    pub fn pop(&self) -> Option<u64> {
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[head & self.mask()];
            let stamp = slot.stamp.load(Ordering::Acquire);
            let lag = stamp.wrapping_sub(head.wrapping_add(1)) as isize;
            if lag == 0 {
                match self.head.compare_exchange_weak(
                    head,
                    head.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let value = slot.value.load(Ordering::Relaxed);
                        slot.stamp
                            .store(head.wrapping_add(self.capacity()), Ordering::Release);
                        return Some(value);
                    }
                    Err(current) => head = current,
                }
            } else if lag < 0 {
                // Nothing written at this position yet: empty.
                return None;
            } else {
                head = self.head.load(Ordering::Relaxed);
            }
        }
    }

    /// Appends `value`, doubling the capacity first when the ring is full.
    pub fn push_or_grow(&mut self, value: u64) {
        if let Err(value) = self.push(value) {
            self.grow();
            let pushed = self.push(value);
            debug_assert!(pushed.is_ok(), "a grown ring has room");
        }
    }

    /// Removes every handle.
    pub fn clear(&mut self) {
        while self.pop().is_some() {}
    }

    /// Shrinks an empty ring that grew large back to its initial capacity,
    /// so a queue that drained does not keep a burst's memory.
    pub fn shrink_if_empty(&mut self) {
        if self.is_empty() && self.capacity() > Self::INITIAL_CAPACITY * 64 {
            *self = ReadyRing::with_capacity(Self::INITIAL_CAPACITY);
        }
    }

    fn grow(&mut self) {
        let bigger = ReadyRing::with_capacity(self.capacity() * 2);
        while let Some(v) = self.pop() {
            let pushed = bigger.push(v);
            debug_assert!(pushed.is_ok());
        }
        *self = bigger;
    }
}

impl Default for ReadyRing {
    fn default() -> Self {
        ReadyRing::with_capacity(Self::INITIAL_CAPACITY)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn fifo_and_full() {
        let r = ReadyRing::with_capacity(4);
        for v in 0..4 {
            r.push(v).unwrap();
        }
        assert_eq!(r.push(9), Err(9));
        assert_eq!(r.len(), 4);
        assert_eq!(r.pop(), Some(0));
        r.push(4).unwrap();
        assert_eq!(
            (1..5).map(|_| r.pop().unwrap()).collect::<Vec<_>>(),
            vec![1, 2, 3, 4]
        );
        assert_eq!(r.pop(), None);
    }

    #[test]
    fn grows_and_keeps_order_against_a_vecdeque() {
        let mut r = ReadyRing::with_capacity(2);
        let mut model = VecDeque::new();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for i in 0..10_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x.is_multiple_of(3) {
                assert_eq!(r.pop(), model.pop_front());
            } else {
                r.push_or_grow(i);
                model.push_back(i);
            }
            assert_eq!(r.len(), model.len());
        }
        while let Some(v) = model.pop_front() {
            assert_eq!(r.pop(), Some(v));
        }
        assert!(r.is_empty());
    }

    #[test]
    fn threads_pass_every_value_once() {
        let ring = std::sync::Arc::new(ReadyRing::with_capacity(64));
        let producers: Vec<_> = (0..2u64)
            .map(|p| {
                let ring = ring.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        let mut v = p << 32 | i;
                        while let Err(back) = ring.push(v) {
                            v = back;
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut seen = vec![Vec::new(), Vec::new()];
        let mut got = 0;
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while got < 40_000 {
            assert!(
                std::time::Instant::now() < give_up,
                "lost values: {got} of 40000"
            );
            if let Some(v) = ring.pop() {
                seen[(v >> 32) as usize].push(v & 0xFFFF_FFFF);
                got += 1;
            } else {
                std::thread::yield_now();
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        for s in seen {
            assert_eq!(
                s,
                (0..20_000).collect::<Vec<_>>(),
                "each producer's values in order, once"
            );
        }
    }
}
