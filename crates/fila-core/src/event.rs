//! Every durable state change of the engine as an explicit event, and the
//! images a shard's state is saved as and restored from.
//!
//! A shard hands each event to its [`EventSink`], if one is installed, at the
//! moment the change is made and in the order the changes are made. The
//! events say what a write-ahead log needs to rebuild the queues and their
//! messages, and a replica needs to keep leases apart: a delivery says
//! when its lease ends, and a change of that time (extended, shortened,
//! ended by the consumer) is an event of its own. A lease running out is
//! not an event (it is time, as is a message becoming visible when its
//! delay ends: its visible time is in the event that stored it). A single
//! node's restart does not restore leases (a leased message is visible
//! again); a cluster's new leader does (docs/cluster.md).
//!
//! Queues are named by their id, which is unique for the engine's life and
//! restored with it, so an event about a deleted queue can never touch a
//! queue of the same name created later. Messages are named by queue id,
//! sub-queue (the queue or its DLQ) and sequence number.
//!
//! Replaying a shard's events over [`QueueImage`]s (see `fila-store`) gives
//! the images [`crate::Engine::export`] would give, and
//! [`crate::Engine::restore`] turns them back into a working engine.

use std::sync::Arc;

use crate::payload::Payload;

use crate::types::{
    Attempt, Attributes, DeadLetter, MessageId, MoveTask, QueueSettings, QueueTimes,
};

/// Where a message is: queue id, sub-queue, sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Spot {
    /// The queue's id.
    pub queue: u32,
    /// In the queue's DLQ.
    pub dlq: bool,
    /// The message's sequence number.
    pub seq: u64,
}

/// A stored message as an event shows it (borrowed from the shard).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageView<'a> {
    /// Where it now is.
    pub at: Spot,
    /// Its id when it is not the one its queue and sequence number make
    /// (it moved between queues).
    pub id: Option<MessageId>,
    /// The payload.
    pub payload: &'a [u8],
    /// The attributes.
    pub attributes: Option<&'a Attributes>,
    /// The channel.
    pub channel: Option<&'a str>,
    /// When it entered its queue.
    pub inserted_at_ms: u64,
    /// When it is (or was) visible.
    pub visible_at_ms: u64,
    /// When it expires.
    pub expires_at_ms: u64,
    /// Deliveries so far.
    pub delivery_count: u32,
    /// Why it is a dead letter, when it is one.
    pub dead_letter: Option<&'a DeadLetter>,
    /// Its group key, when it was put with one.
    pub group: Option<&'a str>,
    /// Its priority level (1 ..= 10).
    pub priority: u8,
    /// Its failed attempts, oldest first (empty: none kept).
    pub attempts: &'a [Attempt],
}

/// One durable state change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// A queue was created, or its settings changed (they are whole here).
    QueueSet {
        /// The queue's id.
        queue: u32,
        /// Its name.
        name: &'a str,
        /// Its settings.
        settings: &'a QueueSettings,
        /// When it was created and last changed.
        times: QueueTimes,
    },
    /// A queue and its messages were deleted.
    QueueDeleted {
        /// The queue's id.
        queue: u32,
    },
    /// Every message of the queue (or of its DLQ) was removed.
    Purged {
        /// The queue's id.
        queue: u32,
        /// The DLQ was purged.
        dlq: bool,
    },
    /// A message was stored: put, or moved (`from`: dead-lettered into the
    /// DLQ, forwarded from another queue, redriven back). A move is this
    /// one event, so it is never half done.
    Stored {
        /// The message as it now is.
        message: MessageView<'a>,
        /// Where it was, for a move.
        from: Option<Spot>,
        /// A put with a deduplication id (or a content key): the queue
        /// remembers the key for this message until then (its expiry is
        /// time, not an event). In the put's own event, so no log keeps
        /// one without the other.
        dedup: Option<DedupMark>,
    },
    /// A message is gone for good: deleted, expired, cancelled.
    Removed {
        /// Where it was.
        at: Spot,
    },
    /// A message was deferred (`true`) or taken back from deferral by
    /// receive-deferred (`false`).
    Deferred {
        /// The message.
        at: Spot,
        /// Whether it is deferred now.
        deferred: bool,
    },
    /// A message was delivered; its delivery count is now `count` and its
    /// lease ends at `until` (the time of the delivery for a quick look,
    /// which leases nothing).
    Delivered {
        /// The message.
        at: Spot,
        /// Its delivery count.
        count: u32,
        /// When its lease ends (ms).
        until: u64,
    },
    /// A leased message's lease now ends at `until`: extended or shortened
    /// by a visibility change; or ended (`until` 0) by a visibility change
    /// of zero, an abandoned answer or a release as failed — then the
    /// message is visible at once, unless an [`Event::Retry`] follows. A
    /// lease that ended by a record says 0, so that a restore knows a
    /// lease whose time is past ran out with no record (the engine
    /// stopped first) and gives it its retry policy's delay from its end,
    /// as the engine would have.
    LeaseSet {
        /// The message.
        at: Spot,
        /// When its lease ends (ms).
        until: u64,
    },
    /// A lease ended without a delete (it expired, or was released as
    /// failed) and its queue's retry policy keeps the message invisible
    /// until `visible_at`: its lease is over.
    Retry {
        /// The message.
        at: Spot,
        /// When it is visible again (ms).
        visible_at: u64,
    },
    /// A delivery's lease ended without a delete and the message keeps the
    /// attempt in its history (its queue's `attempt_history`): appended,
    /// the oldest dropped past the queue's number or the history's bytes
    /// ([`crate::remember_attempt`]).
    Attempt {
        /// The message.
        at: Spot,
        /// The attempt.
        attempt: &'a Attempt,
    },
    /// A queue's move tasks changed (one began, moved a batch, ended):
    /// they are whole here.
    MovesSet {
        /// The queue's id.
        queue: u32,
        /// Its tasks, oldest first.
        tasks: &'a [MoveTask],
    },
}

