//! The engine's public values: queue settings, messages, receipts, options
//! and answers.

use std::sync::Arc;

use bytes::Bytes;

use crate::error::{check_range, Error};
use crate::limits::*;
use crate::payload::Payload;
use crate::receipt::Receipt;

pub use crate::move_task::*;
pub use crate::settings::*;

/// Checks a queue name: 1–80 of `[A-Za-z0-9_.-]` (a dot for the SQS API's
/// `.fifo` names).
pub fn validate_queue_name(field: &'static str, name: &str) -> Result<(), Error> {
    if name.is_empty() || name.len() > QUEUE_NAME_LEN_MAX {
        return Err(Error::invalid(
            field,
            format!(
                "must be 1..={QUEUE_NAME_LEN_MAX} characters (got {})",
                name.len()
            ),
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return Err(Error::invalid(
            field,
            format!("may hold only [A-Za-z0-9_.-] (got {bad:?})"),
        ));
    }
    Ok(())
}

/// Checks a channel name: 1–128 printable ASCII characters, no `*`.
pub fn validate_channel(field: &'static str, channel: &str) -> Result<(), Error> {
    if channel.is_empty() || channel.len() > CHANNEL_LEN_MAX {
        return Err(Error::invalid(
            field,
            format!(
                "must be 1..={CHANNEL_LEN_MAX} characters (got {})",
                channel.len()
            ),
        ));
    }
    if let Some(bad) = channel.chars().find(|c| !c.is_ascii_graphic() || *c == '*') {
        return Err(Error::invalid(
            field,
            format!("may hold printable ASCII other than '*' (got {bad:?})"),
        ));
    }
    Ok(())
}

/// Checks a group key: 1–128 bytes, no control characters.
pub fn validate_group(group: &str) -> Result<(), Error> {
    if group.is_empty() || group.len() > GROUP_LEN_MAX {
        return Err(Error::invalid(
            "group",
            format!("must be 1..={GROUP_LEN_MAX} bytes (got {})", group.len()),
        ));
    }
    if let Some(bad) = group.chars().find(|c| c.is_control()) {
        return Err(Error::invalid(
            "group",
            format!("may not hold control characters (got {bad:?})"),
        ));
    }
    Ok(())
}

/// A queue or its dead-letter sub-queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Address<'a> {
    /// The queue's name.
    pub queue: &'a str,
    /// The DLQ rather than the queue itself.
    pub dlq: bool,
}

impl<'a> Address<'a> {
    /// The queue itself.
    pub fn queue(name: &'a str) -> Address<'a> {
        Address {
            queue: name,
            dlq: false,
        }
    }

    /// The queue's dead-letter sub-queue.
    pub fn dlq(name: &'a str) -> Address<'a> {
        Address {
            queue: name,
            dlq: true,
        }
    }
}

/// A message's attributes: up to 16 small key/value pairs, shared, not copied,
/// between the queue and every delivery.
pub type Attributes = Arc<[(Box<str>, Box<str>)]>;

/// When a put message becomes visible.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Availability {
    /// At once.
    #[default]
    Now,
    /// After this many milliseconds (0 ..= 15 min).
    DelayMs(u64),
    /// At this time, ms since the epoch (no later than the retention allows).
    At(u64),
}

/// One entry of a put.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewMessage {
    /// The body, shared with the caller's buffer.
    pub payload: Bytes,
    /// Up to 16 key/value pairs, 8 KiB in all.
    pub attributes: Vec<(String, String)>,
    /// The channel, for fair receive and capacity.
    pub channel: Option<String>,
    /// Delay or schedule.
    pub availability: Availability,
    /// Time to live, shorter than the queue's retention.
    pub ttl_ms: Option<u64>,
    /// A deduplication id (1–128 bytes): a second put with it within the
    /// queue's `dedup_window_ms` stores nothing and is answered with the
    /// first put's id and sequence number.
    pub dedup_id: Option<String>,
    /// A group key (1–128 bytes): the group's messages (in this channel)
    /// are delivered in sequence order, one leased at a time.
    pub group: Option<String>,
    /// Its priority level (1 ..= the queue's `priority_levels`; `None`:
    /// 1, the lowest).
    pub priority: Option<u8>,
}

impl NewMessage {
    /// A message with this payload and nothing else.
    pub fn new(payload: impl Into<Bytes>) -> NewMessage {
        NewMessage {
            payload: payload.into(),
            ..NewMessage::default()
        }
    }
}

/// A message id, unique on the server (and across a cluster): the engine's
/// id space (0 on a single node, a partition's number + 1 on a cluster),
/// the queue's id and the message's first sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId(pub u128);

impl std::fmt::Display for MessageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// What a put answers per entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutReceipt {
    /// The message's id.
    pub id: MessageId,
    /// Its sequence number in the queue.
    pub seq: u64,
}

