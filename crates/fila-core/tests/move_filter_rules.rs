//! Filtered redrive and move (issue 42, item 4): a move task takes only
//! the messages its filter takes — attributes equal, a reason it failed
//! for, text in a consumer's reason or description, the time it failed in
//! a range — and a preview counts them (and shows the first 20) before
//! anything moves, a bounded look at a time.

use std::sync::Arc;

use bytes::Bytes;
use fila_core::*;

const T0: u64 = 1_700_000_000_000;

/// Queue "q" (no delivery limit, history kept) with six dead letters, a
/// second apart: message i has tenant "a" when i is even, else "b", and
/// was dead-lettered with reason "bad_input" ("field x missing") when i
/// is a multiple of 3, else "timeout" ("upstream 504"), after one
/// release with reason "retry_later".
fn six_dead_letters(clock: &Arc<ManualClock>) -> Engine {
    let e = Engine::new(2, clock.clone());
    let settings = QueueSettings {
        max_deliveries: 0,
        ..QueueSettings::default()
    };
    e.create_queue("q", settings).unwrap();
    for i in 0..6 {
        let m = NewMessage {
            attributes: vec![("tenant".into(), if i % 2 == 0 { "a" } else { "b" }.into())],
            ..NewMessage::new(Bytes::from(format!("m{i}")))
        };
        e.put("q", vec![m]).unwrap()[0].as_ref().unwrap();
        let got = take(&e, "q");
        e.release(
            Address::queue("q"),
            &[got.receipt.unwrap()],
            "retry_later",
            "",
        )
        .unwrap()[0]
            .as_ref()
            .unwrap();
        let got = take(&e, "q");
        let (reason, description) = if i % 3 == 0 {
            ("bad_input", "field x missing")
        } else {
            ("timeout", "upstream 504")
        };
        e.dead_letter("q", &got.receipt.unwrap(), reason, description)
            .unwrap();
        clock.advance(1_000);
        e.tick();
    }
    assert_eq!(e.stats("q").unwrap().dead_lettered, 6);
    e
}

fn take(e: &Engine, queue: &str) -> Message {
    let mut got = e
        .receive_now(Address::queue(queue), &ReceiveOptions::now(1))
        .unwrap();
    assert_eq!(got.len(), 1, "a message to take from {queue}");
    got.remove(0)
}

fn bodies(ms: &[Message]) -> Vec<String> {
    ms.iter()
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect()
}

fn tenant(t: &str) -> MoveFilter {
    MoveFilter {
        attributes: vec![("tenant".into(), t.into())],
        ..MoveFilter::default()
    }
}

/// The DLQ's preview with `filter`: how many and the first bodies.
fn preview(e: &Engine, filter: &MoveFilter) -> (u64, Vec<String>) {
    let p = e.preview_move("q", true, false, filter, 0).unwrap();
    assert_eq!(p.next, None, "a small DLQ is looked at whole");
    (p.matched, bodies(&p.first))
}

#[test]
fn a_preview_counts_and_shows_what_each_kind_of_condition_takes() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = six_dead_letters(&clock);
    let all = (6, bodies_of(0..6));
    assert_eq!(preview(&e, &MoveFilter::default()), all);
    assert_eq!(preview(&e, &tenant("a")), (3, bodies_of([0, 2, 4])));
    let reason = |r: &str| MoveFilter {
        reason: Some(r.into()),
        ..MoveFilter::default()
    };
    assert_eq!(preview(&e, &reason("bad_input")), (2, bodies_of([0, 3])));
    // The dead-letter record's kind, and a reason an earlier attempt gave.
    assert_eq!(preview(&e, &reason("consumer")), all);
    assert_eq!(preview(&e, &reason("retry_later")), all);
    assert_eq!(preview(&e, &reason("retry")), (0, vec![]), "exact");
    let text = |t: &str| MoveFilter {
        text: Some(t.into()),
        ..MoveFilter::default()
    };
    assert_eq!(preview(&e, &text("504")), (4, bodies_of([1, 2, 4, 5])));
    assert_eq!(preview(&e, &text("retry_")), all, "a reason's text too");
    // Dead-lettered at T0, T0 + 1 s, ...: [T0 + 2 s, T0 + 4 s) is 2 and 3.
    let range = MoveFilter {
        since_ms: Some(T0 + 2_000),
        until_ms: Some(T0 + 4_000),
        ..MoveFilter::default()
    };
    assert_eq!(preview(&e, &range), (2, bodies_of([2, 3])));
    let every = MoveFilter {
        reason: Some("timeout".into()),
        since_ms: Some(T0 + 2_000),
        ..tenant("a")
    };
    assert_eq!(preview(&e, &every), (2, bodies_of([2, 4])), "all must hold");
    // A message leased from the DLQ is not counted: a move would leave it.
    let leased = e
        .receive_now(
            Address {
                queue: "q",
                dlq: true,
            },
            &ReceiveOptions::now(1),
        )
        .unwrap();
    assert_eq!(bodies(&leased), ["m0"]);
    assert_eq!(preview(&e, &tenant("a")), (2, bodies_of([2, 4])));
    // Nothing moved.
    let stats = e.stats("q").unwrap();
    assert_eq!((stats.visible, stats.dead_lettered), (0, 6));
}

