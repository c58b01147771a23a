//! Every request and answer, with its encoding. See docs/protocol.md for
//! the byte layout of each body.

use bytes::{Bytes, BytesMut};

use crate::error::{ErrorCode, ProtoError};
use crate::frame::{
    begin_frame, begin_frame_in, check_header, end_frame, flags, FrameHeader, VERSION,
};
use crate::wire::{Reader, Writer};

/// A receipt, opaque to clients: 32 bytes.
pub type Receipt = [u8; RECEIPT_LEN];

/// Bytes in a receipt.
pub const RECEIPT_LEN: usize = 32;

/// A queue or its dead-letter sub-queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueRef {
    /// The queue's name.
    pub name: String,
    /// Its DLQ rather than the queue.
    pub dlq: bool,
}

/// When a put message becomes visible.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Availability {
    /// At once.
    #[default]
    Now,
    /// After a delay in milliseconds.
    DelayMs(u64),
    /// At a time, milliseconds since the Unix epoch.
    At(u64),
}

/// One message of a put.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PutEntry {
    /// The body, shared with the frame it came in.
    pub payload: Bytes,
    /// Key/value pairs.
    pub attributes: Vec<(String, String)>,
    /// The channel.
    pub channel: Option<String>,
    /// Delay or schedule.
    pub availability: Availability,
    /// Time to live in milliseconds.
    pub ttl_ms: Option<u64>,
    /// A deduplication id (1–128 bytes): a resend within the queue's
    /// window stores nothing and is answered as the first put was.
    pub dedup_id: Option<String>,
    /// A group key (1–128 bytes): the group's messages are delivered in
    /// order, one at a time.
    pub group: Option<String>,
    /// A priority level (1 ..= the queue's levels; `None`: 1).
    pub priority: Option<u8>,
}

/// A receive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receive {
    /// Where from.
    pub queue: QueueRef,
    /// 1–20.
    pub max_messages: u8,
    /// Milliseconds; `None` = the queue's.
    pub visibility_ms: Option<u64>,
    /// Milliseconds; `None` = the queue's receive_wait_default.
    pub wait_ms: Option<u64>,
    /// `name` or `prefix*`.
    pub channel: Option<String>,
    /// The fields the answer's messages carry ([`Fields::ALL`] unless the
    /// consumer asks for less).
    pub fields: Fields,
}

/// Which fields of a message a receive's answer carries. The payload and
/// the receipt always travel; each bit adds a group. A field left out
/// decodes as zero or empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fields(pub u8);

impl Fields {
    /// Payload and receipt only.
    pub const PAYLOAD_AND_RECEIPT: Fields = Fields(0);
    /// The message id and sequence number.
    pub const ID: Fields = Fields(1 << 0);
    /// Attributes and channel.
    pub const ATTRIBUTES: Fields = Fields(1 << 1);
    /// Inserted, expires and next-visible times.
    pub const TIMES: Fields = Fields(1 << 2);
    /// Delivery count, state and the dead-letter record.
    pub const DELIVERY: Fields = Fields(1 << 3);
    /// Every field of the first layouts (the default): every group but
    /// [`Fields::ATTEMPTS`].
    pub const ALL: Fields = Fields(0x0f);
    /// The message's failed attempts (asked for: never in a default
    /// answer).
    pub const ATTEMPTS: Fields = Fields(1 << 4);
    /// Every group there is.
    pub const KNOWN: Fields = Fields(0x1f);

    /// Whether every bit of `other` is set here.
    pub fn contains(self, other: Fields) -> bool {
        self.0 & other.0 == other.0
    }

    /// Both groups.
    pub fn with(self, other: Fields) -> Fields {
        Fields(self.0 | other.0)
    }
}

impl Default for Fields {
    fn default() -> Fields {
        Fields::ALL
    }
}

