//! What an answer that hands out a message waits for: whether a message
//! stored on a shard may not be durable yet (`Marks::stored_pending`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fila_core::{Address, Clock, Engine, ManualClock, NewMessage, QueueSettings, ReceiveOptions};
use fila_store::{Hooks, Marks, Store, StoreOptions};
use fila_wal::{SimDisk, Storage};

/// A simulated disk whose writes wait while `held` is set (a slow disk).
struct Slow {
    disk: SimDisk,
    held: Arc<AtomicBool>,
}

impl Slow {
    fn gate(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.held.load(Ordering::Acquire) {
            assert!(Instant::now() < deadline, "held too long");
            std::thread::yield_now();
        }
    }
}

impl Storage for Slow {
    fn list(&self) -> std::io::Result<Vec<String>> {
        self.disk.list()
    }
    fn read(&self, name: &str) -> std::io::Result<Vec<u8>> {
        self.disk.read(name)
    }
    fn create(&mut self, name: &str) -> std::io::Result<()> {
        self.gate();
        self.disk.create(name)
    }
    fn append(&mut self, name: &str, data: &[u8]) -> std::io::Result<()> {
        self.gate();
        self.disk.append(name, data)
    }
    fn sync(&mut self, name: &str) -> std::io::Result<()> {
        self.gate();
        self.disk.sync(name)
    }
    fn sync_dir(&mut self) -> std::io::Result<()> {
        self.gate();
        self.disk.sync_dir()
    }
    fn truncate(&mut self, name: &str, len: u64) -> std::io::Result<()> {
        self.disk.truncate(name, len)
    }
    fn remove(&mut self, name: &str) -> std::io::Result<()> {
        self.disk.remove(name)
    }
    fn rename(&mut self, from: &str, to: &str) -> std::io::Result<()> {
        self.disk.rename(from, to)
    }
    fn describe(&self, name: &str) -> String {
        self.disk.describe(name)
    }
}

fn settle(marks: &Marks, held: &AtomicBool) {
    held.store(false, Ordering::Release);
    let mark = marks.mark();
    let deadline = Instant::now() + Duration::from_secs(20);
    while marks.durable() < mark {
        assert!(Instant::now() < deadline, "the writer never got there");
        std::thread::yield_now();
    }
}

/// An engine of `shards` logging to a slow simulated disk: its store and
/// the disk's gate.
fn slow_store(shards: usize, clock: &ManualClock) -> (Arc<Engine>, Store<Slow>, Arc<AtomicBool>) {
    let held = Arc::new(AtomicBool::new(false));
    let engine = Arc::new(Engine::new(shards, Arc::new(clock.clone())));
    let storage = Slow {
        disk: SimDisk::new(7),
        held: held.clone(),
    };
    let (store, _) = Store::open(
        storage,
        engine.clone(),
        StoreOptions::default(),
        Hooks::default(),
    )
    .unwrap();
    (engine, store, held)
}

#[test]
fn only_a_stored_message_not_yet_durable_makes_an_answer_wait() {
    let (engine, store, held) = slow_store(2, &ManualClock::new(1_700_000_000_000));
    let marks = store.marks();
    let (b, c) = (fila_core::shard_of("b", 2), fila_core::shard_of("c", 2));
    assert_ne!(b, c);
    engine.create_queue("c", QueueSettings::default()).unwrap();
    engine
        .create_queue(
            "b",
            QueueSettings {
                dead_letter_target: Some("c".into()),
                ..QueueSettings::default()
            },
        )
        .unwrap();
    settle(&marks, &held);
    assert!(
        !marks.stored_pending(b) && !marks.stored_pending(c),
        "nothing stored yet"
    );

    // A put on a slow disk: its shard has a message not yet durable.
    held.store(true, Ordering::Release);
    engine.put("b", vec![NewMessage::new("one")]).unwrap();
    assert!(marks.stored_pending(b), "the put is not durable yet");
    assert!(
        !marks.stored_pending(c),
        "nothing was stored on the other shard"
    );
    settle(&marks, &held);
    assert!(!marks.stored_pending(b), "the put is durable");

    // A delivery is logged, but stores nothing: no wait.
    held.store(true, Ordering::Release);
    let got = engine
        .receive_now(Address::queue("b"), &ReceiveOptions::now(1))
        .unwrap();
    assert!(!marks.stored_pending(b), "a delivery stores no message");
    // A dead letter moved to the other shard is stored there.
    engine
        .dead_letter("b", &got[0].receipt.unwrap(), "r", "d")
        .unwrap();
    assert!(
        marks.stored_pending(c),
        "the forwarded dead letter is not durable yet"
    );
    settle(&marks, &held);
    assert!(!marks.stored_pending(b) && !marks.stored_pending(c));
    store.stop();
}

/// With `sync = interval`, a burst of records past the flush mark is
/// written and synced at once, not at the writer's next interval (here a
/// minute away): a backlog never waits a whole interval.
#[test]
fn a_writer_on_an_interval_flushes_at_once_past_the_mark() {
    let engine = Arc::new(Engine::new(
        2,
        Arc::new(ManualClock::new(1_700_000_000_000)),
    ));
    let options = StoreOptions {
        sync: fila_store::SyncMode::Interval(Duration::from_secs(60)),
        ..StoreOptions::default()
    };
    let (store, _) =
        Store::open(SimDisk::new(8), engine.clone(), options, Hooks::default()).unwrap();
    let marks = store.marks();
    engine.create_queue("q", QueueSettings::default()).unwrap();
    // The first batch comes at once; the next one a minute later.
    let deadline = Instant::now() + Duration::from_secs(20);
    while marks.durable() == 0 {
        assert!(Instant::now() < deadline, "no first batch");
        std::thread::yield_now();
    }
    let first = marks.durable();
    let body = bytes::Bytes::from(vec![1u8; 256 << 10]);
    let burst = fila_store::FLUSH_MARK / (256 << 10) + 4;
    for _ in 0..burst {
        engine
            .put("q", vec![NewMessage::new(body.clone())])
            .unwrap();
    }
    while marks.durable() <= first || marks.backlog_bytes() >= fila_store::FLUSH_MARK {
        assert!(
            Instant::now() < deadline,
            "the burst waited for the interval (durable {}, backlog {})",
            marks.durable(),
            marks.backlog_bytes()
        );
        std::thread::yield_now();
    }
    store.stop();
}

/// A message stored before the latest one made durable is durable: a
/// backlog is handed out at once while newer puts are not durable yet.
#[test]
fn messages_older_than_the_latest_durable_one_need_no_wait() {
    let clock = ManualClock::new(1_700_000_000_000);
    let (engine, store, held) = slow_store(1, &clock);
    let marks = store.marks();
    engine.create_queue("q", QueueSettings::default()).unwrap();
    let t0 = clock.now_ms();
    engine.put("q", vec![NewMessage::new("old")]).unwrap();
    clock.advance(5);
    engine.put("q", vec![NewMessage::new("durable")]).unwrap();
    settle(&marks, &held);
    assert!(!marks.pending_since(0, t0));
    held.store(true, Ordering::Release);
    clock.advance(5);
    engine.put("q", vec![NewMessage::new("new")]).unwrap();
    assert!(
        !marks.pending_since(0, t0),
        "older than the latest durable message"
    );
    assert!(
        marks.pending_since(0, t0 + 10),
        "the new one is not durable yet"
    );
    settle(&marks, &held);
    assert!(!marks.pending_since(0, t0 + 10));
    store.stop();
}
