//! Engine rules added by the hardening issue: owned payloads, attribute
//! bytes counted, dead letters forwarded at most once and fresh in their
//! target, settings updated in one step.

use std::sync::Arc;

use bytes::Bytes;
use fila_core::*;

const T0: u64 = 1_700_000_000_000;

fn engine() -> (ManualClock, Engine) {
    let clock = ManualClock::new(T0);
    let engine = Engine::new(4, Arc::new(clock.clone()));
    (clock, engine)
}

fn recv(e: &Engine, q: &str, vis: u64) -> Vec<Message> {
    let opts = ReceiveOptions {
        visibility_ms: Some(vis),
        ..ReceiveOptions::now(20)
    };
    e.receive_now(Address::queue(q), &opts).unwrap()
}

#[test]
fn a_stored_payload_owns_its_bytes_and_pins_no_larger_buffer() {
    let (_, e) = engine();
    e.create_queue("q", QueueSettings::default()).unwrap();
    let frame = Bytes::from(vec![7u8; 1 << 20]);
    let one_byte = frame.slice(100..101);
    e.put("q", vec![NewMessage::new(one_byte)]).unwrap()[0]
        .as_ref()
        .unwrap();
    let kept = e.peek(Address::queue("q"), 0, 1).unwrap().remove(0).payload;
    assert_eq!(&kept[..], &[7]);
    let range = frame.as_ptr() as usize..frame.as_ptr() as usize + frame.len();
    assert!(
        !range.contains(&(kept.as_ptr() as usize)),
        "the stored payload is a slice of the caller's buffer"
    );
}

#[test]
fn attribute_bytes_count_against_max_bytes_and_in_stats() {
    let (_, e) = engine();
    let settings = QueueSettings {
        max_bytes: 1024,
        ..QueueSettings::default()
    };
    e.create_queue("q", settings).unwrap();
    let with_attrs = |n: usize| NewMessage {
        payload: Bytes::from_static(b"p"),
        attributes: (0..n)
            .map(|i| (format!("k{i:02}"), "v".repeat(497)))
            .collect(),
        ..NewMessage::default()
    };
    // 1 + 2 × (3 + 497) = 1001 bytes: fits.
    assert!(e.put("q", vec![with_attrs(2)]).unwrap()[0].is_ok());
    assert_eq!(e.stats("q").unwrap().bytes, 1001);
    // Another 501 would pass 1024.
    let refused = e.put("q", vec![with_attrs(1)]).unwrap().remove(0);
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::QueueFull);
    // A 16 × 500-byte put never fits.
    let big = e.put("q", vec![with_attrs(16)]).unwrap().remove(0);
    assert!(big.is_err());
    assert_eq!(e.stats("q").unwrap().bytes, 1001);
    // Deleting gives the bytes back.
    let got = recv(&e, "q", 30_000);
    e.delete(Address::queue("q"), &[got[0].receipt.unwrap()])
        .unwrap();
    assert_eq!(e.stats("q").unwrap().bytes, 0);
}

#[test]
fn a_message_forwarded_to_a_dead_letter_target_starts_fresh_there() {
    let (clock, e) = engine();
    e.create_queue("jobs-poison", QueueSettings::default())
        .unwrap();
    let jobs = QueueSettings {
        dead_letter_target: Some("jobs-poison".into()),
        ..QueueSettings::default()
    };
    e.create_queue("jobs", jobs).unwrap();
    e.put("jobs", vec![NewMessage::new("bad")]).unwrap();
    for _ in 0..5 {
        assert_eq!(recv(&e, "jobs", 1_000).len(), 1);
        clock.advance(1_000);
        e.tick();
    }
    // The sixth receive moves it to jobs-poison.
    assert!(recv(&e, "jobs", 1_000).is_empty());
    let got = recv(&e, "jobs-poison", 1_000);
    assert_eq!(got.len(), 1, "the poison queue hands the message out");
    assert_eq!(got[0].delivery_count, 1, "its count starts again there");
    let dl = got[0].dead_letter.as_ref().expect("its dead-letter record");
    assert_eq!(&*dl.source_queue, "jobs");
    assert_eq!(dl.delivery_count, 5, "the record keeps the earlier count");
    assert_eq!(e.stats("jobs-poison").unwrap().dead_lettered, 0);
}

