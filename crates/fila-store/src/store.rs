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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fila_core::event::EngineImage;
use fila_core::Engine;
use fila_wal::{Log, LogOptions, Storage};
use tracing::{error, info, warn};

use crate::codec::{decode, decode_snapshot, encode_snapshot};
use crate::journal::{entries, Journal, ShardSink};
use crate::replay::Replay;
use crate::Error;

/// What the writer snapshots: the engine, or whatever owns its shards.
pub trait Source: Send + Sync {
    /// Every queue with its messages as one consistent state, `during`
    /// run while no shard changes (the writer drains the buffers there);
    /// `None` when no consistent state can be had now (try again).
    fn export(&self, during: &mut dyn FnMut()) -> Option<EngineImage>;
    /// Bytes of the live data (for when to snapshot).
    fn stored_bytes(&self) -> u64;
    /// The store stopped: stop logging to it.
    fn detach(&self) {}
}

impl Source for Engine {
    fn export(&self, during: &mut dyn FnMut()) -> Option<EngineImage> {
        Engine::export(self, during)
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
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            sync: SyncMode::Always,
            segment_bytes: 64 << 20,
            compact_min_bytes: 64 << 20,
            compact_ratio: 2,
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

/// Reads a data directory's snapshot and log into the state they hold.
fn recover<S: Storage>(
    storage: S,
    segment_bytes: u64,
) -> Result<(Log<S>, Replay, Recovery), Error> {
    let began = Instant::now();
    let (log, recovered) = Log::open(storage, LogOptions { segment_bytes })?;
    info!(
        snapshot_bytes = recovered.snapshot.as_ref().map_or(0, |s| s.body.len()),
        records = recovered.records.len(),
        elapsed_ms = began.elapsed().as_millis() as u64,
        "log read; replaying"
    );
    let mut report = Recovery {
        torn: recovered.torn,
        ..Recovery::default()
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
    let mut replay = match recovered.snapshot {
        Some(s) => {
            report.snapshot_lsn = Some(s.lsn);
            let images = decode_snapshot(&s.body).map_err(|e| Error::Snapshot {
                lsn: s.lsn,
                why: e.what,
            })?;
            let replay = Replay::from_image(images);
            info!(
                lsn = s.lsn,
                messages = replay.message_count(),
                elapsed_ms = began.elapsed().as_millis() as u64,
                "snapshot loaded"
            );
            replay
        }
        None => Replay::default(),
    };
    let total = recovered.records.len();
    for rec in recovered.records {
        report.records += 1;
        if report.records.is_multiple_of(1_000_000) {
            info!(
                replayed = report.records,
                of = total,
                elapsed_ms = began.elapsed().as_millis() as u64,
                "replaying the log"
            );
        }
        report.record_bytes += rec.body.len() as u64 + fila_wal::record::RECORD_HEADER as u64;
        let op = decode(rec.kind, &rec.body).map_err(|e| Error::Record {
            lsn: rec.lsn,
            why: e.what,
        })?;
        replay.apply(op);
    }
    report.queues = replay.queue_count();
    report.messages = replay.message_count();
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
        let mark = self.0.started.load(Ordering::SeqCst) + 1;
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
    source: Mutex<Arc<dyn Source>>,
}

impl Shared {
    fn source(&self) -> Arc<dyn Source> {
        self.source
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
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
    /// then logs every later change of it.
    pub fn open(
        storage: S,
        engine: Arc<Engine>,
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
        let journal = Arc::new(Journal::new(engine.shard_count()));
        for shard in 0..engine.shard_count() {
            engine.set_journal(
                shard,
                Some(Box::new(ShardSink {
                    journal: journal.clone(),
                    shard,
                    local: Vec::new(),
                    published: 0,
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
            source: Mutex::new(engine),
        });
        let writer = Writer {
            shared: shared.clone(),
            log,
            options,
            hooks,
            since_snapshot: report.record_bytes,
        };
        let handle = std::thread::Builder::new()
            .name("fila-wal-writer".into())
            .spawn(move || writer.run())
            .map_err(|source| Error::Thread { source })?;
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

    /// Takes snapshots of `source` from now on instead of the engine the
    /// store was opened with (a server whose loops took the engine's
    /// shards over); the store lets go of the engine.
    pub fn set_source(&self, source: Arc<dyn Source>) {
        *self
            .shared
            .source
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = source;
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

struct Writer<S: Storage> {
    shared: Arc<Shared>,
    log: Log<S>,
    options: StoreOptions,
    hooks: Hooks,
    /// Record bytes written since the last snapshot.
    since_snapshot: u64,
}

impl<S: Storage> Writer<S> {
    fn run(mut self) -> S {
        let mut next_sync = Instant::now();
        loop {
            let stopping = self.wait(&mut next_sync);
            if let Err(e) = self.batch() {
                self.shared.failed.store(true, Ordering::Release);
                error!(error = %e, "the log failed: nothing more is acknowledged");
                (self.hooks.fatal)(&e);
                // Nothing more is written; wait to be stopped.
                while !self.shared.stop.load(Ordering::Acquire) {
                    std::thread::park_timeout(Duration::from_millis(100));
                }
                return self.log.into_storage();
            }
            if stopping && self.shared.journal.is_empty() {
                return self.log.into_storage();
            }
        }
    }

    /// Waits for work (or the interval); answers whether to stop after
    /// this batch.
    fn wait(&mut self, next_sync: &mut Instant) -> bool {
        let journal = &self.shared.journal;
        loop {
            let stopping = self.shared.stop.load(Ordering::Acquire);
            match self.options.sync {
                SyncMode::Always => {
                    if journal.take_signal() || stopping {
                        return stopping;
                    }
                    std::thread::park_timeout(Duration::from_millis(100));
                }
                SyncMode::Interval(every) => {
                    let now = Instant::now();
                    if now >= *next_sync || stopping {
                        *next_sync = now + every;
                        journal.take_signal();
                        return stopping;
                    }
                    std::thread::park_timeout(*next_sync - now);
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
                    self.since_snapshot += (body.len() + fila_wal::record::RECORD_HEADER) as u64;
                }
            });
        }
        result
    }

    fn batch(&mut self) -> Result<(), Error> {
        let threshold = self
            .options
            .compact_min_bytes
            .max(self.options.compact_ratio * self.shared.source().stored_bytes());
        let number = self.shared.started.fetch_add(1, Ordering::SeqCst) + 1;
        let mut snapshot = None;
        let asked = self.shared.snapshot_asked.swap(false, Ordering::AcqRel);
        if self.since_snapshot >= threshold || asked {
            // A consistent cut: every shard held while the buffers are
            // taken and the state copied, so the snapshot is exactly the
            // state after the records up to `lsn`.
            let mut drained = Ok(());
            let mut lsn = 0;
            let source = self.shared.source();
            let images = source.export(&mut || {
                drained = self.drain();
                lsn = self.log.next_lsn() - 1;
            });
            drained?;
            if images.is_none() && asked {
                // A dead letter was between shards: ask again next batch.
                self.shared.snapshot_asked.store(true, Ordering::Release);
            }
            snapshot = images.map(|images| (lsn, images));
        }
        if snapshot.is_none() {
            self.drain()?;
        }
        self.log.commit()?;
        self.shared.journal.batch_durable();
        self.shared.completed.store(number, Ordering::SeqCst);
        (self.hooks.durable)();
        if let Some((lsn, images)) = snapshot {
            let began = Instant::now();
            let body = encode_snapshot(&images);
            drop(images);
            self.log.snapshot(lsn, &body)?;
            info!(
                lsn,
                bytes = body.len(),
                elapsed_ms = began.elapsed().as_millis() as u64,
                "snapshot written; the log before it is deleted"
            );
            self.since_snapshot = 0;
            self.shared.snapshots.fetch_add(1, Ordering::AcqRel);
        }
        Ok(())
    }
}
