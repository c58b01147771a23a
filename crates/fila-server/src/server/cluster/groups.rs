//! This node's groups ([`fila_cluster::node::Node`]: its member of the
//! metadata group, its Raft node of every partition, the routing table,
//! who leads each group, placements and forwards), and what the server
//! adds to them: each answer as the binary protocol's, the server's
//! limits, the receives waiting on each partition's leader here.

use std::sync::Arc;

use fila_cluster::node::{Led, Node, Refusal};
use fila_cluster::peer::Forwarder;
use fila_cluster::{Replica, ReplicaError};
use fila_proto::ErrorCode;
use fila_wal::FsStorage;

use super::forward::{self, Ask, Placing};
use super::{fail, Shared};
use crate::dispatch::{error, Answer};

pub(super) use fila_cluster::forward::{MAP, META};

/// A partition's replica on this node.
pub(super) type Part = Replica<FsStorage>;

/// This node's groups.
pub(super) struct Cluster {
    pub(super) node: Node<FsStorage, Forwarder>,
    pub(super) shared: Arc<Shared>,
    /// Per partition: the receives waiting on its leader here, told of
    /// messages stored or made visible there so they look again at once.
    pub(super) waiters: Vec<super::turns::Waiters>,
}

impl std::ops::Deref for Cluster {
    type Target = Node<FsStorage, Forwarder>;

    fn deref(&self) -> &Self::Target {
        &self.node
    }
}

/// The answer (and wait) a forward to `leader` brought back, or
/// `outcome_unknown` when its bytes do not read.
fn answered(leader: u64, reply: &[u8]) -> Result<(Answer, u64), Answer> {
    forward::decode_answer(reply).map_err(|why| {
        let e = std::io::Error::new(std::io::ErrorKind::InvalidData, why);
        forward::lost(leader, &e)
    })
}

/// What became of a held ask ([`Cluster::forward_held_while_leading`]).
pub(super) enum Held {
    /// The leader's answer: messages, the end of the wait, a refusal.
    Done(Answer),
    /// Not sent (every connection kept for held asks is taken), or the
    /// leader, of an earlier version, did not know the ask: the receive
    /// is forwarded once per look instead.
    Poll,
    /// The forward failed on its way (`outcome_unknown`).
    Failed(Answer),
    /// Another node leads the group now.
    Moved,
}

impl Cluster {
    /// The node's `max_queues`, which the metadata leader holds the
    /// cluster to.
    fn max_queues(&self) -> usize {
        usize::try_from(self.shared.config.max_queues).unwrap_or(usize::MAX)
    }

    /// Sends `ask` to `leader`: its answer and wait, or the answer of a
    /// forward that failed.
    pub(super) async fn forward_to(&self, leader: u64, ask: &Ask) -> Result<(Answer, u64), Answer> {
        match self.node.forward_to(leader, ask).await {
            Ok(reply) => answered(leader, &reply),
            Err(r) => Err(self.refused(r)),
        }
    }

    /// [`Node::forward_while_leading`], its answer the binary protocol's.
    pub(super) async fn forward_while_leading(
        &self,
        g: u32,
        leader: u64,
        ask: &Ask,
    ) -> Option<Result<(Answer, u64), Answer>> {
        Some(
            match self.node.forward_while_leading(g, leader, ask).await? {
                Ok(reply) => answered(leader, &reply),
                Err(r) => Err(self.refused(r)),
            },
        )
    }

    /// [`Node::forward_held_while_leading`], its answer the binary
    /// protocol's; a leader that does not know the ask is polled instead.
    pub(super) async fn forward_held_while_leading(&self, g: u32, leader: u64, ask: &Ask) -> Held {
        use fila_cluster::node::Held as Sent;
        match self.node.forward_held_while_leading(g, leader, ask).await {
            Sent::Busy => Held::Poll,
            Sent::Moved => Held::Moved,
            Sent::Failed(r) => Held::Failed(self.refused(r)),
            Sent::Done(reply) => match answered(leader, &reply) {
                Ok((answer, _)) if forward::unknown_ask(&answer) => Held::Poll,
                Ok((answer, _)) => Held::Done(answer),
                Err(lost) => Held::Failed(lost),
            },
        }
    }