#[test]
fn a_dead_letter_is_forwarded_at_most_once_so_cycles_end() {
    let (clock, e) = engine();
    let once = |target: &str| QueueSettings {
        max_deliveries: 1,
        dead_letter_target: Some(target.into()),
        ..QueueSettings::default()
    };
    e.create_queue("ping", QueueSettings::default()).unwrap();
    e.create_queue("pong", once("ping")).unwrap();
    e.update_queue(
        "ping",
        &SettingsUpdate {
            max_deliveries: Some(1),
            dead_letter_target: Some(Some("pong".into())),
            ..SettingsUpdate::default()
        },
    )
    .unwrap();
    e.put("ping", vec![NewMessage::new("m")]).unwrap();
    // ping: one delivery, then forwarded to pong; pong: one delivery, then
    // its own DLQ (not back to ping).
    for q in ["ping", "pong"] {
        assert_eq!(recv(&e, q, 1_000).len(), 1);
        clock.advance(1_000);
        e.tick();
        assert!(recv(&e, q, 1_000).is_empty());
    }
    for _ in 0..10 {
        clock.advance(1_000);
        e.tick();
    }
    let (ping, pong) = (e.stats("ping").unwrap(), e.stats("pong").unwrap());
    assert_eq!((ping.visible, ping.dead_lettered), (0, 0));
    assert_eq!((pong.visible, pong.dead_lettered), (0, 1));
    assert_eq!((ping.dead_letterings, pong.dead_letterings), (1, 1));
    let dl = e.peek(Address::dlq("pong"), 0, 10).unwrap();
    assert_eq!(dl.len(), 1);
    assert_eq!(&*dl[0].dead_letter.as_ref().unwrap().source_queue, "pong");
}

#[test]
fn concurrent_updates_of_different_fields_both_take_effect() {
    let (_, e) = engine();
    e.create_queue("q", QueueSettings::default()).unwrap();
    let e = Arc::new(e);
    // Each field only grows from its default (30 000 ms, 5 deliveries), so
    // a lost update shows as a field going back.
    let rounds = 2_000u64;
    let visibility = {
        let e = e.clone();
        std::thread::spawn(move || {
            let mut seen_max = 0;
            for v in 30_001..=30_000 + rounds {
                let u = SettingsUpdate {
                    visibility_timeout_ms: Some(v),
                    ..SettingsUpdate::default()
                };
                let s = e.update_queue("q", &u).unwrap();
                assert!(s.max_deliveries >= seen_max, "an update was lost");
                seen_max = s.max_deliveries;
            }
        })
    };
    let mut seen_vis = 0;
    for m in 6..=1_000 {
        let u = SettingsUpdate {
            max_deliveries: Some(m),
            ..SettingsUpdate::default()
        };
        let s = e.update_queue("q", &u).unwrap();
        assert!(s.visibility_timeout_ms >= seen_vis, "an update was lost");
        seen_vis = s.visibility_timeout_ms;
    }
    visibility.join().unwrap();
    let s = e.queue_settings("q").unwrap();
    assert_eq!(
        (s.visibility_timeout_ms, s.max_deliveries),
        (30_000 + rounds, 1_000)
    );
}

fn put_n(e: &Engine, q: &str, n: usize, payload: &'static [u8]) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(20) {
        let batch = chunk
            .iter()
            .map(|_| NewMessage::new(Bytes::from_static(payload)))
            .collect();
        for r in e.put(q, batch).unwrap() {
            r.unwrap();
        }
    }
}

