//! Recovery time: N live messages of SIZE bytes in a snapshot, then a tail
//! of TAIL MiB of put records after it, in a data directory; then the time
//! a new engine takes to open it (read the snapshot, replay the tail,
//! rebuild the queues, wheels and rings).
//!
//! ```sh
//! cargo run --release -p fila-benches --example recovery -- 1000000 1024 64 /tmp/fila-recovery
//! ```
//!
//! `FILA_KEEP=1` keeps the directory; `FILA_REUSE=1` skips loading and
//! times the recovery of the directory as it is (to profile it alone).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fila_core::{Engine, NewMessage, QueueSettings, SystemClock};
use fila_store::{Hooks, Store, StoreOptions};
use fila_wal::FsStorage;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.first().map_or(1_000_000, |v| v.parse().unwrap());
    let size: usize = args.get(1).map_or(1024, |v| v.parse().unwrap());
    let tail_mib: usize = args.get(2).map_or(64, |v| v.parse().unwrap());
    let dir = args
        .get(3)
        .cloned()
        .unwrap_or_else(|| "/tmp/fila-recovery".into());
    let reuse = std::env::var_os("FILA_REUSE").is_some();
    if !reuse {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let settings = QueueSettings {
        max_messages: 100_000_000,
        max_bytes: 64 << 30,
        ..QueueSettings::default()
    };
    let payload = Bytes::from(vec![0x5Au8; size]);
    let put = |engine: &Engine, count: usize| {
        for start in (0..count).step_by(20) {
            let batch = (start..count.min(start + 20))
                .map(|_| NewMessage::new(payload.clone()))
                .collect();
            for a in engine.put("r", batch).unwrap() {
                a.unwrap();
            }
        }
    };
    if !reuse {
        let engine = Arc::new(Engine::new(2, Arc::new(SystemClock)));
        let (store, _) = Store::open(
            FsStorage::new(&dir).unwrap(),
            engine.clone(),
            StoreOptions {
                compact_min_bytes: u64::MAX,
                ..StoreOptions::default()
            },
            Hooks::default(),
        )
        .unwrap();
        engine.create_queue("r", settings).unwrap();
        let began = Instant::now();
        put(&engine, n);
        store.request_snapshot();
        while store.snapshots() == 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
        println!(
            "loaded {n} messages of {size} B and wrote the snapshot in {:.1} s",
            began.elapsed().as_secs_f64()
        );
        put(&engine, (tail_mib << 20) / size);
        store.stop().unwrap();
    }
    let on_disk: u64 = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    let engine = Arc::new(Engine::new(2, Arc::new(SystemClock)));
    let began = Instant::now();
    let (store, report) = Store::open(
        FsStorage::new(&dir).unwrap(),
        engine.clone(),
        StoreOptions::default(),
        Hooks::default(),
    )
    .unwrap();
    let elapsed = began.elapsed();
    println!(
        "recovered {} messages ({} records, {} MiB of tail; {} MiB on disk) in {:.2} s",
        report.messages,
        report.records,
        report.record_bytes >> 20,
        on_disk >> 20,
        elapsed.as_secs_f64()
    );
    assert_eq!(engine.stats("r").unwrap().visible as usize, report.messages);
    drop(store);
    if std::env::var_os("FILA_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
