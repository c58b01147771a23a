//! The log: records appended into a buffer, written and synced together by
//! [`Log::commit`] (a group commit: everything appended since the last
//! commit becomes durable with one sync per segment touched), in segments
//! of a fixed size; and recovery ([`Log::open`], [`Log::open_with`]), which
//! reads the segments back one at a time, cuts a torn tail and refuses
//! corruption.
//!
//! A caller that syncs on a thread of its own ([`Log::write_out`]) has the
//! pending records written without a sync of the segment they end in, and
//! syncs it with [`Log::sync_handle`] — a segment left behind for the next
//! one is synced before the log moves on, so only the newest one ever holds
//! written bytes that are not durable.
//!
//! A segment is a file `wal-<number, 16 hex digits>.seg` that starts with a
//! 32-byte header — magic `FILAWAL\0`, `u32` version, `u32` CRC32C of the
//! next 16 bytes, `u64` segment number, `u64` LSN of its first record — and
//! then holds records ([`crate::record`]) with consecutive LSNs. A segment
//! is preallocated to its full size when it is made, so appends to it never
//! run out of room; once the current segment is half full the next one is
//! made ahead (empty, preallocated: the *spare*), so running out of room or
//! a directory made read-only shows long before a segment is due. The spare
//! is then filled with zeros and synced away from the writer
//! ([`Storage::zero_fill`]), and records are written over those zeros: an
//! `fdatasync` after a write into blocks already written flushes the data
//! alone, where a write that grows the file also commits the file system's
//! journal (docs/benchmarks.md, "A segment's preparation and fdatasync").
//! Such a segment keeps its zeros after its last record; when it is left
//! behind for the next one it keeps them too.
//!
//! A snapshot is the user's state as of an LSN, written as a stream
//! ([`Log::snapshot_begin`], [`Log::snapshot_write`] in chunks,
//! [`Log::snapshot_finish`]) into `snap.tmp`, synced, renamed to
//! `snap-<lsn, 16 hex digits>.snap` and made durable with a directory
//! sync; then the older snapshots and every segment whose records it
//! covers are deleted, so the log stays proportional to what happened
//! since. The log goes on taking records while a snapshot is written.
//! Version 2 (written now): a 40-byte header — magic `FILASNP\0`, `u32`
//! version, `u32` CRC32C of the next 24 bytes, `u64` LSN, `u64` the last
//! segment number used, `u64` reserved — then the body, then a 16-byte
//! trailer: `u64` body length, `u32` CRC32C of the body, `SEND`. Version 1
//! (read only): the same header but for a CRC32C of everything after its
//! first 16 bytes and the body length in place of the reserved field, no
//! trailer.
//!
//! Recovery rules:
//! * records must be whole, checksummed and consecutive from one segment to
//!   the next;
//! * in the newest segment, what follows the last good record is a torn
//!   write and is cut off (and reported in [`Recovered::torn`]) when it
//!   looks like one: a record cut short, or with sectors of zeros that were
//!   never written; a last record whose whole length is there and whose
//!   checksum fails was damaged after it was written, and is corruption,
//!   as is a good record of a later LSN after the damage;
//! * zeros from the last record to the end of a segment are room never
//!   used, not a torn write: in an older segment always (the next segment
//!   starting at the following LSN shows nothing is missing), in the newest
//!   when the file has the full segment size (it was filled with zeros
//!   ahead; a torn record before such zeros is told as below);
//! * anything else wrong in an older segment is corruption;
//! * a newest segment that is empty, or whose header is all zeros, is the
//!   spare (kept); one shorter than its header was being made (removed);
//! * corruption refuses to open, naming the file and the offset: a log
//!   never silently drops records that were acknowledged after the damage;
//! * the newest snapshot must be whole (else corruption: falling back to an
//!   older one could miss records whose segments are gone), and the records
//!   after it must follow on from its LSN; records it covers are skipped.

mod read;
mod recover;
mod snapshot;
mod truncate;

pub use snapshot::{snapshot_name, DetachedSnapshot, Snapshot, SnapshotFile, SnapshotReader};

use crate::record;
use crate::storage::{out_of_room, Storage};
use crate::Error;

/// Bytes of a segment header.
pub const SEGMENT_HEADER: usize = 32;
const MAGIC: &[u8; 8] = b"FILAWAL\0";
const VERSION: u32 = 1;

