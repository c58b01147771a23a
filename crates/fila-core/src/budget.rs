//! Server-wide limits shared by every shard: the memory held by stored
//! messages and the number of queues. Each shard reserves before it stores
//! and releases when a message or queue is gone, with compare-and-swap, so
//! the limits hold across shards without a lock.
//!
//! So that shards on different cores do not fight over one cache line for
//! every message, a shard takes stored-byte room from the shared count in
//! chunks of [`CREDIT_CHUNK`] and keeps what it has not used as local credit
//! (at most two chunks; all of it is handed back as soon as the shared count
//! is within [`CREDIT_SLACK`] of the limit, and near the limit a shard takes
//! exactly what a message needs). The limit is therefore exact for the sum
//! of stored messages and credits; a put can be refused while other shards
//! hold at most one chunk of credit each.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::error::Error;

/// What one stored message costs the budget beyond its payload and
/// attribute bytes: the engine's own bookkeeping (slot record, ring entry,
/// sequence index, timer), rounded up from the figure in
/// docs/benchmarks.md.
pub const MESSAGE_OVERHEAD_BYTES: u64 = 192;

/// What a dead letter's record costs the budget beyond its reason and
/// description (a consumer's): the shared record and its place in the
/// message's extras.
pub const DEAD_LETTER_OVERHEAD_BYTES: u64 = 96;

/// What a channel costs the budget beyond its name, while it holds
/// messages: its slot (ring, counts, round links), its ring's first room,
/// its entries in the name map and the name index.
pub const CHANNEL_OVERHEAD_BYTES: u64 = 256;

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

/// Whether the disk the log is on takes more messages (set by whoever
/// writes the log; puts are refused while it does not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskState {
    /// Room enough.
    Ok,
    /// Less free space than the reserve (and the next snapshot) needs, or
    /// a write found the disk full.
    Full,
    /// The data directory refuses new files (made read-only).
    NotWritable,
}

impl std::fmt::Display for DiskState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DiskState::Ok => "the disk has room",
            DiskState::Full => "disk full: the data directory's disk has less free space than the reserve and the next snapshot need",
            DiskState::NotWritable => "the data directory is not writable (no new log segment can be made)",
        })
    }
}

/// Stored-byte room a shard takes from the shared count at a time.
pub const CREDIT_CHUNK: u64 = 1 << 20;
/// Within this much of the limit, shards hold no credit.
pub const CREDIT_SLACK: u64 = 64 * CREDIT_CHUNK;

#[derive(Debug)]
pub(crate) struct Budget {
    max_stored_bytes: AtomicU64,
    max_queues: AtomicU64,
    /// Stored bytes and the shards' unused credit: what the limit counts.
    stored_bytes: AtomicU64,
    queues: AtomicU64,
    /// Each shard's unused credit, as it last set it (only that shard
    /// writes its own, on a cache line of its own): what is stored is
    /// `stored_bytes` less their sum.
    credits: Box<[CachePadded<AtomicU64>]>,
    /// A [`DiskState`] as a number.
    disk: std::sync::atomic::AtomicU8,
}

fn reserve(used: &AtomicU64, max: u64, n: u64) -> bool {
    used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
        u.checked_add(n).filter(|total| *total <= max)
    })
    .is_ok()
}

