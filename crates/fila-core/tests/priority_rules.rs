//! Priority levels, rule by rule: the highest level with messages first,
//! first in first out within a level, levels within each channel; a level
//! above the queue's refused; the fairness rule's bound and its turns; a
//! group's head at its own level; a restore keeps the levels.

use std::sync::Arc;

use bytes::Bytes;
use fila_core::*;

mod rules;

use rules::T0;

fn engine(levels: u8, fairness: u32) -> Engine {
    let settings = QueueSettings {
        priority_levels: levels,
        priority_fairness: fairness,
        ..QueueSettings::default()
    };
    rules::engine(settings).1
}

fn msg(payload: &str, level: Option<u8>) -> NewMessage {
    let mut m = NewMessage::new(Bytes::copy_from_slice(payload.as_bytes()));
    m.priority = level;
    m
}

fn put(engine: &Engine, level: u8, payloads: &[&str]) {
    let batch = payloads.iter().map(|p| msg(p, Some(level))).collect();
    for r in engine.put("q", batch).unwrap() {
        r.unwrap();
    }
}

/// Receives and deletes one message at a time, `n` times at most.
fn drain(engine: &Engine, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..n {
        let got = engine
            .receive_now(Address::queue("q"), &ReceiveOptions::now(1))
            .unwrap();
        let Some(m) = got.first() else { break };
        out.push(String::from_utf8(m.payload.to_vec()).unwrap());
        engine
            .delete(Address::queue("q"), &[m.receipt.unwrap()])
            .unwrap();
    }
    engine.check_invariants().unwrap();
    out
}

#[test]
fn the_highest_level_comes_first_and_a_level_keeps_its_order() {
    let engine = engine(10, 0);
    engine.put("q", vec![msg("bulk1", None)]).unwrap()[0]
        .as_ref()
        .unwrap();
    put(&engine, 5, &["mid1", "mid2"]);
    put(&engine, 10, &["urgent"]);
    put(&engine, 1, &["bulk2"]);
    let got = engine
        .receive_now(Address::queue("q"), &ReceiveOptions::now(10))
        .unwrap();
    let order: Vec<_> = got
        .iter()
        .map(|m| (String::from_utf8(m.payload.to_vec()).unwrap(), m.priority))
        .collect();
    let want = [
        ("urgent", 10),
        ("mid1", 5),
        ("mid2", 5),
        ("bulk1", 1),
        ("bulk2", 1),
    ];
    let want: Vec<_> = want.iter().map(|(p, l)| (p.to_string(), *l)).collect();
    assert_eq!(order, want);
}

#[test]
fn a_level_above_the_queues_is_refused_and_stores_nothing() {
    let engine = engine(3, 0);
    for bad in [0, 4, 11] {
        let r = engine
            .put("q", vec![msg("x", Some(bad))])
            .unwrap()
            .remove(0);
        assert!(
            matches!(
                r,
                Err(Error::InvalidArgument {
                    field: "priority",
                    ..
                })
            ),
            "{bad}: {r:?}"
        );
    }
    assert_eq!(engine.stats("q").unwrap().visible, 0);
    let bad = QueueSettings {
        priority_levels: 11,
        ..QueueSettings::default()
    };
    assert!(engine.create_queue("r", bad).is_err());
}

#[test]
fn under_sustained_high_load_strict_priority_starves_the_low_levels() {
    let engine = engine(10, 0);
    put(&engine, 1, &["low"]);
    for i in 0..30 {
        put(&engine, 10, &[&format!("high{i}")]);
    }
    let got = drain(&engine, 30);
    assert!(got.iter().all(|p| p.starts_with("high")), "{got:?}");
    assert_eq!(drain(&engine, 1), ["low"]);
}

