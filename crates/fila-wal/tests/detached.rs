//! Snapshots written away from the log (`Log::snapshot_detached`): the
//! log goes on taking and syncing records while the snapshot's file is
//! written, and a crash at any point keeps every committed record.

use fila_wal::{FsStorage, Log, LogOptions, SimDisk, Storage};

fn body(lsn: u64) -> Vec<u8> {
    let len = (lsn * 37 % 700) as usize;
    (0..len).map(|i| (lsn as usize + i) as u8).collect()
}

fn opts() -> LogOptions {
    LogOptions {
        segment_bytes: 4096,
    }
}

/// Appends records up to `last` (their kind the LSN mod 7) and commits.
fn append_to<S: Storage>(log: &mut Log<S>, last: u64) -> Result<u64, fila_wal::Error> {
    while log.next_lsn() <= last {
        let lsn = log.next_lsn();
        log.append((lsn % 7) as u8, &body(lsn))?;
    }
    log.commit()
}

/// The records a reopened log hands over must follow on from its
/// snapshot, whole; answers the snapshot's LSN (0: none) and the last.
fn check_recovered<S: Storage>(storage: S, at: &str) -> (u64, u64, S) {
    let (log, recovered) = Log::open(storage, opts()).unwrap_or_else(|e| panic!("{at}: {e}"));
    let covered = recovered.snapshot.as_ref().map_or(0, |s| {
        assert_eq!(s.body, s.lsn.to_be_bytes(), "{at}: the snapshot's body");
        s.lsn
    });
    for (i, r) in recovered.records.iter().enumerate() {
        assert_eq!(r.lsn, covered + i as u64 + 1, "{at}");
        assert_eq!(r.body, body(r.lsn), "{at}: record {} damaged", r.lsn);
    }
    let last = covered + recovered.records.len() as u64;
    (covered, last, log.into_storage())
}

fn segments(disk: &impl Storage) -> usize {
    disk.list()
        .unwrap()
        .iter()
        .filter(|n| n.ends_with(".seg"))
        .count()
}

#[test]
fn a_detached_snapshot_is_written_while_the_log_goes_on_and_then_adopted() {
    let (mut log, _) = Log::open(SimDisk::new(3), opts()).unwrap();
    append_to(&mut log, 60).unwrap();
    let before = segments(log.storage());
    let snap = log.snapshot_detached(50, &50u64.to_be_bytes()).unwrap();
    // The log goes on between the snapshot's making and its writing, and
    // between its writing and its adoption.
    append_to(&mut log, 80).unwrap();
    snap.write(log.storage_mut()).unwrap();
    append_to(&mut log, 90).unwrap();
    log.snapshot_adopt(snap.lsn());
    assert_eq!(log.snapshot_lsn(), 50);
    let after = segments(log.storage());
    append_to(&mut log, 100).unwrap();
    assert!(
        after < before + 4,
        "{before} segments before, {after} after"
    );
    let (covered, last, disk) = check_recovered(log.into_storage(), "reopened");
    assert_eq!((covered, last), (50, 100));
    assert!(!disk.list().unwrap().iter().any(|n| n == "snap.tmp"));
}

#[test]
fn a_crash_anywhere_around_a_detached_snapshot_keeps_every_committed_record() {
    // Every mutating operation of the disk in turn is the last one.
    let mut cut_points = 0;
    for ops in 0..200u32 {
        let (mut log, _) = Log::open(SimDisk::new(u64::from(ops) + 1), opts()).unwrap();
        append_to(&mut log, 40).unwrap();
        let mut disk = log.into_storage();
        disk.die_after(ops);
        let (mut log, _) = Log::open(disk, opts()).unwrap();
        let mut committed = 40;
        let steps = (|| {
            let snap = log.snapshot_detached(30, &30u64.to_be_bytes())?;
            committed = append_to(&mut log, 55)?;
            snap.write(log.storage_mut())?;
            committed = append_to(&mut log, 65)?;
            log.snapshot_adopt(snap.lsn());
            committed = append_to(&mut log, 75)?;
            Ok::<_, fila_wal::Error>(())
        })();
        let mut disk = log.into_storage();
        disk.crash();
        let at = format!("dead after {ops} operations");
        let (covered, last, _) = check_recovered(disk, &at);
        assert!(
            last >= committed,
            "{at}: {last} recovered, {committed} committed"
        );
        assert!(
            covered == 0 || covered == 30,
            "{at}: a snapshot at {covered}"
        );
        if steps.is_ok() {
            assert_eq!(covered, 30, "{at}");
            break;
        }
        cut_points += 1;
    }
    assert!(cut_points > 10, "only {cut_points} cut points");
}

#[test]
fn on_the_file_system_another_thread_writes_the_snapshot_while_the_log_syncs() {
    let dir = std::env::temp_dir().join(format!("fila-wal-detached-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let storage = FsStorage::new(&dir).unwrap();
    let (mut log, _) = Log::open(storage, opts()).unwrap();
    append_to(&mut log, 60).unwrap();
    let snap = log.snapshot_detached(60, &60u64.to_be_bytes()).unwrap();
    let mut beside = log
        .storage()
        .beside()
        .expect("a file system has a second handle");
    let writer = std::thread::spawn(move || snap.write(&mut beside).map(|()| snap));
    append_to(&mut log, 120).unwrap();
    let snap = writer.join().unwrap().unwrap();
    log.snapshot_adopt(snap.lsn());
    append_to(&mut log, 130).unwrap();
    let (covered, last, _) = check_recovered(log.into_storage(), "reopened");
    assert_eq!((covered, last), (60, 130));
    let files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        files.iter().filter(|n| n.ends_with(".snap")).count(),
        1,
        "{files:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