/// Every request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Greeting: the client's name and version, for logs, and the newest
    /// protocol version it speaks (absent: 1, a client written before
    /// versions were negotiated); the answer says the version the server
    /// will use.
    Hello {
        /// Free text.
        client: String,
        /// The newest protocol version the client speaks.
        max_version: Option<u8>,
    },
    /// Authenticate the connection.
    Auth {
        /// The token.
        token: String,
    },
    /// Server-wide stats.
    ServerStats,
    /// A cluster node's view of its cluster: members, leader, log indexes,
    /// how far each member has taken the log (docs/cluster.md).
    ClusterStatus,
    /// Change a cluster's membership or move its leadership (needs manage
    /// on every queue, a grant on `*`; sent to any node, done by the
    /// leader).
    ChangeCluster(ClusterChange),
    /// Re-read the server's tokens and TLS files (needs manage on every
    /// queue, a grant on `*`).
    Reload,
    /// Create a queue (idempotent with equal settings).
    CreateQueue {
        /// Name.
        name: String,
        /// Settings other than the defaults.
        settings: SettingsPatch,
    },
    /// A queue's settings.
    GetQueue {
        /// Name.
        name: String,
    },
    /// Change some settings.
    UpdateQueue {
        /// Name.
        name: String,
        /// The settings to change.
        settings: SettingsPatch,
    },
    /// Names by prefix, one page at a time.
    ListQueues {
        /// Prefix ("" for all).
        prefix: String,
        /// Names after this one only (the previous page's `next`; "" from
        /// the start).
        after: String,
        /// Names per page, 1–1000 (0: 1000).
        limit: u16,
    },
    /// Delete a queue.
    DeleteQueue {
        /// Name.
        name: String,
        /// A queue that does not exist is no error (for scripts that reset).
        if_exists: bool,
    },
    /// Purge a queue or its DLQ.
    Purge {
        /// Which.
        queue: QueueRef,
    },
    /// A queue's stats.
    QueueStats {
        /// Name.
        name: String,
    },
    /// Put 1–20 messages.
    Put {
        /// Queue name.
        queue: String,
        /// The messages.
        messages: Vec<PutEntry>,
    },
    /// Cancel a delayed or scheduled message.
    CancelScheduled {
        /// Queue name.
        queue: String,
        /// Its sequence number.
        seq: u64,
    },
    /// Receive.
    Receive(Receive),
    /// Move leases' next-visible times.
    UpdateVisibility {
        /// Queue or DLQ.
        queue: QueueRef,
        /// (receipt, timeout ms) pairs.
        entries: Vec<(Receipt, u64)>,
    },
    /// Update a leased message: its payload replaced when one is given,
    /// its lease renewed to end `timeout_ms` from now under a new receipt
    /// (the old one stale); 0 releases it (the Azure Queue API's Update
    /// Message; a new opcode, read in any version).
    UpdateMessage {
        /// Queue or DLQ.
        queue: QueueRef,
        /// Its receipt.
        receipt: Receipt,
        /// Milliseconds until it is visible again (0 ..= 12 h).
        timeout_ms: u64,
        /// Its new payload, if it changes.
        payload: Option<Bytes>,
    },
    /// Delete by receipt.
    Delete {
        /// Queue or DLQ.
        queue: QueueRef,
        /// The receipts.
        receipts: Vec<Receipt>,
    },
    /// Pause a queue's receiving, sending or both.
    PauseQueue {
        /// Queue name.
        name: String,
        /// The halves it names.
        halves: Halves,
    },
    /// Resume what a pause paused.
    ResumeQueue {
        /// Queue name.
        name: String,
        /// The halves it names.
        halves: Halves,
    },
    /// End leases as failed (a "nack"): each message is visible again
    /// after its queue's retry policy's delay (at once without one).
    Release {
        /// Queue or DLQ.
        queue: QueueRef,
        /// The receipts.
        receipts: Vec<Receipt>,
        /// The consumer's reason (≤ 256 bytes), kept in each message's
        /// attempt history.
        reason: String,
        /// The consumer's description (≤ 4 KiB).
        description: String,
    },
    /// Defer a leased message.
    Defer {
        /// Queue name.
        queue: String,
        /// Its receipt.
        receipt: Receipt,
    },
    /// Take deferred messages by sequence number.
    ReceiveDeferred {
        /// Queue name.
        queue: String,
        /// 1–20 sequence numbers.
        seqs: Vec<u64>,
        /// Milliseconds; `None` = the queue's.
        visibility_ms: Option<u64>,
    },
    /// Dead-letter a leased message.
    DeadLetter {
        /// Queue name.
        queue: String,
        /// Its receipt.
        receipt: Receipt,
        /// The consumer's reason.
        reason: String,
        /// The consumer's description.
        description: String,
    },
    /// Browse from a sequence number.
    Peek {
        /// Queue or DLQ.
        queue: QueueRef,
        /// First sequence number.
        from_seq: u64,
        /// 1–100.
        max_messages: u8,
        /// The groups of fields the answer carries ([`Fields::ALL`]: the
        /// plain answer).
        fields: Fields,
    },
    /// Move dead letters back.
    Redrive {
        /// Queue name.
        queue: String,
        /// At most this many (all when `None`).
        max_messages: Option<u64>,
        /// At most this many a second.
        rate_per_second: Option<u32>,
        /// Only the dead letters it takes (version 6; empty: every one).
        filter: MoveFilter,
    },
    /// Start moving the queue's visible messages out: to `to`, or each
    /// back to the queue it was dead-lettered from.
    StartMove {
        /// Queue name.
        queue: String,
        /// Where to (`None`: each message's source).
        to: Option<String>,
        /// At most this many (all there are when `None`).
        max_messages: Option<u64>,
        /// At most this many a second.
        rate_per_second: Option<u32>,
        /// Only the messages it takes (version 6; empty: every one).
        filter: MoveFilter,
    },
    /// What a redrive (from the DLQ) or a move would take, a bounded look
    /// at a time: nothing moves (version 6).
    PreviewMove {
        /// Queue name.
        queue: String,
        /// From its DLQ (a redrive's preview).
        dlq: bool,
        /// A move with no destination: only messages that record a queue
        /// they were dead-lettered from count.
        back_to_source: bool,
        /// The filter.
        filter: MoveFilter,
        /// The first sequence number to look at (a previous answer's
        /// `next`, else 0).
        from_seq: u64,
    },
    /// A queue's move tasks, oldest first.
    ListMoves {
        /// Queue name.
        queue: String,
    },
    /// Cancel a running move task.
    CancelMove {
        /// Queue name.
        queue: String,
        /// The task's number.
        id: u64,
    },
    /// Delete one message of the queue or its DLQ by sequence number,
    /// whatever its state (an operator's delete: a lease on it ends).
    DeleteSeq {
        /// Queue or DLQ.
        queue: QueueRef,
        /// Its sequence number.
        seq: u64,
    },
    /// Dead-letter one message of the queue by sequence number, whatever
    /// its state, with an operator's reason.
    DeadLetterSeq {
        /// Queue name.
        queue: String,
        /// Its sequence number.
        seq: u64,
        /// The operator's reason.
        reason: String,
        /// The operator's description.
        description: String,
    },
    /// The queue's channels with messages ready, a page at a time.
    Channels {
        /// Queue name.
        queue: String,
        /// Channels named after this one only ("" from the start, which
        /// also answers the default channel first).
        after: String,
        /// Channels per page, 1–100.
        limit: u16,
    },
}

