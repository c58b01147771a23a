//! A queue's retry policy (`retry_*` settings): a lease that ends without
//! a delete — expired, or released as failed — makes its message visible
//! after the policy's delay for its delivery count; a visibility change
//! of zero still makes it visible at once; an engine rebuilt after the
//! lease ended gives it the same delay. Time is the manual clock's.

use std::sync::Arc;

use bytes::Bytes;
use fila_core::*;

const T0: u64 = 1_700_000_000_000;
const LEASE: u64 = 10_000;

fn backoff() -> QueueSettings {
    QueueSettings {
        visibility_timeout_ms: LEASE,
        retry_initial_ms: 1_000,
        retry_multiplier_pct: 200,
        retry_max_ms: 3_000,
        max_deliveries: 0,
        ..QueueSettings::default()
    }
}

fn engine(clock: &Arc<ManualClock>, settings: QueueSettings, messages: usize) -> Engine {
    let e = Engine::with_receipt_key(1, clock.clone(), ReceiptKey::fixed(3, 5, 1));
    e.create_queue("q", settings).unwrap();
    let batch = (0..messages)
        .map(|i| NewMessage::new(Bytes::from(format!("m{i}"))))
        .collect();
    for r in e.put("q", batch).unwrap() {
        r.unwrap();
    }
    e
}

fn receive(e: &Engine) -> Vec<Message> {
    e.receive_now(Address::queue("q"), &ReceiveOptions::now(10))
        .unwrap()
}

/// Rounds of: receive the one message, let its lease expire, and wait
/// (by steps of 100 ms, at most a minute) until it is visible again —
/// how long each wait was.
fn waits_after_expiries(e: &Engine, clock: &ManualClock, rounds: usize) -> Vec<u64> {
    let mut waits = Vec::new();
    for _ in 0..rounds {
        assert_eq!(receive(e).len(), 1, "visible");
        clock.advance(LEASE);
        let mut waited = 0;
        while e.stats("q").unwrap().visible == 0 {
            assert!(waited < 60_000, "never visible again");
            clock.advance(100);
            waited += 100;
        }
        waits.push(waited);
    }
    waits
}

#[test]
fn an_expired_lease_waits_the_policys_delay_doubling_up_to_the_cap() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = engine(&clock, backoff(), 1);
    assert_eq!(receive(&e).len(), 1);
    clock.advance(LEASE);
    let stats = e.stats("q").unwrap();
    assert_eq!((stats.in_flight, stats.delayed, stats.visible), (0, 1, 0));
    clock.advance(1_000);
    assert_eq!(e.stats("q").unwrap().visible, 1);
    // Deliveries 2 to 5: 2 s, then the cap of 3 s.
    assert_eq!(
        waits_after_expiries(&e, &clock, 4),
        [2_000, 3_000, 3_000, 3_000]
    );
    assert_eq!(e.stats("q").unwrap().retries, 5);
}

#[test]
fn the_first_retries_wait_the_initial_delay_then_twice_it() {
    let clock = Arc::new(ManualClock::new(T0));
    let settings = QueueSettings {
        retry_max_ms: 60_000,
        ..backoff()
    };
    let e = engine(&clock, settings, 1);
    assert_eq!(waits_after_expiries(&e, &clock, 3), [1_000, 2_000, 4_000]);
    assert_eq!(e.stats("q").unwrap().retries, 3);
}

#[test]
fn without_a_policy_an_expired_lease_is_visible_at_once() {
    let clock = Arc::new(ManualClock::new(T0));
    let settings = QueueSettings {
        retry_initial_ms: 0,
        ..backoff()
    };
    let e = engine(&clock, settings, 1);
    assert_eq!(waits_after_expiries(&e, &clock, 3), [0, 0, 0]);
    assert_eq!(e.stats("q").unwrap().retries, 0);
}