/// How the log is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogOptions {
    /// A segment is closed and a new one begun once it holds this many
    /// bytes (a record larger than that gets a segment of its own).
    pub segment_bytes: u64,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: 64 << 20,
        }
    }
}

/// What [`Log::open`] found: the newest snapshot and the records after it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// The newest snapshot, if any.
    pub snapshot: Option<Snapshot>,
    /// The records after it (after LSN 0 without one), in order.
    pub records: Vec<OwnedRecord>,
    /// A torn write found at the end of the newest segment, and cut off
    /// (or, through a storage that writes nothing, left as it is).
    pub torn: Option<TornTail>,
}

/// What [`Log::open_with`] found besides what it handed over.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Opened {
    /// The newest snapshot, if any (its body was handed over).
    pub snapshot: Option<SnapshotFile>,
    /// Records handed over (those after the snapshot).
    pub records: usize,
    /// Their bytes, headers included.
    pub record_bytes: u64,
    /// A torn write found at the end of the newest segment, and cut off.
    pub torn: Option<TornTail>,
}

/// A torn write at the end of the log: bytes of a record whose write a
/// crash interrupted (never synced, so never acknowledged).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornTail {
    /// The segment.
    pub file: String,
    /// Where the torn record starts.
    pub offset: u64,
    /// Bytes from there to the end of the segment.
    pub bytes: u64,
    /// What it looked like.
    pub why: &'static str,
}

/// How often making the spare segment is tried again after it failed.
const SPARE_RETRY: std::time::Duration = std::time::Duration::from_millis(500);

/// The number in a name made of `prefix`, 16 hex digits and `suffix`.
fn numbered(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    let hex = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

fn be64(b: &[u8]) -> u64 {
    let mut n = [0u8; 8];
    n.copy_from_slice(&b[..8]);
    u64::from_be_bytes(n)
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// A recovered record, owning its body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedRecord {
    /// Its LSN.
    pub lsn: u64,
    /// Its kind.
    pub kind: u8,
    /// Its body.
    pub body: Vec<u8>,
}

/// The name of segment `number`.
pub fn segment_name(number: u64) -> String {
    format!("wal-{number:016x}.seg")
}

fn segment_number(name: &str) -> Option<u64> {
    numbered(name, "wal-", ".seg")
}

/// The header of segment `number` whose first record is `first_lsn`.
pub fn segment_header(number: u64, first_lsn: u64) -> [u8; SEGMENT_HEADER] {
    let mut h = [0u8; SEGMENT_HEADER];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_be_bytes());
    h[16..24].copy_from_slice(&number.to_be_bytes());
    h[24..32].copy_from_slice(&first_lsn.to_be_bytes());
    let crc = crc32c::crc32c(&h[16..32]);
    h[12..16].copy_from_slice(&crc.to_be_bytes());
    h
}

/// Checks a segment header; answers its first LSN.
fn read_header(h: &[u8], number: u64) -> Result<u64, &'static str> {
    if h.len() < SEGMENT_HEADER {
        return Err("segment shorter than its header");
    }
    if &h[..8] != MAGIC {
        return Err("not a fila log segment (bad magic)");
    }
    if be32(&h[8..]) != VERSION {
        return Err("unknown segment version");
    }
    if be32(&h[12..]) != crc32c::crc32c(&h[16..32]) {
        return Err("segment header checksum does not match");
    }
    if be64(&h[16..]) != number {
        return Err("segment header names another segment number");
    }
    Ok(be64(&h[24..]))
}

struct Current {
    name: String,
    number: u64,
    len: u64,
    /// Bytes were written to it since its last sync ([`Log::write_out`]).
    unsynced: bool,
    /// What syncs it from another thread, once asked for.
    handle: Option<SyncHandle>,
}

impl Current {
    fn new(name: String, number: u64, len: u64) -> Current {
        Current {
            name,
            number,
            len,
            unsynced: false,
            handle: None,
        }
    }
}

/// Syncs one segment's written bytes (`fdatasync` of its file), from any
/// thread: what [`Log::sync_handle`] answers.
pub type SyncHandle = std::sync::Arc<dyn Fn() -> std::io::Result<()> + Send + Sync>;

/// A snapshot being written.
struct Writing {
    lsn: u64,
    /// Bytes not yet appended to its file.
    buf: Vec<u8>,
    /// Body bytes so far, and their CRC32C.
    len: u64,
    crc: u32,
}

