//! One test per rule of SPEC §1–3, named after the rule. Time is a manual
//! clock moved by hand; `engine.tick()` is what a server's loop would call.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use fila_core::event::{Event, EventSink};
use fila_core::*;

const T0: u64 = 1_700_000_000_000;

struct Fixture {
    clock: ManualClock,
    engine: Engine,
}

impl Fixture {
    fn new() -> Fixture {
        let clock = ManualClock::new(T0);
        Fixture {
            engine: Engine::new(4, Arc::new(clock.clone())),
            clock,
        }
    }

    fn with_queue(name: &str, settings: QueueSettings) -> Fixture {
        let f = Fixture::new();
        assert!(f.engine.create_queue(name, settings).unwrap());
        f
    }

    fn advance(&self, ms: u64) {
        self.clock.advance(ms);
        self.engine.tick();
    }

    fn put(&self, q: &str, payload: &str) -> PutReceipt {
        self.put_msg(
            q,
            NewMessage::new(Bytes::copy_from_slice(payload.as_bytes())),
        )
    }

    fn put_msg(&self, q: &str, m: NewMessage) -> PutReceipt {
        self.engine.put(q, vec![m]).unwrap().remove(0).unwrap()
    }

    fn recv(&self, q: &str, n: u32) -> Vec<Message> {
        self.engine
            .receive_now(Address::queue(q), &ReceiveOptions::now(n))
            .unwrap()
    }

    fn recv_vis(&self, q: &str, n: u32, vis: u64) -> Vec<Message> {
        let opts = ReceiveOptions {
            visibility_ms: Some(vis),
            ..ReceiveOptions::now(n)
        };
        self.engine.receive_now(Address::queue(q), &opts).unwrap()
    }

    fn stats(&self, q: &str) -> QueueStats {
        self.engine.stats(q).unwrap()
    }
}

fn receipt(m: &Message) -> Receipt {
    m.receipt.expect("a delivered message has a receipt")
}

fn payloads(ms: &[Message]) -> Vec<String> {
    ms.iter()
        .map(|m| String::from_utf8(m.payload.to_vec()).unwrap())
        .collect()
}

fn field_of(e: Error) -> &'static str {
    match e {
        Error::InvalidArgument { field, .. } => field,
        other => panic!("expected invalid_argument, got {other:?}"),
    }
}

// ----- §1 queues -------------------------------------------------------------

#[test]
fn create_is_idempotent_when_settings_match_and_names_the_differing_field_otherwise() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    assert!(!f
        .engine
        .create_queue("q", QueueSettings::default())
        .unwrap());
    let other = QueueSettings {
        max_deliveries: 9,
        ..QueueSettings::default()
    };
    let e = f.engine.create_queue("q", other).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::QueueExists);
    assert!(matches!(
        e,
        Error::QueueExists {
            field: "max_deliveries",
            ..
        }
    ));
}

#[test]
fn queue_names_are_1_to_80_of_alphanumerics_dash_underscore() {
    let f = Fixture::new();
    for bad in ["", &"x".repeat(81), "a b", "q/1", "é"] {
        assert_eq!(
            field_of(
                f.engine
                    .create_queue(bad, QueueSettings::default())
                    .unwrap_err()
            ),
            "name"
        );
    }
    assert!(f
        .engine
        .create_queue(&"x".repeat(80), QueueSettings::default())
        .unwrap());
    assert!(f
        .engine
        .create_queue("Orders_v2-eu", QueueSettings::default())
        .unwrap());
}

#[test]
fn every_queue_setting_limit_is_enforced_and_named() {
    let f = Fixture::new();
    let d = QueueSettings::default;
    let cases: Vec<(QueueSettings, &str)> = vec![
        (
            QueueSettings {
                visibility_timeout_ms: 43_200_001,
                ..d()
            },
            "visibility_timeout_ms",
        ),
        (
            QueueSettings {
                max_deliveries: 1_001,
                ..d()
            },
            "max_deliveries",
        ),
        (
            QueueSettings {
                retention_ms: 59_999,
                ..d()
            },
            "retention_ms",
        ),
        (
            QueueSettings {
                retention_ms: 14 * 86_400_000 + 1,
                ..d()
            },
            "retention_ms",
        ),
        (
            QueueSettings {
                max_message_bytes: 0,
                ..d()
            },
            "max_message_bytes",
        ),
        (
            QueueSettings {
                max_message_bytes: (1 << 20) + 1,
                ..d()
            },
            "max_message_bytes",
        ),
        (
            QueueSettings {
                receive_wait_default_ms: 30_001,
                ..d()
            },
            "receive_wait_default_ms",
        ),
        (
            QueueSettings {
                max_messages: 0,
                ..d()
            },
            "max_messages",
        ),
        (
            QueueSettings {
                max_messages: (1 << 32) + 1,
                ..d()
            },
            "max_messages",
        ),
        (
            QueueSettings {
                max_bytes: 1023,
                ..d()
            },
            "max_bytes",
        ),
        (
            QueueSettings {
                max_bytes: (64 << 30) + 1,
                ..d()
            },
            "max_bytes",
        ),
        (
            QueueSettings {
                channel_capacity_pct: 0,
                ..d()
            },
            "channel_capacity_pct",
        ),
        (
            QueueSettings {
                channel_capacity_pct: 101,
                ..d()
            },
            "channel_capacity_pct",
        ),
        (
            QueueSettings {
                dead_letter_target: Some("bad name".into()),
                ..d()
            },
            "dead_letter_target",
        ),
        (
            QueueSettings {
                dead_letter_target: Some("q".into()),
                ..d()
            },
            "dead_letter_target",
        ),
    ];
    for (settings, field) in cases {
        let e = f.engine.create_queue("q", settings).unwrap_err();
        assert!(e.to_string().contains(field), "{e}");
        assert_eq!(field_of(e), field);
    }
    // The edges themselves are accepted.
    let edges = QueueSettings {
        visibility_timeout_ms: 43_200_000,
        max_deliveries: 0,
        retention_ms: 60_000,
        max_message_bytes: 1 << 20,
        receive_wait_default_ms: 0,
        max_messages: 1 << 32,
        max_bytes: 64 << 30,
        channel_capacity_pct: 1,
        ..d()
    };
    assert!(f.engine.create_queue("q", edges).unwrap());
    assert!(f.engine.list_queues("").contains(&"q".to_owned()));
}

#[test]
fn a_dead_letter_target_must_exist() {
    let f = Fixture::new();
    let s = QueueSettings {
        dead_letter_target: Some("dlq".into()),
        ..QueueSettings::default()
    };
    assert_eq!(
        f.engine.create_queue("q", s.clone()).unwrap_err().kind(),
        ErrorKind::QueueNotFound
    );
    f.engine
        .create_queue("dlq", QueueSettings::default())
        .unwrap();
    assert!(f.engine.create_queue("q", s).unwrap());
}

#[test]
fn update_applies_to_later_deliveries_not_to_leases_already_granted() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            visibility_timeout_ms: 10_000,
            ..QueueSettings::default()
        },
    );
    f.put("q", "a");
    f.put("q", "b");
    let first = f.recv("q", 1);
    assert_eq!(first[0].next_visible_at_ms, T0 + 10_000);
    let now = f
        .engine
        .update_queue(
            "q",
            &SettingsUpdate {
                visibility_timeout_ms: Some(1_000),
                ..SettingsUpdate::default()
            },
        )
        .unwrap();
    assert_eq!(now.visibility_timeout_ms, 1_000);
    assert_eq!(
        f.engine.queue_settings("q").unwrap().visibility_timeout_ms,
        1_000
    );
    let second = f.recv("q", 1);
    assert_eq!(second[0].next_visible_at_ms, T0 + 1_000);
    f.advance(1_000);
    // Only the second lease ended.
    assert_eq!(payloads(&f.recv("q", 10)), vec!["b"]);
    let bad = SettingsUpdate {
        max_deliveries: Some(5_000),
        ..SettingsUpdate::default()
    };
    assert_eq!(
        field_of(f.engine.update_queue("q", &bad).unwrap_err()),
        "max_deliveries"
    );
    assert_eq!(
        f.engine.update_queue("nope", &bad).unwrap_err().kind(),
        ErrorKind::QueueNotFound
    );
}