#[test]
fn the_server_wide_byte_budget_refuses_puts_and_loses_nothing() {
    let (_, e) = engine();
    e.set_limits(EngineLimits {
        max_stored_bytes: 10 * (100 + MESSAGE_OVERHEAD_BYTES),
        ..EngineLimits::default()
    });
    e.create_queue("a", QueueSettings::default()).unwrap();
    e.create_queue("b", QueueSettings::default()).unwrap();
    put_n(&e, "a", 6, &[1; 100]);
    put_n(&e, "b", 4, &[2; 100]);
    assert_eq!(e.stored_bytes(), 10 * (100 + MESSAGE_OVERHEAD_BYTES));
    for q in ["a", "b"] {
        let refused = e.put(q, vec![NewMessage::new(vec![0u8; 100])]).unwrap();
        assert_eq!(
            refused[0].as_ref().unwrap_err().kind(),
            ErrorKind::ResourceExhausted
        );
    }
    assert_eq!(e.stats("a").unwrap().visible, 6);
    assert_eq!(e.stats("b").unwrap().visible, 4);
    // Deleting one message makes room for one.
    let got = recv(&e, "a", 30_000);
    e.delete(Address::queue("a"), &[got[0].receipt.unwrap()])
        .unwrap();
    assert!(e.put("b", vec![NewMessage::new(vec![0u8; 100])]).unwrap()[0].is_ok());
    // Deleting a queue gives its share back.
    e.delete_queue("b").unwrap();
    assert_eq!(e.stored_bytes(), 5 * (100 + MESSAGE_OVERHEAD_BYTES));
}

#[test]
fn the_number_of_queues_is_limited() {
    let (_, e) = engine();
    e.set_limits(EngineLimits {
        max_queues: 3,
        ..EngineLimits::default()
    });
    for q in ["a", "b", "c"] {
        e.create_queue(q, QueueSettings::default()).unwrap();
    }
    let err = e.create_queue("d", QueueSettings::default()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ResourceExhausted);
    assert!(err.to_string().contains("max_queues"));
    // Creating an existing one again is still fine; a delete frees a place.
    assert!(!e.create_queue("a", QueueSettings::default()).unwrap());
    e.delete_queue("a").unwrap();
    e.create_queue("d", QueueSettings::default()).unwrap();
    assert_eq!(e.queue_count(), 3);
}

#[test]
fn deleting_or_purging_a_queue_gives_its_slots_back_and_old_receipts_stay_stale() {
    let (_, e) = engine();
    e.create_queue("big", QueueSettings::default()).unwrap();
    e.create_queue("small", QueueSettings::default()).unwrap();
    put_n(&e, "big", 50_000, b"x");
    assert!(e.message_slots() >= 50_000);
    let old = recv(&e, "big", 30_000);
    e.delete_queue("big").unwrap();
    assert!(
        e.message_slots() < 1_024,
        "{} slots kept",
        e.message_slots()
    );

    e.create_queue("big", QueueSettings::default()).unwrap();
    put_n(&e, "big", 5_000, b"y");
    let leased = recv(&e, "big", 30_000);
    e.purge(Address::queue("big")).unwrap();
    assert!(
        e.message_slots() < 1_024,
        "{} slots kept",
        e.message_slots()
    );
    // New leases in re-created slots are never named by an old receipt.
    put_n(&e, "big", 20, b"z");
    let fresh = recv(&e, "big", 30_000);
    assert_eq!(fresh.len(), 20);
    for m in old.iter().chain(&leased) {
        let r = e
            .delete(Address::queue("big"), &[m.receipt.unwrap()])
            .unwrap();
        assert_eq!(r[0].as_ref().unwrap_err().kind(), ErrorKind::ReceiptStale);
    }
    assert_eq!(e.stats("big").unwrap().in_flight, 20);
    // A small queue's messages kept their slots through all this.
    put_n(&e, "small", 3, b"s");
    assert_eq!(recv(&e, "small", 30_000).len(), 3);
}

