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
use fila_core::{DiskState, Engine, Totals};
use fila_wal::{Log, LogOptions, Storage};
use tracing::{error, info, warn};

use crate::codec::{
    decode, encode_part, encode_snapshot_end, encode_snapshot_start, read_snapshot,
};
use crate::journal::{entries, Journal, ShardSink};
use crate::replay::Replay;
use crate::sync::{AtomicBool, AtomicU64, Ordering};
use crate::Error;

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
        let writer = Writer {
            shared: shared.clone(),
            log,
            options,
            hooks,
            since_snapshot: report.record_bytes,
            taking: None,
            snapshot_retry_at: None,
            retry_at: None,
            disk: DiskState::Ok,
            looked_at: None,
            frame: Vec::new(),
        };
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

/// A snapshot being taken, a piece at a time.
struct Taking {
    /// Records up to here are in it (every shard's buffer was drained and
    /// synced before its first piece was taken).
    lsn: u64,
    cursor: ExportCursor,
    /// Record bytes written after `lsn`.
    since: u64,
    began: Instant,
    bytes: u64,
}

struct Writer<S: Storage> {
    shared: Arc<Shared>,
    log: Log<S>,
    options: StoreOptions,
    hooks: Hooks,
    /// Record bytes written since the last snapshot.
    since_snapshot: u64,
    taking: Option<Taking>,
    /// A snapshot failed (no room): not tried again before then.
    snapshot_retry_at: Option<Instant>,
    /// A commit failed for want of room: tried again then.
    retry_at: Option<Instant>,
    /// The disk last said (to the engine), and when it was last looked at.
    disk: DiskState,
    looked_at: Option<Instant>,
    /// A frame buffer, kept for its room.
    frame: Vec<u8>,
}

/// With `sync = interval`, bytes of records waiting that make the writer
/// write and sync at once rather than at its next interval: a burst never
/// waits a whole interval to be written (nor makes the event loops pause
/// reading for it).
pub const FLUSH_MARK: u64 = 8 << 20;

/// Messages of one snapshot piece at most, by default.
const PIECE_MESSAGES: usize = 4_096;
/// Payload and attribute bytes of one snapshot piece at most (what the
/// piece holds on to until it is written).
const PIECE_BYTES: u64 = 8 << 20;
/// How long the writer spends on a snapshot between two batches.
const SNAPSHOT_TURN: Duration = Duration::from_millis(20);
/// After a snapshot failed for want of room, how long before the next.
const SNAPSHOT_RETRY: Duration = Duration::from_secs(1);
/// After a commit failed for want of room, how long before the next try.
const COMMIT_RETRY: Duration = Duration::from_millis(100);
/// How often the disk's free space is looked at.
const DISK_LOOK: Duration = Duration::from_millis(250);

impl<S: Storage> Writer<S> {
    fn run(mut self) -> S {
        let mut next_sync = Instant::now();
        loop {
            let (stopping, commit) = self.wait(&mut next_sync);
            match self.batch(commit) {
                Ok(()) => self.retry_at = None,
                Err(e) if e.is_retryable() => {
                    // Nothing lost: the records stay pending in the log.
                    if self.retry_at.is_none() {
                        warn!(error = %e, "the log has no room: changes wait until there is (puts are refused)");
                    }
                    self.retry_at = Some(Instant::now() + COMMIT_RETRY);
                    self.note_disk(Some(&e), true);
                    if stopping {
                        // What was not written is not acknowledged either.
                        self.log.snapshot_abandon();
                        return self.log.into_storage();
                    }
                }
                Err(e) => {
                    self.shared.failed.store(true, Ordering::Release);
                    error!(error = %e, "the log failed: nothing more is acknowledged");
                    (self.hooks.fatal)(&e);
                    // Nothing more is written; wait to be stopped.
                    while !self.shared.stop.load(Ordering::Acquire) {
                        std::thread::park_timeout(Duration::from_millis(100));
                    }
                    return self.log.into_storage();
                }
            }
            if stopping && self.shared.journal.is_empty() && self.log.pending_bytes() == 0 {
                if self.taking.take().is_some() {
                    self.log.snapshot_abandon();
                }
                return self.log.into_storage();
            }
        }
    }

