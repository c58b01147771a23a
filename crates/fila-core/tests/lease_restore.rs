//! Receipts that name a lease by sequence number (a cluster partition's
//! key) and restores that keep leases: what a new leader of a partition
//! does with the leases the last one committed.

use std::sync::Arc;

use bytes::Bytes;
use fila_core::*;

const T0: u64 = 1_700_000_000_000;

fn key() -> ReceiptKey {
    ReceiptKey::fixed(3, 5, 1).by_sequence()
}

fn engine(clock: &Arc<ManualClock>) -> Engine {
    Engine::with_receipt_key(1, clock.clone(), key())
}

fn leased_engine(clock: &Arc<ManualClock>, settings: QueueSettings) -> (Engine, Vec<Message>) {
    let e = engine(clock);
    e.create_queue("q", settings).unwrap();
    let batch = (0..4)
        .map(|i| {
            let mut m = NewMessage::new(Bytes::from(format!("m{i}")));
            if i < 2 {
                m.group = Some("g".to_owned());
            }
            m
        })
        .collect();
    for r in e.put("q", batch).unwrap() {
        r.unwrap();
    }
    let mut opts = ReceiveOptions::now(10);
    opts.visibility_ms = Some(30_000);
    let got = e.receive_now(Address::queue("q"), &opts).unwrap();
    (e, got)
}

fn receipts(ms: &[Message]) -> Vec<Receipt> {
    ms.iter().map(|m| m.receipt.unwrap()).collect()
}

#[test]
fn a_restore_that_keeps_leases_takes_their_receipts() {
    let clock = Arc::new(ManualClock::new(T0));
    let (old, got) = leased_engine(&clock, QueueSettings::default());
    // The group's head and the two ungrouped messages: three leases.
    assert_eq!(got.len(), 3);
    let image = old.export(|| {}).unwrap();
    clock.advance(1_000);
    let new = engine(&clock);
    new.restore_leased(image).unwrap();
    let stats = new.stats("q").unwrap();
    assert_eq!((stats.in_flight, stats.visible), (3, 1));
    // The group stays held by its leased head.
    assert!(new
        .receive_now(Address::queue("q"), &ReceiveOptions::now(10))
        .unwrap()
        .is_empty());
    let r = receipts(&got);
    // The receipts the old engine gave work here: a delete, a visibility
    // change, a release.
    assert!(new.delete(Address::queue("q"), &r[..1]).unwrap()[0].is_ok());
    let changes = [
        VisibilityChange {
            receipt: r[1],
            timeout_ms: 60_000,
        },
        VisibilityChange {
            receipt: r[2],
            timeout_ms: 0,
        },
    ];
    for a in new
        .update_visibility(Address::queue("q"), &changes)
        .unwrap()
    {
        a.unwrap();
    }
    // The group freed by the delete gives its next message; the released
    // one is visible again: a second delivery, whose count is 2.
    let again = new
        .receive_now(Address::queue("q"), &ReceiveOptions::now(10))
        .unwrap();
    let counts: Vec<u32> = again.iter().map(|m| m.delivery_count).collect();
    assert_eq!(again.len(), 2, "{counts:?}");
    assert!(counts.contains(&2) && counts.contains(&1));
    // The first delivery's receipt of the redelivered one is refused now.
    let stale = new.delete(Address::queue("q"), &r[2..3]).unwrap();
    assert!(matches!(stale[0], Err(Error::ReceiptStale)), "{stale:?}");
    new.check_invariants().unwrap();
}

#[test]
fn a_plain_restore_ends_every_lease() {
    let clock = Arc::new(ManualClock::new(T0));
    let (old, got) = leased_engine(&clock, QueueSettings::default());
    let new = engine(&clock);
    new.restore(old.export(|| {}).unwrap()).unwrap();
    let stats = new.stats("q").unwrap();
    assert_eq!((stats.in_flight, stats.visible), (0, 4));
    let gone = new.delete(Address::queue("q"), &receipts(&got)).unwrap();
    assert!(gone.iter().all(|r| matches!(r, Err(Error::ReceiptStale))));
}

