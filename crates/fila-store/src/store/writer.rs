//! The log writer's thread: it takes every shard's published buffers,
//! appends and syncs them as one batch, publishes the batch number and
//! wakes the loops that wait; it takes snapshots a piece at a time while
//! the engine serves.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fila_core::event::ExportCursor;
use fila_core::DiskState;
use fila_wal::{Log, Storage};
use tracing::{error, info, warn};

use super::{Hooks, Shared, StoreOptions, SyncMode};
use crate::codec::{encode_part, encode_snapshot_end, encode_snapshot_start};
use crate::journal::entries;
use crate::sync::Ordering;
use crate::Error;

/// A snapshot being taken, a piece at a time.
struct Taking {
    /// Records up to here are in it (every shard's buffer was drained and
    /// synced before its first piece was taken).
    lsn: u64,
    cursor: ExportCursor,
    /// Record bytes written after `lsn`.
    since: u64,
    /// Every piece and the end are written: it is finished once every
    /// record a piece reflects is durable ([`Writer::settle_snapshot`]).
    written: bool,
    began: Instant,
    bytes: u64,
}

pub(super) struct Writer<S: Storage> {
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
pub(super) const PIECE_MESSAGES: usize = 4_096;
/// Payload and attribute bytes of one snapshot piece at most (what the
/// piece holds on to until it is written).
const PIECE_BYTES: u64 = 8 << 20;
/// How long the writer spends on a snapshot between two batches.
const SNAPSHOT_TURN: Duration = Duration::from_millis(20);
/// After a snapshot failed for want of room, how long before the next.
const SNAPSHOT_RETRY: Duration = Duration::from_secs(1);
/// After a commit failed for want of room, how long before the next try.
const COMMIT_RETRY: Duration = Duration::from_millis(100);
/// How long a written snapshot waits before it looks again whether a
/// dead letter is still between shards.
const TRANSIT_LOOK: Duration = Duration::from_millis(1);
/// How often the disk's free space is looked at.
const DISK_LOOK: Duration = Duration::from_millis(250);

impl<S: Storage> Writer<S> {
    /// The writer of `log`, with `since_snapshot` record bytes logged since
    /// the last snapshot.
    pub(super) fn new(
        shared: Arc<Shared>,
        log: Log<S>,
        options: StoreOptions,
        hooks: Hooks,
        since_snapshot: u64,
    ) -> Writer<S> {
        Writer {
            shared,
            log,
            options,
            hooks,
            since_snapshot,
            taking: None,
            snapshot_retry_at: None,
            retry_at: None,
            disk: DiskState::Ok,
            looked_at: None,
            frame: Vec::new(),
        }
    }

    pub(super) fn run(mut self) -> S {
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
            self.snapshot_turn()?;
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
                    written: false,
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
    /// [`SNAPSHOT_TURN`]; after the last, finishes it once it can
    /// ([`Writer::settle_snapshot`]). An error is the log's (a commit).
    fn snapshot_turn(&mut self) -> Result<(), Error> {
        let source = self.shared.source();
        let turn = Instant::now();
        while turn.elapsed() < SNAPSHOT_TURN {
            let Some(t) = self.taking.as_mut() else {
                return Ok(());
            };
            if t.written {
                return self.settle_snapshot();
            }
            let max = self.options.snapshot_piece_messages.max(1);
            let Some(parts) = source.export_piece(&mut t.cursor, max, PIECE_BYTES) else {
                // The owners could not answer now (stopping): later.
                return Ok(());
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
                return Ok(());
            }
            let t = self.taking.as_mut().expect("taking");
            t.bytes += written;
            t.written = done;
        }
        Ok(())
    }

    /// Finishes a written snapshot, which then replaces the log before its
    /// LSN, once every record its pieces reflect is durable. A piece shows
    /// changes made after the LSN (the shards kept serving), and a crash
    /// must not keep a piece's side of a change and lose its record: a
    /// dead letter forwarded across shards is gone from its source's piece
    /// while its record, in the target's stream, may not be written yet;
    /// and while it is between shards it has no record at all. So: not
    /// while a dead letter is in transit (a later batch tries again); then
    /// every record logged so far is committed, and only then the snapshot
    /// is finished. A dead letter that reached its target before the count
    /// was read was logged before it (the target logs, then counts it
    /// delivered), so the commit takes its record.
    fn settle_snapshot(&mut self) -> Result<(), Error> {
        if self.shared.source().in_transit() != 0 {
            // Not a spin while it travels (a loop takes it at its next
            // turn): records published meanwhile wake the writer sooner.
            std::thread::park_timeout(TRANSIT_LOOK);
            return Ok(());
        }
        self.commit_batch(false)?;
        let t = self.taking.take().expect("taking");
        if let Err(e) = self.log.snapshot_finish() {
            self.snapshot_failed(&e);
            return Ok(());
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
        Ok(())
    }
}
