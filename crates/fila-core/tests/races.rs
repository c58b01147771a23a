//! Operations on the same leases racing from different threads for real:
//! five threads released together end, defer, dead-letter, release and
//! expire the same receipts, each in its own order. Every lease ends
//! exactly once (one operation wins, the rest are stale, or time ends it
//! and all are stale), and the engine's counts and bookkeeping agree with
//! the winners afterwards.

use std::sync::{Arc, Barrier, Mutex};

use bytes::Bytes;
use fila_core::*;

const ROUNDS: usize = 30;
const MESSAGES: usize = 60;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Won {
    Delete,
    Defer,
    DeadLetter,
    Release,
}

#[test]
fn every_lease_ends_exactly_once_when_its_operations_race() {
    let clock = ManualClock::new(1_700_000_000_000);
    let engine = Engine::new(2, Arc::new(clock.clone()));
    let mut totals = [0u64; 5];
    for round in 0..ROUNDS {
        let q = format!("q{round}");
        engine
            .create_queue(
                &q,
                QueueSettings {
                    visibility_timeout_ms: 1_000,
                    max_deliveries: 0,
                    ..QueueSettings::default()
                },
            )
            .unwrap();
        for _ in 0..MESSAGES / 20 {
            let batch = (0..20)
                .map(|i| NewMessage::new(Bytes::from(format!("m{i}"))))
                .collect();
            engine.put(&q, batch).unwrap();
        }
        let mut receipts = Vec::new();
        while receipts.len() < MESSAGES {
            let got = engine
                .receive_now(Address::queue(&q), &ReceiveOptions::now(20))
                .unwrap();
            receipts.extend(got.iter().map(|m| m.receipt.unwrap()));
        }
        let wins: Mutex<Vec<(usize, Won)>> = Mutex::new(Vec::new());
        let start = Barrier::new(5);
        std::thread::scope(|s| {
            for (t, op) in [Won::Delete, Won::Defer, Won::DeadLetter, Won::Release]
                .into_iter()
                .enumerate()
            {
                let (engine, q, receipts, wins, start) = (&engine, &q, &receipts, &wins, &start);
                s.spawn(move || {
                    // Each thread takes the receipts in its own order.
                    let mut order: Vec<usize> = (0..MESSAGES).collect();
                    order.rotate_left(t * MESSAGES / 4);
                    if t % 2 == 1 {
                        order.reverse();
                    }
                    start.wait();
                    for i in order {
                        let r = &receipts[i];
                        let ok = match op {
                            Won::Delete => {
                                engine.delete(Address::queue(q), &[*r]).unwrap()[0].is_ok()
                            }
                            Won::Defer => engine.defer(q, r).is_ok(),
                            Won::DeadLetter => engine.dead_letter(q, r, "race", "").is_ok(),
                            Won::Release => engine
                                .update_visibility(
                                    Address::queue(q),
                                    &[VisibilityChange {
                                        receipt: *r,
                                        timeout_ms: 0,
                                    }],
                                )
                                .unwrap()[0]
                                .is_ok(),
                        };
                        if ok {
                            wins.lock().unwrap().push((i, op));
                        }
                    }
                });
            }
            // The fifth racer is time: past the leases midway.
            let (clock, start) = (&clock, &start);
            s.spawn(move || {
                start.wait();
                std::thread::yield_now();
                clock.advance(1_500);
            });
        });
        let wins = wins.into_inner().unwrap();
        let mut per_message = vec![0; MESSAGES];
        let mut count = [0u64; 4];
        for (i, op) in &wins {
            per_message[*i] += 1;
            count[*op as usize] += 1;
        }
        assert!(
            per_message.iter().all(|n| *n <= 1),
            "round {round}: a lease ended twice: {wins:?}"
        );
        let expired = (MESSAGES - wins.len()) as u64;
        // Let the clock's move reach every queue before counting.
        clock.advance(1);
        let st = engine.stats(&q).unwrap();
        let dlq = engine.peek(Address::dlq(&q), 0, 100).unwrap().len() as u64;
        assert_eq!(st.deletes, count[Won::Delete as usize], "round {round}");
        assert_eq!(st.deferred, count[Won::Defer as usize], "round {round}");
        assert_eq!(dlq, count[Won::DeadLetter as usize], "round {round}");
        assert_eq!(st.in_flight, 0, "round {round}");
        assert_eq!(
            st.visible,
            count[Won::Release as usize] + expired,
            "round {round}: released and expired leases are visible again"
        );
        engine.check_invariants().unwrap();
        for (k, c) in count.iter().enumerate() {
            totals[k] += c;
        }
        totals[4] += expired;
    }
    // The race was real: more than one kind of operation won.
    assert!(
        totals[..4].iter().filter(|n| **n > 0).count() >= 2,
        "{totals:?}"
    );
}
