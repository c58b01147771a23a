//! The data directory: its lock, recovery, the log writer and the hooks it
//! wakes the loops by (what waits for the log in a loop is `log_wait.rs`).

use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fila_core::Engine;
use fila_store::{Hooks, Store, StoreOptions, SyncMode};
use fila_wal::FsStorage;
use tracing::{info, warn};

use super::mailbox::Loops;
use crate::config::{Config, Sync};

/// Why the server did not start, in one line.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener's address could not be bound.
    #[error("cannot listen on {addr} ({setting}): {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The setting that named it (`listen`, `sqs_listen`, ...).
        setting: &'static str,
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
    /// A TLS file could not be used.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
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
    if config.cluster.is_some() {
        // A cluster node keeps its partition in its Raft log (`raft/`):
        // the single node's log is not used.
        return Ok((None, Some(lock)));
    }
    let storage = FsStorage::new(&dir).map_err(|e| data_dir(e.to_string()))?;
    let wake = {
        let loops = loops.clone();
        move || {
            for index in 0..loops.endpoints() {
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
            for index in 0..loops.endpoints() {
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