#[test]
fn removing_parked_receives_from_the_middle_is_cheap() {
    // 100 000 parked receives, every other one cancelled from the middle,
    // the rest timing out: quadratic removal would take minutes here.
    let (clock, e) = engine();
    e.create_queue("q", QueueSettings::default()).unwrap();
    let opts = ReceiveOptions {
        wait_ms: Some(1_000),
        ..ReceiveOptions::default()
    };
    let mut ids = Vec::new();
    for _ in 0..100_000 {
        match e.receive(Address::queue("q"), &opts, |_| {}).unwrap() {
            Received::Parked(id) => ids.push(id),
            Received::Ready(_) => panic!("nothing to receive"),
        }
    }
    let mid = ids.len() / 2;
    for id in ids[..mid].iter().rev().step_by(2) {
        assert!(e.cancel_wait(*id));
    }
    clock.advance(1_000);
    e.tick();
    for id in &ids {
        assert!(
            !e.cancel_wait(*id),
            "every receive was answered or cancelled"
        );
    }
    // The queue's list is intact: a new receive parks and is served.
    let served = Arc::new(std::sync::Mutex::new(None));
    let s = served.clone();
    e.receive(Address::queue("q"), &opts, move |r| {
        *s.lock().unwrap() = Some(r.unwrap().len());
    })
    .unwrap();
    e.put("q", vec![NewMessage::new("m")]).unwrap();
    assert_eq!(*served.lock().unwrap(), Some(1));
}

#[test]
fn a_prefix_filter_serves_matching_channels_round_robin_in_name_order() {
    let (_, e) = engine();
    e.create_queue("q", QueueSettings::default()).unwrap();
    let on = |c: &str, p: &'static str| NewMessage {
        payload: Bytes::from_static(p.as_bytes()),
        channel: Some(c.into()),
        ..NewMessage::default()
    };
    e.put(
        "q",
        vec![
            on("eu-b", "b1"),
            on("eu-a", "a1"),
            on("us", "u1"),
            on("eu-b", "b2"),
            on("eu-a", "a2"),
            on("eu-c", "c1"),
        ],
    )
    .unwrap();
    let opts = ReceiveOptions {
        channel: Some(ChannelFilter::parse("eu-*").unwrap()),
        visibility_ms: Some(30_000),
        ..ReceiveOptions::now(1)
    };
    let order: Vec<String> = (0..5)
        .map(|_| {
            let m = e.receive_now(Address::queue("q"), &opts).unwrap();
            String::from_utf8(m[0].payload.to_vec()).unwrap()
        })
        .collect();
    assert_eq!(order, ["a1", "b1", "c1", "a2", "b2"]);
    assert!(e
        .receive_now(Address::queue("q"), &opts)
        .unwrap()
        .is_empty());
    assert_eq!(recv(&e, "q", 30_000).len(), 1, "the us message is left");
}

#[test]
fn receives_cost_no_scan_of_the_channels() {
    // 100 000 channels of one message each, taken by prefix filters and
    // without a filter: a scan of the channels per receive would take
    // minutes here.
    let (_, e) = engine();
    e.create_queue("q", QueueSettings::default()).unwrap();
    for chunk in (0..100_000).collect::<Vec<u32>>().chunks(20) {
        let batch = chunk
            .iter()
            .map(|i| NewMessage {
                payload: Bytes::from_static(b"m"),
                channel: Some(format!("ch-{i:06}")),
                ..NewMessage::default()
            })
            .collect();
        for r in e.put("q", batch).unwrap() {
            r.unwrap();
        }
    }
    let prefixed = ReceiveOptions {
        channel: Some(ChannelFilter::parse("ch-09*").unwrap()),
        visibility_ms: Some(30_000),
        ..ReceiveOptions::now(20)
    };
    let mut taken = 0;
    loop {
        let got = e.receive_now(Address::queue("q"), &prefixed).unwrap();
        if got.is_empty() {
            break;
        }
        assert!(got
            .iter()
            .all(|m| m.channel.as_deref().unwrap().starts_with("ch-09")));
        taken += got.len();
    }
    assert_eq!(taken, 10_000);
    let mut rest = 0;
    loop {
        let got = recv(&e, "q", 30_000);
        if got.is_empty() {
            break;
        }
        rest += got.len();
    }
    assert_eq!(rest, 90_000);
}

