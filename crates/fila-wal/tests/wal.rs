//! The log against a simulated disk that crashes, tears, flips bits and
//! fails syncs, and against the real file system.

use fila_wal::record::{self, Decoded};
use fila_wal::{segment_name, Error, FsStorage, Log, LogOptions, SimDisk, Storage, SECTOR};
use proptest::prelude::*;

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
                let step = match next() % 8 {
                    0 | 1 => log.commit().map(|d| durable = d),
                    2 => log.commit().and_then(|d| {
                        durable = d;
                        log.snapshot(d, &d.to_be_bytes())
                    }),
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
    let (mut log, _) = Log::open(SimDisk::new(3), opts()).unwrap();
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
