//! How a request that reached a node follows its partition's leader: the
//! decisions a server's endpoint takes after each look at its replica and
//! after each forward — here, in the crate the simulation runs, so that
//! the simulation's requests take the same ones (its `request_from`
//! follows a [`Course`] as the server's `run_since` does).
//!
//! A look here that the replica refuses `not_leader` naming another node
//! is forwarded there — held there when it is a receive that waits
//! ([`Step::Hold`]), sent once otherwise ([`Step::Forward`]) — by a caller
//! that cannot follow a `not_leader` answer itself (the SQS API, the
//! console: it *forwards*); a caller that can (the binary protocol's
//! clients) is answered `not_leader` with the leader's address. With no
//! leader known, or this node just elected and not yet serving, the
//! request looks again every [`LOOK`] for [`LEADER_WAIT`]. A forward
//! given up because another node leads now goes there
//! ([`Step::Again`]) for [`FORWARD_RETRY_WITHIN`], then is answered
//! `outcome_unknown` ([`Step::Unknown`]).
//!
//! [`LOOK`]: super::LOOK

use std::time::Duration;

use super::LEADER_WAIT;
use crate::{NodeId, ReplicaError};

/// How long a request follows leaders that change under its forward
/// before it is answered `outcome_unknown`: a few elections.
pub const FORWARD_RETRY_WITHIN: Duration = Duration::from_secs(15);

/// One request's way to its partition's leader (see the module docs).
#[derive(Clone, Debug)]
pub struct Course {
    /// This node.
    me: NodeId,
    /// Whether its caller cannot follow `not_leader` (it is forwarded).
    forwards: bool,
    /// Whether it is held by the leader it is forwarded to (a receive
    /// that waits, until that leader cannot hold it).
    hold: bool,
}

/// What a request does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Sent to this leader as a held ask, answered there when messages
    /// come or its wait ends.
    Hold(NodeId),
    /// Sent to this leader once.
    Forward(NodeId),
    /// Looked at again at once: another node leads now, or the leader
    /// cannot hold it and it is forwarded once per look instead.
    Again,
    /// Looked at again after [`super::LOOK`]: no leader is known yet, or
    /// this node leads and does not serve yet, or the leader it was held
    /// by no longer leads.
    Pause,
    /// Answered with what came back: the answer, or the refusal.
    Answer,
    /// Answered `outcome_unknown`: the leaders kept changing under its
    /// forwards for [`FORWARD_RETRY_WITHIN`].
    Unknown,
}

/// What a held ask came to, as a [`Course`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeldTo {
    /// The leader answered.
    Answered {
        /// The answer is `not_leader`: it stopped leading while it held
        /// the ask.
        not_leader: bool,
    },
    /// Not held: every connection kept for held asks was taken, or the
    /// leader (of an earlier version) did not know the ask.
    Unheld,
    /// The forward failed on its way.
    Failed,
    /// Another node leads now.
    Moved,
}

impl Course {
    /// The course of a request reaching node `me` from a caller that
    /// `forwards` (cannot follow `not_leader`); `waits`: a receive that
    /// may wait.
    pub fn new(me: NodeId, forwards: bool, waits: bool) -> Course {
        Course {
            me,
            forwards,
            hold: waits,
        }
    }

    /// Whether a forward of it would be held by the leader.
    pub fn holds(&self) -> bool {
        self.hold
    }

    /// After this node's replica refused it with `e` (the leader it
    /// names found as [`super::Node::named`] finds it), `waited` into
    /// the request.
    pub fn refused(&self, e: &ReplicaError, waited: Duration, stopping: bool) -> Step {
        match *e {
            ReplicaError::NotLeader { leader: Some(id) } if self.forwards && id != self.me => {
                if self.hold {
                    Step::Hold(id)
                } else {
                    Step::Forward(id)
                }
            }
            // No leader known (an election, a leadership handed over),
            // or this node, not yet serving as one (just elected): the
            // request waits for one rather than being answered
            // `not_leader` with nobody to follow, or with itself.
            ReplicaError::NotLeader { leader }
                if leader.is_none_or(|id| id == self.me) && waited < LEADER_WAIT && !stopping =>
            {
                Step::Pause
            }
            _ => Step::Answer,
        }
    }

