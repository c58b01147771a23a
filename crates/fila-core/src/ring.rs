//! The visible ring: a FIFO of message handles per channel, grown when
//! full and shrunk back when a burst has drained.
//!
//! Plain data: a shard is touched by one thread at a time (its owning event
//! loop in a server, the shard's mutex in the in-process engine), so the
//! ring needs no atomics. It was a lock-free multi-producer multi-consumer
//! ring (Vyukov's) while several threads could reach a shard; with one owner
//! per shard that machinery had no second thread to serve, and a plain ring
//! takes half the memory per handle (8 bytes, not a stamp and a value).

use std::collections::VecDeque;

/// A FIFO of `u64` handles.
#[derive(Debug)]
pub struct ReadyRing {
    handles: VecDeque<u64>,
}

impl ReadyRing {
    /// The capacity a new ring starts with when none is given.
    pub const INITIAL_CAPACITY: usize = 8;

    /// A ring holding at least `capacity` handles (rounded up to a power of
    /// two) before it must grow.
    pub fn with_capacity(capacity: usize) -> ReadyRing {
        ReadyRing {
            handles: VecDeque::with_capacity(capacity.max(2).next_power_of_two()),
        }
    }

    /// How many handles fit before the ring must grow.
    pub fn capacity(&self) -> usize {
        self.handles.capacity()
    }

    /// Handles in the ring.
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// Whether the ring holds no handle.
    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// Appends `value`, or gives it back when the ring is full.
    pub fn push(&mut self, value: u64) -> Result<(), u64> {
        if self.handles.len() == self.handles.capacity() {
            return Err(value);
        }
        self.handles.push_back(value);
        Ok(())
    }

    /// Removes the oldest handle.
    pub fn pop(&mut self) -> Option<u64> {
        self.handles.pop_front()
    }

    /// Appends `value`, growing the ring first when it is full.
    pub fn push_or_grow(&mut self, value: u64) {
        self.handles.push_back(value);
    }

    /// Removes every handle.
    pub fn clear(&mut self) {
        self.handles.clear();
    }

    /// Shrinks an empty ring that grew large back to its initial capacity,
    /// so a queue that drained does not keep a burst's memory.
    pub fn shrink_if_empty(&mut self) {
        if self.is_empty() && self.capacity() > Self::INITIAL_CAPACITY * 64 {
            *self = ReadyRing::with_capacity(Self::INITIAL_CAPACITY);
        }
    }
}

impl Default for ReadyRing {
    fn default() -> Self {
        ReadyRing::with_capacity(Self::INITIAL_CAPACITY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn fifo_and_full() {
        let mut r = ReadyRing::with_capacity(4);
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
}
