//! Server-wide limits shared by every shard: the memory held by stored
//! messages and the number of queues. Each shard reserves before it stores
//! and releases when a message or queue is gone, with compare-and-swap, so
//! the limits hold across shards without a lock.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Error;

/// What one stored message costs the budget beyond its payload and
/// attribute bytes: the engine's own bookkeeping (slot record, ring entry,
/// sequence index, timer), rounded up from the figure in
/// docs/benchmarks.md.
pub const MESSAGE_OVERHEAD_BYTES: u64 = 192;

/// Limits an [`crate::Engine`] enforces across all of its shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineLimits {
    /// Bytes stored messages may hold in all: payloads, attributes and
    /// [`MESSAGE_OVERHEAD_BYTES`] each. Puts past it fail
    /// `resource_exhausted`.
    pub max_stored_bytes: u64,
    /// Queues at most. Creates past it fail `resource_exhausted`.
    pub max_queues: u64,
}

impl Default for EngineLimits {
    /// No limits (an embedding application sets its own; the server sets
    /// them from its configuration).
    fn default() -> Self {
        EngineLimits {
            max_stored_bytes: u64::MAX,
            max_queues: u64::MAX,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Budget {
    max_stored_bytes: AtomicU64,
    max_queues: AtomicU64,
    stored_bytes: AtomicU64,
    queues: AtomicU64,
}

fn reserve(used: &AtomicU64, max: u64, n: u64) -> bool {
    used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
        u.checked_add(n).filter(|total| *total <= max)
    })
    .is_ok()
}

impl Budget {
    pub(crate) fn new(limits: EngineLimits) -> Budget {
        let b = Budget::default();
        b.set_limits(limits);
        b
    }

    pub(crate) fn set_limits(&self, limits: EngineLimits) {
        self.max_stored_bytes
            .store(limits.max_stored_bytes, Ordering::Release);
        self.max_queues.store(limits.max_queues, Ordering::Release);
    }

    pub(crate) fn limits(&self) -> EngineLimits {
        EngineLimits {
            max_stored_bytes: self.max_stored_bytes.load(Ordering::Acquire),
            max_queues: self.max_queues.load(Ordering::Acquire),
        }
    }

    /// Reserves room for one message of `bytes` payload and attributes.
    pub(crate) fn reserve_message(&self, bytes: u64) -> Result<(), Error> {
        let max = self.max_stored_bytes.load(Ordering::Acquire);
        if reserve(&self.stored_bytes, max, bytes + MESSAGE_OVERHEAD_BYTES) {
            Ok(())
        } else {
            Err(Error::ResourceExhausted {
                limit: "max_stored_bytes",
                max,
            })
        }
    }

    /// Counts a message that must be kept whatever the limit (a dead letter
    /// its target refused comes back to its source's DLQ).
    pub(crate) fn force_message(&self, bytes: u64) {
        self.stored_bytes
            .fetch_add(bytes + MESSAGE_OVERHEAD_BYTES, Ordering::AcqRel);
    }

    pub(crate) fn release_message(&self, bytes: u64) {
        self.stored_bytes
            .fetch_sub(bytes + MESSAGE_OVERHEAD_BYTES, Ordering::AcqRel);
    }

    pub(crate) fn reserve_queue(&self) -> Result<(), Error> {
        let max = self.max_queues.load(Ordering::Acquire);
        if reserve(&self.queues, max, 1) {
            Ok(())
        } else {
            Err(Error::ResourceExhausted {
                limit: "max_queues",
                max,
            })
        }
    }

    pub(crate) fn release_queue(&self) {
        self.queues.fetch_sub(1, Ordering::AcqRel);
    }

    pub(crate) fn stored_bytes(&self) -> u64 {
        self.stored_bytes.load(Ordering::Acquire)
    }

    pub(crate) fn queues(&self) -> u64 {
        self.queues.load(Ordering::Acquire)
    }
}