    /// After a held ask came to `to`, `waited` into the request.
    pub fn held(&mut self, to: HeldTo, waited: Duration, stopping: bool) -> Step {
        match to {
            // The leader lost the leadership while it held the receive:
            // the rest of the wait on the one that does, once this node
            // knows it.
            HeldTo::Answered { not_leader: true } if waited < FORWARD_RETRY_WITHIN && !stopping => {
                Step::Pause
            }
            HeldTo::Answered { .. } | HeldTo::Failed => Step::Answer,
            HeldTo::Unheld => {
                self.hold = false;
                Step::Again
            }
            HeldTo::Moved => self.forwarded(true, waited),
        }
    }

    /// After a forward sent once came back (`moved`: given up because
    /// another node leads now), `waited` into the request.
    pub fn forwarded(&self, moved: bool, waited: Duration) -> Step {
        match moved {
            false => Step::Answer,
            true if waited < FORWARD_RETRY_WITHIN => Step::Again,
            true => Step::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: NodeId = 1;
    const EARLY: Duration = Duration::from_millis(10);

    fn not_leader(leader: Option<NodeId>) -> ReplicaError {
        ReplicaError::NotLeader { leader }
    }

    #[test]
    fn a_forwarding_caller_goes_to_the_named_leader_held_while_it_waits() {
        let e = not_leader(Some(2));
        assert_eq!(
            Course::new(ME, true, true).refused(&e, EARLY, false),
            Step::Hold(2)
        );
        assert_eq!(
            Course::new(ME, true, false).refused(&e, EARLY, false),
            Step::Forward(2)
        );
        // A caller that follows `not_leader` itself is answered it.
        assert_eq!(
            Course::new(ME, false, true).refused(&e, EARLY, false),
            Step::Answer
        );
    }

    #[test]
    fn no_leader_known_or_itself_waits_for_one_until_leader_wait() {
        let course = Course::new(ME, true, false);
        for e in [not_leader(None), not_leader(Some(ME))] {
            assert_eq!(course.refused(&e, EARLY, false), Step::Pause);
            assert_eq!(course.refused(&e, LEADER_WAIT, false), Step::Answer);
            assert_eq!(course.refused(&e, EARLY, true), Step::Answer, "stopping");
        }
        // A caller that follows `not_leader` waits for a leader too.
        let own = Course::new(ME, false, false);
        assert_eq!(own.refused(&not_leader(None), EARLY, false), Step::Pause);
    }

    #[test]
    fn other_refusals_are_answered() {
        let course = Course::new(ME, true, true);
        for e in [
            ReplicaError::Unknown { leader: Some(2) },
            ReplicaError::Unready("not serving"),
            ReplicaError::Refused("no".into()),
        ] {
            assert_eq!(course.refused(&e, EARLY, false), Step::Answer, "{e}");
        }
    }

    #[test]
    fn a_held_ask_the_leader_cannot_hold_is_forwarded_once_per_look() {
        let mut course = Course::new(ME, true, true);
        assert_eq!(course.held(HeldTo::Unheld, EARLY, false), Step::Again);
        assert!(!course.holds());
        assert_eq!(
            course.refused(&not_leader(Some(2)), EARLY, false),
            Step::Forward(2)
        );
    }

    #[test]
    fn a_held_ask_follows_the_leadership_for_a_while_then_is_unknown() {
        let mut course = Course::new(ME, true, true);
        let late = FORWARD_RETRY_WITHIN;
        let lost = HeldTo::Answered { not_leader: true };
        assert_eq!(course.held(lost, EARLY, false), Step::Pause);
        assert_eq!(course.held(lost, late, false), Step::Answer);
        assert_eq!(course.held(lost, EARLY, true), Step::Answer, "stopping");
        let answered = HeldTo::Answered { not_leader: false };
        assert_eq!(course.held(answered, EARLY, false), Step::Answer);
        assert_eq!(course.held(HeldTo::Failed, EARLY, false), Step::Answer);
        assert_eq!(course.held(HeldTo::Moved, EARLY, false), Step::Again);
        assert_eq!(course.held(HeldTo::Moved, late, false), Step::Unknown);
        assert!(course.holds(), "still held by the next leader");
    }

    #[test]
    fn a_forward_given_up_goes_to_the_new_leader_for_a_while() {
        let course = Course::new(ME, true, false);
        assert_eq!(course.forwarded(false, FORWARD_RETRY_WITHIN), Step::Answer);
        assert_eq!(course.forwarded(true, EARLY), Step::Again);
        assert_eq!(course.forwarded(true, FORWARD_RETRY_WITHIN), Step::Unknown);
    }
}