    /// Waits for work (or the interval); answers whether to stop after
    /// this batch and whether it commits.
    fn wait(&mut self, next_sync: &mut Instant) -> (bool, bool) {
        let journal = &self.shared.journal;
        loop {
            let stopping = self.shared.stop.load(Ordering::Acquire);
            let now = Instant::now();
            if let Some(at) = self.retry_at {
                if now < at && !stopping {
                    std::thread::park_timeout(at - now);
                    continue;
                }
                journal.take_signal();
                return (stopping, true);
            }
            // An idle writer still looks at the disk now and then.
            let look = self.looked_at.is_none_or(|at| now - at >= DISK_LOOK);
            match self.options.sync {
                SyncMode::Always => {
                    if journal.take_signal() || stopping || self.taking.is_some() {
                        return (stopping, true);
                    }
                    if self.shared.snapshot_asked.load(Ordering::Acquire) {
                        return (stopping, true);
                    }
                    if look {
                        return (stopping, false);
                    }
                    std::thread::park_timeout(DISK_LOOK);
                }
                SyncMode::Interval(every) => {
                    // The signal, on an interval: the backlog passed its
                    // mark (or a snapshot was asked for).
                    if now >= *next_sync || stopping || journal.take_signal() {
                        *next_sync = now + every;
                        journal.take_signal();
                        return (stopping, true);
                    }
                    if self.taking.is_some() || look {
                        // A snapshot goes on between the syncs.
                        return (stopping, false);
                    }
                    std::thread::park_timeout((*next_sync - now).min(DISK_LOOK));
                }
            }
        }
    }

    /// Takes every shard's buffer into the log's pending batch.
    fn drain(&mut self) -> Result<(), Error> {
        let journal = self.shared.journal.clone();
        let mut result = Ok(());
        for shard in 0..journal.shards() {
            journal.take(shard, |data| {
                if result.is_err() {
                    // The log failed for good: nothing more is written.
                    return;
                }
                for (kind, body) in entries(data) {
                    if let Err(e) = self.log.append(kind, body) {
                        result = Err(e.into());
                        return;
                    }
                    let bytes = (body.len() + fila_wal::record::RECORD_HEADER) as u64;
                    self.since_snapshot += bytes;
                    if let Some(t) = self.taking.as_mut() {
                        t.since += bytes;
                    }
                }
            });
        }
        result
    }

    fn batch(&mut self, commit: bool) -> Result<(), Error> {
        if commit {
            self.commit_batch(false)?;
        } else {
            self.note_disk(None, false);
        }
        if commit && self.taking.is_none() {
            self.maybe_begin_snapshot()?;
        }
        if self.taking.is_some() {
            self.snapshot_turn();
        }
        Ok(())
    }

    /// One batch: every shard's published buffers appended, one commit.
    /// With `quiet`, the buffers are taken while no shard changes (see
    /// [`Source::quiesce`]); answers `false` when they could not all stop
    /// (nothing was taken then).
    fn commit_batch(&mut self, quiet: bool) -> Result<bool, Error> {
        let number = self.shared.started.fetch_add(1, Ordering::SeqCst) + 1;
        let before = self.since_snapshot;
        if quiet {
            let source = self.shared.source();
            let mut drained = Ok(());
            if !source.quiesce(&mut || drained = self.drain()) {
                // An empty batch: its number still completes.
                self.finish_batch(number, before)?;
                return Ok(false);
            }
            drained?;
        } else {
            self.drain()?;
        }
        self.finish_batch(number, before)?;
        Ok(true)
    }

    fn finish_batch(&mut self, number: u64, before: u64) -> Result<(), Error> {
        self.log.commit()?;
        self.shared.journal.batch_durable();
        self.shared.completed.store(number, Ordering::SeqCst);
        (self.hooks.durable)();
        self.note_disk(None, self.since_snapshot != before);
        Ok(())
    }

    /// Tells the engine whether its disk takes more messages: not after a
    /// commit found no room, nor while making the next segment ahead
    /// fails, nor while the free space is below the reserve and the next
    /// snapshot's size (looked at after every batch that wrote, and every
    /// [`DISK_LOOK`] besides: a `statvfs`, a microsecond).
    fn note_disk(&mut self, failed: Option<&Error>, wrote: bool) {
        let now = Instant::now();
        if failed.is_none() && !wrote && self.looked_at.is_some_and(|at| now - at < DISK_LOOK) {
            return;
        }
        self.looked_at = Some(now);
        let closed = |why: &str| {
            why.contains("ermission") || why.contains("ead-only") || why.contains("ead only")
        };
        let state = if let Some(e) = failed {
            if closed(&e.to_string()) {
                DiskState::NotWritable
            } else {
                DiskState::Full
            }
        } else if let Some(why) = self.log.room_problem() {
            if closed(why) {
                DiskState::NotWritable
            } else {
                DiskState::Full
            }
        } else {
            let needed = self
                .options
                .disk_reserve_bytes
                .saturating_add(self.shared.source().stored_bytes());
            match self.log.free_bytes() {
                Some(free) if free < needed => DiskState::Full,
                _ => DiskState::Ok,
            }
        };
        if state != self.disk {
            match state {
                DiskState::Ok => info!("the log's disk has room again: puts are taken"),
                _ => warn!(
                    state = %state,
                    free_bytes = ?self.log.free_bytes(),
                    reserve_bytes = self.options.disk_reserve_bytes,
                    why = ?self.log.room_problem(),
                    "puts are refused until the log's disk has room"
                ),
            }
            self.disk = state;
            self.shared.totals.set_disk(state);
        }
    }