#[test]
fn list_filters_by_prefix_in_name_order() {
    let f = Fixture::new();
    for n in ["orders-eu", "orders-us", "billing", "orders"] {
        f.engine.create_queue(n, QueueSettings::default()).unwrap();
    }
    assert_eq!(
        f.engine.list_queues("orders-"),
        vec!["orders-eu", "orders-us"]
    );
    assert_eq!(f.engine.list_queues("").len(), 4);
    assert!(f.engine.list_queues("zzz").is_empty());
}

#[test]
fn delete_queue_answers_waiting_receivers_with_queue_deleted() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    let got = Arc::new(Mutex::new(Vec::new()));
    let sink = got.clone();
    let r = f
        .engine
        .receive(
            Address::queue("q"),
            &ReceiveOptions {
                wait_ms: Some(20_000),
                ..ReceiveOptions::default()
            },
            move |r| sink.lock().unwrap().push(r),
        )
        .unwrap();
    assert!(matches!(r, Received::Parked(_)));
    f.engine.delete_queue("q").unwrap();
    let got = got.lock().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].as_ref().unwrap_err().kind(), ErrorKind::QueueDeleted);
    assert_eq!(
        f.engine.stats("q").unwrap_err().kind(),
        ErrorKind::QueueNotFound
    );
}

#[test]
fn purge_removes_messages_in_every_state_and_their_receipts_go_stale() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    f.put("q", "visible");
    f.put_msg(
        "q",
        NewMessage {
            availability: Availability::DelayMs(5_000),
            ..NewMessage::new("delayed")
        },
    );
    f.put("q", "inflight");
    f.put("q", "deferred");
    let got = f.recv("q", 3);
    f.engine.defer("q", &receipt(&got[2])).unwrap();
    let leased = receipt(&got[1]);
    f.engine.purge(Address::queue("q")).unwrap();
    assert_eq!(
        f.stats("q").visible
            + f.stats("q").in_flight
            + f.stats("q").delayed
            + f.stats("q").deferred,
        0
    );
    assert_eq!(f.stats("q").bytes, 0);
    assert_eq!(
        f.engine.delete(Address::queue("q"), &[leased]).unwrap()[0],
        Err(Error::ReceiptStale)
    );
    f.advance(10_000);
    assert!(f.recv("q", 10).is_empty(), "the delayed message went too");
}

#[test]
fn stats_give_counts_bytes_oldest_age_and_counters() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            max_deliveries: 1,
            ..QueueSettings::default()
        },
    );
    f.put("q", "aaaa");
    f.advance(500);
    f.put("q", "bb");
    f.put_msg(
        "q",
        NewMessage {
            availability: Availability::DelayMs(60_000),
            ..NewMessage::new("c")
        },
    );
    f.advance(500);
    let got = f.recv_vis("q", 1, 0);
    assert_eq!(payloads(&got), vec!["aaaa"]);
    // The quick look put "aaaa" behind "bb"; taking two delivers "bb" and
    // moves "aaaa", at its max_deliveries, to the DLQ.
    let got = f.recv("q", 2);
    assert_eq!(payloads(&got), vec!["bb"]);
    f.engine
        .delete(Address::queue("q"), &[receipt(&got[0])])
        .unwrap()[0]
        .clone()
        .unwrap();
    let s = f.stats("q");
    assert_eq!(
        (
            s.visible,
            s.in_flight,
            s.delayed,
            s.deferred,
            s.dead_lettered
        ),
        (0, 0, 1, 0, 1)
    );
    assert_eq!(s.bytes, 4 + 1);
    assert_eq!(
        s.oldest_age_ms, 500,
        "the oldest held message is the delayed one, put at +500"
    );
    assert_eq!(
        (
            s.puts,
            s.deliveries,
            s.deletes,
            s.expiries,
            s.dead_letterings
        ),
        (3, 2, 1, 0, 1)
    );
}

// ----- §2/§3 put ---------------------------------------------------------------

#[test]
fn put_answers_ids_and_strictly_increasing_sequence_numbers() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    let answers = f
        .engine
        .put(
            "q",
            (0..20).map(|i| NewMessage::new(format!("m{i}"))).collect(),
        )
        .unwrap();
    let seqs: Vec<u64> = answers.iter().map(|a| a.as_ref().unwrap().seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    let ids: std::collections::HashSet<_> =
        answers.iter().map(|a| a.as_ref().unwrap().id).collect();
    assert_eq!(ids.len(), 20);
    // Sequence numbers are never reused, even after deletes and purges.
    f.engine.purge(Address::queue("q")).unwrap();
    assert!(f.put("q", "later").seq > *seqs.last().unwrap());
    // A queue of the same name created again gives new ids.
    f.engine.delete_queue("q").unwrap();
    f.engine
        .create_queue("q", QueueSettings::default())
        .unwrap();
    assert!(!ids.contains(&f.put("q", "again").id));
}

#[test]
fn batches_hold_1_to_20_entries() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    assert_eq!(field_of(f.engine.put("q", vec![]).unwrap_err()), "messages");
    let too_many = (0..21).map(|_| NewMessage::new("x")).collect();
    assert_eq!(
        field_of(f.engine.put("q", too_many).unwrap_err()),
        "messages"
    );
    assert_eq!(
        field_of(f.engine.delete(Address::queue("q"), &[]).unwrap_err()),
        "receipts"
    );
    assert_eq!(
        field_of(
            f.engine
                .update_visibility(Address::queue("q"), &[])
                .unwrap_err()
        ),
        "entries"
    );
    assert_eq!(
        field_of(f.engine.receive_deferred("q", &[0; 21], None).unwrap_err()),
        "sequence_numbers"
    );
    assert_eq!(f.stats("q").puts, 0, "nothing was put");
}

#[test]
fn one_bad_entry_of_a_batch_fails_alone() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            max_message_bytes: 4,
            ..QueueSettings::default()
        },
    );
    let answers = f
        .engine
        .put(
            "q",
            vec![
                NewMessage::new("ok"),
                NewMessage::new("too long"),
                NewMessage::new("ok2"),
            ],
        )
        .unwrap();
    assert!(answers[0].is_ok() && answers[2].is_ok());
    assert_eq!(answers[1], Err(Error::MessageTooLarge { size: 8, max: 4 }));
    assert_eq!(f.stats("q").visible, 2);
}

#[test]
fn attributes_are_at_most_16_and_8_kib_with_distinct_non_empty_keys() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    let with = |attributes: Vec<(String, String)>| NewMessage {
        attributes,
        ..NewMessage::new("x")
    };
    let seventeen = (0..17).map(|i| (format!("k{i}"), "v".to_owned())).collect();
    let big = vec![("k".to_owned(), "v".repeat(8 << 10))];
    let dup = vec![
        ("k".to_owned(), "1".to_owned()),
        ("k".to_owned(), "2".to_owned()),
    ];
    let empty_key = vec![(String::new(), "v".to_owned())];
    let answers = f
        .engine
        .put(
            "q",
            vec![with(seventeen), with(big), with(dup), with(empty_key)],
        )
        .unwrap();
    for a in answers {
        assert_eq!(field_of(a.unwrap_err()), "attributes");
    }
    let ok = (0..16)
        .map(|i| (format!("k{i}"), "v".repeat(100)))
        .collect();
    f.put_msg("q", with(ok));
    let got = f.recv("q", 1);
    assert_eq!(got[0].attributes.as_ref().unwrap().len(), 16);
}

#[test]
fn channel_names_are_printable_and_not_wildcards() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    for bad in ["", "a*", "a b", &"c".repeat(129)] {
        let m = NewMessage {
            channel: Some(bad.to_owned()),
            ..NewMessage::new("x")
        };
        assert_eq!(
            field_of(f.engine.put("q", vec![m]).unwrap().remove(0).unwrap_err()),
            "channel"
        );
    }
}

#[test]
fn a_delayed_message_is_invisible_until_its_delay_ends() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    f.put_msg(
        "q",
        NewMessage {
            availability: Availability::DelayMs(15 * 60_000),
            ..NewMessage::new("late")
        },
    );
    assert_eq!(f.stats("q").delayed, 1);
    f.advance(15 * 60_000 - 1);
    assert!(f.recv("q", 1).is_empty());
    f.advance(1);
    assert_eq!(payloads(&f.recv("q", 1)), vec!["late"]);
    let too_long = NewMessage {
        availability: Availability::DelayMs(15 * 60_000 + 1),
        ..NewMessage::new("x")
    };
    assert_eq!(
        field_of(
            f.engine
                .put("q", vec![too_long])
                .unwrap()
                .remove(0)
                .unwrap_err()
        ),
        "delay_ms"
    );
}

