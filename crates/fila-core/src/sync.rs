//! One switch between `std` and `loom` for what is shared between threads.
//!
//! What in the engine, the store's journal, the server's mailboxes and a
//! cluster node's commit board ([`crate::commits`]) is shared between
//! threads takes its atomics, queues and its one mutex from here, so that
//! `RUSTFLAGS="--cfg loom"` puts that code itself under the loom model
//! checker (`scripts/loom.sh`) without touching it. crossbeam's lock-free
//! queues are not built for loom (crossbeam checks them with its own
//! models); under loom they are a deque whose synchronization a loom atomic
//! stands for, first in, first out like them.

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub use loom::sync::Mutex;
#[cfg(loom)]
pub use loom::thread::Thread;
#[cfg(not(loom))]
pub use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub use std::sync::Mutex;
#[cfg(not(loom))]
pub use std::thread::Thread;

/// A bounded first-in first-out queue many threads push to and pop from.
#[cfg(not(loom))]
pub use crossbeam_queue::ArrayQueue as Bounded;
/// An unbounded first-in first-out queue many threads push to and pop from.
#[cfg(not(loom))]
pub use crossbeam_queue::SegQueue as Fifo;

#[cfg(loom)]
pub use self::model::{Bounded, Fifo};

#[cfg(loom)]
mod model {
    //! The queues under loom: a deque behind a `std` mutex held for no
    //! loom operation (so it never blocks a loom thread: a loom mutex
    //! would, and an unpark landing while a thread waits on one is lost in
    //! loom's model), and a loom atomic count of the values pushed: a push
    //! adds to it (release) once its value is in, a pop takes only what the
    //! count it reads (acquire) shows. Loom may show a thread an older
    //! count, so a pop can miss a push it is not synchronized with, as with
    //! the real queues.

    use std::collections::VecDeque;
    use std::sync::Mutex;

    use super::{AtomicUsize, Ordering};

    /// The values, and how many were popped.
    struct Items<T> {
        values: VecDeque<T>,
        popped: usize,
    }

    /// A deque and the count that carries its happens-before edges.
    struct Deque<T> {
        items: Mutex<Items<T>>,
        pushes: AtomicUsize,
    }

    impl<T> Deque<T> {
        fn new() -> Deque<T> {
            Deque {
                items: Mutex::new(Items {
                    values: VecDeque::new(),
                    popped: 0,
                }),
                pushes: AtomicUsize::new(0),
            }
        }

        fn push_if(&self, value: T, room: impl Fn(usize) -> bool) -> Result<(), T> {
            {
                let mut items = self.items.lock().unwrap();
                if !room(items.values.len()) {
                    return Err(value);
                }
                items.values.push_back(value);
            }
            self.pushes.fetch_add(1, Ordering::Release);
            Ok(())
        }

        fn pop(&self) -> Option<T> {
            let visible = self.pushes.load(Ordering::Acquire);
            let mut items = self.items.lock().unwrap();
            if items.popped >= visible {
                return None;
            }
            items.popped += 1;
            items.values.pop_front()
        }

        fn len(&self) -> usize {
            let visible = self.pushes.load(Ordering::Acquire);
            let items = self.items.lock().unwrap();
            visible.saturating_sub(items.popped).min(items.values.len())
        }
    }

    /// An unbounded first-in first-out queue.
    pub struct Fifo<T>(Deque<T>);

    impl<T> Default for Fifo<T> {
        fn default() -> Fifo<T> {
            Fifo::new()
        }
    }

    impl<T> Fifo<T> {
        /// An empty queue.
        pub fn new() -> Fifo<T> {
            Fifo(Deque::new())
        }

        /// Appends `value`.
        pub fn push(&self, value: T) {
            let _ = self.0.push_if(value, |_| true);
        }

        /// Takes the oldest value.
        pub fn pop(&self) -> Option<T> {
            self.0.pop()
        }

        /// Whether it holds nothing.
        pub fn is_empty(&self) -> bool {
            self.0.len() == 0
        }
    }

    /// A bounded first-in first-out queue.
    pub struct Bounded<T> {
        deque: Deque<T>,
        capacity: usize,
    }

    impl<T> Bounded<T> {
        /// An empty queue of at most `capacity` values.
        pub fn new(capacity: usize) -> Bounded<T> {
            Bounded {
                deque: Deque::new(),
                capacity,
            }
        }

        /// Appends `value`, or gives it back when full.
        pub fn push(&self, value: T) -> Result<(), T> {
            let capacity = self.capacity;
            self.deque.push_if(value, |len| len < capacity)
        }

        /// Takes the oldest value.
        pub fn pop(&self) -> Option<T> {
            self.deque.pop()
        }

        /// Whether it holds nothing.
        pub fn is_empty(&self) -> bool {
            self.deque.len() == 0
        }
    }
}
