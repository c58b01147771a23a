//! The log against a simulated disk that crashes, tears, flips bits and
//! fails syncs, and against the real file system.

use fila_wal::record::{self, Decoded};
use fila_wal::{segment_name, Error, FsStorage, Log, LogOptions, SimDisk, Storage, SECTOR};
use proptest::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn records_round_trip_and_any_damage_is_seen(
        recs in proptest::collection::vec((any::<u64>(), any::<u8>(), proptest::collection::vec(any::<u8>(), 0..300)), 1..8),
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let mut buf = Vec::new();
        for (lsn, kind, body) in &recs {
            record::encode(*lsn, *kind, body, &mut buf);
        }
        let mut at = 0;
        for (lsn, kind, body) in &recs {
            match record::decode(&buf[at..]) {
                Decoded::Record(r, used) => {
                    prop_assert_eq!((r.lsn, r.kind, r.body), (*lsn, *kind, &body[..]));
                    at += used;
                }
                other => prop_assert!(false, "{:?}", other),
            }
        }
        prop_assert_eq!(at, buf.len());
        // Every cut inside the first record is incomplete.
        let first = record::encoded_len(recs[0].2.len());
        let c = cut.index(first);
        prop_assert_eq!(record::decode(&buf[..c]), Decoded::Incomplete);
        // A flipped bit in the first record is never read as a good record
        // with the same length.
        let f = flip.index(first);
        let mut damaged = buf.clone();
        damaged[f] ^= 1 << bit;
        if let Decoded::Record(_, used) = record::decode(&damaged) {
            prop_assert!(used != first, "a damaged record decoded as good");
        }
    }
}

/// Appends `n` records of varied sizes; answers their bodies.
fn body(lsn: u64) -> Vec<u8> {
    let len = (lsn * 37 % 700) as usize;
    (0..len).map(|i| (lsn as usize + i) as u8).collect()
}

fn opts() -> LogOptions {
    LogOptions {
        segment_bytes: 4096,
    }
}

#[test]
fn after_any_crash_every_committed_record_is_back_in_order() {
    // WAL_SEED=n runs only seed n (to study a failure).
    let only: Option<u64> = std::env::var("WAL_SEED").ok().and_then(|s| s.parse().ok());
    for seed in 1..=2_000u64 {
        if only.is_some_and(|o| o != seed) {
            continue;
        }
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut disk = SimDisk::new(seed);
        let mut durable = 0u64;
        let mut appended = 0u64;
        // A few lives: append, commit sometimes, snapshot sometimes, crash,
        // recover. A snapshot's body is the LSN it covers.
        for _life in 0..4 {
            let (mut log, recovered) =
                Log::open(disk, opts()).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            let covered = recovered.snapshot.as_ref().map_or(0, |s| {
                let n = u64::from_be_bytes(s.body[..8].try_into().unwrap());
                assert_eq!(n, s.lsn, "seed {seed}: the snapshot's body");
                n
            });
            let last = covered + recovered.records.len() as u64;
            assert!(
                last >= durable,
                "seed {seed}: up to {last} recovered, {durable} were committed"
            );
            assert!(last <= appended, "seed {seed}: more than was appended");
            for (i, r) in recovered.records.iter().enumerate() {
                assert_eq!(r.lsn, covered + i as u64 + 1, "seed {seed}");
                assert_eq!(r.body, body(r.lsn), "seed {seed}: record {} damaged", r.lsn);
                assert_eq!(r.kind, (r.lsn % 7) as u8);
            }
            // What was recovered is now the history (an uncommitted record
            // may have made it to disk; then it is kept).
            appended = last;
            durable = last;
            let mut snapshot = covered;
            let mut disk_now = log.into_storage();
            if next() % 2 == 0 {
                // The process dies in the middle of some operation.
                disk_now.die_after((next() % 60) as u32);
            }
            log = Log::open(disk_now, opts())
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"))
                .0;
            for _ in 0..(next() % 40) {
                let lsn = log
                    .append((log.next_lsn() % 7) as u8, &body(log.next_lsn()))
                    .unwrap_or(appended);
                appended = appended.max(lsn);
                let step = match next() % 9 {
                    0 | 1 => log.commit().map(|d| durable = d),
                    2 => log.commit().and_then(|d| {
                        durable = d;
                        snapshot = d;
                        log.snapshot(d, &d.to_be_bytes())
                    }),
                    3 => {
                        // A suffix cut (what a Raft follower does), to an
                        // LSN at or after the snapshot: the records after
                        // it never come back, and the next ones take their
                        // LSNs (with bodies of those LSNs).
                        let to = snapshot + next() % (log.next_lsn() - snapshot);
                        let cut = log.truncate_after(to);
                        // Dead part way, the disk holds between `to` and
                        // what it held.
                        durable = durable.min(to);
                        appended = appended.max(to);
                        cut
                    }
                    _ => Ok(()),
                };
                if step.is_err() {
                    break; // dead: what it had reached the disk is all
                }
            }
            disk = log.into_storage();
            disk.crash();
        }
    }
}