fn bodies_of(is: impl IntoIterator<Item = usize>) -> Vec<String> {
    is.into_iter().map(|i| format!("m{i}")).collect()
}

#[test]
fn a_filtered_redrive_moves_only_what_its_filter_takes_and_keeps_the_filter() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = six_dead_letters(&clock);
    let filter = MoveFilter {
        reason: Some("timeout".into()),
        ..tenant("a")
    };
    let out = e.redrive_where("q", None, None, filter.clone()).unwrap();
    assert_eq!(
        out,
        RedriveOutcome {
            moved: 2,
            scheduled: 0
        }
    );
    let back = e
        .receive_now(Address::queue("q"), &ReceiveOptions::now(10))
        .unwrap();
    assert_eq!(bodies(&back), ["m2", "m4"]);
    assert!(back.iter().all(|m| m.dead_letter.is_none()));
    assert_eq!(
        bodies(
            &e.peek(
                Address {
                    queue: "q",
                    dlq: true
                },
                0,
                10
            )
            .unwrap()
        ),
        bodies_of([0, 1, 3, 5]),
        "the rest stay"
    );
    let task = e.moves("q").unwrap().pop().unwrap();
    assert_eq!(
        (task.from_dlq, task.moved, task.status),
        (true, 2, MoveStatus::Completed)
    );
    assert_eq!(task.filter.as_deref(), Some(&filter));
    // An empty filter is no filter.
    e.redrive_where("q", Some(1), None, MoveFilter::default())
        .unwrap();
    assert_eq!(e.moves("q").unwrap().pop().unwrap().filter, None);
}

#[test]
fn a_filtered_redrive_at_a_rate_goes_through_the_dlq_once() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = six_dead_letters(&clock);
    // Tenant "b": messages 1, 3, 5, one a second.
    let out = e.redrive_where("q", None, Some(1), tenant("b")).unwrap();
    // Scheduled: at most the visible dead letters left, matching or not.
    assert_eq!(
        out,
        RedriveOutcome {
            moved: 1,
            scheduled: 5
        }
    );
    clock.advance(1_000);
    e.tick();
    let running = e.moves("q").unwrap().pop().unwrap();
    assert_eq!((running.moved, running.status), (2, MoveStatus::Running));
    clock.advance(1_000);
    e.tick();
    clock.advance(1_000);
    e.tick();
    let done = e.moves("q").unwrap().pop().unwrap();
    assert_eq!((done.moved, done.status), (3, MoveStatus::Completed));
    let back = e
        .receive_now(Address::queue("q"), &ReceiveOptions::now(10))
        .unwrap();
    assert_eq!(bodies(&back), bodies_of([1, 3, 5]));
}

#[test]
fn a_filtered_move_takes_its_matches_to_their_sources_or_a_named_queue() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = Engine::new(2, clock.clone());
    e.create_queue("dlq", QueueSettings::default()).unwrap();
    e.create_queue("elsewhere", QueueSettings::default())
        .unwrap();
    for q in ["a", "b"] {
        let settings = QueueSettings {
            dead_letter_target: Some("dlq".into()),
            ..QueueSettings::default()
        };
        e.create_queue(q, settings).unwrap();
        for i in 0..2 {
            let m = NewMessage {
                attributes: vec![("kind".into(), format!("k{i}"))],
                ..NewMessage::new(Bytes::from(format!("{q}{i}")))
            };
            e.put(q, vec![m]).unwrap()[0].as_ref().unwrap();
            let got = take(&e, q);
            e.dead_letter(q, &got.receipt.unwrap(), "bad", "").unwrap();
        }
        e.tick();
    }
    // A message put straight into "dlq" has no source to go back to.
    let m = NewMessage {
        attributes: vec![("kind".into(), "k0".into())],
        ..NewMessage::new(Bytes::from("direct"))
    };
    e.put("dlq", vec![m]).unwrap()[0].as_ref().unwrap();
    let k0 = MoveFilter {
        attributes: vec![("kind".into(), "k0".into())],
        ..MoveFilter::default()
    };
    let back = e.preview_move("dlq", false, true, &k0, 0).unwrap();
    assert_eq!(
        (back.matched, bodies(&back.first)),
        (2, vec!["a0".into(), "b0".into()])
    );
    let named = e.preview_move("dlq", false, false, &k0, 0).unwrap();
    assert_eq!(
        named.matched, 3,
        "to a named queue, the direct one goes too"
    );
    let task = e
        .start_move_where("dlq", None, None, None, k0.clone())
        .unwrap();
    e.tick();
    assert_eq!((task.moved, task.status), (2, MoveStatus::Completed));
    assert_eq!(bodies(&e.peek(Address::queue("a"), 0, 10).unwrap()), ["a0"]);
    assert_eq!(bodies(&e.peek(Address::queue("b"), 0, 10).unwrap()), ["b0"]);
    let task = e
        .start_move_where("dlq", Some("elsewhere".into()), None, None, k0)
        .unwrap();
    e.tick();
    assert_eq!(task.moved, 1);
    assert_eq!(
        bodies(&e.peek(Address::queue("elsewhere"), 0, 10).unwrap()),
        ["direct"]
    );
    assert_eq!(
        bodies(&e.peek(Address::queue("dlq"), 0, 10).unwrap()),
        ["a1", "b1"],
        "what the filter left stays"
    );
}

