//! The log: records appended into a buffer, written and synced together by
//! [`Log::commit`] (a group commit: everything appended since the last
//! commit becomes durable with one sync per segment touched), in segments
//! of a fixed size; and recovery ([`Log::open`]), which reads the segments
//! back, cuts a torn tail and refuses corruption.
//!
//! A segment is a file `wal-<number, 16 hex digits>.seg` that starts with a
//! 32-byte header — magic `FILAWAL\0`, `u32` version, `u32` CRC32C of the
//! next 16 bytes, `u64` segment number, `u64` LSN of its first record — and
//! then holds records ([`crate::record`]) with consecutive LSNs.
//!
//! A snapshot ([`Log::snapshot`]) is the user's state as of an LSN, in a
//! file `snap-<lsn, 16 hex digits>.snap` written whole under a temporary
//! name, synced, renamed and made durable with a directory sync; then the
//! older snapshots and every segment whose records it covers are deleted, so
//! the log stays proportional to what happened since. Its 40-byte header:
//! magic `FILASNP\0`, `u32` version, `u32` CRC32C of the rest (header and
//! body), `u64` LSN, `u64` the last segment number used, `u64` body length.
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
//! * corruption refuses to open, naming the file and the offset: a log
//!   never silently drops records that were acknowledged after the damage;
//! * the newest snapshot must be whole (else corruption: falling back to an
//!   older one could miss records whose segments are gone), and the records
//!   after it must follow on from its LSN; records it covers are skipped.

use crate::record::{self, Decoded, RECORD_HEADER};
use crate::storage::{Storage, SECTOR};
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

const SNAP_MAGIC: &[u8; 8] = b"FILASNP\0";
const SNAP_HEADER: usize = 40;
const SNAP_TMP: &str = "snap.tmp";

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

fn snapshot_bytes(lsn: u64, last_segment: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(SNAP_HEADER + body.len());
    out.extend_from_slice(SNAP_MAGIC);
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&lsn.to_be_bytes());
    out.extend_from_slice(&last_segment.to_be_bytes());
    out.extend_from_slice(&(body.len() as u64).to_be_bytes());
    out.extend_from_slice(body);
    let crc = crc32c::crc32c(&out[16..]);
    out[12..16].copy_from_slice(&crc.to_be_bytes());
    out
}

/// Checks a snapshot file named for `lsn`; answers its last segment number
/// and body.
fn read_snapshot(data: &[u8], lsn: u64) -> Result<(u64, &[u8]), &'static str> {
    if data.len() < SNAP_HEADER || &data[..8] != SNAP_MAGIC {
        return Err("not a whole fila snapshot");
    }
    if u32::from_be_bytes([data[8], data[9], data[10], data[11]]) != VERSION {
        return Err("unknown snapshot version");
    }
    if u32::from_be_bytes([data[12], data[13], data[14], data[15]]) != crc32c::crc32c(&data[16..]) {
        return Err("snapshot checksum does not match");
    }
    let u = |i: usize| {
        let mut n = [0u8; 8];
        n.copy_from_slice(&data[i..i + 8]);
        u64::from_be_bytes(n)
    };
    if u(16) != lsn {
        return Err("snapshot header names another LSN");
    }
    if u(32) != (data.len() - SNAP_HEADER) as u64 {
        return Err("snapshot body length does not match");
    }
    Ok((u(24), &data[SNAP_HEADER..]))
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
    if u32::from_be_bytes([h[8], h[9], h[10], h[11]]) != VERSION {
        return Err("unknown segment version");
    }
    if u32::from_be_bytes([h[12], h[13], h[14], h[15]]) != crc32c::crc32c(&h[16..32]) {
        return Err("segment header checksum does not match");
    }
    let mut n = [0u8; 8];
    n.copy_from_slice(&h[16..24]);
    if u64::from_be_bytes(n) != number {
        return Err("segment header names another segment number");
    }
    n.copy_from_slice(&h[24..32]);
    Ok(u64::from_be_bytes(n))
}

struct Current {
    name: String,
    number: u64,
    len: u64,
}