impl Budget {
    /// A budget for `shards` shards.
    pub(crate) fn new(limits: EngineLimits, shards: usize) -> Budget {
        let b = Budget {
            max_stored_bytes: AtomicU64::new(0),
            max_queues: AtomicU64::new(0),
            stored_bytes: AtomicU64::new(0),
            queues: AtomicU64::new(0),
            credits: (0..shards.max(1))
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            disk: std::sync::atomic::AtomicU8::new(0),
        };
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

    /// Counts a queue that must exist whatever the limit (one restored
    /// from a data directory).
    pub(crate) fn force_queue(&self) {
        self.queues.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn release_queue(&self) {
        self.queues.fetch_sub(1, Ordering::AcqRel);
    }

    /// Reserves exactly `n` stored bytes.
    fn take(&self, n: u64) -> bool {
        reserve(
            &self.stored_bytes,
            self.max_stored_bytes.load(Ordering::Acquire),
            n,
        )
    }

    fn give(&self, n: u64) {
        self.stored_bytes.fetch_sub(n, Ordering::AcqRel);
    }

    fn near_limit(&self) -> bool {
        let max = self.max_stored_bytes.load(Ordering::Acquire);
        max.saturating_sub(self.stored_bytes.load(Ordering::Acquire)) < CREDIT_SLACK
    }

    /// Bytes the limit counts: what is stored and the credit shards hold
    /// for their next messages.
    pub(crate) fn reserved_bytes(&self) -> u64 {
        self.stored_bytes.load(Ordering::Acquire)
    }

    /// Bytes held by what is stored (the reserved bytes less the shards'
    /// unused credit; read without stopping the shards, so a moment's
    /// figure).
    pub(crate) fn stored_bytes(&self) -> u64 {
        let credit: u64 = self.credits.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        self.reserved_bytes().saturating_sub(credit)
    }

    pub(crate) fn queues(&self) -> u64 {
        self.queues.load(Ordering::Acquire)
    }

    pub(crate) fn set_disk(&self, state: DiskState) {
        let n = match state {
            DiskState::Ok => 0,
            DiskState::Full => 1,
            DiskState::NotWritable => 2,
        };
        self.disk.store(n, Ordering::Release);
    }

    pub(crate) fn disk(&self) -> DiskState {
        match self.disk.load(Ordering::Acquire) {
            0 => DiskState::Ok,
            1 => DiskState::Full,
            _ => DiskState::NotWritable,
        }
    }
}

/// One shard's side of the [`Budget`]: the shared count and the shard's
/// unused credit.
#[derive(Debug)]
pub(crate) struct ShardBudget {
    pub(crate) shared: std::sync::Arc<Budget>,
    /// This shard's index in the budget's credits.
    index: usize,
    credit: u64,
}

impl ShardBudget {
    pub(crate) fn new(shared: std::sync::Arc<Budget>, index: usize) -> ShardBudget {
        ShardBudget {
            index: index.min(shared.credits.len() - 1),
            shared,
            credit: 0,
        }
    }

    /// Shows the credit to readers of [`Budget::stored_bytes`].
    fn publish(&self) {
        self.shared.credits[self.index].store(self.credit, Ordering::Relaxed);
    }

    /// Reserves room for one message of `bytes` payload and attributes.
    pub(crate) fn reserve_message(&mut self, bytes: u64) -> Result<(), Error> {
        self.reserve(bytes + MESSAGE_OVERHEAD_BYTES)
    }

    /// Reserves `n` bytes, or fails `resource_exhausted` on
    /// max_stored_bytes.
    pub(crate) fn reserve(&mut self, n: u64) -> Result<(), Error> {
        if self.credit >= n {
            self.credit -= n;
            self.publish();
            return Ok(());
        }
        let missing = n - self.credit;
        if !self.shared.near_limit() && self.shared.take(missing + CREDIT_CHUNK) {
            self.credit = CREDIT_CHUNK;
            self.publish();
            return Ok(());
        }
        if self.shared.take(missing) {
            self.credit = 0;
            self.publish();
            return Ok(());
        }
        Err(Error::ResourceExhausted {
            limit: "max_stored_bytes",
            max: self.shared.max_stored_bytes.load(Ordering::Acquire),
        })
    }

    /// Counts a message that must be kept whatever the limit (a dead letter
    /// its target refused comes back to its source's DLQ).
    pub(crate) fn force_message(&mut self, bytes: u64) {
        self.force(bytes + MESSAGE_OVERHEAD_BYTES);
    }

    /// Counts `n` bytes that must be kept whatever the limit.
    pub(crate) fn force(&mut self, n: u64) {
        if self.credit >= n {
            self.credit -= n;
        } else {
            self.shared
                .stored_bytes
                .fetch_add(n - self.credit, Ordering::AcqRel);
            self.credit = 0;
        }
        self.publish();
    }

    pub(crate) fn release_message(&mut self, bytes: u64) {
        self.release(bytes + MESSAGE_OVERHEAD_BYTES);
    }

    /// Gives back `n` bytes.
    pub(crate) fn release(&mut self, n: u64) {
        self.credit += n;
        if self.shared.near_limit() {
            self.shared.give(std::mem::take(&mut self.credit));
        } else if self.credit > 2 * CREDIT_CHUNK {
            self.shared.give(self.credit - CREDIT_CHUNK);
            self.credit = CREDIT_CHUNK;
        }
        self.publish();
    }
}
