//! Per-shard record buffers: each shard encodes its events into a buffer of
//! its own sink (no lock, no I/O on the request path) and, after every
//! operation, publishes the filled buffer to the shard's lock-free queue;
//! the writer takes every published buffer and appends it to the log, then
//! gives the emptied buffers back for reuse.
//!
//! A buffer entry is the record's kind, its body's length (`u32`) and the
//! body. A shard publishing a buffer sets the writer's signal (waking it
//! when the signal was clear); the writer clears the signal before it takes
//! the buffers, so no record is left waiting without a signal. Records are
//! published before the operation's answer leaves (the owner publishes
//! after every call), so a mark read after an answer covers its records.
//!
//! Each lane also counts the buffers published, taken and made durable,
//! and the number of the last buffer that stored a message: an answer that
//! hands out a message of that shard waits for the log only while that
//! buffer is not durable ([`crate::Marks::stored_pending`]).

use crossbeam_utils::CachePadded;
use fila_core::event::{Event, EventSink};

use crate::codec::{batch_push, batch_records};
use crate::sync::{AtomicBool, AtomicU64, Bounded, Fifo, Ordering, Thread, WriterCell};

/// Empty buffers kept per shard for reuse: a shard publishes one buffer per
/// call, so a batch of the writer's takes many; kept, they are reused by
/// the shard's thread instead of allocated there and freed by the writer.
const SPARES: usize = 256;
/// A buffer that grew past this is dropped rather than kept for reuse (at
/// most `SPARES` × this is kept per shard).
const SPARE_BYTES_MAX: usize = 16 << 10;

/// One shard's queues: published buffers in order, and spares.
struct Lane {
    /// Published buffers, each with the latest insertion time (ms) of the
    /// messages it stores (0: none).
    published: Fifo<(Vec<u8>, u64)>,
    spares: Bounded<Vec<u8>>,
    /// Bytes published and not yet taken.
    buffered: AtomicU64,
    /// The number (counting the shard's publishes from 1) of the last
    /// buffer that holds a stored message (a put or a move in); set by the
    /// shard's thread before it publishes that buffer.
    last_store: AtomicU64,
    /// Buffers taken by the writer (only the writer changes it).
    taken: AtomicU64,
    /// Buffers durable: `taken` as of the writer's last completed batch.
    durable: AtomicU64,
    /// The latest insertion time of a message stored by a buffer taken
    /// (only the writer changes it), and of one made durable: every
    /// message of the shard inserted before the latter is durable (a
    /// shard stores messages in the order of their insertion times).
    taken_time: AtomicU64,
    durable_time: AtomicU64,
}

/// The shards' buffers and the writer's wake-up signal.
pub(crate) struct Journal {
    lanes: Box<[CachePadded<Lane>]>,
    signalled: AtomicBool,
    writer: WriterCell,
    /// A publish wakes the writer only once this many bytes wait (0: at
    /// every publish; a writer on an interval is woken when the backlog
    /// passes its mark, not only by its timer).
    wake_at: u64,
}

impl Journal {
    pub(crate) fn new(shards: usize, wake_at: u64) -> Journal {
        Journal {
            lanes: (0..shards)
                .map(|_| {
                    CachePadded::new(Lane {
                        published: Fifo::new(),
                        spares: Bounded::new(SPARES),
                        buffered: AtomicU64::new(0),
                        last_store: AtomicU64::new(0),
                        taken: AtomicU64::new(0),
                        durable: AtomicU64::new(0),
                        taken_time: AtomicU64::new(0),
                        durable_time: AtomicU64::new(0),
                    })
                })
                .collect(),
            signalled: AtomicBool::new(false),
            writer: WriterCell::new(),
            wake_at,
        }
    }

    // (Under loom only the models set it.)
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn set_writer(&self, thread: Thread) {
        let _ = self.writer.set(thread);
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

    /// Bytes published and not yet taken by the writer.
    pub(crate) fn buffered(&self) -> u64 {
        self.lanes
            .iter()
            .map(|l| l.buffered.load(Ordering::Relaxed))
            .sum()
    }

    /// Whether nothing published waits for the writer.
    pub(crate) fn is_empty(&self) -> bool {
        self.lanes.iter().all(|l| l.published.is_empty())
    }

    /// Whether a message stored on shard `shard` (put or moved in) may not
    /// be durable yet: a buffer holding one was published and the writer
    /// has not completed the batch that took it.
    pub(crate) fn stored_pending(&self, shard: usize) -> bool {
        let lane = &self.lanes[shard];
        lane.durable.load(Ordering::Acquire) < lane.last_store.load(Ordering::Acquire)
    }

    /// Whether a message of shard `shard` inserted at `inserted_at_ms`
    /// may not be durable yet: a message stored there is not, and this one
    /// was not inserted before the latest durable one.
    pub(crate) fn pending_since(&self, shard: usize, inserted_at_ms: u64) -> bool {
        self.stored_pending(shard)
            && inserted_at_ms >= self.lanes[shard].durable_time.load(Ordering::Acquire)
    }

    /// The writer's batch is durable: so is every buffer it took.
    pub(crate) fn batch_durable(&self) {
        for lane in self.lanes.iter() {
            lane.durable_time
                .store(lane.taken_time.load(Ordering::Relaxed), Ordering::Release);
            lane.durable
                .store(lane.taken.load(Ordering::Relaxed), Ordering::Release);
        }
    }

    /// Hands each buffer shard `shard` published (in order) to `each`, then
    /// keeps it, emptied, for reuse.
    pub(crate) fn take(&self, shard: usize, mut each: impl FnMut(&[u8])) {
        let lane = &self.lanes[shard];
        while let Some((mut data, stored_at)) = lane.published.pop() {
            lane.taken.fetch_add(1, Ordering::Relaxed);
            lane.taken_time.fetch_max(stored_at, Ordering::Relaxed);
            each(&data);
            lane.buffered
                .fetch_sub(data.len() as u64, Ordering::Relaxed);
            data.clear();
            if data.capacity() <= SPARE_BYTES_MAX {
                let _ = lane.spares.push(data);
            }
        }
    }

    pub(crate) fn shards(&self) -> usize {
        self.lanes.len()
    }
}

/// The entries of a taken buffer: (kind, body).
pub(crate) fn entries(data: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    batch_records(data).map(|r| r.expect("a shard's own buffer is whole"))
}

/// The [`EventSink`] of one shard: owned by the thread that owns the
/// shard, so encoding takes no lock.
pub(crate) struct ShardSink {
    pub(crate) journal: std::sync::Arc<Journal>,
    pub(crate) shard: usize,
    pub(crate) local: Vec<u8>,
    /// Buffers published so far.
    pub(crate) published: u64,
    /// The latest insertion time of a message stored in `local`.
    pub(crate) stored_at: u64,
}

impl EventSink for ShardSink {
    fn record(&mut self, event: &Event<'_>) {
        if let Event::Stored { message, .. } = event {
            // In the next buffer published: before it is, so whoever is
            // answered with this message after the publish sees it.
            self.journal.lanes[self.shard]
                .last_store
                .store(self.published + 1, Ordering::Release);
            self.stored_at = self.stored_at.max(message.inserted_at_ms);
        }
        batch_push(event, &mut self.local);
    }

