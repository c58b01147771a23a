//! `wheel/<scenario>/N`: the cost of one timer insert plus one expiry with N
//! timers pending. Each iteration inserts one timer and advances the clock
//! 1 ms, which fires about one, so about N stay pending.
//!
//! - `fixed_timeout`: every timer is set N ms ahead, as leases with one
//!   visibility timeout are; timers fire in the order they were set.
//! - `fixed_timeout_lane`: the same through `insert_in_lane` (the engine sets
//!   leases and put-time expiries this way): the timers wait in their
//!   delay's lane, only its head on the wheel.
//! - `random_timeout`: deadlines spread uniformly over the next 1.5 N ms, the
//!   worst case for memory locality.
//!
//! Flat figures across N are the goal.

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
    // FILA_BENCH_QUICK keeps a smoke run small.
    if std::env::var_os("FILA_BENCH_QUICK").is_some() {
        vec![1_000]
    } else {
        vec![1_000, 100_000, 10_000_000]
    }
}

type Deadline = fn(&mut Rng, u64, u64) -> u64;

/// How a timer goes in: `insert`, or `insert_in_lane` with its delay.
#[derive(Clone, Copy)]
enum How {
    Wheel,
    Lane,
}

fn insert(wheel: &mut TimingWheel<u64>, how: How, now: u64, deadline: u64, value: u64) {
    match how {
        How::Wheel => {
            wheel.insert(deadline, value);
        }
        How::Lane => {
            wheel.insert_in_lane(deadline, deadline - now, value);
        }
    }
}

/// `prefill(rng, i, n)` is the i-th pending timer's distance from now at the
/// start; `deadline(rng, now, n)` the deadline of a timer set at `now`.
fn run(c: &mut Criterion, scenario: &str, how: How, prefill: Deadline, deadline: Deadline) {
    let mut g = c.benchmark_group("wheel");
    g.throughput(Throughput::Elements(1));
    for n in sizes() {
        g.bench_with_input(BenchmarkId::new(scenario, n), &n, |b, &n| {
            let mut rng = Rng(0x2545_F491_4F6C_DD1D);
            let start = 1_700_000_000_000u64;
            let mut wheel: TimingWheel<u64> = TimingWheel::new(start);
            wheel.reserve(n as usize + 1024);
            for i in 0..n {
                // The pending timers were set over the last N ms.
                let set_at = start - n + i + 1;
                let d = start + prefill(&mut rng, i, n);
                insert(&mut wheel, how, set_at.min(d), d, i);
            }
            let mut now = start;
            let mut fired = Vec::with_capacity(1024);
            b.iter_custom(|iters| {
                let mut expired = 0u64;
                let begin = Instant::now();
                for i in 0..iters {
                    insert(&mut wheel, how, now, deadline(&mut rng, now, n), i);
                    now += 1;
                    fired.clear();
                    wheel.advance(now, &mut fired);
                    expired += fired.len() as u64;
                }
                let took: Duration = begin.elapsed();
                black_box(expired);
                took
            });
            assert!(
                wheel.len() as u64 > n / 2,
                "the wheel stayed loaded: {} of {n}",
                wheel.len()
            );
        });
    }
    g.finish();
}

fn wheel(c: &mut Criterion) {
    run(
        c,
        "fixed_timeout",
        How::Wheel,
        |_, i, _| i + 1,
        |_, now, n| now + n,
    );
    run(
        c,
        "fixed_timeout_lane",
        How::Lane,
        |_, i, _| i + 1,
        |_, now, n| now + n,
    );
    run(
        c,
        "random_timeout",
        How::Wheel,
        |rng, _, n| 1 + rng.next() % n,
        |rng, now, n| now + 1 + n / 2 + rng.next() % n,
    );
}

criterion_group!(benches, wheel);
criterion_main!(benches);
