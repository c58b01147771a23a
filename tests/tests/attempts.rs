//! A message's attempt history over the wire (issue 42, item 3): the
//! failures a release (with its reason), a lease that runs out and a
//! consumer's dead-letter leave on a message, shown by a peek that asks
//! for them (a dead letter's too) and only then, kept across a restart;
//! the queue's `attempt_history`. Time is a manual clock's.

use std::sync::Arc;

use fila_client::{Fields, QueueRef, SettingsPatch};
use fila_core::ManualClock;
use fila_tests::TestServer;

const T0: u64 = 1_800_000_000_000;

fn queue(dlq: bool) -> QueueRef {
    QueueRef {
        name: "jobs".into(),
        dlq,
    }
}

#[test]
fn a_dead_letter_shows_every_failure_before_it_and_a_restart_keeps_them() {
    let clock = ManualClock::new(T0);
    let mut s = TestServer::with_clock(Arc::new(clock.clone()), |c| {
        c.idle_timeout_secs = 0;
    });
    let mut c = s.client();
    let settings = c
        .create_queue(
            "jobs",
            SettingsPatch {
                visibility_timeout_ms: Some(1_000),
                max_deliveries: Some(0),
                attempt_history: Some(5),
                ..SettingsPatch::default()
            },
        )
        .and_then(|_| c.get_queue("jobs"))
        .unwrap();
    assert_eq!(settings.attempt_history, 5);
    c.put_one("jobs", "work").unwrap();
    // Delivery 1 runs out; 2 is released with a reason; 3 dead-lettered.
    assert_eq!(c.receive("jobs", 1, Some(0)).unwrap().len(), 1);
    clock.advance(1_000);
    let m = c.receive("jobs", 1, Some(0)).unwrap().remove(0);
    c.release_with(
        &queue(false),
        &[m.receipt.unwrap()],
        "timeout",
        "upstream 504",
    )
    .unwrap()[0]
        .as_ref()
        .unwrap();
    let m = c.receive("jobs", 1, Some(0)).unwrap().remove(0);
    c.dead_letter("jobs", m.receipt.unwrap(), "bad_input", "field x")
        .unwrap();
    s.restart();
    let mut c = s.client();
    let plain = c.peek(queue(true), 0, 10).unwrap();
    assert!(plain[0].attempts.is_empty(), "not asked for, not sent");
    let asked = c
        .peek_with(queue(true), 0, 10, Fields::ALL.with(Fields::ATTEMPTS))
        .unwrap();
    let history: Vec<(u32, u8, &str, &str)> = asked[0]
        .attempts
        .iter()
        .map(|a| (a.delivery, a.end, a.reason.as_str(), a.description.as_str()))
        .collect();
    assert_eq!(
        history,
        [
            (1, 1, "", ""),
            (2, 2, "timeout", "upstream 504"),
            (3, 3, "bad_input", "field x")
        ]
    );
    assert_eq!(asked[0].attempts[0].at_ms, T0 + 1_000);
    // The rest of the message is the plain peek's.
    assert_eq!(asked[0].payload, plain[0].payload);
    assert_eq!(asked[0].dead_letter, plain[0].dead_letter);
}

#[test]
fn a_release_with_a_reason_too_long_is_refused_and_the_lease_holds() {
    let s = TestServer::start();
    let mut c = s.client();
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    c.put_one("jobs", "work").unwrap();
    let m = c.receive("jobs", 1, Some(0)).unwrap().remove(0);
    let long = "r".repeat(257);
    let e = c
        .release_with(&queue(false), &[m.receipt.unwrap()], &long, "")
        .unwrap_err();
    assert!(e.to_string().contains("reason"), "{e}");
    assert_eq!(c.stats("jobs").unwrap().in_flight, 1, "still leased");
    let e = c
        .create_queue(
            "other",
            SettingsPatch {
                attempt_history: Some(33),
                ..SettingsPatch::default()
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("attempt_history"), "{e}");
}
