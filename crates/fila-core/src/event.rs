//! Every state change of the engine as an explicit event, so that a
//! write-ahead log can record them without the engine being rewritten.
//!
//! A shard hands each event to its [`EventSink`], if one is installed, at the
//! moment the change is made and in the order the changes are made. Replaying
//! a shard's events in order from an empty shard reaches the same queues and
//! messages (the WAL that does so is future work; the events already carry
//! what it needs except payloads of non-put events, which it has from `Put`).

use bytes::Bytes;

use crate::types::DeadLetterReason;

/// One state change. Sequence numbers name messages within their queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// A queue was created.
    QueueCreated {
        /// The queue.
        queue: &'a str,
    },
    /// A queue's settings changed.
    QueueUpdated {
        /// The queue.
        queue: &'a str,
    },
    /// A queue and its messages were deleted.
    QueueDeleted {
        /// The queue.
        queue: &'a str,
    },
    /// Every message of the queue (or of its DLQ) was removed.
    Purged {
        /// The queue.
        queue: &'a str,
        /// The DLQ was purged.
        dlq: bool,
    },
    /// A message entered the queue.
    Put {
        /// The queue.
        queue: &'a str,
        /// Its new sequence number.
        seq: u64,
        /// Its payload.
        payload: &'a Bytes,
        /// When it becomes visible.
        visible_at_ms: u64,
        /// When it expires.
        expires_at_ms: u64,
    },
    /// A delayed message, or one whose lease ended, became visible.
    BecameVisible {
        /// The queue.
        queue: &'a str,
        /// In the DLQ.
        dlq: bool,
        /// The message.
        seq: u64,
    },
    /// A message was delivered (leased, or looked at with visibility 0).
    Delivered {
        /// The queue.
        queue: &'a str,
        /// From the DLQ.
        dlq: bool,
        /// The message.
        seq: u64,
        /// The lease's generation.
        generation: u64,
        /// Its next-visible time.
        visible_at_ms: u64,
    },
    /// A lease was extended or shortened.
    VisibilityChanged {
        /// The queue.
        queue: &'a str,
        /// In the DLQ.
        dlq: bool,
        /// The message.
        seq: u64,
        /// The new next-visible time.
        visible_at_ms: u64,
    },
    /// A consumer deleted a message.
    Deleted {
        /// The queue.
        queue: &'a str,
        /// From the DLQ.
        dlq: bool,
        /// The message.
        seq: u64,
    },
    /// A consumer deferred a message.
    Deferred {
        /// The queue.
        queue: &'a str,
        /// The message.
        seq: u64,
    },
    /// A message moved to the DLQ (or left for the dead-letter target).
    DeadLettered {
        /// The queue.
        queue: &'a str,
        /// The message.
        seq: u64,
        /// Why.
        reason: &'a DeadLetterReason,
    },
    /// A message expired and was dropped (dead-lettering is `DeadLettered`).
    Expired {
        /// The queue.
        queue: &'a str,
        /// In the DLQ.
        dlq: bool,
        /// The message.
        seq: u64,
    },
    /// A scheduled message was cancelled before it became visible.
    Cancelled {
        /// The queue.
        queue: &'a str,
        /// The message.
        seq: u64,
    },
    /// A dead letter moved back from the DLQ under a new sequence number.
    Redriven {
        /// The queue.
        queue: &'a str,
        /// Its sequence number in the DLQ.
        from_seq: u64,
        /// Its new sequence number in the queue.
        seq: u64,
    },
}

/// Receives a shard's events in order.
pub trait EventSink: Send {
    /// Called once per state change, as it is made.
    fn record(&mut self, event: &Event<'_>);
}
