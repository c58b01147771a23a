//! A queue's retry policy over the wire (issue 42, item 1): set and shown
//! by create, get and update, kept across a restart; a lease that expires,
//! or a release as failed, makes the message wait the policy's delay for
//! its delivery count; a visibility change of zero still shows it at
//! once; the retries counter and its metric. Time is a manual clock's.

use std::sync::Arc;

use fila_client::{Client, ErrorCode, QueueRef, SettingsPatch};
use fila_core::ManualClock;
use fila_tests::TestServer;

const T0: u64 = 1_800_000_000_000;

fn policy() -> SettingsPatch {
    SettingsPatch {
        visibility_timeout_ms: Some(10_000),
        retry_initial_ms: Some(1_000),
        retry_multiplier_pct: Some(300),
        retry_max_ms: Some(5_000),
        ..SettingsPatch::default()
    }
}

fn jobs() -> QueueRef {
    QueueRef {
        name: "jobs".into(),
        dlq: false,
    }
}

/// A receive that does not wait: the messages visible now.
fn take(c: &mut Client) -> Vec<fila_client::Message> {
    c.receive("jobs", 10, Some(0)).unwrap()
}

fn server(clock: &ManualClock) -> TestServer {
    TestServer::with_clock(Arc::new(clock.clone()), |c| {
        c.idle_timeout_secs = 0;
    })
}

#[test]
fn the_policy_is_set_shown_changed_and_kept_across_a_restart() {
    let clock = ManualClock::new(T0);
    let mut s = server(&clock);
    let mut c = s.client();
    c.create_queue("jobs", policy()).unwrap();
    let got = c.get_queue("jobs").unwrap();
    assert_eq!(
        (
            got.retry_initial_ms,
            got.retry_multiplier_pct,
            got.retry_max_ms,
            got.retry_jitter_pct
        ),
        (1_000, 300, 5_000, 0)
    );
    let changed = c
        .update_queue(
            "jobs",
            SettingsPatch {
                retry_jitter_pct: Some(25),
                ..SettingsPatch::default()
            },
        )
        .unwrap();
    assert_eq!(
        (changed.retry_initial_ms, changed.retry_jitter_pct),
        (1_000, 25)
    );
    s.restart();
    let mut c = s.client();
    let kept = c.get_queue("jobs").unwrap();
    assert_eq!(kept, changed);
    // The same create again is no conflict; another policy is one.
    assert!(!c
        .create_queue(
            "jobs",
            SettingsPatch {
                retry_jitter_pct: Some(25),
                ..policy()
            }
        )
        .unwrap());
    let other = c
        .create_queue(
            "jobs",
            SettingsPatch {
                retry_initial_ms: Some(2_000),
                ..policy()
            },
        )
        .unwrap_err();
    assert!(other.to_string().contains("retry_initial_ms"), "{other}");
}

#[test]
fn a_policy_out_of_range_is_refused_naming_the_setting() {
    let clock = ManualClock::new(T0);
    let s = server(&clock);
    let mut c = s.client();
    for (patch, field) in [
        (
            SettingsPatch {
                retry_initial_ms: Some(10_000),
                retry_max_ms: Some(5_000),
                ..SettingsPatch::default()
            },
            "retry_max_ms",
        ),
        (
            SettingsPatch {
                retry_multiplier_pct: Some(99),
                ..SettingsPatch::default()
            },
            "retry_multiplier_pct",
        ),
        (
            SettingsPatch {
                retry_jitter_pct: Some(101),
                ..SettingsPatch::default()
            },
            "retry_jitter_pct",
        ),
    ] {
        let e = c.create_queue("jobs", patch).unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::INVALID_ARGUMENT), "{e}");
        assert!(e.to_string().contains(field), "{e}");
    }
    assert!(c.get_queue("jobs").is_err(), "nothing was made");
}

#[test]
fn an_expired_lease_waits_its_delay_growing_with_each_delivery() {
    let clock = ManualClock::new(T0);
    let s = server(&clock);
    let mut c = s.client();
    c.create_queue("jobs", policy()).unwrap();
    c.put_one("jobs", "work").unwrap();
    // Deliveries 1, 2, 3 expire and wait 1 s, 3 s, then the cap of 5 s.
    for (delivery, wait) in [(1, 1_000), (2, 3_000), (3, 5_000)] {
        let got = take(&mut c);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].delivery_count, delivery);
        clock.advance(10_000);
        assert!(take(&mut c).is_empty(), "waiting after delivery {delivery}");
        let stats = c.stats("jobs").unwrap();
        assert_eq!((stats.delayed, stats.retries), (1, u64::from(delivery)));
        clock.advance(wait - 1);
        assert!(
            take(&mut c).is_empty(),
            "1 ms early after delivery {delivery}"
        );
        clock.advance(1);
        let stats = c.stats("jobs").unwrap();
        assert_eq!(stats.visible, 1, "back after delivery {delivery}");
    }
}

#[test]
fn a_release_waits_the_delay_and_a_visibility_change_of_zero_does_not() {
    let clock = ManualClock::new(T0);
    let s = server(&clock);
    let mut c = s.client();
    c.create_queue("jobs", policy()).unwrap();
    c.put_one("jobs", "failed").unwrap();
    c.put_one("jobs", "handed back").unwrap();
    let got = take(&mut c);
    assert_eq!(got.len(), 2);
    let receipt = |i: usize| got[i].receipt.unwrap();
    let released = c.release(&jobs(), &[receipt(0)]).unwrap();
    assert_eq!(released[0].as_ref().unwrap(), &(T0 + 1_000));
    c.update_visibility(&jobs(), &[(receipt(1), 0)]).unwrap()[0]
        .as_ref()
        .unwrap();
    let now = take(&mut c);
    assert_eq!(now.len(), 1);
    assert_eq!(&now[0].payload[..], b"handed back");
    clock.advance(1_000);
    let later = take(&mut c);
    assert_eq!(later.len(), 1);
    assert_eq!(
        (&later[0].payload[..], later[0].delivery_count),
        (&b"failed"[..], 2)
    );
    // A receipt whose lease ended is stale.
    let again = c.release(&jobs(), &[receipt(0)]).unwrap();
    assert_eq!(
        again[0].as_ref().unwrap_err().code(),
        Some(ErrorCode::RECEIPT_STALE)
    );
    assert_eq!(c.stats("jobs").unwrap().retries, 1);
    // The metrics count it too.
    let body = s.metrics();
    assert!(
        body.contains("fila_queue_retries_total{queue=\"jobs\"} 1"),
        "{body}"
    );
}

#[test]
fn without_a_policy_a_release_shows_the_message_at_once() {
    let clock = ManualClock::new(T0);
    let s = server(&clock);
    let mut c = s.client();
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    c.put_one("jobs", "work").unwrap();
    let got = take(&mut c);
    let released = c.release(&jobs(), &[got[0].receipt.unwrap()]).unwrap();
    assert_eq!(released[0].as_ref().unwrap(), &T0);
    assert_eq!(take(&mut c).len(), 1);
    assert_eq!(c.stats("jobs").unwrap().retries, 0);
}
