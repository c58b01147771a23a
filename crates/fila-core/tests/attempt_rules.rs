//! A message's attempt history (issue 42, item 3): each delivery whose
//! lease ended without a delete — it ran out, its consumer released it as
//! failed, or dead-lettered it — is kept with when, how and the consumer's
//! reason and description; at most the queue's `attempt_history` of them
//! and 16 KiB, the oldest going first; counted in the stored bytes; kept
//! on a dead letter (in its own DLQ and in a dead-letter target), dropped
//! by a redrive; kept in an image.

use std::sync::Arc;

use bytes::Bytes;
use fila_core::limits::*;
use fila_core::*;

const T0: u64 = 1_700_000_000_000;
const LEASE: u64 = 1_000;

fn engine(clock: &Arc<ManualClock>, keep: u32) -> Engine {
    let e = Engine::new(4, clock.clone());
    let settings = QueueSettings {
        visibility_timeout_ms: LEASE,
        max_deliveries: 0,
        attempt_history: keep,
        ..QueueSettings::default()
    };
    e.create_queue("q", settings).unwrap();
    e.put("q", vec![NewMessage::new(Bytes::from("m"))]).unwrap()[0]
        .as_ref()
        .unwrap();
    e
}

fn take(e: &Engine, queue: &str) -> Message {
    let mut got = e
        .receive_now(Address::queue(queue), &ReceiveOptions::now(1))
        .unwrap();
    assert_eq!(got.len(), 1, "a message to take from {queue}");
    got.remove(0)
}

