//! `ring/...`: the visible ring, pushing and popping handles.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fila_core::ring::ReadyRing;

fn ring(c: &mut Criterion) {
    let mut g = c.benchmark_group("ring");
    g.throughput(Throughput::Elements(20));
    g.bench_function("push_pop/batch20", |b| {
        let mut ring = ReadyRing::with_capacity(1024);
        b.iter(|| {
            for i in 0..20u64 {
                ring.push(black_box(i)).unwrap();
            }
            for _ in 0..20 {
                black_box(ring.pop());
            }
        })
    });
    g.bench_function("push_or_grow_pop/batch20", |b| {
        let mut ring = ReadyRing::default();
        b.iter(|| {
            for i in 0..20u64 {
                ring.push_or_grow(black_box(i));
            }
            for _ in 0..20 {
                black_box(ring.pop());
            }
        })
    });
    g.finish();
}

criterion_group!(benches, ring);
criterion_main!(benches);
