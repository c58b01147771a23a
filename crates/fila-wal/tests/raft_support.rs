//! What a Raft log needs of the log besides appending and recovering:
//! reading a range back while it is open, starting again after any LSN
//! (`reset`), and small files replaced whole beside it.

use fila_wal::{read_file, replace_file, Log, LogOptions, SimDisk, Storage};

fn opts() -> LogOptions {
    LogOptions {
        segment_bytes: 4096,
    }
}

fn body(lsn: u64) -> Vec<u8> {
    let len = (lsn * 37 % 700) as usize;
    (0..len).map(|i| (lsn as usize + i) as u8).collect()
}

/// A log of records 1..=n over segments of 4 KiB, committed every 7.
fn log_of(disk: SimDisk, n: u64) -> Log<SimDisk> {
    let (mut log, _) = Log::open(disk, opts()).unwrap();
    for lsn in 1..=n {
        assert_eq!(log.append(1, &body(lsn)).unwrap(), lsn);
        if lsn % 7 == 0 {
            log.commit().unwrap();
        }
    }
    log.commit().unwrap();
    log
}

fn lsns(records: &[fila_wal::OwnedRecord]) -> Vec<u64> {
    records.iter().map(|r| r.lsn).collect()
}

#[test]
fn a_range_reads_back_across_segments_and_from_pending_records() {
    let mut log = log_of(SimDisk::new(1), 60);
    let got = log.read(10, 41, usize::MAX).unwrap();
    assert_eq!(lsns(&got), (10..41).collect::<Vec<_>>());
    for r in &got {
        assert_eq!((r.kind, &r.body), (1, &body(r.lsn)));
    }
    // Pending records are read too, after the durable ones.
    log.append(2, b"pending 61").unwrap();
    let got = log.read(58, 100, usize::MAX).unwrap();
    assert_eq!(lsns(&got), [58, 59, 60, 61]);
    assert_eq!(
        (got[3].kind, got[3].body.as_slice()),
        (2, &b"pending 61"[..])
    );
    // Bounded by bytes, but never empty when a record is there.
    let got = log.read(1, 61, 1000).unwrap();
    let bytes: usize = got.iter().map(|r| r.body.len()).sum();
    assert!(bytes >= 1000 && bytes - got.last().unwrap().body.len() < 1000);
    assert_eq!(lsns(&got), (1..=got.len() as u64).collect::<Vec<_>>());
    assert_eq!(lsns(&log.read(5, 6, 1).unwrap()), [5]);
    // Nothing past the end, nothing in an empty range.
    assert!(log.read(62, 70, usize::MAX).unwrap().is_empty());
    assert!(log.read(30, 30, usize::MAX).unwrap().is_empty());
    // After a snapshot, the range starts at the first record still held.
    log.commit().unwrap();
    log.snapshot(40, b"state").unwrap();
    assert_eq!(log.snapshot_lsn(), 40);
    let got = log.read(1, 62, usize::MAX).unwrap();
    assert_eq!(lsns(&got), (41..=61).collect::<Vec<_>>());
    // A cut suffix is not read back.
    log.truncate_after(50).unwrap();
    assert_eq!(
        log.read(45, 70, usize::MAX).unwrap().last().unwrap().lsn,
        50
    );
}

fn recover(disk: SimDisk) -> (Option<(u64, Vec<u8>)>, Vec<u64>) {
    let (_, r) = Log::open(disk, opts()).unwrap();
    (
        r.snapshot.map(|s| (s.lsn, s.body)),
        r.records.iter().map(|r| r.lsn).collect(),
    )
}