/// A queue's halves a pause or a resume names, or those paused: on the
/// wire a `u8` of bits (1 receiving, 2 sending).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Halves {
    /// Receiving (receives and receive-deferreds).
    pub receive: bool,
    /// Sending (puts).
    pub send: bool,
}

impl Halves {
    /// Both.
    pub const BOTH: Halves = Halves {
        receive: true,
        send: true,
    };

    /// The `u8` of bits.
    pub fn bits(self) -> u8 {
        u8::from(self.receive) | u8::from(self.send) << 1
    }

    /// The halves of a `u8` of bits; `None` for an unknown bit.
    pub fn of_bits(b: u8) -> Option<Halves> {
        (b & !3 == 0).then_some(Halves {
            receive: b & 1 != 0,
            send: b & 2 != 0,
        })
    }
}

/// A queue's stats, in the order of docs/protocol.md.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Visible messages.
    pub visible: u64,
    /// Leased messages.
    pub in_flight: u64,
    /// Delayed or scheduled messages.
    pub delayed: u64,
    /// Deferred messages.
    pub deferred: u64,
    /// Messages in the DLQ.
    pub dead_lettered: u64,
    /// Payload bytes.
    pub bytes: u64,
    /// Age of the oldest message, ms.
    pub oldest_age_ms: u64,
    /// Puts since start.
    pub puts: u64,
    /// Deliveries since start.
    pub deliveries: u64,
    /// Deletes since start.
    pub deletes: u64,
    /// Expiries since start.
    pub expiries: u64,
    /// Dead-letterings since start.
    pub dead_letterings: u64,
    /// Redriven messages since start.
    pub redriven: u64,
    /// When the queue was created, ms since the epoch (0: not known).
    pub created_at_ms: u64,
    /// When its settings last changed, ms since the epoch (0: not known).
    pub modified_at_ms: u64,
    /// Deduplication ids it remembers now.
    pub dedup_entries: u64,
    /// Message groups with messages.
    pub groups: u64,
    /// Message groups with a leased message.
    pub groups_in_flight: u64,
    /// Leases that ended without a delete and were delayed by the retry
    /// policy (version 3; 0 from an older server).
    pub retries: u64,
}

