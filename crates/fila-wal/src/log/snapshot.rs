//! Snapshots: the user's state as of an LSN, written as a stream into
//! `snap.tmp`, made whole and durable, then named for its LSN; checked
//! and read back a chunk at a time (the format is in the log's module
//! docs).

use super::{be32, be64, classify, numbered, segment_name, Log, Writing};
use crate::storage::Storage;
use crate::Error;

/// A snapshot: the user's state as of `lsn`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Records up to and including this LSN are in it.
    pub lsn: u64,
    /// The user's bytes.
    pub body: Vec<u8>,
}

/// A snapshot file found whole by recovery, to be read as a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotFile {
    /// Records up to and including this LSN are in it.
    pub lsn: u64,
    /// Its file name.
    pub name: String,
    /// Its format's version (1 or 2).
    pub version: u32,
    /// Where its body starts in the file.
    pub offset: u64,
    /// Its body's length.
    pub len: u64,
}

const SNAP_MAGIC: &[u8; 8] = b"FILASNP\0";
const SNAP_HEADER: usize = 40;
const SNAP_TRAILER: usize = 16;
const SNAP_END: &[u8; 4] = b"SEND";
const SNAP_VERSION: u32 = 2;
pub(super) const SNAP_TMP: &str = "snap.tmp";
/// Bytes of a snapshot buffered before they are appended to its file, and
/// read at a time when it is checked.
const SNAP_CHUNK: usize = 1 << 20;

/// The name of the snapshot at `lsn`.
pub fn snapshot_name(lsn: u64) -> String {
    format!("snap-{lsn:016x}.snap")
}

pub(super) fn snapshot_lsn(name: &str) -> Option<u64> {
    numbered(name, "snap-", ".snap")
}

/// A version 2 snapshot header.
fn snapshot_header(lsn: u64, last_segment: u64) -> [u8; SNAP_HEADER] {
    let mut h = [0u8; SNAP_HEADER];
    h[..8].copy_from_slice(SNAP_MAGIC);
    h[8..12].copy_from_slice(&SNAP_VERSION.to_be_bytes());
    h[16..24].copy_from_slice(&lsn.to_be_bytes());
    h[24..32].copy_from_slice(&last_segment.to_be_bytes());
    let crc = crc32c::crc32c(&h[16..]);
    h[12..16].copy_from_slice(&crc.to_be_bytes());
    h
}

/// A version 2 snapshot trailer: the body's length and CRC32C, `SEND`.
fn snapshot_trailer(len: u64, crc: u32) -> [u8; SNAP_TRAILER] {
    let mut t = [0u8; SNAP_TRAILER];
    t[..8].copy_from_slice(&len.to_be_bytes());
    t[8..12].copy_from_slice(&crc.to_be_bytes());
    t[12..].copy_from_slice(SNAP_END);
    t
}

/// A CRC32C of `len` bytes of a file from `offset`, read a chunk at a time.
fn crc_of<S: Storage>(storage: &S, name: &str, offset: u64, len: u64) -> std::io::Result<u32> {
    let mut buf = vec![0u8; SNAP_CHUNK.min(len as usize)];
    let mut crc = 0;
    let mut at = 0;
    while at < len {
        let want = buf.len().min((len - at) as usize);
        let n = storage.read_at(name, offset + at, &mut buf[..want])?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the file ended early",
            ));
        }
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        at += n as u64;
    }
    Ok(crc)
}

