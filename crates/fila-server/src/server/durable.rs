//! The server's side of durability: opening the data directory (its lock,
//! recovery, the log writer), answers held until the log is durable up to
//! them, and reading paused while the log's backlog is full.
//!
//! With `sync = always` an answer to a request that changed something is
//! encoded at once into its connection's held buffer, in regions held on a
//! mark, and moved to the output when the writer has synced the batch that
//! holds its records. So is an answer that hands out messages (receive,
//! peek, receive-deferred) while a message stored on their shard is not
//! durable yet. Other answers go out at once, ahead of held ones if need
//! be (answers come in the order they finish). The writer wakes the loops
//! that wait.

use std::fs::File;
use std::net::SocketAddr;
use std::path::PathBuf;

use fila_store::{Hooks, Store, StoreOptions, SyncMode};
use fila_wal::FsStorage;

use super::*;

/// Bytes of records the log writer may have waiting: past it, requests
/// that add payloads to the log (puts, redrives) wait until it catches up;
/// past twice it, every request does.
pub const LOG_BACKLOG_MAX: u64 = 64 << 20;

/// Why the server did not start, in one line.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The protocol's address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// The data directory could not be opened or locked.
    #[error("data directory {dir}: {why}")]
    DataDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        why: String,
    },
    /// The data directory holds something recovery refuses.
    #[error("data directory {dir}: {source}")]
    Recovery {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: fila_store::Error,
    },
    /// Anything else the operating system refused.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// The file whose lock says a server owns the data directory.
pub const LOCK_FILE: &str = "LOCK";

/// Locks and recovers the data directory into `engine` and starts the log
/// writer, which snapshots `source` (the loops that take the engine's
/// shards over); nothing with `sync = none`.
pub(super) fn open(
    config: &Config,
    engine: &Arc<Engine>,
    source: Arc<dyn fila_store::Source>,
    loops: &Loops,
    fatal: &Arc<Mutex<Option<String>>>,
    stopping: &Arc<AtomicBool>,
) -> Result<(Option<Store<FsStorage>>, Option<File>), StartError> {
    let sync = match config.sync {
        Sync::None => {
            info!(
                "sync = none: no data directory is used or locked, nothing is kept across a restart"
            );
            return Ok((None, None));
        }
        Sync::Always => SyncMode::Always,
        Sync::Interval => SyncMode::Interval(Duration::from_millis(config.sync_interval_ms)),
    };
    let dir = config.data_dir.clone();
    let data_dir = |why: String| StartError::DataDir {
        dir: dir.clone(),
        why,
    };
    fila_wal::create_private_dir(&dir).map_err(|e| data_dir(format!("cannot create it: {e}")))?;
    warn_if_shared(&dir);
    let lock = {
        use std::os::unix::fs::OpenOptionsExt;
        File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(fila_wal::FILE_MODE)
            .open(dir.join(LOCK_FILE))
            .map_err(|e| data_dir(format!("cannot open {LOCK_FILE}: {e}")))?
    };
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(data_dir("in use by another fila-server".into()))
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(data_dir(format!("cannot lock {LOCK_FILE}: {e}")))
        }
    }
    let storage = FsStorage::new(&dir).map_err(|e| data_dir(e.to_string()))?;
    let wake = {
        let loops = loops.clone();
        move || {
            for index in 0..loops.len() {
                if loops.get(index).waiting_for_log.load(Ordering::SeqCst) {
                    loops.wake(index);
                }
            }
        }
    };
    let on_fatal = {
        let loops = loops.clone();
        let fatal = fatal.clone();
        let stopping = stopping.clone();
        move |e: &fila_store::Error| {
            *fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!(
                "the log failed, nothing more can be acknowledged: {e}"
            ));
            stopping.store(true, Ordering::Release);
            for index in 0..loops.len() {
                loops.wake(index);
            }
        }
    };
    let (store, recovery) = Store::open_with_source(
        storage,
        engine.clone(),
        source,
        StoreOptions {
            sync,
            segment_bytes: config.segment_bytes,
            disk_reserve_bytes: config.disk_reserve_bytes,
            ..StoreOptions::default()
        },
        Hooks {
            durable: Box::new(wake),
            fatal: Box::new(on_fatal),
        },
    )
    .map_err(|source| StartError::Recovery {
        dir: dir.clone(),
        source,
    })?;
    info!(
        data_dir = %dir.display(),
        sync = ?config.sync,
        queues = recovery.queues,
        messages = recovery.messages,
        "data directory open"
    );
    Ok((Some(store), Some(lock)))
}

/// Warns when others than its owner may read or enter the data directory
/// (the log holds every payload and attribute).
fn warn_if_shared(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(dir) {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            warn!(
                data_dir = %dir.display(),
                mode = format!("{mode:o}"),
                "the data directory is open to its group or to everyone: \
                 others on this machine may read every message (chmod 700 it)"
            );
        }
    }
}

