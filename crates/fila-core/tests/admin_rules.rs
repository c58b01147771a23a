//! An operator's requests, rule by rule, on a manual clock: delete and
//! dead-letter one message by sequence number whatever its state (a lease
//! on it ends, its receipt is refused, a group it held is freed), and the
//! page of a queue's channels with their backlog.

use bytes::Bytes;
use fila_core::*;

mod rules;

use rules::engine;

fn msg(payload: &str) -> NewMessage {
    NewMessage::new(Bytes::copy_from_slice(payload.as_bytes()))
}

/// Puts `m` into `q` and answers its sequence number.
fn put(engine: &Engine, m: NewMessage) -> u64 {
    engine.put("q", vec![m]).unwrap().remove(0).unwrap().seq
}

fn receive(engine: &Engine, n: u32) -> Vec<Message> {
    engine
        .receive_now(Address::queue("q"), &ReceiveOptions::now(n))
        .unwrap()
}

fn states(engine: &Engine, addr: Address<'_>) -> Vec<(u64, State)> {
    engine
        .peek(addr, 0, 100)
        .unwrap()
        .iter()
        .map(|m| (m.seq, m.state))
        .collect()
}

/// A queue holding one message in each state a main-queue message can be
/// in: visible, in flight, delayed, deferred. Answers their seqs and the
/// in-flight one's message.
fn every_state(engine: &Engine) -> ([u64; 4], Message) {
    let leased = put(engine, msg("leased"));
    let deferred = put(engine, msg("deferred"));
    let m = receive(engine, 2);
    assert_eq!(m.len(), 2);
    engine.defer("q", &m[1].receipt.unwrap()).unwrap();
    let visible = put(engine, msg("visible"));
    let mut d = msg("delayed");
    d.availability = Availability::DelayMs(60_000);
    let delayed = put(engine, d);
    ([visible, leased, delayed, deferred], m[0].clone())
}

#[test]
fn a_message_is_deleted_by_seq_in_any_state_and_its_lease_ends() {
    let (_clock, engine) = engine(QueueSettings::default());
    let ([visible, leased, delayed, deferred], lease) = every_state(&engine);
    for seq in [visible, leased, delayed, deferred] {
        engine.delete_seq(Address::queue("q"), seq).unwrap();
        engine.check_invariants().unwrap();
        assert!(!states(&engine, Address::queue("q"))
            .iter()
            .any(|(s, _)| *s == seq));
    }
    let s = engine.stats("q").unwrap();
    assert_eq!(
        (s.visible, s.in_flight, s.delayed, s.deferred, s.deletes),
        (0, 0, 0, 0, 4)
    );
    // The deleted lease's receipt is refused.
    let r = engine
        .delete(Address::queue("q"), &[lease.receipt.unwrap()])
        .unwrap();
    assert_eq!(r[0].as_ref().unwrap_err().kind(), ErrorKind::ReceiptStale);
    // Gone is gone.
    let e = engine.delete_seq(Address::queue("q"), visible).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let e = engine.delete_seq(Address::queue("q"), 999).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let e = engine.delete_seq(Address::queue("nope"), 1).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::QueueNotFound);
}

#[test]
fn a_message_is_dead_lettered_by_seq_in_any_state_with_the_operators_reason() {
    let (_clock, engine) = engine(QueueSettings::default());
    let ([visible, leased, delayed, deferred], lease) = every_state(&engine);
    for seq in [visible, leased, delayed, deferred] {
        engine
            .dead_letter_seq("q", seq, "operator", "stuck since Tuesday")
            .unwrap();
        engine.check_invariants().unwrap();
    }
    let dlq = engine.peek(Address::dlq("q"), 0, 100).unwrap();
    assert_eq!(dlq.len(), 4);
    for m in &dlq {
        let dl = m.dead_letter.as_ref().unwrap();
        assert_eq!(&*dl.source_queue, "q");
        assert_eq!(
            dl.reason,
            DeadLetterReason::Consumer {
                reason: "operator".into(),
                description: "stuck since Tuesday".into()
            }
        );
    }
    assert!(states(&engine, Address::queue("q")).is_empty());
    let r = engine
        .delete(Address::queue("q"), &[lease.receipt.unwrap()])
        .unwrap();
    assert_eq!(r[0].as_ref().unwrap_err().kind(), ErrorKind::ReceiptStale);
    // A dead letter is not in the queue any more; the DLQ's own messages
    // are deleted by seq there.
    let e = engine
        .dead_letter_seq("q", visible, "again", "")
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let in_dlq = dlq[0].seq;
    engine.delete_seq(Address::dlq("q"), in_dlq).unwrap();
    assert_eq!(engine.stats("q").unwrap().dead_lettered, 3);
    engine.check_invariants().unwrap();
}

