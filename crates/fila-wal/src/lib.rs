//! # fila-wal: the write-ahead log
//!
//! fila-wal owns the log's bytes on disk and getting them back: the record
//! format ([`record`]: length, CRC32C, LSN, kind, body), segments of a fixed
//! size with a checksummed header, group commit ([`Log::append`] into a
//! buffer, [`Log::commit`] writes and syncs it), and recovery
//! ([`Log::open`]: a torn tail is cut, corruption refuses to open with the
//! file and offset), and snapshots ([`Log::snapshot`]) that let it delete
//! the segments they cover. Storage is a trait ([`Storage`]) with a file-system
//! implementation ([`FsStorage`]) and a simulated disk ([`SimDisk`]) that
//! keeps written and synced bytes apart and can crash, tear, flip bits and
//! fail syncs.
//!
//! It knows nothing of queues or messages: what a record's kind and body
//! mean is its user's business (`fila-store`), and so is a snapshot's body.
//!
//! ```
//! use fila_wal::{Log, LogOptions, SimDisk};
//!
//! let (mut log, recovered) = Log::open(SimDisk::new(7), LogOptions::default()).unwrap();
//! assert!(recovered.records.is_empty() && recovered.snapshot.is_none());
//! log.append(1, b"put q 1").unwrap();
//! log.append(2, b"delete q 1").unwrap();
//! assert_eq!(log.commit().unwrap(), 2);
//! log.snapshot(1, b"q holds message 1").unwrap();
//! let (_, recovered) = Log::open(log.into_storage(), LogOptions::default()).unwrap();
//! assert_eq!(recovered.snapshot.unwrap().body, b"q holds message 1");
//! assert_eq!(recovered.records.len(), 1);
//! assert_eq!(recovered.records[0].body, b"delete q 1");
//! ```
#![forbid(unsafe_code)]

mod log;
pub mod record;
mod storage;

pub use log::{
    segment_header, segment_name, snapshot_name, DetachedSnapshot, Log, LogOptions, Opened,
    OwnedRecord, Recovered, Snapshot, SnapshotFile, SnapshotReader, SyncHandle, TornTail,
    SEGMENT_HEADER,
};
pub use storage::{
    create_private_dir, out_of_room, read_file, replace_file, replace_file_from, FsStorage,
    SimDisk, Storage, Zeroing, DIR_MODE, FILE_MODE, SECTOR,
};

/// What can go wrong with the log, in one line each.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a file failed.
    #[error("{file}: {source}")]
    Io {
        /// The file.
        file: String,
        /// Why.
        source: std::io::Error,
    },
    /// A sync failed: what reached the disk is unknown.
    #[error("{file}: sync failed: {source}")]
    SyncFailed {
        /// The file.
        file: String,
        /// Why.
        source: std::io::Error,
    },
    /// The log is damaged where a torn write cannot explain it.
    #[error("{file}: corrupt at byte {offset}: {why}")]
    Corrupt {
        /// The file.
        file: String,
        /// Where.
        offset: u64,
        /// What is wrong.
        why: &'static str,
    },
    /// An earlier write or sync failed; the log accepts nothing more.
    #[error("the log failed earlier and accepts nothing more")]
    Failed,
    /// A truncation below the newest snapshot: those records are no
    /// longer in the log.
    #[error("cannot truncate after {lsn}: the log starts after its snapshot at {start}")]
    Truncate {
        /// The LSN asked for.
        lsn: u64,
        /// The newest snapshot's LSN.
        start: u64,
    },
    /// The disk is full or the directory closed to writing: nothing was
    /// lost and nothing half written is left; what failed (a commit's
    /// pending records, a snapshot) can be tried again once there is room.
    #[error("{file}: {source} (nothing lost: tried again once there is room)")]
    NoRoom {
        /// The file.
        file: String,
        /// Why.
        source: std::io::Error,
    },
}

impl Error {
    /// Whether the log is still good and what failed may be tried again
    /// ([`Error::NoRoom`]); every other error fails the log for good.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::NoRoom { .. })
    }
}
