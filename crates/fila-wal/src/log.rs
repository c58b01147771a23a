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
//! Recovery rules:
//! * records must be whole, checksummed and consecutive from one segment to
//!   the next;
//! * in the newest segment, what follows the last good record is a torn
//!   write and is cut off — unless a good record of a later LSN comes after
//!   it, which is corruption;
//! * anything wrong in an older segment is corruption;
//! * corruption refuses to open, naming the file and the offset: a log
//!   never silently drops records that were acknowledged after the damage.

use crate::record::{self, Decoded, RECORD_HEADER};
use crate::storage::Storage;
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
    let hex = name.strip_prefix("wal-")?.strip_suffix(".seg")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
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
    pub fn open(mut storage: S, options: LogOptions) -> Result<(Log<S>, Vec<OwnedRecord>), Error> {
        let options = LogOptions {
            segment_bytes: options.segment_bytes.max(2 * SEGMENT_HEADER as u64),
        };
        let io = |name: &str, storage: &S| {
            let file = storage.describe(name);
            move |source| Error::Io { file, source }
        };
        let mut segments: Vec<(u64, String)> = storage
            .list()
            .map_err(io(".", &storage))?
            .into_iter()
            .filter_map(|n| segment_number(&n).map(|k| (k, n)))
            .collect();
        segments.sort();
        let mut records = Vec::new();
        let mut expect_lsn: Option<u64> = None;
        let mut current = None;
        let last = segments.len().saturating_sub(1);
        for (i, (number, name)) in segments.iter().enumerate() {
            let newest = i == last;
            let data = storage.read(name).map_err(io(name, &storage))?;
            let corrupt = |offset: usize, why: &'static str| Error::Corrupt {
                file: storage.describe(name),
                offset: offset as u64,
                why,
            };
            let header_torn = data.len() < SEGMENT_HEADER
                || (data.len() == SEGMENT_HEADER
                    && read_header(&data[..SEGMENT_HEADER], *number).is_err());
            if header_torn {
                if newest {
                    // Created, header not yet durable: start it again.
                    storage.remove(name).map_err(io(name, &storage))?;
                    storage.sync_dir().map_err(io(".", &storage))?;
                    break;
                }
                return Err(corrupt(0, "segment shorter than its header"));
            }
            let first = read_header(&data[..SEGMENT_HEADER], *number).map_err(|w| corrupt(0, w))?;
            if let Some(e) = expect_lsn {
                if first != e {
                    return Err(corrupt(
                        0,
                        "segment does not start where the one before ended",
                    ));
                }
            }
            let mut next = first;
            let mut at = SEGMENT_HEADER;
            let mut torn: Option<(usize, &'static str)> = None;
            while at < data.len() {
                match record::decode(&data[at..]) {
                    Decoded::Record(r, used) => {
                        if r.lsn != next {
                            return Err(corrupt(at, "record out of sequence"));
                        }
                        records.push(OwnedRecord {
                            lsn: r.lsn,
                            kind: r.kind,
                            body: r.body.to_vec(),
                        });
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
                    return Err(corrupt(offset, why));
                }
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
        let next_lsn = expect_lsn.unwrap_or(1);
        Ok((
            Log {
                storage,
                options,
                current,
                next_lsn,
                pending: Vec::new(),
                pending_records: Vec::new(),
                durable_lsn: next_lsn - 1,
                failed: false,
            },
            records,
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

    fn new_segment(&mut self, first_lsn: u64) -> Result<(), Error> {
        let number = self.current.as_ref().map_or(1, |c| c.number + 1);
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
        Ok(())
    }

    /// The storage, for tests that crash it.
    pub fn into_storage(self) -> S {
        self.storage
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