#[test]
fn fairness_takes_every_nth_from_the_lower_levels_in_turn() {
    let engine = engine(10, 3);
    put(&engine, 1, &["l1", "l2"]);
    put(&engine, 5, &["m1", "m2"]);
    let highs: Vec<String> = (0..6).map(|i| format!("h{i}")).collect();
    let highs: Vec<&str> = highs.iter().map(String::as_str).collect();
    put(&engine, 10, &highs);
    // Every third pick made while lower levels wait goes down a level in
    // turn: 5, then 1; the ninth, with 5 now the top, wraps to the
    // highest below it, 1; the last has no choice.
    let got = drain(&engine, 10);
    assert_eq!(
        got,
        ["h0", "h1", "m1", "h2", "h3", "l1", "h4", "h5", "l2", "m2"]
    );
}

#[test]
fn levels_are_kept_within_each_channel_and_by_a_groups_head() {
    let engine = engine(10, 0);
    let mut a_low = msg("a-low", Some(1));
    a_low.channel = Some("a".into());
    let mut b_high = msg("b-high", Some(9));
    b_high.channel = Some("b".into());
    let mut a_high = msg("a-high", Some(9));
    a_high.channel = Some("a".into());
    for r in engine.put("q", vec![a_low, b_high, a_high]).unwrap() {
        r.unwrap();
    }
    // Channels still take turns; each gives its highest.
    let two = engine
        .receive_now(Address::queue("q"), &ReceiveOptions::now(2))
        .unwrap();
    let mut names: Vec<_> = two
        .iter()
        .map(|m| String::from_utf8(m.payload.to_vec()).unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a-high", "b-high"]);

    // A group's order wins over levels inside it; its head competes at
    // its own level.
    let engine = self::engine(10, 0);
    let mut g1 = msg("g-first-low", Some(1));
    g1.group = Some("g".into());
    let mut g2 = msg("g-second-high", Some(9));
    g2.group = Some("g".into());
    for r in engine.put("q", vec![g1, g2, msg("mid", Some(5))]).unwrap() {
        r.unwrap();
    }
    assert_eq!(drain(&engine, 3), ["mid", "g-first-low", "g-second-high"]);
}

#[test]
fn a_restore_keeps_each_messages_level() {
    let engine = engine(10, 0);
    put(&engine, 2, &["two"]);
    put(&engine, 7, &["seven"]);
    let image = engine.export(|| ()).unwrap();
    let restored = Engine::new(3, Arc::new(ManualClock::new(T0)));
    restored.restore(image).unwrap();
    restored.check_invariants().unwrap();
    assert_eq!(drain(&restored, 2), ["seven", "two"]);
}

#[test]
fn a_channels_priority_rings_count_against_the_stored_bytes_until_it_goes() {
    let engine = engine(10, 0);
    let mut m = msg("x", Some(5));
    m.channel = Some("c".into());
    engine.put("q", vec![m]).unwrap()[0].as_ref().unwrap();
    let with_rings = engine.stored_bytes();
    let mut plain = msg("x", Some(1));
    plain.channel = Some("d".into());
    engine.put("q", vec![plain]).unwrap()[0].as_ref().unwrap();
    let without_rings = engine.stored_bytes() - with_rings;
    assert!(
        with_rings > without_rings,
        "the channel of a level-5 message holds its rings: {with_rings} against {without_rings}"
    );
    drain(&engine, 2);
    assert_eq!(
        engine.stored_bytes(),
        0,
        "both channels went with their messages"
    );
    // A purge gives back the rings of the half it empties.
    put(&engine, 5, &["p"]);
    engine.purge(Address::queue("q")).unwrap();
    engine.tick();
    assert_eq!(engine.stored_bytes(), 0, "given back with the purged half");
    // The unnamed channel keeps its rings while its queue lives.
    put(&engine, 5, &["y"]);
    drain(&engine, 1);
    assert!(engine.stored_bytes() > 0, "the unnamed channel's rings");
    engine.delete_queue("q").unwrap();
    assert_eq!(engine.stored_bytes(), 0, "given back with the queue");
}