#[test]
fn a_scheduled_message_appears_at_its_time_and_no_later_than_the_retention_allows() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            retention_ms: 3_600_000,
            ..QueueSettings::default()
        },
    );
    f.put_msg(
        "q",
        NewMessage {
            availability: Availability::At(T0 + 120_000),
            ..NewMessage::new("at")
        },
    );
    f.advance(119_999);
    assert!(f.recv("q", 1).is_empty());
    f.advance(1);
    assert_eq!(payloads(&f.recv("q", 1)), vec!["at"]);
    let now = f.engine.now_ms();
    let beyond = NewMessage {
        availability: Availability::At(now + 3_600_000),
        ..NewMessage::new("x")
    };
    assert_eq!(
        field_of(
            f.engine
                .put("q", vec![beyond])
                .unwrap()
                .remove(0)
                .unwrap_err()
        ),
        "scheduled_at_ms"
    );
    // A time in the past means now.
    f.put_msg(
        "q",
        NewMessage {
            availability: Availability::At(T0),
            ..NewMessage::new("past")
        },
    );
    assert_eq!(payloads(&f.recv("q", 1)), vec!["past"]);
}

#[test]
fn a_scheduled_message_can_be_cancelled_before_it_becomes_visible() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    let p = f.put_msg(
        "q",
        NewMessage {
            availability: Availability::DelayMs(1_000),
            ..NewMessage::new("x")
        },
    );
    f.engine.cancel_scheduled("q", p.seq).unwrap();
    assert_eq!(f.stats("q").delayed, 0);
    f.advance(2_000);
    assert!(f.recv("q", 1).is_empty());
    let p = f.put_msg(
        "q",
        NewMessage {
            availability: Availability::DelayMs(1_000),
            ..NewMessage::new("y")
        },
    );
    f.advance(1_000);
    let e = f.engine.cancel_scheduled("q", p.seq).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "visible already");
    assert_eq!(
        f.engine.cancel_scheduled("q", 999).unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

#[test]
fn ttl_must_be_shorter_than_the_retention_and_expires_the_message() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            retention_ms: 60_000,
            ..QueueSettings::default()
        },
    );
    for ttl in [0, 60_000] {
        let m = NewMessage {
            ttl_ms: Some(ttl),
            ..NewMessage::new("x")
        };
        assert_eq!(
            field_of(f.engine.put("q", vec![m]).unwrap().remove(0).unwrap_err()),
            "ttl_ms"
        );
    }
    f.put_msg(
        "q",
        NewMessage {
            ttl_ms: Some(5_000),
            ..NewMessage::new("short")
        },
    );
    f.put("q", "long");
    f.advance(5_000);
    assert_eq!(f.stats("q").expiries, 1);
    assert_eq!(payloads(&f.recv("q", 10)), vec!["long"]);
}

#[test]
fn retention_expires_messages_which_vanish_without_dead_letter_on_expiration() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            retention_ms: 60_000,
            ..QueueSettings::default()
        },
    );
    f.put("q", "old");
    f.advance(60_000);
    let s = f.stats("q");
    assert_eq!((s.visible, s.expiries, s.dead_lettered), (0, 1, 0));
}

#[test]
fn expired_messages_go_to_the_dlq_with_dead_letter_on_expiration() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            retention_ms: 60_000,
            dead_letter_on_expiration: true,
            ..QueueSettings::default()
        },
    );
    f.put("q", "old");
    f.advance(60_000);
    let dl = f.engine.peek(Address::dlq("q"), 0, 10).unwrap();
    assert_eq!(dl.len(), 1);
    assert_eq!(dl[0].state, State::DeadLettered);
    let info = dl[0].dead_letter.as_ref().unwrap();
    assert_eq!(
        (info.reason.clone(), info.at_ms, info.source_queue.as_ref()),
        (DeadLetterReason::Expired, T0 + 60_000, "q")
    );
}

#[test]
fn a_put_beyond_max_messages_or_max_bytes_fails_queue_full() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            max_messages: 2,
            max_bytes: 1024,
            ..QueueSettings::default()
        },
    );
    f.put("q", "a");
    f.put("q", "b");
    let e = f
        .engine
        .put("q", vec![NewMessage::new("c")])
        .unwrap()
        .remove(0)
        .unwrap_err();
    assert!(matches!(
        e,
        Error::QueueFull {
            limit: "max_messages",
            max: 2,
            ..
        }
    ));
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            max_bytes: 1024,
            ..QueueSettings::default()
        },
    );
    f.put_msg("q", NewMessage::new(vec![0u8; 1000]));
    let e = f
        .engine
        .put("q", vec![NewMessage::new(vec![0u8; 25])])
        .unwrap()
        .remove(0)
        .unwrap_err();
    assert!(matches!(
        e,
        Error::QueueFull {
            limit: "max_bytes",
            ..
        }
    ));
    assert_eq!(e.kind(), ErrorKind::QueueFull);
}

#[test]
fn one_channel_may_hold_only_its_channel_capacity_share() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            max_messages: 10,
            channel_capacity_pct: 30,
            ..QueueSettings::default()
        },
    );
    let on = |c: &str| NewMessage {
        channel: Some(c.to_owned()),
        ..NewMessage::new("x")
    };
    let answers = f
        .engine
        .put("q", (0..4).map(|_| on("noisy")).collect())
        .unwrap();
    assert!(answers[..3].iter().all(|a| a.is_ok()));
    assert!(matches!(
        answers[3],
        Err(Error::QueueFull {
            limit: "channel share of max_messages",
            max: 3,
            ..
        })
    ));
    assert!(f.engine.put("q", vec![on("quiet")]).unwrap()[0].is_ok());
}

// ----- §3 receive ---------------------------------------------------------------

#[test]
fn receive_options_are_checked_and_named() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    let check = |opts: ReceiveOptions, field: &str| {
        let e = f
            .engine
            .receive_now(Address::queue("q"), &opts)
            .unwrap_err();
        assert_eq!(field_of(e), field);
    };
    check(
        ReceiveOptions {
            max_messages: 0,
            ..ReceiveOptions::default()
        },
        "max_messages",
    );
    check(
        ReceiveOptions {
            max_messages: 21,
            ..ReceiveOptions::default()
        },
        "max_messages",
    );
    check(
        ReceiveOptions {
            visibility_ms: Some(43_200_001),
            ..ReceiveOptions::default()
        },
        "visibility_ms",
    );
    check(
        ReceiveOptions {
            wait_ms: Some(30_001),
            ..ReceiveOptions::default()
        },
        "wait_ms",
    );
    assert_eq!(
        field_of(ChannelFilter::parse("a b*").unwrap_err()),
        "channel_filter"
    );
}

#[test]
fn a_received_message_is_invisible_for_the_visibility_timeout_and_counts_a_delivery() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            visibility_timeout_ms: 30_000,
            ..QueueSettings::default()
        },
    );
    f.put("q", "m");
    let got = f.recv("q", 20);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (
            got[0].delivery_count,
            got[0].state,
            got[0].next_visible_at_ms
        ),
        (1, State::InFlight, T0 + 30_000)
    );
    assert!(f.recv("q", 20).is_empty());
    f.advance(29_999);
    assert!(f.recv("q", 20).is_empty());
    f.advance(1);
    let again = f.recv("q", 20);
    assert_eq!(again[0].delivery_count, 2);
    assert_ne!(receipt(&again[0]), receipt(&got[0]));
}

#[test]
fn visibility_zero_still_counts_a_delivery_and_leaves_the_message_visible() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    f.put("q", "m");
    let look = f.recv_vis("q", 1, 0);
    assert_eq!((look[0].delivery_count, look[0].state), (1, State::Visible));
    assert_eq!(f.stats("q").visible, 1);
    let got = f.recv("q", 1);
    assert_eq!(got[0].delivery_count, 2);
    // The quick look's receipt named a lease that ended at once.
    assert_eq!(
        f.engine
            .delete(Address::queue("q"), &[receipt(&look[0])])
            .unwrap()[0],
        Err(Error::ReceiptStale)
    );
}