/// Checks the snapshot file `name` named for `lsn`, reading it a chunk at
/// a time; answers its last segment number and where its body is.
pub(super) fn check_snapshot<S: Storage>(
    storage: &S,
    name: &str,
    lsn: u64,
) -> Result<(u64, SnapshotFile), &'static str> {
    let len = storage
        .file_len(name)
        .map_err(|_| "snapshot cannot be read")?;
    let mut h = [0u8; SNAP_HEADER];
    let n = storage
        .read_at(name, 0, &mut h)
        .map_err(|_| "snapshot cannot be read")?;
    if n < SNAP_HEADER || &h[..8] != SNAP_MAGIC {
        return Err("not a whole fila snapshot");
    }
    if be64(&h[16..]) != lsn {
        return Err("snapshot header names another LSN");
    }
    let version = be32(&h[8..]);
    let body = match version {
        1 => {
            if be64(&h[32..]) != len - SNAP_HEADER as u64 {
                return Err("snapshot body length does not match");
            }
            let crc = crc_of(storage, name, 16, len - 16).map_err(|_| "snapshot cannot be read")?;
            if be32(&h[12..]) != crc {
                return Err("snapshot checksum does not match");
            }
            len - SNAP_HEADER as u64
        }
        2 => {
            if be32(&h[12..]) != crc32c::crc32c(&h[16..]) {
                return Err("snapshot header checksum does not match");
            }
            if len < (SNAP_HEADER + SNAP_TRAILER) as u64 {
                return Err("not a whole fila snapshot");
            }
            let mut t = [0u8; SNAP_TRAILER];
            let n = storage
                .read_at(name, len - SNAP_TRAILER as u64, &mut t)
                .map_err(|_| "snapshot cannot be read")?;
            if n < SNAP_TRAILER || &t[12..] != SNAP_END {
                return Err("snapshot has no end (not written whole)");
            }
            let body = len - (SNAP_HEADER + SNAP_TRAILER) as u64;
            if be64(&t) != body {
                return Err("snapshot body length does not match");
            }
            let crc = crc_of(storage, name, SNAP_HEADER as u64, body)
                .map_err(|_| "snapshot cannot be read")?;
            if be32(&t[8..]) != crc {
                return Err("snapshot checksum does not match");
            }
            body
        }
        _ => return Err("unknown snapshot version"),
    };
    Ok((
        be64(&h[24..]),
        SnapshotFile {
            lsn,
            name: name.to_owned(),
            version,
            offset: SNAP_HEADER as u64,
            len: body,
        },
    ))
}

/// A snapshot's body read from its file a chunk at a time.
pub struct SnapshotReader<'a, S: Storage> {
    pub(super) storage: &'a S,
    pub(super) name: String,
    pub(super) at: u64,
    pub(super) end: u64,
}

impl<S: Storage> std::io::Read for SnapshotReader<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.end - self.at;
        if left == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self
            .storage
            .read_at(&self.name, self.at, &mut buf[..want])?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the snapshot ended early",
            ));
        }
        self.at += n as u64;
        Ok(n)
    }
}

