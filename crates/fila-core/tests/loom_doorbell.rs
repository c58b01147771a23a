//! Loom model of the doorbell as the server's event loops use it: two
//! producers hand work to one consumer (a count standing for the hand-off
//! queue, with release and acquire only, weaker than the real queue) and
//! ring the doorbell; the consumer says it is about to sleep, looks once
//! more, and blocks only when it saw nothing. In every interleaving, a
//! consumer that blocked is woken. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p fila-core --release --test loom_doorbell`.
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use fila_core::doorbell::Doorbell;

#[test]
fn a_consumer_that_blocks_is_always_woken() {
    loom::model(|| {
        let bell = Arc::new(Doorbell::new());
        let queued = Arc::new(AtomicUsize::new(0));
        let wakes = Arc::new(AtomicUsize::new(0));
        let producers: Vec<_> = (0..2)
            .map(|_| {
                let (bell, queued, wakes) = (bell.clone(), queued.clone(), wakes.clone());
                thread::spawn(move || {
                    queued.fetch_add(1, Ordering::Release);
                    if bell.must_wake() {
                        wakes.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        // The consumer's turn: about to sleep, one more look.
        bell.about_to_sleep();
        let seen = queued.load(Ordering::Acquire);
        let blocked = seen < 2;
        if !blocked {
            bell.awake();
        }
        for p in producers {
            p.join().unwrap();
        }
        if blocked {
            // It blocked having seen only `seen` of the 2 jobs: some
            // producer whose job it did not see must have woken it.
            assert!(
                wakes.load(Ordering::Relaxed) >= 1,
                "blocked after seeing {seen} of 2 jobs and nobody woke it"
            );
        }
    });
}

#[test]
fn a_busy_consumer_is_not_woken() {
    loom::model(|| {
        let bell = Arc::new(Doorbell::new());
        let producer = {
            let bell = bell.clone();
            thread::spawn(move || bell.must_wake())
        };
        // Never about to sleep: no producer rings.
        assert!(!producer.join().unwrap());
    });
}