/// A message's state as seen from outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// Ready to be received.
    Visible,
    /// Leased to a consumer.
    InFlight,
    /// Waiting for its delay or scheduled time.
    Delayed,
    /// Deferred: taken only by receive-deferred.
    Deferred,
    /// In the DLQ, ready to be received from there.
    DeadLettered,
}

/// Why a message was dead-lettered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeadLetterReason {
    /// It would have been delivered for the (max_deliveries + 1)-th time.
    MaxDeliveries,
    /// Its TTL or the retention ran out and dead_letter_on_expiration is set.
    Expired,
    /// Its consumer dead-lettered it.
    Consumer {
        /// The consumer's reason.
        reason: String,
        /// The consumer's description.
        description: String,
    },
}

impl DeadLetterReason {
    /// `max_deliveries`, `expired` or `consumer`.
    pub fn as_str(&self) -> &'static str {
        match self {
            DeadLetterReason::MaxDeliveries => "max_deliveries",
            DeadLetterReason::Expired => "expired",
            DeadLetterReason::Consumer { .. } => "consumer",
        }
    }
}

/// How a delivery's lease ended without a delete (a failed attempt).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptEnd {
    /// Its lease ran out.
    Expired,
    /// Its consumer released it as failed.
    Released,
    /// Its consumer dead-lettered it.
    DeadLettered,
}

impl AttemptEnd {
    /// `expired`, `released` or `dead_lettered`.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptEnd::Expired => "expired",
            AttemptEnd::Released => "released",
            AttemptEnd::DeadLettered => "dead_lettered",
        }
    }
}

/// One failed attempt at a message: a delivery whose lease ended without
/// a delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// When its lease ended (ms since the epoch).
    pub at_ms: u64,
    /// Which delivery it was (the message's delivery count then).
    pub delivery: u32,
    /// How its lease ended.
    pub end: AttemptEnd,
    /// The consumer's reason (empty for a lease that ran out).
    pub reason: String,
    /// The consumer's description.
    pub description: String,
}

impl Attempt {
    /// What it counts in a message's history (and in the stored bytes).
    pub fn bytes(&self) -> usize {
        ATTEMPT_OVERHEAD_BYTES + self.reason.len() + self.description.len()
    }
}

/// A message's failed attempts, oldest first: at most its queue's
/// `attempt_history` of them and [`ATTEMPT_HISTORY_BYTES_MAX`] bytes.
pub type Attempts = Arc<Vec<Attempt>>;

/// The bytes `attempts` count in the stored bytes: each attempt's and the
/// history's own.
pub fn attempts_bytes(attempts: Option<&Attempts>) -> u64 {
    attempts.map_or(0, |a| {
        (ATTEMPT_HISTORY_OVERHEAD_BYTES + a.iter().map(Attempt::bytes).sum::<usize>()) as u64
    })
}

/// Appends `attempt` to `history`, then drops the oldest while it keeps
/// more than `keep` or more than [`ATTEMPT_HISTORY_BYTES_MAX`] bytes (one
/// rule for the engine and for whatever rebuilds it from its log).
pub fn remember_attempt(history: &mut Vec<Attempt>, attempt: Attempt, keep: u32) {
    // Held as long as the message is: no spare room (at most 32 of them).
    history.reserve_exact(1);
    history.push(attempt);
    let mut bytes: usize = history.iter().map(Attempt::bytes).sum();
    let mut drop = 0;
    while history.len() - drop > keep as usize || bytes > ATTEMPT_HISTORY_BYTES_MAX {
        bytes -= history[drop].bytes();
        drop += 1;
        if drop == history.len() {
            break;
        }
    }
    history.drain(..drop);
}