#[test]
fn shards_take_budget_in_chunks_yet_fill_it_to_within_a_chunk_each() {
    let (_, e) = engine();
    let limit = 80u64 << 20;
    e.set_limits(EngineLimits {
        max_stored_bytes: limit,
        ..EngineLimits::default()
    });
    let queues = ["a", "b", "c", "d", "e", "f", "g", "h"];
    for q in queues {
        e.create_queue(q, QueueSettings::default()).unwrap();
    }
    let payload = Bytes::from(vec![1u8; 64 << 10]);
    let mut stored = 0u64;
    'fill: for _ in 0..10_000 {
        for q in queues {
            let r = e.put(q, vec![NewMessage::new(payload.clone())]).unwrap();
            match &r[0] {
                Ok(_) => stored += payload.len() as u64 + MESSAGE_OVERHEAD_BYTES,
                Err(err) => {
                    assert_eq!(err.kind(), ErrorKind::ResourceExhausted);
                    break 'fill;
                }
            }
        }
    }
    let per_shard_credit = 1u64 << 20;
    assert!(stored <= limit, "{stored} stored past the {limit} limit");
    assert!(
        stored + 4 * per_shard_credit + payload.len() as u64 >= limit,
        "only {stored} of {limit} could be stored"
    );
    assert!(e.stored_bytes() <= limit);
    for q in queues {
        e.purge(Address::queue(q)).unwrap();
    }
    assert!(
        e.stored_bytes() <= 4 * 2 * per_shard_credit,
        "{} bytes still counted after purging everything",
        e.stored_bytes()
    );
}

#[test]
fn a_receive_budget_takes_what_fits_and_leaves_the_next_message_first() {
    let (_, e) = engine();
    e.create_queue("q", QueueSettings::default()).unwrap();
    for p in ["one", "two", "three"] {
        e.put("q", vec![NewMessage::new(vec![p.as_bytes()[0]; 1000])])
            .unwrap();
    }
    let one = answer_bytes(1000, None, None, None);
    let opts = ReceiveOptions {
        max_answer_bytes: Some(2 * one + 10),
        visibility_ms: Some(30_000),
        ..ReceiveOptions::now(20)
    };
    let first = e.receive_now(Address::queue("q"), &opts).unwrap();
    assert_eq!(first.len(), 2, "two fit the budget");
    let rest = e.receive_now(Address::queue("q"), &opts).unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].payload[0], b't', "the third stayed first");
    assert_eq!(rest[0].seq, 3);
    // A budget smaller than the next message takes nothing and changes
    // nothing.
    e.put("q", vec![NewMessage::new(vec![0u8; 1000])]).unwrap();
    let tight = ReceiveOptions {
        max_answer_bytes: Some(one - 1),
        ..opts.clone()
    };
    assert!(e
        .receive_now(Address::queue("q"), &tight)
        .unwrap()
        .is_empty());
    assert_eq!(e.stats("q").unwrap().visible, 1);
    assert_eq!(e.receive_now(Address::queue("q"), &opts).unwrap().len(), 1);
}

#[test]
fn a_parked_receive_reports_the_room_it_holds() {
    let (_, e) = engine();
    let small = QueueSettings {
        max_message_bytes: 1000,
        ..QueueSettings::default()
    };
    e.create_queue("q", small).unwrap();
    let opts = |budget: u64| ReceiveOptions {
        max_messages: 4,
        wait_ms: Some(10_000),
        max_answer_bytes: Some(budget),
        ..ReceiveOptions::default()
    };
    let Received::Parked(big) = e
        .receive(Address::queue("q"), &opts(1 << 30), |_| {})
        .unwrap()
    else {
        panic!("parks")
    };
    assert_eq!(big.reserved_bytes(), 4 * answer_bytes_max(1000));
    let Received::Parked(tight) = e
        .receive(Address::queue("q"), &opts(5_000), |_| {})
        .unwrap()
    else {
        panic!("parks")
    };
    assert_eq!(tight.reserved_bytes(), 5_000);
    let none = ReceiveOptions {
        max_answer_bytes: None,
        ..opts(0)
    };
    let Received::Parked(free) = e.receive(Address::queue("q"), &none, |_| {}).unwrap() else {
        panic!("parks")
    };
    assert_eq!(free.reserved_bytes(), 0);
}

