//! Per-shard record buffers: each shard encodes its events into its own
//! buffer while it holds the shard (no I/O on the request path); the
//! writer takes every buffer at once and appends it to the log.
//!
//! A buffer entry is the record's kind, its body's length (`u32`) and the
//! body. A shard wakes the writer when its buffer goes from empty to
//! non-empty; the writer clears the signal before it takes the buffers, so
//! no record is left waiting without a signal.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::Thread;

use crossbeam_utils::CachePadded;
use fila_core::event::{Event, EventSink};

use crate::codec::encode_event;

/// The shards' buffers and the writer's wake-up signal.
pub(crate) struct Journal {
    buffers: Box<[CachePadded<Mutex<Vec<u8>>>]>,
    /// Bytes in each buffer (read without its lock, for back pressure),
    /// updated only when a buffer crosses a multiple of
    /// [`BUFFERED_STEP`], so event loops reading it do not pull the
    /// shard's cache line on every record.
    buffered: Box<[CachePadded<AtomicU64>]>,
    signalled: AtomicBool,
    writer: OnceLock<Thread>,
}

impl Journal {
    pub(crate) fn new(shards: usize) -> Journal {
        Journal {
            buffers: (0..shards)
                .map(|_| CachePadded::new(Mutex::new(Vec::new())))
                .collect(),
            buffered: (0..shards)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            signalled: AtomicBool::new(false),
            writer: OnceLock::new(),
        }
    }

    pub(crate) fn set_writer(&self, thread: Thread) {
        let _ = self.writer.set(thread);
    }

    fn buffer(&self, shard: usize) -> MutexGuard<'_, Vec<u8>> {
        self.buffers[shard]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Clears the wake-up signal; answers whether it was set.
    pub(crate) fn take_signal(&self) -> bool {
        self.signalled.swap(false, Ordering::AcqRel)
    }

    /// Wakes the writer.
    pub(crate) fn wake(&self) {
        self.signalled.store(true, Ordering::Release);
        if let Some(t) = self.writer.get() {
            t.unpark();
        }
    }

    /// Makes sure the writer runs another batch (an empty one costs no
    /// sync): a mark taken now is then reached.
    pub(crate) fn ensure_batch(&self) {
        if !self.signalled.load(Ordering::Acquire) {
            self.wake();
        }
    }

    /// Bytes waiting in the buffers (each counted to the last multiple of
    /// 64 KiB it crossed).
    pub(crate) fn buffered(&self) -> u64 {
        self.buffered
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .sum()
    }

    /// Whether every buffer is empty (exact: under each buffer's lock).
    pub(crate) fn is_empty(&self) -> bool {
        (0..self.buffers.len()).all(|i| self.buffer(i).is_empty())
    }

    /// Swaps shard `shard`'s buffer with `spare` (empty): the records are
    /// then in `spare`.
    pub(crate) fn take(&self, shard: usize, spare: &mut Vec<u8>) {
        let mut b = self.buffer(shard);
        std::mem::swap(&mut *b, spare);
        self.buffered[shard].store(0, Ordering::Relaxed);
    }

    pub(crate) fn shards(&self) -> usize {
        self.buffers.len()
    }
}

/// The granularity of [`Journal::buffered`].
const BUFFERED_STEP: usize = 64 << 10;

/// The entries of a taken buffer: (kind, body).
pub(crate) fn entries(data: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at + 5 > data.len() {
            return None;
        }
        let kind = data[at];
        let len =
            u32::from_be_bytes([data[at + 1], data[at + 2], data[at + 3], data[at + 4]]) as usize;
        let body = &data[at + 5..at + 5 + len];
        at += 5 + len;
        Some((kind, body))
    })
}

/// The [`EventSink`] of one shard.
pub(crate) struct ShardSink {
    pub(crate) journal: std::sync::Arc<Journal>,
    pub(crate) shard: usize,
}

impl EventSink for ShardSink {
    fn record(&mut self, event: &Event<'_>) {
        let journal = &*self.journal;
        let was_empty = {
            let mut b = journal.buffer(self.shard);
            let was_empty = b.is_empty();
            let start = b.len();
            b.extend_from_slice(&[0; 5]);
            let kind = encode_event(event, &mut b);
            let len = u32::try_from(b.len() - start - 5).expect("a record is below 4 GiB");
            b[start] = kind;
            b[start + 1..start + 5].copy_from_slice(&len.to_be_bytes());
            if b.len() / BUFFERED_STEP != start / BUFFERED_STEP {
                journal.buffered[self.shard].store(b.len() as u64, Ordering::Relaxed);
            }
            was_empty
        };
        if was_empty && !journal.signalled.swap(true, Ordering::AcqRel) {
            if let Some(t) = journal.writer.get() {
                t.unpark();
            }
        }
    }
}
