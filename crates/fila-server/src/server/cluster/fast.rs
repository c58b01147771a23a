//! A put, receive or delete run on the loop that read it, when this node
//! leads the queue's partition: the engine call is made on the loop, its
//! records go into the partition's next Raft entry (submitted by the
//! leadership's tasks, [`fila_cluster::Replica::try_execute`]), and the
//! loop lets the answer out once that entry committed — told by the
//! partition's committer, which raises each holding loop's flag and wakes
//! it (`Loops::tell_committed`). No hop to the cluster node's thread and back, no task per
//! request. Anything else goes to the cluster node's endpoint as before:
//! a request of another kind, a queue not in the routing table, a
//! partition this node does not lead or whose engine a request there
//! holds, a receive that found nothing and waits, an operation that made
//! no records (it changed nothing: run again there, its answer waits for
//! what a quorum confirms), and a request whose entry was refused before
//! it was appended (nothing was made: it runs again there, waiting for the
//! next leader).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use fila_cluster::{ReplicaError, Ticket};
use fila_proto::Request;

use super::groups::Cluster;
use crate::dispatch::Answer;
use crate::server::host::{Route, RunJob};

/// What the loops reach of the cluster node.
pub(in crate::server) struct Fast {
    c: Weak<Cluster>,
    /// Per loop: it holds answers waiting for a commit (the next commit
    /// tells it, `Loops::tell_committed`).
    waiting: Vec<AtomicBool>,
}

/// A request run on a loop, its answer waiting for its entry's commit.
pub(in crate::server) struct Held {
    ticket: Ticket,
    /// The request as it came (run again at the endpoint when its entry
    /// was refused).
    job: RunJob,
    answer: Answer,
}

/// The answers a loop holds: per partition, in the order they ran (their
/// entries commit in that order).
#[derive(Default)]
pub(in crate::server) struct HeldAnswers {
    parts: Vec<VecDeque<Held>>,
    /// What `take_done` last let out (kept for its room).
    pub(in crate::server) done: Vec<Outcome>,
}

/// What became of a held request.
pub(in crate::server) enum Outcome {
    /// Its answer (or the refusal its entry's failure makes).
    Answer(Route, Answer),
    /// Its entry was refused before it was appended: nothing was made, it
    /// runs again at the endpoint.
    Again(Box<RunJob>),
}

impl Fast {
    pub(super) fn new(c: &Arc<Cluster>, loops: usize) -> Arc<Fast> {
        Arc::new(Fast {
            c: Arc::downgrade(c),
            waiting: (0..loops).map(|_| AtomicBool::new(false)).collect(),
        })
    }

    /// After an entry's outcome is noted: tells each loop holding answers.
    pub(super) fn committed(&self) {
        let Some(c) = self.c.upgrade() else { return };
        for (lp, w) in self.waiting.iter().enumerate() {
            if w.load(Ordering::SeqCst) && w.swap(false, Ordering::SeqCst) {
                // A flag and a wake-up: never full, never blocking the
                // committer's thread.
                c.shared.loops.tell_committed(lp);
            }
        }
    }

    /// Runs `job` on the calling loop when it can (see the module docs)
    /// and holds its answer in `held` (the loop then calls
    /// [`Fast::take_done`]: its entry may have committed already); gives
    /// it back otherwise.
    pub(in crate::server) fn try_run(&self, job: RunJob, held: &mut HeldAnswers) -> Option<RunJob> {
        let Some(c) = self.c.upgrade() else {
            return Some(job);
        };
        if crate::ops::of(&job.req).cluster != crate::ops::OnCluster::LoopWrite
            || job.route.lp >= c.shared.loops.owners()
        {
            return Some(job);
        }
        let g = match crate::ops::queue_of(&job.req).and_then(|q| c.routes.get(q)) {
            Some(g) => *g as usize,
            None => return Some(job),
        };
        let Some(part) = c.parts.get(g) else {
            return Some(job);
        };
        let mut req = job.req.clone();
        let waits = match &mut req {
            Request::Receive(r) => r.wait_ms.replace(0) != Some(0),
            _ => false,
        };
        let room = job.route.room;
        let put = match &req {
            Request::Put {
                queue, messages, ..
            } => Some((queue.clone(), messages.len())),
            _ => None,
        };
        let ran = part.try_execute(
            move |owner| super::run::run_on(owner, req, room),
            // A receive that found nothing and may wait: the endpoint's.
            |answer| !(waits && matches!(answer, Answer::Messages(_, ms) if ms.is_empty())),
        );
        let Some((answer, ticket)) = ran else {
            return Some(job);
        };
        if let Some((queue, n)) = put.filter(|_| !answer.is_error()) {
            // Receives waiting at the endpoint look again.
            c.waiters[g].put(&queue, n);
        }
        if held.parts.len() <= g {
            held.parts.resize_with(g + 1, VecDeque::new);
        }
        held.parts[g].push_back(Held {
            ticket,
            job,
            answer,
        });
        None
    }

    /// Loop `lp` holds answers: it is told of the next commit.
    fn wait(&self, lp: usize) {
        if let Some(w) = self.waiting.get(lp) {
            w.store(true, Ordering::SeqCst);
        }
    }

    /// Takes from `held` (loop `lp`'s) the requests whose entries' outcome
    /// is known, into `out`; while some are left, `lp` is told of the next
    /// commit.
    pub(in crate::server) fn take_done(
        &self,
        lp: usize,
        held: &mut HeldAnswers,
        out: &mut Vec<Outcome>,
    ) {
        // Told of the next commit first: one that comes after the look
        // below sends word again.
        if held.parts.iter().any(|p| !p.is_empty()) {
            self.wait(lp);
        }
        for (g, part) in held.parts.iter_mut().enumerate() {
            while let Some(outcome) = part.front().and_then(|h| h.ticket.outcome()) {
                let Some(h) = part.pop_front() else { break };
                out.push(match outcome {
                    Ok(()) => Outcome::Answer(h.job.route, h.answer),
                    Err(ReplicaError::NotLeader { .. }) => Outcome::Again(Box::new(h.job)),
                    Err(e) => {
                        let answer = match self.c.upgrade() {
                            Some(c) => c.refusal(g as u32, &e),
                            None => crate::dispatch::error(
                                fila_proto::ErrorCode::OUTCOME_UNKNOWN,
                                format!("outcome_unknown: {e}"),
                            )
                            .into(),
                        };
                        Outcome::Answer(h.job.route, answer)
                    }
                });
            }
        }
    }
}
