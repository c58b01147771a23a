//! The largest single `TimingWheel::advance` while 2 000 000 timers due
//! uniformly 1–60 s ahead run out, starting 40 s into a 65.5 s window of
//! the wheel's level 2: the timers past the window's end share one level-2
//! slot, cascaded in one call when its time comes (docs/benchmarks.md,
//! "Leases in flight").
//!
//! ```sh
//! cargo run --release -p fila-benches --example wheel_cascade
//! ```

use std::time::Instant;

use fila_core::wheel::TimingWheel;

fn main() {
    let start: u64 = (1 << 16) * 1_000 + 40_000;
    let mut wheel: TimingWheel<u32> = TimingWheel::new(start);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..2_000_000u32 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        wheel.insert(start + 1_000 + seed % 59_001, i);
    }
    let mut fired = Vec::new();
    let (mut worst_us, mut worst_at, mut total) = (0u128, 0u64, 0usize);
    for now in start + 1..=start + 61_000 {
        let t = Instant::now();
        wheel.advance(now, &mut fired);
        let us = t.elapsed().as_micros();
        if us > worst_us {
            (worst_us, worst_at) = (us, now - start);
        }
        total += fired.len();
        fired.clear();
    }
    assert_eq!(total, 2_000_000, "every timer fired");
    println!("worst advance: {worst_us} µs, at +{worst_at} ms (2 000 000 timers)");
}
