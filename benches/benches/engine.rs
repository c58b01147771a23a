//! `engine/lifecycle/...`: put 20 -> receive 20 -> delete 20 with 100-byte
//! payloads, in process, on one thread and on two threads (each on its own
//! queue in its own shard). Throughput is messages through the whole cycle.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fila_benches::{engine_with_queues, payload_100};
use fila_core::{Address, Engine, NewMessage, Receipt, ReceiveOptions};

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

criterion_group!(benches, lifecycle);
criterion_main!(benches);