impl<S: Storage> Log<S> {
    /// The body of a snapshot recovery found, read from its file a chunk at
    /// a time.
    pub fn snapshot_reader(&self, file: &SnapshotFile) -> SnapshotReader<'_, S> {
        SnapshotReader {
            storage: &self.storage,
            name: file.name.clone(),
            at: file.offset,
            end: file.offset + file.len,
        }
    }

    /// Begins a snapshot of the user's state as of `lsn` (at most the
    /// durable LSN), about `size` bytes (room is made for that much first):
    /// the body follows through [`Log::snapshot_write`], and
    /// [`Log::snapshot_finish`] makes it the snapshot. The log goes on
    /// taking records meanwhile. A failure ([`Error::NoRoom`] or any other)
    /// leaves no snapshot begun and the log as it was.
    ///
    /// # Panics
    /// When `lsn` is past the durable LSN: a snapshot of records that are
    /// not durable would outlive them.
    pub fn snapshot_begin(&mut self, lsn: u64, size: u64) -> Result<(), Error> {
        self.snapshot_may_begin(lsn)?;
        self.writing = None;
        let _ = self.storage.remove(SNAP_TMP);
        let begun = self
            .storage
            .create(SNAP_TMP)
            .and_then(|()| {
                self.storage
                    .preallocate(SNAP_TMP, size + (SNAP_HEADER + SNAP_TRAILER) as u64)
            })
            .and_then(|()| {
                self.storage
                    .append(SNAP_TMP, &snapshot_header(lsn, self.last_number))
            });
        if let Err(source) = begun {
            let e = self.io_error(SNAP_TMP, source);
            let _ = self.storage.remove(SNAP_TMP);
            return Err(e);
        }
        self.writing = Some(Writing {
            lsn,
            buf: Vec::with_capacity(SNAP_CHUNK),
            len: 0,
            crc: 0,
        });
        Ok(())
    }

    /// Adds `bytes` to the body of the snapshot being written (appended to
    /// its file a chunk at a time). A failure abandons the snapshot.
    pub fn snapshot_write(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let Some(w) = self.writing.as_mut() else {
            return Err(Error::Io {
                file: self.storage.describe(SNAP_TMP),
                source: std::io::Error::other("no snapshot is being written"),
            });
        };
        w.crc = crc32c::crc32c_append(w.crc, bytes);
        w.len += bytes.len() as u64;
        w.buf.extend_from_slice(bytes);
        if w.buf.len() >= SNAP_CHUNK {
            self.flush_snapshot()?;
        }
        Ok(())
    }

    fn flush_snapshot(&mut self) -> Result<(), Error> {
        let Some(w) = self.writing.as_mut() else {
            return Ok(());
        };
        if w.buf.is_empty() {
            return Ok(());
        }
        let result = self.storage.append(SNAP_TMP, &w.buf);
        w.buf.clear();
        if w.buf.capacity() > 2 * SNAP_CHUNK {
            w.buf = Vec::with_capacity(SNAP_CHUNK);
        }
        if let Err(source) = result {
            let e = self.io_error(SNAP_TMP, source);
            self.snapshot_abandon();
            return Err(e);
        }
        Ok(())
    }

    /// Gives up the snapshot being written (its file is removed).
    pub fn snapshot_abandon(&mut self) {
        if self.writing.take().is_some() {
            let _ = self.storage.remove(SNAP_TMP);
        }
    }

    /// Whether a snapshot is being written.
    pub fn snapshot_writing(&self) -> bool {
        self.writing.is_some()
    }

    /// Ends the snapshot being written: its trailer, sync, rename,
    /// directory sync; then the older snapshots and the segments it covers
    /// are deleted. A failure before the rename abandons it (the log and
    /// the older snapshot are as they were); failing to delete what it
    /// made unneeded is not an error (recovery drops it).
    pub fn snapshot_finish(&mut self) -> Result<(), Error> {
        self.flush_snapshot()?;
        let Some(w) = self.writing.take() else {
            return Err(Error::Io {
                file: self.storage.describe(SNAP_TMP),
                source: std::io::Error::other("no snapshot is being written"),
            });
        };
        let done = self
            .storage
            .append(SNAP_TMP, &snapshot_trailer(w.len, w.crc));
        if let Err(source) = done {
            let e = self.io_error(SNAP_TMP, source);
            let _ = self.storage.remove(SNAP_TMP);
            return Err(e);
        }
        make_durable(&mut self.storage, w.lsn)?;
        self.snapshot_adopt(w.lsn);
        let _ = self.storage.sync_dir();
        Ok(())
    }

    /// Refuses a snapshot once the log failed; panics for one at an LSN
    /// past the durable one (a snapshot of records that are not durable
    /// would outlive them).
    fn snapshot_may_begin(&self, lsn: u64) -> Result<(), Error> {
        if self.failed {
            return Err(Error::Failed);
        }
        assert!(
            lsn <= self.durable_lsn,
            "a snapshot at {lsn} is ahead of the durable LSN {}",
            self.durable_lsn
        );
        Ok(())
    }

    /// Takes the snapshot at `lsn`, durable already, as the log's newest:
    /// the older snapshots and the segments it covers (all but the one
    /// being written to) are deleted. Their deletion is not synced: a crash
    /// may bring them back, and recovery drops what a snapshot covers.
    pub fn snapshot_adopt(&mut self, lsn: u64) {
        self.snapshot_lsn = self.snapshot_lsn.max(lsn);
        if let Ok(names) = self.storage.list() {
            for old in names {
                if snapshot_lsn(&old).is_some_and(|l| l < lsn) {
                    let _ = self.storage.remove(&old);
                }
            }
        }
        let current = self.current.as_ref().map(|c| c.number);
        let mut keep = Vec::new();
        for (k, &(number, first)) in self.segments.iter().enumerate() {
            let covered = self
                .segments
                .get(k + 1)
                .is_some_and(|&(_, next_first)| next_first <= lsn + 1);
            if covered
                && Some(number) != current
                && self.storage.remove(&segment_name(number)).is_ok()
            {
                continue;
            }
            keep.push((number, first));
        }
        self.segments = keep;
    }

    /// A snapshot of the user's state as of `lsn` (at most the durable
    /// LSN), made whole in memory, to be written away from the log: by
    /// another thread, with a handle of its own on the log's directory
    /// ([`Storage::beside`]), while the log goes on taking records and
    /// syncing them ([`DetachedSnapshot::write`]); then
    /// [`Log::snapshot_adopt`] makes it the log's newest. No other
    /// snapshot of the log may be written meanwhile (both use the same
    /// temporary file).
    ///
    /// # Panics
    /// When `lsn` is past the durable LSN, or a snapshot is being written.
    pub fn snapshot_detached(&self, lsn: u64, body: &[u8]) -> Result<DetachedSnapshot, Error> {
        self.snapshot_may_begin(lsn)?;
        assert!(self.writing.is_none(), "a snapshot is being written");
        let mut bytes = Vec::with_capacity(SNAP_HEADER + body.len() + SNAP_TRAILER);
        bytes.extend_from_slice(&snapshot_header(lsn, self.last_number));
        bytes.extend_from_slice(body);
        bytes.extend_from_slice(&snapshot_trailer(body.len() as u64, crc32c::crc32c(body)));
        Ok(DetachedSnapshot { lsn, bytes })
    }

    /// Records the user's state as of `lsn` (at most the durable LSN) in
    /// one call: [`Log::snapshot_begin`], the body, [`Log::snapshot_finish`].
    pub fn snapshot(&mut self, lsn: u64, body: &[u8]) -> Result<(), Error> {
        self.snapshot_begin(lsn, body.len() as u64)?;
        self.snapshot_write(body)?;
        self.snapshot_finish()
    }
}