#[test]
fn a_kept_lease_ends_at_its_time_and_the_message_comes_back() {
    let clock = Arc::new(ManualClock::new(T0));
    let (old, got) = leased_engine(&clock, QueueSettings::default());
    let new = engine(&clock);
    new.restore_leased(old.export(|| {}).unwrap()).unwrap();
    clock.advance(30_001);
    new.tick();
    let stats = new.stats("q").unwrap();
    assert_eq!((stats.in_flight, stats.visible), (0, 4));
    let late = new.delete(Address::queue("q"), &receipts(&got)).unwrap();
    assert!(late.iter().all(|r| matches!(r, Err(Error::ReceiptStale))));
    new.check_invariants().unwrap();
}

#[test]
fn a_receipt_names_its_kind_of_key() {
    let clock = Arc::new(ManualClock::new(T0));
    let (by_seq, got) = leased_engine(&clock, QueueSettings::default());
    let r = got[0].receipt.unwrap();
    // Version 3 on the wire, and it parses back.
    let text = r.to_string();
    assert!(text.starts_with("03"), "{text}");
    assert_eq!(text.parse::<Receipt>().unwrap(), r);
    // A slot-named engine with the same secret refuses it, and the other
    // way round.
    let by_slot = Engine::with_receipt_key(1, clock.clone(), ReceiptKey::fixed(3, 5, 1));
    by_slot.create_queue("q", QueueSettings::default()).unwrap();
    by_slot.put("q", vec![NewMessage::new("x")]).unwrap();
    let theirs = by_slot
        .receive_now(Address::queue("q"), &ReceiveOptions::now(1))
        .unwrap()[0]
        .receipt
        .unwrap();
    assert!(matches!(
        by_slot.delete(Address::queue("q"), &[r]).unwrap()[0],
        Err(Error::ReceiptInvalid(_))
    ));
    assert!(matches!(
        by_seq.delete(Address::queue("q"), &[theirs]).unwrap()[0],
        Err(Error::ReceiptInvalid(_))
    ));
    // A receipt used on the DLQ's address is stale there.
    assert!(matches!(
        by_seq.delete(Address::dlq("q"), &[r]).unwrap()[0],
        Err(Error::ReceiptStale)
    ));
    // Another delivery count forged into it fails its tag.
    let mut bytes = r.to_bytes();
    bytes[12] ^= 1;
    let forged = Receipt::from_bytes(&bytes).unwrap();
    assert!(matches!(
        by_seq.delete(Address::queue("q"), &[forged]).unwrap()[0],
        Err(Error::ReceiptInvalid(_))
    ));
}

#[test]
fn a_kept_lease_of_the_dlq_holds_there_too() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = engine(&clock);
    e.create_queue("q", QueueSettings::default()).unwrap();
    e.put("q", vec![NewMessage::new("once")]).unwrap();
    let mut opts = ReceiveOptions::now(1);
    opts.visibility_ms = Some(30_000);
    let first = e.receive_now(Address::queue("q"), &opts).unwrap();
    e.dead_letter("q", &first[0].receipt.unwrap(), "bad", "it failed")
        .unwrap();
    assert_eq!(e.stats("q").unwrap().dead_lettered, 1);
    let got = e.receive_now(Address::dlq("q"), &opts).unwrap();
    assert_eq!(got.len(), 1);
    let new = engine(&clock);
    new.restore_leased(e.export(|| {}).unwrap()).unwrap();
    assert!(new
        .receive_now(Address::dlq("q"), &ReceiveOptions::now(1))
        .unwrap()
        .is_empty());
    assert!(new.delete(Address::dlq("q"), &receipts(&got)).unwrap()[0].is_ok());
    new.check_invariants().unwrap();
}
