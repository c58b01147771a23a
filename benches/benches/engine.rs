//! `engine/lifecycle/...`: put 20 -> receive 20 -> delete 20 with 100-byte
//! payloads, in process, on one thread and on two threads (each on its own
//! queue in its own shard). Throughput is messages through the whole cycle.
//!
//! `engine/preview/...`: one preview of a filtered move over a queue of
//! 10 000 messages with attributes (a whole bounded look, the most one
//! call does), with a filter on an attribute, or on text that no message
//! has: what one preview costs the loop that serves it. Throughput is
//! index entries looked at.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fila_benches::{engine_with_queues, payload_100};
use fila_core::{
    Address, Engine, MoveFilter, NewMessage, QueueSettings, Receipt, ReceiveOptions,
    PREVIEW_LOOK_MAX,
};

fn cycle(
    engine: &Engine,
    queue: &str,
    payload: &bytes::Bytes,
    opts: &ReceiveOptions,
    receipts: &mut Vec<Receipt>,
) {
    let batch: Vec<NewMessage> = (0..20).map(|_| NewMessage::new(payload.clone())).collect();
    let put = engine.put(queue, batch).unwrap();
    debug_assert!(put.iter().all(|p| p.is_ok()));
    let got = engine.receive_now(Address::queue(queue), opts).unwrap();
    assert_eq!(got.len(), 20);
    receipts.clear();
    receipts.extend(got.iter().map(|m| m.receipt.unwrap()));
    let deleted = engine.delete(Address::queue(queue), receipts).unwrap();
    black_box(deleted);
}

fn lifecycle(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine");
    let opts = ReceiveOptions::now(20);
    g.throughput(Throughput::Elements(20));
    g.bench_function("lifecycle/1thread/batch20", |b| {
        let (engine, queues) = engine_with_queues(1);
        let payload = payload_100();
        let mut receipts = Vec::with_capacity(20);
        b.iter(|| cycle(&engine, &queues[0], &payload, &opts, &mut receipts));
    });
    g.throughput(Throughput::Elements(40));
    g.bench_function("lifecycle/2threads/batch20", |b| {
        let (engine, queues) = engine_with_queues(2);
        b.iter_custom(|iters| {
            let barrier = Barrier::new(2);
            let times: Vec<Duration> = std::thread::scope(|s| {
                let handles: Vec<_> = queues
                    .iter()
                    .map(|q| {
                        let (engine, opts, barrier) = (&engine, &opts, &barrier);
                        s.spawn(move || {
                            // Each producer has its own buffer, as each
                            // connection would: no shared refcount.
                            let payload = &payload_100();
                            let mut receipts = Vec::with_capacity(20);
                            barrier.wait();
                            let start = Instant::now();
                            for _ in 0..iters {
                                cycle(engine, q, payload, opts, &mut receipts);
                            }
                            start.elapsed()
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            times.into_iter().max().unwrap()
        });
    });
    g.finish();
}

/// An engine whose queue "q" holds [`PREVIEW_LOOK_MAX`] messages of 100
/// bytes, message i with attributes tenant = i mod 10 and kind "job".
fn previewed_queue() -> Engine {
    let engine = Engine::new(1, std::sync::Arc::new(fila_core::SystemClock));
    engine.create_queue("q", QueueSettings::default()).unwrap();
    let payload = payload_100();
    for start in (0..PREVIEW_LOOK_MAX).step_by(20) {
        let batch = (start..start + 20)
            .map(|i| NewMessage {
                attributes: vec![
                    ("tenant".into(), (i % 10).to_string()),
                    ("kind".into(), "job".into()),
                ],
                ..NewMessage::new(payload.clone())
            })
            .collect();
        for r in engine.put("q", batch).unwrap() {
            r.unwrap();
        }
    }
    engine
}

fn preview(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine");
    g.throughput(Throughput::Elements(PREVIEW_LOOK_MAX));
    let engine = previewed_queue();
    let by_attribute = MoveFilter {
        attributes: vec![("tenant".into(), "3".into())],
        ..MoveFilter::default()
    };
    let by_text = MoveFilter {
        text: Some("upstream 504".into()),
        ..MoveFilter::default()
    };
    for (name, filter, matched) in [
        ("preview/10k/attribute", by_attribute, PREVIEW_LOOK_MAX / 10),
        ("preview/10k/text", by_text, 0),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let p = engine.preview_move("q", false, false, &filter, 0).unwrap();
                assert_eq!(p.matched, matched);
                black_box(p)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, lifecycle, preview);
criterion_main!(benches);
