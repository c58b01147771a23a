//! Message groups, rule by rule, on a manual clock: a group's messages come
//! in sequence order, one leased at a time; other groups go on meanwhile;
//! a released or expired lease puts its message back at its group's head;
//! a delete, a dead-letter or a defer frees the group; a delayed head holds
//! it; groups take turns; a group lives within its channel; an ordered
//! queue refuses a put without a group; the counts; a restore keeps it all.

use std::sync::Arc;

use bytes::Bytes;
use fila_core::limits::GROUP_LEN_MAX;
use fila_core::*;

mod rules;

use rules::{engine, T0};

fn msg(payload: &str, group: Option<&str>, channel: Option<&str>) -> NewMessage {
    let mut m = NewMessage::new(Bytes::copy_from_slice(payload.as_bytes()));
    m.group = group.map(str::to_owned);
    m.channel = channel.map(str::to_owned);
    m
}

/// Puts `payloads` in order, each in `group` (no channel).
fn put(engine: &Engine, group: &str, payloads: &[&str]) {
    let batch = payloads.iter().map(|p| msg(p, Some(group), None)).collect();
    for r in engine.put("q", batch).unwrap() {
        r.unwrap();
    }
}

fn receive(engine: &Engine, n: u32) -> Vec<Message> {
    engine
        .receive_now(Address::queue("q"), &ReceiveOptions::now(n))
        .unwrap()
}

fn bodies(ms: &[Message]) -> Vec<String> {
    ms.iter()
        .map(|m| String::from_utf8(m.payload.to_vec()).unwrap())
        .collect()
}

fn delete(engine: &Engine, m: &Message) {
    engine
        .delete(Address::queue("q"), &[m.receipt.unwrap()])
        .unwrap()
        .remove(0)
        .unwrap();
}

fn release(engine: &Engine, m: &Message) {
    let change = VisibilityChange {
        receipt: m.receipt.unwrap(),
        timeout_ms: 0,
    };
    engine
        .update_visibility(Address::queue("q"), &[change])
        .unwrap()
        .remove(0)
        .unwrap();
}

fn check(engine: &Engine) {
    engine.check_invariants().unwrap();
}

#[test]
fn a_group_gives_its_messages_in_order_one_at_a_time_while_others_go_on() {
    let (_clock, engine) = engine(QueueSettings::default());
    put(&engine, "a", &["a1", "a2", "a3"]);
    put(&engine, "b", &["b1", "b2"]);
    let first = receive(&engine, 10);
    assert_eq!(bodies(&first), ["a1", "b1"], "one of each group");
    assert_eq!(first[0].group.as_deref(), Some("a"));
    assert!(receive(&engine, 10).is_empty(), "both groups are busy");
    let s = engine.stats("q").unwrap();
    assert_eq!(
        (s.visible, s.in_flight, s.groups, s.groups_in_flight),
        (3, 2, 2, 2)
    );
    delete(&engine, &first[0]);
    assert_eq!(bodies(&receive(&engine, 10)), ["a2"], "a is free again");
    delete(&engine, &first[1]);
    let next = receive(&engine, 10);
    assert_eq!(bodies(&next), ["b2"]);
    check(&engine);
}

#[test]
fn a_released_or_expired_lease_puts_its_message_back_at_the_head() {
    let (clock, engine) = engine(QueueSettings {
        visibility_timeout_ms: 1_000,
        ..QueueSettings::default()
    });
    put(&engine, "a", &["a1", "a2"]);
    let got = receive(&engine, 1);
    release(&engine, &got[0]);
    let again = receive(&engine, 5);
    assert_eq!(bodies(&again), ["a1"], "released: first again, alone");
    assert_eq!(again[0].delivery_count, 2);
    clock.advance(1_000);
    engine.tick();
    let third = receive(&engine, 5);
    assert_eq!(bodies(&third), ["a1"], "expired: first again");
    delete(&engine, &third[0]);
    assert_eq!(bodies(&receive(&engine, 5)), ["a2"]);
    check(&engine);
}

#[test]
fn a_dead_letter_or_a_defer_frees_the_group_and_a_deferred_message_waits_for_it() {
    let (_clock, engine) = engine(QueueSettings::default());
    put(&engine, "a", &["a1", "a2", "a3", "a4"]);
    let a1 = receive(&engine, 1).remove(0);
    engine
        .dead_letter("q", &a1.receipt.unwrap(), "bad", "")
        .unwrap();
    let a2 = receive(&engine, 1).remove(0);
    assert_eq!(bodies(std::slice::from_ref(&a2)), ["a2"]);
    engine.defer("q", &a2.receipt.unwrap()).unwrap();
    let a3 = receive(&engine, 5);
    assert_eq!(bodies(&a3), ["a3"], "the deferred message left the order");
    // While a3 is leased its deferred neighbour cannot be taken.
    let refused = engine.receive_deferred("q", &[a2.seq], None).unwrap();
    assert!(matches!(refused[0], Err(Error::GroupBusy { seq }) if seq == a2.seq));
    delete(&engine, &a3[0]);
    // Taken again, it rejoins at its place: ahead of a4, and it holds the
    // group while leased.
    let back = engine.receive_deferred("q", &[a2.seq], None).unwrap();
    let back = back.into_iter().next().unwrap().unwrap();
    assert!(receive(&engine, 5).is_empty(), "a2 is leased: a4 waits");
    release(&engine, &back);
    assert_eq!(bodies(&receive(&engine, 5)), ["a2"], "a2 is the head again");
    assert_eq!(engine.stats("q").unwrap().dead_lettered, 1);
    check(&engine);
}

