//! The store: recovery at start, the writer thread (group commit, sync
//! modes, snapshots), and the marks a server holds answers on.
//!
//! ## Marks
//! The writer counts the batches it starts and the batches it has made
//! durable. A record appended before [`Marks::mark`] is read is taken by
//! the batch numbered `mark` or an earlier one (a batch starts by bumping
//! the count, then takes every buffer), so an answer is safe to send once
//! [`Marks::durable`] reaches the mark read after its request was handled.
//! Reading a mark wakes the writer if it is idle, so batch `mark` comes
//! even when the records were taken by the batch before (it is then empty
//! and syncs nothing).

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fila_core::event::{ExportCursor, ImagePart};
use fila_core::{Engine, Totals};
use fila_wal::{Log, LogOptions, Storage};
use tracing::{info, warn};

use crate::codec::{decode, read_snapshot};
use crate::journal::{Journal, ShardSink};
use crate::replay::Replay;
use crate::sync::{AtomicBool, AtomicU64, Ordering};
use crate::Error;

mod writer;

pub use writer::FLUSH_MARK;
use writer::{Writer, PIECE_MESSAGES};

/// What the writer snapshots: the engine, or whatever owns its shards.
pub trait Source: Send + Sync {
    /// Runs `during` with no shard changing (every owner stopped, having
    /// published what it logged): the writer drains the buffers there, so
    /// a snapshot's LSN is a consistent cut. `false` when the owners could
    /// not all stop now (try again).
    fn quiesce(&self, during: &mut dyn FnMut()) -> bool;
    /// The next piece of the state from `cursor` on, at most
    /// `max_messages` messages or `max_bytes` of payloads (see
    /// [`Engine::export_piece`]); `None` when it cannot be had now (try
    /// again). The cursor is done after the last shard.
    fn export_piece(
        &self,
        cursor: &mut ExportCursor,
        max_messages: usize,
        max_bytes: u64,
    ) -> Option<Vec<ImagePart>>;
    /// The id the next new queue gets.
    fn next_queue_id(&self) -> u32;
    /// Dead letters between two shards right now: each has left its
    /// source and has no record yet (its target logs it when it takes it
    /// in, then counts it delivered).
    fn in_transit(&self) -> u64;
    /// Bytes of the live data (for when to snapshot, and how large).
    fn stored_bytes(&self) -> u64;
    /// The store stopped: stop logging to it.
    fn detach(&self) {}
}

impl Source for Engine {
    fn quiesce(&self, during: &mut dyn FnMut()) -> bool {
        self.with_every_shard_held(during);
        true
    }
    fn export_piece(
        &self,
        cursor: &mut ExportCursor,
        max_messages: usize,
        max_bytes: u64,
    ) -> Option<Vec<ImagePart>> {
        Some(Engine::export_piece(self, cursor, max_messages, max_bytes))
    }
    fn next_queue_id(&self) -> u32 {
        self.totals().next_queue_id()
    }
    fn in_transit(&self) -> u64 {
        self.totals().in_transit()
    }
    fn stored_bytes(&self) -> u64 {
        Engine::stored_bytes(self)
    }
    fn detach(&self) {
        for shard in 0..self.shard_count() {
            self.set_journal(shard, None);
        }
    }
}

/// When an acknowledged change is on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// Answers wait until their records are synced (group commit).
    Always,
    /// Records are written and synced every interval; answers do not wait,
    /// so a crash loses what was acknowledged in the last interval.
    Interval(Duration),
}