/// An open log.
pub struct Log<S: Storage> {
    storage: S,
    options: LogOptions,
    current: Option<Current>,
    /// The next segment, made ahead: empty, preallocated.
    spare: Option<u64>,
    /// The spare being filled with zeros, while it is (dropped before the
    /// spare is written to).
    spare_zeroing: Option<crate::storage::Zeroing>,
    /// The LSN the next appended record gets.
    next_lsn: u64,
    /// Records appended since the last commit, encoded, with the LSN of the
    /// first of them.
    pending: Vec<u8>,
    pending_records: Vec<(u64, usize)>,
    durable_lsn: u64,
    /// Every segment file: number and first LSN, in order.
    segments: Vec<(u64, u64)>,
    /// The highest segment number ever used (never reused).
    last_number: u64,
    /// A write or sync failed: nothing is known about what reached the
    /// disk, so nothing more is accepted.
    failed: bool,
    /// Why making the spare failed last (no room, or the directory closed),
    /// and when to try again.
    room: Option<String>,
    room_retry: Option<std::time::Instant>,
    writing: Option<Writing>,
    /// The newest snapshot's LSN (0: none): records up to it are no longer
    /// all in the log.
    snapshot_lsn: u64,
}

impl<S: Storage> std::fmt::Debug for Log<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("next_lsn", &self.next_lsn)
            .field("durable_lsn", &self.durable_lsn)
            .finish_non_exhaustive()
    }
}

impl<S: Storage> Log<S> {
    /// Appends a record to the pending batch; answers its LSN. Nothing is
    /// written until [`Log::commit`].
    pub fn append(&mut self, kind: u8, body: &[u8]) -> Result<u64, Error> {
        if self.failed {
            return Err(Error::Failed);
        }
        let lsn = self.next_lsn;
        self.next_lsn += 1;
        let start = self.pending.len();
        record::encode(lsn, kind, body, &mut self.pending);
        self.pending_records.push((lsn, start));
        Ok(lsn)
    }

    /// The LSN up to which records are durable (after [`Log::write_out`]:
    /// written, durable once the newest segment is synced).
    pub fn durable_lsn(&self) -> u64 {
        self.durable_lsn
    }

    /// The newest snapshot's LSN (0: none): the log holds no record up to
    /// it.
    pub fn snapshot_lsn(&self) -> u64 {
        self.snapshot_lsn
    }

