//! Random operation sequences against the engine and the reference model,
//! comparing every answer, every completed long poll and every queue's stats
//! after every step. 10 000 sequences by default; set `FILA_MODEL_CASES` for
//! more (and `PROPTEST_RNG_SEED`-style replays come from proptest's failure
//! persistence and its printed minimal case).

mod model;

use model::harness::{Harness, Op};
use proptest::prelude::*;

fn op() -> impl Strategy<Value = Op> {
    let q = 0u8..4;
    prop_oneof![
        2 => (q.clone(), 0u16..4000, 0u8..4, 1u8..12, any::<bool>(), prop_oneof![Just(100u8), Just(50u8)], any::<bool>(), proptest::option::of(0u8..4), prop_oneof![Just(0u16), 1u16..3000])
            .prop_map(|(q, vis, max_deliveries, max_messages, small_bytes, pct, dloe, target, wait)| Op::Create { q, vis, max_deliveries, max_messages, small_bytes, pct, dloe, target, wait }),
        1 => (q.clone(), proptest::option::of(0u16..4000), proptest::option::of(0u8..4), proptest::option::of(proptest::option::of(0u8..4)), proptest::option::of(any::<bool>()), proptest::option::of(1u8..12))
            .prop_map(|(q, vis, max_deliveries, target, dloe, max_messages)| Op::Update { q, vis, max_deliveries, target, dloe, max_messages }),
        1 => q.clone().prop_map(Op::DeleteQueue),
        1 => (q.clone(), any::<bool>()).prop_map(|(q, d)| Op::Purge(q, d)),
        8 => (q.clone(), proptest::collection::vec((0u8..40, 0u8..4, 0u8..8, 0u16..5000, proptest::option::of(0u16..6000)), 0..5)).prop_map(|(q, m)| Op::Put(q, m)),
        8 => (q.clone(), any::<bool>(), 0u8..5, proptest::option::of(0u16..4000), proptest::option::of(prop_oneof![Just(0u16), 1u16..4000]), 0u8..6)
            .prop_map(|(q, dlq, max, vis, wait, filter)| Op::Receive { q, dlq, max, vis, wait, filter }),
        3 => (q.clone(), any::<bool>(), proptest::collection::vec((any::<u8>(), prop_oneof![Just(0u16), 1u16..4000]), 0..4)).prop_map(|(q, d, c)| Op::UpdateVisibility(q, d, c)),
        4 => (q.clone(), any::<bool>(), proptest::collection::vec(any::<u8>(), 0..4)).prop_map(|(q, d, p)| Op::Delete(q, d, p)),
        2 => (q.clone(), any::<bool>(), proptest::collection::vec(any::<u8>(), 0..4)).prop_map(|(q, d, p)| Op::Release(q, d, p)),
        3 => (q.clone(), 0u8..4, any::<bool>()).prop_map(|(q, h, p)| Op::Pause(q, h, p)),
        2 => (q.clone(), any::<u8>()).prop_map(|(q, p)| Op::Defer(q, p)),
        1 => (q.clone(), any::<u8>(), any::<bool>()).prop_map(|(q, p, long)| Op::DeadLetter(q, p, long)),
        2 => (q.clone(), proptest::collection::vec(0u8..14, 0..4), proptest::option::of(prop_oneof![Just(0u16), 1u16..4000])).prop_map(|(q, s, v)| Op::ReceiveDeferred(q, s, v)),
        1 => (q.clone(), any::<bool>(), 0u8..14, 0u8..6).prop_map(|(q, d, f, m)| Op::Peek(q, d, f, m)),
        1 => (q.clone(), 0u8..14).prop_map(|(q, s)| Op::Cancel(q, s)),
        1 => (q.clone(), proptest::option::of(0u8..4), proptest::option::of(0u8..3), 0u8..9).prop_map(|(q, m, r, f)| Op::Redrive(q, m, r, f)),
        1 => (q.clone(), any::<bool>(), any::<bool>(), 0u8..9, 0u8..14).prop_map(|(q, d, b, f, s)| Op::Preview(q, d, b, f, s)),
        1 => any::<u8>().prop_map(Op::CancelWait),
        1 => (q.clone(), any::<bool>(), 0u8..14, any::<bool>(), prop::bool::weighted(0.1))
            .prop_map(|(q, dlq, seq, dead_letter, long)| Op::BySeq { q, dlq, seq, dead_letter, long }),
        6 => prop_oneof![8 => 0u32..3000, 1 => 59_000u32..62_000].prop_map(Op::Advance),
    ]
}

fn cases() -> u32 {
    std::env::var("FILA_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 20_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn engine_matches_model(ops in proptest::collection::vec(op(), 1..60)) {
        let mut h = Harness::new();
        for op in &ops {
            h.step(op);
        }
        // Drain: let every lease, delay, poll and redrive run out.
        for _ in 0..4 {
            h.step(&Op::Advance(61_000));
        }
    }
}

/// A case the property test found: a dead letter refused by a full target
/// comes back to its source's DLQ with its DLQ life (counted from when it
/// was dead-lettered) already over, and expires at once in both.
#[test]
fn a_dead_letter_refused_by_a_full_target_may_expire_on_its_way_back() {
    run(&[
        create(3, 203, 1, true, None),
        create(0, 0, 3, true, Some(3)),
        Op::Put(0, vec![(0, 0, 0, 0, Some(3553)), (0, 0, 4, 0, Some(1))]),
        Op::Advance(952),
        Op::Advance(1601),
    ]);
}

/// A case the property test found: two queues on different shards whose
/// messages expire at different times within one tick deliver their dead
/// letters to a shared target in the order they expired, not in the order
/// of the shards they came from.
#[test]
fn dead_letters_from_two_shards_arrive_in_the_order_they_expired() {
    run(&[
        create(3, 0, 2, false, None),
        create(0, 0, 1, true, Some(3)),
        create(1, 0, 4, true, Some(3)),
        Op::Put(1, vec![(0, 0, 0, 0, Some(1))]),
        Op::Put(0, vec![(0, 0, 0, 0, None)]),
    ]);
}

fn create(q: u8, vis: u16, max_messages: u8, dloe: bool, target: Option<u8>) -> Op {
    Op::Create {
        q,
        vis,
        max_deliveries: 0,
        max_messages,
        small_bytes: false,
        pct: 100,
        dloe,
        target,
        wait: 0,
    }
}

/// Steps `ops`, then lets every timer run out, comparing all the way.
fn run(ops: &[Op]) {
    let mut h = Harness::new();
    for op in ops {
        h.step(op);
    }
    for _ in 0..4 {
        h.step(&Op::Advance(61_000));
    }
}
