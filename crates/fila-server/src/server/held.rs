//! (A cluster node.) The answers a loop holds until their Raft entries
//! commit, and the word a partition's committer sends the loops holding
//! them: the loop's and the committer's halves of
//! [`fila_core::commits`], built in both modes so that the loom model
//! (`loom_model.rs`) runs them through the loops' mailboxes.
//!
//! A request run on a loop on its partition's leader (`cluster/fast.rs`)
//! has its answer held here with its entry's ticket. After each entry's
//! outcome is noted, the committer raises the flag of each loop waiting
//! for word and wakes it ([`tell_loops`], `Loops::tell_committed`); the
//! loop then lets out, in order, every answer whose entry's outcome is
//! known ([`HeldAnswers::take_done`]): committed, its answer; refused
//! before it was appended (nothing was made), the request runs again at
//! the cluster node's endpoint, which waits for the next leader; unknown,
//! `outcome_unknown`. Never an answer before its entry's outcome, and
//! never "ok" for an entry that did not commit.

use fila_core::commits::{Failure, Held, Ticket, Told};
use fila_proto::ErrorCode;

use super::host::{Route, RunJob};
use super::mailbox::Loops;
use crate::dispatch::Answer;

/// The answers a loop holds: per partition, in the order they ran (their
/// entries commit in that order).
#[derive(Default)]
pub(in crate::server) struct HeldAnswers {
    held: Held<(RunJob, Answer)>,
    /// What `take_done` last let out (kept for its room).
    pub(in crate::server) done: Vec<Released>,
}

/// What became of a held request.
pub(in crate::server) enum Released {
    /// Its answer (or the refusal its entry's failure makes).
    Answer(Route, Answer),
    /// Its entry was refused before it was appended: nothing was made, it
    /// runs again at the endpoint.
    Again(Box<RunJob>),
}

impl HeldAnswers {
    /// Holds the `answer` to `job`, run on partition `part`'s leader here,
    /// until `ticket`'s entry's outcome is known (the loop then calls
    /// [`HeldAnswers::take_done`]: it may be known already).
    #[cfg_attr(loom, allow(dead_code))]
    pub(in crate::server) fn hold(
        &mut self,
        part: usize,
        ticket: Ticket,
        job: RunJob,
        answer: Answer,
    ) {
        self.held.push(part, ticket, (job, answer));
    }

    /// Takes the requests whose entries' outcome is known, into `out`;
    /// while some are left, loop `lp` waits for word of the next outcome.
    pub(in crate::server) fn take_done(&mut self, lp: usize, told: &Told, out: &mut Vec<Released>) {
        self.held.take_done(lp, told, |_, (job, answer), outcome| {
            out.push(match outcome {
                Ok(()) => Released::Answer(job.route, answer),
                Err(Failure::Refused { .. }) => Released::Again(Box::new(job)),
                Err(Failure::Unknown { .. }) => Released::Answer(job.route, unknown()),
            })
        });
    }
}

/// The answer to a request whose entry may or may not have committed.
pub(in crate::server) fn unknown() -> Answer {
    crate::dispatch::error(
        ErrorCode::OUTCOME_UNKNOWN,
        format!("outcome_unknown: {}", fila_core::commits::UNKNOWN_WHY),
    )
    .into()
}

/// After an entry's outcome is noted: tells each loop waiting for word (a
/// flag and a wake-up, never full, never blocking the committer's thread).
#[cfg_attr(loom, allow(dead_code))]
pub(in crate::server) fn tell_loops(told: &Told, loops: &Loops) {
    told.tell(|lp| loops.tell_committed(lp));
}