/// What a dead-lettered message records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// The queue it was dead-lettered from.
    pub source_queue: Arc<str>,
    /// When.
    pub at_ms: u64,
    /// Why.
    pub reason: DeadLetterReason,
    /// Deliveries it had in the source queue.
    pub delivery_count: u32,
}

/// A message as a receive or a peek shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Unique on the server.
    pub id: MessageId,
    /// Strictly increasing per queue.
    pub seq: u64,
    /// The body.
    pub payload: Payload,
    /// Key/value pairs (empty when none).
    pub attributes: Option<Attributes>,
    /// The channel, if any.
    pub channel: Option<Arc<str>>,
    /// When the message entered the queue (ms since the epoch).
    pub inserted_at_ms: u64,
    /// When it expires.
    pub expires_at_ms: u64,
    /// When it becomes (or became) visible next.
    pub next_visible_at_ms: u64,
    /// Deliveries so far, this one included.
    pub delivery_count: u32,
    /// When it was first delivered, to the second after its put (`None`
    /// before; also after a restart, which does not keep it).
    pub first_received_at_ms: Option<u64>,
    /// Its state.
    pub state: State,
    /// For a delivered message, the lease's receipt.
    pub receipt: Option<Receipt>,
    /// For a dead letter, where from and why.
    pub dead_letter: Option<Arc<DeadLetter>>,
    /// Its group key, when it was put with one: a group's messages are
    /// delivered in sequence order, one at a time.
    pub group: Option<Arc<str>>,
    /// Its priority level (1 ..= 10).
    pub priority: u8,
    /// Its failed attempts, oldest first (`None`: none kept).
    pub attempts: Option<Attempts>,
}

/// A channel filter of a receive: exact, or a prefix when it ends in `*`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChannelFilter {
    /// Only this channel.
    Exact(String),
    /// Channels starting with this prefix.
    Prefix(String),
}

impl ChannelFilter {
    /// Parses `name` or `prefix*`.
    pub fn parse(filter: &str) -> Result<ChannelFilter, Error> {
        match filter.strip_suffix('*') {
            Some(prefix) => {
                if !prefix.is_empty() {
                    validate_channel("channel_filter", prefix)?;
                }
                Ok(ChannelFilter::Prefix(prefix.to_owned()))
            }
            None => {
                validate_channel("channel_filter", filter)?;
                Ok(ChannelFilter::Exact(filter.to_owned()))
            }
        }
    }

    /// Whether a message on `channel` passes (no channel passes only `*`).
    pub fn matches(&self, channel: Option<&str>) -> bool {
        match (self, channel) {
            (ChannelFilter::Exact(want), Some(c)) => want == c,
            (ChannelFilter::Prefix(p), Some(c)) => c.starts_with(p.as_str()),
            (ChannelFilter::Prefix(p), None) => p.is_empty(),
            (ChannelFilter::Exact(_), None) => false,
        }
    }
}

/// Which of a queue's halves a pause or a resume names, or which are
/// paused (see [`crate::Engine::pause`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pause {
    /// Receiving (and receiving deferred messages).
    pub receive: bool,
    /// Putting.
    pub send: bool,
}

impl Pause {
    /// Both halves.
    pub const BOTH: Pause = Pause {
        receive: true,
        send: true,
    };

    /// Whether it names neither half.
    pub fn is_none(self) -> bool {
        !self.receive && !self.send
    }
}

/// Options of a receive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiveOptions {
    /// 1 ..= 20.
    pub max_messages: u32,
    /// Overrides the queue's visibility timeout (0 ..= 12 h).
    pub visibility_ms: Option<u64>,
    /// Overrides the queue's receive_wait_default (0 ..= 30 s).
    pub wait_ms: Option<u64>,
    /// Only messages of matching channels.
    pub channel: Option<ChannelFilter>,
    /// The answer may hold at most this many bytes, counted by
    /// [`answer_bytes`]: messages that would pass it stay for a later
    /// receive. A parked receive holds this room (at most what its
    /// `max_messages` of this queue's largest messages could need) until it
    /// is answered; see [`WaitId::reserved_bytes`](crate::WaitId::reserved_bytes).
    /// `None`: no limit.
    pub max_answer_bytes: Option<u64>,
}

impl Default for ReceiveOptions {
    fn default() -> Self {
        ReceiveOptions {
            max_messages: 1,
            visibility_ms: None,
            wait_ms: None,
            channel: None,
            max_answer_bytes: None,
        }
    }
}