/// What is stored is what the messages hold, not the room shards take
/// ahead for their next messages (one 10-byte message used to show as
/// about 1 MiB); that room is `reserved_bytes`, apart.
#[test]
fn stored_bytes_is_what_is_stored_and_the_reserve_is_apart() {
    let (_, e) = engine();
    e.create_queue("q", QueueSettings::default()).unwrap();
    put_n(&e, "q", 1, b"0123456789");
    assert_eq!(e.stored_bytes(), 10 + MESSAGE_OVERHEAD_BYTES);
    assert!(e.reserved_bytes() >= e.stored_bytes());
    let got = recv(&e, "q", 30_000);
    e.delete(Address::queue("q"), &[got[0].receipt.unwrap()])
        .unwrap();
    assert_eq!(e.stored_bytes(), 0);
}

/// A dead letter's reason and description (a consumer's, up to 4 352
/// bytes) live as long as it does: they count against max_stored_bytes,
/// a consumer's dead-letter that does not fit is refused (the message
/// stays leased), and they are given back when the dead letter is
/// redriven, forwarded or deleted.
#[test]
fn a_dead_letters_reason_and_description_count_against_the_server_budget() {
    let (_, e) = engine();
    let message = 100 + MESSAGE_OVERHEAD_BYTES;
    let (reason, description) = ("r".repeat(256), "d".repeat(4096));
    let record = DEAD_LETTER_OVERHEAD_BYTES + 256 + 4096;
    e.set_limits(EngineLimits {
        max_stored_bytes: 2 * message + record / 2,
        ..EngineLimits::default()
    });
    // (No attempt history: the dead letter's own record is what counts.)
    let no_history = QueueSettings {
        attempt_history: 0,
        ..QueueSettings::default()
    };
    e.create_queue("q", no_history.clone()).unwrap();
    put_n(&e, "q", 2, &[1; 100]);
    let got = recv(&e, "q", 30_000);
    let r = got[0].receipt.unwrap();
    let refused = e.dead_letter("q", &r, &reason, &description).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::ResourceExhausted);
    assert_eq!(e.stats("q").unwrap().in_flight, 2, "nothing changed");
    // Room for it: kept, and counted.
    e.set_limits(EngineLimits {
        max_stored_bytes: 2 * message + record,
        ..EngineLimits::default()
    });
    e.dead_letter("q", &r, &reason, &description).unwrap();
    assert_eq!(e.stored_bytes(), 2 * message + record);
    // Redriven, it is a plain message again.
    e.redrive("q", None, None).unwrap();
    assert_eq!(e.stored_bytes(), 2 * message);
    // A dead letter forwarded to a target on another shard keeps its
    // record there; deleted, everything is given back.
    let target = (0..)
        .map(|i| format!("t{i}"))
        .find(|t| shard_of(t, 4) != shard_of("q", 4))
        .unwrap();
    e.create_queue(&target, no_history).unwrap();
    e.update_queue(
        "q",
        &SettingsUpdate {
            dead_letter_target: Some(Some(target.clone())),
            ..SettingsUpdate::default()
        },
    )
    .unwrap();
    let got = recv(&e, "q", 30_000);
    assert_eq!(got.len(), 1, "the redriven one");
    e.dead_letter("q", &got[0].receipt.unwrap(), &reason, &description)
        .unwrap();
    assert_eq!(e.stored_bytes(), 2 * message + record);
    let moved = recv(&e, &target, 30_000);
    // Dead-lettered again in its target, it stays in the target's DLQ with
    // a shorter record: the longer one is given back.
    e.set_limits(EngineLimits::default());
    e.dead_letter(&target, &moved[0].receipt.unwrap(), "x", "y")
        .unwrap();
    assert_eq!(
        e.stored_bytes(),
        2 * message + DEAD_LETTER_OVERHEAD_BYTES + 2
    );
    let again = e
        .receive_now(Address::dlq(&target), &ReceiveOptions::now(1))
        .unwrap();
    e.delete(Address::dlq(&target), &[again[0].receipt.unwrap()])
        .unwrap();
    e.delete_queue("q").unwrap();
    assert_eq!(e.stored_bytes(), 0);
}

