//! Updating a leased message (the Azure Queue API's Update Message): its
//! payload replaced within the queue's limits, its lease renewed under a
//! new receipt (the old one stale), its delivery count kept; a timeout of
//! 0 releases it; every count stays true.

use std::sync::Arc;

use bytes::Bytes;
use fila_core::*;

const T0: u64 = 1_700_000_000_000;

fn engine(settings: QueueSettings) -> (Arc<ManualClock>, Engine) {
    let clock = Arc::new(ManualClock::new(T0));
    let e = Engine::new(2, clock.clone());
    e.create_queue("q", settings).unwrap();
    (clock, e)
}

fn take(e: &Engine) -> Message {
    let opts = ReceiveOptions {
        visibility_ms: Some(30_000),
        ..ReceiveOptions::now(1)
    };
    let mut got = e.receive_now(Address::queue("q"), &opts).unwrap();
    assert_eq!(got.len(), 1, "a message to take");
    got.remove(0)
}

fn body(m: &Message) -> String {
    String::from_utf8_lossy(&m.payload).into_owned()
}

#[test]
fn content_is_replaced_and_the_lease_renewed_under_a_new_receipt() {
    let (clock, e) = engine(QueueSettings::default());
    e.put("q", vec![NewMessage::new(Bytes::from_static(b"draft"))])
        .unwrap();
    let m = take(&e);
    let old = m.receipt.unwrap();
    clock.advance(1_000);
    let u = e
        .update_message(Address::queue("q"), &old, Some(b"final version"), 60_000)
        .unwrap();
    let new = u.receipt.expect("a renewed lease");
    assert_ne!(new, old);
    assert_eq!(u.visible_at_ms, T0 + 1_000 + 60_000);
    e.check_invariants().unwrap();
    // The old receipt names nothing now; the new one does.
    assert_eq!(
        e.delete(Address::queue("q"), &[old]).unwrap()[0]
            .as_ref()
            .unwrap_err()
            .kind(),
        ErrorKind::ReceiptStale
    );
    let [p] = &e.peek(Address::queue("q"), 0, 10).unwrap()[..] else {
        panic!("one message")
    };
    assert_eq!(body(p), "final version");
    assert_eq!(p.delivery_count, 1);
    assert_eq!(p.state, State::InFlight);
    assert_eq!(p.next_visible_at_ms, T0 + 61_000);
    assert_eq!(e.stats("q").unwrap().bytes, 13);
    // The lease ends at its new time, not its first.
    clock.advance(30_000);
    e.tick();
    assert!(e
        .receive_now(Address::queue("q"), &ReceiveOptions::now(1))
        .unwrap()
        .is_empty());
    clock.advance(30_001);
    e.tick();
    let again = take(&e);
    assert_eq!(body(&again), "final version");
    assert_eq!(again.delivery_count, 2);
    // A visibility change without new content keeps the payload.
    let u = e
        .update_message(Address::queue("q"), &again.receipt.unwrap(), None, 5_000)
        .unwrap();
    e.delete(Address::queue("q"), &[u.receipt.unwrap()])
        .unwrap()[0]
        .as_ref()
        .unwrap();
    assert_eq!(e.stats("q").unwrap().bytes, 0);
    e.check_invariants().unwrap();
}

#[test]
fn a_timeout_of_zero_releases_the_message_with_its_new_content() {
    let (_clock, e) = engine(QueueSettings::default());
    e.put("q", vec![NewMessage::new(Bytes::from_static(b"a"))])
        .unwrap();
    let m = take(&e);
    let u = e
        .update_message(Address::queue("q"), &m.receipt.unwrap(), Some(b"b"), 0)
        .unwrap();
    assert_eq!(u.receipt, None);
    let again = take(&e);
    assert_eq!(body(&again), "b");
    assert_eq!(again.delivery_count, 2);
    e.check_invariants().unwrap();
}

#[test]
fn content_past_the_limits_is_refused_and_nothing_changes() {
    let settings = QueueSettings {
        max_message_bytes: 1024,
        max_bytes: 1024,
        ..QueueSettings::default()
    };
    let (_clock, e) = engine(settings);
    let part = Bytes::from(vec![b'a'; 300]);
    e.put(
        "q",
        vec![NewMessage::new(part.clone()), NewMessage::new(part)],
    )
    .unwrap();
    let m = take(&e);
    let r = m.receipt.unwrap();
    let too_large = e
        .update_message(Address::queue("q"), &r, Some(&[b'x'; 1025]), 1_000)
        .unwrap_err();
    assert_eq!(too_large.kind(), ErrorKind::MessageTooLarge);
    // 300 + 300 held; 1 000 in place of 300 would make 1 300 > 1 024.
    let full = e
        .update_message(Address::queue("q"), &r, Some(&[b'x'; 1000]), 1_000)
        .unwrap_err();
    assert_eq!(full.kind(), ErrorKind::QueueFull);
    assert_eq!(e.stats("q").unwrap().bytes, 600);
    // The receipt still holds: nothing changed.
    let u = e
        .update_message(Address::queue("q"), &r, Some(&[b'x'; 724]), 1_000)
        .unwrap();
    assert_eq!(e.stats("q").unwrap().bytes, 1024);
    let bad = e.update_message(Address::queue("q"), &r, Some(b"x"), 1_000);
    assert_eq!(bad.unwrap_err().kind(), ErrorKind::ReceiptStale);
    let too_long = e.update_message(
        Address::queue("q"),
        &u.receipt.unwrap(),
        None,
        fila_core::limits::VISIBILITY_MS_MAX + 1,
    );
    assert_eq!(too_long.unwrap_err().kind(), ErrorKind::InvalidArgument);
    e.check_invariants().unwrap();
}

#[test]
fn an_export_keeps_the_new_content() {
    let (_clock, e) = engine(QueueSettings::default());
    e.put("q", vec![NewMessage::new(Bytes::from_static(b"old"))])
        .unwrap();
    let m = take(&e);
    e.update_message(
        Address::queue("q"),
        &m.receipt.unwrap(),
        Some(b"new"),
        10_000,
    )
    .unwrap();
    let image = e.export(|| {}).unwrap();
    let (_c2, restored) = engine(QueueSettings::default());
    restored.delete_queue("q").unwrap();
    restored.restore(image).unwrap();
    // A restart ends leases: visible at once, with its new content.
    let again = take(&restored);
    assert_eq!(body(&again), "new");
    restored.check_invariants().unwrap();
}