/// Bytes one message may take in an answer beyond its payload, attribute,
/// channel and dead-letter strings: ids, times, counts, the receipt, and
/// every length prefix (rounded up).
pub const MESSAGE_ANSWER_OVERHEAD: u64 = 128;

/// An upper bound of the bytes a message takes in an answer frame (the
/// protocol's encoding, generously): what receive budgets count.
pub fn answer_bytes(
    payload: usize,
    attributes: Option<&Attributes>,
    channel: Option<&str>,
    dead_letter: Option<&DeadLetter>,
) -> u64 {
    let attributes = attributes.map_or(0, |a| {
        a.iter()
            .map(|(k, v)| 4 + k.len() as u64 + v.len() as u64)
            .sum::<u64>()
    });
    let dead_letter = dead_letter.map_or(0, |d| {
        let (reason, description) = match &d.reason {
            DeadLetterReason::Consumer {
                reason,
                description,
            } => (reason.len(), description.len()),
            _ => (0, 0),
        };
        32 + (d.source_queue.len() + reason + description) as u64
    });
    MESSAGE_ANSWER_OVERHEAD
        + payload as u64
        + attributes
        + channel.map_or(0, |c| c.len() as u64)
        + dead_letter
}

/// The most [`answer_bytes`] a message of a queue whose max_message_bytes
/// is `max_message_bytes` can count (attributes, channel and dead-letter
/// strings at their limits).
pub fn answer_bytes_max(max_message_bytes: u32) -> u64 {
    MESSAGE_ANSWER_OVERHEAD
        + u64::from(max_message_bytes)
        + (ATTRIBUTES_BYTES_MAX + 4 * ATTRIBUTES_MAX) as u64
        + CHANNEL_LEN_MAX as u64
        + 32
        + (QUEUE_NAME_LEN_MAX + DEAD_LETTER_REASON_LEN_MAX + DEAD_LETTER_DESCRIPTION_LEN_MAX) as u64
}

impl ReceiveOptions {
    /// Up to `n` messages, no waiting.
    pub fn now(n: u32) -> ReceiveOptions {
        ReceiveOptions {
            max_messages: n,
            wait_ms: Some(0),
            ..ReceiveOptions::default()
        }
    }

    /// Checks every option against its range.
    pub fn validate(&self) -> Result<(), Error> {
        check_range(
            "max_messages",
            self.max_messages.into(),
            1,
            RECEIVE_MAX.into(),
            "",
        )?;
        if let Some(v) = self.visibility_ms {
            check_range("visibility_ms", v, 0, VISIBILITY_MS_MAX, " ms")?;
        }
        if let Some(w) = self.wait_ms {
            check_range("wait_ms", w, 0, WAIT_MS_MAX, " ms")?;
        }
        Ok(())
    }
}

/// One entry of an update-visibility.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VisibilityChange {
    /// The lease.
    pub receipt: Receipt,
    /// New timeout from now (0 ..= 12 h); 0 releases the message.
    pub timeout_ms: u64,
}

/// What an update of a leased message answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageUpdate {
    /// The receipt of the renewed lease (the old one is stale); `None`
    /// when the update released the message (a timeout of 0).
    pub receipt: Option<Receipt>,
    /// When the message is visible next (ms).
    pub visible_at_ms: u64,
}

/// A channel of a queue and its backlog (the channels request).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelBacklog {
    /// Its name (`None`: the default channel).
    pub name: Option<String>,
    /// Its visible messages.
    pub visible: u64,
    /// Its messages in every state.
    pub held: u64,
}

/// A queue's counts and counters (SPEC §1 "stats").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Ready to be received.
    pub visible: u64,
    /// Leased.
    pub in_flight: u64,
    /// Delayed or scheduled.
    pub delayed: u64,
    /// Deferred.
    pub deferred: u64,
    /// In the DLQ (any lease state there).
    pub dead_lettered: u64,
    /// Payload bytes held, DLQ included.
    pub bytes: u64,
    /// Age in ms of the oldest message held (0 when empty), DLQ excluded.
    pub oldest_age_ms: u64,
    /// Messages put since start.
    pub puts: u64,
    /// Deliveries (receives and receive-deferreds) since start.
    pub deliveries: u64,
    /// Deletes since start.
    pub deletes: u64,
    /// Expiries since start.
    pub expiries: u64,
    /// Dead-letterings since start.
    pub dead_letterings: u64,
    /// Messages redriven from the DLQ since start.
    pub redriven: u64,
    /// Leases ended without a delete that the retry policy delayed since
    /// start (counted as delayed while they wait).
    pub retries: u64,
    /// What of the queue is paused.
    pub paused: Pause,
    /// When it was created and last changed.
    pub times: QueueTimes,
    /// Deduplication ids (and content keys) it remembers now.
    pub dedup_entries: u64,
    /// Message groups with messages (visible, delayed or leased).
    pub groups: u64,
    /// Message groups with a leased message.
    pub groups_in_flight: u64,
}

