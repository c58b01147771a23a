//! Operation codes: one byte in every frame's head naming what it asks
//! (an answer carries its request's).

use crate::error::ProtoError;

/// Operation codes. An answer carries its request's opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// Greeting and version check.
    Hello = 0x01,
    /// Present a token.
    Auth = 0x02,
    /// Server-wide stats.
    ServerStats = 0x03,
    /// Re-read the tokens and TLS files (manage on every queue).
    Reload = 0x04,
    /// A cluster node's view of its cluster (docs/cluster.md).
    ClusterStatus = 0x05,
    /// Change a cluster's membership or leadership (docs/cluster.md).
    ChangeCluster = 0x06,
    /// Create a queue.
    CreateQueue = 0x10,
    /// A queue's settings.
    GetQueue = 0x11,
    /// Change a queue's settings.
    UpdateQueue = 0x12,
    /// Queue names by prefix.
    ListQueues = 0x13,
    /// Delete a queue.
    DeleteQueue = 0x14,
    /// Purge a queue or its DLQ.
    Purge = 0x15,
    /// A queue's stats.
    QueueStats = 0x16,
    /// Pause a queue's receiving, sending or both.
    PauseQueue = 0x17,
    /// Resume what a pause paused.
    ResumeQueue = 0x18,
    /// Put 1–20 messages.
    Put = 0x20,
    /// Cancel a scheduled message.
    CancelScheduled = 0x21,
    /// Receive (long poll).
    Receive = 0x22,
    /// Update visibility of 1–20 leases.
    UpdateVisibility = 0x23,
    /// Delete 1–20 messages by receipt.
    Delete = 0x24,
    /// Defer a leased message.
    Defer = 0x25,
    /// Receive deferred messages by sequence number.
    ReceiveDeferred = 0x26,
    /// Dead-letter a leased message.
    DeadLetter = 0x27,
    /// Browse messages by sequence number.
    Peek = 0x28,
    /// Move dead letters back.
    Redrive = 0x29,
    /// Start moving a queue's messages out (a move task).
    StartMove = 0x2a,
    /// A queue's move tasks.
    ListMoves = 0x2b,
    /// Cancel a move task.
    CancelMove = 0x2c,
    /// Delete one message by sequence number, whatever its state.
    DeleteSeq = 0x2d,
    /// Dead-letter one message by sequence number, whatever its state.
    DeadLetterSeq = 0x2e,
    /// A page of a queue's channels with their backlog.
    Channels = 0x2f,
    /// End 1–20 leases as failed (a "nack"): each message waits its
    /// queue's retry policy.
    Release = 0x30,
    /// What a redrive or a move would take (a bounded look; version 6).
    PreviewMove = 0x31,
    /// Update a leased message's payload and lease, under a new receipt
    /// (read in any version).
    UpdateMessage = 0x32,
}

impl Opcode {
    /// Every opcode.
    pub const ALL: [Opcode; 34] = [
        Opcode::Hello,
        Opcode::Auth,
        Opcode::ServerStats,
        Opcode::Reload,
        Opcode::ClusterStatus,
        Opcode::ChangeCluster,
        Opcode::CreateQueue,
        Opcode::GetQueue,
        Opcode::UpdateQueue,
        Opcode::ListQueues,
        Opcode::DeleteQueue,
        Opcode::Purge,
        Opcode::QueueStats,
        Opcode::PauseQueue,
        Opcode::ResumeQueue,
        Opcode::Put,
        Opcode::CancelScheduled,
        Opcode::Receive,
        Opcode::UpdateVisibility,
        Opcode::Delete,
        Opcode::Defer,
        Opcode::ReceiveDeferred,
        Opcode::DeadLetter,
        Opcode::Peek,
        Opcode::Redrive,
        Opcode::StartMove,
        Opcode::ListMoves,
        Opcode::CancelMove,
        Opcode::DeleteSeq,
        Opcode::DeadLetterSeq,
        Opcode::Channels,
        Opcode::Release,
        Opcode::PreviewMove,
        Opcode::UpdateMessage,
    ];

    /// The opcode with this byte.
    pub fn from_u8(b: u8) -> Result<Opcode, ProtoError> {
        Opcode::ALL
            .iter()
            .copied()
            .find(|op| *op as u8 == b)
            .ok_or(ProtoError::UnknownOpcode(b))
    }
}
