//! Loom model of the hand-off between loops, through the path requests
//! really take: two loops each send a receipt operation on one lease
//! (a delete, a change of visibility) to the loop that owns its shard
//! through their posts and its mailbox, while a third thread lets the
//! lease's time run out; the owner serves its mailbox with its shard host
//! (`ShardHost::serve_msg` → `dispatch::run` → the `Owner`) and its
//! timers, and the answers go back through the senders' mailboxes. In
//! every interleaving each sender gets exactly its own answer, and the
//! answers, the message's state and its delivery count are what the order
//! the owner served them in says: an ended lease's receipt is refused, a
//! deleted message is never delivered again, one whose lease ran out comes
//! back with its delivery count one higher. Run with `scripts/loom.sh`.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use fila_core::{
    Address, Clock, Engine, ManualClock, NewMessage, QueueSettings, ReceiveOptions, Received,
};
use fila_proto::{self as proto, Request, Response};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use mio::{Poll, Waker};

use super::front::ConnRef;
use super::host::{Done, Route, RunJob, ShardHost, TIMERS_PER_TURN};
use super::mailbox::{Loops, Msg, Post};
use super::{Shared, WAKER};
use crate::config::Config;
use crate::dispatch::Answer;
use crate::metrics::Metrics;

const LEASE_MS: u64 = 1_000;
const EXTEND_MS: u64 = 5_000;
const EXPIRE_STEP_MS: u64 = 2_000;

/// What the owner did, in the order it did it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Step {
    Delete,
    Extend,
    Expire,
}

fn shared_for(loops: Loops, totals: fila_core::Totals, cluster: Option<usize>) -> Arc<Shared> {
    Arc::new(Shared {
        config: Config::default(),
        totals,
        loops,
        alive: Arc::new(AtomicU64::new(3)),
        marks: None,
        hold: false,
        fatal: Arc::new(Mutex::new(None)),
        metrics: Arc::new(Metrics::default()),
        stopping: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        connections: AtomicU64::new(0),
        parked: AtomicU64::new(0),
        evictions_pending: AtomicU64::new(0),
        auth_warn: super::WarnLimit::default(),
        tls_warn: super::WarnLimit::default(),
        cluster,
        published: Arc::default(),
        sqs_bodies: Arc::default(),
        sqs_purges: Arc::default(),
        azure_properties: Arc::default(),
        told: fila_core::commits::Told::new(3),
        live: Arc::new(crate::live::Live::new(&Config::default()).expect("no TLS files")),
    })
}

/// Three loops' mailboxes and wakers (the polls kept alive with them).
fn three_loops() -> (Vec<Poll>, Loops) {
    let polls: Vec<Poll> = (0..3).map(|_| Poll::new().unwrap()).collect();
    let wakers = polls
        .iter()
        .map(|p| Arc::new(Waker::new(p.registry(), WAKER).unwrap()))
        .collect();
    (polls, Loops::new(wakers, Vec::new()))
}

fn route(lp: usize, opcode: proto::Opcode) -> Route {
    Route {
        lp,
        conn: ConnRef {
            slot: 0,
            generation: 1,
        },
        request_id: lp as u64,
        opcode: opcode as u8,
        started: Instant::now(),
        room: 1 << 20,
        park: 0,
        fields: proto::Fields::ALL,
        shard: 0,
        forward: false,
    }
}

/// The one answer loop `lp` got back, as the entries' successes.
fn answer_of(loops: &Loops, lp: usize) -> Vec<bool> {
    let mut answers = Vec::new();
    while let Some(msg) = loops.get(lp).take() {
        let Msg::Done { route, done } = msg else {
            panic!("loop {lp} was sent something else than an answer");
        };
        assert_eq!(route.lp, lp, "an answer reached another loop");
        let Done::Answer(Answer::Wire(response), _) = done else {
            panic!("loop {lp}'s answer is not a wire answer");
        };
        answers.push(match response {
            Response::Deleted(entries) => entries.iter().map(|e| e.is_ok()).collect(),
            Response::Visibility(entries) => entries.iter().map(|e| e.is_ok()).collect(),
            other => panic!("unexpected answer {other:?}"),
        });
    }
    assert_eq!(answers.len(), 1, "loop {lp} got {} answers", answers.len());
    answers.remove(0)
}

