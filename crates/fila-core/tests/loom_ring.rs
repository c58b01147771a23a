//! Loom models of the visible ring: every interleaving of concurrent pushes
//! and pops on a small ring. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p fila-core --release --test loom_ring`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;

use fila_core::ring::ReadyRing;

#[test]
fn two_producers_one_consumer_lose_and_duplicate_nothing() {
    loom::model(|| {
        let ring = Arc::new(ReadyRing::with_capacity(2));
        let producers: Vec<_> = [10u64, 20]
            .into_iter()
            .map(|base| {
                let ring = ring.clone();
                thread::spawn(move || {
                    let mut refused = Vec::new();
                    for v in [base, base + 1] {
                        if let Err(v) = ring.push(v) {
                            refused.push(v);
                        }
                    }
                    refused
                })
            })
            .collect();
        let mut popped = Vec::new();
        for _ in 0..2 {
            if let Some(v) = ring.pop() {
                popped.push(v);
            }
        }
        let mut refused: Vec<u64> = producers
            .into_iter()
            .flat_map(|p| p.join().unwrap())
            .collect();
        while let Some(v) = ring.pop() {
            popped.push(v);
        }
        // Each producer's values come out in its order.
        for base in [10, 20] {
            let mine: Vec<u64> = popped
                .iter()
                .copied()
                .filter(|v| v / 10 == base / 10)
                .collect();
            assert!(mine.windows(2).all(|w| w[0] < w[1]), "{popped:?}");
        }
        popped.append(&mut refused);
        popped.sort_unstable();
        assert_eq!(popped, vec![10, 11, 20, 21], "every value exactly once");
    });
}

#[test]
fn two_consumers_never_take_the_same_value() {
    loom::model(|| {
        let ring = Arc::new(ReadyRing::with_capacity(2));
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || {
                let mut pushed = Vec::new();
                for v in 1..=3u64 {
                    if ring.push(v).is_ok() {
                        pushed.push(v);
                    }
                }
                pushed
            })
        };
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let ring = ring.clone();
                thread::spawn(move || ring.pop())
            })
            .collect();
        let mut taken: Vec<u64> = consumers
            .into_iter()
            .filter_map(|c| c.join().unwrap())
            .collect();
        let pushed = producer.join().unwrap();
        while let Some(v) = ring.pop() {
            taken.push(v);
        }
        taken.sort_unstable();
        assert_eq!(taken, pushed, "taken once each, nothing invented");
    });
}