/// A snapshot made whole in memory by [`Log::snapshot_detached`], written
/// away from the log.
#[derive(Debug)]
pub struct DetachedSnapshot {
    lsn: u64,
    bytes: Vec<u8>,
}

impl DetachedSnapshot {
    /// The LSN it is the state as of.
    pub fn lsn(&self) -> u64 {
        self.lsn
    }

    /// Writes it into the temporary file, syncs it, names it for its LSN
    /// and syncs the directory, with `storage` (a handle of its own on the
    /// log's directory, or the log's own between its calls). A failure
    /// before the rename leaves no file; after it (the directory's sync)
    /// either snapshot may be the newest after a crash, and both are
    /// whole with their segments. Once it answers `Ok`, hand it to
    /// [`Log::snapshot_adopt`].
    pub fn write<S: Storage>(&self, storage: &mut S) -> Result<(), Error> {
        let _ = storage.remove(SNAP_TMP);
        let written = storage
            .create(SNAP_TMP)
            .and_then(|()| storage.preallocate(SNAP_TMP, self.bytes.len() as u64))
            .and_then(|()| storage.append(SNAP_TMP, &self.bytes));
        if let Err(source) = written {
            let e = classify(storage, SNAP_TMP, source);
            let _ = storage.remove(SNAP_TMP);
            return Err(e);
        }
        make_durable(storage, self.lsn)
    }
}

/// Syncs the whole snapshot in the temporary file, names it for `lsn`
/// and syncs the directory.
fn make_durable<S: Storage>(storage: &mut S, lsn: u64) -> Result<(), Error> {
    let done = storage
        .sync(SNAP_TMP)
        .and_then(|()| storage.rename(SNAP_TMP, &snapshot_name(lsn)));
    if let Err(source) = done {
        let e = classify(storage, SNAP_TMP, source);
        let _ = storage.remove(SNAP_TMP);
        return Err(e);
    }
    // A failed directory sync: which of the two snapshots a crash keeps
    // is unknown, and either is whole with its segments — keep them all.
    storage
        .sync_dir()
        .map_err(|source| classify(storage, ".", source))
}