#[test]
fn a_message_at_max_deliveries_moves_to_the_dlq_instead_of_being_delivered() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            max_deliveries: 2,
            visibility_timeout_ms: 1_000,
            ..QueueSettings::default()
        },
    );
    let p = f.put_msg(
        "q",
        NewMessage {
            channel: Some("c".into()),
            attributes: vec![("k".into(), "v".into())],
            ..NewMessage::new("poison")
        },
    );
    for n in 1..=2 {
        assert_eq!(f.recv("q", 1)[0].delivery_count, n);
        f.advance(1_000);
    }
    assert!(
        f.recv("q", 1).is_empty(),
        "the third delivery does not happen"
    );
    let dl = f.engine.peek(Address::dlq("q"), 0, 10).unwrap();
    assert_eq!(dl.len(), 1);
    let m = &dl[0];
    assert_eq!(
        (m.seq, m.id, m.delivery_count, &m.payload[..]),
        (p.seq, p.id, 2, &b"poison"[..])
    );
    assert_eq!(m.channel.as_deref(), Some("c"));
    assert_eq!(m.attributes.as_ref().unwrap()[0].1.as_ref(), "v");
    assert_eq!(
        m.dead_letter.as_ref().unwrap().reason,
        DeadLetterReason::MaxDeliveries
    );
    assert_eq!(f.stats("q").dead_letterings, 1);
}

#[test]
fn max_deliveries_zero_means_unlimited() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            max_deliveries: 0,
            ..QueueSettings::default()
        },
    );
    f.put("q", "m");
    for n in 1..=50 {
        assert_eq!(f.recv_vis("q", 1, 0)[0].delivery_count, n);
    }
}

#[test]
fn receive_is_fair_across_non_empty_channels() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    let on = |c: &str, p: String| NewMessage {
        channel: Some(c.to_owned()),
        ..NewMessage::new(p)
    };
    for chunk in 0..5 {
        f.engine
            .put(
                "q",
                (0..20)
                    .map(|i| on("noisy", format!("n{}", chunk * 20 + i)))
                    .collect(),
            )
            .unwrap();
    }
    f.engine
        .put(
            "q",
            vec![on("quiet", "q0".into()), on("quiet", "q1".into())],
        )
        .unwrap();
    f.put("q", "plain");
    let got = payloads(&f.recv("q", 6));
    assert_eq!(got, vec!["n0", "q0", "plain", "n1", "q1", "n2"]);
}

#[test]
fn a_channel_filter_matches_exactly_or_by_prefix_with_a_trailing_star() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    for c in ["eu-west", "eu-north", "us-east", "eu"] {
        f.put_msg(
            "q",
            NewMessage {
                channel: Some(c.into()),
                ..NewMessage::new(c)
            },
        );
    }
    f.put("q", "none");
    let with = |filter: &str| ReceiveOptions {
        channel: Some(ChannelFilter::parse(filter).unwrap()),
        ..ReceiveOptions::now(20)
    };
    let got = f
        .engine
        .receive_now(Address::queue("q"), &with("eu"))
        .unwrap();
    assert_eq!(payloads(&got), vec!["eu"]);
    let got = f
        .engine
        .receive_now(Address::queue("q"), &with("eu-*"))
        .unwrap();
    // Channels matching a prefix take turns in name order.
    assert_eq!(payloads(&got), vec!["eu-north", "eu-west"]);
    let got = f
        .engine
        .receive_now(Address::queue("q"), &with("*"))
        .unwrap();
    assert_eq!(payloads(&got), vec!["us-east", "none"]);
}

#[test]
fn order_is_first_in_first_out_per_channel() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    f.engine
        .put(
            "q",
            (0..20)
                .map(|i| NewMessage::new(format!("{i:02}")))
                .collect(),
        )
        .unwrap();
    let got = payloads(&f.recv("q", 20));
    let mut sorted = got.clone();
    sorted.sort();
    assert_eq!(got, sorted);
}

type Answers = Arc<Mutex<Vec<Result<Vec<Message>, Error>>>>;

fn parked_receive(f: &Fixture, q: &str, opts: ReceiveOptions) -> (Answers, Received) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let sink = got.clone();
    let r = f
        .engine
        .receive(Address::queue(q), &opts, move |r| {
            sink.lock().unwrap().push(r)
        })
        .unwrap();
    (got, r)
}

#[test]
fn a_long_poll_returns_as_soon_as_a_message_arrives() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    let (got, r) = parked_receive(
        &f,
        "q",
        ReceiveOptions {
            max_messages: 10,
            wait_ms: Some(20_000),
            ..ReceiveOptions::default()
        },
    );
    assert!(matches!(r, Received::Parked(_)));
    f.advance(5_000);
    assert!(got.lock().unwrap().is_empty());
    f.engine
        .put("q", vec![NewMessage::new("a"), NewMessage::new("b")])
        .unwrap();
    let got = got.lock().unwrap();
    assert_eq!(payloads(got[0].as_ref().unwrap()), vec!["a", "b"]);
    assert_eq!(f.stats("q").in_flight, 2);
}

#[test]
fn a_long_poll_returns_empty_when_its_wait_ends() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            receive_wait_default_ms: 2_000,
            ..QueueSettings::default()
        },
    );
    let (got, r) = parked_receive(&f, "q", ReceiveOptions::default());
    assert!(
        matches!(r, Received::Parked(_)),
        "the queue's receive_wait_default applies"
    );
    f.advance(1_999);
    assert!(got.lock().unwrap().is_empty());
    f.advance(1);
    assert_eq!(got.lock().unwrap().as_slice(), &[Ok(vec![])]);
    assert!(f.engine.tick().is_none(), "nothing left on the wheel");
}

#[test]
fn a_long_poll_is_answered_by_a_lease_that_ends() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            visibility_timeout_ms: 3_000,
            ..QueueSettings::default()
        },
    );
    f.put("q", "m");
    f.recv("q", 1);
    let (got, _) = parked_receive(
        &f,
        "q",
        ReceiveOptions {
            wait_ms: Some(10_000),
            ..ReceiveOptions::default()
        },
    );
    f.advance(3_000);
    assert_eq!(
        got.lock().unwrap()[0].as_ref().unwrap()[0].delivery_count,
        2
    );
}

#[test]
fn waiting_receivers_are_served_first_come_first_served() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    let opts = ReceiveOptions {
        max_messages: 1,
        wait_ms: Some(20_000),
        ..ReceiveOptions::default()
    };
    let waiters: Vec<_> = (0..3)
        .map(|_| parked_receive(&f, "q", opts.clone()).0)
        .collect();
    f.put("q", "first");
    f.put("q", "second");
    assert_eq!(
        payloads(waiters[0].lock().unwrap()[0].as_ref().unwrap()),
        vec!["first"]
    );
    assert_eq!(
        payloads(waiters[1].lock().unwrap()[0].as_ref().unwrap()),
        vec!["second"]
    );
    assert!(waiters[2].lock().unwrap().is_empty());
}

#[test]
fn a_waiter_with_a_channel_filter_is_passed_over_for_messages_it_does_not_want() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    let picky = ReceiveOptions {
        wait_ms: Some(20_000),
        channel: Some(ChannelFilter::parse("b").unwrap()),
        ..ReceiveOptions::default()
    };
    let (first, _) = parked_receive(&f, "q", picky);
    let (second, _) = parked_receive(
        &f,
        "q",
        ReceiveOptions {
            wait_ms: Some(20_000),
            ..ReceiveOptions::default()
        },
    );
    f.put_msg(
        "q",
        NewMessage {
            channel: Some("a".into()),
            ..NewMessage::new("for-a")
        },
    );
    assert!(first.lock().unwrap().is_empty());
    assert_eq!(
        payloads(second.lock().unwrap()[0].as_ref().unwrap()),
        vec!["for-a"]
    );
}

