//! The log: records appended into a buffer, written and synced together by
//! [`Log::commit`] (a group commit: everything appended since the last
//! commit becomes durable with one sync per segment touched), in segments
//! of a fixed size; and recovery ([`Log::open`], [`Log::open_with`]), which
//! reads the segments back one at a time, cuts a torn tail and refuses
//! corruption.
//!
//! A segment is a file `wal-<number, 16 hex digits>.seg` that starts with a
//! 32-byte header — magic `FILAWAL\0`, `u32` version, `u32` CRC32C of the
//! next 16 bytes, `u64` segment number, `u64` LSN of its first record — and
//! then holds records ([`crate::record`]) with consecutive LSNs. A segment
//! is preallocated to its full size when it is made, so appends to it never
//! run out of room; once the current segment is half full the next one is
//! made ahead (empty, preallocated: the *spare*), so running out of room or
//! a directory made read-only shows long before a segment is due.
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
//! * anything wrong in an older segment is corruption;
//! * an empty newest segment is the spare (kept); one shorter than its
//!   header was being made (removed);
//! * corruption refuses to open, naming the file and the offset: a log
//!   never silently drops records that were acknowledged after the damage;
//! * the newest snapshot must be whole (else corruption: falling back to an
//!   older one could miss records whose segments are gone), and the records
//!   after it must follow on from its LSN; records it covers are skipped.

use crate::record::{self, Decoded, RECORD_HEADER};
use crate::storage::{out_of_room, Storage, SECTOR};
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
const SNAP_TMP: &str = "snap.tmp";
/// Bytes of a snapshot buffered before they are appended to its file, and
/// read at a time when it is checked.
const SNAP_CHUNK: usize = 1 << 20;
/// How often making the spare segment is tried again after it failed.
const SPARE_RETRY: std::time::Duration = std::time::Duration::from_millis(500);

/// The name of the snapshot at `lsn`.
pub fn snapshot_name(lsn: u64) -> String {
    format!("snap-{lsn:016x}.snap")
}

fn snapshot_lsn(name: &str) -> Option<u64> {
    numbered(name, "snap-", ".snap")
}

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
fn check_snapshot<S: Storage>(
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
    storage: &'a S,
    name: String,
    at: u64,
    end: u64,
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
}

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
}

impl<S: Storage> std::fmt::Debug for Log<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("next_lsn", &self.next_lsn)
            .field("durable_lsn", &self.durable_lsn)
            .finish_non_exhaustive()
    }
}

/// A segment found at recovery: number, name, length, first LSN.
struct Found {
    number: u64,
    name: String,
    len: u64,
    first: u64,
}

impl<S: Storage> Log<S> {
    /// Opens the log in `storage`, recovering what it holds: the newest
    /// snapshot's body and the records in LSN order, all in memory (see
    /// [`Log::open_with`] for a recovery that streams them). A torn tail is
    /// cut off (durably); corruption is an error.
    pub fn open(storage: S, options: LogOptions) -> Result<(Log<S>, Recovered), Error> {
        let mut records = Vec::new();
        let mut snapshot = None;
        let (log, opened) = Log::open_with(
            storage,
            options,
            |file, reader| {
                let mut body = Vec::with_capacity(file.len as usize);
                reader.read_to_end(&mut body).map_err(|source| Error::Io {
                    file: file.name.clone(),
                    source,
                })?;
                snapshot = Some(Snapshot {
                    lsn: file.lsn,
                    body,
                });
                Ok::<(), Error>(())
            },
            |lsn, kind, body| {
                records.push(OwnedRecord {
                    lsn,
                    kind,
                    body: body.to_vec(),
                });
                Ok::<(), Error>(())
            },
        )?;
        Ok((
            log,
            Recovered {
                snapshot,
                records,
                torn: opened.torn,
            },
        ))
    }