fn committed_log(records: u64) -> SimDisk {
    committed_log_on(SimDisk::new(3), records)
}

fn committed_log_on(disk: SimDisk, records: u64) -> SimDisk {
    let (mut log, _) = Log::open(disk, opts()).unwrap();
    for lsn in 1..=records {
        log.append((lsn % 7) as u8, &body(lsn)).unwrap();
        if lsn % 5 == 0 {
            log.commit().unwrap();
        }
    }
    log.commit().unwrap();
    log.into_storage()
}

#[test]
fn a_damaged_record_in_an_older_segment_refuses_to_open_naming_file_and_offset() {
    let mut disk = committed_log(60);
    let segments = disk.list().unwrap();
    assert!(segments.len() >= 3, "{segments:?}");
    disk.flip_bit(&segment_name(1), 100, 3);
    match Log::open(disk, opts()) {
        Err(Error::Corrupt { file, offset, .. }) => {
            assert_eq!(file, format!("sim:{}", segment_name(1)));
            assert!(offset <= 100, "{offset}");
        }
        other => panic!("expected corruption, got {other:?}"),
    }
}

#[test]
fn damage_in_the_newest_segment_with_good_records_after_it_is_corruption() {
    let mut disk = committed_log(60);
    let newest = disk.list().unwrap().pop().unwrap();
    assert!(disk.len(&newest).unwrap() > 1500);
    disk.flip_bit(&newest, 60, 0);
    assert!(matches!(
        Log::open(disk, opts()),
        Err(Error::Corrupt { .. })
    ));
}

#[test]
fn a_torn_last_record_is_cut_and_the_log_goes_on() {
    let mut disk = committed_log(60);
    let newest = disk.list().unwrap().pop().unwrap();
    let len = disk.len(&newest).unwrap();
    disk.truncate(&newest, len as u64 - 3).unwrap();
    let (mut log, recovered) = Log::open(disk, opts()).unwrap();
    assert_eq!(recovered.records.len(), 59);
    let torn = recovered.torn.expect("the torn tail is reported");
    assert_eq!(torn.file, format!("sim:{newest}"));
    assert_eq!(torn.why, "a record cut short");
    assert_eq!(log.append(1, b"after").unwrap(), 60);
    log.commit().unwrap();
    let (_, recovered) = Log::open(log.into_storage(), opts()).unwrap();
    assert_eq!(recovered.records.len(), 60);
    assert_eq!(recovered.records[59].body, b"after");
}

#[test]
fn a_failed_sync_fails_the_commit_and_the_log_takes_nothing_more() {
    let (mut log, _) = Log::open(SimDisk::new(5), opts()).unwrap();
    log.append(1, b"a").unwrap();
    log.commit().unwrap();
    let mut disk = log.into_storage();
    disk.fail_syncs(1);
    let (mut log, _) = Log::open(disk, opts()).unwrap();
    log.append(1, b"b").unwrap();
    assert!(matches!(log.commit(), Err(Error::SyncFailed { .. })));
    assert!(matches!(log.append(1, b"c"), Err(Error::Failed)));
    assert!(matches!(log.commit(), Err(Error::Failed)));
}