#[test]
fn a_cancelled_wait_is_never_answered() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    let (got, r) = parked_receive(
        &f,
        "q",
        ReceiveOptions {
            wait_ms: Some(5_000),
            ..ReceiveOptions::default()
        },
    );
    let Received::Parked(id) = r else {
        panic!("parked")
    };
    assert!(f.engine.cancel_wait(id));
    assert!(!f.engine.cancel_wait(id));
    f.put("q", "m");
    f.advance(10_000);
    assert!(got.lock().unwrap().is_empty());
    assert_eq!(f.stats("q").visible, 1);
}

// ----- receipts --------------------------------------------------------------------

#[test]
fn update_visibility_moves_the_lease_and_answers_the_new_time() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            visibility_timeout_ms: 1_000,
            ..QueueSettings::default()
        },
    );
    f.put("q", "m");
    let r = receipt(&f.recv("q", 1)[0]);
    f.advance(900);
    let at = f
        .engine
        .update_visibility(
            Address::queue("q"),
            &[VisibilityChange {
                receipt: r,
                timeout_ms: 5_000,
            }],
        )
        .unwrap();
    assert_eq!(at, vec![Ok(T0 + 900 + 5_000)]);
    f.advance(4_999);
    assert!(f.recv("q", 1).is_empty());
    f.engine.delete(Address::queue("q"), &[r]).unwrap()[0]
        .clone()
        .unwrap();
    let bad = VisibilityChange {
        receipt: r,
        timeout_ms: 43_200_001,
    };
    assert_eq!(
        field_of(
            f.engine
                .update_visibility(Address::queue("q"), &[bad])
                .unwrap()
                .remove(0)
                .unwrap_err()
        ),
        "timeout_ms"
    );
}

#[test]
fn update_visibility_zero_releases_at_once_and_ends_the_lease() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    f.put("q", "m");
    let r = receipt(&f.recv("q", 1)[0]);
    let change = VisibilityChange {
        receipt: r,
        timeout_ms: 0,
    };
    assert_eq!(
        f.engine
            .update_visibility(Address::queue("q"), &[change])
            .unwrap(),
        vec![Ok(T0)]
    );
    assert_eq!(
        f.engine
            .update_visibility(Address::queue("q"), &[change])
            .unwrap(),
        vec![Err(Error::ReceiptStale)]
    );
    assert_eq!(f.recv("q", 1)[0].delivery_count, 2);
}

#[test]
fn a_receipt_is_stale_once_its_lease_ran_out_even_before_redelivery() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            visibility_timeout_ms: 1_000,
            ..QueueSettings::default()
        },
    );
    f.put("q", "m");
    let r = receipt(&f.recv("q", 1)[0]);
    f.advance(1_000);
    assert_eq!(
        f.engine.delete(Address::queue("q"), &[r]).unwrap()[0],
        Err(Error::ReceiptStale)
    );
    let change = VisibilityChange {
        receipt: r,
        timeout_ms: 10,
    };
    assert_eq!(
        f.engine
            .update_visibility(Address::queue("q"), &[change])
            .unwrap()[0],
        Err(Error::ReceiptStale)
    );
    assert_eq!(f.engine.defer("q", &r), Err(Error::ReceiptStale));
    assert_eq!(
        f.engine.dead_letter("q", &r, "x", "y"),
        Err(Error::ReceiptStale)
    );
    assert_eq!(f.stats("q").visible, 1, "nothing touched the message");
}

#[test]
fn a_receipt_is_stale_after_redelivery_delete_defer_and_dead_letter() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            visibility_timeout_ms: 1_000,
            ..QueueSettings::default()
        },
    );
    f.put("q", "m");
    let old = receipt(&f.recv("q", 1)[0]);
    f.advance(1_000);
    let new = receipt(&f.recv("q", 1)[0]);
    assert_eq!(
        f.engine.delete(Address::queue("q"), &[old]).unwrap()[0],
        Err(Error::ReceiptStale)
    );
    f.engine.defer("q", &new).unwrap();
    assert_eq!(f.engine.defer("q", &new), Err(Error::ReceiptStale));
    let seq = f.engine.peek(Address::queue("q"), 0, 1).unwrap()[0].seq;
    let r = receipt(
        f.engine.receive_deferred("q", &[seq], None).unwrap()[0]
            .as_ref()
            .unwrap(),
    );
    f.engine.dead_letter("q", &r, "bad", "unparseable").unwrap();
    assert_eq!(
        f.engine.delete(Address::queue("q"), &[r]).unwrap()[0],
        Err(Error::ReceiptStale)
    );
    let r = receipt(
        &f.engine
            .receive_now(Address::dlq("q"), &ReceiveOptions::now(1))
            .unwrap()[0],
    );
    assert_eq!(
        f.engine.delete(Address::dlq("q"), &[r, r]).unwrap(),
        vec![Ok(()), Err(Error::ReceiptStale)]
    );
}

#[test]
fn exactly_one_of_two_racing_operations_on_a_delivery_wins() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    f.put("q", "m");
    let r = receipt(&f.recv("q", 1)[0]);
    let both = f.engine.delete(Address::queue("q"), &[r, r]).unwrap();
    assert_eq!(both, vec![Ok(()), Err(Error::ReceiptStale)]);
    assert_eq!(f.stats("q").deletes, 1);
}

#[test]
fn a_malformed_receipt_is_receipt_invalid() {
    for bad in ["", "zz", &"0".repeat(64), &"g".repeat(64), &"0".repeat(32)] {
        assert_eq!(
            bad.parse::<Receipt>().unwrap_err().kind(),
            ErrorKind::ReceiptInvalid
        );
    }
    let f = Fixture::with_queue("q", QueueSettings::default());
    f.put("q", "m");
    let r = receipt(&f.recv("q", 1)[0]);
    let text = r.to_string();
    assert_eq!(text.parse::<Receipt>().unwrap(), r);
    // A changed digit still parses, but its tag no longer matches: the
    // engine refuses it and nothing changes.
    for digit in [10, 20, 30, 40, 63] {
        let mut flipped = text.clone().into_bytes();
        flipped[digit] = if flipped[digit] == b'0' { b'1' } else { b'0' };
        let forged: Receipt = String::from_utf8(flipped).unwrap().parse().unwrap();
        let e = f.engine.delete(Address::queue("q"), &[forged]).unwrap()[0].clone();
        assert_eq!(e.unwrap_err().kind(), ErrorKind::ReceiptInvalid);
    }
    assert_eq!(f.engine.stats("q").unwrap().in_flight, 1);
    assert_eq!(Receipt::from_bytes(&r.to_bytes()).unwrap(), r);
}

#[test]
fn a_receipt_from_another_queue_or_the_dlq_is_stale_there() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    f.engine
        .create_queue("other", QueueSettings::default())
        .unwrap();
    f.put("q", "m");
    let r = receipt(&f.recv("q", 1)[0]);
    assert_eq!(
        f.engine.delete(Address::queue("other"), &[r]).unwrap()[0],
        Err(Error::ReceiptStale)
    );
    assert_eq!(
        f.engine.delete(Address::dlq("q"), &[r]).unwrap()[0],
        Err(Error::ReceiptStale)
    );
    assert_eq!(
        f.engine.delete(Address::queue("q"), &[r]).unwrap()[0],
        Ok(())
    );
}

// ----- defer -------------------------------------------------------------------------

#[test]
fn deferred_messages_are_skipped_by_receive_and_found_by_peek() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    let p = f.put("q", "d");
    f.put("q", "other");
    let r = receipt(&f.recv("q", 1)[0]);
    f.engine.defer("q", &r).unwrap();
    assert_eq!(payloads(&f.recv("q", 10)), vec!["other"]);
    let peeked = f.engine.peek(Address::queue("q"), p.seq, 1).unwrap();
    assert_eq!(
        (peeked[0].state, peeked[0].delivery_count),
        (State::Deferred, 1)
    );
    assert_eq!(f.stats("q").deferred, 1);
}