#[test]
fn a_dead_letter_reason_past_its_limit_is_refused_and_nothing_moves() {
    let (_clock, engine) = engine(QueueSettings::default());
    let seq = put(&engine, msg("a"));
    let long = "r".repeat(limits::DEAD_LETTER_REASON_LEN_MAX + 1);
    let e = engine.dead_letter_seq("q", seq, &long, "").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let long = "d".repeat(limits::DEAD_LETTER_DESCRIPTION_LEN_MAX + 1);
    let e = engine.dead_letter_seq("q", seq, "", &long).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(
        states(&engine, Address::queue("q")),
        [(seq, State::Visible)]
    );
}

#[test]
fn deleting_a_groups_leased_head_by_seq_frees_the_group() {
    let (_clock, engine) = engine(QueueSettings::default());
    let grouped = |p: &str| {
        let mut m = msg(p);
        m.group = Some("g".into());
        m
    };
    let first = put(&engine, grouped("1"));
    put(&engine, grouped("2"));
    let m = receive(&engine, 10);
    assert_eq!(m.iter().map(|m| m.seq).collect::<Vec<_>>(), [first]);
    assert!(receive(&engine, 10).is_empty(), "the group is busy");
    engine.delete_seq(Address::queue("q"), first).unwrap();
    engine.check_invariants().unwrap();
    let next = receive(&engine, 10);
    assert_eq!(next.len(), 1);
    assert_eq!(&next[0].payload[..], b"2");
}

#[test]
fn channels_are_paged_default_first_then_by_name_with_their_backlog() {
    let (_clock, engine) = engine(QueueSettings::default());
    put(&engine, msg("default"));
    for name in ["c", "a", "b", "d"] {
        for _ in 0..2 {
            let mut m = msg(name);
            m.channel = Some(name.into());
            put(&engine, m);
        }
    }
    let (page, next) = engine.channels("q", "", 3).unwrap();
    let names: Vec<_> = page.iter().map(|c| c.name.clone()).collect();
    assert_eq!(names, [None, Some("a".into()), Some("b".into())]);
    assert_eq!((page[0].visible, page[0].held), (1, 1));
    assert_eq!((page[1].visible, page[1].held), (2, 2));
    assert_eq!(next.as_deref(), Some("b"));
    let (page, next) = engine.channels("q", "b", 3).unwrap();
    let names: Vec<_> = page.iter().map(|c| c.name.clone()).collect();
    assert_eq!(names, [Some("c".into()), Some("d".into())]);
    assert_eq!(next, None);
    // A channel whose messages are all leased has no backlog to show.
    let mut f = msg("leased");
    f.channel = Some("e".into());
    put(&engine, f);
    let filter = ReceiveOptions {
        channel: Some(ChannelFilter::Exact("e".into())),
        ..ReceiveOptions::now(1)
    };
    assert_eq!(
        engine
            .receive_now(Address::queue("q"), &filter)
            .unwrap()
            .len(),
        1
    );
    let (page, _) = engine.channels("q", "d", 10).unwrap();
    assert!(page.is_empty(), "{page:?}");
    for limit in [0, limits::CHANNELS_PAGE_MAX as usize + 1] {
        let e = engine.channels("q", "", limit).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    }
}