#[test]
fn receipt_operations_from_two_loops_and_the_lease_end_are_served_in_one_order() {
    loom::model(|| {
        let clock = ManualClock::new(1_000_000);
        let engine = Engine::new(1, Arc::new(clock.clone()));
        engine
            .create_queue(
                "q",
                QueueSettings {
                    visibility_timeout_ms: LEASE_MS,
                    ..QueueSettings::default()
                },
            )
            .unwrap();
        engine
            .put("q", vec![NewMessage::new(bytes::Bytes::from_static(b"m"))])
            .unwrap();
        let leased = engine
            .receive_now(Address::queue("q"), &ReceiveOptions::now(1))
            .unwrap();
        let receipt = leased[0].receipt.unwrap().to_bytes();
        let totals = engine.totals();
        // Loop 0 owns the shard; loops 1 and 2 send to it.
        let mut owners = engine.into_owners(3, TIMERS_PER_TURN).into_iter();
        let owner = owners.next().unwrap();
        let (polls, loops) = three_loops();
        let shared = shared_for(loops.clone(), totals, None);
        let queue = proto::QueueRef {
            name: "q".into(),
            dlq: false,
        };
        let requests = [
            (
                1,
                proto::Opcode::Delete,
                Request::Delete {
                    queue: queue.clone(),
                    receipts: vec![receipt],
                },
            ),
            (
                2,
                proto::Opcode::UpdateVisibility,
                Request::UpdateVisibility {
                    queue,
                    entries: vec![(receipt, EXTEND_MS)],
                },
            ),
        ];
        let senders: Vec<_> = requests
            .into_iter()
            .map(|(lp, opcode, req)| {
                let loops = loops.clone();
                thread::spawn(move || {
                    let mut post = Post::new(lp, loops);
                    post.send(
                        0,
                        Msg::Run(RunJob {
                            route: route(lp, opcode),
                            req,
                            may_park: false,
                            checked: false,
                        }),
                    );
                    assert!(!post.flush(), "the mailbox had room");
                })
            })
            .collect();
        let time_runs_out = Arc::new(AtomicBool::new(false));
        let ticker = {
            let time_runs_out = time_runs_out.clone();
            thread::spawn(move || time_runs_out.store(true, Ordering::Release))
        };
        // The owning loop: its timers and its mailbox, until both requests
        // are served.
        let mut host = ShardHost::new(0, shared, owner);
        let mut post = Post::new(0, loops.clone());
        let mut steps = Vec::new();
        let mut expired = false;
        while steps.iter().filter(|s| **s != Step::Expire).count() < 2 {
            if !expired && time_runs_out.load(Ordering::Acquire) {
                expired = true;
                clock.advance(EXPIRE_STEP_MS);
                host.advance(&mut post);
                steps.push(Step::Expire);
            }
            match loops.get(0).take() {
                Some(msg) => {
                    let Msg::Run(run) = &msg else {
                        panic!("the owner was sent something else than a request");
                    };
                    steps.push(match run.req {
                        Request::Delete { .. } => Step::Delete,
                        _ => Step::Extend,
                    });
                    host.serve_msg(msg, &mut post);
                }
                None => thread::yield_now(),
            }
            assert!(!post.flush(), "the senders' mailboxes had room");
        }
        for s in senders {
            s.join().unwrap();
        }
        ticker.join().unwrap();

        // What the order the owner served them in says.
        let (mut live, mut deadline, mut now) = (true, 1_000_000 + LEASE_MS, 1_000_000);
        let (mut deleted, mut ran_out) = (false, false);
        let (mut delete_ok, mut extend_ok) = (None, None);
        for step in &steps {
            match step {
                Step::Expire => {
                    now += EXPIRE_STEP_MS;
                    if live && deadline <= now {
                        live = false;
                        ran_out = true;
                    }
                }
                Step::Delete => {
                    delete_ok = Some(live);
                    deleted |= live;
                    live = false;
                }
                Step::Extend => {
                    extend_ok = Some(live);
                    if live {
                        deadline = now + EXTEND_MS;
                    }
                }
            }
        }
        assert_eq!(
            answer_of(&loops, 1),
            [delete_ok.unwrap()],
            "delete, {steps:?}"
        );
        assert_eq!(
            answer_of(&loops, 2),
            [extend_ok.unwrap()],
            "extend, {steps:?}"
        );
        let owner = host.owner_for_model();
        owner.check_invariants().unwrap();
        let stats = owner.stats("q").unwrap();
        assert_eq!(
            (stats.visible, stats.in_flight, stats.deletes),
            (
                u64::from(ran_out),
                u64::from(!deleted && !ran_out),
                u64::from(deleted)
            ),
            "{steps:?}"
        );
        // Past every lease: a message not deleted comes back, delivered
        // once more; a deleted one never does.
        clock.advance(EXTEND_MS + EXPIRE_STEP_MS);
        assert!(clock.now_ms() > deadline);
        owner.advance(usize::MAX);
        match owner
            .receive(Address::queue("q"), &ReceiveOptions::now(1), None)
            .unwrap()
        {
            Received::Ready(ms) if deleted => assert!(ms.is_empty(), "{steps:?}"),
            Received::Ready(ms) => {
                assert_eq!(ms.len(), 1, "{steps:?}");
                assert_eq!(ms[0].delivery_count, 2, "{steps:?}");
            }
            Received::Parked(_) => panic!("a receive that waits for nothing parked"),
        }
        drop(polls);
    });
}