    /// Opens the log in `storage`, recovering what it holds: checks the
    /// newest snapshot and hands its body to `snapshot` as a stream (read
    /// from its file a chunk at a time), then hands each record after it to
    /// `each` in LSN order, reading one segment at a time. A torn tail is
    /// cut off (durably); corruption is an error, as is a directory new
    /// files cannot be made in.
    pub fn open_with<E: From<Error>>(
        mut storage: S,
        options: LogOptions,
        mut snapshot: impl FnMut(&SnapshotFile, &mut dyn std::io::Read) -> Result<(), E>,
        mut each: impl FnMut(u64, u8, &[u8]) -> Result<(), E>,
    ) -> Result<(Log<S>, Opened), E> {
        let options = LogOptions {
            segment_bytes: options.segment_bytes.max(2 * SEGMENT_HEADER as u64),
        };
        let io = |name: &str, storage: &S| {
            let file = storage.describe(name);
            move |source| Error::Io { file, source }
        };
        let names = storage.list().map_err(io(".", &storage))?;
        if names.iter().any(|n| n == SNAP_TMP) {
            // A snapshot that never got its name: it does not count.
            storage.remove(SNAP_TMP).map_err(io(SNAP_TMP, &storage))?;
        }
        let mut opened = Opened::default();
        let mut last_number = 0;
        let mut snapshots: Vec<(u64, String)> = names
            .iter()
            .filter_map(|n| snapshot_lsn(n).map(|l| (l, n.clone())))
            .collect();
        snapshots.sort();
        if let Some((lsn, name)) = snapshots.pop() {
            let (number, file) =
                check_snapshot(&storage, &name, lsn).map_err(|why| Error::Corrupt {
                    file: storage.describe(&name),
                    offset: 0,
                    why,
                })?;
            last_number = number;
            let mut reader = SnapshotReader {
                storage: &storage,
                name: file.name.clone(),
                at: file.offset,
                end: file.offset + file.len,
            };
            snapshot(&file, &mut reader)?;
            opened.snapshot = Some(file);
            for (_, older) in snapshots {
                storage.remove(&older).map_err(io(&older, &storage))?;
            }
        }
        let covered = opened.snapshot.as_ref().map_or(0, |s| s.lsn);
        let mut segments: Vec<(u64, String)> = names
            .into_iter()
            .filter_map(|n| segment_number(&n).map(|k| (k, n)))
            .collect();
        segments.sort();
        if let Some((n, _)) = segments.last() {
            last_number = last_number.max(*n);
        }
        // Headers first: which segments hold records after the snapshot.
        let mut found: Vec<Found> = Vec::new();
        let mut spare = None;
        let last = segments.len().saturating_sub(1);
        for (i, (number, name)) in segments.iter().enumerate() {
            let len = storage.file_len(name).map_err(io(name, &storage))?;
            let mut h = [0u8; SEGMENT_HEADER];
            let n = storage
                .read_at(name, 0, &mut h)
                .map_err(io(name, &storage))?;
            let header_torn = n < SEGMENT_HEADER
                || (len == SEGMENT_HEADER as u64 && read_header(&h, *number).is_err());
            if i == last && len == 0 {
                // The spare, made ahead: kept for the next segment.
                spare = Some(*number);
                break;
            }
            if header_torn && i == last {
                // Made, header not yet durable: start it again.
                storage.remove(name).map_err(io(name, &storage))?;
                storage.sync_dir().map_err(io(".", &storage))?;
                break;
            }
            let first = read_header(&h[..n], *number).map_err(|why| Error::Corrupt {
                file: storage.describe(name),
                offset: 0,
                why: if header_torn {
                    "segment shorter than its header"
                } else {
                    why
                },
            })?;
            found.push(Found {
                number: *number,
                name: name.clone(),
                len,
                first,
            });
        }
        // Segments wholly covered by the snapshot are stale: a delete that
        // did not become durable before a crash can bring any of them back,
        // in any combination. They are dropped unread.
        let start = found
            .iter()
            .rposition(|h| h.first <= covered + 1)
            .unwrap_or(0);
        for f in found.drain(..start) {
            storage.remove(&f.name).map_err(io(&f.name, &storage))?;
        }
        if start > 0 {
            storage.sync_dir().map_err(io(".", &storage))?;
        }
        let mut expect_lsn: Option<u64> = None;
        let mut kept_segments = Vec::new();
        let mut current = None;
        let last = found.len().saturating_sub(1);
        for (i, f) in found.iter().enumerate() {
            let newest = i == last;
            let corrupt = |offset: usize, why: &'static str| Error::Corrupt {
                file: storage.describe(&f.name),
                offset: offset as u64,
                why,
            };
            match expect_lsn {
                Some(e) if f.first != e => {
                    return Err(
                        corrupt(0, "segment does not start where the one before ended").into(),
                    );
                }
                None if f.first > covered + 1 => {
                    return Err(corrupt(
                        0,
                        "records between the snapshot and this segment are missing",
                    )
                    .into());
                }
                _ => {}
            }
            kept_segments.push((f.number, f.first));
            // One segment in memory at a time.
            let data = storage.read(&f.name).map_err(io(&f.name, &storage))?;
            debug_assert_eq!(data.len() as u64, f.len);
            let mut next = f.first;
            let mut at = SEGMENT_HEADER;
            let mut torn: Option<(usize, &'static str)> = None;
            while at < data.len() {
                match record::decode(&data[at..]) {
                    Decoded::Record(r, used) => {
                        if r.lsn != next {
                            return Err(corrupt(at, "record out of sequence").into());
                        }
                        if r.lsn > covered {
                            opened.records += 1;
                            opened.record_bytes += used as u64;
                            each(r.lsn, r.kind, r.body)?;
                        }
                        next += 1;
                        at += used;
                    }
                    Decoded::Incomplete => {
                        torn = Some((at, "record cut short"));
                        break;
                    }
                    Decoded::Bad(why) => {
                        torn = Some((at, why));
                        break;
                    }
                }
            }
            if let Some((offset, why)) = torn {
                if !newest || later_record_after(&data, offset, next) {
                    return Err(corrupt(offset, why).into());
                }
                let why =
                    torn_write(&data[offset..], offset).map_err(|why| corrupt(offset, why))?;
                opened.torn = Some(TornTail {
                    file: storage.describe(&f.name),
                    offset: offset as u64,
                    bytes: (data.len() - offset) as u64,
                    why,
                });
                storage
                    .truncate(&f.name, offset as u64)
                    .map_err(io(&f.name, &storage))?;
            }
            expect_lsn = Some(next);
            current = Some(Current {
                name: f.name.clone(),
                number: f.number,
                len: torn.map_or(data.len(), |t| t.0) as u64,
            });
        }
        let next_lsn = expect_lsn.unwrap_or(covered + 1);
        if next_lsn <= covered {
            // The snapshot is only taken of durable records, so the log
            // reaches at least as far.
            let newest = segments.last().map_or(".", |s| s.1.as_str());
            return Err(Error::Corrupt {
                file: storage.describe(newest),
                offset: 0,
                why: "the log ends before its snapshot",
            }
            .into());
        }
        storage.check_writable().map_err(|source| Error::Io {
            file: format!("{}: new files cannot be made there", storage.describe(".")),
            source,
        })?;
        Ok((
            Log {
                storage,
                options,
                current,
                spare,
                next_lsn,
                pending: Vec::new(),
                pending_records: Vec::new(),
                durable_lsn: next_lsn - 1,
                segments: kept_segments,
                last_number,
                failed: false,
                room: None,
                room_retry: None,
                writing: None,
            },
            opened,
        ))
    }

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