/// Each channel holds memory (its name, ring, map entries) while it has
/// messages: counted against max_stored_bytes, so puts that would make
/// new channels past the limit are refused while puts on a channel that
/// exists still fit; all of it is given back when the messages go.
#[test]
fn channels_count_against_the_server_budget_while_they_hold_messages() {
    let (_, e) = engine();
    // (No attempt history: the channels and the dead letter's record are
    // what count.)
    let no_history = QueueSettings {
        attempt_history: 0,
        ..QueueSettings::default()
    };
    e.create_queue("q", no_history).unwrap();
    let name = |i: usize| format!("{i:0128}");
    let put = |e: &Engine, channel: String| {
        e.put(
            "q",
            vec![NewMessage {
                payload: Bytes::from_static(b"x"),
                channel: Some(channel),
                ..NewMessage::default()
            }],
        )
        .unwrap()
        .remove(0)
    };
    let message = 1 + MESSAGE_OVERHEAD_BYTES;
    let channel = CHANNEL_OVERHEAD_BYTES + 128;
    e.set_limits(EngineLimits {
        max_stored_bytes: 10 * (message + channel) + message + channel / 2,
        ..EngineLimits::default()
    });
    for i in 0..10 {
        put(&e, name(i)).unwrap();
    }
    assert_eq!(e.stored_bytes(), 10 * (message + channel));
    let refused = put(&e, name(10)).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::ResourceExhausted);
    put(&e, name(3)).unwrap();
    // Dead-lettered, a message moves to a channel of the DLQ (made, and
    // counted) and its old channel (emptied) is given back.
    e.set_limits(EngineLimits::default());
    let got = e
        .receive_now(
            Address::queue("q"),
            &ReceiveOptions {
                channel: Some(ChannelFilter::Exact(name(0))),
                ..ReceiveOptions::now(1)
            },
        )
        .unwrap();
    e.dead_letter("q", &got[0].receipt.unwrap(), "", "")
        .unwrap();
    assert_eq!(
        e.stored_bytes(),
        11 * message + 10 * channel + DEAD_LETTER_OVERHEAD_BYTES
    );
    e.purge(Address::queue("q")).unwrap();
    e.purge(Address::dlq("q")).unwrap();
    assert_eq!(e.stored_bytes(), 0);
}

/// Leases handed out in an answer that never reached its consumer (a
/// server's connection closed first) are abandoned: visible again at once,
/// their delivery not counted; receipts of leases already ended are passed
/// over.
#[test]
fn abandoned_leases_are_visible_again_at_once_and_not_counted() {
    let (_, e) = engine();
    e.create_queue(
        "q",
        QueueSettings {
            max_deliveries: 1,
            ..QueueSettings::default()
        },
    )
    .unwrap();
    put_n(&e, "q", 3, b"m");
    let got = recv(&e, "q", 30_000);
    assert_eq!(got.len(), 3);
    e.delete(Address::queue("q"), &[got[0].receipt.unwrap()])
        .unwrap();
    let receipts: Vec<Receipt> = got.iter().map(|m| m.receipt.unwrap()).collect();
    e.abandon("q", &receipts);
    let st = e.stats("q").unwrap();
    assert_eq!((st.visible, st.in_flight, st.dead_lettered), (2, 0, 0));
    // Delivered once in all (max_deliveries 1): not dead-lettered.
    let again = recv(&e, "q", 30_000);
    assert_eq!(again.len(), 2);
    assert!(again.iter().all(|m| m.delivery_count == 1));
    // The abandoned receipts are stale now.
    let stale = e.delete(Address::queue("q"), &receipts[1..]).unwrap();
    assert!(stale
        .iter()
        .all(|r| r.as_ref().unwrap_err().kind() == ErrorKind::ReceiptStale));
    e.check_invariants().unwrap();
}