    /// Runs `ask` on group `g`'s leader: here (`here`) when this node
    /// leads it, else forwarded ([`Node::on_leader`]).
    pub(super) async fn on_leader<F, Fut>(
        &self,
        g: u32,
        ask: Ask,
        here: F,
    ) -> Result<(Answer, u64), Answer>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<(Answer, u64), ReplicaError>>,
    {
        match self.node.on_leader(g, &ask, here).await {
            Ok(Led::Here(done)) => Ok(done),
            Ok(Led::There { leader, reply }) => answered(leader, &reply),
            Err(r) => Err(self.refused(r)),
        }
    }

    /// The partition `queue` lives in ([`Node::placement`]).
    pub(super) async fn placement(
        &self,
        queue: &str,
        placing: Placing,
    ) -> Result<Option<u32>, Answer> {
        self.node
            .placement(queue, placing, self.max_queues())
            .await
            .map_err(|r| self.refused(r))
    }

    /// The leader's side of a placement or a partition's leader asked by
    /// another node ([`Node::answer_own`]); `None` for another ask.
    pub(super) async fn answer_own(&self, ask: &Ask) -> Option<Vec<u8>> {
        Some(match self.node.answer_own(ask, self.max_queues()).await? {
            Ok(reply) => reply,
            Err((g, e)) => {
                forward::encode_answer(&self.refusal(g, &e), fila_proto::Opcode::Auth as u8, 0)
            }
        })
    }

    /// Keeps the routing table and the partitions' keys the map's
    /// ([`Node::follow_map`]); stops the server when the map has another
    /// number of partitions.
    pub(super) fn follow_map(&self) {
        if let Err(why) = self.node.follow_map() {
            fail(&self.shared, why);
        }
    }

    /// The answer of refusal `r`.
    pub(super) fn refused(&self, r: Refusal) -> Answer {
        match r {
            Refusal::Here { group, error } => self.refusal(group, &error),
            Refusal::Lost { leader, error } => forward::lost(leader, &error),
            Refusal::Answered(response) => Answer::Wire(response),
        }
    }

    /// The answer of `e` on group `g`: `not_leader` naming the group's
    /// leader, `outcome_unknown`, or `internal` — and then the Raft node
    /// failed (its storage): the server stops, saying why, as a single
    /// node does when its log fails.
    pub(super) fn refusal(&self, g: u32, e: &ReplicaError) -> Answer {
        let what = if g == META || g == MAP {
            "the cluster's metadata".to_owned()
        } else {
            format!("partition {g}")
        };
        match e {
            ReplicaError::NotLeader { leader } => {
                let at = leader
                    .and_then(|id| Some(format!("leader {id} at {}", self.member_of(id)?.client)));
                let message = match at {
                    Some(at) => format!("not_leader: this node does not lead {what}; {at}"),
                    None => format!("not_leader: this node does not lead {what}; the leader is not known yet (try another node)"),
                };
                error(ErrorCode::NOT_LEADER, message).into()
            }
            ReplicaError::Unknown { .. } => {
                error(ErrorCode::OUTCOME_UNKNOWN, format!("outcome_unknown: {e}")).into()
            }
            // Retriable, as a leader not known yet is: clients (and SQS
            // SDKs, answered 503) try again.
            ReplicaError::Unready(why) => error(
                ErrorCode::NOT_LEADER,
                format!("not_leader: {why}; try again in a moment"),
            )
            .into(),
            ReplicaError::Full { limit, max } => {
                Answer::failed(&fila_core::Error::ResourceExhausted { limit, max: *max })
            }
            ReplicaError::Refused(why) => error(
                ErrorCode::INVALID_ARGUMENT,
                format!("invalid_argument: {why}"),
            )
            .into(),
            _ => {
                fail(
                    &self.shared,
                    format!("the cluster node failed, nothing more can be acknowledged: {e}"),
                );
                error(ErrorCode::INTERNAL, format!("internal: {e}")).into()
            }
        }
    }
}
