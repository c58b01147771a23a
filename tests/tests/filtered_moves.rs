//! Filtered redrive and move over the wire (issue 42, item 4): a preview
//! counts and shows what a filter takes before anything moves, a redrive
//! or a move with a filter takes only that, the task keeps its filter
//! across a restart, and a bad filter is refused by name. Time is a
//! manual clock's.

use std::sync::Arc;

use fila_client::{ErrorCode, MoveFilter, PutEntry, SettingsPatch};
use fila_core::ManualClock;
use fila_tests::TestServer;

const T0: u64 = 1_800_000_000_000;

/// Queue "jobs" with four dead letters, a second apart: message i has
/// tenant "a" when i is even, else "b"; 0 and 1 failed with reason
/// "bad_input" ("field x"), 2 and 3 with "timeout" ("upstream 504").
fn four_dead_letters(s: &TestServer, clock: &ManualClock) {
    let mut c = s.client();
    let patch = SettingsPatch {
        max_deliveries: Some(0),
        ..SettingsPatch::default()
    };
    c.create_queue("jobs", patch).unwrap();
    for i in 0..4 {
        let entry = PutEntry {
            payload: format!("m{i}").into(),
            attributes: vec![("tenant".into(), if i % 2 == 0 { "a" } else { "b" }.into())],
            ..PutEntry::default()
        };
        c.put("jobs", &[entry]).unwrap()[0].as_ref().unwrap();
        let m = c.receive("jobs", 1, Some(0)).unwrap().remove(0);
        let (reason, description) = if i < 2 {
            ("bad_input", "field x")
        } else {
            ("timeout", "upstream 504")
        };
        c.dead_letter("jobs", m.receipt.unwrap(), reason, description)
            .unwrap();
        clock.advance(1_000);
    }
}

fn bodies(ms: &[fila_client::Message]) -> Vec<String> {
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

#[test]
fn a_preview_shows_what_a_filtered_redrive_then_moves_and_a_restart_keeps_its_filter() {
    let clock = ManualClock::new(T0);
    let mut s = TestServer::with_clock(Arc::new(clock.clone()), |c| {
        c.idle_timeout_secs = 0;
    });
    four_dead_letters(&s, &clock);
    let mut c = s.client();
    let p = c.preview_move("jobs", true, None, &tenant("a"), 0).unwrap();
    assert_eq!((p.matched, p.next), (2, None));
    assert_eq!(bodies(&p.messages), ["m0", "m2"]);
    // Every field, and each message's failed attempts.
    let dead = &p.messages[1];
    assert_eq!(dead.attributes, [("tenant".into(), "a".into())]);
    assert_eq!(
        dead.dead_letter.as_ref().unwrap().consumer_reason,
        "timeout"
    );
    assert_eq!(dead.attempts.last().unwrap().description, "upstream 504");
    let text = MoveFilter {
        text: Some("504".into()),
        ..MoveFilter::default()
    };
    assert_eq!(
        c.preview_move("jobs", true, None, &text, 0)
            .unwrap()
            .matched,
        2
    );
    // Dead-lettered at T0, T0 + 1 s, ...: from T0 + 1 s, before T0 + 3 s.
    let range = MoveFilter {
        since_ms: Some(T0 + 1_000),
        until_ms: Some(T0 + 3_000),
        ..MoveFilter::default()
    };
    let p = c.preview_move("jobs", true, None, &range, 0).unwrap();
    assert_eq!(bodies(&p.messages), ["m1", "m2"]);
    assert_eq!(c.stats("jobs").unwrap().dead_lettered, 4, "nothing moved");

    // Tenant "a" that timed out: m2 only, at one a second.
    let filter = MoveFilter {
        reason: Some("timeout".into()),
        ..tenant("a")
    };
    // Scheduled: the three visible dead letters left, matching or not.
    assert_eq!(
        c.redrive_where("jobs", None, Some(1), &filter).unwrap(),
        (1, 3)
    );
    let back = c.receive("jobs", 10, Some(0)).unwrap();
    assert_eq!(bodies(&back), ["m2"]);
    let task = c.list_moves("jobs").unwrap().pop().unwrap();
    assert_eq!(task.filter, filter);
    s.restart();
    let mut c = s.client();
    let kept = c.list_moves("jobs").unwrap().pop().unwrap();
    assert_eq!((kept.filter, kept.moved), (filter, 1));
    assert_eq!(
        bodies(
            &c.peek(
                fila_client::QueueRef {
                    name: "jobs".into(),
                    dlq: true
                },
                0,
                10
            )
            .unwrap()
        ),
        ["m0", "m1", "m3"],
        "the rest stay"
    );
}

#[test]
fn a_filtered_move_takes_its_matches_and_a_bad_filter_is_refused_by_name() {
    let clock = ManualClock::new(T0);
    let s = TestServer::with_clock(Arc::new(clock.clone()), |c| {
        c.idle_timeout_secs = 0;
    });
    let mut c = s.client();
    for q in ["inbox", "archive"] {
        c.create_queue(q, SettingsPatch::default()).unwrap();
    }
    let entries: Vec<PutEntry> = (0..5)
        .map(|i| PutEntry {
            payload: format!("m{i}").into(),
            attributes: vec![("kind".into(), format!("k{}", i % 2))],
            ..PutEntry::default()
        })
        .collect();
    for r in c.put("inbox", &entries).unwrap() {
        r.unwrap();
    }
    let k0 = MoveFilter {
        attributes: vec![("kind".into(), "k0".into())],
        ..MoveFilter::default()
    };
    // Back to their sources: put straight in, they have none.
    assert_eq!(
        c.preview_move("inbox", false, None, &k0, 0)
            .unwrap()
            .matched,
        0
    );
    let to_archive = c
        .preview_move("inbox", false, Some("archive"), &k0, 0)
        .unwrap();
    assert_eq!(bodies(&to_archive.messages), ["m0", "m2", "m4"]);
    let task = c
        .start_move_where("inbox", Some("archive"), None, None, &k0)
        .unwrap();
    assert_eq!((task.moved, task.filter), (3, k0));
    assert_eq!(
        bodies(&c.receive("archive", 10, Some(0)).unwrap()),
        ["m0", "m2", "m4"]
    );
    assert_eq!(
        bodies(&c.receive("inbox", 10, Some(0)).unwrap()),
        ["m1", "m3"]
    );

    for (filter, field) in [
        (
            MoveFilter {
                reason: Some(String::new()),
                ..MoveFilter::default()
            },
            "filter.reason",
        ),
        (
            MoveFilter {
                since_ms: Some(T0),
                until_ms: Some(T0),
                ..MoveFilter::default()
            },
            "filter.until_ms",
        ),
    ] {
        for err in [
            c.redrive_where("inbox", None, None, &filter).unwrap_err(),
            c.preview_move("inbox", true, None, &filter, 0)
                .map(|_| ())
                .unwrap_err(),
        ] {
            assert_eq!(err.code(), Some(ErrorCode::INVALID_ARGUMENT));
            assert!(err.to_string().contains(field), "{err}");
        }
    }
    assert_eq!(c.list_moves("inbox").unwrap().len(), 1, "no task begun");
}
