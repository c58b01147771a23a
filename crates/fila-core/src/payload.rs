//! Message bodies: [`Payload`], an immutable, shared buffer, and the
//! per-shard [`PayloadPool`] that recycles the buffers of removed messages
//! so that, at steady state, storing a message allocates nothing.
//!
//! A put copies each body into a buffer of its size class taken from the
//! shard's pool (a stored message never pins a connection's read buffer);
//! a receive, peek, snapshot or dead-letter move hands out clones (a
//! reference count, no copy, no allocation); removing a message gives its
//! buffer back to the pool. A buffer is reused only when nothing else holds
//! it any more (`Arc::get_mut`): one still held by a reader is let go and
//! freed when the reader drops it. No `unsafe`: uniqueness is what the
//! standard library's `Arc` checks.
//!
//! Size classes are eight steps per power of two from 64 bytes (at most
//! 12.5 % rounding) up to [`POOLED_MAX`]; a larger body gets a buffer of its
//! exact size, allocated per message (its copy costs more than the
//! allocation). The pool keeps at most [`POOL_BYTES`] of free buffers per
//! shard; beyond that a removed message's buffer is freed.

use std::collections::VecDeque;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use bytes::Bytes;

/// Bytes of free buffers a shard's pool keeps for reuse, at most.
pub const POOL_BYTES: usize = 1 << 20;
/// The largest body whose buffer is pooled; larger ones get their own.
pub const POOLED_MAX: usize = 64 << 10;
/// The smallest size class.
const CLASS_MIN: usize = 64;
/// Steps per power of two.
const STEPS_LOG2: u32 = 3;
const CLASSES: usize = 1 + ((POOLED_MAX.ilog2() - CLASS_MIN.ilog2()) << STEPS_LOG2) as usize;
/// Buffers taken off a class's list looking for a free one, at most, before
/// a new one is allocated.
const PROBES: usize = 2;

/// A message body: an immutable view of the first `len` bytes of a shared
/// buffer. Cloning counts a reference; it never copies or allocates.
#[derive(Clone, Default)]
pub struct Payload {
    buf: Option<Arc<[u8]>>,
    len: u32,
}

