//! Recovery: opening a log reads its snapshot and segments back one at a
//! time, cuts a torn tail and refuses corruption (the rules are in the
//! log's module docs).

use super::snapshot::{
    check_snapshot, snapshot_lsn, Snapshot, SnapshotFile, SnapshotReader, SNAP_TMP,
};
use super::{
    read_header, segment_number, Current, Log, LogOptions, Opened, OwnedRecord, Recovered,
    TornTail, SEGMENT_HEADER,
};
use crate::record::{self, Decoded, RECORD_HEADER};
use crate::storage::{Storage, SECTOR};
use crate::Error;

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
            // The spare, made ahead (empty, or filled with zeros wholly or
            // in part: a header is written, and synced, before any record):
            // kept for the next segment.
            let zeros = n == SEGMENT_HEADER && h.iter().all(|b| *b == 0);
            if i == last && (len == 0 || zeros) {
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
            // Zeros from the last record to the end: room the segment was
            // filled with ahead ([`Storage::zero_fill`]) and never used —
            // in the newest segment, when the file has the segment's full
            // length; in an older one, always (the next segment starting
            // at the LSN after its last record shows nothing was lost).
            let room = torn.is_some_and(|(offset, _)| {
                (!newest || f.len == options.segment_bytes)
                    && data[offset..].iter().all(|b| *b == 0)
            });
            if room {
                let offset = torn.take().map_or(data.len(), |t| t.0);
                expect_lsn = Some(next);
                current = Some(Current::new(f.name.clone(), f.number, offset as u64));
                continue;
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
            current = Some(Current::new(
                f.name.clone(),
                f.number,
                torn.map_or(data.len(), |t| t.0) as u64,
            ));
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
        // A spare kept empty is filled now.
        let spare_zeroing = spare.and_then(|n| {
            storage
                .zero_fill(&super::segment_name(n), options.segment_bytes)
                .ok()
                .flatten()
        });
        Ok((
            Log {
                storage,
                options,
                current,
                spare,
                spare_zeroing,
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
                snapshot_lsn: covered,
            },
            opened,
        ))
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
            // The record's last sector, partial: zeros from a sector
            // boundary to the end of the record (the record's own last
            // bytes before that boundary may be zeros too), and nothing
            // written after it (the file's end, or zeros it was filled
            // with ahead).
            let after_is_zeros = tail[end..].iter().all(|b| *b == 0);
            if after_is_zeros && tail[end - 1] == 0 && end > 4 {
                let zeros = tail[..end].iter().rev().take_while(|b| **b == 0).count();
                let boundary = (offset + end - zeros).div_ceil(SECTOR) * SECTOR;
                if boundary < offset + end {
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