    /// The first LSN of each segment the log keeps, oldest first: a
    /// snapshot at an LSN at or past the second one's less one removes the
    /// oldest segment.
    pub fn segment_starts(&self) -> impl Iterator<Item = u64> + '_ {
        self.segments.iter().map(|&(_, first)| first)
    }

    /// The LSN the next record will get.
    pub fn next_lsn(&self) -> u64 {
        self.next_lsn
    }

    /// Bytes appended and not yet committed.
    pub fn pending_bytes(&self) -> usize {
        self.pending.len()
    }

    /// Why the log may soon have no room: making the spare segment failed
    /// for want of room (or of a writable directory); `None` once it was
    /// made.
    pub fn room_problem(&self) -> Option<&str> {
        self.room.as_deref()
    }

    /// Bytes free on the disk, if the storage knows.
    pub fn free_bytes(&self) -> Option<u64> {
        self.storage.free_bytes().ok().flatten()
    }

    /// Writes every pending record and syncs: one write and one sync per
    /// segment touched. Answers the durable LSN. With no room for them
    /// ([`Error::NoRoom`]) nothing half written is left and the records
    /// not yet durable stay pending for the next commit. After any other
    /// failed write or sync the log accepts nothing more (what reached the
    /// disk is unknown: the caller stops and recovers from the disk).
    pub fn commit(&mut self) -> Result<u64, Error> {
        self.write(true)
    }

    /// Writes every pending record as [`Log::commit`] does, but leaves the
    /// segment they end in unsynced (a segment they fill is synced before
    /// the next one is started): the caller makes them durable with the
    /// segment's [`Log::sync_handle`], on a thread of its own, while the
    /// log takes more. Answers the last LSN written.
    pub fn write_out(&mut self) -> Result<u64, Error> {
        self.write(false)
    }

    /// What syncs the segment the last records were written to, from any
    /// thread (`None` where the storage syncs only through the log, as a
    /// simulated disk does: then [`Log::commit`] is the way).
    pub fn sync_handle(&mut self) -> Result<Option<SyncHandle>, Error> {
        let Some(current) = self.current.as_mut() else {
            return Ok(None);
        };
        if current.handle.is_none() {
            current.handle =
                self.storage
                    .sync_handle(&current.name)
                    .map_err(|source| Error::Io {
                        file: self.storage.describe(&current.name),
                        source,
                    })?;
        }
        Ok(current.handle.clone())
    }

    fn write(&mut self, sync: bool) -> Result<u64, Error> {
        if self.failed {
            return Err(Error::Failed);
        }
        if sync {
            // Bytes an earlier `write_out` left unsynced.
            self.sync_current()?;
        }
        if !self.pending_records.is_empty() {
            let result = self.write_pending(sync);
            match &result {
                Err(e) if e.is_retryable() => return result,
                Err(_) => {
                    self.failed = true;
                    return result;
                }
                Ok(_) => {}
            }
        }
        self.prepare_spare();
        Ok(self.durable_lsn)
    }

    /// Makes the next segment ahead once the current one is half full (or
    /// there is none): an empty file, preallocated, so a full disk or a
    /// read-only directory shows before a segment is due. Failing is not
    /// an error of the log: [`Log::room_problem`] says why.
    fn prepare_spare(&mut self) {
        if self.spare.is_some() {
            return;
        }
        let half = self.options.segment_bytes / 2;
        if self.current.as_ref().is_some_and(|c| c.len < half) {
            return;
        }
        let now = std::time::Instant::now();
        if self.room_retry.is_some_and(|at| now < at) {
            return;
        }
        let number = self.last_number + 1;
        let name = segment_name(number);
        let made = self.storage.create(&name).and_then(|()| {
            self.storage
                .preallocate(&name, self.options.segment_bytes)
                .inspect_err(|_| {
                    let _ = self.storage.remove(&name);
                })
        });
        match made {
            Ok(()) => {
                self.spare_zeroing = self.zero_fill(&name);
                self.spare = Some(number);
                self.last_number = number;
                self.room = None;
            }
            Err(e) => {
                // Only want of room is news here; any other failure shows
                // (and fails the log) when the segment is really needed.
                if out_of_room(&e) {
                    self.room = Some(format!("{}: {e}", self.storage.describe(&name)));
                }
                self.room_retry = Some(now + SPARE_RETRY);
            }
        }
    }

    /// Starts filling the segment `name` (the spare) with zeros, where the
    /// storage can; a failure leaves it as it is (appends work the same).
    fn zero_fill(&mut self, name: &str) -> Option<crate::storage::Zeroing> {
        self.storage
            .zero_fill(name, self.options.segment_bytes)
            .ok()
            .flatten()
    }

    /// What ails a failed write: [`Error::NoRoom`] when the disk is full or
    /// the directory closed, else `Io`.
    fn io_error(&self, name: &str, source: std::io::Error) -> Error {
        classify(&self.storage, name, source)
    }

    /// Syncs the current segment if bytes were written to it since its
    /// last sync; a failure fails the log.
    fn sync_current(&mut self) -> Result<(), Error> {
        let Some(current) = self.current.as_mut().filter(|c| c.unsynced) else {
            return Ok(());
        };
        let name = current.name.clone();
        if let Err(source) = self.storage.sync(&name) {
            self.failed = true;
            return Err(Error::SyncFailed {
                file: self.storage.describe(&name),
                source,
            });
        }
        if let Some(c) = self.current.as_mut() {
            c.unsynced = false;
        }
        Ok(())
    }

    fn write_pending(&mut self, sync: bool) -> Result<u64, Error> {
        let mut i = 0;
        while i < self.pending_records.len() {
            // As many records as fit the current segment; a record that
            // does not fit a segment that has records starts a new one (a
            // record larger than a segment gets one of its own).
            let records = &self.pending_records;
            let first_len =
                (records.get(i + 1).map_or(self.pending.len(), |r| r.1) - records[i].1) as u64;
            let first_lsn = records[i].0;
            let room = match &self.current {
                Some(c)
                    if c.len + first_len <= self.options.segment_bytes
                        || c.len == SEGMENT_HEADER as u64 =>
                {
                    self.options.segment_bytes.saturating_sub(c.len)
                }
                _ => {
                    if let Err(e) = self.new_segment(first_lsn) {
                        self.forget_written(i);
                        return Err(e);
                    }
                    self.options.segment_bytes - SEGMENT_HEADER as u64
                }
            };
            let records = &self.pending_records;
            let start = records[i].1;
            let mut j = i;
            let mut end = start;
            while j < records.len() {
                let rec_end = records.get(j + 1).map_or(self.pending.len(), |r| r.1);
                if j > i && (rec_end - start) as u64 > room {
                    break;
                }
                end = rec_end;
                j += 1;
            }
            let current = self.current.as_ref().expect("a segment is open");
            let (name, len) = (current.name.clone(), current.len);
            if let Err(source) = self.storage.write_at(&name, len, &self.pending[start..end]) {
                let e = self.io_error(&name, source);
                if e.is_retryable() && self.storage.truncate(&name, len).is_ok() {
                    // Nothing of it is left: it stays pending.
                    self.forget_written(i);
                    return Err(e);
                }
                return Err(match e {
                    Error::NoRoom { file, source } => Error::Io { file, source },
                    e => e,
                });
            }
            let current = self.current.as_mut().expect("open");
            current.len += (end - start) as u64;
            current.unsynced = true;
            if sync {
                self.sync_current()?;
            }
            self.durable_lsn = records_last_lsn(&self.pending_records, j);
            i = j;
        }
        self.pending.clear();
        self.pending_records.clear();
        Ok(self.durable_lsn)
    }

    /// Drops the first `written` pending records (durable already) after a
    /// commit that could not write the rest.
    fn forget_written(&mut self, written: usize) {
        if written == 0 {
            return;
        }
        let cut = self
            .pending_records
            .get(written)
            .map_or(self.pending.len(), |r| r.1);
        self.pending.drain(..cut);
        self.pending_records.drain(..written);
        for r in &mut self.pending_records {
            r.1 -= cut;
        }
    }

    fn new_segment(&mut self, first_lsn: u64) -> Result<(), Error> {
        // What an earlier `write_out` left unsynced in the segment left
        // behind.
        self.sync_current()?;
        let (number, made) = match self.spare.take() {
            Some(number) => (number, true),
            None => (self.last_number + 1, false),
        };
        // Its zeros stop here (whatever of them was written stays).
        self.spare_zeroing = None;
        let name = segment_name(number);
        let mut exists = made;
        let result = (|| {
            if !made {
                self.storage.create(&name)?;
                exists = true;
                self.storage
                    .preallocate(&name, self.options.segment_bytes)?;
            }
            self.storage
                .write_at(&name, 0, &segment_header(number, first_lsn))
        })();
        if let Err(source) = result {
            let e = self.io_error(&name, source);
            if e.is_retryable() {
                // Nothing of it may stay: a segment shorter than its header
                // in the middle of the log would be corruption. Emptied, it
                // is the spare again.
                if !exists {
                    return Err(e);
                }
                if self.storage.truncate(&name, 0).is_ok() {
                    self.spare = Some(number);
                    self.last_number = self.last_number.max(number);
                    return Err(e);
                }
            }
            return Err(match e {
                Error::NoRoom { file, source } => Error::Io { file, source },
                e => e,
            });
        }
        let describe = self.storage.describe(&name);
        self.storage
            .sync(&name)
            .map_err(|source| Error::SyncFailed {
                file: describe.clone(),
                source,
            })?;
        self.storage
            .sync_dir()
            .map_err(|source| Error::SyncFailed {
                file: describe.clone(),
                source,
            })?;
        self.current = Some(Current::new(name, number, SEGMENT_HEADER as u64));
        self.last_number = self.last_number.max(number);
        self.segments.push((number, first_lsn));
        Ok(())
    }

    /// The storage, for tests that crash it.
    pub fn into_storage(self) -> S {
        self.storage
    }

    /// The storage, for files its user keeps beside the log (any name that
    /// is not a segment's or a snapshot's, nor `snap.tmp`: the log leaves
    /// them alone).
    pub fn storage_mut(&mut self) -> &mut S {
        &mut self.storage
    }

    /// The storage, read only.
    pub fn storage(&self) -> &S {
        &self.storage
    }
}

/// The LSN of the last of the first `count` pending records.
fn records_last_lsn(records: &[(u64, usize)], count: usize) -> u64 {
    records[count - 1].0
}

/// What ails a failed write of `name`: [`Error::NoRoom`] when the disk is
/// full or the directory closed, else `Io`.
fn classify<S: Storage>(storage: &S, name: &str, source: std::io::Error) -> Error {
    let file = storage.describe(name);
    if out_of_room(&source) {
        Error::NoRoom { file, source }
    } else {
        Error::Io { file, source }
    }
}
