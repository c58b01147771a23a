//! An engine split into owners, as a server runs it: each owner touches
//! only its own shards; dead letters bound for another owner's shard wait
//! in `take_transit` until that owner accepts them; due timers run within
//! a budget per call.

use std::sync::Arc;

use bytes::Bytes;
use fila_core::*;

/// Two names whose shards (of 2) differ.
fn names_on_both_shards() -> (String, String) {
    let a = (0..).map(|i| format!("a{i}")).find(|n| shard_of(n, 2) == 0);
    let b = (0..).map(|i| format!("b{i}")).find(|n| shard_of(n, 2) == 1);
    (a.unwrap(), b.unwrap())
}

/// An engine of 2 shards with a source queue on shard 0 whose dead letters
/// go to a target queue on shard 1, split into 2 owners.
fn source_and_target(settings: QueueSettings) -> (ManualClock, String, String, Vec<Owner>) {
    let clock = ManualClock::new(1_000_000);
    let engine = Engine::new(2, Arc::new(clock.clone()));
    let (source, target) = names_on_both_shards();
    engine
        .create_queue(&target, QueueSettings::default())
        .unwrap();
    engine
        .create_queue(
            &source,
            QueueSettings {
                dead_letter_target: Some(target.clone()),
                ..settings
            },
        )
        .unwrap();
    (clock, source, target, engine.into_owners(2, 16))
}

/// Puts `batches` batches of 20 one-byte messages.
fn put_batches(o: &mut Owner, queue: &str, batches: usize) {
    for _ in 0..batches {
        let batch = (0..20)
            .map(|_| NewMessage::new(Bytes::from_static(b"x")))
            .collect();
        assert!(o.put(queue, batch).unwrap().iter().all(|r| r.is_ok()));
    }
}

/// A receive of up to 20 messages that must be ready now.
fn receive_20(o: &mut Owner, queue: &str) -> Vec<Message> {
    match o
        .receive(Address::queue(queue), &ReceiveOptions::now(20), None)
        .unwrap()
    {
        Received::Ready(ms) => ms,
        Received::Parked(_) => panic!("messages are visible"),
    }
}

/// 5 000 messages in `source`, 100 of them leased: their receipts.
fn fill_and_lease(o: &mut Owner, source: &str) -> Vec<Receipt> {
    put_batches(o, source, 250);
    (0..5)
        .flat_map(|_| receive_20(o, source))
        .map(|m| m.receipt.unwrap())
        .collect()
}

/// Lets the leases end and the owner of `source` sweep 16 a turn, then
/// checks that the 5 000 messages went nowhere (not to `target`), that
/// sweeping took the turns it should and the slab shrank below half of
/// `slots`.
fn sweep_out(clock: &ManualClock, owners: &mut [Owner], target: &str, slots: usize) {
    clock.advance(1_000);
    let a = &mut owners[0];
    let turns = turns_to_catch_up(a, 16, 1_000);
    // 5 000 messages, 16 a turn (and 16 timers a turn while leases end).
    assert!(turns >= 5_000 / 16 - 20, "{turns} turns");
    assert!(a.take_transit().is_empty(), "no dead letter left");
    a.check_invariants().unwrap();
    assert!(a.message_slots() < slots / 2, "the slab trimmed once swept");
    assert_eq!(owners[1].stats(target).unwrap().visible, 0);
}

/// Turns of `o` (each `advance(budget)`, its bookkeeping checked after)
/// until it has caught up; fails past `max`.
fn turns_to_catch_up(o: &mut Owner, budget: usize, max: usize) -> usize {
    let mut turns = 0;
    while !o.advance(budget) {
        turns += 1;
        assert!(turns < max, "{turns} turns and not caught up");
        o.check_invariants().unwrap();
    }
    turns
}

#[test]
fn a_dead_letter_for_another_owner_waits_in_transit_until_it_is_accepted() {
    let (_clock, source, target, mut owners) = source_and_target(QueueSettings::default());
    let (zero, one) = owners.split_at_mut(1);
    let (a, b) = (&mut zero[0], &mut one[0]);
    assert_eq!(a.owned().collect::<Vec<_>>(), vec![0]);
    assert_eq!(b.owned().collect::<Vec<_>>(), vec![1]);
    a.put(&source, vec![NewMessage::new(Bytes::from_static(b"x"))])
        .unwrap();
    let got = match a
        .receive(Address::queue(&source), &ReceiveOptions::default(), None)
        .unwrap()
    {
        Received::Ready(ms) => ms,
        Received::Parked(_) => panic!("no notify, no parking"),
    };
    a.dead_letter(&source, &got[0].receipt.unwrap(), "bad", "input")
        .unwrap();
    // Out of the source, not yet in the target: counted in transit, which
    // keeps a snapshot from being taken.
    let totals = a.totals();
    assert_eq!(totals.in_transit(), 1);
    assert_eq!(a.stats(&source).unwrap().in_flight, 0);
    assert_eq!(b.stats(&target).unwrap().visible, 0);
    let transit = a.take_transit();
    assert_eq!(transit.len(), 1);
    assert_eq!(transit[0].shard(2), 1);
    for t in transit {
        b.accept(t);
    }
    assert_eq!(totals.in_transit(), 0);
    assert_eq!(b.stats(&target).unwrap().visible, 1);
    a.check_invariants().unwrap();
    b.check_invariants().unwrap();
}

