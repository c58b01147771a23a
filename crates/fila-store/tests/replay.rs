//! The events rebuild the state: random operations on an engine whose
//! shards log to a simulated disk, then a new engine recovered from that
//! disk must hold exactly the queues and messages the first one exported
//! (leases aside: a leased message comes back visible).

use std::sync::Arc;

use bytes::Bytes;
use fila_core::event::EngineImage;
use fila_core::event::{Event, EventSink};
use fila_core::Clock;
use fila_core::{
    Address, Availability, ChannelFilter, Engine, ManualClock, NewMessage, QueueSettings, Receipt,
    ReceiveOptions, SettingsUpdate,
};
use fila_store::codec::{decode, encode_event};
use fila_store::replay::Replay;
use fila_store::{Hooks, Store, StoreOptions};
use fila_wal::SimDisk;
use std::sync::Mutex;

const T0: u64 = 1_700_000_000_000;

/// xorshift64*: deterministic, seeded.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// The state, normalised: queues by name, messages by place, visible
/// times that are past (or of deferred messages) as 0.
fn normal(mut image: EngineImage, now: u64) -> EngineImage {
    image.queues.sort_by(|a, b| a.name.cmp(&b.name));
    for q in &mut image.queues {
        // Remembered deduplication keys: those not forgotten yet, in any
        // order (a restore drops the rest).
        q.dedup.retain(|e| e.expires_at_ms > now);
        q.dedup.sort_by_key(|e| (e.expires_at_ms, e.key));
        q.messages.sort_by_key(|m| (m.dlq, m.seq));
        for m in &mut q.messages {
            if m.deferred || m.visible_at_ms <= now {
                m.visible_at_ms = 0;
            }
            // A lease that has ended (the events cannot say whether its
            // time ran out).
            if m.lease_until_ms <= now {
                m.lease_until_ms = 0;
            }
        }
    }
    image
}

/// The image with no message leased (what a restore makes of it).
fn without_leases(mut image: EngineImage) -> EngineImage {
    for q in &mut image.queues {
        for m in &mut q.messages {
            m.lease_until_ms = 0;
        }
    }
    image
}

const QUEUES: [&str; 4] = ["a", "b", "c", "d"];