    /// Begins a snapshot when the log has grown past the threshold (or one
    /// was asked for, or the disk is short of room and one would free
    /// some): every shard's buffer is drained while no shard changes and
    /// synced, so the state taken from now on reflects every record up to
    /// the durable LSN, and no record up to it follows one after it (a
    /// dead letter forwarded across shards never comes before the put it
    /// moved).
    fn maybe_begin_snapshot(&mut self) -> Result<(), Error> {
        let stored = self.shared.source().stored_bytes();
        let threshold = self
            .options
            .compact_min_bytes
            .max(self.options.compact_ratio * stored);
        let short = self.disk != DiskState::Ok
            && self.since_snapshot > stored.max(self.options.segment_bytes);
        let asked = self.shared.snapshot_asked.swap(false, Ordering::AcqRel);
        if !(self.since_snapshot >= threshold || asked || short) {
            return Ok(());
        }
        let waiting = self.snapshot_retry_at.is_some_and(|at| Instant::now() < at);
        // Every shard's buffer taken while none changes, and synced.
        if waiting || !self.commit_batch(true)? {
            // Not now (a failed snapshot waits; the owners could not all
            // stop): a later batch tries again.
            if asked {
                self.shared.snapshot_asked.store(true, Ordering::Release);
            }
            return Ok(());
        }
        let lsn = self.log.durable_lsn();
        match self.log.snapshot_begin(lsn, stored) {
            Ok(()) => {
                let mut start = Vec::new();
                encode_snapshot_start(&mut start);
                if let Err(e) = self.log.snapshot_write(&start) {
                    self.snapshot_failed(&e);
                    return Ok(());
                }
                self.taking = Some(Taking {
                    lsn,
                    cursor: ExportCursor::default(),
                    since: 0,
                    began: Instant::now(),
                    bytes: start.len() as u64,
                });
            }
            Err(e) => {
                if asked {
                    self.shared.snapshot_asked.store(true, Ordering::Release);
                }
                self.snapshot_failed(&e);
            }
        }
        Ok(())
    }

    fn snapshot_failed(&mut self, e: &fila_wal::Error) {
        warn!(error = %e, "a snapshot could not be written; the log is kept whole and it is tried again later");
        self.log.snapshot_abandon();
        self.taking = None;
        self.snapshot_retry_at = Some(Instant::now() + SNAPSHOT_RETRY);
    }

    /// Takes and writes pieces of the snapshot for up to
    /// [`SNAPSHOT_TURN`]; finishes it after the last.
    fn snapshot_turn(&mut self) {
        let source = self.shared.source();
        let turn = Instant::now();
        while turn.elapsed() < SNAPSHOT_TURN {
            let Some(t) = self.taking.as_mut() else {
                return;
            };
            let max = self.options.snapshot_piece_messages.max(1);
            let Some(parts) = source.export_piece(&mut t.cursor, max, PIECE_BYTES) else {
                // The owners could not answer now (stopping): later.
                return;
            };
            let done = t.cursor.done;
            let mut written = 0u64;
            let mut result = Ok(());
            for part in &parts {
                encode_part(part, &mut self.frame);
                if self.frame.len() >= 1 << 20 {
                    written += self.frame.len() as u64;
                    result = result.and_then(|()| self.log.snapshot_write(&self.frame));
                    self.frame.clear();
                }
            }
            // The piece's payloads are let go before the next is taken.
            drop(parts);
            if done {
                encode_snapshot_end(source.next_queue_id(), &mut self.frame);
            }
            written += self.frame.len() as u64;
            result = result.and_then(|()| self.log.snapshot_write(&self.frame));
            self.frame.clear();
            if self.frame.capacity() > 4 << 20 {
                self.frame = Vec::new();
            }
            if let Err(e) = result {
                self.snapshot_failed(&e);
                return;
            }
            let t = self.taking.as_mut().expect("taking");
            t.bytes += written;
            if done {
                let t = self.taking.take().expect("taking");
                if let Err(e) = self.log.snapshot_finish() {
                    self.snapshot_failed(&e);
                    return;
                }
                info!(
                    lsn = t.lsn,
                    bytes = t.bytes,
                    elapsed_ms = t.began.elapsed().as_millis() as u64,
                    "snapshot written; the log before it is deleted"
                );
                self.since_snapshot = t.since;
                self.snapshot_retry_at = None;
                self.shared.snapshots.fetch_add(1, Ordering::AcqRel);
                return;
            }
        }
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
