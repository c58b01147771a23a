//! The loop of `wheel/random_timeout/10000000` (benches/benches/wheel.rs)
//! as a plain program, to profile the wheel after the fill:
//!
//! ```sh
//! cargo build --release -p fila-benches --example wheel_profile
//! perf record -e cpu-clock -F 2999 -D 1000 -- target/release/examples/wheel_profile
//! ```
//!
//! Fills a wheel with 10⁷ timers due over the next 10⁷ ms, then runs 3·10⁷
//! steps of one insert (due 0.5·10⁷ to 1.5·10⁷ ms ahead) and a 1 ms
//! advance, and prints the time a step took.

use std::time::Instant;

use fila_core::wheel::TimingWheel;

fn main() {
    let n: u64 = 10_000_000;
    let steps: u64 = 30_000_000;
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut rng = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let start = 1_700_000_000_000u64;
    let mut wheel: TimingWheel<u64> = TimingWheel::new(start);
    wheel.reserve(n as usize + 1024);
    for i in 0..n {
        wheel.insert(start + 1 + rng() % n, i);
    }
    let began = Instant::now();
    let mut now = start;
    let mut fired = Vec::with_capacity(1024);
    let mut expired = 0usize;
    for i in 0..steps {
        wheel.insert(now + 1 + n / 2 + rng() % n, i);
        now += 1;
        fired.clear();
        wheel.advance(now, &mut fired);
        expired += fired.len();
    }
    let ns = began.elapsed().as_nanos() as f64 / steps as f64;
    println!(
        "{ns:.1} ns a step; {expired} fired, {} pending",
        wheel.len()
    );
}