#[test]
fn a_delayed_head_holds_its_group() {
    let (clock, engine) = engine(QueueSettings::default());
    let mut late = msg("a1", Some("a"), None);
    late.availability = Availability::DelayMs(5_000);
    engine.put("q", vec![late]).unwrap()[0].as_ref().unwrap();
    put(&engine, "a", &["a2"]);
    put(&engine, "b", &["b1"]);
    assert_eq!(
        bodies(&receive(&engine, 10)),
        ["b1"],
        "a waits for its head"
    );
    clock.advance(5_000);
    engine.tick();
    assert_eq!(bodies(&receive(&engine, 10)), ["a1"]);
    check(&engine);
}

#[test]
fn groups_take_turns() {
    let (_clock, engine) = engine(QueueSettings::default());
    put(&engine, "big", &["x1", "x2", "x3", "x4", "x5"]);
    put(&engine, "small", &["y1"]);
    put(&engine, "other", &["z1"]);
    let mut seen = Vec::new();
    for _ in 0..7 {
        let got = receive(&engine, 1);
        let Some(m) = got.first() else { break };
        seen.push(bodies(&got).remove(0));
        delete(&engine, m);
    }
    // The busy group goes to the back of the turn each time it gives one.
    assert_eq!(seen, ["x1", "y1", "z1", "x2", "x3", "x4", "x5"]);
    check(&engine);
}

#[test]
fn a_group_lives_within_its_channel() {
    let (_clock, engine) = engine(QueueSettings::default());
    let batch = vec![
        msg("c1-a1", Some("a"), Some("c1")),
        msg("c1-a2", Some("a"), Some("c1")),
        msg("c2-a1", Some("a"), Some("c2")),
        msg("plain", None, Some("c1")),
    ];
    for r in engine.put("q", batch).unwrap() {
        r.unwrap();
    }
    assert_eq!(
        engine.stats("q").unwrap().groups,
        2,
        "one key, two channels"
    );
    let got = receive(&engine, 10);
    let mut names = bodies(&got);
    names.sort();
    assert_eq!(names, ["c1-a1", "c2-a1", "plain"]);
    // An exact channel filter reaches only that channel's groups.
    let opts = ReceiveOptions {
        channel: Some(ChannelFilter::parse("c1").unwrap()),
        ..ReceiveOptions::now(10)
    };
    assert!(engine
        .receive_now(Address::queue("q"), &opts)
        .unwrap()
        .is_empty());
    delete(
        &engine,
        got.iter()
            .find(|m| bodies(std::slice::from_ref(m))[0] == "c1-a1")
            .unwrap(),
    );
    let c1 = engine.receive_now(Address::queue("q"), &opts).unwrap();
    assert_eq!(bodies(&c1), ["c1-a2"]);
    check(&engine);
}

#[test]
fn an_ordered_queue_refuses_a_put_without_a_group_and_keys_are_checked() {
    let (_clock, engine) = engine(QueueSettings {
        ordered: true,
        ..QueueSettings::default()
    });
    let refused = engine
        .put("q", vec![msg("x", None, None)])
        .unwrap()
        .remove(0);
    assert!(matches!(
        refused,
        Err(Error::InvalidArgument { field: "group", .. })
    ));
    let long = "g".repeat(GROUP_LEN_MAX + 1);
    for bad in [String::new(), long, "a\nb".to_owned()] {
        let r = engine
            .put("q", vec![msg("x", Some(&bad), None)])
            .unwrap()
            .remove(0);
        assert!(
            matches!(r, Err(Error::InvalidArgument { field: "group", .. })),
            "{bad:?}"
        );
    }
    let ok = "g".repeat(GROUP_LEN_MAX);
    engine.put("q", vec![msg("x", Some(&ok), None)]).unwrap()[0]
        .as_ref()
        .unwrap();
    assert_eq!(
        engine.stats("q").unwrap().visible,
        1,
        "nothing refused was stored"
    );
}

