//! Loom models of the lease state machine: every interleaving of racing
//! operations on one message's state word. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p fila-core --release --test loom_lease`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;

use fila_core::lease::{LeaseEnd, MessageState, Refused, StateWord};

/// A message leased once: returns the word and the lease's generation.
fn leased() -> (Arc<StateWord>, u64) {
    let word = Arc::new(StateWord::new());
    word.occupy(MessageState::Visible, 0).unwrap();
    let lease = word.deliver(MessageState::Visible, false).unwrap();
    (word, lease.generation)
}

#[test]
fn delete_expiry_defer_and_dead_letter_race_with_exactly_one_winner() {
    loom::model(|| {
        let (word, lease) = leased();
        let ends = [
            LeaseEnd::Delete,
            LeaseEnd::Release,
            LeaseEnd::Defer,
            LeaseEnd::Remove,
        ];
        let handles: Vec<_> = ends
            .into_iter()
            .map(|end| {
                let word = word.clone();
                thread::spawn(move || word.end_lease(lease, end).map(|_| end))
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let winners: Vec<LeaseEnd> = results.iter().filter_map(|r| r.ok()).collect();
        assert_eq!(winners.len(), 1, "exactly one winner: {results:?}");
        assert!(results
            .iter()
            .filter(|r| r.is_err())
            .all(|r| *r == Err(Refused::Stale)));
        let w = word.load();
        let expected = match winners[0] {
            LeaseEnd::Delete | LeaseEnd::Remove => MessageState::Free,
            LeaseEnd::Release => MessageState::Visible,
            LeaseEnd::Defer => MessageState::Deferred,
        };
        assert_eq!(w.state, expected);
        assert_eq!(w.generation, lease + 1, "one transition, one generation");
        assert_eq!(w.delivery_count, 1, "ending a lease is not a delivery");
        assert_eq!(word.end_lease(lease, LeaseEnd::Delete), Err(Refused::Stale));
    });
}

#[test]
fn an_extension_racing_an_expiry_and_redelivery_never_extends_the_new_lease() {
    loom::model(|| {
        let (word, lease) = leased();
        let expirer = {
            let word = word.clone();
            thread::spawn(move || {
                // The shard: the lease runs out, and a receive takes it again.
                if word.end_lease(lease, LeaseEnd::Release).is_ok() {
                    word.deliver(MessageState::Visible, false)
                        .ok()
                        .map(|w| w.generation)
                } else {
                    None
                }
            })
        };
        let holder = {
            let word = word.clone();
            thread::spawn(move || {
                let extended = word.hold(lease).is_ok();
                let deleted = word.end_lease(lease, LeaseEnd::Delete).is_ok();
                (extended, deleted)
            })
        };
        let redelivered = expirer.join().unwrap();
        let (_extended, deleted) = holder.join().unwrap();
        let w = word.load();
        match (redelivered, deleted) {
            (Some(new_lease), false) => {
                assert_eq!(w.state, MessageState::InFlight);
                assert_eq!(w.generation, new_lease);
                assert_eq!(w.delivery_count, 2, "delivered exactly twice");
                assert_ne!(new_lease, lease);
            }
            (None, true) => {
                assert_eq!(w.state, MessageState::Free);
                assert_eq!(w.delivery_count, 1);
            }
            other => panic!("both or neither won: {other:?}"),
        }
        // Whatever happened, the old receipt is dead now.
        assert_eq!(word.hold(lease), Err(Refused::Stale));
    });
}

#[test]
fn two_receivers_deliver_a_visible_message_once() {
    loom::model(|| {
        let word = Arc::new(StateWord::new());
        word.occupy(MessageState::Visible, 3).unwrap();
        let receivers: Vec<_> = (0..2)
            .map(|_| {
                let word = word.clone();
                thread::spawn(move || word.deliver(MessageState::Visible, false))
            })
            .collect();
        let results: Vec<_> = receivers.into_iter().map(|h| h.join().unwrap()).collect();
        let won: Vec<_> = results.iter().filter_map(|r| r.ok()).collect();
        assert_eq!(won.len(), 1);
        assert_eq!(won[0].delivery_count, 4, "the count grew by exactly one");
        assert!(results
            .iter()
            .any(|r| *r == Err(Refused::WrongState(MessageState::InFlight))));
        assert_eq!(word.load(), won[0]);
    });
}

#[test]
fn a_deferred_message_races_receive_deferred_and_a_stale_delete() {
    loom::model(|| {
        let (word, lease) = leased();
        word.end_lease(lease, LeaseEnd::Defer).unwrap();
        let taker = {
            let word = word.clone();
            thread::spawn(move || word.deliver(MessageState::Deferred, false))
        };
        let stale = {
            let word = word.clone();
            thread::spawn(move || word.end_lease(lease, LeaseEnd::Delete))
        };
        let taken = taker.join().unwrap().unwrap();
        assert_eq!(stale.join().unwrap(), Err(Refused::Stale));
        assert_eq!(taken.delivery_count, 2);
        assert_eq!(word.load().state, MessageState::InFlight);
        assert!(word.end_lease(taken.generation, LeaseEnd::Delete).is_ok());
    });
}
