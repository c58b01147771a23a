//! The largest single `TimingWheel::advance` (and `migrate`, the moves of
//! far timers ahead of their time that an owner makes after its timers
//! each turn) while 2 000 000 timers run out 1 ms at a time, due
//! uniformly 1–60 s ahead and then 1–10 min ahead, starting 40 s into a
//! 65.5 s slot of the wheel's level 2 (docs/benchmarks.md, "Leases in
//! flight").
//!
//! ```sh
//! cargo run --release -p fila-benches --example wheel_cascade
//! ```

use std::time::Instant;

use fila_core::wheel::TimingWheel;
use fila_core::EARLY_MOVES_PER_TURN;

fn main() {
    for (min, max) in [(1_000, 60_000), (60_000, 600_000)] {
        run(min, max);
    }
}

fn run(min: u64, max: u64) {
    const N: u32 = 2_000_000;
    let start: u64 = (1 << 16) * 1_000 + 40_000;
    let mut wheel: TimingWheel<u32> = TimingWheel::new(start);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..N {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        wheel.insert(start + min + seed % (max - min + 1), i);
    }
    let mut fired = Vec::new();
    let (mut worst_us, mut worst_at, mut total) = (0u128, 0u64, 0);
    let mut migrates = Vec::new();
    for now in start + 1..=start + max {
        let t = Instant::now();
        wheel.advance(now, &mut fired);
        let us = t.elapsed().as_micros();
        if us > worst_us {
            (worst_us, worst_at) = (us, now - start);
        }
        total += fired.len();
        fired.clear();
        if wheel.next_migration().is_some_and(|m| m <= now) {
            let t = Instant::now();
            let moved = wheel.migrate(EARLY_MOVES_PER_TURN);
            migrates.push((t.elapsed().as_micros(), moved));
        }
    }
    assert_eq!(total, N as usize, "every timer fired");
    migrates.sort_unstable();
    let moved: usize = migrates.iter().map(|m| m.1).sum();
    let at = |q: f64| {
        migrates
            .get(((migrates.len() as f64 * q) as usize).min(migrates.len().saturating_sub(1)))
            .map_or(0, |m| m.0)
    };
    println!(
        "{N} timers due {min}-{max} ms ahead: worst advance {worst_us} µs (at +{worst_at} ms); {} migrates moved {moved}, µs p50 {} / p99 {} / max {}",
        migrates.len(), at(0.5), at(0.99), at(1.0)
    );
}