#[test]
fn a_redriven_message_rejoins_its_group_at_the_back_and_a_restore_keeps_groups() {
    let (_clock, engine) = engine(QueueSettings::default());
    put(&engine, "a", &["a1", "a2", "a3"]);
    let a1 = receive(&engine, 1).remove(0);
    engine
        .dead_letter("q", &a1.receipt.unwrap(), "r", "")
        .unwrap();
    let dead = engine.peek(Address::dlq("q"), 0, 10).unwrap();
    assert_eq!(dead[0].group.as_deref(), Some("a"), "the DLQ keeps the key");
    engine.redrive("q", None, None).unwrap();
    let a2 = receive(&engine, 5);
    assert_eq!(bodies(&a2), ["a2"]);
    // A restart: leases are dropped, groups rebuilt from the messages.
    let image = engine.export(|| ()).unwrap();
    let clock = ManualClock::new(T0);
    let restored = Engine::new(3, Arc::new(clock));
    restored.restore(image).unwrap();
    check(&restored);
    let mut order = Vec::new();
    for _ in 0..4 {
        let got = receive(&restored, 5);
        assert!(got.len() <= 1, "one of the group at a time");
        let Some(m) = got.first() else { break };
        order.push(bodies(&got).remove(0));
        delete(&restored, m);
    }
    assert_eq!(order, ["a2", "a3", "a1"]);
    check(&restored);
}

#[test]
fn a_head_too_big_for_what_is_left_of_an_answer_stays_first() {
    let (_clock, engine) = engine(QueueSettings::default());
    put(&engine, "a", &["small"]);
    let big = "x".repeat(4_000);
    put(&engine, "b", &[big.as_str(), "b2"]);
    put(&engine, "c", &["c1"]);
    // Room for the small message, not for b's head after it: b's head is
    // put back first in its channel, and its group keeps its turn.
    let opts = ReceiveOptions {
        max_answer_bytes: Some(1_000),
        ..ReceiveOptions::now(10)
    };
    let first = engine.receive_now(Address::queue("q"), &opts).unwrap();
    assert_eq!(bodies(&first), ["small"]);
    let next = receive(&engine, 10);
    assert_eq!(bodies(&next)[..2], [big.clone(), "c1".to_owned()]);
    check(&engine);
    delete(&engine, &next[0]);
    assert_eq!(bodies(&receive(&engine, 10)), ["b2"]);
    check(&engine);
}

#[test]
fn groups_and_grouped_messages_count_against_the_stored_bytes_and_give_them_back() {
    let (_clock, engine) = engine(QueueSettings::default());
    let one = 2 + MESSAGE_OVERHEAD_BYTES + GROUPED_MESSAGE_BYTES;
    let group = GROUP_OVERHEAD_BYTES + 1;
    // Room for three messages of one group, not for a second group.
    engine.set_limits(EngineLimits {
        max_stored_bytes: 3 * one + group,
        ..EngineLimits::default()
    });
    put(&engine, "a", &["a1", "a2"]);
    assert_eq!(engine.stored_bytes(), 2 * one + group);
    let refused = engine
        .put("q", vec![msg("b1", Some("b"), None)])
        .unwrap()
        .remove(0);
    assert!(
        matches!(refused, Err(Error::ResourceExhausted { .. })),
        "{refused:?}"
    );
    put(&engine, "a", &["a3"]);
    assert_eq!(engine.stored_bytes(), 3 * one + group);
    for _ in 0..3 {
        let m = receive(&engine, 1).remove(0);
        delete(&engine, &m);
    }
    assert_eq!(
        engine.stored_bytes(),
        0,
        "the group went with its last message"
    );
    check(&engine);
}

#[test]
fn a_parked_receive_gets_the_next_of_a_group_as_soon_as_a_delete_or_defer_frees_it() {
    use std::sync::Mutex;
    let (_clock, engine) = engine(QueueSettings::default());
    put(&engine, "a", &["a1", "a2", "a3"]);
    let a1 = receive(&engine, 1).remove(0);
    let got: Arc<Mutex<Vec<Message>>> = Arc::default();
    let park = || {
        let got = got.clone();
        let opts = ReceiveOptions {
            wait_ms: Some(10_000),
            ..ReceiveOptions::now(5)
        };
        let parked = engine
            .receive(Address::queue("q"), &opts, move |r| {
                got.lock().unwrap().extend(r.unwrap());
            })
            .unwrap();
        assert!(matches!(parked, Received::Parked(_)), "the group is busy");
    };
    park();
    delete(&engine, &a1);
    let a2 = got
        .lock()
        .unwrap()
        .pop()
        .expect("served by the delete itself");
    assert_eq!(bodies(std::slice::from_ref(&a2)), ["a2"]);
    park();
    engine.defer("q", &a2.receipt.unwrap()).unwrap();
    let a3 = got
        .lock()
        .unwrap()
        .pop()
        .expect("served by the defer itself");
    assert_eq!(bodies(std::slice::from_ref(&a3)), ["a3"]);
    check(&engine);
}
