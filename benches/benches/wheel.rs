//! `wheel/insert_expire/N`: the cost of one timer insert plus one expiry
//! with N timers pending. The wheel holds N timers with deadlines spread over
//! the next N ms; each iteration inserts one timer N ms ahead and advances
//! the clock 1 ms, which fires about one. Flat figures across N are the goal.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fila_core::wheel::TimingWheel;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn sizes() -> Vec<u64> {
    // FILA_BENCH_QUICK keeps CI's smoke run small.
    if std::env::var_os("FILA_BENCH_QUICK").is_some() {
        vec![1_000]
    } else {
        vec![1_000, 100_000, 10_000_000]
    }
}

fn wheel(c: &mut Criterion) {
    let mut g = c.benchmark_group("wheel");
    g.throughput(Throughput::Elements(1));
    for n in sizes() {
        g.bench_with_input(BenchmarkId::new("insert_expire", n), &n, |b, &n| {
            let mut rng = Rng(0x2545_F491_4F6C_DD1D);
            let mut now = 1_000_000u64;
            let mut wheel: TimingWheel<u64> = TimingWheel::new(now);
            wheel.reserve(n as usize + 1024);
            for i in 0..n {
                wheel.insert(now + 1 + rng.next() % n, i);
            }
            let mut fired = Vec::with_capacity(1024);
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut expired = 0u64;
                let start = Instant::now();
                for i in 0..iters {
                    wheel.insert(now + 1 + rng.next() % n, i);
                    now += 1;
                    fired.clear();
                    wheel.advance(now, &mut fired);
                    expired += fired.len() as u64;
                }
                total += start.elapsed();
                black_box(expired);
                total
            });
            assert!(wheel.len() as u64 > n / 2, "the wheel stayed loaded");
        });
    }
    g.finish();
}

criterion_group!(benches, wheel);
criterion_main!(benches);
