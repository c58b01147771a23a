//! `Doorbell`: when a thread that others hand work to must be woken.
//!
//! A server's event loop blocks in `poll`; another loop that hands it a job
//! (a request for one of its shards, an answer) could wake it every time
//! with an eventfd write, a system call and often a context switch. With a
//! doorbell it wakes it only when it is about to block:
//!
//! * the sleeper calls [`Doorbell::about_to_sleep`], then looks at its
//!   queues once more: if anything is there it calls [`Doorbell::awake`]
//!   and does not block;
//! * a producer hands its work over first, then calls
//!   [`Doorbell::must_wake`]: `true` means the sleeper may be blocking
//!   without having seen it, so wake it.
//!
//! The two sequentially consistent fences make "the sleeper saw nothing"
//! and "the producer saw no flag" impossible together: some work is never
//! left with its consumer asleep. `tests/loom_doorbell.rs` checks every
//! interleaving under loom.

use crate::sync::{fence, AtomicBool, Ordering};

/// The flag of one sleeper (see the module docs).
#[derive(Debug, Default)]
pub struct Doorbell {
    sleeping: AtomicBool,
}

impl Doorbell {
    /// A doorbell whose sleeper is awake.
    pub fn new() -> Doorbell {
        Doorbell {
            sleeping: AtomicBool::new(false),
        }
    }

    /// The sleeper is about to block: after this, it must look at its
    /// queues once more before it does.
    pub fn about_to_sleep(&self) {
        self.sleeping.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// The sleeper is awake (it found work, or its wait ended).
    pub fn awake(&self) {
        self.sleeping.store(false, Ordering::Relaxed);
    }

    /// Called by a producer after its work is where the sleeper looks:
    /// whether the sleeper must be woken (then the flag is cleared, so
    /// other producers do not wake it again).
    pub fn must_wake(&self) -> bool {
        fence(Ordering::SeqCst);
        self.sleeping.load(Ordering::SeqCst) && self.sleeping.swap(false, Ordering::SeqCst)
    }
}