/// How the store runs.
#[derive(Clone, Copy, Debug)]
pub struct StoreOptions {
    /// When changes are synced.
    pub sync: SyncMode,
    /// Log segment size.
    pub segment_bytes: u64,
    /// A snapshot is taken once the log has grown by this many bytes since
    /// the last one and by more than `compact_ratio` × the live data.
    pub compact_min_bytes: u64,
    /// See `compact_min_bytes`.
    pub compact_ratio: u64,
    /// Free space the log's disk keeps beyond the next snapshot's size:
    /// below it puts are refused (`resource_exhausted`, disk full) while
    /// receives, deletes and snapshots go on in the room left (segments
    /// and snapshots preallocated).
    pub disk_reserve_bytes: u64,
    /// Messages one piece of a snapshot takes at most (the owner of the
    /// shard pauses for one piece at a time).
    pub snapshot_piece_messages: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            sync: SyncMode::Always,
            segment_bytes: 64 << 20,
            compact_min_bytes: 64 << 20,
            compact_ratio: 2,
            disk_reserve_bytes: 0,
            snapshot_piece_messages: PIECE_MESSAGES,
        }
    }
}

/// What recovery found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The snapshot it started from, by LSN.
    pub snapshot_lsn: Option<u64>,
    /// Records replayed after it.
    pub records: usize,
    /// Bytes of those records.
    pub record_bytes: u64,
    /// Queues restored.
    pub queues: usize,
    /// Messages restored.
    pub messages: usize,
    /// A torn write found at the end of the log (never acknowledged: its
    /// sync never returned), cut off at start ([`check`] leaves it).
    pub torn: Option<fila_wal::TornTail>,
}

/// Reads a data directory's snapshot and log into the state they hold: the
/// snapshot a frame at a time, then the records after it one segment at a
/// time.
fn recover<S: Storage>(
    storage: S,
    segment_bytes: u64,
) -> Result<(Log<S>, Replay, Recovery), Error> {
    let began = Instant::now();
    // The snapshot's and the records' callbacks both build it.
    let replay = std::cell::RefCell::new(Replay::default());
    let mut replayed = 0usize;
    let (log, opened) = Log::open_with(
        storage,
        LogOptions { segment_bytes },
        |file, body| {
            read_snapshot(body, &mut replay.borrow_mut()).map_err(|e| Error::Snapshot {
                lsn: file.lsn,
                why: e.what,
            })?;
            info!(
                lsn = file.lsn,
                bytes = file.len,
                messages = replay.borrow().message_count(),
                elapsed_ms = began.elapsed().as_millis() as u64,
                "snapshot loaded; replaying the log after it"
            );
            Ok::<(), Error>(())
        },
        |lsn, kind, body| {
            replayed += 1;
            if replayed.is_multiple_of(1_000_000) {
                info!(
                    replayed,
                    elapsed_ms = began.elapsed().as_millis() as u64,
                    "replaying the log"
                );
            }
            let op = decode(kind, body).map_err(|e| Error::Record { lsn, why: e.what })?;
            replay.borrow_mut().apply(op);
            Ok(())
        },
    )?;
    let replay = replay.into_inner();
    let report = Recovery {
        snapshot_lsn: opened.snapshot.as_ref().map(|s| s.lsn),
        records: opened.records,
        record_bytes: opened.record_bytes,
        queues: replay.queue_count(),
        messages: replay.message_count(),
        torn: opened.torn,
    };
    if let Some(t) = &report.torn {
        warn!(
            file = %t.file,
            offset = t.offset,
            bytes = t.bytes,
            what = t.why,
            "a torn write at the end of the log (a crash interrupted it before it was synced, \
             so it was never acknowledged): cut off"
        );
    }
    Ok((log, replay, report))
}

/// Checks a data directory without changing it: the snapshot and every
/// record must read back whole (a torn tail, which a start would cut, is
/// left as it is).
pub fn check<S: Storage>(storage: S) -> Result<Recovery, Error> {
    recover(ReadOnly(storage), LogOptions::default().segment_bytes).map(|(_, _, report)| report)
}

/// A storage whose writes do nothing: what [`check`] reads through.
struct ReadOnly<S>(S);