#[test]
fn the_file_system_keeps_the_log_across_opens() {
    let dir = std::env::temp_dir().join(format!("fila-wal-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    {
        let (mut log, recovered) = Log::open(FsStorage::new(&dir).unwrap(), opts()).unwrap();
        assert!(recovered.records.is_empty());
        for lsn in 1..=30 {
            log.append((lsn % 7) as u8, &body(lsn)).unwrap();
        }
        assert_eq!(log.commit().unwrap(), 30);
    }
    let (mut log, recovered) = Log::open(FsStorage::new(&dir).unwrap(), opts()).unwrap();
    assert_eq!(recovered.records.len(), 30);
    assert_eq!(recovered.records[29].body, body(30));
    assert_eq!(log.next_lsn(), 31);
    let files = std::fs::read_dir(&dir).unwrap().count();
    assert!(files >= 3, "several segments");
    // A snapshot at 30 lets every full segment go.
    log.snapshot(30, b"thirty").unwrap();
    assert!(std::fs::read_dir(&dir).unwrap().count() < files);
    drop(log);
    let (_, recovered) = Log::open(FsStorage::new(&dir).unwrap(), opts()).unwrap();
    assert_eq!(recovered.snapshot.unwrap().body, b"thirty");
    assert!(recovered.records.is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_snapshot_deletes_the_segments_it_covers_and_keeps_the_log_small() {
    let (mut log, _) = Log::open(SimDisk::new(9), opts()).unwrap();
    let mut max_files = 0;
    for round in 0..50u64 {
        for _ in 0..20 {
            let lsn = log.next_lsn();
            log.append((lsn % 7) as u8, &body(lsn)).unwrap();
        }
        let durable = log.commit().unwrap();
        if round % 5 == 4 {
            log.snapshot(durable, &durable.to_be_bytes()).unwrap();
        }
        let disk = log.into_storage();
        max_files = max_files.max(disk.list().unwrap().len());
        log = Log::open(disk, opts()).unwrap().0;
    }
    // 1 000 records of up to 700 bytes in 4 KiB segments would be about
    // 120 segments; snapshots every 100 records keep a handful.
    assert!(max_files <= 40, "{max_files} files at most");
    let (_, recovered) = Log::open(log.into_storage(), opts()).unwrap();
    let snap = recovered.snapshot.expect("a snapshot");
    assert_eq!(snap.lsn, 1_000);
    assert!(recovered.records.is_empty());
}

#[test]
fn a_damaged_snapshot_refuses_to_open() {
    let (mut log, _) = Log::open(SimDisk::new(11), opts()).unwrap();
    log.append(1, b"a").unwrap();
    log.commit().unwrap();
    log.snapshot(1, b"state").unwrap();
    let mut disk = log.into_storage();
    disk.flip_bit(&fila_wal::snapshot_name(1), 42, 1);
    assert!(matches!(
        Log::open(disk, opts()),
        Err(Error::Corrupt { .. })
    ));
}

#[test]
fn an_older_segment_shorter_than_its_header_is_corruption_not_a_panic() {
    // Found by the wal_recover fuzz target.
    let mut disk = committed_log(60);
    disk.truncate(&segment_name(1), 10).unwrap();
    assert!(matches!(
        Log::open(disk, opts()),
        Err(Error::Corrupt { .. })
    ));
}

/// A bit flipped inside the last record of the newest segment: its whole
/// length is there and its checksum fails, so it was damaged after it was
/// written (maybe acknowledged), not torn by a crash: refused, never cut.
#[test]
fn a_bit_flipped_in_the_last_record_is_corruption_not_a_torn_write() {
    let size = record::encoded_len(body(60).len());
    // In the checksum, the LSN, the kind, the body, the last byte.
    for at in [5, 10, 16, 40, size - 1] {
        let mut disk = committed_log(60);
        let newest = disk.list().unwrap().pop().unwrap();
        let last = disk.len(&newest).unwrap() - size;
        disk.flip_bit(&newest, last + at, 2);
        match Log::open(disk, opts()) {
            Err(Error::Corrupt { file, offset, why }) => {
                assert_eq!(file, format!("sim:{newest}"));
                assert_eq!(offset, last as u64, "{why}");
            }
            other => panic!("byte {at} of the record: expected corruption, got {other:?}"),
        }
    }
}

/// A large last record whose later sectors never reached the disk (read
/// back as zeros, as a file system gives for room it allocated and never
/// wrote): a torn write, cut.
#[test]
fn a_last_record_with_sectors_of_zeros_is_a_torn_write() {
    let (mut log, _) = Log::open(SimDisk::new(3), opts()).unwrap();
    log.append(1, b"first").unwrap();
    log.append(1, &vec![0xAB; 3 * SECTOR]).unwrap();
    log.commit().unwrap();
    let mut disk = log.into_storage();
    let newest = disk.list().unwrap().pop().unwrap();
    let len = disk.len(&newest).unwrap();
    // Zeros from the last sector boundary inside the record to its end.
    let boundary = (len - SECTOR) / SECTOR * SECTOR;
    disk.truncate(&newest, boundary as u64).unwrap();
    disk.append(&newest, &vec![0; len - boundary]).unwrap();
    let (_, recovered) = Log::open(disk, opts()).unwrap();
    assert_eq!(recovered.records.len(), 1);
    let torn = recovered.torn.expect("reported");
    assert_eq!(torn.why, "a record with a sector never written");
}

/// A snapshot in the first format (checksum in the header, no trailer)
/// still reads back.
#[test]
fn a_version_1_snapshot_still_reads() {
    let (mut log, _) = Log::open(SimDisk::new(12), opts()).unwrap();
    log.append(1, b"a").unwrap();
    log.append(1, b"b").unwrap();
    log.commit().unwrap();
    let mut disk = log.into_storage();
    let body = b"state as of 1";
    let mut v1 = Vec::new();
    v1.extend_from_slice(b"FILASNP\0");
    v1.extend_from_slice(&1u32.to_be_bytes());
    v1.extend_from_slice(&[0; 4]);
    v1.extend_from_slice(&1u64.to_be_bytes());
    v1.extend_from_slice(&1u64.to_be_bytes());
    v1.extend_from_slice(&(body.len() as u64).to_be_bytes());
    v1.extend_from_slice(body);
    let crc = crc32c_of(&v1[16..]);
    v1[12..16].copy_from_slice(&crc.to_be_bytes());
    let name = fila_wal::snapshot_name(1);
    disk.create(&name).unwrap();
    disk.append(&name, &v1).unwrap();
    let (_, recovered) = Log::open(disk, opts()).unwrap();
    assert_eq!(recovered.snapshot.unwrap().body, body);
    assert_eq!(recovered.records.len(), 1, "the record after it");
}

/// CRC32C (Castagnoli), bit by bit: the test's own, to build a file in
/// the old format.
fn crc32c_of(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// On a full disk a commit fails `NoRoom`, leaves nothing half written and
/// keeps its records pending: the log is still good, and once there is
/// room the same records (and later ones) are committed; nothing is lost
/// or doubled across a reopen.
#[test]
fn a_full_disk_keeps_records_pending_until_there_is_room() {
    let (mut log, _) = Log::open(SimDisk::new(13), opts()).unwrap();
    for lsn in 1..=10 {
        log.append(1, &body(lsn)).unwrap();
    }
    log.commit().unwrap();
    let mut disk = log.into_storage();
    let used = disk.used();
    disk.set_capacity(Some(used));
    let (mut log, recovered) = Log::open(disk, opts()).unwrap();
    assert_eq!(recovered.records.len(), 10);
    let mut appended = 10;
    let mut refused = 0;
    for round in 0..40u64 {
        for _ in 0..5 {
            appended += 1;
            log.append(1, &body(appended)).unwrap();
        }
        match log.commit() {
            Ok(_) => {}
            Err(e) if e.is_retryable() => refused += 1,
            Err(e) => panic!("round {round}: {e}"),
        }
    }
    assert!(refused > 0, "the disk never filled");
    // Room again: everything pending is committed.
    let mut disk = log.into_storage();
    disk.set_capacity(None);
    let (mut log, recovered) = Log::open(disk, opts()).unwrap();
    let kept = recovered.records.len() as u64;
    assert!(recovered
        .records
        .windows(2)
        .all(|w| w[1].lsn == w[0].lsn + 1));
    for (i, r) in recovered.records.iter().enumerate() {
        assert_eq!(r.body, body(i as u64 + 1), "record {}", i + 1);
    }
    // What a reopen lost of the pending batch was never committed: the log
    // goes on after what it kept.
    assert_eq!(log.next_lsn(), kept + 1);
    log.append(1, b"after").unwrap();
    log.commit().unwrap();

    // Pending records survive a full disk within one life too.
    let mut disk = log.into_storage();
    let used = disk.used();
    disk.set_capacity(Some(used));
    let (mut log, _) = Log::open(disk, opts()).unwrap();
    let mut sent = Vec::new();
    let mut failed = false;
    for i in 0..200u64 {
        let b = format!("pending {i}").into_bytes();
        log.append(2, &b).unwrap();
        sent.push(b);
        if log.commit().is_err() {
            failed = true;
            break;
        }
    }
    assert!(failed, "the disk never filled");
    let mut disk = log.into_storage();
    disk.set_capacity(None);
    let (_, recovered) = Log::open(disk, opts()).unwrap();
    let got: Vec<Vec<u8>> = recovered
        .records
        .iter()
        .filter(|r| r.kind == 2)
        .map(|r| r.body.clone())
        .collect();
    assert_eq!(
        got,
        sent[..got.len()],
        "a prefix, in order, nothing doubled"
    );
}

/// With room again in the same life, the pending records go out.
#[test]
fn a_commit_refused_for_room_goes_through_once_there_is_room() {
    let mut disk = committed_log(5);
    let used = disk.used();
    disk.set_capacity(Some(used + 64));
    let (mut log, _) = Log::open(disk, opts()).unwrap();
    // Fill what is left, then some.
    let mut n = 0;
    let refused = loop {
        n += 1;
        log.append(3, &[7u8; 500]).unwrap();
        match log.commit() {
            Ok(_) => assert!(n < 100, "the disk never filled"),
            Err(e) => break e,
        }
    };
    assert!(refused.is_retryable(), "{refused}");
    assert!(log.append(3, b"still taken").is_ok());
    assert!(log.commit().unwrap_err().is_retryable());
    // The disk grows: the same log commits everything pending.
    let durable = {
        let mut disk = log.into_storage();
        disk.set_capacity(None);
        let (mut log, recovered) = Log::open(disk, opts()).unwrap();
        let before = recovered.records.len();
        log.append(3, b"again").unwrap();
        let lsn = log.commit().unwrap();
        assert_eq!(lsn, before as u64 + 1);
        lsn
    };
    assert!(durable >= 5);
}

/// The next segment is made ahead, once the current one is half full: a
/// directory made read-only (or a full disk) shows then, while records
/// still go into the current segment, not when a segment is due.
#[test]
fn the_next_segment_is_made_ahead_and_a_read_only_directory_shows_early() {
    let (mut log, _) = Log::open(SimDisk::new(14), opts()).unwrap();
    log.append(1, b"first").unwrap();
    log.commit().unwrap();
    assert!(log.room_problem().is_none());
    let mut disk = log.into_storage();
    disk.set_read_only(true);
    // At start: refused, saying why.
    let e = Log::open(disk.clone(), opts()).unwrap_err().to_string();
    assert!(e.contains("new files cannot be made there"), "{e}");
    disk.set_read_only(false);
    // Made read-only while running, with the current segment far from
    // full: the spare cannot be made and that shows at once.
    let closed = Arc::new(AtomicBool::new(false));
    let storage = Closable {
        disk,
        closed: closed.clone(),
    };
    let (mut log, _) = Log::open(storage, opts()).unwrap();
    closed.store(true, Ordering::Release);
    let mut i = 0;
    while log.room_problem().is_none() {
        i += 1;
        assert!(
            i < 100,
            "the current segment filled before the spare was tried"
        );
        log.append(1, &[1u8; 100]).unwrap();
        log.commit().unwrap();
    }
    assert!(
        log.room_problem().unwrap().contains("read-only"),
        "{:?}",
        log.room_problem()
    );
    // Still taking records into the current segment.
    log.append(1, b"more").unwrap();
    log.commit().unwrap();
}

/// A simulated disk whose directory can be closed to new entries while a
/// log has it.
struct Closable {
    disk: SimDisk,
    closed: Arc<AtomicBool>,
}

impl Closable {
    fn entry(&self) -> std::io::Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "read-only directory",
            ));
        }
        Ok(())
    }
}

