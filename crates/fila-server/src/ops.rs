//! The operations, one row each: what a request needs (the permission its
//! queue needs, the room its answer may take) and where it runs, on a
//! single node and on a cluster node. Every part of the server that
//! treats operations differently reads it here: authorization, the room
//! held before a frame is read and while a request is away, routing to a
//! shard's owner, the log's backlog, and on a cluster whether a request is
//! a read (answered through the read index) or a write, whether a loop
//! may run it itself on the partition's leader, and which receives waiting
//! on the leader it may give messages.
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

/// How a request runs on a cluster node (docs/cluster.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnCluster {
    /// Answered by the node it reached (hello, auth, reload, cluster
    /// status).
    Node,
    /// A change of the members, made by each group's leader.
    Members,
    /// Gathered from every partition's leader (a list of queues, the
    /// server's stats).
    EveryPartition,
    /// On its partition's leader once a quorum confirms the leadership
    /// (the read index): it changes nothing.
    Read,
    /// Executed on its partition's leader, answered once its entry
    /// commits.
    Write,
    /// A write a loop may run itself when this node leads the partition,
    /// without a hop to the cluster node's thread (`server/cluster/fast.rs`).
    LoopWrite,
}

/// Which receives waiting at a cluster node's endpoint on a partition's
/// leader a request may have given messages, so that they look again at
/// once (`server/cluster/run.rs`, `wake_receives`; a lease or a delay that
/// ends wakes them at the engine's timer instead).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wakes {
    /// None: it makes no message visible (a read, a receive, a delete,
    /// what runs on no partition).
    Nothing,
    /// As many of its queue's as it put messages.
    PerMessage,
    /// Every one of its queue's (a queue and its dead-letter queue listen
    /// as one): a visibility change.
    Queue,
    /// Every one of the partition's: it may move messages between queues
    /// (a dead letter, a redrive, a move) or change a queue.
    Partition,
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
    /// How it runs on a cluster node.
    pub cluster: OnCluster,
    /// Which receives waiting on a cluster's leader it may give messages.
    pub wakes: Wakes,
}

const fn row(
    opcode: Opcode,
    grant: Option<Permission>,
    place: Place,
    answer: AnswerRoom,
    adds_payloads: bool,
    cluster: OnCluster,
    wakes: Wakes,
) -> Op {
    Op {
        opcode,
        grant,
        place,
        answer,
        adds_payloads,
        cluster,
        wakes,
    }
}

use AnswerRoom::{Messages, Small};
use OnCluster::{EveryPartition, LoopWrite, Members, Node, Read, Write};
use Permission::{Manage, Receive, Send};
use Place::{Cluster, Connection, EveryLoop, Shard, TargetThenShard};
use Wakes::{Nothing, Partition, PerMessage, Queue};