impl Loop {
    /// The mark an answer is held on, if it is held: the answer to a call
    /// that `logged` a change (the engine says so: [`Owner::changes`]),
    /// and an answer that hands out a message of shard `shard` that may
    /// not be durable yet (stored there after the latest message made
    /// durable): no message id or sequence number reaches anyone before
    /// its put is durable (a crash would give them to the next put).
    /// Messages of a backlog, durable long ago, go at once.
    pub(super) fn hold_mark(
        &self,
        logged: bool,
        answer: &Answer,
        shard: Option<usize>,
    ) -> Option<u64> {
        if !self.shared.hold {
            return None;
        }
        let marks = self.shared.marks.as_ref()?;
        let wait = logged
            || answer
                .newest_message()
                .is_some_and(|newest| shard.is_some_and(|s| marks.pending_since(s, newest)));
        if !wait {
            return None;
        }
        // Ask for the wake-up before the mark is read: a batch that
        // completes at once (its records were taken by the one before) then
        // still finds this loop waiting and wakes it.
        // Only this loop writes its flag, so a true it reads is its own
        // (stored SeqCst) and still stands.
        let waiting = &self.shared.loops.get(self.index).waiting_for_log;
        if !waiting.load(Ordering::Relaxed) {
            waiting.store(true, Ordering::SeqCst);
        }
        Some(marks.mark())
    }

    /// Whether `slot`'s next request waits for the log writer: past
    /// [`LOG_BACKLOG_MAX`] of records waiting, a request that adds
    /// payloads to the log (a put, a redrive) waits — the connections that
    /// make the backlog are throttled, the others' requests go on; past
    /// twice that, every request waits.
    pub(super) fn log_full(&mut self, slot: usize) -> bool {
        let Some(marks) = self.shared.marks.as_ref() else {
            return false;
        };
        let backlog = marks.backlog_bytes();
        if backlog <= LOG_BACKLOG_MAX {
            return false;
        }
        let heavy = self.conns[slot]
            .as_ref()
            .and_then(|c| c.input.get(5))
            .and_then(|op| crate::ops::op(*op))
            .is_some_and(|op| op.adds_payloads);
        if !heavy && backlog <= 2 * LOG_BACKLOG_MAX {
            return false;
        }
        if let Some(conn) = self.conns[slot].as_mut() {
            if !std::mem::replace(&mut conn.log_paused, true) {
                self.log_paused.push((slot, conn.generation));
            }
        }
        self.want_wakeups();
        true
    }

    /// Asks the writer for a wake-up while anything waits for it.
    pub(super) fn want_wakeups(&self) {
        let want = !self.holding.is_empty() || !self.log_paused.is_empty();
        self.shared
            .loops
            .get(self.index)
            .waiting_for_log
            .store(want, Ordering::SeqCst);
    }

    /// Notes that `slot` has answers held (O(1): the connection knows
    /// whether it is listed).
    pub(super) fn note_holding(&mut self, slot: usize) {
        if let Some(conn) = self.conns[slot].as_mut() {
            if !std::mem::replace(&mut conn.in_holding, true) {
                self.holding.push((slot, conn.generation));
                self.want_wakeups();
            }
        }
    }

    /// Lets out the answers whose records are durable, and resumes the
    /// connections that waited for the backlog.
    pub(super) fn release_held(&mut self) {
        let Some(marks) = self.shared.marks.clone() else {
            return;
        };
        if !self.holding.is_empty() {
            let durable = marks.durable();
            let holding = std::mem::take(&mut self.holding);
            for (slot, generation) in holding {
                // A closed connection's entry (its slot maybe reused since)
                // is dropped.
                let Some(conn) = self
                    .conns
                    .get_mut(slot)
                    .and_then(|c| c.as_mut())
                    .filter(|c| c.generation == generation)
                else {
                    continue;
                };
                let released = conn.release(durable);
                let still = !conn.holds.is_empty();
                conn.in_holding = still;
                if released {
                    self.flush(slot);
                }
                if still && self.conns[slot].is_some() {
                    self.holding.push((slot, generation));
                }
            }
        }
        if !self.log_paused.is_empty() && marks.backlog_bytes() <= LOG_BACKLOG_MAX {
            for (slot, generation) in std::mem::take(&mut self.log_paused) {
                if let Some(conn) = self
                    .conns
                    .get_mut(slot)
                    .and_then(|c| c.as_mut())
                    .filter(|c| c.generation == generation)
                {
                    conn.log_paused = false;
                    self.requeue(slot);
                }
            }
        }
        self.want_wakeups();
    }
}