impl Storage for Closable {
    fn list(&self) -> std::io::Result<Vec<String>> {
        self.disk.list()
    }
    fn read(&self, name: &str) -> std::io::Result<Vec<u8>> {
        self.disk.read(name)
    }
    fn create(&mut self, name: &str) -> std::io::Result<()> {
        self.entry()?;
        self.disk.create(name)
    }
    fn append(&mut self, name: &str, data: &[u8]) -> std::io::Result<()> {
        self.disk.append(name, data)
    }
    fn sync(&mut self, name: &str) -> std::io::Result<()> {
        self.disk.sync(name)
    }
    fn sync_dir(&mut self) -> std::io::Result<()> {
        self.disk.sync_dir()
    }
    fn truncate(&mut self, name: &str, len: u64) -> std::io::Result<()> {
        self.disk.truncate(name, len)
    }
    fn remove(&mut self, name: &str) -> std::io::Result<()> {
        self.entry()?;
        self.disk.remove(name)
    }
    fn rename(&mut self, from: &str, to: &str) -> std::io::Result<()> {
        self.entry()?;
        self.disk.rename(from, to)
    }
    fn describe(&self, name: &str) -> String {
        self.disk.describe(name)
    }
}

/// A snapshot with no room for it is given up (`NoRoom`): the log and the
/// snapshot before it are as they were, and a later one goes through.
#[test]
fn a_snapshot_without_room_is_given_up_and_the_log_goes_on() {
    let (mut log, _) = Log::open(SimDisk::new(15), opts()).unwrap();
    log.append(1, b"a").unwrap();
    log.commit().unwrap();
    log.snapshot(1, b"small").unwrap();
    log.append(1, b"b").unwrap();
    log.commit().unwrap();
    let mut disk = log.into_storage();
    let used = disk.used();
    disk.set_capacity(Some(used + 100));
    let (mut log, _) = Log::open(disk, opts()).unwrap();
    let e = log.snapshot(2, &[9u8; 4096]).unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert!(!log.snapshot_writing());
    // Written in pieces, with too little room promised: given up too.
    log.snapshot_begin(2, 10).unwrap();
    let e = (0..10)
        .find_map(|_| log.snapshot_write(&[9u8; 1 << 20]).err())
        .expect("no room");
    assert!(e.is_retryable(), "{e}");
    assert!(!log.snapshot_writing());
    log.append(1, b"c").unwrap();
    log.commit().unwrap();
    let mut disk = log.into_storage();
    assert!(!disk.list().unwrap().contains(&"snap.tmp".to_string()));
    disk.set_capacity(None);
    let (mut log, recovered) = Log::open(disk, opts()).unwrap();
    assert_eq!(recovered.snapshot.as_ref().unwrap().body, b"small");
    assert_eq!(recovered.records.len(), 2);
    log.snapshot(3, b"later").unwrap();
    let (_, recovered) = Log::open(log.into_storage(), opts()).unwrap();
    assert_eq!(recovered.snapshot.unwrap().body, b"later");
}

