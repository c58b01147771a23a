//! `replay/lifecycle/...`: what a cluster replica's state machine does
//! for each committed entry — decode each record of a batch and apply it
//! to a `Replay` — over the records an engine made for a lifecycle: with
//! 100 000 messages of 100 bytes resident, 100 000 more are put 20 at a
//! time, received 20 at a time (the oldest) and deleted. Throughput is
//! messages through their lifecycle (three records each: stored,
//! delivered, removed).

use std::hint::black_box;
use std::sync::{Arc, Mutex};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use fila_core::event::{Event, EventSink};
use fila_core::{Address, Engine, ManualClock, NewMessage, QueueSettings, ReceiveOptions};
use fila_store::codec::{batch_push, batch_records, decode};
use fila_store::replay::Replay;

const RESIDENT: usize = 100_000;
const CYCLED: usize = 100_000;
const BATCH: usize = 20;

/// An engine's records, one batch per operation.
struct Capture(Arc<Mutex<Vec<Vec<u8>>>>, Vec<u8>);

impl EventSink for Capture {
    fn record(&mut self, event: &Event<'_>) {
        batch_push(event, &mut self.1);
    }
    fn publish(&mut self) {
        if !self.1.is_empty() {
            let batch = std::mem::take(&mut self.1);
            self.0.lock().unwrap().push(batch);
        }
    }
}

fn apply(replay: &mut Replay, batches: &[Vec<u8>]) {
    for b in batches {
        for record in batch_records(b) {
            let (kind, body) = record.unwrap();
            replay.apply(decode(kind, body).unwrap());
        }
    }
}

/// The batches that fill the queue, and those of the lifecycle after.
fn batches() -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let engine = Engine::new(1, clock.clone());
    let out = Arc::new(Mutex::new(Vec::new()));
    engine.set_journal(0, Some(Box::new(Capture(out.clone(), Vec::new()))));
    let settings = QueueSettings {
        visibility_timeout_ms: 3_600_000,
        ..QueueSettings::default()
    };
    engine.create_queue("q", settings).unwrap();
    let body = vec![b'x'; 100];
    let put = |n: usize| {
        let msgs = (0..n).map(|_| NewMessage::new(body.clone())).collect();
        engine.put("q", msgs).unwrap();
    };
    for _ in 0..RESIDENT / BATCH {
        put(BATCH);
    }
    let fill = std::mem::take(&mut *out.lock().unwrap());
    for _ in 0..CYCLED / BATCH {
        put(BATCH);
        let got = engine
            .receive_now(Address::queue("q"), &ReceiveOptions::now(BATCH as u32))
            .unwrap();
        let receipts: Vec<_> = got.iter().filter_map(|m| m.receipt).collect();
        assert_eq!(receipts.len(), BATCH);
        engine.delete(Address::queue("q"), &receipts).unwrap();
    }
    let cycle = std::mem::take(&mut *out.lock().unwrap());
    (fill, cycle)
}

fn lifecycle(c: &mut Criterion) {
    let (fill, cycle) = batches();
    let mut filled = Replay::default();
    apply(&mut filled, &fill);
    assert_eq!(filled.message_count(), RESIDENT);
    let mut g = c.benchmark_group("replay");
    g.sample_size(10);
    g.throughput(Throughput::Elements(CYCLED as u64));
    g.bench_function("lifecycle/100k_resident", |b| {
        b.iter_batched(
            || filled.clone(),
            |mut replay| {
                apply(&mut replay, black_box(&cycle));
                assert_eq!(replay.message_count(), RESIDENT);
                replay
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, lifecycle);
criterion_main!(benches);