/// An error answer, or one failed entry of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError {
    /// The stable code.
    pub code: ErrorCode,
    /// A human-readable line.
    pub message: String,
}

/// One entry of a batch answer.
pub type Entry<T> = Result<T, WireError>;

/// A batch answer's values, or its first failed entry: where it stands in
/// the batch and why it failed.
pub fn all_ok<T>(entries: Vec<Entry<T>>) -> Result<Vec<T>, (usize, WireError)> {
    let mut out = Vec::with_capacity(entries.len());
    for (i, e) in entries.into_iter().enumerate() {
        out.push(e.map_err(|err| (i, err))?);
    }
    Ok(out)
}

/// Every answer. Its opcode is its request's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    /// To hello.
    Hello {
        /// Server name and version.
        server: String,
        /// The protocol version it speaks.
        protocol_version: u8,
        /// Its frame limit.
        max_frame_len: u32,
    },
    /// Done (auth, delete queue, purge, cancel, defer, dead-letter).
    Ok,
    /// To server stats: named counters.
    ServerStats(Vec<(String, u64)>),
    /// To cluster status.
    ClusterStatus(Box<ClusterStatus>),
    /// To reload: what is in place now.
    Reloaded {
        /// Which reload (0: none since the start).
        generation: u64,
        /// Tokens configured.
        tokens: u32,
        /// Whether TLS is on.
        tls: bool,
    },
    /// To create: whether it was created (false: it existed, same settings).
    Created(bool),
    /// To get and update: the settings in force.
    Queue(Box<Settings>),
    /// To list: one page of names, sorted, and the cursor of the next
    /// page when more remain.
    Queues {
        /// Names.
        names: Vec<String>,
        /// Pass as `after` for the next page; absent on the last page.
        next: Option<String>,
    },
    /// To queue stats.
    Stats(Box<Stats>),
    /// To put: per entry.
    Put(Vec<Entry<PutAck>>),
    /// To receive and peek.
    Messages(Vec<Message>),
    /// To a receive that asked for fewer fields: the fields the messages
    /// carry (the server answers a receive of every field with
    /// `Messages`), and the messages, with the other fields zero or empty.
    Selected(Fields, Vec<Message>),
    /// To update visibility: per entry, the new next-visible time.
    Visibility(Vec<Entry<u64>>),
    /// To delete: per entry.
    Deleted(Vec<Entry<()>>),
    /// To update a message: the renewed lease's receipt (`None` when it
    /// was released) and when the message is visible next (ms).
    Updated {
        /// The new receipt.
        receipt: Option<Receipt>,
        /// Its next visible time.
        visible_at_ms: u64,
    },
    /// Each released message's next visible time (ms).
    Released(Vec<Entry<u64>>),
    /// What of the queue is paused now (a pause's or a resume's answer).
    Paused(Halves),
    /// To receive deferred: per entry.
    Deferred(Vec<Entry<Message>>),
    /// To redrive.
    Redrive {
        /// Moved now.
        moved: u64,
        /// Left to move at the rate.
        scheduled: u64,
    },
    /// To start or cancel a move task: the task.
    Move(Box<MoveInfo>),
    /// To preview a move.
    Preview {
        /// Messages the move would take in the part looked at.
        matched: u64,
        /// Where to go on when the look stopped before the end.
        next: Option<u64>,
        /// The first of them (at most 20, fewer when they would not fit
        /// the answer), with every field and their attempts.
        messages: Vec<Message>,
    },
    /// To list move tasks.
    Moves(Vec<MoveInfo>),
    /// To channels: one page, and the cursor of the next page when more
    /// remain.
    Channels {
        /// The channels.
        channels: Vec<ChannelInfo>,
        /// Pass as `after` for the next page; absent on the last page.
        next: Option<String>,
    },
    /// The request failed.
    Error(WireError),
}

