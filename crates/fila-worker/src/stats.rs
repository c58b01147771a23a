//! A worker's counters: kept with relaxed atomics by its tasks and its
//! renewal thread, read through a [`StatsHandle`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The counters of a worker.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) processed: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) poisoned: AtomicU64,
    pub(crate) renewals: AtomicU64,
    pub(crate) in_flight: AtomicU64,
    pub(crate) released: AtomicU64,
    pub(crate) poll_errors: AtomicU64,
}

/// What a worker has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Handlers that succeeded (their messages deleted).
    pub processed: u64,
    /// Handler runs that failed (their messages made visible again, or
    /// poisoned when it was their last try).
    pub failed: u64,
    /// Messages sent to the poison queue.
    pub poisoned: u64,
    /// Leases renewed.
    pub renewals: u64,
    /// Handlers running now.
    pub in_flight: u64,
    /// Messages given back at a stop (visible again at once).
    pub released: u64,
    /// Polls that failed.
    pub poll_errors: u64,
}

/// Reads a worker's counters, while it runs and after.
#[derive(Clone)]
pub struct StatsHandle(pub(crate) Arc<Counters>);

impl StatsHandle {
    /// The counters now.
    pub fn get(&self) -> WorkerStats {
        let c = &self.0;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        WorkerStats {
            processed: l(&c.processed),
            failed: l(&c.failed),
            poisoned: l(&c.poisoned),
            renewals: l(&c.renewals),
            in_flight: l(&c.in_flight),
            released: l(&c.released),
            poll_errors: l(&c.poll_errors),
        }
    }
}