#[test]
fn a_reset_starts_the_log_again_past_its_end_or_before_it() {
    let mut log = log_of(SimDisk::new(2), 60);
    log.append(1, b"pending, dropped").unwrap();
    log.reset(100, b"purged to 100").unwrap();
    assert_eq!((log.next_lsn(), log.durable_lsn()), (101, 100));
    assert!(log.read(1, 200, usize::MAX).unwrap().is_empty());
    for lsn in 101..=105 {
        assert_eq!(log.append(1, &body(lsn)).unwrap(), lsn);
    }
    log.commit().unwrap();
    let mut disk = log.into_storage();
    disk.crash();
    let (snapshot, records) = recover(disk.clone());
    assert_eq!(snapshot, Some((100, b"purged to 100".to_vec())));
    assert_eq!(records, (101..=105).collect::<Vec<_>>());
    // Before its start: the later snapshot goes too.
    let (mut log, _) = Log::open(disk, opts()).unwrap();
    log.reset(4, b"again at 4").unwrap();
    assert_eq!(log.append(1, &body(5)).unwrap(), 5);
    log.commit().unwrap();
    assert!(
        log.truncate_after(3).is_err(),
        "nothing before the reset is there"
    );
    let mut disk = log.into_storage();
    disk.crash();
    assert_eq!(recover(disk), (Some((4, b"again at 4".to_vec())), vec![5]));
}

#[test]
fn a_crash_part_way_through_a_reset_leaves_a_prefix_or_the_new_log() {
    // A reset of a log of 60 records (about 10 segments) takes fewer than
    // 60 disk operations.
    for (seed, ops) in (1..=6u64).flat_map(|s| (0..60).map(move |o| (s, o))) {
        let log = log_of(SimDisk::new(seed), 60);
        let mut disk = log.into_storage();
        disk.die_after(ops);
        let mut log = Log::open(disk, opts()).unwrap().0;
        let done = log.reset(80, b"new");
        let mut disk = log.into_storage();
        disk.crash();
        let (snapshot, records) = recover(disk);
        match snapshot {
            Some((80, body)) => {
                assert_eq!(body, b"new", "seed {seed} ops {ops}");
                assert!(records.is_empty(), "seed {seed} ops {ops}");
            }
            None => {
                assert!(
                    done.is_err(),
                    "seed {seed} ops {ops}: Ok but the old log is back"
                );
                let n = records.len() as u64;
                assert_eq!(
                    records,
                    (1..=n).collect::<Vec<_>>(),
                    "seed {seed} ops {ops}"
                );
            }
            other => panic!("seed {seed} ops {ops}: {other:?}"),
        }
    }
}

#[test]
fn a_replaced_file_is_the_old_or_the_new_after_any_crash() {
    for (seed, ops) in (1..=10u64).flat_map(|s| (0..8).map(move |o| (s, o))) {
        let mut disk = SimDisk::new(seed);
        assert_eq!(read_file(&disk, "vote").unwrap(), None);
        replace_file(&mut disk, "vote", b"term 1").unwrap();
        disk.die_after(ops);
        let done = replace_file(&mut disk, "vote", b"term 2, longer");
        disk.crash();
        let got = read_file(&disk, "vote").unwrap().unwrap();
        assert!(
            got == b"term 2, longer" || (got == b"term 1" && done.is_err()),
            "seed {seed} ops {ops}: {got:?} after {done:?}"
        );
        // The log beside it ignores it.
        let (_, r) = Log::open(disk, opts()).unwrap();
        assert!(r.records.is_empty());
    }
}

#[test]
fn a_file_kept_beside_the_log_is_left_alone_by_it() {
    let mut log = log_of(SimDisk::new(3), 30);
    replace_file(log.storage_mut(), "vote", b"v").unwrap();
    log.snapshot(20, b"s").unwrap();
    log.reset(40, b"r").unwrap();
    log.truncate_after(40).unwrap();
    let disk = log.into_storage();
    assert_eq!(
        read_file(&disk, "vote").unwrap().as_deref(),
        Some(&b"v"[..])
    );
    assert!(disk.list().unwrap().iter().all(|n| n != "vote.tmp"));
}

