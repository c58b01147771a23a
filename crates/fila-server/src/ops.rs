//! The operations, one row each: what a request needs (the permission its
//! queue needs, the room its answer may take) and where it runs. Every
//! part of the server that treats operations differently reads it here:
//! authorization, the room held before a frame is read and while a
//! request is away, routing to a shard's owner, the log's backlog.
//!
//! Whether an answer waits for the log is not a property of the operation:
//! the engine says whether the call logged a change
//! ([`fila_core::Owner::changes`]), and the answer waits exactly when it
//! did.

use fila_proto::{Opcode, Request};

use crate::auth::Permission;

/// Where a request runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// On its connection's loop: hello, auth, server stats.
    Connection,
    /// On the loop that owns its queue's shard.
    Shard,
    /// A create or update: on the loop that owns the dead-letter target it
    /// names first (does the target exist?), then on its queue's.
    TargetThenShard,
    /// On every loop in turn (a list of queues).
    EveryLoop,
    /// On a cluster node's Raft node (a change of its members; checked on
    /// its connection's loop first).
    Cluster,
}

/// How much room an answer may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AnswerRoom {
    /// It carries messages: at least one of the largest
    /// ([`crate::ANSWER_ROOM_MIN`]).
    Messages,
    /// A small answer ([`crate::SMALL_ANSWER_ROOM`]).
    Small,
}

/// One operation's row.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Op {
    pub opcode: Opcode,
    /// The permission its queue needs (none: it names no queue).
    pub grant: Option<Permission>,
    pub place: Place,
    pub answer: AnswerRoom,
    /// It adds payloads to the log (what makes a backlog): a put, a
    /// redrive (each moved message is logged whole).
    pub adds_payloads: bool,
}

const fn row(
    opcode: Opcode,
    grant: Option<Permission>,
    place: Place,
    answer: AnswerRoom,
    adds_payloads: bool,
) -> Op {
    Op {
        opcode,
        grant,
        place,
        answer,
        adds_payloads,
    }
}

use AnswerRoom::{Messages, Small};
use Permission::{Manage, Receive, Send};
use Place::{Cluster, Connection, EveryLoop, Shard, TargetThenShard};

/// Every operation.
pub(crate) const OPS: [Op; 29] = [
    row(Opcode::Hello, None, Connection, Small, false),
    row(Opcode::Auth, None, Connection, Small, false),
    row(Opcode::ServerStats, None, Connection, Small, false),
    row(Opcode::Reload, None, Connection, Small, false),
    row(Opcode::ClusterStatus, None, Connection, Small, false),
    row(Opcode::ChangeCluster, None, Cluster, Small, false),
    row(
        Opcode::CreateQueue,
        Some(Manage),
        TargetThenShard,
        Small,
        false,
    ),
    row(Opcode::GetQueue, Some(Manage), Shard, Small, false),
    row(
        Opcode::UpdateQueue,
        Some(Manage),
        TargetThenShard,
        Small,
        false,
    ),
    row(Opcode::ListQueues, None, EveryLoop, Small, false),
    row(Opcode::DeleteQueue, Some(Manage), Shard, Small, false),
    row(Opcode::Purge, Some(Manage), Shard, Small, false),
    row(Opcode::QueueStats, Some(Manage), Shard, Small, false),
    row(Opcode::Put, Some(Send), Shard, Small, true),
    row(Opcode::CancelScheduled, Some(Send), Shard, Small, false),
    row(Opcode::Receive, Some(Receive), Shard, Messages, false),
    row(Opcode::UpdateVisibility, Some(Receive), Shard, Small, false),
    row(Opcode::Delete, Some(Receive), Shard, Small, false),
    row(Opcode::Defer, Some(Receive), Shard, Small, false),
    row(
        Opcode::ReceiveDeferred,
        Some(Receive),
        Shard,
        Messages,
        false,
    ),
    row(Opcode::DeadLetter, Some(Receive), Shard, Small, false),
    row(Opcode::Peek, Some(Receive), Shard, Messages, false),
    row(Opcode::Redrive, Some(Manage), Shard, Small, true),
    row(Opcode::StartMove, Some(Manage), Shard, Small, true),
    row(Opcode::ListMoves, Some(Manage), Shard, Small, false),
    row(Opcode::CancelMove, Some(Manage), Shard, Small, false),
    row(Opcode::DeleteSeq, Some(Manage), Shard, Small, false),
    row(Opcode::DeadLetterSeq, Some(Manage), Shard, Small, false),
    row(Opcode::Channels, Some(Manage), Shard, Small, false),
];

/// The row of `opcode` (a byte off the wire: `None` when it is none).
pub(crate) fn op(opcode: u8) -> Option<&'static Op> {
    OPS.iter().find(|o| o.opcode as u8 == opcode)
}

/// The row of a decoded request.
pub(crate) fn of(req: &Request) -> &'static Op {
    op(req.opcode() as u8).expect("every opcode has a row")
}

/// Whether an answer to `opcode` may be large (it carries messages); an
/// unknown opcode is taken as one.
pub(crate) fn carries_messages(opcode: u8) -> bool {
    op(opcode).is_none_or(|o| o.answer == Messages)
}

/// The queue a request names (none for hello, auth, server stats, list).
pub(crate) fn queue_of(req: &Request) -> Option<&str> {
    req.queue()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_opcode_has_exactly_one_row() {
        for opcode in Opcode::ALL {
            let rows = OPS.iter().filter(|o| o.opcode == opcode).count();
            assert_eq!(rows, 1, "{opcode:?}");
        }
        assert_eq!(OPS.len(), Opcode::ALL.len());
        assert!(op(0xEE).is_none());
    }

    #[test]
    fn a_row_names_a_grant_exactly_when_its_requests_name_a_queue() {
        for o in &OPS {
            let names_queue = ![Connection, EveryLoop, Cluster].contains(&o.place);
            assert_eq!(o.grant.is_some(), names_queue, "{:?}", o.opcode);
        }
    }

    #[test]
    fn answers_with_messages_are_the_receives_and_peeks() {
        let big: Vec<Opcode> = OPS
            .iter()
            .filter(|o| o.answer == Messages)
            .map(|o| o.opcode)
            .collect();
        assert_eq!(
            big,
            [Opcode::Receive, Opcode::ReceiveDeferred, Opcode::Peek]
        );
        assert!(
            carries_messages(0xEE),
            "an unknown opcode is taken as large"
        );
    }
}