#[test]
fn receive_deferred_leases_by_sequence_number_with_a_fresh_receipt() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    let p = f.put("q", "d");
    let first = receipt(&f.recv("q", 1)[0]);
    f.engine.defer("q", &first).unwrap();
    let got = f
        .engine
        .receive_deferred("q", &[p.seq, 777], Some(5_000))
        .unwrap();
    let m = got[0].as_ref().unwrap();
    assert_eq!(
        (m.delivery_count, m.state, m.next_visible_at_ms),
        (2, State::InFlight, T0 + 5_000)
    );
    assert_ne!(receipt(m), first);
    assert_eq!(got[1].as_ref().unwrap_err().kind(), ErrorKind::NotFound);
    // Not deferred any more: a second receive-deferred finds nothing.
    assert_eq!(
        f.engine.receive_deferred("q", &[p.seq], None).unwrap()[0]
            .as_ref()
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    f.engine.delete(Address::queue("q"), &[receipt(m)]).unwrap()[0]
        .clone()
        .unwrap();
}

#[test]
fn deferred_messages_do_not_expire_until_received_by_sequence_number() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            retention_ms: 60_000,
            ..QueueSettings::default()
        },
    );
    let p = f.put("q", "d");
    let r = receipt(&f.recv("q", 1)[0]);
    f.engine.defer("q", &r).unwrap();
    f.advance(120_000);
    assert_eq!(f.stats("q").deferred, 1, "still there, past its retention");
    let got = f.engine.receive_deferred("q", &[p.seq], None).unwrap();
    assert_eq!(got[0], Err(Error::Expired { seq: p.seq }));
    let s = f.stats("q");
    assert_eq!(
        (s.deferred, s.expiries, s.dead_lettered),
        (0, 1, 0),
        "dropped without dead_letter_on_expiration"
    );
}

#[test]
fn an_expired_deferred_message_goes_to_the_dlq_with_dead_letter_on_expiration() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            retention_ms: 60_000,
            dead_letter_on_expiration: true,
            ..QueueSettings::default()
        },
    );
    let p = f.put("q", "d");
    f.engine.defer("q", &receipt(&f.recv("q", 1)[0])).unwrap();
    f.advance(60_000);
    assert_eq!(
        f.engine.receive_deferred("q", &[p.seq], None).unwrap()[0],
        Err(Error::Expired { seq: p.seq })
    );
    assert_eq!(f.stats("q").dead_lettered, 1);
}

// ----- dead letters and the DLQ ----------------------------------------------------------

#[test]
fn a_consumer_dead_letter_records_its_reason_description_source_and_time() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    let p = f.put("q", "m");
    f.advance(250);
    let r = receipt(&f.recv("q", 1)[0]);
    f.engine
        .dead_letter("q", &r, "schema", "field x missing")
        .unwrap();
    let m = &f.engine.peek(Address::dlq("q"), 0, 10).unwrap()[0];
    assert_eq!((m.seq, m.delivery_count), (p.seq, 1));
    let info = m.dead_letter.as_ref().unwrap();
    assert_eq!(
        info.reason,
        DeadLetterReason::Consumer {
            reason: "schema".into(),
            description: "field x missing".into()
        }
    );
    assert_eq!((info.source_queue.as_ref(), info.at_ms), ("q", T0 + 250));
    let r2 = receipt(&f.recv("q", 1).pop().unwrap_or_else(|| {
        f.put("q", "n");
        f.recv("q", 1).remove(0)
    }));
    let e = f
        .engine
        .dead_letter("q", &r2, &"x".repeat(257), "")
        .unwrap_err();
    assert_eq!(field_of(e), "reason");
}

#[test]
fn the_dlq_can_be_received_from_deleted_from_and_purged() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    for p in ["a", "b", "c"] {
        f.put("q", p);
        let r = receipt(&f.recv("q", 1)[0]);
        f.engine.dead_letter("q", &r, "r", "").unwrap();
    }
    let got = f
        .engine
        .receive_now(Address::dlq("q"), &ReceiveOptions::now(2))
        .unwrap();
    assert_eq!(payloads(&got), vec!["a", "b"]);
    assert_eq!(got[0].state, State::InFlight);
    f.engine
        .delete(Address::dlq("q"), &[receipt(&got[0])])
        .unwrap()[0]
        .clone()
        .unwrap();
    assert_eq!(f.stats("q").dead_lettered, 2);
    f.engine.purge(Address::dlq("q")).unwrap();
    assert_eq!(f.stats("q").dead_lettered, 0);
    assert_eq!(
        f.engine
            .delete(Address::dlq("q"), &[receipt(&got[1])])
            .unwrap()[0],
        Err(Error::ReceiptStale)
    );
}

fn dead_letter_n(f: &Fixture, n: usize) {
    for i in 0..n {
        f.put("q", &format!("m{i}"));
        let r = receipt(&f.recv("q", 1)[0]);
        f.engine.dead_letter("q", &r, "r", "").unwrap();
    }
}

#[test]
fn redrive_moves_dead_letters_back_with_their_delivery_count_reset() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    dead_letter_n(&f, 3);
    let ids: Vec<MessageId> = f
        .engine
        .peek(Address::dlq("q"), 0, 10)
        .unwrap()
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(
        f.engine.redrive("q", None, None).unwrap(),
        RedriveOutcome {
            moved: 3,
            scheduled: 0
        }
    );
    let got = f.recv("q", 10);
    assert_eq!(payloads(&got), vec!["m0", "m1", "m2"]);
    assert!(got
        .iter()
        .all(|m| m.delivery_count == 1 && m.dead_letter.is_none()));
    assert_eq!(
        got.iter().map(|m| m.id).collect::<Vec<_>>(),
        ids,
        "ids are kept"
    );
    assert_eq!(f.stats("q").redriven, 3);
}

#[test]
fn redrive_moves_at_most_n() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    dead_letter_n(&f, 3);
    assert_eq!(f.engine.redrive("q", Some(2), None).unwrap().moved, 2);
    assert_eq!(f.stats("q").dead_lettered, 1);
    assert_eq!(
        field_of(f.engine.redrive("q", Some(0), None).unwrap_err()),
        "max_messages"
    );
}

#[test]
fn redrive_at_a_rate_moves_at_most_r_per_second() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    dead_letter_n(&f, 5);
    assert_eq!(
        f.engine.redrive("q", None, Some(2)).unwrap(),
        RedriveOutcome {
            moved: 2,
            scheduled: 3
        }
    );
    f.advance(999);
    assert_eq!(f.stats("q").visible, 2);
    f.advance(1);
    assert_eq!(f.stats("q").visible, 4);
    f.advance(1_000);
    assert_eq!((f.stats("q").visible, f.stats("q").dead_lettered), (5, 0));
    assert_eq!(
        field_of(f.engine.redrive("q", None, Some(0)).unwrap_err()),
        "rate_per_second"
    );
    assert_eq!(
        field_of(
            f.engine
                .redrive("q", None, Some(limits::REDRIVE_BATCH_MAX + 1))
                .unwrap_err()
        ),
        "rate_per_second"
    );
}

#[test]
fn a_redrive_moves_at_most_a_batch_at_once_and_the_rest_a_batch_a_second() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    let batch = limits::REDRIVE_BATCH_MAX as u64;
    // 2.5 batches of dead letters, put and dead-lettered 20 at a time.
    let total = batch * 5 / 2;
    for _ in 0..total / 20 {
        let b = (0..20).map(|_| NewMessage::new("m")).collect();
        f.engine.put("q", b).unwrap();
        let got = f
            .engine
            .receive_now(Address::queue("q"), &ReceiveOptions::now(20))
            .unwrap();
        for m in got {
            f.engine
                .dead_letter("q", &m.receipt.unwrap(), "r", "")
                .unwrap();
        }
    }
    assert_eq!(f.stats("q").dead_lettered, total);
    // Without a rate: one batch now, the rest scheduled, never all in one
    // call.
    assert_eq!(
        f.engine.redrive("q", None, None).unwrap(),
        RedriveOutcome {
            moved: batch,
            scheduled: total - batch
        }
    );
    f.advance(1_000);
    assert_eq!(f.stats("q").visible, 2 * batch);
    f.advance(1_000);
    assert_eq!(
        (f.stats("q").visible, f.stats("q").dead_lettered),
        (total, 0)
    );
}

