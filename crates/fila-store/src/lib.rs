//! # fila-store: durability
//!
//! fila-store makes the engine's state survive a restart. It owns the
//! meaning of the log's records and snapshots ([`codec`]), the per-shard
//! buffers the engine's events are encoded into while a shard is held
//! (no I/O on the request path), the writer thread that appends them to
//! the [`fila_wal`] log and syncs them as one group commit, snapshots of
//! the whole state taken at a consistent cut when the log has grown past
//! the live data, and recovery: the newest snapshot, then the records after
//! it, replayed ([`replay`]) into a fresh [`fila_core::Engine`].
//!
//! What is promised in each mode is docs/durability.md.
//!
//! ```
//! use std::sync::Arc;
//! use fila_core::{Engine, ManualClock, NewMessage, QueueSettings};
//! use fila_store::{Hooks, Store, StoreOptions};
//! use fila_wal::SimDisk;
//!
//! let clock = Arc::new(ManualClock::new(1_700_000_000_000));
//! let engine = Arc::new(Engine::new(2, clock.clone()));
//! let (store, _) =
//!     Store::open(SimDisk::new(1), engine.clone(), StoreOptions::default(), Hooks::default())
//!         .unwrap();
//! engine.create_queue("jobs", QueueSettings::default()).unwrap();
//! engine.put("jobs", vec![NewMessage::new("hello")]).unwrap();
//! let disk = store.stop().unwrap();
//!
//! // A new engine on the same disk has the queue and its message.
//! let engine = Arc::new(Engine::new(2, clock));
//! let (_store, recovery) =
//!     Store::open(disk, engine.clone(), StoreOptions::default(), Hooks::default()).unwrap();
//! assert_eq!((recovery.queues, recovery.messages), (1, 1));
//! assert_eq!(engine.stats("jobs").unwrap().visible, 1);
//! ```
#![forbid(unsafe_code)]

pub mod codec;
mod journal;
pub mod replay;
mod store;
mod sync;

pub use store::{check, Hooks, Marks, Recovery, Source, Store, StoreOptions, SyncMode, FLUSH_MARK};

/// What can go wrong with the store, in one line each.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The log failed or is corrupt.
    #[error(transparent)]
    Wal(#[from] fila_wal::Error),
    /// A record passed its checksum but does not parse.
    #[error("log record {lsn}: {why}")]
    Record {
        /// Its LSN.
        lsn: u64,
        /// What is wrong.
        why: &'static str,
    },
    /// The snapshot passed its checksum but does not parse.
    #[error("snapshot at LSN {lsn}: {why}")]
    Snapshot {
        /// Its LSN.
        lsn: u64,
        /// What is wrong.
        why: &'static str,
    },
    /// The recovered state could not be restored.
    #[error("restoring the recovered state: {0}")]
    Restore(#[from] fila_core::Error),
    /// The writer thread could not start.
    #[error("starting the log writer: {source}")]
    Thread {
        /// Why.
        source: std::io::Error,
    },
}

impl Error {
    /// Whether the log is still good and what failed waits for room
    /// ([`fila_wal::Error::NoRoom`]).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Wal(e) if e.is_retryable())
    }
}