#[test]
fn a_bad_filter_is_refused_by_name_and_moves_nothing() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = six_dead_letters(&clock);
    let field = |f: MoveFilter| match e.redrive_where("q", None, None, f.clone()) {
        Err(Error::InvalidArgument { field, .. }) => {
            let preview = e.preview_move("q", true, false, &f, 0);
            assert!(matches!(preview, Err(Error::InvalidArgument { .. })));
            field
        }
        other => panic!("{f:?} was not refused: {other:?}"),
    };
    let reason = MoveFilter {
        reason: Some(String::new()),
        ..MoveFilter::default()
    };
    assert_eq!(field(reason), "filter.reason");
    let text = MoveFilter {
        text: Some("x".repeat(limits::DEAD_LETTER_DESCRIPTION_LEN_MAX + 1)),
        ..MoveFilter::default()
    };
    assert_eq!(field(text), "filter.text");
    let many = MoveFilter {
        attributes: (0..=limits::ATTRIBUTES_MAX)
            .map(|i| (format!("k{i}"), String::new()))
            .collect(),
        ..MoveFilter::default()
    };
    assert_eq!(field(many), "filter.attributes");
    let unnamed = MoveFilter {
        attributes: vec![(String::new(), "v".into())],
        ..MoveFilter::default()
    };
    assert_eq!(field(unnamed), "filter.attributes");
    let backwards = MoveFilter {
        since_ms: Some(T0 + 1),
        until_ms: Some(T0 + 1),
        ..MoveFilter::default()
    };
    assert_eq!(field(backwards), "filter.until_ms");
    assert_eq!(e.stats("q").unwrap().dead_lettered, 6);
    assert!(e.moves("q").unwrap().is_empty(), "no task was begun");
}

#[test]
fn a_long_queue_is_looked_at_a_bounded_part_at_a_time() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = Engine::new(1, clock.clone());
    e.create_queue("q", QueueSettings::default()).unwrap();
    e.create_queue("to", QueueSettings::default()).unwrap();
    let n = PREVIEW_LOOK_MAX + 5;
    let mut sent = 0;
    while sent < n {
        let batch = (sent..n.min(sent + 20))
            .map(|i| NewMessage {
                attributes: vec![("last".into(), (i == n - 1).to_string())],
                ..NewMessage::new(Bytes::from("x"))
            })
            .collect();
        for r in e.put("q", batch).unwrap() {
            r.unwrap();
        }
        sent = n.min(sent + 20);
    }
    let last = MoveFilter {
        attributes: vec![("last".into(), "true".into())],
        ..MoveFilter::default()
    };
    let first = e.preview_move("q", false, false, &last, 0).unwrap();
    assert_eq!(first.matched, 0);
    let next = first.next.expect("stopped at the bound");
    assert_eq!(next, PREVIEW_LOOK_MAX + 1, "sequence numbers start at 1");
    let rest = e.preview_move("q", false, false, &last, next).unwrap();
    assert_eq!((rest.matched, rest.next), (1, None));
    // A move at one a second looks at 4 096 entries a batch: the match at
    // the end takes three batches, not one scan of everything.
    let task = e
        .start_move_where("q", Some("to".into()), None, Some(1), last)
        .unwrap();
    assert_eq!((task.moved, task.status), (0, MoveStatus::Running));
    clock.advance(1_000);
    e.tick();
    assert_eq!(e.moves("q").unwrap()[0].moved, 0);
    clock.advance(1_000);
    e.tick();
    let done = e.moves("q").unwrap().pop().unwrap();
    assert_eq!((done.moved, done.status), (1, MoveStatus::Completed));
    assert_eq!(e.stats("to").unwrap().visible, 1);
}