    fn publish(&mut self) {
        if self.local.is_empty() {
            return;
        }
        let journal = &*self.journal;
        let lane = &journal.lanes[self.shard];
        let spare = lane.spares.pop().unwrap_or_default();
        let full = std::mem::replace(&mut self.local, spare);
        lane.buffered
            .fetch_add(full.len() as u64, Ordering::Relaxed);
        lane.published
            .push((full, std::mem::take(&mut self.stored_at)));
        self.published += 1;
        // After the push: the writer clears the signal before it takes the
        // buffers, so either it sees this buffer or this sees the signal
        // clear and wakes it.
        let due = journal.wake_at == 0 || journal.buffered() >= journal.wake_at;
        if due && !journal.signalled.swap(true, Ordering::AcqRel) {
            if let Some(t) = journal.writer.get() {
                t.unpark();
            }
        }
    }
}

/// Loom models of the journal as a shard's thread and the writer use it,
/// through the code above (`crate::sync` puts its atomics, queues and the
/// writer's handle under loom). Run with `scripts/loom.sh`.
#[cfg(all(test, loom))]
mod loom_model {
    use std::sync::Arc;

    use fila_core::event::{Event, EventSink, MessageView, Spot};
    use loom::sync::atomic::AtomicBool;
    use loom::thread;

    use super::*;

    fn stored(seq: u64, inserted_at_ms: u64) -> Event<'static> {
        Event::Stored {
            message: MessageView {
                at: Spot {
                    queue: 1,
                    dlq: false,
                    seq,
                },
                id: None,
                payload: b"x",
                attributes: None,
                channel: None,
                inserted_at_ms,
                visible_at_ms: inserted_at_ms,
                expires_at_ms: u64::MAX,
                delivery_count: 0,
                dead_letter: None,
                group: None,
                priority: 1,
                attempts: &[],
            },
            from: None,
            dedup: None,
        }
    }

    /// A shard publishes two buffers (a put each) while the writer clears
    /// its signal, takes what is published, gives the buffers back and
    /// completes its batch, parking when it was not signalled. In every
    /// interleaving: no publish is left without a wake-up (a writer parked
    /// for ever is a loom deadlock), every record arrives, the buffers all
    /// come back, and a message the shard finds no longer pending was made
    /// durable first.
    #[test]
    fn no_record_waits_unseen_and_nothing_is_durable_before_its_batch() {
        loom::model(|| {
            let journal = Arc::new(Journal::new(1, 0));
            // Set by the writer once a batch holding the first put is
            // synced, before it says the batch is durable.
            let first_synced = Arc::new(AtomicBool::new(false));
            let writer = {
                let (journal, first_synced) = (journal.clone(), first_synced.clone());
                thread::spawn(move || {
                    let mut records = 0;
                    while records < 2 {
                        let signalled = journal.take_signal();
                        journal.take(0, |data| records += entries(data).count());
                        if records > 0 {
                            first_synced.store(true, Ordering::Release);
                        }
                        journal.batch_durable();
                        if records < 2 && !signalled {
                            thread::park();
                        }
                    }
                    records
                })
            };
            journal.set_writer(writer.thread().clone());
            let mut sink = ShardSink {
                journal: journal.clone(),
                shard: 0,
                local: Vec::new(),
                published: 0,
                stored_at: 0,
            };
            sink.record(&stored(1, 10));
            sink.publish();
            // The shard hands the message out only once it is not pending:
            // then its batch must be synced.
            if !journal.pending_since(0, 10) {
                assert!(
                    first_synced.load(Ordering::Acquire),
                    "a message was handed out as durable before its batch was synced"
                );
            }
            sink.record(&stored(2, 20));
            sink.publish();
            assert_eq!(writer.join().unwrap(), 2);
            assert!(!journal.stored_pending(0), "every buffer taken is durable");
            assert_eq!(journal.buffered(), 0);
            assert!(journal.is_empty());
        });
    }
}