impl<S: Storage> Storage for ReadOnly<S> {
    fn list(&self) -> std::io::Result<Vec<String>> {
        self.0.list()
    }
    fn read(&self, name: &str) -> std::io::Result<Vec<u8>> {
        self.0.read(name)
    }
    fn create(&mut self, _: &str) -> std::io::Result<()> {
        Ok(())
    }
    fn append(&mut self, _: &str, _: &[u8]) -> std::io::Result<()> {
        Ok(())
    }
    fn write_at(&mut self, _: &str, _: u64, _: &[u8]) -> std::io::Result<()> {
        Ok(())
    }
    fn sync(&mut self, _: &str) -> std::io::Result<()> {
        Ok(())
    }
    fn sync_dir(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn truncate(&mut self, _: &str, _: u64) -> std::io::Result<()> {
        Ok(())
    }
    fn remove(&mut self, _: &str) -> std::io::Result<()> {
        Ok(())
    }
    fn rename(&mut self, _: &str, _: &str) -> std::io::Result<()> {
        Ok(())
    }
    fn describe(&self, name: &str) -> String {
        self.0.describe(name)
    }
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read_at(name, offset, buf)
    }
    fn file_len(&self, name: &str) -> std::io::Result<u64> {
        self.0.file_len(name)
    }
    fn free_bytes(&self) -> std::io::Result<Option<u64>> {
        self.0.free_bytes()
    }
}

/// What an event loop needs of a running store, cheap to clone: the marks
/// answers are held on, and the writer's backlog.
#[derive(Clone)]
pub struct Marks(Arc<Shared>);

impl std::fmt::Debug for Marks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Marks")
            .field("durable", &self.durable())
            .finish()
    }
}

impl Marks {
    /// The mark to hold an answer on: read it after the request was
    /// handled; the answer may go once [`Marks::durable`] reaches it. The
    /// writer is woken if it is idle, so that batch comes.
    pub fn mark(&self) -> u64 {
        // A read-modify-write, not a load: the writer's numbering of its
        // next batch (an RMW on the same count, later in its order) then
        // reads from it, so what this thread published before (the
        // answer's records) is seen by that batch's take. A plain load
        // gives no such edge: loom found a batch that missed the records
        // while the mark it was read for said they were in
        // (`loom_model` below).
        let mark = self.0.started.fetch_add(0, Ordering::SeqCst) + 1;
        self.0.journal.ensure_batch();
        mark
    }

    /// Batches durable so far.
    pub fn durable(&self) -> u64 {
        self.0.completed.load(Ordering::SeqCst)
    }

    /// Bytes of records waiting for the writer.
    pub fn backlog_bytes(&self) -> u64 {
        self.0.journal.buffered()
    }

    /// Whether a message stored on shard `shard` (put, or moved in) may
    /// not be durable yet. An answer that hands out a message of that
    /// shard read after the message was stored is safe to send at once
    /// when this is `false`; else it is held on a [`Marks::mark`] read now.
    pub fn stored_pending(&self, shard: usize) -> bool {
        self.0.journal.stored_pending(shard)
    }

    /// Whether a message of shard `shard` inserted at `inserted_at_ms`
    /// may not be durable yet ([`Marks::stored_pending`], and it was not
    /// inserted before the latest message made durable there): a consumer
    /// of a backlog is handed durable messages at once even while puts go
    /// on.
    pub fn pending_since(&self, shard: usize, inserted_at_ms: u64) -> bool {
        self.0.journal.pending_since(shard, inserted_at_ms)
    }

    /// Whether the log failed (nothing more becomes durable).
    pub fn failed(&self) -> bool {
        self.0.failed.load(Ordering::Acquire)
    }

    /// Snapshots written since the store opened.
    pub fn snapshots(&self) -> u64 {
        self.0.snapshots.load(Ordering::Acquire)
    }
}

struct Shared {
    journal: Arc<Journal>,
    started: AtomicU64,
    completed: AtomicU64,
    /// A snapshot was asked for; snapshots written so far.
    snapshot_asked: AtomicBool,
    snapshots: AtomicU64,
    stop: AtomicBool,
    failed: AtomicBool,
    /// What snapshots are taken of (the writer reads it once a batch).
    source: Arc<dyn Source>,
    /// The engine's figures: where the writer says whether the disk takes
    /// more messages.
    totals: Totals,
}