// ----- encoding ------------------------------------------------------------

pub(super) fn put_queue_ref(w: &mut Writer<'_>, q: &QueueRef) {
    w.str(&q.name);
    w.bool(q.dlq);
}

pub(super) fn get_queue_ref(r: &mut Reader) -> Result<QueueRef, ProtoError> {
    Ok(QueueRef {
        name: r.str()?,
        dlq: r.bool()?,
    })
}

pub(super) fn put_pairs(w: &mut Writer<'_>, pairs: &[(String, String)]) {
    w.list(pairs, |w, (k, v)| {
        w.str(k);
        w.str(v);
    });
}

pub(super) fn get_pairs(r: &mut Reader) -> Result<Vec<(String, String)>, ProtoError> {
    r.list(4, |r| Ok((r.str()?, r.str()?)))
}

pub(super) fn put_entry(w: &mut Writer<'_>, e: &PutEntry) {
    w.bytes(&e.payload);
    put_pairs(w, &e.attributes);
    w.opt(&e.channel, |w, c| w.str(c));
    match e.availability {
        Availability::Now => w.u8(0),
        Availability::DelayMs(d) => {
            w.u8(1);
            w.u64(d);
        }
        Availability::At(t) => {
            w.u8(2);
            w.u64(t);
        }
    }
    w.opt(&e.ttl_ms, |w, v| w.u64(*v));
}

/// Flags of a put entry's extension (`put_more`): which fields follow.
mod more {
    pub const DEDUP_ID: u8 = 1;
    pub const GROUP: u8 = 2;
    pub const PRIORITY: u8 = 4;
    pub const KNOWN: u8 = DEDUP_ID | GROUP | PRIORITY;
}

/// Whether any entry needs the put's extension (a put without one is
/// written in the layout before it existed).
pub(super) fn needs_more(entries: &[PutEntry]) -> bool {
    entries
        .iter()
        .any(|e| e.dedup_id.is_some() || e.group.is_some() || e.priority.is_some())
}

/// A put entry's extension: a `u8` of flags, then each flagged field.
pub(super) fn put_more(w: &mut Writer<'_>, e: &PutEntry) {
    let mut flags = 0;
    if e.dedup_id.is_some() {
        flags |= more::DEDUP_ID;
    }
    if e.group.is_some() {
        flags |= more::GROUP;
    }
    if e.priority.is_some() {
        flags |= more::PRIORITY;
    }
    w.u8(flags);
    if let Some(id) = &e.dedup_id {
        w.str(id);
    }
    if let Some(group) = &e.group {
        w.str(group);
    }
    if let Some(p) = e.priority {
        w.u8(p);
    }
}

