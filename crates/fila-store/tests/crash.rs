//! Thousands of seeded lives of an engine logging to a simulated disk
//! whose process dies at a random disk operation (mid-batch, mid-snapshot)
//! and whose machine then crashes (unsynced bytes kept in part, torn at a
//! sector or not). After each crash, a new engine recovered from the disk
//! must hold every message whose put was acknowledged (its batch durable)
//! unless its delete was acknowledged, none whose delete was acknowledged,
//! nothing in flight, and refuse every receipt of the life before.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fila_core::{
    Address, Engine, ErrorKind, ManualClock, NewMessage, QueueSettings, Receipt, ReceiveOptions,
};
use fila_store::{Hooks, Marks, Store, StoreOptions};
use fila_wal::{SimDisk, Storage};

/// A disk whose process dies after `left` more operations (never while
/// `left` is negative): every later operation fails. While `held` is set,
/// operations wait (a slow disk): the shards' records pile up behind the
/// writer's batch in progress, and the next batch takes them shard by
/// shard, so a record can land in the log before another shard's record
/// made earlier.
struct Dying {
    disk: SimDisk,
    left: Arc<AtomicI64>,
    held: Arc<AtomicBool>,
}

impl Dying {
    fn step(&self) -> std::io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.held.load(Ordering::Acquire) {
            assert!(Instant::now() < deadline, "the disk was held too long");
            std::thread::yield_now();
        }
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

/// Lets the disk go on, then waits until the log is durable past `mark`;
/// `false` when it failed.
fn durable(marks: &Marks, held: &AtomicBool, mark: u64) -> bool {
    held.store(false, Ordering::Release);
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

/// Every message id in the engine, in both sub-queues of every queue (each
/// id at most once), and how many are in flight.
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
                for m in &page {
                    // Ids are never reused: two messages with one id
                    // would also hide a lost one from the checks.
                    assert!(ids.insert(m.id.0), "two messages have the id {:?}", m.id);
                }
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
            let held = Arc::new(AtomicBool::new(false));
            let storage = Dying {
                disk,
                left: left.clone(),
                held: held.clone(),
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
                // "a" and "c" share a shard of 2, "b" is on the other one:
                // dead letters of "a" move within a shard, those of "b"
                // across shards (one record in "c"'s stream, which the
                // writer may take before "b"'s put).
                assert_eq!(fila_core::shard_of("a", 2), fila_core::shard_of("c", 2));
                assert_ne!(fila_core::shard_of("b", 2), fila_core::shard_of("c", 2));
                engine
                    .create_queue(
                        "c",
                        QueueSettings {
                            visibility_timeout_ms: 1_000,
                            max_deliveries: 3,
                            ..QueueSettings::default()
                        },
                    )
                    .unwrap();
                for (q, max_deliveries) in [("a", 2), ("b", 1)] {
                    let settings = QueueSettings {
                        visibility_timeout_ms: 1_000,
                        max_deliveries,
                        dead_letter_target: Some("c".into()),
                        ..QueueSettings::default()
                    };
                    engine.create_queue(q, settings).unwrap();
                }
                assert!(durable(&marks, &held, marks.mark()));
            }
            let die_at = 20 + rng.below(200);
            let mut receipts: Vec<(String, Receipt, u128)> = Vec::new();
            // Puts whose answers have not been waited for yet (a producer
            // pipelining): acknowledged once the log is durable past their
            // mark; meanwhile consumers may take and move them.
            let mut unacked: Vec<(u64, Vec<u128>)> = Vec::new();
            for step in 0..400 {
                if step == die_at {
                    left.store(rng.below(12) as i64, Ordering::Release);
                }
                match rng.below(8) {
                    0 => held.store(true, Ordering::Release),
                    1 => held.store(false, Ordering::Release),
                    _ => {}
                }
                let reached = marks.durable();
                unacked.retain(|(mark, ids)| {
                    if *mark > reached {
                        return true;
                    }
                    live.extend(
                        ids.iter()
                            .filter(|id| !gone.contains(*id) && !maybe_gone.contains(*id)),
                    );
                    false
                });
                let q = QUEUES[rng.below(3) as usize];
                match rng.below(10) {
                    0..=3 => {
                        let n = 1 + rng.below(4) as usize;
                        let batch = (0..n)
                            .map(|i| NewMessage::new(Bytes::from(format!("{seed}-{step}-{i}"))))
                            .collect();
                        let ids: Vec<u128> = engine
                            .put(q, batch)
                            .unwrap()
                            .into_iter()
                            .map(|a| a.unwrap().id.0)
                            .collect();
                        let mark = marks.mark();
                        if rng.below(2) == 0 {
                            unacked.push((mark, ids));
                        } else if durable(&marks, &held, mark) {
                            live.extend(ids);
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
                            if durable(&marks, &held, marks.mark()) {
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
            held.store(false, Ordering::Release);
            disk = store.stop().expect("the writer ran").disk;
            disk.crash();
        }
    }
}

/// The class of item "a move whose put was torn off": a message put on
/// "b" and dead-lettered to "c" (another shard) before its put is durable,
/// the disk slow, so the writer's next batch takes "c"'s forward before
/// "b"'s put; the process dies at a random disk operation and the machine
/// crashes, maybe keeping the forward and tearing off the put. Then more
/// acknowledged puts on "b", then another restart: none may be lost.
#[test]
fn moves_across_shards_then_a_torn_tail_then_more_puts_lose_nothing() {
    let runs: u64 = std::env::var("CRASH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    assert_ne!(fila_core::shard_of("b", 2), fila_core::shard_of("c", 2));
    for seed in 1..=runs {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let clock = ManualClock::new(1_700_000_000_000);
        let mut disk = SimDisk::new(seed);
        let mut live: HashSet<u128> = HashSet::new();
        let options = StoreOptions {
            segment_bytes: 1_024 + rng.below(4_096),
            ..StoreOptions::default()
        };
        for life in 0..4 {
            let left = Arc::new(AtomicI64::new(-1));
            let held = Arc::new(AtomicBool::new(false));
            let storage = Dying {
                disk,
                left: left.clone(),
                held: held.clone(),
            };
            let engine = Arc::new(Engine::new(2, Arc::new(clock.clone())));
            let (store, _) = Store::open(storage, engine.clone(), options, Hooks::default())
                .unwrap_or_else(|e| panic!("seed {seed} life {life}: {e}"));
            let marks = store.marks();
            let (ids, _) = contents(&engine);
            let lost = live.difference(&ids).count();
            assert_eq!(lost, 0, "seed {seed} life {life}: lost {lost}");
            live = ids;
            if life == 0 {
                engine.create_queue("c", QueueSettings::default()).unwrap();
                let settings = QueueSettings {
                    dead_letter_target: Some("c".into()),
                    ..QueueSettings::default()
                };
                engine.create_queue("b", settings).unwrap();
            }
            // Acknowledged puts of this life.
            for i in 0..1 + rng.below(5) {
                let acks = engine
                    .put("b", vec![NewMessage::new(format!("{life}-{i}"))])
                    .unwrap();
                assert!(durable(&marks, &held, marks.mark()));
                live.extend(acks.into_iter().map(|a| a.unwrap().id.0));
            }
            // Then, on a slow disk, puts dead-lettered before they are
            // durable, and the process dies.
            held.store(true, Ordering::Release);
            for i in 0..1 + rng.below(4) {
                engine
                    .put("c", vec![NewMessage::new(format!("{life}-c{i}"))])
                    .unwrap();
                engine
                    .put("b", vec![NewMessage::new(format!("{life}-b{i}"))])
                    .unwrap();
                let got = engine
                    .receive_now(Address::queue("b"), &ReceiveOptions::now(20))
                    .unwrap();
                for m in got {
                    if rng.below(2) == 0 {
                        engine
                            .dead_letter("b", &m.receipt.unwrap(), "r", "d")
                            .unwrap();
                    }
                }
            }
            left.store(rng.below(8) as i64, Ordering::Release);
            held.store(false, Ordering::Release);
            let deadline = Instant::now() + Duration::from_secs(20);
            while !marks.failed() {
                assert!(Instant::now() < deadline, "the process never died");
                engine.put("c", vec![NewMessage::new("poke")]).unwrap();
                std::thread::yield_now();
            }
            disk = store.stop().expect("the writer ran").disk;
            disk.crash();
        }
    }
}