#[test]
fn written_out_records_are_durable_once_synced_and_a_segment_left_behind_is_synced_first() {
    // A simulated disk has no sync handle: the log's own sync is the way.
    let (mut log, _) = Log::open(SimDisk::new(4), opts()).unwrap();
    assert!(log.sync_handle().unwrap().is_none());
    let mut lost_some = false;
    for seed in 1..=40u64 {
        let (mut log, _) = Log::open(SimDisk::new(seed), opts()).unwrap();
        for lsn in 1..=40 {
            log.append(1, &body(lsn)).unwrap();
            if lsn % 5 == 0 {
                assert_eq!(log.write_out().unwrap(), lsn);
            }
        }
        assert_eq!(log.write_out().unwrap(), 40);
        // Read back while open, synced or not.
        assert_eq!(lsns(&log.read(1, 41, usize::MAX).unwrap()).len(), 40);
        // Written, not synced: a crash keeps every segment the log moved
        // on from, and any prefix of the newest.
        let newest_first = {
            let mut disk = log.into_storage();
            let (_, after) = {
                let mut crashed = disk.clone();
                crashed.crash();
                recover(crashed)
            };
            let (_, whole) = recover(disk.clone());
            assert_eq!(whole, (1..=40).collect::<Vec<_>>());
            let newest = newest_segment_first_lsn(&mut disk);
            assert!(
                after.len() as u64 + 1 >= newest,
                "seed {seed}: only {after:?} kept, the newest segment starts at {newest}"
            );
            assert_eq!(after, (1..=after.len() as u64).collect::<Vec<_>>());
            lost_some |= (after.len() as u64) < 40;
            newest
        };
        assert!(newest_first > 1, "the records fill several segments");
        // A commit with nothing pending syncs what was written out.
        let (mut log, _) = Log::open(SimDisk::new(seed), opts()).unwrap();
        for lsn in 1..=40 {
            log.append(1, &body(lsn)).unwrap();
        }
        log.write_out().unwrap();
        log.commit().unwrap();
        let mut disk = log.into_storage();
        disk.crash();
        assert_eq!(recover(disk).1, (1..=40).collect::<Vec<_>>());
    }
    assert!(lost_some, "some crash lost an unsynced record");
}

/// The first LSN of the newest segment of a log on `disk`.
fn newest_segment_first_lsn(disk: &mut SimDisk) -> u64 {
    let newest = disk
        .list()
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".seg"))
        // Not the spare: empty, or filled with zeros ahead.
        .filter(|n| {
            let data = disk.read(n).unwrap();
            data.len() > fila_wal::SEGMENT_HEADER && data[..8] != [0; 8]
        })
        .max()
        .unwrap();
    let header = disk.read(&newest).unwrap();
    u64::from_be_bytes(header[24..32].try_into().unwrap())
}

#[test]
fn a_failed_sync_of_a_segment_left_behind_fails_the_log() {
    let (mut log, _) = Log::open(SimDisk::new(6), opts()).unwrap();
    log.append(1, &body(1)).unwrap();
    log.write_out().unwrap();
    let mut disk = log.into_storage();
    disk.fail_syncs(1);
    let (mut log, _) = Log::open(disk, opts()).unwrap();
    for lsn in 2..=3 {
        log.append(1, &body(lsn)).unwrap();
    }
    log.write_out().unwrap();
    // Enough to leave the segment behind: its sync fails.
    for lsn in 4..=20 {
        log.append(1, &body(lsn)).unwrap();
    }
    assert!(matches!(
        log.write_out(),
        Err(fila_wal::Error::SyncFailed { .. })
    ));
    assert!(matches!(log.append(1, b"x"), Err(fila_wal::Error::Failed)));
}

#[test]
fn a_file_systems_sync_handle_syncs_from_another_thread() {
    let dir = std::env::temp_dir().join(format!("fila-wal-handle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    {
        let (mut log, _) = Log::open(fila_wal::FsStorage::new(&dir).unwrap(), opts()).unwrap();
        for lsn in 1..=30 {
            log.append(1, &body(lsn)).unwrap();
        }
        assert_eq!(log.write_out().unwrap(), 30);
        let handle = log.sync_handle().unwrap().expect("a file system's");
        std::thread::spawn(move || handle())
            .join()
            .unwrap()
            .unwrap();
    }
    let (_, recovered) = Log::open(fila_wal::FsStorage::new(&dir).unwrap(), opts()).unwrap();
    assert_eq!(recovered.records.len(), 30);
    std::fs::remove_dir_all(&dir).unwrap();
}
