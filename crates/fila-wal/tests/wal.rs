//! The log against a simulated disk that crashes, tears, flips bits and
//! fails syncs, and against the real file system.

use fila_wal::record::{self, Decoded};
use fila_wal::{segment_name, Error, FsStorage, Log, LogOptions, SimDisk, Storage};
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
    for seed in 1..=2_000u64 {
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
        // A few lives: append, commit sometimes, crash, recover.
        for _life in 0..3 {
            let (mut log, recovered) =
                Log::open(disk, opts()).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert!(
                recovered.len() as u64 >= durable,
                "seed {seed}: {} recovered, {durable} were committed",
                recovered.len()
            );
            assert!(recovered.len() as u64 <= appended);
            for (i, r) in recovered.iter().enumerate() {
                assert_eq!(r.lsn, i as u64 + 1, "seed {seed}");
                assert_eq!(r.body, body(r.lsn), "seed {seed}: record {} damaged", r.lsn);
                assert_eq!(r.kind, (r.lsn % 7) as u8);
            }
            // What was recovered is now the history (an uncommitted record
            // may have made it to disk; then it is kept).
            appended = recovered.len() as u64;
            durable = appended;
            for _ in 0..(next() % 40) {
                let lsn = log
                    .append((log.next_lsn() % 7) as u8, &body(log.next_lsn()))
                    .unwrap();
                appended = lsn;
                if next() % 4 == 0 {
                    durable = log.commit().unwrap();
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
    assert_eq!(recovered.len(), 59);
    assert_eq!(log.append(1, b"after").unwrap(), 60);
    log.commit().unwrap();
    let (_, recovered) = Log::open(log.into_storage(), opts()).unwrap();
    assert_eq!(recovered.len(), 60);
    assert_eq!(recovered[59].body, b"after");
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
        assert!(recovered.is_empty());
        for lsn in 1..=30 {
            log.append((lsn % 7) as u8, &body(lsn)).unwrap();
        }
        assert_eq!(log.commit().unwrap(), 30);
    }
    let (log, recovered) = Log::open(FsStorage::new(&dir).unwrap(), opts()).unwrap();
    assert_eq!(recovered.len(), 30);
    assert_eq!(recovered[29].body, body(30));
    assert_eq!(log.next_lsn(), 31);
    assert!(
        std::fs::read_dir(&dir).unwrap().count() >= 2,
        "several segments"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
