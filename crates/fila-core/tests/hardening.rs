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
    let rounds = 2_000u64;
    let visibility = {
        let e = e.clone();
        std::thread::spawn(move || {
            let mut seen_max = 0;
            for v in 1..=rounds {
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
    for m in 1..=rounds as u32 / 2 {
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
        (rounds, rounds as u32 / 2)
    );
}