#[test]
fn a_dead_letter_whose_target_is_gone_bounces_back_to_its_source_dlq() {
    let (clock, source, target, mut owners) = source_and_target(QueueSettings {
        max_deliveries: 1,
        visibility_timeout_ms: 1_000,
        ..QueueSettings::default()
    });
    let (zero, one) = owners.split_at_mut(1);
    let (a, b) = (&mut zero[0], &mut one[0]);
    b.delete_queue(&target).unwrap();
    a.put(&source, vec![NewMessage::new(Bytes::from_static(b"x"))])
        .unwrap();
    a.receive(Address::queue(&source), &ReceiveOptions::default(), None)
        .unwrap();
    // The lease ends (the owner's own time), and the next receive finds its
    // one delivery spent: a dead letter for the other owner's queue.
    clock.advance(1_000);
    assert!(a.advance(16));
    let none = a
        .receive(Address::queue(&source), &ReceiveOptions::default(), None)
        .unwrap();
    assert!(matches!(none, Received::Ready(ms) if ms.is_empty()));
    let out = a.take_transit();
    assert_eq!(out.len(), 1);
    b.accept(out.into_iter().next().unwrap());
    let back = b.take_transit();
    assert_eq!(back.len(), 1, "bounced");
    assert_eq!(back[0].shard(2), 0);
    a.accept(back.into_iter().next().unwrap());
    assert_eq!(a.totals().in_transit(), 0);
    assert_eq!(a.stats(&source).unwrap().dead_lettered, 1);
}

#[test]
fn an_owner_runs_due_timers_within_its_budget_a_turn() {
    let clock = ManualClock::new(1_000_000);
    let engine = Engine::new(1, Arc::new(clock.clone()));
    engine
        .create_queue(
            "q",
            QueueSettings {
                visibility_timeout_ms: 1_000,
                ..QueueSettings::default()
            },
        )
        .unwrap();
    let mut owners = engine.into_owners(1, 100);
    let o = &mut owners[0];
    // 1 000 leases ending at 50 instants, 20 at each.
    put_batches(o, "q", 50);
    for _ in 0..50 {
        let opts = ReceiveOptions {
            max_messages: 20,
            ..ReceiveOptions::default()
        };
        match o.receive(Address::queue("q"), &opts, None).unwrap() {
            Received::Ready(ms) => assert_eq!(ms.len(), 20),
            Received::Parked(_) => panic!("no notify, no parking"),
        }
        clock.advance(1);
    }
    assert_eq!(o.stats("q").unwrap().in_flight, 1_000);
    clock.advance(2_000);
    // A turn stops once 100 timers ran (after the instant that reached
    // it): 100 a turn, so about ten turns, not one, end every lease.
    let turns = turns_to_catch_up(o, 100, 100);
    assert!((9..=10).contains(&turns), "{turns} turns");
    let s = o.stats("q").unwrap();
    assert_eq!((s.visible, s.in_flight), (1_000, 0));
}

#[test]
fn a_deleted_queue_is_gone_at_once_and_its_messages_are_swept_within_the_budget() {
    let (clock, source, target, mut owners) = source_and_target(QueueSettings {
        max_deliveries: 1,
        visibility_timeout_ms: 1_000,
        ..QueueSettings::default()
    });
    let a = &mut owners[0];
    // The 100 leased: their leases end while the sweep is under way, and
    // must not dead-letter into the target.
    fill_and_lease(a, &source);
    let slots = a.message_slots();
    a.delete_queue(&source).unwrap();
    // Gone for users at once; its name can be taken again.
    assert!(!a.has_queue(&source));
    a.create_queue(&source, QueueSettings::default()).unwrap();
    assert_eq!(a.stats(&source).unwrap().visible, 0);
    // The call itself removed at most the budget (16 here): the slab is
    // trimmed only once the sweep is done.
    assert_eq!(a.message_slots(), slots);
    sweep_out(&clock, &mut owners, &target, slots);
    assert_eq!(owners[0].stats(&source).unwrap().visible, 0);
}