/// Reads the put's extension, when present, into its entries.
pub(super) fn get_more(r: &mut Reader, entries: &mut [PutEntry]) -> Result<(), ProtoError> {
    if r.remaining() == 0 {
        return Ok(());
    }
    let mores = r.list(1, |r| {
        let flags = r.u8()?;
        if flags & !more::KNOWN != 0 {
            return Err(ProtoError::Malformed("unknown put entry fields"));
        }
        Ok((
            r.flagged(flags & more::DEDUP_ID != 0, Reader::str)?,
            r.flagged(flags & more::GROUP != 0, Reader::str)?,
            r.flagged(flags & more::PRIORITY != 0, Reader::u8)?,
        ))
    })?;
    if mores.len() != entries.len() {
        return Err(ProtoError::Malformed(
            "a put's extension has one entry per message",
        ));
    }
    for (e, (dedup_id, group, priority)) in entries.iter_mut().zip(mores) {
        e.dedup_id = dedup_id;
        e.group = group;
        e.priority = priority;
    }
    Ok(())
}

pub(super) fn get_entry(r: &mut Reader) -> Result<PutEntry, ProtoError> {
    Ok(PutEntry {
        payload: r.bytes()?,
        attributes: get_pairs(r)?,
        channel: r.opt(Reader::str)?,
        availability: match r.u8()? {
            0 => Availability::Now,
            1 => Availability::DelayMs(r.u64()?),
            2 => Availability::At(r.u64()?),
            _ => return Err(ProtoError::Malformed("availability is 0, 1 or 2")),
        },
        ttl_ms: r.opt(Reader::u64)?,
        dedup_id: None,
        group: None,
        priority: None,
    })
}

pub(super) fn put_error(w: &mut Writer<'_>, e: &WireError) {
    w.u16(e.code.0);
    w.str(&e.message);
}

pub(super) fn get_error(r: &mut Reader) -> Result<WireError, ProtoError> {
    Ok(WireError {
        code: ErrorCode(r.u16()?),
        message: r.str()?,
    })
}

pub(super) fn put_entries<T>(
    w: &mut Writer<'_>,
    entries: &[Entry<T>],
    mut f: impl FnMut(&mut Writer<'_>, &T),
) {
    w.list(entries, |w, e| match e {
        Ok(v) => {
            w.u8(0);
            f(w, v);
        }
        Err(err) => {
            w.u8(1);
            put_error(w, err);
        }
    });
}

pub(super) fn get_entries<T>(
    r: &mut Reader,
    mut f: impl FnMut(&mut Reader) -> Result<T, ProtoError>,
) -> Result<Vec<Entry<T>>, ProtoError> {
    r.list(1, |r| match r.u8()? {
        0 => Ok(Ok(f(r)?)),
        1 => Ok(Err(get_error(r)?)),
        _ => Err(ProtoError::Malformed("an entry tag is 0 or 1")),
    })
}

/// The `u64` counters of version 1's `stats`.
const STATS_V1: usize = 13;
/// How many `u64` a version-2 stats answer carries at most.
const STATS_V2: usize = 18;

mod borrowed;
mod cluster;
mod messages;
mod opcode;
mod queue;
mod request;
mod response;

pub use borrowed::*;
pub use cluster::{
    ClusterChange, ClusterMemberStatus, ClusterStatus, PartitionStatus, ReplicaStatus,
};
pub use messages::{
    encode_messages, encode_messages_in, Attempt, DeadLetter, DeadLetterRef, Message, MessageRef,
};
use messages::{get_fields, get_message, put_fields_in, put_message_in};
pub use opcode::Opcode;
use queue::{
    get_filter, get_filter_tail, get_move, get_patch, get_settings, put_filter, put_move,
    put_patch, put_settings_in,
};
pub use queue::{ChannelInfo, MoveFilter, MoveInfo, PutAck, Settings, SettingsPatch};