/// What the committer notes for each of three entries, in order, and what
/// each held answer must then become.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Became {
    /// Its answer, as the request's run made it.
    Answered,
    /// Run again at the cluster node's endpoint.
    Again,
    /// `outcome_unknown`.
    Unknown,
}

/// The held answers' half of a cluster node's leader, through the code the
/// loops run: loop 0 holds the answers to three requests of loop 1's
/// connections, each waiting for its own entry (`held.rs` over
/// `fila_core::commits`), and looks once (as after it ran them); a
/// committer thread notes the entries' outcomes in order, each followed by
/// word to the loops waiting for it (`held::tell_loops` →
/// `Loops::tell_committed`); loop 0 looks again only when its mailbox's
/// flag says it was told (`take_committed`, as `drain_mailbox` does). In
/// every interleaving: no word is lost (loop 0 lets out all three), no
/// answer leaves before its entry's outcome was noted, the answers leave
/// in order, and an entry that did not commit is never answered as done —
/// refused, it runs again at the endpoint (loop 2); unknown, it is
/// answered `outcome_unknown`.
fn held_answers_leave_on_their_outcomes(
    script: [fila_core::commits::Outcome; 3],
    want: [&'static [Became]; 3],
) {
    use fila_core::commits::{Board, Ticket};

    loom::model(move || {
        let clock = ManualClock::new(1_000_000);
        let engine = Engine::new(1, Arc::new(clock.clone()));
        let totals = engine.totals();
        let owner = engine
            .into_owners(3, TIMERS_PER_TURN)
            .into_iter()
            .next()
            .unwrap();
        let (polls, loops) = three_loops();
        // Loop 2 stands for the cluster node's endpoint.
        let shared = shared_for(loops.clone(), totals, Some(2));
        let board = Arc::new(Board::new());
        let mut host = ShardHost::new(0, shared.clone(), owner);
        for k in 1..=3u64 {
            let mut route = route(1, proto::Opcode::Put);
            route.request_id = k;
            let job = RunJob {
                route,
                req: Request::Delete {
                    queue: proto::QueueRef {
                        name: "q".into(),
                        dlq: false,
                    },
                    receipts: Vec::new(),
                },
                may_park: false,
                checked: false,
            };
            let answer = Answer::Wire(Response::Created(true));
            host.held_for_model()
                .hold(0, Ticket::new(board.clone(), k), job, answer);
        }
        let first_failure = (1..)
            .zip(script)
            .find(|(_, o)| o.is_err())
            .map_or(u64::MAX, |(k, _)| k);
        // Entries whose outcome the committer is about to note, or noted.
        let noting = Arc::new(loom::sync::atomic::AtomicU64::new(0));
        let committer = {
            let (board, noting, shared) = (board.clone(), noting.clone(), shared.clone());
            thread::spawn(move || {
                for (k, outcome) in (1..).zip(script) {
                    noting.store(k, Ordering::SeqCst);
                    board.note(k, outcome);
                    super::held::tell_loops(&shared.told, &shared.loops);
                }
            })
        };
        let mut post = Post::new(0, loops.clone());
        let mut became: Vec<(u64, Became)> = Vec::new();
        let mut first = true;
        while became.len() < 3 {
            if first || loops.get(0).take_committed() {
                first = false;
                host.committed(&mut post);
                assert!(!post.flush(), "the mailboxes had room");
                let noted = noting.load(Ordering::SeqCst);
                while let Some(msg) = loops.get(1).take() {
                    let Msg::Done { route, done } = msg else {
                        panic!("loop 1 was sent something else than an answer");
                    };
                    let Done::Answer(Answer::Wire(response), _) = done else {
                        panic!("not a wire answer");
                    };
                    became.push(match response {
                        Response::Created(true) => (route.request_id, Became::Answered),
                        Response::Error(e) if e.code == proto::ErrorCode::OUTCOME_UNKNOWN => {
                            (route.request_id, Became::Unknown)
                        }
                        other => panic!("unexpected answer {other:?}"),
                    });
                }
                while let Some(msg) = loops.get(2).take() {
                    let Msg::Run(job) = msg else {
                        panic!("the endpoint was sent something else than a request");
                    };
                    became.push((job.route.request_id, Became::Again));
                }
                // An answer leaves once its entry's commit was noted; a
                // failure, once the first failure was (every later entry
                // of the leadership fails with it).
                for (k, b) in &became {
                    let decided_by = match b {
                        Became::Answered => *k,
                        _ => first_failure,
                    };
                    assert!(
                        decided_by <= noted,
                        "entry {k} became {b:?} before entry {decided_by}'s outcome was noted"
                    );
                }
            } else {
                thread::yield_now();
            }
        }
        committer.join().unwrap();
        // Loop 1 gets its answers in order, the endpoint its requests in
        // order; across the two, order is not kept (nor needed).
        became.sort_by_key(|(k, _)| *k);
        for ((_, got), want) in became.iter().zip(want) {
            assert!(want.contains(got), "{became:?}");
        }
        drop(polls);
    });
}

#[test]
fn held_answers_leave_once_their_entries_commit() {
    held_answers_leave_on_their_outcomes([Ok(()); 3], [&[Became::Answered]; 3]);
}

#[test]
fn held_answers_of_entries_refused_after_a_lost_leadership_run_again() {
    use fila_core::commits::Failure::Refused;
    let refused = Err(Refused { leader: Some(2) });
    held_answers_leave_on_their_outcomes(
        [Ok(()), refused, refused],
        [&[Became::Answered], &[Became::Again], &[Became::Again]],
    );
}

#[test]
fn held_answers_of_entries_whose_outcome_is_unknown_are_answered_so() {
    use fila_core::commits::Failure::Unknown;
    let unknown = Err(Unknown { leader: None });
    held_answers_leave_on_their_outcomes(
        [Ok(()), unknown, unknown],
        [&[Became::Answered], &[Became::Unknown], &[Became::Unknown]],
    );
    // Entry 3 committing after entry 2's outcome was unknown: entry 2
    // committed too (a log commits in order), so the answers of both are
    // either `outcome_unknown` (let out before entry 3's commit was
    // noted) or their own (after), never anything else.
    held_answers_leave_on_their_outcomes(
        [Ok(()), unknown, Ok(())],
        [
            &[Became::Answered],
            &[Became::Unknown, Became::Answered],
            &[Became::Unknown, Became::Answered],
        ],
    );
}