impl Shared {
    fn source(&self) -> Arc<dyn Source> {
        self.source.clone()
    }
}

/// A running store.
pub struct Store<S: Storage + 'static> {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<S>>,
    sync: SyncMode,
}

impl<S: Storage + 'static> std::fmt::Debug for Store<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("sync", &self.sync)
            .field("durable", &self.durable())
            .finish_non_exhaustive()
    }
}

/// Called by the writer: after each batch is durable, and once if the log
/// fails (then nothing more becomes durable).
pub struct Hooks {
    /// A batch is durable: [`Store::durable`] moved.
    pub durable: Box<dyn Fn() + Send + Sync>,
    /// Writing or syncing failed: the store accepts nothing more.
    pub fatal: Box<dyn Fn(&Error) + Send + Sync>,
}

impl Default for Hooks {
    fn default() -> Self {
        Hooks {
            durable: Box::new(|| {}),
            fatal: Box::new(|_| {}),
        }
    }
}

impl<S: Storage + 'static> Store<S> {
    /// Recovers what `storage` holds into `engine` (which must be empty),
    /// then logs every later change of it, and takes snapshots of it.
    pub fn open(
        storage: S,
        engine: Arc<Engine>,
        options: StoreOptions,
        hooks: Hooks,
    ) -> Result<(Store<S>, Recovery), Error> {
        let source: Arc<dyn Source> = engine.clone();
        Store::open_with_source(storage, engine, source, options, hooks)
    }

    /// [`Store::open`] for an engine whose shards are taken over once it
    /// is recovered (a server's loops own them): snapshots are taken of
    /// `source` from the start, and the store keeps no handle on the
    /// engine, so its owner may take it apart as soon as this returns.
    pub fn open_with_source(
        storage: S,
        engine: Arc<Engine>,
        source: Arc<dyn Source>,
        options: StoreOptions,
        hooks: Hooks,
    ) -> Result<(Store<S>, Recovery), Error> {
        let began = Instant::now();
        info!(storage = %storage.describe("."), "recovering");
        let (log, replay, report) = recover(storage, options.segment_bytes)?;
        engine.restore(replay.into_image())?;
        info!(
            snapshot_lsn = ?report.snapshot_lsn,
            records = report.records,
            queues = report.queues,
            messages = report.messages,
            elapsed_ms = began.elapsed().as_millis() as u64,
            "recovered"
        );
        let wake_at = match options.sync {
            SyncMode::Always => 0,
            SyncMode::Interval(_) => FLUSH_MARK,
        };
        let journal = Arc::new(Journal::new(engine.shard_count(), wake_at));
        for shard in 0..engine.shard_count() {
            engine.set_journal(
                shard,
                Some(Box::new(ShardSink {
                    journal: journal.clone(),
                    shard,
                    local: Vec::new(),
                    published: 0,
                    stored_at: 0,
                })),
            );
        }
        let shared = Arc::new(Shared {
            journal,
            started: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            snapshot_asked: AtomicBool::new(false),
            snapshots: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            totals: engine.totals(),
            source,
        });
        let writer = Writer::new(shared.clone(), log, options, hooks, report.record_bytes);
        let handle = std::thread::Builder::new()
            .name("fila-wal-writer".into())
            .spawn(move || writer.run())
            .map_err(|source| Error::Thread { source })?;
        // (Under loom only the journal's own model runs: the store's
        // writer is a std thread the model does not know.)
        #[cfg(not(loom))]
        shared.journal.set_writer(handle.thread().clone());
        Ok((
            Store {
                shared,
                writer: Some(handle),
                sync: options.sync,
            },
            report,
        ))
    }

    /// The marks answers are held on.
    pub fn marks(&self) -> Marks {
        Marks(self.shared.clone())
    }

    /// Batches durable so far.
    pub fn durable(&self) -> u64 {
        self.marks().durable()
    }

    /// Asks for a snapshot at the writer's next batch, whatever the log's
    /// size (the log before it is then deleted).
    pub fn request_snapshot(&self) {
        self.shared.snapshot_asked.store(true, Ordering::Release);
        self.shared.journal.wake();
    }

    /// Snapshots written since the store opened.
    pub fn snapshots(&self) -> u64 {
        self.shared.snapshots.load(Ordering::Acquire)
    }

    /// Writes and syncs what is buffered (unless the log failed), stops
    /// the writer and detaches the engine from the log. Answers the
    /// storage (tests crash it).
    pub fn stop(mut self) -> Option<S> {
        self.stop_writer()
    }

    fn stop_writer(&mut self) -> Option<S> {
        let handle = self.writer.take()?;
        self.shared.stop.store(true, Ordering::Release);
        self.shared.journal.wake();
        let storage = handle.join().ok();
        self.shared.source().detach();
        storage
    }
}