fn history(m: &Message) -> Vec<(u32, AttemptEnd, String, String)> {
    m.attempts
        .as_deref()
        .map(|a| {
            a.iter()
                .map(|a| (a.delivery, a.end, a.reason.clone(), a.description.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn peek_one(e: &Engine, dlq: bool) -> Message {
    let addr = Address { queue: "q", dlq };
    e.peek(addr, 0, 1).unwrap().remove(0)
}

#[test]
fn each_failed_lease_is_kept_with_how_it_ended_and_why() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = engine(&clock, 10);
    take(&e, "q");
    clock.advance(LEASE);
    let m = take(&e, "q");
    let released = e
        .release(
            Address::queue("q"),
            &[m.receipt.unwrap()],
            "timeout",
            "upstream 504",
        )
        .unwrap();
    released[0].as_ref().unwrap();
    let m = take(&e, "q");
    assert_eq!(
        history(&m),
        [
            (1, AttemptEnd::Expired, String::new(), String::new()),
            (
                2,
                AttemptEnd::Released,
                "timeout".into(),
                "upstream 504".into()
            ),
        ],
        "a delivery shows the failures before it"
    );
    e.dead_letter("q", &m.receipt.unwrap(), "bad_input", "field x")
        .unwrap();
    let dead = peek_one(&e, true);
    assert_eq!(history(&dead).len(), 3);
    let last = &dead.attempts.as_deref().unwrap()[2];
    assert_eq!(
        (last.delivery, last.end, last.reason.as_str(), last.at_ms),
        (3, AttemptEnd::DeadLettered, "bad_input", T0 + LEASE)
    );
    // A reason past its limit is refused and nothing changes.
    e.redrive("q", None, None).unwrap();
    let m = take(&e, "q");
    let long = "r".repeat(DEAD_LETTER_REASON_LEN_MAX + 1);
    let refused = e
        .release(Address::queue("q"), &[m.receipt.unwrap()], &long, "")
        .unwrap_err();
    assert!(matches!(
        refused,
        Error::InvalidArgument {
            field: "reason",
            ..
        }
    ));
}

#[test]
fn a_history_keeps_its_last_attempts_and_its_bytes_bounded() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = engine(&clock, 2);
    for i in 0..4 {
        let m = take(&e, "q");
        e.release(
            Address::queue("q"),
            &[m.receipt.unwrap()],
            &format!("r{i}"),
            "",
        )
        .unwrap()[0]
            .as_ref()
            .unwrap();
    }
    let reasons: Vec<String> = history(&peek_one(&e, false))
        .into_iter()
        .map(|(_, _, r, _)| r)
        .collect();
    assert_eq!(reasons, ["r2", "r3"], "the last two");
    // Long descriptions: no more than 16 KiB, the oldest dropped.
    let e = engine(&clock, 32);
    let long = "d".repeat(DEAD_LETTER_DESCRIPTION_LEN_MAX);
    for i in 0..5 {
        let m = take(&e, "q");
        e.release(
            Address::queue("q"),
            &[m.receipt.unwrap()],
            &format!("r{i}"),
            &long,
        )
        .unwrap()[0]
            .as_ref()
            .unwrap();
    }
    let kept = peek_one(&e, false);
    let bytes = attempts_bytes(kept.attempts.as_ref());
    assert!(bytes <= ATTEMPT_HISTORY_BYTES_MAX as u64, "{bytes} bytes");
    assert_eq!(history(&kept).len(), 3, "three of 4 162 bytes fit");
    assert_eq!(history(&kept)[2].2, "r4", "the newest kept");
}

#[test]
fn a_history_counts_in_the_stored_bytes_and_none_is_kept_when_off() {
    let clock = Arc::new(ManualClock::new(T0));
    let off = engine(&clock, 0);
    let before = off.stored_bytes();
    let m = take(&off, "q");
    off.release(Address::queue("q"), &[m.receipt.unwrap()], "why", "what")
        .unwrap();
    assert_eq!(off.stored_bytes(), before, "nothing kept");
    assert!(peek_one(&off, false).attempts.is_none());

    let on = engine(&clock, 10);
    let before = on.stored_bytes();
    let m = take(&on, "q");
    on.release(Address::queue("q"), &[m.receipt.unwrap()], "why", "what")
        .unwrap();
    let history = (ATTEMPT_HISTORY_OVERHEAD_BYTES + ATTEMPT_OVERHEAD_BYTES + 3 + 4) as u64;
    assert_eq!(on.stored_bytes(), before + history);
    let m = take(&on, "q");
    on.delete(Address::queue("q"), &[m.receipt.unwrap()])
        .unwrap();
    assert_eq!(on.stored_bytes(), 0, "given back with the message");
}

#[test]
fn a_dead_letter_takes_its_history_to_its_target_and_a_redrive_drops_it() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = engine(&clock, 10);
    let target = (0..)
        .map(|i| format!("t{i}"))
        .find(|t| shard_of(t, 4) != shard_of("q", 4))
        .unwrap();
    e.create_queue(&target, QueueSettings::default()).unwrap();
    e.update_queue(
        "q",
        &SettingsUpdate {
            dead_letter_target: Some(Some(target.clone())),
            ..SettingsUpdate::default()
        },
    )
    .unwrap();
    let m = take(&e, "q");
    e.release(Address::queue("q"), &[m.receipt.unwrap()], "first", "")
        .unwrap();
    let m = take(&e, "q");
    e.dead_letter("q", &m.receipt.unwrap(), "second", "")
        .unwrap();
    e.tick();
    let arrived = take(&e, &target);
    let reasons: Vec<String> = history(&arrived)
        .into_iter()
        .map(|(_, _, r, _)| r)
        .collect();
    assert_eq!(reasons, ["first", "second"]);
    // Redriven from a DLQ, a message starts afresh.
    let e = engine(&clock, 10);
    let m = take(&e, "q");
    e.dead_letter("q", &m.receipt.unwrap(), "gone", "").unwrap();
    assert_eq!(history(&peek_one(&e, true)).len(), 1);
    e.redrive("q", None, None).unwrap();
    assert!(peek_one(&e, false).attempts.is_none());
}

#[test]
fn an_image_keeps_the_history() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = engine(&clock, 10);
    take(&e, "q");
    clock.advance(LEASE);
    e.tick();
    let image = e.export(|| {}).unwrap();
    let again = Engine::new(4, clock.clone());
    again.restore(image).unwrap();
    let m = peek_one(&again, false);
    assert_eq!(
        history(&m),
        [(1, AttemptEnd::Expired, String::new(), String::new())]
    );
    assert_eq!(again.stored_bytes(), e.stored_bytes());
}

#[test]
fn remember_attempt_keeps_the_newest_within_the_number_and_the_bytes() {
    let attempt = |n: u32, len: usize| Attempt {
        at_ms: u64::from(n),
        delivery: n,
        end: AttemptEnd::Released,
        reason: String::new(),
        description: "x".repeat(len),
    };
    let mut h = Vec::new();
    for n in 1..=5 {
        remember_attempt(&mut h, attempt(n, 0), 3);
    }
    assert_eq!(h.iter().map(|a| a.delivery).collect::<Vec<_>>(), [3, 4, 5]);
    remember_attempt(&mut h, attempt(6, 0), 0);
    assert!(h.is_empty(), "0 keeps none");
    let big = ATTEMPT_HISTORY_BYTES_MAX / 2;
    for n in 1..=3 {
        remember_attempt(&mut h, attempt(n, big - ATTEMPT_OVERHEAD_BYTES), 32);
    }
    assert_eq!(h.iter().map(|a| a.delivery).collect::<Vec<_>>(), [2, 3]);
}
