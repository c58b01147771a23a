//! A full disk on the simulated disk: below the free-space reserve puts are
//! refused (`resource_exhausted`, disk full) while receives, deletes and
//! snapshots go on in the room left; the store starts on a full disk and
//! takes puts again by itself once there is room.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fila_core::{
    Address, DiskState, Engine, Error, ErrorKind, ManualClock, NewMessage, QueueSettings,
    ReceiveOptions,
};
use fila_store::{Hooks, Marks, Store, StoreOptions};
use fila_wal::{SimDisk, Storage};

fn options() -> StoreOptions {
    StoreOptions {
        segment_bytes: 64 << 10,
        compact_min_bytes: 64 << 10,
        compact_ratio: 2,
        disk_reserve_bytes: 256 << 10,
        ..StoreOptions::default()
    }
}

fn durable(marks: &Marks) {
    let mark = marks.mark();
    let deadline = Instant::now() + Duration::from_secs(20);
    while marks.durable() < mark {
        assert!(!marks.failed(), "the log failed");
        assert!(Instant::now() < deadline, "never durable");
        std::thread::yield_now();
    }
}

/// Puts 1 KiB messages until the disk refuses one; answers how many were
/// acknowledged, and the refusal.
fn fill(engine: &Engine, marks: &Marks) -> (usize, Error) {
    let body = Bytes::from(vec![5u8; 1 << 10]);
    for n in 0..100_000 {
        match engine.put("q", vec![NewMessage::new(body.clone())]) {
            Ok(acks) => {
                acks[0].as_ref().unwrap();
                durable(marks);
            }
            Err(e) => return (n, e),
        }
    }
    panic!("the disk never filled");
}

/// Receives and deletes every message of `q`, each batch durable.
fn drain(engine: &Engine, marks: &Marks) -> usize {
    let mut deleted = 0;
    loop {
        let got = engine
            .receive_now(Address::queue("q"), &ReceiveOptions::now(20))
            .unwrap();
        if got.is_empty() {
            return deleted;
        }
        let receipts: Vec<_> = got.iter().map(|m| m.receipt.unwrap()).collect();
        for r in engine.delete(Address::queue("q"), &receipts).unwrap() {
            r.unwrap();
        }
        durable(marks);
        deleted += got.len();
    }
}

/// Puts until one is taken (the writer looks at the disk every 250 ms).
fn put_once_there_is_room(engine: &Engine) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match engine.put("q", vec![NewMessage::new("again")]) {
            Ok(_) => return,
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::ResourceExhausted, "{e}");
                assert!(Instant::now() < deadline, "puts never came back: {e}");
                std::thread::yield_now();
            }
        }
    }
}

#[test]
fn a_full_disk_refuses_puts_only_and_takes_them_again_once_there_is_room() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let engine = Arc::new(Engine::new(2, clock.clone()));
    let mut disk = SimDisk::new(1);
    disk.set_capacity(Some(2 << 20));
    let (store, _) = Store::open(disk, engine.clone(), options(), Hooks::default()).unwrap();
    let marks = store.marks();
    engine.create_queue("q", QueueSettings::default()).unwrap();
    durable(&marks);
    let (acked, refused) = fill(&engine, &marks);
    assert!(acked > 100, "only {acked} fit");
    assert!(matches!(refused, Error::Disk(DiskState::Full)), "{refused}");
    assert!(refused.to_string().contains("disk full"), "{refused}");
    assert_eq!(
        engine.stats("q").unwrap().visible,
        acked as u64,
        "nothing lost"
    );
    // Receives and deletes go on, durably, in the room left.
    let deleted = drain(&engine, &marks);
    assert_eq!(deleted, acked);
    // Snapshots free the log's room: puts are taken again by themselves.
    put_once_there_is_room(&engine);
    assert!(store.snapshots() > 0, "no snapshot made room");
    assert!(!marks.failed());
    store.stop();
}

#[test]
fn a_store_starts_on_a_full_disk_and_recovers_when_space_comes_back() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let engine = Arc::new(Engine::new(2, clock.clone()));
    let mut disk = SimDisk::new(2);
    disk.set_capacity(Some(2 << 20));
    let (store, _) = Store::open(disk, engine.clone(), options(), Hooks::default()).unwrap();
    let marks = store.marks();
    engine.create_queue("q", QueueSettings::default()).unwrap();
    let acked = 100;
    for _ in 0..acked {
        engine.put("q", vec![NewMessage::new("m")]).unwrap();
    }
    durable(&marks);
    let mut disk = store.stop().unwrap();
    // Something else takes the rest of the disk.
    disk.create("other").unwrap();
    let left = (2 << 20) - disk.used();
    let _ = disk.append("other", &vec![0u8; left]);
    assert_eq!(disk.free_bytes().unwrap(), Some(0));
    // It starts, with every acknowledged message; puts are refused,
    // receives and deletes are not.
    let engine = Arc::new(Engine::new(2, clock.clone()));
    let (store, recovery) = Store::open(disk, engine.clone(), options(), Hooks::default())
        .expect("starts on a full disk");
    assert_eq!(recovery.messages, acked);
    let marks = store.marks();
    let deadline = Instant::now() + Duration::from_secs(20);
    while engine.totals().disk() == DiskState::Ok {
        engine.tick();
        assert!(Instant::now() < deadline, "the full disk was not seen");
        std::thread::yield_now();
    }
    let e = engine
        .put("q", vec![NewMessage::new("no room")])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ResourceExhausted);
    let got = engine
        .receive_now(Address::queue("q"), &ReceiveOptions::now(5))
        .unwrap();
    assert_eq!(got.len(), 5);
    let mut disk = store.stop().unwrap();
    // The other file goes: room again.
    disk.remove("other").unwrap();
    let engine = Arc::new(Engine::new(2, clock));
    let (store, _) = Store::open(disk, engine.clone(), options(), Hooks::default()).unwrap();
    let marks2 = store.marks();
    engine.create_queue("r", QueueSettings::default()).ok();
    durable(&marks2);
    put_once_there_is_room(&engine);
    drop(marks);
    store.stop();
}