impl Event<'_> {
    /// Whether it is a delivery: a receive's new delivery count, a lease's
    /// new end, or a receive-deferred taking a message back from deferral. A delivery is
    /// logged, but the answer that made it does not wait for the log (a
    /// restart may lose the deliveries of the last moments,
    /// docs/durability.md); every other change is what an answer
    /// acknowledges.
    pub fn is_delivery(&self) -> bool {
        matches!(
            self,
            Event::Delivered { .. }
                | Event::LeaseSet { .. }
                | Event::Retry { .. }
                | Event::Deferred {
                    deferred: false,
                    ..
                }
        )
    }
}

/// Receives a shard's events in order.
pub trait EventSink: Send {
    /// Called once per state change, as it is made.
    fn record(&mut self, event: &Event<'_>);
    /// Called after every operation (and every run of timers) that may
    /// have recorded events, before its answer leaves: a sink that buffers
    /// hands what it recorded on here.
    fn publish(&mut self) {}
}

/// A message as saved: everything a restart needs (not its lease).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageImage {
    /// In the DLQ.
    pub dlq: bool,
    /// Its sequence number.
    pub seq: u64,
    /// Its id when not the one its queue and sequence number make.
    pub id: Option<MessageId>,
    /// The payload.
    pub payload: Payload,
    /// The attributes.
    pub attributes: Option<Attributes>,
    /// The channel.
    pub channel: Option<Arc<str>>,
    /// When it entered its queue.
    pub inserted_at_ms: u64,
    /// When it becomes visible (a past time: visible now).
    pub visible_at_ms: u64,
    /// When it expires.
    pub expires_at_ms: u64,
    /// Deliveries so far.
    pub delivery_count: u32,
    /// Deferred: only receive-deferred takes it.
    pub deferred: bool,
    /// Why it is a dead letter, when it is one.
    pub dead_letter: Option<Arc<DeadLetter>>,
    /// Its group key, when it was put with one.
    pub group: Option<Arc<str>>,
    /// Its priority level (1 ..= 10; 1 in an image written before
    /// priorities).
    pub priority: u8,
    /// When its last lease ends, as its events said (0: none since it was
    /// stored, or ended by the consumer). [`crate::Engine::restore`]
    /// ignores it (a restored message is not leased); a cluster's new
    /// leader keeps the message out of sight until then
    /// (docs/cluster.md).
    pub lease_until_ms: u64,
    /// Its failed attempts, oldest first (empty: none kept).
    pub attempts: Vec<Attempt>,
}

/// A deduplication key a put remembers, and until when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DedupMark {
    /// The key (`fila_core::dedup_key`, `fila_core::content_key`).
    pub key: u128,
    /// When it is forgotten.
    pub expires_at_ms: u64,
}

/// A remembered deduplication key as saved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DedupImage {
    /// The key.
    pub key: u128,
    /// The sequence number of the put that stored it.
    pub seq: u64,
    /// When it is forgotten.
    pub expires_at_ms: u64,
}

/// A part of the state taken a piece at a time (a snapshot the engine
/// keeps serving through): a queue with its settings as they were when the
/// piece was taken, or one of its messages. The parts of different pieces
/// are of different moments; the records logged since the snapshot began,
/// replayed over them, make them one state again (every record is
/// idempotent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImagePart {
    /// A queue (before its messages).
    Queue {
        /// Its id.
        id: u32,
        /// Its name.
        name: String,
        /// Its settings.
        settings: QueueSettings,
        /// When it was created and last changed.
        times: QueueTimes,
        /// The sequence number its next message gets.
        next_seq: u64,
        /// Its move tasks, oldest first.
        moves: Vec<MoveTask>,
    },
    /// Some of the deduplication keys queue `queue` remembers (after the
    /// queue, before its messages; a queue with many comes in several).
    Dedup {
        /// The queue's id.
        queue: u32,
        /// The keys, in the order remembered.
        entries: Vec<DedupImage>,
    },
    /// A message of queue `queue`.
    Message {
        /// The queue's id.
        queue: u32,
        /// The message.
        message: MessageImage,
    },
}

/// Where a state taken a piece at a time stands: the shard, and in it the
/// queue (by name) and the sub-queue and sequence number to go on from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportCursor {
    /// The shard being taken.
    pub shard: usize,
    /// The queue to go on with (`None`: the shard's first).
    pub queue: Option<String>,
    /// In it: the DLQ.
    pub dlq: bool,
    /// In it: the first sequence number not taken yet.
    pub seq: u64,
    /// Every shard was taken.
    pub done: bool,
}

/// The whole engine as saved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineImage {
    /// The id the next queue created gets: ids are never reused, not even
    /// those of queues deleted before the save.
    pub next_queue_id: u32,
    /// Every queue.
    pub queues: Vec<QueueImage>,
}

/// A queue as saved, with its messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueImage {
    /// Its id.
    pub id: u32,
    /// Its name.
    pub name: String,
    /// Its settings.
    pub settings: QueueSettings,
    /// When it was created and last changed.
    pub times: QueueTimes,
    /// The sequence number its next message gets.
    pub next_seq: u64,
    /// Its move tasks, oldest first (a running one resumes).
    pub moves: Vec<MoveTask>,
    /// The deduplication keys it remembers, in the order remembered.
    pub dedup: Vec<DedupImage>,
    /// Its messages and its DLQ's, in any order.
    pub messages: Vec<MessageImage>,
}