fn settings(rng: &mut Rng) -> QueueSettings {
    QueueSettings {
        visibility_timeout_ms: 1_000 + rng.below(3) * 1_000,
        max_deliveries: rng.below(3) as u32,
        retention_ms: 60_000 + rng.below(3) * 30_000,
        dead_letter_on_expiration: rng.below(2) == 0,
        channel_capacity_pct: 100,
        delay_ms: if rng.below(4) == 0 {
            rng.below(3) * 500
        } else {
            0
        },
        redrive_allow: (rng.below(4) == 0).then(|| r#"{"redrivePermission":"allowAll"}"#.into()),
        tags: if rng.below(3) == 0 {
            vec![("team".into(), format!("t{}", rng.below(3)))]
        } else {
            Vec::new()
        },
        dedup_window_ms: 1_000 + rng.below(5) * 1_000,
        content_dedup: rng.below(4) == 0,
        ordered: rng.below(5) == 0,
        priority_levels: 1 + rng.below(4) as u8,
        priority_fairness: rng.below(3) as u32,
        // Half the queues retry later: 0.5 to 2 s, doubling to 5 s, some
        // with jitter.
        retry_initial_ms: if rng.below(2) == 0 {
            500 + rng.below(4) * 500
        } else {
            0
        },
        retry_max_ms: 5_000,
        retry_jitter_pct: if rng.below(2) == 0 { 30 } else { 0 },
        ..QueueSettings::default()
    }
}

/// One random operation; receipts handed out are kept for later ones.
fn step(
    engine: &Engine,
    clock: &ManualClock,
    rng: &mut Rng,
    receipts: &mut Vec<(String, Receipt)>,
) {
    let q = QUEUES[rng.below(QUEUES.len() as u64) as usize];
    let addr = Address::queue(q);
    match rng.below(20) {
        0 => {
            let _ = engine.create_queue(q, settings(rng));
        }
        1 => {
            let target = QUEUES[rng.below(QUEUES.len() as u64) as usize];
            let update = SettingsUpdate {
                dead_letter_target: Some((target != q && rng.below(2) == 0).then(|| target.into())),
                max_deliveries: Some(rng.below(3) as u32),
                tags_set: if rng.below(2) == 0 {
                    vec![(format!("k{}", rng.below(3)), "v".into())]
                } else {
                    Vec::new()
                },
                tags_remove: if rng.below(3) == 0 {
                    vec![format!("k{}", rng.below(3))]
                } else {
                    Vec::new()
                },
                ..SettingsUpdate::default()
            };
            let _ = engine.update_queue(q, &update);
        }
        2 if rng.below(4) == 0 => {
            let _ = engine.delete_queue(q);
        }
        3 if rng.below(3) == 0 => {
            let _ = engine.purge(Address {
                queue: q,
                dlq: rng.below(2) == 0,
            });
        }
        4..=8 => {
            let n = 1 + rng.below(3) as usize;
            let batch = (0..n)
                .map(|i| {
                    let mut m = NewMessage::new(Bytes::from(format!("{q}-{}-{i}", rng.next_u64())));
                    if rng.below(3) == 0 {
                        m.channel = Some(format!("ch{}", rng.below(3)));
                    }
                    if rng.below(4) == 0 {
                        m.attributes = vec![("k".into(), format!("v{}", rng.below(9)))];
                    }
                    if rng.below(5) == 0 {
                        m.availability = Availability::DelayMs(rng.below(5_000));
                    }
                    if rng.below(6) == 0 {
                        m.ttl_ms = Some(60_000);
                    }
                    if rng.below(3) == 0 {
                        m.dedup_id = Some(format!("d{}", rng.below(4)));
                    }
                    if rng.below(2) == 0 {
                        m.group = Some(format!("g{}", rng.below(3)));
                    }
                    if rng.below(2) == 0 {
                        m.priority = Some(1 + rng.below(3) as u8);
                    }
                    m
                })
                .collect();
            let _ = engine.put(q, batch);
        }
        9..=11 => {
            let mut opts = ReceiveOptions::now(1 + rng.below(4) as u32);
            if rng.below(4) == 0 {
                opts.visibility_ms = Some(0);
            }
            if rng.below(5) == 0 {
                opts.channel = Some(ChannelFilter::Prefix("ch".into()));
            }
            let from = Address {
                queue: q,
                dlq: rng.below(5) == 0,
            };
            if let Ok(ms) = engine.receive_now(from, &opts) {
                receipts.extend(
                    ms.iter()
                        .filter_map(|m| m.receipt)
                        .map(|r| (q.to_owned(), r)),
                );
            }
            let _ = addr;
        }
        12 if !receipts.is_empty() => {
            let (q, r) = receipts.swap_remove(rng.below(receipts.len() as u64) as usize);
            if rng.below(2) == 0 {
                // Released as failed: its retry, if its queue has a policy.
                let why = if rng.below(2) == 0 { "bad input" } else { "" };
                let _ = engine.release(Address::queue(&q), &[r], why, "a handler failed");
            } else {
                // Updated: new content (or none), its lease renewed or
                // (a timeout of 0) ended.
                let content = format!("updated-{}", rng.next_u64());
                let payload = (rng.below(3) != 0).then_some(content.as_bytes());
                let timeout = [0, 5_000, 60_000][rng.below(3) as usize];
                if let Ok(u) = engine.update_message(Address::queue(&q), &r, payload, timeout) {
                    receipts.extend(u.receipt.map(|r| (q.clone(), r)));
                }
            }
        }
        13 if !receipts.is_empty() => {
            let (q, r) = receipts.swap_remove(rng.below(receipts.len() as u64) as usize);
            let _ = engine.delete(Address::queue(&q), &[r]);
            let _ = engine.delete(
                Address {
                    queue: &q,
                    dlq: true,
                },
                &[r],
            );
        }
        14 if !receipts.is_empty() => {
            let (q, r) = receipts.swap_remove(rng.below(receipts.len() as u64) as usize);
            let _ = engine.defer(&q, &r);
        }
        15 if !receipts.is_empty() => {
            let (q, r) = receipts.swap_remove(rng.below(receipts.len() as u64) as usize);
            let _ = engine.dead_letter(&q, &r, "bad", "worse");
        }
        16 => {
            if let Ok(ms) = engine.peek(addr, 0, 20) {
                let seqs: Vec<u64> = ms.iter().map(|m| m.seq).take(3).collect();
                if !seqs.is_empty() {
                    if let Ok(got) = engine.receive_deferred(q, &seqs, None) {
                        receipts.extend(
                            got.into_iter()
                                .flatten()
                                .filter_map(|m| m.receipt)
                                .map(|r| (q.to_owned(), r)),
                        );
                    }
                    let _ = engine.cancel_scheduled(q, seqs[0]);
                }
            }
        }
        17 => match some_filter(rng) {
            None => {
                let _ = engine.redrive(q, Some(1 + rng.below(3)), None);
            }
            Some(f) => {
                let _ = engine.redrive_where(q, Some(1 + rng.below(3)), Some(1), f);
            }
        },
        18 if rng.below(2) == 0 => {
            // A move out of the queue: back to each message's source, or
            // to another queue, paced so it runs across ticks (and
            // restarts).
            let to = (rng.below(2) == 0)
                .then(|| QUEUES[rng.below(QUEUES.len() as u64) as usize].to_owned())
                .filter(|t| t != q);
            let rate = Some(1 + rng.below(2) as u32);
            let _ = match some_filter(rng) {
                None => engine.start_move(q, to, None, rate),
                Some(f) => engine.start_move_where(q, to, None, rate, f),
            };
        }
        18 => {
            if let Ok(tasks) = engine.moves(q) {
                if let Some(t) = tasks.last() {
                    let _ = engine.cancel_move(q, t.id);
                }
            }
        }
        _ => {
            clock.advance(rng.below(40_000));
            engine.tick();
        }
    }
}

/// A move's filter, a third of the time none (its conditions, kept in
/// the log and snapshots, are what matters here, not what they take).
fn some_filter(rng: &mut Rng) -> Option<fila_core::MoveFilter> {
    let f = fila_core::MoveFilter::default();
    match rng.below(3) {
        0 => None,
        1 => Some(fila_core::MoveFilter {
            reason: Some("max_deliveries".into()),
            text: (rng.below(2) == 0).then(|| "x".into()),
            ..f
        }),
        _ => Some(fila_core::MoveFilter {
            attributes: vec![("k".into(), "v".into()), ("n".into(), String::new())],
            since_ms: Some(T0 + rng.below(100_000)),
            until_ms: (rng.below(2) == 0).then_some(T0 + 200_000),
            ..f
        }),
    }
}

#[test]
fn a_recovered_engine_holds_what_the_events_said() {
    for seed in 1..=runs(60) {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let clock = ManualClock::new(T0);
        let mut disk = SimDisk::new(seed);
        let mut receipts = Vec::new();
        // Small compaction threshold so snapshots happen mid-run, taken in
        // pieces of a few messages while the operations go on.
        let options = StoreOptions {
            compact_min_bytes: 2_000 + rng.below(20_000),
            compact_ratio: 1,
            segment_bytes: 4_096,
            snapshot_piece_messages: 1 + rng.below(4) as usize,
            ..StoreOptions::default()
        };
        for life in 0..3 {
            let engine = Arc::new(Engine::new(3, Arc::new(clock.clone())));
            let (store, _) = Store::open(disk, engine.clone(), options, Hooks::default())
                .unwrap_or_else(|e| panic!("seed {seed} life {life}: {e}"));
            receipts.clear();
            for _ in 0..300 {
                step(&engine, &clock, &mut rng, &mut receipts);
            }
            // A restart ends every lease.
            let want = without_leases(normal(engine.export(|| {}).unwrap(), clock.now_ms()));
            disk = store.stop().expect("writer ran");
            disk.crash();
            let again = Arc::new(Engine::new(3, Arc::new(clock.clone())));
            let (store, _) = Store::open(disk, again.clone(), options, Hooks::default())
                .unwrap_or_else(|e| panic!("seed {seed} life {life}: {e}"));
            let got = without_leases(normal(again.export(|| {}).unwrap(), clock.now_ms()));
            assert_eq!(got, want, "seed {seed} life {life}");
            disk = store.stop().expect("writer ran");
        }
    }
}

/// Applies each event, through its encoding, to a shared [`Replay`].
struct Applier(Arc<Mutex<Replay>>);

impl EventSink for Applier {
    fn record(&mut self, event: &Event<'_>) {
        let mut body = Vec::new();
        let kind = encode_event(event, &mut body);
        self.0
            .lock()
            .unwrap()
            .apply(decode(kind, &body).expect("a record decodes"));
    }
}

/// Seeds to run: `REPLAY_RUNS`, else `default`.
fn runs(default: u64) -> u64 {
    std::env::var("REPLAY_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Sends every shard's events to `replay`.
fn journal_into(engine: &Engine, replay: &Arc<Mutex<Replay>>) {
    for shard in 0..engine.shard_count() {
        engine.set_journal(shard, Some(Box::new(Applier(replay.clone()))));
    }
}

/// Seed `seed`'s random source, and an engine of three shards on a
/// manual clock whose events go to the replay answered.
fn seeded(seed: u64) -> (Rng, ManualClock, Engine, Arc<Mutex<Replay>>) {
    let rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let clock = ManualClock::new(T0);
    let engine = Engine::new(3, Arc::new(clock.clone()));
    let replay = Arc::new(Mutex::new(Replay::default()));
    journal_into(&engine, &replay);
    (rng, clock, engine, replay)
}

/// The events so far (in `replay`) rebuild exactly the engine's state.
fn assert_rebuilt(engine: &Engine, replay: &Mutex<Replay>, now: u64, what: &str) {
    let want = normal(engine.export(|| {}).unwrap(), now);
    let mut replay = replay.lock().unwrap();
    let got = normal(std::mem::take(&mut *replay).into_image(), now);
    assert_eq!(got, want, "{what}");
    *replay = Replay::from_image(got);
}

#[test]
fn after_every_step_the_events_so_far_rebuild_the_state() {
    for seed in 1..=runs(40) {
        let (mut rng, clock, engine, replay) = seeded(seed);
        let mut receipts = Vec::new();
        for i in 0..400 {
            step(&engine, &clock, &mut rng, &mut receipts);
            assert_rebuilt(
                &engine,
                &replay,
                clock.now_ms(),
                &format!("seed {seed} step {i}"),
            );
        }
    }
}

#[test]
fn a_restored_engine_keeps_logging_what_rebuilds_it() {
    for seed in 1..=200u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let clock = ManualClock::new(T0);
        let mut engine = Engine::new(3, Arc::new(clock.clone()));
        let replay = Arc::new(Mutex::new(Replay::default()));
        journal_into(&engine, &replay);
        let mut receipts = Vec::new();
        for i in 0..600 {
            if i % 150 == 149 {
                let image = engine.export(|| {}).unwrap();
                engine = Engine::new(3, Arc::new(clock.clone()));
                engine.restore(image).unwrap();
                // A restore ends every lease (no event says so): the
                // replay's leases end with them.
                let mut r = replay.lock().unwrap();
                *r = Replay::from_image(without_leases(std::mem::take(&mut *r).into_image()));
                drop(r);
                journal_into(&engine, &replay);
                receipts.clear();
            }
            step(&engine, &clock, &mut rng, &mut receipts);
            assert_rebuilt(
                &engine,
                &replay,
                clock.now_ms(),
                &format!("seed {seed} step {i}"),
            );
        }
    }
}

/// Records as (kind, body).
type Records = Vec<(u8, Vec<u8>)>;

/// Keeps every event's record, in order.
struct Recorder(Arc<Mutex<Records>>);

impl EventSink for Recorder {
    fn record(&mut self, event: &Event<'_>) {
        let mut body = Vec::new();
        let kind = encode_event(event, &mut body);
        self.0.lock().unwrap().push((kind, body));
    }
}

fn replayed(records: &Records) -> EngineImage {
    let mut replay = Replay::default();
    for (kind, body) in records {
        replay.apply(decode(*kind, body).expect("a record decodes"));
    }
    replay.into_image()
}

/// A dead letter forwarded to a queue of another shard is one record in
/// the target's stream; a crash can keep it and tear off the put before
/// it. The source's later puts must not get the moved message's sequence
/// number again, or the next replay skips them as the put the move
/// overtook.
#[test]
fn a_move_whose_put_was_torn_off_never_gives_its_sequence_number_again() {
    let clock = ManualClock::new(T0);
    let log = Arc::new(Mutex::new(Vec::new()));
    let engine = Engine::new(2, Arc::new(clock.clone()));
    // "b" and "c" are on different shards of 2.
    assert_ne!(
        fila_core::shard_of("b", 2),
        fila_core::shard_of("c", 2),
        "the test needs the two queues on different shards"
    );
    for shard in 0..2 {
        engine.set_journal(shard, Some(Box::new(Recorder(log.clone()))));
    }
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
    let put = log.lock().unwrap().len();
    let first = engine.put("b", vec![NewMessage::new("first")]).unwrap()[0]
        .clone()
        .unwrap();
    let got = engine
        .receive_now(Address::queue("b"), &ReceiveOptions::now(1))
        .unwrap();
    engine
        .dead_letter("b", &got[0].receipt.unwrap(), "r", "d")
        .unwrap();
    // The crash keeps the forward and loses the put.
    let mut records = log.lock().unwrap().clone();
    assert_eq!(records[put].0, fila_store::codec::kind::STORED);
    records.remove(put);

    // The restarted server takes and acknowledges new puts.
    let engine = Engine::new(2, Arc::new(clock.clone()));
    engine.restore(replayed(&records)).unwrap();
    let log = Arc::new(Mutex::new(records));
    for shard in 0..2 {
        engine.set_journal(shard, Some(Box::new(Recorder(log.clone()))));
    }
    let later: Vec<_> = engine
        .put(
            "b",
            (0..3)
                .map(|i| NewMessage::new(format!("later {i}")))
                .collect(),
        )
        .unwrap()
        .into_iter()
        .map(|a| a.unwrap())
        .collect();
    assert!(
        later.iter().all(|a| a.seq > first.seq && a.id != first.id),
        "a new put got the moved message's number again: {later:?} after {first:?}"
    );

    // The next restart keeps them all.
    let image = replayed(&log.lock().unwrap());
    let b = image.queues.iter().find(|q| q.name == "b").unwrap();
    let mut seqs: Vec<u64> = b.messages.iter().map(|m| m.seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, later.iter().map(|a| a.seq).collect::<Vec<_>>());
}

/// Each shard's records in a buffer of its own, as the journal keeps them.
struct ShardRecorder(Arc<Mutex<Vec<Records>>>, usize);

impl EventSink for ShardRecorder {
    fn record(&mut self, event: &Event<'_>) {
        let mut body = Vec::new();
        let kind = encode_event(event, &mut body);
        self.0.lock().unwrap()[self.1].push((kind, body));
    }
}

/// A snapshot taken a piece at a time while the engine keeps changing,
/// the log built the way the writer builds it: each shard's buffer taken
/// in turn, with operations between two shards' turns (so a dead letter
/// forwarded to a later shard can be taken before the put it moved), but
/// the snapshot's LSN taken with every shard's buffer drained at once
/// (the writer stops the owners for it); random operations go on between
/// pieces of a message or three; the pieces (through their encoding) and
/// the records after the snapshot's LSN, replayed over them, rebuild
/// exactly the engine's final state.
#[test]
fn a_snapshot_taken_in_pieces_while_the_engine_changes_rebuilds_it() {
    for seed in 1..=runs(200) {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let clock = ManualClock::new(T0);
        let engine = Engine::new(3, Arc::new(clock.clone()));
        let buffers = Arc::new(Mutex::new(vec![Vec::new(); engine.shard_count()]));
        for shard in 0..engine.shard_count() {
            engine.set_journal(shard, Some(Box::new(ShardRecorder(buffers.clone(), shard))));
        }
        let mut log: Records = Vec::new();
        let mut receipts = Vec::new();
        // The writer's drain: each shard's buffer in turn, operations
        // between two shards' turns.
        let drain = |log: &mut Records, rng: &mut Rng, receipts: &mut Vec<_>| {
            for shard in 0..engine.shard_count() {
                log.append(&mut buffers.lock().unwrap()[shard]);
                for _ in 0..rng.below(6) {
                    step(&engine, &clock, rng, receipts);
                }
            }
        };
        for _ in 0..100 + rng.below(150) {
            step(&engine, &clock, &mut rng, &mut receipts);
            if rng.below(4) == 0 {
                drain(&mut log, &mut rng, &mut receipts);
            }
        }
        // The snapshot begins with every shard's buffer taken while none
        // changes: its LSN is a consistent cut.
        for shard in 0..engine.shard_count() {
            log.append(&mut buffers.lock().unwrap()[shard]);
        }
        let lsn = log.len();
        let mut body = Vec::new();
        fila_store::codec::encode_snapshot_start(&mut body);
        let mut cursor = fila_core::event::ExportCursor::default();
        while !cursor.done {
            let max = 1 + rng.below(3) as usize;
            for part in engine.export_piece(&mut cursor, max, u64::MAX) {
                fila_store::codec::encode_part(&part, &mut body);
            }
            for _ in 0..rng.below(8) {
                step(&engine, &clock, &mut rng, &mut receipts);
            }
            if rng.below(3) == 0 {
                drain(&mut log, &mut rng, &mut receipts);
            }
        }
        fila_store::codec::encode_snapshot_end(engine.totals().next_queue_id(), &mut body);
        for shard in 0..engine.shard_count() {
            log.append(&mut buffers.lock().unwrap()[shard]);
        }
        let mut replay = Replay::default();
        fila_store::codec::read_snapshot(&mut &body[..], &mut replay).unwrap();
        for (kind, record) in &log[lsn..] {
            replay.apply(decode(*kind, record).unwrap());
        }
        let now = clock.now_ms();
        let want = normal(engine.export(|| {}).unwrap(), now);
        let got = normal(replay.into_image(), now);
        assert_eq!(got, want, "seed {seed}");
    }
}

#[test]
fn a_queue_record_of_the_first_format_reads_with_the_new_fields_empty() {
    // kind 1 (QUEUE_SET) as versions before the settings' extension wrote
    // it: id, name, then the ten settings fields.
    let mut body = Vec::new();
    body.extend_from_slice(&7u32.to_be_bytes());
    body.extend_from_slice(&1u32.to_be_bytes());
    body.push(b'q');
    body.extend_from_slice(&30_000u64.to_be_bytes());
    body.extend_from_slice(&5u32.to_be_bytes());
    body.extend_from_slice(&604_800_000u64.to_be_bytes());
    body.extend_from_slice(&(256u32 << 10).to_be_bytes());
    body.extend_from_slice(&30_000u64.to_be_bytes());
    body.push(0);
    body.push(0);
    body.extend_from_slice(&10_000_000u64.to_be_bytes());
    body.extend_from_slice(&(1u64 << 30).to_be_bytes());
    body.push(100);
    let op = decode(fila_store::codec::kind::QUEUE_SET, &body).unwrap();
    let fila_store::codec::Op::QueueSet {
        queue,
        name,
        settings,
        times,
    } = op
    else {
        panic!("not a queue record: {op:?}");
    };
    assert_eq!((queue, name.as_str()), (7, "q"));
    assert_eq!(settings, QueueSettings::default());
    assert_eq!(times, fila_core::QueueTimes::default());
    // A record of the new format carries what the old one could not.
    let s = QueueSettings {
        delay_ms: 900,
        redrive_allow: Some("{}".into()),
        tags: vec![("a".into(), "b".into())],
        dedup_window_ms: 12_345,
        content_dedup: true,
        ..QueueSettings::default()
    };
    let t = fila_core::QueueTimes {
        created_at_ms: 1,
        modified_at_ms: 2,
    };
    let mut out = Vec::new();
    let kind = encode_event(
        &Event::QueueSet {
            queue: 7,
            name: "q",
            settings: &s,
            times: t,
        },
        &mut out,
    );
    assert_eq!(kind, fila_store::codec::kind::QUEUE_SET_3);
    assert_eq!(
        decode(kind, &out).unwrap(),
        fila_store::codec::Op::QueueSet {
            queue: 7,
            name: "q".into(),
            settings: s,
            times: t,
        }
    );
}

#[test]
fn a_running_move_task_survives_a_restart_and_finishes() {
    let clock = ManualClock::new(T0);
    let disk = SimDisk::new(7);
    let options = StoreOptions::default();
    let engine = Arc::new(Engine::new(3, Arc::new(clock.clone())));
    let (store, _) = Store::open(disk, engine.clone(), options, Hooks::default()).unwrap();
    engine
        .create_queue("dlq", QueueSettings::default())
        .unwrap();
    engine
        .create_queue(
            "src",
            QueueSettings {
                dead_letter_target: Some("dlq".into()),
                ..QueueSettings::default()
            },
        )
        .unwrap();
    let batch = (0..3)
        .map(|i| NewMessage {
            attributes: vec![("n".into(), (i % 2).to_string())],
            ..NewMessage::new(Bytes::from(format!("m{i}")))
        })
        .collect();
    engine.put("src", batch).unwrap();
    for m in engine
        .receive_now(Address::queue("src"), &ReceiveOptions::now(10))
        .unwrap()
    {
        engine
            .dead_letter("src", &m.receipt.unwrap(), "bad", "")
            .unwrap();
    }
    engine.tick();
    // Only m0 and m2, one a second: the filter is kept with the task.
    let filter = fila_core::MoveFilter {
        attributes: vec![("n".into(), "0".into())],
        ..fila_core::MoveFilter::default()
    };
    let task = engine
        .start_move_where("dlq", None, None, Some(1), filter.clone())
        .unwrap();
    engine.tick();
    assert_eq!(task.moved, 1);
    let mut disk = store.stop().expect("writer ran");
    disk.crash();
    let again = Arc::new(Engine::new(3, Arc::new(clock.clone())));
    let (store, _) = Store::open(disk, again.clone(), options, Hooks::default()).unwrap();
    let kept = again.moves("dlq").unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(
        (kept[0].moved, kept[0].status),
        (1, fila_core::MoveStatus::Running)
    );
    assert_eq!(kept[0].filter.as_deref(), Some(&filter));
    for _ in 0..3 {
        clock.advance(1_000);
        again.tick();
    }
    let done = again.moves("dlq").unwrap().pop().unwrap();
    assert_eq!(
        (done.moved, done.status),
        (2, fila_core::MoveStatus::Completed)
    );
    assert_eq!(again.stats("src").unwrap().visible, 2);
    assert_eq!(again.stats("dlq").unwrap().visible, 1, "m1 stays");
    store.stop().expect("writer ran");
}

#[test]
fn the_state_written_as_a_snapshot_from_where_it_is_held_reads_back_whole() {
    use fila_core::event::{DedupImage, ImagePart};
    use fila_store::codec::read_snapshot;
    for seed in 1..=runs(10) {
        let (mut rng, clock, engine, replay) = seeded(seed);
        let mut receipts = Vec::new();
        for _ in 0..300 {
            step(&engine, &clock, &mut rng, &mut receipts);
        }
        let replay = replay.lock().unwrap();
        if seed == 1 {
            // More deduplication keys than one frame holds: a queue's keys
            // take several frames.
            let mut more = replay.clone();
            let id = more.image().queues.first().map_or(1, |q| q.id);
            let entries: Vec<DedupImage> = (0..70_000u64)
                .map(|i| DedupImage {
                    key: u128::from(i) << 64 | 7,
                    seq: i + 1,
                    expires_at_ms: T0 + 1_000_000 + i,
                })
                .collect();
            more.apply_part(ImagePart::Dedup { queue: id, entries });
            assert!(more.image().queues.iter().any(|q| q.dedup.len() >= 70_000));
            check_snapshot(&more, seed);
        }
        check_snapshot(&replay, seed);
    }

    fn check_snapshot(replay: &Replay, seed: u64) {
        let want = normal(replay.clone().into_image(), 0);
        // The image made without taking the state apart is the same.
        assert_eq!(normal(replay.image(), 0), want, "seed {seed}: image");
        let mut body = Vec::new();
        replay.encode_snapshot(&mut body);
        let mut read = Replay::default();
        read_snapshot(&mut &body[..], &mut read).unwrap();
        assert_eq!(normal(read.into_image(), 0), want, "seed {seed}: snapshot");
    }
}
