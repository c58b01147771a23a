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
use fila_store::{Hooks, Marks, Store, StoreOptions, SyncMode};
use fila_wal::record::RECORD_HEADER;
use fila_wal::{Log, LogOptions, SimDisk, Storage, SEGMENT_HEADER};

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
    /// Once set, the log's segments take no more writes (the process died
    /// before its next record reached the log); snapshots and everything
    /// else go on.
    segments_dead: Arc<AtomicBool>,
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

    /// [`Dying::step`] for a write or sync of `name`.
    fn write_step(&self, name: &str) -> std::io::Result<()> {
        self.step()?;
        if name.starts_with("wal-") && self.segments_dead.load(Ordering::Acquire) {
            return Err(std::io::Error::other("the process died"));
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
        self.write_step(name)?;
        self.disk.append(name, data)
    }
    fn write_at(&mut self, name: &str, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.write_step(name)?;
        self.disk.write_at(name, offset, data)
    }
    fn zero_fill(&mut self, name: &str, len: u64) -> std::io::Result<Option<fila_wal::Zeroing>> {
        self.step()?;
        self.disk.zero_fill(name, len)
    }
    fn sync(&mut self, name: &str) -> std::io::Result<()> {
        self.write_step(name)?;
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
    // CRASH_SEED=n runs only seed n (to study a failure).
    let only: Option<u64> = std::env::var("CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok());
    for seed in 1..=runs {
        if only.is_some_and(|o| o != seed) {
            continue;
        }
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
                segments_dead: Arc::default(),
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
                segments_dead: Arc::default(),
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

/// A source queue's name on the shard (of two) that "c" is not on.
fn source_name(k: u64) -> String {
    (0..)
        .map(|i| format!("src{k}-{i}"))
        .find(|n| fila_core::shard_of(n, 2) != fila_core::shard_of("c", 2))
        .expect("a name on the other shard")
}

/// Writes a log as the torn-forward fixture's was written: queues made,
/// filled and dead-lettered to "c" on the other shard while the disk is
/// slow, so that one batch holds a source queue's creation, its puts and
/// the forwards out of it, the target's shard written first. One segment,
/// no snapshot. Returns the disk and the segment's name.
fn write_forwarding_log(sync: SyncMode, rounds: u64) -> (SimDisk, String) {
    let clock = ManualClock::new(1_700_000_000_000);
    let held = Arc::new(AtomicBool::new(false));
    let storage = Dying {
        disk: SimDisk::new(7),
        left: Arc::new(AtomicI64::new(-1)),
        held: held.clone(),
        segments_dead: Arc::default(),
    };
    let engine = Arc::new(Engine::new(2, Arc::new(clock.clone())));
    let options = StoreOptions {
        sync,
        segment_bytes: 64 << 20,
        compact_min_bytes: u64::MAX,
        ..StoreOptions::default()
    };
    let (store, _) = Store::open(storage, engine.clone(), options, Hooks::default()).unwrap();
    let marks = store.marks();
    let mut rng = Rng(0x005E_ED0F_7041);
    let mut source = String::new();
    for round in 0..rounds {
        held.store(true, Ordering::Release);
        if round % 5 == 0 {
            if round == 0 {
                engine.create_queue("c", QueueSettings::default()).unwrap();
            }
            source = source_name(round / 5);
            let settings = QueueSettings {
                visibility_timeout_ms: 1_000,
                max_deliveries: 1 + (round / 5 % 2) as u32,
                dead_letter_target: Some("c".into()),
                ..QueueSettings::default()
            };
            engine.create_queue(&source, settings).unwrap();
        }
        for i in 0..4 {
            let n = 1 + rng.below(8) as usize;
            let batch = (0..n)
                .map(|j| NewMessage::new(format!("r{round}-{i}-{j}")))
                .collect();
            engine.put(&source, batch).unwrap();
        }
        engine
            .put("c", vec![NewMessage::new(format!("c{round}"))])
            .unwrap();
        let got = engine
            .receive_now(Address::queue(&source), &ReceiveOptions::now(20))
            .unwrap();
        for m in got {
            let r = m.receipt.unwrap();
            match rng.below(4) {
                0 => {
                    engine.delete(Address::queue(&source), &[r]).unwrap();
                }
                1 => {} // its lease ends: dead-lettered at its last delivery
                _ => engine.dead_letter(&source, &r, "r", "d").unwrap(),
            }
        }
        clock.advance(600);
        engine.tick();
        held.store(false, Ordering::Release);
        if round % 3 == 2 {
            assert!(durable(&marks, &held, marks.mark()));
        }
    }
    assert!(durable(&marks, &held, marks.mark()));
    let disk = store.stop().expect("the writer ran").disk;
    let segments: Vec<String> = disk
        .list()
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with("wal-") && n.ends_with(".seg"))
        .collect();
    assert_eq!(segments.len(), 1, "one segment: {segments:?}");
    (disk, segments[0].clone())
}

/// Every place the log may be cut: each 4 KiB boundary, and each record's
/// end within its last `tail` bytes.
fn cut_points(disk: &SimDisk, segment: &str, tail: usize) -> Vec<usize> {
    let (_, recovered) = Log::open(disk.clone(), LogOptions::default()).unwrap();
    let mut ends = Vec::new();
    let mut end = SEGMENT_HEADER;
    for r in &recovered.records {
        end += RECORD_HEADER + r.body.len();
        ends.push(end);
    }
    // The records end where the file does, or where the zeros begin that
    // it was filled with (a segment made ahead, as the spare, before the
    // first record: with `sync = interval` a batch with nothing in it
    // makes one when the writer's first interval comes before a record).
    let len = disk.len(segment).unwrap();
    assert!(
        end == len || disk.read(segment).unwrap()[end..].iter().all(|&b| b == 0),
        "the records fill the segment, or zeros follow them"
    );
    let mut cuts: Vec<usize> = (0..=end).step_by(4096).collect();
    cuts.extend(ends.into_iter().filter(|e| e + tail >= end));
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// Issue 37: a log written with forwards across shards (both sync modes),
/// cut at every 4 KiB boundary and at every record boundary of its last
/// 4 MiB. For each cut: a restart, 600 acknowledged puts, a clean stop, a
/// restart: every acknowledged put is back (and every message the first
/// restart found), and no id is given twice. Before the fix, a forward
/// written before its source queue's creation left that queue's next
/// sequence number at what its surviving puts said, so new puts reused
/// numbers the forwards named, and the next restart skipped them as puts
/// the forwards had overtaken. `FILA_TORN_ROUNDS` sets the log's length
/// (rounds of puts and dead letters; 24 by default, about 160 KiB).
#[test]
fn every_cut_of_a_log_with_forwards_across_shards_loses_no_acknowledged_put() {
    let rounds: u64 = std::env::var("FILA_TORN_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    for sync in [
        SyncMode::Always,
        SyncMode::Interval(Duration::from_millis(5)),
    ] {
        let (base, segment) = write_forwarding_log(sync, rounds);
        let cuts = cut_points(&base, &segment, 4 << 20);
        for &cut in &cuts {
            let mut disk = base.clone();
            disk.truncate(&segment, cut as u64).unwrap();
            let clock = ManualClock::new(1_800_000_000_000);
            let open = |disk| {
                let engine = Arc::new(Engine::new(2, Arc::new(clock.clone())));
                let (store, _) = Store::open(
                    disk,
                    engine.clone(),
                    StoreOptions::default(),
                    Hooks::default(),
                )
                .unwrap_or_else(|e| panic!("{sync:?} cut at {cut}: {e}"));
                (engine, store)
            };
            let (engine, store) = open(disk);
            let (mut live, _) = contents(&engine);
            let mut queues = engine.list_queues("");
            if queues.is_empty() {
                engine.create_queue("c", QueueSettings::default()).unwrap();
                queues.push("c".into());
            }
            for i in 0..30 {
                let q = &queues[i % queues.len()];
                let batch = (0..20)
                    .map(|j| NewMessage::new(format!("after {i}-{j}")))
                    .collect();
                for a in engine.put(q, batch).unwrap() {
                    let id = a.unwrap().id.0;
                    assert!(
                        live.insert(id),
                        "{sync:?} cut at {cut}: id {id:x} given twice"
                    );
                }
            }
            let marks = store.marks();
            let mark = marks.mark();
            let deadline = Instant::now() + Duration::from_secs(20);
            while marks.durable() < mark {
                assert!(Instant::now() < deadline, "the puts never became durable");
                std::thread::yield_now();
            }
            let disk = store.stop().unwrap();
            let (engine, _store) = open(disk);
            let (ids, _) = contents(&engine);
            let lost = live.difference(&ids).count();
            assert_eq!(lost, 0, "{sync:?} cut at {cut}: {lost} acknowledged lost");
        }
        eprintln!(
            "{sync:?}: {} cuts of a log of {} bytes",
            cuts.len(),
            cuts.last().copied().unwrap_or(0)
        );
    }
}

/// Two queue names on a two-shard engine: a target on shard 0 (a
/// snapshot's pieces are taken shard by shard from 0: the target's first)
/// and a source on shard 1.
fn target_and_source() -> (String, String) {
    let name_on = |prefix: &str, shard: usize| {
        (0..)
            .map(|i| format!("{prefix}{i}"))
            .find(|n| fila_core::shard_of(n, 2) == shard)
            .expect("a name on that shard")
    };
    (name_on("target", 0), name_on("source", 1))
}

/// Makes `target` and `source`, whose dead letters go to `target`, puts
/// ten messages on `source` and leases them all; once that is durable,
/// answers their ids and receipts.
fn ten_leased(
    engine: &Engine,
    marks: &Marks,
    target: &str,
    source: &str,
) -> (HashSet<u128>, Vec<Receipt>) {
    engine
        .create_queue(target, QueueSettings::default())
        .unwrap();
    let settings = QueueSettings {
        dead_letter_target: Some(target.into()),
        ..QueueSettings::default()
    };
    engine.create_queue(source, settings).unwrap();
    let batch = (0..10).map(|i| NewMessage::new(format!("m{i}"))).collect();
    let acked: HashSet<u128> = engine
        .put(source, batch)
        .unwrap()
        .into_iter()
        .map(|a| a.unwrap().id.0)
        .collect();
    let got = engine
        .receive_now(Address::queue(source), &ReceiveOptions::now(10))
        .unwrap();
    assert_eq!(got.len(), 10);
    let idle = AtomicBool::new(false);
    assert!(durable(marks, &idle, marks.mark()), "the puts are durable");
    (acked, got.iter().map(|m| m.receipt.unwrap()).collect())
}

/// Crashes `disk`, recovers it into a new engine and answers how many of
/// `acked` it lacks.
fn lost_after_a_crash(mut disk: SimDisk, clock: &ManualClock, acked: &HashSet<u128>) -> usize {
    disk.crash();
    let engine = Arc::new(Engine::new(2, Arc::new(clock.clone())));
    let (_store, _) = Store::open(
        disk,
        engine.clone(),
        StoreOptions::default(),
        Hooks::default(),
    )
    .unwrap();
    let (ids, _) = contents(&engine);
    acked.difference(&ids).count()
}

/// The engine as a snapshot sees it, running `before` once just before
/// the first piece of `shard` is taken.
struct Hooked {
    engine: Arc<Engine>,
    shard: usize,
    before: std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl fila_store::Source for Hooked {
    fn quiesce(&self, during: &mut dyn FnMut()) -> bool {
        fila_store::Source::quiesce(&*self.engine, during)
    }
    fn export_piece(
        &self,
        cursor: &mut fila_core::event::ExportCursor,
        max_messages: usize,
        max_bytes: u64,
    ) -> Option<Vec<fila_core::event::ImagePart>> {
        if cursor.shard == self.shard {
            if let Some(before) = self.before.lock().unwrap().take() {
                before();
            }
        }
        Some(self.engine.export_piece(cursor, max_messages, max_bytes))
    }
    fn next_queue_id(&self) -> u32 {
        self.engine.totals().next_queue_id()
    }
    fn in_transit(&self) -> u64 {
        self.engine.totals().in_transit()
    }
    fn stored_bytes(&self) -> u64 {
        self.engine.stored_bytes()
    }
}

/// What the 30 000-seed run found: a snapshot's pieces are taken while the
/// engine serves, so a piece can show a change made after the snapshot's
/// LSN. Here the target's shard is taken first, then, before the source's
/// shard is, the consumer dead-letters the source's ten leased messages
/// to the target: the source's piece no longer has them and their records
/// (in the target's stream) are not written yet. The process dies before
/// its next write to the log. Before the fix the snapshot was finished
/// anyway, the log before it deleted, and the restart lost every one of
/// those acknowledged puts; now the snapshot is finished only once those
/// records are durable, so it is not, and the old log brings them back.
#[test]
fn a_snapshot_is_finished_only_once_the_moves_its_pieces_show_are_durable() {
    let (target, source) = target_and_source();
    let clock = ManualClock::new(1_700_000_000_000);
    let dead = Arc::new(AtomicBool::new(false));
    let storage = Dying {
        disk: SimDisk::new(5),
        left: Arc::new(AtomicI64::new(-1)),
        held: Arc::default(),
        segments_dead: dead.clone(),
    };
    let engine = Arc::new(Engine::new(2, Arc::new(clock.clone())));
    let hooked = Arc::new(Hooked {
        engine: engine.clone(),
        shard: 1,
        before: std::sync::Mutex::new(None),
    });
    let (store, _) = Store::open_with_source(
        storage,
        engine.clone(),
        hooked.clone(),
        StoreOptions::default(),
        Hooks::default(),
    )
    .unwrap();
    let marks = store.marks();
    let (acked, receipts) = ten_leased(&engine, &marks, &target, &source);

    // Just before the source's shard is taken, the consumer dead-letters
    // them (to the target, already taken), and the process dies before
    // the log takes another record.
    let (e, q, d) = (engine.clone(), source.clone(), dead.clone());
    *hooked.before.lock().unwrap() = Some(Box::new(move || {
        for r in &receipts {
            e.dead_letter(&q, r, "r", "d").unwrap();
        }
        d.store(true, Ordering::Release);
    }));
    store.request_snapshot();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !marks.failed() {
        assert!(Instant::now() < deadline, "the log never failed");
        std::thread::yield_now();
    }
    let disk = store.stop().expect("the writer ran").disk;
    let lost = lost_after_a_crash(disk, &clock, &acked);
    assert_eq!(lost, 0, "{lost} of 10 acknowledged puts lost");
}

/// The engine split into owners, one a shard, as a server's loops hold
/// it: a dead letter forwarded across shards leaves its owner only when
/// the test takes it (`Owner::take_transit`), so the test can hold it
/// between the two while a snapshot is taken. Counts the writer's looks
/// at what is in transit.
struct Owners {
    owners: std::sync::Mutex<Vec<fila_core::Owner>>,
    totals: fila_core::Totals,
    transit_looks: std::sync::atomic::AtomicU64,
}

impl fila_store::Source for Owners {
    fn quiesce(&self, during: &mut dyn FnMut()) -> bool {
        let _held = self.owners.lock().unwrap();
        during();
        true
    }
    fn export_piece(
        &self,
        cursor: &mut fila_core::event::ExportCursor,
        max_messages: usize,
        max_bytes: u64,
    ) -> Option<Vec<fila_core::event::ImagePart>> {
        let owners = self.owners.lock().unwrap();
        let shards = self.totals.shard_count();
        if cursor.shard >= shards {
            cursor.done = true;
            return Some(Vec::new());
        }
        let owner = fila_core::owner_of_shard(cursor.shard, owners.len());
        let mut out = Vec::new();
        owners[owner].export_piece(cursor, max_messages, max_bytes, &mut out);
        Some(out)
    }
    fn next_queue_id(&self) -> u32 {
        self.totals.next_queue_id()
    }
    fn in_transit(&self) -> u64 {
        self.transit_looks.fetch_add(1, Ordering::AcqRel);
        self.totals.in_transit()
    }
    fn stored_bytes(&self) -> u64 {
        self.totals.stored_bytes()
    }
}

/// While a dead letter is between two shards it has no record at all,
/// and a snapshot's pieces may have it in neither shard (its source's
/// piece is taken after it left). So the writer does not finish a
/// snapshot while one is in transit: here ten are held between the
/// owners while a snapshot is asked for; the writer looks and waits, the
/// store is stopped (the snapshot given up) and the machine crashes, and
/// the restart has all ten, from the log. Finishing the snapshot anyway
/// lost all ten.
#[test]
fn a_snapshot_waits_while_a_dead_letter_is_between_shards() {
    let (target, source) = target_and_source();
    let clock = ManualClock::new(1_700_000_000_000);
    let engine = Arc::new(Engine::new(2, Arc::new(clock.clone())));
    let owners = Arc::new(Owners {
        owners: std::sync::Mutex::new(Vec::new()),
        totals: engine.totals(),
        transit_looks: std::sync::atomic::AtomicU64::new(0),
    });
    let (store, _) = Store::open_with_source(
        SimDisk::new(9),
        engine.clone(),
        owners.clone(),
        StoreOptions::default(),
        Hooks::default(),
    )
    .unwrap();
    let (acked, receipts) = ten_leased(&engine, &store.marks(), &target, &source);

    // The owners take the shards over; the source's owner dead-letters
    // the ten, and they are held between the two.
    let Ok(engine) = Arc::try_unwrap(engine) else {
        panic!("the store keeps a handle on the engine");
    };
    let mut split = engine.into_owners(2, 1_024);
    for r in &receipts {
        split[1].dead_letter(&source, r, "r", "d").unwrap();
    }
    let transit = split[1].take_transit();
    assert_eq!(transit.len(), 10);
    *owners.owners.lock().unwrap() = split;

    store.request_snapshot();
    let deadline = Instant::now() + Duration::from_secs(20);
    while owners.transit_looks.load(Ordering::Acquire) < 3 && store.snapshots() == 0 {
        assert!(Instant::now() < deadline, "the snapshot went nowhere");
        std::thread::yield_now();
    }
    assert_eq!(
        store.snapshots(),
        0,
        "a snapshot finished with ten in transit"
    );
    let disk = store.stop().expect("the writer ran");
    drop(transit);
    let lost = lost_after_a_crash(disk, &clock, &acked);
    assert_eq!(lost, 0, "{lost} of 10 acknowledged puts lost");
}