/// Every operation.
pub(crate) const OPS: [Op; 34] = [
    row(Opcode::Hello, None, Connection, Small, false, Node, Nothing),
    row(Opcode::Auth, None, Connection, Small, false, Node, Nothing),
    row(
        Opcode::ServerStats,
        None,
        Connection,
        Small,
        false,
        EveryPartition,
        Nothing,
    ),
    row(
        Opcode::Reload,
        None,
        Connection,
        Small,
        false,
        Node,
        Nothing,
    ),
    row(
        Opcode::ClusterStatus,
        None,
        Connection,
        Small,
        false,
        Node,
        Nothing,
    ),
    row(
        Opcode::ChangeCluster,
        None,
        Cluster,
        Small,
        false,
        Members,
        Nothing,
    ),
    row(
        Opcode::CreateQueue,
        Some(Manage),
        TargetThenShard,
        Small,
        false,
        Write,
        Partition,
    ),
    row(
        Opcode::GetQueue,
        Some(Manage),
        Shard,
        Small,
        false,
        Read,
        Nothing,
    ),
    row(
        Opcode::UpdateQueue,
        Some(Manage),
        TargetThenShard,
        Small,
        false,
        Write,
        Partition,
    ),
    row(
        Opcode::ListQueues,
        None,
        EveryLoop,
        Small,
        false,
        EveryPartition,
        Nothing,
    ),
    row(
        Opcode::DeleteQueue,
        Some(Manage),
        Shard,
        Small,
        false,
        Write,
        Partition,
    ),
    row(
        Opcode::Purge,
        Some(Manage),
        Shard,
        Small,
        false,
        Write,
        Partition,
    ),
    row(
        Opcode::QueueStats,
        Some(Manage),
        Shard,
        Small,
        false,
        Read,
        Nothing,
    ),
    row(
        Opcode::Put,
        Some(Send),
        Shard,
        Small,
        true,
        LoopWrite,
        PerMessage,
    ),
    row(
        Opcode::CancelScheduled,
        Some(Send),
        Shard,
        Small,
        false,
        Write,
        Partition,
    ),
    row(
        Opcode::Receive,
        Some(Receive),
        Shard,
        Messages,
        false,
        LoopWrite,
        Nothing,
    ),
    row(
        Opcode::UpdateVisibility,
        Some(Receive),
        Shard,
        Small,
        false,
        Write,
        Queue,
    ),
    // Released (a timeout of 0), its message may go to a waiting receive.
    row(
        Opcode::UpdateMessage,
        Some(Receive),
        Shard,
        Small,
        false,
        Write,
        Queue,
    ),
    row(
        Opcode::Delete,
        Some(Receive),
        Shard,
        Small,
        false,
        LoopWrite,
        Nothing,
    ),
    row(
        Opcode::PauseQueue,
        Some(Manage),
        Shard,
        Small,
        false,
        Write,
        Nothing,
    ),
    // A resume may give waiting receives the queue's messages.
    row(
        Opcode::ResumeQueue,
        Some(Manage),
        Shard,
        Small,
        false,
        Write,
        Queue,
    ),
    row(
        Opcode::Release,
        Some(Receive),
        Shard,
        Small,
        false,
        Write,
        Queue,
    ),
    row(
        Opcode::Defer,
        Some(Receive),
        Shard,
        Small,
        false,
        Write,
        Partition,
    ),
    row(
        Opcode::ReceiveDeferred,
        Some(Receive),
        Shard,
        Messages,
        false,
        Write,
        Partition,
    ),
    row(
        Opcode::DeadLetter,
        Some(Receive),
        Shard,
        Small,
        false,
        Write,
        Partition,
    ),
    row(
        Opcode::Peek,
        Some(Receive),
        Shard,
        Messages,
        false,
        Read,
        Nothing,
    ),
    row(
        Opcode::Redrive,
        Some(Manage),
        Shard,
        Small,
        true,
        Write,
        Partition,
    ),
    row(
        Opcode::StartMove,
        Some(Manage),
        Shard,
        Small,
        true,
        Write,
        Partition,
    ),
    row(
        Opcode::ListMoves,
        Some(Manage),
        Shard,
        Small,
        false,
        Read,
        Nothing,
    ),
    row(
        Opcode::CancelMove,
        Some(Manage),
        Shard,
        Small,
        false,
        Write,
        Partition,
    ),
    row(
        Opcode::DeleteSeq,
        Some(Manage),
        Shard,
        Small,
        false,
        Write,
        Partition,
    ),
    row(
        Opcode::DeadLetterSeq,
        Some(Manage),
        Shard,
        Small,
        false,
        Write,
        Partition,
    ),
    row(
        Opcode::Channels,
        Some(Manage),
        Shard,
        Small,
        false,
        Read,
        Nothing,
    ),
    // It shows messages, as a peek does.
    row(
        Opcode::PreviewMove,
        Some(Receive),
        Shard,
        Messages,
        false,
        Read,
        Nothing,
    ),
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
    fn on_a_cluster_a_loop_runs_puts_receives_and_deletes_and_reads_name_a_queue() {
        let on_loop: Vec<Opcode> = OPS
            .iter()
            .filter(|o| o.cluster == LoopWrite)
            .map(|o| o.opcode)
            .collect();
        assert_eq!(on_loop, [Opcode::Put, Opcode::Receive, Opcode::Delete]);
        for o in &OPS {
            let on_a_partition = [Read, Write, LoopWrite].contains(&o.cluster);
            assert_eq!(on_a_partition, o.grant.is_some(), "{:?}", o.opcode);
            if o.cluster == Read {
                assert!(!o.adds_payloads, "{:?}", o.opcode);
            }
        }
    }

    /// On a cluster, what may make messages visible wakes the receives
    /// waiting on the partition's leader; what cannot, none.
    #[test]
    fn only_writes_that_may_make_messages_visible_wake_receives() {
        for o in &OPS {
            let on_a_partition = [Write, LoopWrite].contains(&o.cluster);
            if !on_a_partition {
                assert_eq!(o.wakes, Nothing, "{:?}", o.opcode);
            }
        }
        let waking = |w| {
            OPS.iter()
                .filter(|o| o.wakes == w)
                .map(|o| o.opcode)
                .collect::<Vec<_>>()
        };
        assert_eq!(waking(PerMessage), [Opcode::Put]);
        assert_eq!(
            waking(Queue),
            [
                Opcode::UpdateVisibility,
                Opcode::UpdateMessage,
                Opcode::ResumeQueue,
                Opcode::Release
            ]
        );
        for quiet in [Opcode::Receive, Opcode::Delete, Opcode::Peek] {
            assert!(waking(Nothing).contains(&quiet), "{quiet:?}");
        }
        for moving in [
            Opcode::Redrive,
            Opcode::StartMove,
            Opcode::DeadLetter,
            Opcode::Defer,
        ] {
            assert!(waking(Partition).contains(&moving), "{moving:?}");
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
            [
                Opcode::Receive,
                Opcode::ReceiveDeferred,
                Opcode::Peek,
                Opcode::PreviewMove
            ]
        );
        assert!(
            carries_messages(0xEE),
            "an unknown opcode is taken as large"
        );
    }
}