#[test]
fn a_purged_queue_is_empty_at_once_and_its_messages_are_swept_within_the_budget() {
    let (clock, source, target, mut owners) = source_and_target(QueueSettings {
        max_deliveries: 1,
        visibility_timeout_ms: 1_000,
        dead_letter_on_expiration: true,
        ..QueueSettings::default()
    });
    let a = &mut owners[0];
    // The 100 leased: their leases end while the sweep is under way, and
    // must neither come back nor dead-letter into the target.
    let leased = fill_and_lease(a, &source);
    let slots = a.message_slots();
    a.purge(Address::queue(&source)).unwrap();
    // Empty for users at once: stats, receives, receipts; the call itself
    // freed at most the budget (16 here).
    let stats = a.stats(&source).unwrap();
    assert_eq!((stats.visible, stats.in_flight, stats.bytes), (0, 0, 0));
    assert_eq!(a.message_slots(), slots);
    let answers = a.delete(Address::queue(&source), &leased[..20]).unwrap();
    assert!(
        answers
            .iter()
            .all(|r| matches!(r, Err(Error::ReceiptStale))),
        "a purged message's receipt is stale"
    );
    // A second purge waits for the first one's sweep.
    assert_eq!(
        a.purge(Address::queue(&source)).unwrap_err().kind(),
        ErrorKind::ResourceExhausted
    );
    // New messages are the queue's only ones.
    put_batches(a, &source, 1);
    let got = receive_20(a, &source);
    assert_eq!(got.len(), 20);
    let receipts: Vec<Receipt> = got.iter().map(|m| m.receipt.unwrap()).collect();
    assert!(a
        .delete(Address::queue(&source), &receipts)
        .unwrap()
        .iter()
        .all(|r| r.is_ok()));
    a.check_invariants().unwrap();
    sweep_out(&clock, &mut owners, &target, slots);
    let a = &mut owners[0];
    let stats = a.stats(&source).unwrap();
    assert_eq!((stats.visible, stats.in_flight), (0, 0));
    a.purge(Address::queue(&source)).unwrap();
}

/// A receive parked with `Wake::Report` (as an event loop parks) is handed
/// back as a completion under the `WaitId` its parking answered: filled by
/// a put, ended by its deadline, or failed by the queue's deletion; a
/// cancelled one never comes back.
#[test]
fn a_reported_parked_receive_comes_back_under_its_wait_id() {
    let clock = ManualClock::new(1_000_000);
    let engine = Engine::new(1, Arc::new(clock.clone()));
    engine.create_queue("q", QueueSettings::default()).unwrap();
    let mut owners = engine.into_owners(1, 100);
    let o = &mut owners[0];
    let park = |o: &mut Owner, wait_ms: u64| {
        let opts = ReceiveOptions {
            max_messages: 5,
            wait_ms: Some(wait_ms),
            ..ReceiveOptions::default()
        };
        match o
            .receive(Address::queue("q"), &opts, Some(Wake::Report))
            .unwrap()
        {
            Received::Parked(id) => id,
            Received::Ready(ms) => panic!("parked expected, got {} messages", ms.len()),
        }
    };
    let taken = |o: &mut Owner| -> Vec<(WaitId, Result<Vec<Message>, Error>)> {
        o.take_completions()
            .into_iter()
            .map(|c| {
                assert!(matches!(c.wake, Wake::Report));
                (c.wait, c.result)
            })
            .collect()
    };

    // Filled by a put: the first parked is served first.
    let first = park(o, 10_000);
    let second = park(o, 10_000);
    assert_ne!(first, second);
    assert!(taken(o).is_empty());
    put_batches(o, "q", 1);
    let done = taken(o);
    assert_eq!(done.len(), 2);
    assert_eq!(done[0].0, first);
    assert_eq!(done[0].1.as_ref().unwrap().len(), 5);
    assert_eq!(done[1].0, second);
    assert_eq!(done[1].1.as_ref().unwrap().len(), 5);

    // Drain what is left, then one ends by its deadline, empty.
    while !receive_20(o, "q").is_empty() {}
    let timed = park(o, 50);
    clock.advance(50);
    o.advance(100);
    let done = taken(o);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].0, timed);
    assert!(done[0].1.as_ref().unwrap().is_empty());

    // A cancelled one never comes back; one on a deleted queue fails.
    let cancelled = park(o, 10_000);
    assert!(o.cancel_wait(cancelled));
    let deleted = park(o, 10_000);
    o.delete_queue("q").unwrap();
    let done = taken(o);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].0, deleted);
    assert!(matches!(done[0].1, Err(Error::QueueDeleted(_))));
}