#[test]
fn a_release_as_failed_waits_the_delay_and_a_visibility_change_of_zero_does_not() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = engine(&clock, backoff(), 2);
    let got = receive(&e);
    assert_eq!(got.len(), 2);
    let (failed, released) = (got[0].receipt.unwrap(), got[1].receipt.unwrap());
    let at = e.release(Address::queue("q"), &[failed], "", "").unwrap();
    assert_eq!(at[0].as_ref().unwrap(), &(T0 + 1_000));
    let zero = VisibilityChange {
        receipt: released,
        timeout_ms: 0,
    };
    e.update_visibility(Address::queue("q"), &[zero]).unwrap()[0]
        .as_ref()
        .unwrap();
    // The one changed to zero is visible at once; the failed one later.
    let now = receive(&e);
    assert_eq!(now.len(), 1);
    assert_eq!(now[0].seq, got[1].seq);
    clock.advance(999);
    assert!(receive(&e).is_empty());
    clock.advance(1);
    let later = receive(&e);
    assert_eq!(later.len(), 1);
    assert_eq!((later[0].seq, later[0].delivery_count), (got[0].seq, 2));
    // A receipt released once is stale.
    let again = e.release(Address::queue("q"), &[failed], "", "").unwrap();
    assert!(matches!(again[0], Err(Error::ReceiptStale)));
}

#[test]
fn a_release_as_failed_without_a_policy_is_visible_at_once() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = engine(&clock, QueueSettings::default(), 1);
    let got = receive(&e);
    let at = e
        .release(Address::queue("q"), &[got[0].receipt.unwrap()], "", "")
        .unwrap();
    assert_eq!(at[0].as_ref().unwrap(), &T0);
    assert_eq!(receive(&e).len(), 1);
}

#[test]
fn a_retry_past_the_messages_life_expires_it_on_time() {
    let clock = Arc::new(ManualClock::new(T0));
    let settings = QueueSettings {
        retention_ms: 60_000,
        retry_initial_ms: 3_600_000,
        retry_max_ms: 3_600_000,
        ..backoff()
    };
    let e = engine(&clock, settings, 1);
    assert_eq!(receive(&e).len(), 1);
    clock.advance(LEASE);
    assert_eq!(e.stats("q").unwrap().delayed, 1);
    clock.advance(60_000 - LEASE - 1);
    assert_eq!(e.stats("q").unwrap().delayed, 1);
    clock.advance(1);
    let stats = e.stats("q").unwrap();
    assert_eq!((stats.delayed, stats.expiries), (0, 1));
}

#[test]
fn a_groups_head_waiting_to_retry_holds_its_group() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = Engine::with_receipt_key(1, clock.clone(), ReceiptKey::fixed(3, 5, 1));
    e.create_queue("q", backoff()).unwrap();
    let batch = (0..2)
        .map(|i| {
            let mut m = NewMessage::new(Bytes::from(format!("m{i}")));
            m.group = Some("g".to_owned());
            m
        })
        .collect();
    for r in e.put("q", batch).unwrap() {
        r.unwrap();
    }
    let head = receive(&e);
    assert_eq!(head.len(), 1);
    e.release(Address::queue("q"), &[head[0].receipt.unwrap()], "", "")
        .unwrap()[0]
        .as_ref()
        .unwrap();
    assert!(receive(&e).is_empty(), "the group waits for its head");
    clock.advance(1_000);
    let again = receive(&e);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].seq, head[0].seq);
}

#[test]
fn an_engine_rebuilt_after_a_lease_ended_gives_it_the_same_delay() {
    let clock = Arc::new(ManualClock::new(T0));
    let key = ReceiptKey::fixed(3, 5, 1).by_sequence();
    let old = Engine::with_receipt_key(1, clock.clone(), key);
    old.create_queue("q", backoff()).unwrap();
    old.put("q", vec![NewMessage::new(Bytes::from("m"))])
        .unwrap()[0]
        .as_ref()
        .unwrap();
    assert_eq!(receive(&old).len(), 1);
    let image = old.export(|| {}).unwrap();
    // The lease ends while no engine runs; the new one starts 400 ms
    // after its end.
    clock.advance(LEASE + 400);
    let new = Engine::with_receipt_key(1, clock.clone(), key);
    new.restore_leased(image).unwrap();
    assert_eq!(new.stats("q").unwrap().delayed, 1);
    clock.advance(599);
    assert!(receive(&new).is_empty());
    clock.advance(1);
    assert_eq!(receive(&new).len(), 1);
}