impl Payload {
    /// A payload holding a copy of `data` in a buffer of its own (one
    /// allocation; none when `data` is empty).
    ///
    /// # Panics
    /// If `data` is 4 GiB or longer (no queue admits such a message).
    pub fn copy_from_slice(data: &[u8]) -> Payload {
        let len = u32::try_from(data.len()).expect("a payload under 4 GiB");
        if data.is_empty() {
            return Payload::default();
        }
        Payload {
            buf: Some(Arc::from(data)),
            len,
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its bytes.
    pub fn as_slice(&self) -> &[u8] {
        match &self.buf {
            Some(buf) => &buf[..self.len as usize],
            None => &[],
        }
    }

    /// A `Bytes` sharing this payload's buffer (one small allocation for
    /// the `Bytes`' owner, no copy).
    pub fn to_bytes(&self) -> Bytes {
        if self.is_empty() {
            Bytes::new()
        } else {
            Bytes::from_owner(self.clone())
        }
    }

    pub(crate) fn into_parts(self) -> (Option<Arc<[u8]>>, u32) {
        (self.buf, self.len)
    }

    pub(crate) fn from_parts(buf: Option<Arc<[u8]>>, len: u32) -> Payload {
        debug_assert!(buf.as_ref().map_or(0, |b| b.len()) >= len as usize);
        Payload { buf, len }
    }
}

impl Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Payload {}

impl PartialEq<[u8]> for Payload {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<&[u8]> for Payload {
    fn eq(&self, other: &&[u8]) -> bool {
        self.as_slice() == *other
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b\"{}\"", self.as_slice().escape_ascii())
    }
}

impl From<&[u8]> for Payload {
    fn from(data: &[u8]) -> Payload {
        Payload::copy_from_slice(data)
    }
}

impl From<&str> for Payload {
    fn from(data: &str) -> Payload {
        Payload::copy_from_slice(data.as_bytes())
    }
}

/// The size of the buffer a body of `len` bytes is stored in: `len` rounded
/// up to its class (eight steps per power of two above 64), or `len` itself
/// above [`POOLED_MAX`].
pub fn class_size(len: usize) -> usize {
    if len <= CLASS_MIN {
        return CLASS_MIN;
    }
    if len > POOLED_MAX {
        return len;
    }
    let power = (len - 1).ilog2();
    let step = 1usize << (power - STEPS_LOG2);
    len.div_ceil(step) * step
}

/// The index of a pooled class size.
fn class_index(size: usize) -> usize {
    if size <= CLASS_MIN {
        return 0;
    }
    let power = (size - 1).ilog2();
    let step = 1usize << (power - STEPS_LOG2);
    // `size` is (2^power, 2^(power + 1)]: steps 1 ..= 8 of that octave.
    let within = size / step - (1 << STEPS_LOG2);
    1 + (((power - CLASS_MIN.ilog2()) << STEPS_LOG2) as usize) + within - 1
}

/// One shard's free buffers, by size class (see the module docs).
pub(crate) struct PayloadPool {
    classes: Vec<VecDeque<Arc<[u8]>>>,
    /// Bytes of the buffers on the lists.
    bytes: usize,
}

impl Default for PayloadPool {
    fn default() -> PayloadPool {
        PayloadPool {
            classes: (0..CLASSES).map(|_| VecDeque::new()).collect(),
            bytes: 0,
        }
    }
}

impl PayloadPool {
    /// A payload holding a copy of `data`, in a free buffer of its class
    /// when one is on hand, else in a new one.
    pub(crate) fn store(&mut self, data: &[u8]) -> Payload {
        if data.is_empty() {
            return Payload::default();
        }
        let len = u32::try_from(data.len()).expect("a payload under 4 GiB");
        let size = class_size(data.len());
        if size <= POOLED_MAX {
            let list = &mut self.classes[class_index(size)];
            for _ in 0..PROBES {
                let Some(mut buf) = list.pop_front() else {
                    break;
                };
                self.bytes -= buf.len();
                if let Some(free) = Arc::get_mut(&mut buf) {
                    free[..data.len()].copy_from_slice(data);
                    return Payload::from_parts(Some(buf), len);
                }
                // A reader still holds it: it is freed when the reader
                // lets go.
            }
        }
        if size <= POOLED_MAX {
            // Room on the class's list for this buffer's return is made
            // now, while putting, so that giving it back (a delete) never
            // allocates: each miss makes room for at least one more, up to
            // the pool's bound for the class.
            let list = &mut self.classes[class_index(size)];
            if list.capacity() < POOL_BYTES / size {
                list.reserve(list.capacity() - list.len() + 1);
            }
        }
        let mut buf: Arc<[u8]> = std::iter::repeat_n(0u8, size).collect();
        Arc::get_mut(&mut buf).expect("a new buffer is unique")[..data.len()].copy_from_slice(data);
        Payload::from_parts(Some(buf), len)
    }

    /// Takes back the buffer of a removed message's payload: kept when it
    /// is a pooled size and its class's list has room (made by the puts
    /// that allocated), else dropped. Never allocates.
    pub(crate) fn give(&mut self, buf: Arc<[u8]>) {
        let size = buf.len();
        if size > POOLED_MAX || size != class_size(size) || self.bytes + size > POOL_BYTES {
            return;
        }
        let list = &mut self.classes[class_index(size)];
        if list.len() < list.capacity() {
            self.bytes += size;
            list.push_back(buf);
        }
    }

    /// Bytes of free buffers held.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_round_up_by_at_most_an_eighth_and_index_densely() {
        let mut seen = [false; CLASSES];
        let mut last = 0;
        for len in 1..=POOLED_MAX {
            let size = class_size(len);
            assert!(size >= len);
            if len > CLASS_MIN {
                assert!((size - len) * 8 < len, "{len} -> {size}");
            }
            assert_eq!(class_size(size), size, "a class size is its own class");
            let i = class_index(size);
            assert!(i >= last, "classes grow with size");
            last = i;
            seen[i] = true;
        }
        assert!(seen.iter().all(|s| *s), "every class is used");
        assert_eq!(class_size(100), 104);
        assert_eq!(class_size(POOLED_MAX + 1), POOLED_MAX + 1);
    }

    #[test]
    fn a_given_buffer_is_reused_only_once_nothing_else_holds_it() {
        let mut pool = PayloadPool::default();
        let a = pool.store(b"first body");
        let held = a.clone();
        let (buf, _) = a.into_parts();
        pool.give(buf.unwrap());
        assert_eq!(pool.bytes(), CLASS_MIN);
        // The reader's clone is still alive: the buffer is not reused (a
        // new buffer is zeroed past the body; a reused one keeps the old
        // body's tail).
        let b = pool.store(b"second");
        assert_eq!(&held[..], b"first body");
        assert_eq!(&b[..], b"second");
        assert_eq!(pool.bytes(), 0, "the held buffer left the pool");
        let (buf, _) = b.into_parts();
        let buf = buf.unwrap();
        assert_eq!(&buf[..10], b"second\0\0\0\0");
        drop(held);
        // Given back with nothing else holding it: the next store reuses it.
        pool.give(buf);
        let c = pool.store(b"third");
        assert_eq!(&c[..], b"third");
        let (buf, _) = c.into_parts();
        assert_eq!(&buf.unwrap()[..6], b"thirdd", "the same buffer, reused");
    }

    #[test]
    fn the_pool_keeps_at_most_its_bytes_and_never_big_buffers() {
        let mut pool = PayloadPool::default();
        let big = pool.store(&vec![1u8; POOLED_MAX + 1]);
        pool.give(big.into_parts().0.unwrap());
        assert_eq!(pool.bytes(), 0);
        let bodies: Vec<Payload> = (0..(POOL_BYTES / 1024) + 10)
            .map(|_| pool.store(&[2u8; 1000]))
            .collect();
        for p in bodies {
            pool.give(p.into_parts().0.unwrap());
        }
        assert!(pool.bytes() <= POOL_BYTES);
        assert!(pool.bytes() > POOL_BYTES - 1024);
    }

    #[test]
    fn payloads_compare_and_show_by_content() {
        let a = Payload::copy_from_slice(b"ab\n");
        let mut pool = PayloadPool::default();
        let b = pool.store(b"ab\n");
        assert_eq!(a, b);
        assert_eq!(format!("{b:?}"), "b\"ab\\n\"");
        assert_eq!(&b.to_bytes()[..], b"ab\n");
        assert!(Payload::default().is_empty());
        assert_eq!(pool.store(b"").len(), 0);
    }
}