impl<S: Storage + 'static> Drop for Store<S> {
    fn drop(&mut self) {
        self.stop_writer();
    }
}

/// Loom model of the wait for the log, through the marks and the journal:
/// a shard's thread publishes a record and holds the answer on a mark
/// (`Marks::mark`) while the writer runs batches as `commit_batch` does
/// (number the batch, take every published buffer, sync, make it durable).
/// In every interleaving, an answer let go because its mark is durable
/// (`Marks::durable`) had its record synced first. Run with
/// `scripts/loom.sh`.
#[cfg(all(test, loom))]
mod loom_model {
    use fila_core::event::{Event, EventSink, Spot};
    use loom::sync::atomic::AtomicBool as Flag;
    use loom::thread;

    use super::*;
    use crate::journal::entries;

    #[test]
    fn an_answer_let_go_at_its_mark_has_its_record_synced() {
        loom::model(|| {
            let engine = Arc::new(Engine::new(1, Arc::new(fila_core::ManualClock::new(1_000))));
            let shared = Arc::new(Shared {
                journal: Arc::new(Journal::new(1, 0)),
                started: AtomicU64::new(0),
                completed: AtomicU64::new(0),
                snapshot_asked: AtomicBool::new(false),
                snapshots: AtomicU64::new(0),
                stop: AtomicBool::new(false),
                failed: AtomicBool::new(false),
                totals: engine.totals(),
                source: engine,
            });
            let synced = Arc::new(Flag::new(false));
            let writer = {
                let (shared, synced) = (shared.clone(), synced.clone());
                thread::spawn(move || {
                    // Two batches, as `commit_batch` runs them.
                    for _ in 0..2 {
                        let number = shared.started.fetch_add(1, Ordering::SeqCst) + 1;
                        let mut took = false;
                        shared
                            .journal
                            .take(0, |data| took |= entries(data).count() > 0);
                        if took {
                            synced.store(true, Ordering::Release);
                        }
                        shared.journal.batch_durable();
                        shared.completed.store(number, Ordering::SeqCst);
                    }
                })
            };
            let mut sink = ShardSink {
                journal: shared.journal.clone(),
                shard: 0,
                local: Vec::new(),
                published: 0,
                stored_at: 0,
            };
            // A delete, say: a record, published after the call.
            sink.record(&Event::Removed {
                at: Spot {
                    queue: 1,
                    dlq: false,
                    seq: 1,
                },
            });
            sink.publish();
            let marks = Marks(shared.clone());
            let mark = marks.mark();
            // The loop looks before it sleeps, and again once woken.
            for _ in 0..2 {
                if marks.durable() >= mark {
                    assert!(
                        synced.load(Ordering::Acquire),
                        "an answer was let go at mark {mark} before its record was synced"
                    );
                }
                thread::yield_now();
            }
            writer.join().unwrap();
        });
    }
}
