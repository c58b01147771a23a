//! Pausing a queue (issue 42, item 2), as Service Bus's entity status: its
//! receiving, its sending or both; a paused receive finds nothing and one
//! that waits is served on the resume; a paused put is refused; leases in
//! flight go on; the DLQ and dead letters arriving from another queue are
//! not paused; a create does not compare the pause; an image keeps it.

use std::sync::Arc;

use bytes::Bytes;
use fila_core::*;

const T0: u64 = 1_700_000_000_000;

fn engine(clock: &Arc<ManualClock>) -> Engine {
    let e = Engine::with_receipt_key(1, clock.clone(), ReceiptKey::fixed(3, 5, 1));
    e.create_queue("q", QueueSettings::default()).unwrap();
    e
}

fn put(e: &Engine, body: &str) -> Result<(), Error> {
    e.put("q", vec![NewMessage::new(Bytes::from(body.to_owned()))])?
        .remove(0)
        .map(drop)
}

fn receive(e: &Engine, dlq: bool) -> Vec<Message> {
    let addr = Address { queue: "q", dlq };
    e.receive_now(addr, &ReceiveOptions::now(10)).unwrap()
}

const RECEIVE: Pause = Pause {
    receive: true,
    send: false,
};
const SEND: Pause = Pause {
    receive: false,
    send: true,
};

#[test]
fn a_paused_receive_finds_nothing_until_the_resume_and_leases_go_on() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = engine(&clock);
    put(&e, "a").unwrap();
    put(&e, "b").unwrap();
    let leased = e
        .receive_now(Address::queue("q"), &ReceiveOptions::now(1))
        .unwrap();
    assert_eq!(leased.len(), 1);
    assert_eq!(e.pause("q", RECEIVE).unwrap(), RECEIVE);
    assert!(receive(&e, false).is_empty(), "paused");
    let refused = e.receive_deferred("q", &[2], None).unwrap_err();
    assert!(
        matches!(
            refused,
            Error::QueuePaused {
                what: "receiving",
                ..
            }
        ),
        "{refused}"
    );
    // Puts go on, and so does the lease taken before the pause.
    put(&e, "c").unwrap();
    e.delete(Address::queue("q"), &[leased[0].receipt.unwrap()])
        .unwrap()[0]
        .as_ref()
        .unwrap();
    let s = e.queue_settings("q").unwrap();
    assert!(s.receive_paused && !s.send_paused);
    assert_eq!(e.resume("q", RECEIVE).unwrap(), Pause::default());
    let got: Vec<Bytes> = receive(&e, false)
        .into_iter()
        .map(|m| m.payload.to_bytes())
        .collect();
    assert_eq!(got, [Bytes::from("b"), Bytes::from("c")]);
}

#[test]
fn a_paused_put_is_refused_naming_the_queue_and_nothing_is_stored() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = engine(&clock);
    assert_eq!(e.pause("q", SEND).unwrap(), SEND);
    let refused = put(&e, "a").unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::QueuePaused);
    assert!(
        refused
            .to_string()
            .contains("sending is paused on queue \"q\""),
        "{refused}"
    );
    assert_eq!(e.stats("q").unwrap().puts, 0);
    // Receiving is not paused.
    assert_eq!(e.pause("q", Pause::BOTH).unwrap(), Pause::BOTH);
    assert_eq!(e.resume("q", SEND).unwrap(), RECEIVE);
    put(&e, "a").unwrap();
    assert!(receive(&e, false).is_empty());
    e.resume("q", Pause::BOTH).unwrap();
    assert_eq!(receive(&e, false).len(), 1);
}

#[test]
fn a_waiting_receive_is_served_on_the_resume_or_answered_empty_at_its_end() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = engine(&clock);
    e.pause("q", RECEIVE).unwrap();
    put(&e, "a").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let waits = |name: &'static str, ms| {
        let mut o = ReceiveOptions::now(1);
        o.wait_ms = Some(ms);
        let tx = tx.clone();
        let got = e
            .receive(Address::queue("q"), &o, move |r| {
                tx.send((name, r.map(|ms| ms.len()))).unwrap();
            })
            .unwrap();
        assert!(
            matches!(got, Received::Parked(_)),
            "a paused receive that waits parks"
        );
    };
    waits("long", 5_000);
    waits("short", 1_000);
    // The short one's wait ends first, empty; a put meanwhile wakes none.
    put(&e, "b").unwrap();
    assert!(rx.try_recv().is_err(), "nothing served while paused");
    clock.advance(1_000);
    e.tick();
    assert_eq!(rx.try_recv().unwrap(), ("short", Ok(0)));
    assert!(rx.try_recv().is_err());
    e.resume("q", RECEIVE).unwrap();
    assert_eq!(rx.try_recv().unwrap(), ("long", Ok(1)));
}

#[test]
fn the_dead_letter_queue_and_arriving_dead_letters_are_not_paused() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = engine(&clock);
    let target = QueueSettings {
        dead_letter_target: Some("q".into()),
        ..QueueSettings::default()
    };
    e.create_queue("src", target).unwrap();
    put(&e, "a").unwrap();
    let m = receive(&e, false).remove(0);
    e.dead_letter("q", &m.receipt.unwrap(), "bad", "").unwrap();
    e.pause("q", Pause::BOTH).unwrap();
    assert_eq!(receive(&e, true).len(), 1, "the DLQ is received from");
    // A dead letter of another queue still arrives in a send-paused one.
    e.put("src", vec![NewMessage::new(Bytes::from("x"))])
        .unwrap()[0]
        .as_ref()
        .unwrap();
    let x = e
        .receive_now(Address::queue("src"), &ReceiveOptions::now(1))
        .unwrap()
        .remove(0);
    e.dead_letter("src", &x.receipt.unwrap(), "bad", "")
        .unwrap();
    e.tick();
    assert_eq!(e.stats("q").unwrap().visible, 1);
}

#[test]
fn a_create_does_not_compare_the_pause_and_an_image_keeps_it() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = engine(&clock);
    e.pause("q", SEND).unwrap();
    assert!(!e.create_queue("q", QueueSettings::default()).unwrap());
    let image = e.export(|| {}).unwrap();
    let again = Engine::with_receipt_key(1, clock.clone(), ReceiptKey::fixed(3, 5, 1));
    again.restore(image).unwrap();
    assert_eq!(put(&again, "a").unwrap_err().kind(), ErrorKind::QueuePaused);
    assert!(matches!(
        e.pause("q", Pause::default()),
        Err(Error::InvalidArgument { field: "pause", .. })
    ));
    assert!(matches!(
        e.pause("nope", SEND),
        Err(Error::QueueNotFound(_))
    ));
}