#[test]
fn dead_letters_go_to_the_dead_letter_target_when_one_is_set() {
    let f = Fixture::new();
    f.engine
        .create_queue("poison", QueueSettings::default())
        .unwrap();
    f.engine
        .create_queue(
            "q",
            QueueSettings {
                dead_letter_target: Some("poison".into()),
                ..QueueSettings::default()
            },
        )
        .unwrap();
    let p = f.put("q", "bad");
    let r = receipt(&f.recv("q", 1)[0]);
    f.engine.dead_letter("q", &r, "r", "d").unwrap();
    let got = f.recv("poison", 1);
    assert_eq!(payloads(&got), vec!["bad"]);
    assert_eq!(got[0].id, p.id, "the id travels with it");
    assert_eq!(
        got[0].dead_letter.as_ref().unwrap().source_queue.as_ref(),
        "q"
    );
    assert_eq!(f.stats("q").dead_lettered, 0);
    // Target gone: dead letters fall back to the built-in DLQ.
    f.engine.delete_queue("poison").unwrap();
    f.put("q", "bad2");
    let r = receipt(&f.recv("q", 1)[0]);
    f.engine.dead_letter("q", &r, "r", "d").unwrap();
    assert_eq!(
        payloads(&f.engine.peek(Address::dlq("q"), 0, 10).unwrap()),
        vec!["bad2"]
    );
}

// ----- peek ----------------------------------------------------------------------------

#[test]
fn peek_browses_every_state_in_sequence_order_without_delivering() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    let seqs: Vec<u64> = (0..4).map(|i| f.put("q", &format!("m{i}")).seq).collect();
    f.put_msg(
        "q",
        NewMessage {
            availability: Availability::DelayMs(1_000),
            ..NewMessage::new("later")
        },
    );
    f.recv("q", 1);
    let all = f.engine.peek(Address::queue("q"), 0, 100).unwrap();
    assert_eq!(
        all.iter().map(|m| m.state).collect::<Vec<_>>(),
        vec![
            State::InFlight,
            State::Visible,
            State::Visible,
            State::Visible,
            State::Delayed
        ]
    );
    assert!(all.iter().all(|m| m.receipt.is_none()));
    let from = f.engine.peek(Address::queue("q"), seqs[2], 2).unwrap();
    assert_eq!(
        from.iter().map(|m| m.seq).collect::<Vec<_>>(),
        vec![seqs[2], seqs[3]]
    );
    let again = f.engine.peek(Address::queue("q"), 0, 100).unwrap();
    assert_eq!(all, again, "peeking changed nothing");
    assert_eq!(
        field_of(f.engine.peek(Address::queue("q"), 0, 0).unwrap_err()),
        "max_messages"
    );
    assert_eq!(
        field_of(f.engine.peek(Address::queue("q"), 0, 101).unwrap_err()),
        "max_messages"
    );
}

// ----- errors --------------------------------------------------------------------------------

#[test]
fn every_operation_on_a_missing_queue_is_queue_not_found() {
    let f = Fixture::new();
    let a = Address::queue("nope");
    let nf = |k: ErrorKind| assert_eq!(k, ErrorKind::QueueNotFound);
    nf(f.engine
        .put("nope", vec![NewMessage::new("x")])
        .unwrap_err()
        .kind());
    nf(f.engine
        .receive_now(a, &ReceiveOptions::now(1))
        .unwrap_err()
        .kind());
    nf(f.engine.peek(a, 0, 1).unwrap_err().kind());
    nf(f.engine.purge(a).unwrap_err().kind());
    nf(f.engine.stats("nope").unwrap_err().kind());
    nf(f.engine.delete_queue("nope").unwrap_err().kind());
    nf(f.engine.redrive("nope", None, None).unwrap_err().kind());
    nf(f.engine.cancel_scheduled("nope", 1).unwrap_err().kind());
    nf(f.engine
        .receive_deferred("nope", &[1], None)
        .unwrap_err()
        .kind());
    assert_eq!(ErrorKind::QueueNotFound.as_str(), "queue_not_found");
}

// ----- events ----------------------------------------------------------------------------------

struct Recorder(Arc<Mutex<Vec<String>>>);

impl EventSink for Recorder {
    fn record(&mut self, event: &Event<'_>) {
        let name = format!("{event:?}");
        self.0
            .lock()
            .unwrap()
            .push(name.split([' ', '{']).next().unwrap().to_owned());
    }
}

#[test]
fn every_durable_state_change_is_an_explicit_event_in_order() {
    let f = Fixture::new();
    let log = Arc::new(Mutex::new(Vec::new()));
    let shard = f.engine.shard_of("q");
    f.engine
        .set_journal(shard, Some(Box::new(Recorder(log.clone()))));
    f.engine
        .create_queue(
            "q",
            QueueSettings {
                visibility_timeout_ms: 1_000,
                ..QueueSettings::default()
            },
        )
        .unwrap();
    f.put("q", "m");
    f.recv("q", 1);
    f.advance(1_000);
    let r = receipt(&f.recv("q", 1)[0]);
    f.engine.defer("q", &r).unwrap();
    let seq = f.engine.peek(Address::queue("q"), 0, 1).unwrap()[0].seq;
    let r = receipt(
        f.engine.receive_deferred("q", &[seq], None).unwrap()[0]
            .as_ref()
            .unwrap(),
    );
    f.engine.delete(Address::queue("q"), &[r]).unwrap();
    f.engine.delete_queue("q").unwrap();
    assert_eq!(
        *log.lock().unwrap(),
        vec![
            "QueueSet",
            "Stored",
            "Delivered",
            // The lease ran out: a failed attempt the message keeps.
            "Attempt",
            "Delivered",
            "Deferred",
            "Deferred",
            "Delivered",
            "Removed",
            "QueueDeleted"
        ]
    );
}

#[test]
fn a_queue_delay_holds_back_puts_that_name_no_delay_of_their_own() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            delay_ms: 5_000,
            ..QueueSettings::default()
        },
    );
    f.put("q", "queue's delay");
    f.put_msg(
        "q",
        NewMessage {
            availability: Availability::DelayMs(0),
            ..NewMessage::new(Bytes::from_static(b"no delay"))
        },
    );
    let got = f.recv_vis("q", 10, 60_000);
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0].payload[..], b"no delay");
    assert_eq!(f.engine.stats("q").unwrap().delayed, 1);
    f.advance(4_999);
    assert!(f.recv("q", 10).is_empty());
    f.advance(1);
    let got = f.recv("q", 10);
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0].payload[..], b"queue's delay");
    let e = f
        .engine
        .update_queue(
            "q",
            &SettingsUpdate {
                delay_ms: Some(15 * 60_000 + 1),
                ..SettingsUpdate::default()
            },
        )
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn a_queue_keeps_when_it_was_created_and_last_changed_but_tags_do_not_change_it() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    let times = f.engine.stats("q").unwrap().times;
    assert_eq!(times.created_at_ms, T0);
    assert_eq!(times.modified_at_ms, T0);
    f.advance(1_000);
    let tagged = f
        .engine
        .update_queue(
            "q",
            &SettingsUpdate {
                tags_set: vec![("team".into(), "a".into()), ("env".into(), "prod".into())],
                ..SettingsUpdate::default()
            },
        )
        .unwrap();
    assert_eq!(
        tagged.tags,
        vec![("env".into(), "prod".into()), ("team".into(), "a".into())]
    );
    assert_eq!(f.engine.stats("q").unwrap().times.modified_at_ms, T0);
    f.advance(1_000);
    let changed = f
        .engine
        .update_queue(
            "q",
            &SettingsUpdate {
                visibility_timeout_ms: Some(1_000),
                tags_set: vec![("team".into(), "b".into())],
                tags_remove: vec!["env".into()],
                ..SettingsUpdate::default()
            },
        )
        .unwrap();
    assert_eq!(changed.tags, vec![("team".into(), "b".into())]);
    let times = f.engine.stats("q").unwrap().times;
    assert_eq!(
        (times.created_at_ms, times.modified_at_ms),
        (T0, T0 + 2_000)
    );
    // Creating it again with other tags is no conflict (tags are not
    // settings) and changes nothing.
    let same = QueueSettings {
        visibility_timeout_ms: 1_000,
        tags: vec![("other".into(), "x".into())],
        ..QueueSettings::default()
    };
    assert!(!f.engine.create_queue("q", same).unwrap());
    assert_eq!(
        f.engine.queue_settings("q").unwrap().tags,
        vec![("team".into(), "b".into())]
    );
}