/// `(lsn, body)` of every record recovered from `storage`.
fn recovered<S: Storage>(storage: S) -> Vec<(u64, Vec<u8>)> {
    let (_, r) = Log::open(storage, opts()).unwrap();
    r.records.into_iter().map(|r| (r.lsn, r.body)).collect()
}

fn new_body(lsn: u64) -> Vec<u8> {
    format!("written after the cut: {lsn}").into_bytes()
}

/// Truncates `log` after 23, appends 24..=28 with new bodies, commits.
fn cut_and_go_on<S: Storage>(log: &mut Log<S>) {
    log.truncate_after(23).unwrap();
    assert_eq!(log.next_lsn(), 24);
    for lsn in 24..=28 {
        assert_eq!(log.append(1, &new_body(lsn)).unwrap(), lsn);
    }
    assert_eq!(log.commit().unwrap(), 28);
}

fn expected_after_cut() -> Vec<(u64, Vec<u8>)> {
    (1..=23)
        .map(|l| (l, body(l)))
        .chain((24..=28).map(|l| (l, new_body(l))))
        .collect()
}

#[test]
fn a_truncated_suffix_never_comes_back_and_new_records_take_its_lsns() {
    // 60 records over several segments of 4 KiB, cut in the middle of one.
    let disk = committed_log(60);
    let (mut log, _) = Log::open(disk, opts()).unwrap();
    cut_and_go_on(&mut log);
    let mut disk = log.into_storage();
    disk.crash();
    assert_eq!(recovered(disk), expected_after_cut());
    // The same on the real file system.
    let dir = std::env::temp_dir().join(format!("fila-wal-cut-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    {
        let (mut log, _) = Log::open(FsStorage::new(&dir).unwrap(), opts()).unwrap();
        for lsn in 1..=60 {
            log.append(1, &body(lsn)).unwrap();
            if lsn % 5 == 0 {
                log.commit().unwrap();
            }
        }
        cut_and_go_on(&mut log);
    }
    assert_eq!(
        recovered(FsStorage::new(&dir).unwrap()),
        expected_after_cut()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pending_records_after_the_cut_are_dropped_and_durable_ones_before_it_kept() {
    let (mut log, _) = Log::open(SimDisk::new(9), opts()).unwrap();
    for lsn in 1..=10 {
        log.append(1, &body(lsn)).unwrap();
    }
    log.commit().unwrap();
    for lsn in 11..=15 {
        log.append(1, &body(lsn)).unwrap();
    }
    log.truncate_after(12).unwrap();
    assert_eq!(log.durable_lsn(), 10);
    assert_eq!(log.next_lsn(), 13);
    assert_eq!(log.commit().unwrap(), 12);
    // A cut at or past the end changes nothing.
    log.truncate_after(12).unwrap();
    log.truncate_after(99).unwrap();
    assert_eq!(log.next_lsn(), 13);
    let want: Vec<_> = (1..=12).map(|l| (l, body(l))).collect();
    assert_eq!(recovered(log.into_storage()), want);
}

#[test]
fn a_cut_below_the_snapshot_is_refused_and_one_at_it_empties_the_log() {
    let (mut log, _) = Log::open(committed_log(60), opts()).unwrap();
    log.snapshot(30, b"state at 30").unwrap();
    assert!(matches!(
        log.truncate_after(29),
        Err(Error::Truncate { lsn: 29, start: 30 })
    ));
    log.truncate_after(30).unwrap();
    assert_eq!(log.append(1, &new_body(31)).unwrap(), 31);
    log.commit().unwrap();
    let mut disk = log.into_storage();
    disk.crash();
    let (_, r) = Log::open(disk, opts()).unwrap();
    assert_eq!(r.snapshot.map(|s| s.lsn), Some(30));
    let got: Vec<_> = r.records.into_iter().map(|r| (r.lsn, r.body)).collect();
    assert_eq!(got, [(31, new_body(31))]);
}

#[test]
fn a_crash_part_way_through_a_cut_leaves_a_prefix_of_the_log() {
    // Dying after each number of disk operations a cut takes (it takes
    // fewer than 40 here), on disks that crash differently.
    for (seed, ops) in (1..=10u64).flat_map(|s| (0..40).map(move |o| (s, o))) {
        let (mut log, _) = Log::open(committed_log_on(SimDisk::new(seed), 60), opts()).unwrap();
        let mut disk = log.into_storage();
        disk.die_after(ops);
        log = Log::open(disk, opts()).unwrap().0;
        let cut = log.truncate_after(23);
        let mut disk = log.into_storage();
        disk.crash();
        let got = recovered(disk);
        let n = got.len() as u64;
        assert!((23..=60).contains(&n), "seed {seed} ops {ops}: {n} records");
        assert!(
            cut.is_err() || n == 23,
            "seed {seed} ops {ops}: a cut that answered Ok left {n}"
        );
        let want: Vec<_> = (1..=n).map(|l| (l, body(l))).collect();
        assert_eq!(got, want, "seed {seed} ops {ops}");
    }
}

/// The segment files on `disk` that have a header (not the spare), in
/// order, with their lengths.
fn segments_with_headers(disk: &SimDisk) -> Vec<(String, usize)> {
    disk.list()
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".seg"))
        .filter_map(|n| {
            let data = disk.read(&n).unwrap();
            (data.len() >= 8 && data[..8] != [0; 8]).then_some((n, data.len()))
        })
        .collect()
}

#[test]
fn records_go_over_the_zeros_a_spare_was_filled_with_and_a_restart_goes_on_there() {
    // Records of 100 bytes committed one at a time: the spare is made and
    // filled at half a segment, long before it is due.
    let (mut log, _) = Log::open(SimDisk::new(3), opts()).unwrap();
    for lsn in 1..=120u64 {
        log.append(1, &[lsn as u8; 100]).unwrap();
        log.commit().unwrap();
    }
    let disk = log.into_storage();
    let segments = segments_with_headers(&disk);
    assert!(segments.len() >= 3, "several segments: {segments:?}");
    // Every segment after the first was a spare filled with zeros ahead:
    // it keeps the segment's full length, records over its zeros (the one
    // left behind too).
    for (name, len) in &segments[1..] {
        assert_eq!(*len, 4096, "{name} was filled ahead");
    }
    let (newest, _) = segments.last().unwrap().clone();
    let (mut log, recovered) = Log::open(disk, opts()).unwrap();
    assert_eq!(recovered.records.len(), 120);
    assert_eq!(recovered.torn, None, "zeros after the last record are room");
    log.append(1, b"after a restart").unwrap();
    log.commit().unwrap();
    let disk = log.into_storage();
    assert_eq!(disk.len(&newest), Some(4096), "written in place");
    let (_, recovered) = Log::open(disk, opts()).unwrap();
    assert_eq!(recovered.records.len(), 121);
    assert_eq!(recovered.records[120].body, b"after a restart");
    assert_eq!(recovered.torn, None);
}

#[test]
fn a_crash_tearing_writes_over_zeros_keeps_every_committed_record() {
    let mut torn_seen = 0;
    for seed in 1..=300u64 {
        // Into a segment filled with zeros ahead: committed records, then
        // some written and not synced.
        let (mut log, _) = Log::open(committed_log_on(SimDisk::new(seed), 40), opts()).unwrap();
        let first_unsynced = log.next_lsn();
        for lsn in first_unsynced..first_unsynced + 4 {
            log.append((lsn % 7) as u8, &body(lsn)).unwrap();
        }
        log.write_out().unwrap();
        let mut disk = log.into_storage();
        disk.crash();
        let (_, recovered) = Log::open(disk, opts()).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let got = recovered.records.len() as u64;
        assert!(
            got + 1 >= first_unsynced,
            "seed {seed}: a committed record lost"
        );
        for r in &recovered.records {
            assert_eq!(r.body, body(r.lsn), "seed {seed}: record {} damaged", r.lsn);
        }
        if recovered.torn.is_some() {
            torn_seen += 1;
        }
    }
    assert!(torn_seen > 0, "some crash tore a write over zeros");
}

#[test]
fn the_file_system_fills_a_file_with_zeros_and_writes_nothing_after_the_filling_is_dropped() {
    let dir = std::env::temp_dir().join(format!("fila-wal-zeros-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut fs = FsStorage::new(&dir).unwrap();
    fs.create("a").unwrap();
    let len = 3 << 20;
    fs.zero_fill("a", len)
        .unwrap()
        .expect("a file system fills")
        .wait();
    assert_eq!(fs.file_len("a").unwrap(), len);
    assert!(fs.read("a").unwrap().iter().all(|b| *b == 0));
    fs.write_at("a", 100, b"over the zeros").unwrap();
    let mut back = [0u8; 14];
    fs.read_at("a", 100, &mut back).unwrap();
    assert_eq!(&back, b"over the zeros");
    assert_eq!(fs.file_len("a").unwrap(), len, "written in place");
    // Stopped early: what is written after is never overwritten.
    fs.create("b").unwrap();
    let filling = fs.zero_fill("b", 64 << 20).unwrap();
    drop(filling);
    let ones = vec![1u8; 1 << 20];
    for k in 0..4u64 {
        fs.write_at("b", k << 20, &ones).unwrap();
    }
    let data = fs.read("b").unwrap();
    assert!(data[..4 << 20].iter().all(|b| *b == 1));
    assert!(data[4 << 20..].iter().all(|b| *b == 0));
    std::fs::remove_dir_all(&dir).unwrap();
}