/// One entry of a receive-deferred answer, or of a delete / update.
pub type EntryResult<T> = Result<T, Error>;

impl NewMessage {
    /// Checks the message against the SPEC's limits and the queue's settings
    /// at time `now` (what a put does before anything else).
    pub fn validate(&self, settings: &QueueSettings, now: u64) -> Result<(), Error> {
        let m = self;
        if m.payload.len() > settings.max_message_bytes as usize {
            return Err(Error::MessageTooLarge {
                size: m.payload.len(),
                max: settings.max_message_bytes,
            });
        }
        if m.attributes.len() > ATTRIBUTES_MAX {
            return Err(Error::invalid(
                "attributes",
                format!("at most {ATTRIBUTES_MAX} (got {})", m.attributes.len()),
            ));
        }
        let mut total = 0;
        for (i, (k, v)) in m.attributes.iter().enumerate() {
            if k.is_empty() || k.len() > ATTRIBUTE_KEY_LEN_MAX {
                return Err(Error::invalid(
                    "attributes",
                    format!(
                        "keys must be 1..={ATTRIBUTE_KEY_LEN_MAX} bytes (key {i} has {})",
                        k.len()
                    ),
                ));
            }
            if m.attributes[..i].iter().any(|(other, _)| other == k) {
                return Err(Error::invalid(
                    "attributes",
                    format!("key {k:?} appears twice"),
                ));
            }
            total += k.len() + v.len();
        }
        if total > ATTRIBUTES_BYTES_MAX {
            return Err(Error::invalid(
                "attributes",
                format!(
                    "keys and values must total at most {ATTRIBUTES_BYTES_MAX} bytes (got {total})"
                ),
            ));
        }
        if let Some(c) = &m.channel {
            validate_channel("channel", c)?;
        }
        if let Some(p) = m.priority {
            if p == 0 || p > settings.priority_levels {
                return Err(Error::invalid(
                    "priority",
                    format!(
                        "must be 1..={} (the queue's priority_levels; got {p})",
                        settings.priority_levels
                    ),
                ));
            }
        }
        if let Some(g) = &m.group {
            validate_group(g)?;
        } else if settings.ordered {
            return Err(Error::invalid(
                "group",
                "required: the queue is ordered (every put carries a group key)",
            ));
        }
        if let Some(id) = &m.dedup_id {
            if id.is_empty() || id.len() > DEDUP_ID_LEN_MAX {
                return Err(Error::invalid(
                    "dedup_id",
                    format!("must be 1..={DEDUP_ID_LEN_MAX} bytes (got {})", id.len()),
                ));
            }
        }
        if let Some(ttl) = m.ttl_ms {
            if ttl == 0 || ttl >= settings.retention_ms {
                return Err(Error::invalid(
                    "ttl_ms",
                    format!(
                        "must be 1..{} ms, shorter than the retention (got {ttl})",
                        settings.retention_ms
                    ),
                ));
            }
        }
        let lifetime = m.ttl_ms.unwrap_or(settings.retention_ms);
        match m.availability {
            Availability::Now => {}
            Availability::DelayMs(d) => {
                check_range("delay_ms", d, 0, DELAY_MS_MAX, " ms")?;
                if d >= lifetime {
                    return Err(Error::invalid(
                        "delay_ms",
                        format!("must be shorter than the message's lifetime of {lifetime} ms"),
                    ));
                }
            }
            Availability::At(at) => {
                if at >= now.saturating_add(lifetime) {
                    return Err(Error::invalid(
                        "scheduled_at_ms",
                        format!(
                            "must be before the message expires at {} (got {at})",
                            now + lifetime
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}