/// An owner counts the changes its calls logged, deliveries aside: a call
/// that moved the count made a change its answer acknowledges (a server
/// holds exactly those answers for the log).
#[test]
fn an_owner_says_which_calls_logged_a_change() {
    struct Sink;
    impl fila_core::event::EventSink for Sink {
        fn record(&mut self, _: &fila_core::event::Event<'_>) {}
    }
    let clock = ManualClock::new(1_000_000);
    let engine = Engine::new(1, Arc::new(clock.clone()));
    engine.create_queue("q", QueueSettings::default()).unwrap();
    let mut owners = engine.into_owners(1, 100);
    let o = &mut owners[0];
    // Without a journal nothing is logged.
    put_batches(o, "q", 1);
    assert_eq!(o.changes(), 0);
    o.set_journal(0, Some(Box::new(Sink)));
    let logged = |o: &mut Owner, call: &dyn Fn(&mut Owner)| {
        let before = o.changes();
        call(o);
        o.changes() != before
    };
    assert!(logged(o, &|o| put_batches(o, "q", 1)), "a put");
    assert!(!logged(o, &|o| {
        o.stats("q").unwrap();
    }));
    assert!(!logged(o, &|o| {
        o.peek(Address::queue("q"), 0, 5).unwrap();
    }));
    // A receive logs its deliveries, which no answer waits for.
    let got = std::cell::RefCell::new(Vec::new());
    assert!(!logged(o, &|o| *got.borrow_mut() = receive_20(o, "q")));
    let receipts: Vec<Receipt> = got.borrow().iter().map(|m| m.receipt.unwrap()).collect();
    assert!(logged(o, &|o| {
        o.delete(Address::queue("q"), &receipts).unwrap();
    }));
    // The same receipts again: nothing changes, nothing is logged.
    assert!(!logged(o, &|o| {
        let again = o.delete(Address::queue("q"), &receipts).unwrap();
        assert!(again.iter().all(|r| r.is_err()));
    }));
    assert!(!logged(o, &|o| {
        assert!(o
            .put("missing", vec![NewMessage::new(Bytes::from_static(b"x"))])
            .is_err());
    }));
    assert!(logged(o, &|o| o.purge(Address::queue("q")).unwrap()));
}

/// Issue 38: leases spread uniformly over a minute end on time, and no
/// turn of the owner moves more timers between the wheel's slots than its
/// budget plus what one slot of level 1 (256 ms) holds. Before, about a
/// third of them shared one slot of level 2 (65.5 s wide) that was moved
/// down in the one turn at which it came due: with 2 000 000 leases, a
/// turn of 16–27 ms in which every lease due waited.
#[test]
fn leases_over_a_minute_end_on_time_and_no_turn_moves_a_crowd() {
    const N: usize = 20_000;
    const BUDGET: usize = 1_024;
    // 40 s into a slot of level 2 of the wheel (65 536 ms wide).
    let t0 = (1u64 << 16) * 26_000_000 + 40_000;
    let clock = ManualClock::new(t0);
    let engine = Engine::new(1, Arc::new(clock.clone()));
    engine.create_queue("q", QueueSettings::default()).unwrap();
    let mut o = engine.into_owners(1, BUDGET).remove(0);
    put_batches(&mut o, "q", N / 20);
    let mut ends = Vec::with_capacity(N);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    while ends.len() < N {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let opts = ReceiveOptions {
            visibility_ms: Some(1_000 + seed % 59_001),
            ..ReceiveOptions::now(20)
        };
        match o.receive(Address::queue("q"), &opts, None).unwrap() {
            Received::Ready(ms) => ends.extend(ms.iter().map(|m| m.next_visible_at_ms)),
            Received::Parked(_) => panic!("messages are visible"),
        }
    }
    ends.sort_unstable();
    let (mut worst, mut ended) = (0u64, 0usize);
    for now in t0 + 1..=t0 + 60_000 {
        // The owner's loop sleeps until its next deadline: never past a
        // lease's end.
        if let Some(&end) = ends.get(ended) {
            let next = o.next_deadline().expect("timers pending");
            assert!(next <= end, "asleep until {next}, a lease ends at {end}");
        }
        clock.advance(1);
        let before = o.timer_moves();
        assert!(o.advance(BUDGET), "caught up at {now}");
        worst = worst.max(o.timer_moves() - before);
        while ended < N && ends[ended] <= now {
            ended += 1;
        }
        assert_eq!(o.stats("q").unwrap().visible, ended as u64, "at {now}");
    }
    assert_eq!(ended, N);
    // One slot of level 1 holds about N × 256 / 59 000 = 87 of them.
    assert!(
        worst <= (BUDGET + 500) as u64,
        "one turn moved {worst} timers"
    );
}
