//! Thousands of seeded lives of an engine logging to a simulated disk
//! whose process dies at a random disk operation (mid-batch, mid-snapshot)
//! and whose machine then crashes (unsynced bytes kept in part, torn at a
//! sector or not). After each crash, a new engine recovered from the disk
//! must hold every message whose put was acknowledged (its batch durable)
//! unless its delete was acknowledged, none whose delete was acknowledged,
//! nothing in flight, and refuse every receipt of the life before.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fila_core::{
    Address, Engine, ErrorKind, ManualClock, NewMessage, QueueSettings, Receipt, ReceiveOptions,
};
use fila_store::{Hooks, Marks, Store, StoreOptions};
use fila_wal::{SimDisk, Storage};

/// A disk whose process dies after `left` more operations (never while
/// `left` is negative): every later operation fails.
struct Dying {
    disk: SimDisk,
    left: Arc<AtomicI64>,
}

impl Dying {
    fn step(&self) -> std::io::Result<()> {
        let left = self.left.load(Ordering::Acquire);
        if left == 0 {
            return Err(std::io::Error::other("the process died"));
        }
        if left > 0 {
            self.left.store(left - 1, Ordering::Release);
        }
        Ok(())
    }
}

impl Storage for Dying {
    fn list(&self) -> std::io::Result<Vec<String>> {
        self.disk.list()
    }
    fn read(&self, name: &str) -> std::io::Result<Vec<u8>> {
        self.disk.read(name)
    }
    fn create(&mut self, name: &str) -> std::io::Result<()> {
        self.step()?;
        self.disk.create(name)
    }
    fn append(&mut self, name: &str, data: &[u8]) -> std::io::Result<()> {
        self.step()?;
        self.disk.append(name, data)
    }
    fn sync(&mut self, name: &str) -> std::io::Result<()> {
        self.step()?;
        self.disk.sync(name)
    }
    fn sync_dir(&mut self) -> std::io::Result<()> {
        self.step()?;
        self.disk.sync_dir()
    }
    fn truncate(&mut self, name: &str, len: u64) -> std::io::Result<()> {
        self.step()?;
        self.disk.truncate(name, len)
    }
    fn remove(&mut self, name: &str) -> std::io::Result<()> {
        self.step()?;
        self.disk.remove(name)
    }
    fn rename(&mut self, from: &str, to: &str) -> std::io::Result<()> {
        self.step()?;
        self.disk.rename(from, to)
    }
    fn describe(&self, name: &str) -> String {
        self.disk.describe(name)
    }
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// Waits until the log is durable past `mark`; `false` when it failed.
fn durable(marks: &Marks, mark: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while marks.durable() < mark {
        if marks.failed() {
            return false;
        }
        assert!(Instant::now() < deadline, "the writer never got there");
        std::thread::yield_now();
    }
    true
}

/// Every message id in the engine, in both sub-queues of every queue, and
/// how many are in flight.
fn contents(engine: &Engine) -> (HashSet<u128>, u64) {
    let mut ids = HashSet::new();
    let mut in_flight = 0;
    for q in engine.list_queues("") {
        in_flight += engine.stats(&q).unwrap().in_flight;
        for dlq in [false, true] {
            let mut from = 0;
            loop {
                let page = engine.peek(Address { queue: &q, dlq }, from, 100).unwrap();
                let Some(last) = page.last() else { break };
                from = last.seq + 1;
                ids.extend(page.iter().map(|m| m.id.0));
            }
        }
    }
    (ids, in_flight)
}

const QUEUES: [&str; 3] = ["a", "b", "c"];

#[test]
fn acknowledged_changes_survive_a_crash_at_any_disk_operation() {
    let runs: u64 = std::env::var("CRASH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    for seed in 1..=runs {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let clock = ManualClock::new(1_700_000_000_000);
        let mut disk = SimDisk::new(seed);
        // Acknowledged and not deleted; acknowledged deleted.
        let mut live: HashSet<u128> = HashSet::new();
        let mut gone: HashSet<u128> = HashSet::new();
        // Deleted, but the log failed before saying so: either way.
        let mut maybe_gone: HashSet<u128> = HashSet::new();
        let options = StoreOptions {
            compact_min_bytes: 1_000 + rng.below(8_000),
            compact_ratio: 1,
            segment_bytes: 1_024 + rng.below(4_096),
            ..StoreOptions::default()
        };
        let mut old_receipts: Vec<(String, Receipt)> = Vec::new();
        for life in 0..4 {
            let left = Arc::new(AtomicI64::new(-1));
            let storage = Dying {
                disk,
                left: left.clone(),
            };
            let engine = Arc::new(Engine::new(2, Arc::new(clock.clone())));
            let (store, _) = Store::open(storage, engine.clone(), options, Hooks::default())
                .unwrap_or_else(|e| panic!("seed {seed} life {life}: {e}"));
            let (ids, in_flight) = contents(&engine);
            let lost: Vec<_> = live
                .difference(&ids)
                .filter(|id| !maybe_gone.contains(*id))
                .collect();
            assert!(
                lost.is_empty(),
                "seed {seed} life {life}: lost {} such as {:?}",
                lost.len(),
                &lost[..lost.len().min(5)]
            );
            let back: Vec<_> = gone.intersection(&ids).collect();
            assert!(back.is_empty(), "seed {seed} life {life}: back {back:?}");
            assert_eq!(in_flight, 0, "seed {seed} life {life}: leases survived");
            for (q, r) in old_receipts.drain(..) {
                let e = engine
                    .delete(Address::queue(&q), &[r])
                    .map(|mut v| v.remove(0));
                assert!(
                    matches!(&e, Ok(Err(e)) if e.kind() == ErrorKind::ReceiptInvalid)
                        || matches!(&e, Err(e) if e.kind() == ErrorKind::QueueNotFound),
                    "seed {seed} life {life}: an old receipt did {e:?}"
                );
            }
            // What is there now is durable: it is what a restart keeps.
            live = ids;
            maybe_gone.clear();
            let marks = store.marks();
            if life == 0 {
                for q in QUEUES {
                    let settings = QueueSettings {
                        visibility_timeout_ms: 1_000,
                        max_deliveries: 3,
                        dead_letter_target: (q == "a").then(|| "c".to_string()),
                        ..QueueSettings::default()
                    };
                    if q == "a" {
                        continue;
                    }
                    engine.create_queue(q, settings).unwrap();
                }
                engine
                    .create_queue(
                        "a",
                        QueueSettings {
                            visibility_timeout_ms: 1_000,
                            max_deliveries: 2,
                            dead_letter_target: Some("c".into()),
                            ..QueueSettings::default()
                        },
                    )
                    .unwrap();
                assert!(durable(&marks, marks.mark()));
            }
            let die_at = 20 + rng.below(200);
            let mut receipts: Vec<(String, Receipt, u128)> = Vec::new();
            for step in 0..400 {
                if step == die_at {
                    left.store(rng.below(12) as i64, Ordering::Release);
                }
                let q = QUEUES[rng.below(3) as usize];
                match rng.below(10) {
                    0..=3 => {
                        let n = 1 + rng.below(4) as usize;
                        let batch = (0..n)
                            .map(|i| NewMessage::new(Bytes::from(format!("{seed}-{step}-{i}"))))
                            .collect();
                        let acks = engine.put(q, batch).unwrap();
                        if durable(&marks, marks.mark()) {
                            live.extend(acks.into_iter().map(|a| a.unwrap().id.0));
                        }
                    }
                    4..=5 => {
                        let got = engine
                            .receive_now(Address::queue(q), &ReceiveOptions::now(5))
                            .unwrap();
                        receipts.extend(
                            got.iter()
                                .map(|m| (q.to_string(), m.receipt.unwrap(), m.id.0)),
                        );
                    }
                    6..=7 if !receipts.is_empty() => {
                        let (q, r, id) =
                            receipts.swap_remove(rng.below(receipts.len() as u64) as usize);
                        let done = engine.delete(Address::queue(&q), &[r]).unwrap()[0].is_ok();
                        if done {
                            if durable(&marks, marks.mark()) {
                                live.remove(&id);
                                gone.insert(id);
                            } else {
                                maybe_gone.insert(id);
                            }
                        }
                        old_receipts.push((q, r));
                    }
                    8 if !receipts.is_empty() => {
                        let (q, r, _) =
                            receipts.swap_remove(rng.below(receipts.len() as u64) as usize);
                        if rng.below(2) == 0 {
                            let _ = engine.defer(&q, &r);
                        } else {
                            let _ = engine.dead_letter(&q, &r, "r", "d");
                        }
                    }
                    _ => {
                        clock.advance(rng.below(1_500));
                        engine.tick();
                    }
                }
                if marks.failed() {
                    break;
                }
            }
            old_receipts.extend(receipts.into_iter().map(|(q, r, _)| (q, r)));
            disk = store.stop().expect("the writer ran").disk;
            disk.crash();
        }
    }
}