    /// The LSN up to which records are durable.
    pub fn durable_lsn(&self) -> u64 {
        self.durable_lsn
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
        if self.failed {
            return Err(Error::Failed);
        }
        if !self.pending_records.is_empty() {
            let result = self.write_pending();
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

    /// What ails a failed write: [`Error::NoRoom`] when the disk is full or
    /// the directory closed, else `Io`.
    fn io_error(&self, name: &str, source: std::io::Error) -> Error {
        let file = self.storage.describe(name);
        if out_of_room(&source) {
            Error::NoRoom { file, source }
        } else {
            Error::Io { file, source }
        }
    }

    fn write_pending(&mut self) -> Result<u64, Error> {
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
            if let Err(source) = self.storage.append(&name, &self.pending[start..end]) {
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
            self.current.as_mut().expect("open").len += (end - start) as u64;
            self.storage
                .sync(&name)
                .map_err(|source| Error::SyncFailed {
                    file: self.storage.describe(&name),
                    source,
                })?;
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
        if self.failed {
            return Err(Error::Failed);
        }
        assert!(
            lsn <= self.durable_lsn,
            "a snapshot at {lsn} is ahead of the durable LSN {}",
            self.durable_lsn
        );
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
        let name = snapshot_name(w.lsn);
        let mut trailer = [0u8; SNAP_TRAILER];
        trailer[..8].copy_from_slice(&w.len.to_be_bytes());
        trailer[8..12].copy_from_slice(&w.crc.to_be_bytes());
        trailer[12..].copy_from_slice(SNAP_END);
        let done = self
            .storage
            .append(SNAP_TMP, &trailer)
            .and_then(|()| self.storage.sync(SNAP_TMP))
            .and_then(|()| self.storage.rename(SNAP_TMP, &name));
        if let Err(source) = done {
            let e = self.io_error(SNAP_TMP, source);
            let _ = self.storage.remove(SNAP_TMP);
            return Err(e);
        }
        if let Err(source) = self.storage.sync_dir() {
            // Which of the two snapshots a crash keeps is unknown, and
            // either is whole with its segments: keep them all.
            return Err(self.io_error(".", source));
        }
        // Now nothing older is needed.
        let lsn = w.lsn;
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
        let _ = self.storage.sync_dir();
        Ok(())
    }

    /// Records the user's state as of `lsn` (at most the durable LSN) in
    /// one call: [`Log::snapshot_begin`], the body, [`Log::snapshot_finish`].
    pub fn snapshot(&mut self, lsn: u64, body: &[u8]) -> Result<(), Error> {
        self.snapshot_begin(lsn, body.len() as u64)?;
        self.snapshot_write(body)?;
        self.snapshot_finish()
    }

    fn new_segment(&mut self, first_lsn: u64) -> Result<(), Error> {
        let (number, made) = match self.spare.take() {
            Some(number) => (number, true),
            None => (self.last_number + 1, false),
        };
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
                .append(&name, &segment_header(number, first_lsn))
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
        self.current = Some(Current {
            name,
            number,
            len: SEGMENT_HEADER as u64,
        });
        self.last_number = self.last_number.max(number);
        self.segments.push((number, first_lsn));
        Ok(())
    }

    /// The storage, for tests that crash it.
    pub fn into_storage(self) -> S {
        self.storage
    }
}

/// The LSN of the last of the first `count` pending records.
fn records_last_lsn(records: &[(u64, usize)], count: usize) -> u64 {
    records[count - 1].0
}

/// Tells a torn write from corruption at the end of the newest segment:
/// `tail` is what follows the last good record, at `offset` in the file.
/// Answers what the torn write looks like, or why it is corruption.
///
/// A write the crash interrupted leaves a prefix of its bytes: a record
/// cut short (its length runs past the end of the file), or, where the
/// file system had made room for it, sectors that were never written and
/// read back as zeros. A record whose whole length is there, with no
/// sector of zeros in it, and whose checksum fails was written whole and
/// damaged afterwards: it may have been acknowledged, so it is never cut.
/// A damaged length field that makes a record look longer than the file
/// cannot be told from a torn write (docs/durability.md).
fn torn_write(tail: &[u8], offset: usize) -> Result<&'static str, &'static str> {
    if tail.iter().all(|b| *b == 0) {
        return Ok("zeros: room never written");
    }
    match record::decode(tail) {
        Decoded::Incomplete => Ok("a record cut short"),
        Decoded::Record(..) => Ok("a record after a gap"),
        Decoded::Bad(why) => {
            if tail.len() < 4 {
                return Ok("a record cut short");
            }
            let len = u32::from_be_bytes([tail[0], tail[1], tail[2], tail[3]]) as usize;
            let end = tail.len().min(4usize.saturating_add(len));
            // A sector of the record (aligned in the file) all zeros: its
            // write did not reach the disk.
            let first = offset.div_ceil(SECTOR) * SECTOR;
            let mut at = first - offset;
            while at + SECTOR <= end {
                if tail[at..at + SECTOR].iter().all(|b| *b == 0) {
                    return Ok("a record with a sector never written");
                }
                at += SECTOR;
            }
            // The last, partial sector of the file: zeros from some point
            // to the end of the record.
            if end == tail.len() && tail[end - 1] == 0 && end > 4 {
                let zeros = tail[..end].iter().rev().take_while(|b| **b == 0).count();
                if (offset + end - zeros).is_multiple_of(SECTOR) {
                    return Ok("a record with a sector never written");
                }
            }
            if why == "record checksum does not match" {
                Err("the last record is whole and its checksum does not match: \
                     damaged after it was written (not a torn write)")
            } else {
                Err(why)
            }
        }
    }
}

/// Whether a good record with an LSN of `next` or later starts anywhere
/// after `offset`: then the damage at `offset` is not a torn tail.
fn later_record_after(data: &[u8], offset: usize, next: u64) -> bool {
    let mut at = offset + 1;
    while at + RECORD_HEADER <= data.len() {
        // Cheap test first: a plausible LSN at the header's place.
        let mut l = [0u8; 8];
        l.copy_from_slice(&data[at + 8..at + 16]);
        let lsn = u64::from_be_bytes(l);
        if lsn >= next && lsn < next.saturating_add(1 << 32) {
            if let Decoded::Record(..) = record::decode(&data[at..]) {
                return true;
            }
        }
        at += 1;
    }
    false
}