/// An open log.
pub struct Log<S: Storage> {
    storage: S,
    options: LogOptions,
    current: Option<Current>,
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
    /// Opens the log in `storage`, recovering what it holds: the records in
    /// LSN order. A torn tail is cut off (durably); corruption is an error.
    pub fn open(mut storage: S, options: LogOptions) -> Result<(Log<S>, Recovered), Error> {
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
        let mut snapshot = None;
        let mut last_number = 0;
        let mut snapshots: Vec<(u64, String)> = names
            .iter()
            .filter_map(|n| snapshot_lsn(n).map(|l| (l, n.clone())))
            .collect();
        snapshots.sort();
        if let Some((lsn, name)) = snapshots.pop() {
            let mut data = storage.read(&name).map_err(io(&name, &storage))?;
            let (number, _) = read_snapshot(&data, lsn).map_err(|why| Error::Corrupt {
                file: storage.describe(&name),
                offset: 0,
                why,
            })?;
            last_number = number;
            // The body is the file after its header: moved down in place,
            // not copied into a second allocation of the snapshot's size.
            data.drain(..SNAP_HEADER);
            snapshot = Some(Snapshot { lsn, body: data });
            for (_, older) in snapshots {
                storage.remove(&older).map_err(io(&older, &storage))?;
            }
        }
        let covered = snapshot.as_ref().map_or(0, |s| s.lsn);
        let mut segments: Vec<(u64, String)> = names
            .into_iter()
            .filter_map(|n| segment_number(&n).map(|k| (k, n)))
            .collect();
        segments.sort();
        if let Some((n, _)) = segments.last() {
            last_number = last_number.max(*n);
        }
        let mut records = Vec::new();
        let mut expect_lsn: Option<u64> = None;
        let mut kept_segments = Vec::new();
        let mut current = None;
        let mut torn_tail = None;
        // Headers first: which segments hold records after the snapshot.
        let mut heads: Vec<(u64, String, Vec<u8>, u64)> = Vec::new();
        let last = segments.len().saturating_sub(1);
        for (i, (number, name)) in segments.iter().enumerate() {
            let data = storage.read(name).map_err(io(name, &storage))?;
            let header_torn = data.len() < SEGMENT_HEADER
                || (data.len() == SEGMENT_HEADER
                    && read_header(&data[..SEGMENT_HEADER], *number).is_err());
            if header_torn && i == last {
                // Created, header not yet durable: start it again.
                storage.remove(name).map_err(io(name, &storage))?;
                storage.sync_dir().map_err(io(".", &storage))?;
                break;
            }
            let first =
                read_header(&data[..SEGMENT_HEADER.min(data.len())], *number).map_err(|why| {
                    Error::Corrupt {
                        file: storage.describe(name),
                        offset: 0,
                        why: if header_torn {
                            "segment shorter than its header"
                        } else {
                            why
                        },
                    }
                })?;
            heads.push((*number, name.clone(), data, first));
        }
        // Segments wholly covered by the snapshot are stale: a delete that
        // did not become durable before a crash can bring any of them back,
        // in any combination. They are dropped unread.
        let start = heads.iter().rposition(|h| h.3 <= covered + 1).unwrap_or(0);
        for (_, name, _, _) in heads.drain(..start) {
            storage.remove(&name).map_err(io(&name, &storage))?;
        }
        if start > 0 {
            storage.sync_dir().map_err(io(".", &storage))?;
        }
        let last = heads.len().saturating_sub(1);
        for (i, (number, name, data, first)) in heads.iter().enumerate() {
            let (number, first) = (number, *first);
            let newest = i == last;
            let corrupt = |offset: usize, why: &'static str| Error::Corrupt {
                file: storage.describe(name),
                offset: offset as u64,
                why,
            };
            match expect_lsn {
                Some(e) if first != e => {
                    return Err(corrupt(
                        0,
                        "segment does not start where the one before ended",
                    ));
                }
                None if first > covered + 1 => {
                    return Err(corrupt(
                        0,
                        "records between the snapshot and this segment are missing",
                    ));
                }
                _ => {}
            }
            kept_segments.push((*number, first));
            let mut next = first;
            let mut at = SEGMENT_HEADER;
            let mut torn: Option<(usize, &'static str)> = None;
            while at < data.len() {
                match record::decode(&data[at..]) {
                    Decoded::Record(r, used) => {
                        if r.lsn != next {
                            return Err(corrupt(at, "record out of sequence"));
                        }
                        if r.lsn > covered {
                            records.push(OwnedRecord {
                                lsn: r.lsn,
                                kind: r.kind,
                                body: r.body.to_vec(),
                            });
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
                if !newest || later_record_after(data, offset, next) {
                    return Err(corrupt(offset, why));
                }
                let why =
                    torn_write(&data[offset..], offset).map_err(|why| corrupt(offset, why))?;
                torn_tail = Some(TornTail {
                    file: storage.describe(name),
                    offset: offset as u64,
                    bytes: (data.len() - offset) as u64,
                    why,
                });
                storage
                    .truncate(name, offset as u64)
                    .map_err(io(name, &storage))?;
            }
            expect_lsn = Some(next);
            current = Some(Current {
                name: name.clone(),
                number: *number,
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
            });
        }
        Ok((
            Log {
                storage,
                options,
                current,
                next_lsn,
                pending: Vec::new(),
                pending_records: Vec::new(),
                durable_lsn: next_lsn - 1,
                segments: kept_segments,
                last_number,
                failed: false,
            },
            Recovered {
                snapshot,
                records,
                torn: torn_tail,
            },
        ))
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

    /// Writes every pending record and syncs: one write and one sync per
    /// segment touched. Answers the durable LSN. After a failed write or
    /// sync the log accepts nothing more (what reached the disk is unknown:
    /// the caller stops and recovers from the disk).
    pub fn commit(&mut self) -> Result<u64, Error> {
        if self.failed {
            return Err(Error::Failed);
        }
        if self.pending_records.is_empty() {
            return Ok(self.durable_lsn);
        }
        let result = self.write_pending();
        if result.is_err() {
            self.failed = true;
        }
        result
    }

    fn write_pending(&mut self) -> Result<u64, Error> {
        let pending = std::mem::take(&mut self.pending);
        let records = std::mem::take(&mut self.pending_records);
        let mut i = 0;
        while i < records.len() {
            // As many records as fit the current segment; a record that
            // does not fit a segment that has records starts a new one (a
            // record larger than a segment gets one of its own).
            let first_len =
                (records.get(i + 1).map_or(pending.len(), |r| r.1) - records[i].1) as u64;
            let room = match &self.current {
                Some(c)
                    if c.len + first_len <= self.options.segment_bytes
                        || c.len == SEGMENT_HEADER as u64 =>
                {
                    self.options.segment_bytes.saturating_sub(c.len)
                }
                _ => {
                    self.new_segment(records[i].0)?;
                    self.options.segment_bytes - SEGMENT_HEADER as u64
                }
            };
            let start = records[i].1;
            let mut j = i;
            let mut end = start;
            while j < records.len() {
                let rec_end = records.get(j + 1).map_or(pending.len(), |r| r.1);
                if j > i && (rec_end - start) as u64 > room {
                    break;
                }
                end = rec_end;
                j += 1;
            }
            let current = self.current.as_mut().expect("a segment is open");
            let name = current.name.clone();
            self.storage
                .append(&name, &pending[start..end])
                .map_err(|source| Error::Io {
                    file: self.storage.describe(&name),
                    source,
                })?;
            current.len += (end - start) as u64;
            self.storage
                .sync(&name)
                .map_err(|source| Error::SyncFailed {
                    file: self.storage.describe(&name),
                    source,
                })?;
            i = j;
        }
        self.durable_lsn = self.next_lsn - 1;
        Ok(self.durable_lsn)
    }

    /// Records the user's state as of `lsn` (at most the durable LSN) and
    /// deletes what it makes unneeded: older snapshots, and segments whose
    /// records are all at or below `lsn`. Written under a temporary name,
    /// synced, renamed, made durable with a directory sync.
    ///
    /// # Panics
    /// When `lsn` is past the durable LSN: a snapshot of records that are
    /// not durable would outlive them.
    pub fn snapshot(&mut self, lsn: u64, body: &[u8]) -> Result<(), Error> {
        if self.failed {
            return Err(Error::Failed);
        }
        assert!(
            lsn <= self.durable_lsn,
            "a snapshot at {lsn} is ahead of the durable LSN {}",
            self.durable_lsn
        );
        let result = self.write_snapshot(lsn, body);
        if result.is_err() {
            self.failed = true;
        }
        result
    }

    fn write_snapshot(&mut self, lsn: u64, body: &[u8]) -> Result<(), Error> {
        let name = snapshot_name(lsn);
        let io = |storage: &S, file: &str| {
            let file = storage.describe(file);
            move |source| Error::Io { file, source }
        };
        let synced = |storage: &S, file: &str| {
            let file = storage.describe(file);
            move |source| Error::SyncFailed { file, source }
        };
        let _ = self.storage.remove(SNAP_TMP);
        self.storage
            .create(SNAP_TMP)
            .map_err(io(&self.storage, SNAP_TMP))?;
        self.storage
            .append(SNAP_TMP, &snapshot_bytes(lsn, self.last_number, body))
            .map_err(io(&self.storage, SNAP_TMP))?;
        self.storage
            .sync(SNAP_TMP)
            .map_err(synced(&self.storage, SNAP_TMP))?;
        self.storage
            .rename(SNAP_TMP, &name)
            .map_err(io(&self.storage, &name))?;
        self.storage
            .sync_dir()
            .map_err(synced(&self.storage, "."))?;
        // Now nothing older is needed.
        let names = self.storage.list().map_err(io(&self.storage, "."))?;
        for old in names {
            if snapshot_lsn(&old).is_some_and(|l| l < lsn) {
                self.storage.remove(&old).map_err(io(&self.storage, &old))?;
            }
        }
        let current = self.current.as_ref().map(|c| c.number);
        let mut keep = Vec::new();
        for (k, &(number, first)) in self.segments.iter().enumerate() {
            let covered = self
                .segments
                .get(k + 1)
                .is_some_and(|&(_, next_first)| next_first <= lsn + 1);
            if covered && Some(number) != current {
                let seg = segment_name(number);
                self.storage.remove(&seg).map_err(io(&self.storage, &seg))?;
            } else {
                keep.push((number, first));
            }
        }
        self.segments = keep;
        self.storage.sync_dir().map_err(synced(&self.storage, "."))
    }

    fn new_segment(&mut self, first_lsn: u64) -> Result<(), Error> {
        let number = self.last_number + 1;
        let name = segment_name(number);
        let describe = self.storage.describe(&name);
        let io = |source| Error::Io {
            file: describe.clone(),
            source,
        };
        self.storage.create(&name).map_err(io)?;
        self.storage
            .append(&name, &segment_header(number, first_lsn))
            .map_err(io)?;
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
        self.last_number = number;
        self.segments.push((number, first_lsn));
        Ok(())
    }

    /// The storage, for tests that crash it.
    pub fn into_storage(self) -> S {
        self.storage
    }
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