#[test]
fn tags_are_bounded_in_number_and_size() {
    let f = Fixture::with_queue("q", QueueSettings::default());
    let many: Vec<(String, String)> = (0..51).map(|i| (format!("k{i}"), "v".into())).collect();
    for (tags, what) in [
        (many, "51 tags"),
        (vec![(String::new(), "v".into())], "an empty key"),
        (vec![("k".repeat(129), "v".into())], "a long key"),
        (vec![("k".into(), "v".repeat(257))], "a long value"),
    ] {
        let e = f
            .engine
            .update_queue(
                "q",
                &SettingsUpdate {
                    tags_set: tags,
                    ..SettingsUpdate::default()
                },
            )
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{what}");
    }
    assert!(f.engine.queue_settings("q").unwrap().tags.is_empty());
}

/// Dead letters of `a` and `b` forwarded to their target `dlq`.
fn two_sources_and_a_target() -> Fixture {
    let f = Fixture::with_queue("dlq", QueueSettings::default());
    for q in ["a", "b"] {
        f.engine
            .create_queue(
                q,
                QueueSettings {
                    dead_letter_target: Some("dlq".into()),
                    ..QueueSettings::default()
                },
            )
            .unwrap();
        for i in 0..2 {
            f.put(q, &format!("{q}{i}"));
        }
        for m in f.recv(q, 10) {
            f.engine
                .dead_letter(q, &m.receipt.unwrap(), "bad", "")
                .unwrap();
        }
    }
    f.engine.tick();
    assert_eq!(f.engine.stats("dlq").unwrap().visible, 4);
    f
}

fn bodies(ms: &[Message]) -> Vec<String> {
    let mut b: Vec<String> = ms
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect();
    b.sort();
    b
}

#[test]
fn a_move_task_sends_dead_letters_back_to_their_sources_at_its_rate() {
    let f = two_sources_and_a_target();
    let task = f.engine.start_move("dlq", None, None, Some(3)).unwrap();
    f.engine.tick();
    assert_eq!((task.id, task.from_dlq, task.to.clone()), (1, false, None));
    assert_eq!(
        (task.moved, task.to_move, task.status),
        (3, 4, MoveStatus::Running)
    );
    assert_eq!(f.engine.stats("dlq").unwrap().visible, 1);
    f.advance(1_000);
    let done = f.engine.moves("dlq").unwrap().pop().unwrap();
    assert_eq!((done.moved, done.status), (4, MoveStatus::Completed));
    let a = f.recv("a", 10);
    assert_eq!(bodies(&a), ["a0", "a1"]);
    // Back as new messages: no dead-letter record, no deliveries yet.
    assert!(a
        .iter()
        .all(|m| m.dead_letter.is_none() && m.delivery_count == 1));
    assert_eq!(bodies(&f.recv("b", 10)), ["b0", "b1"]);
}

#[test]
fn a_move_to_a_named_queue_leaves_later_puts_and_can_be_cancelled() {
    let f = two_sources_and_a_target();
    f.engine
        .create_queue("elsewhere", QueueSettings::default())
        .unwrap();
    let task = f
        .engine
        .start_move("dlq", Some("elsewhere".into()), None, Some(1))
        .unwrap();
    f.put("dlq", "put after the start");
    f.engine.tick();
    assert_eq!(f.engine.stats("elsewhere").unwrap().visible, 1);
    f.advance(1_000);
    assert_eq!(f.engine.stats("elsewhere").unwrap().visible, 2);
    let cancelled = f.engine.cancel_move("dlq", task.id).unwrap();
    assert_eq!(
        (cancelled.moved, cancelled.status),
        (2, MoveStatus::Cancelled)
    );
    f.advance(5_000);
    assert_eq!(f.engine.stats("elsewhere").unwrap().visible, 2);
    assert_eq!(f.engine.stats("dlq").unwrap().visible, 3);
    // Cancelling an ended task changes nothing; an unknown one is an error.
    assert_eq!(
        f.engine.cancel_move("dlq", task.id).unwrap().status,
        MoveStatus::Cancelled
    );
    assert_eq!(
        f.engine.cancel_move("dlq", 99).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    // A new task takes what is there at its start (the message put after
    // the first one's start too), not what comes after.
    f.engine
        .start_move("dlq", Some("elsewhere".into()), None, None)
        .unwrap();
    f.put("dlq", "put after the second start");
    f.engine.tick();
    assert_eq!(f.engine.stats("elsewhere").unwrap().visible, 5);
    assert_eq!(bodies(&f.recv("dlq", 10)), ["put after the second start"]);
    let tasks = f.engine.moves("dlq").unwrap();
    assert_eq!(tasks.iter().map(|t| t.id).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(tasks[1].status, MoveStatus::Completed);
}

#[test]
fn a_destination_that_refuses_fails_the_task_and_the_message_stays() {
    let f = two_sources_and_a_target();
    let task = f
        .engine
        .start_move("dlq", Some("missing".into()), None, Some(1))
        .unwrap();
    f.engine.tick();
    let failed = f.engine.moves("dlq").unwrap().pop().unwrap();
    assert_eq!(failed.id, task.id);
    assert_eq!(failed.status, MoveStatus::Failed);
    assert_eq!(failed.moved, 0);
    assert!(failed.failure.unwrap().contains("missing"));
    f.advance(5_000);
    // All four still there, the one that came back with its record.
    let back = f.recv("dlq", 10);
    assert_eq!(back.len(), 4);
    assert!(back.iter().all(|m| m.dead_letter.is_some()));
}

#[test]
fn a_redrive_is_a_move_task_with_its_progress() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            max_deliveries: 1,
            ..QueueSettings::default()
        },
    );
    for i in 0..5 {
        f.put("q", &format!("m{i}"));
    }
    for m in f.recv("q", 10) {
        f.engine
            .dead_letter("q", &m.receipt.unwrap(), "bad", "")
            .unwrap();
    }
    let out = f.engine.redrive("q", None, Some(2)).unwrap();
    assert_eq!((out.moved, out.scheduled), (2, 3));
    let t = f.engine.moves("q").unwrap().pop().unwrap();
    assert_eq!(
        (t.from_dlq, t.moved, t.to_move, t.status),
        (true, 2, 5, MoveStatus::Running)
    );
    f.advance(1_000);
    f.advance(1_000);
    let t = f.engine.moves("q").unwrap().pop().unwrap();
    assert_eq!((t.moved, t.status), (5, MoveStatus::Completed));
    // Ten tasks are kept.
    for _ in 0..12 {
        f.engine.redrive("q", None, None).unwrap();
    }
    let ids: Vec<u64> = f.engine.moves("q").unwrap().iter().map(|t| t.id).collect();
    assert_eq!(ids, (4..=13).collect::<Vec<_>>());
}

#[test]
fn purging_the_half_a_task_moves_from_ends_it_and_no_other() {
    let f = two_sources_and_a_target();
    let task = f.engine.start_move("dlq", None, None, Some(1)).unwrap();
    // The DLQ half is not where this task moves from.
    f.engine.purge(Address::dlq("dlq")).unwrap();
    assert_eq!(
        f.engine.moves("dlq").unwrap()[0].status,
        MoveStatus::Running
    );
    f.engine.purge(Address::queue("dlq")).unwrap();
    let ended = f.engine.moves("dlq").unwrap().pop().unwrap();
    assert_eq!((ended.id, ended.status), (task.id, MoveStatus::Cancelled));
    assert_eq!(ended.failure.as_deref(), Some("the queue was purged"));
    f.advance(5_000);
    assert_eq!(f.engine.moves("dlq").unwrap()[0].moved, 1);
}

#[test]
fn a_message_keeps_when_it_was_first_received_to_the_second() {
    let f = Fixture::with_queue(
        "q",
        QueueSettings {
            max_deliveries: 0,
            ..QueueSettings::default()
        },
    );
    f.put("q", "m");
    assert_eq!(
        f.engine.peek(Address::queue("q"), 0, 1).unwrap()[0].first_received_at_ms,
        None
    );
    f.advance(2_500);
    let first = f.recv_vis("q", 1, 0);
    assert_eq!(first[0].first_received_at_ms, Some(T0 + 2_000));
    f.advance(7_000);
    let again = f.recv_vis("q", 1, 0);
    assert_eq!(again[0].delivery_count, 2);
    assert_eq!(again[0].first_received_at_ms, Some(T0 + 2_000));
}
