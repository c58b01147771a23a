//! The engine's public values: queue settings, messages, receipts, options
//! and answers.

use std::sync::Arc;

use bytes::Bytes;

use crate::error::{check_range, Error};
use crate::limits::*;
use crate::payload::Payload;
use crate::receipt::Receipt;

/// A queue's settings (SPEC §1). Times are milliseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSettings {
    /// How long a received message stays invisible (0 ..= 12 h).
    pub visibility_timeout_ms: u64,
    /// Deliveries before a message is dead-lettered (1 ..= 1000, 0 = unlimited).
    pub max_deliveries: u32,
    /// A message older than this expires (1 min ..= 14 days).
    pub retention_ms: u64,
    /// Payload limit, checked on put (1 B ..= 1 MiB).
    pub max_message_bytes: u32,
    /// Long-poll wait when a receive names none (0 ..= 30 s).
    pub receive_wait_default_ms: u64,
    /// Expired messages go to the DLQ instead of vanishing.
    pub dead_letter_on_expiration: bool,
    /// Another queue that receives this queue's dead letters (else the
    /// built-in DLQ).
    pub dead_letter_target: Option<String>,
    /// Messages the queue may hold in all states, its DLQ included.
    pub max_messages: u64,
    /// Payload bytes the queue may hold, its DLQ included.
    pub max_bytes: u64,
    /// Share (percent) of max_messages and max_bytes one channel may hold.
    pub channel_capacity_pct: u8,
    /// How long a message put without a delay of its own waits before it
    /// is visible (0 ..= 15 min).
    pub delay_ms: u64,
    /// Which queues may use this one as their dead-letter target, as the
    /// SQS API's RedriveAllowPolicy (JSON text, kept as given; the SQS API
    /// checks it). `None`: any queue.
    pub redrive_allow: Option<String>,
    /// Labels (key, value), sorted by key; not part of what makes two
    /// settings differ.
    pub tags: Vec<(String, String)>,
}

impl Default for QueueSettings {
    fn default() -> Self {
        QueueSettings {
            visibility_timeout_ms: 30_000,
            max_deliveries: 5,
            retention_ms: 7 * 86_400_000,
            max_message_bytes: 256 << 10,
            receive_wait_default_ms: 30_000,
            dead_letter_on_expiration: false,
            dead_letter_target: None,
            max_messages: 10_000_000,
            max_bytes: 1 << 30,
            channel_capacity_pct: 100,
            delay_ms: 0,
            redrive_allow: None,
            tags: Vec::new(),
        }
    }
}

impl QueueSettings {
    /// Checks every field against its range.
    pub fn validate(&self) -> Result<(), Error> {
        check_range(
            "visibility_timeout_ms",
            self.visibility_timeout_ms,
            0,
            VISIBILITY_MS_MAX,
            " ms",
        )?;
        if self.max_deliveries > MAX_DELIVERIES_MAX {
            return Err(Error::invalid(
                "max_deliveries",
                format!(
                    "must be 1..={MAX_DELIVERIES_MAX} or 0 for unlimited (got {})",
                    self.max_deliveries
                ),
            ));
        }
        check_range(
            "retention_ms",
            self.retention_ms,
            RETENTION_MS_MIN,
            RETENTION_MS_MAX,
            " ms",
        )?;
        check_range(
            "max_message_bytes",
            self.max_message_bytes.into(),
            1,
            MESSAGE_BYTES_MAX.into(),
            " bytes",
        )?;
        check_range(
            "receive_wait_default_ms",
            self.receive_wait_default_ms,
            0,
            WAIT_MS_MAX,
            " ms",
        )?;
        if let Some(target) = &self.dead_letter_target {
            validate_queue_name("dead_letter_target", target)?;
        }
        check_range("max_messages", self.max_messages, 1, MAX_MESSAGES_MAX, "")?;
        check_range(
            "max_bytes",
            self.max_bytes,
            MAX_BYTES_MIN,
            MAX_BYTES_MAX,
            " bytes",
        )?;
        check_range(
            "channel_capacity_pct",
            self.channel_capacity_pct.into(),
            1,
            100,
            " %",
        )?;
        check_range("delay_ms", self.delay_ms, 0, DELAY_MS_MAX, " ms")?;
        if let Some(p) = &self.redrive_allow {
            if p.len() > REDRIVE_ALLOW_LEN_MAX {
                return Err(Error::invalid(
                    "redrive_allow",
                    format!(
                        "must be at most {REDRIVE_ALLOW_LEN_MAX} bytes (got {})",
                        p.len()
                    ),
                ));
            }
        }
        if self.tags.len() > TAGS_MAX {
            return Err(Error::invalid(
                "tags",
                format!(
                    "a queue has at most {TAGS_MAX} tags (got {})",
                    self.tags.len()
                ),
            ));
        }
        for (k, v) in &self.tags {
            if k.is_empty() || k.len() > TAG_KEY_LEN_MAX {
                return Err(Error::invalid(
                    "tags",
                    format!("a tag key is 1..={TAG_KEY_LEN_MAX} bytes (got {})", k.len()),
                ));
            }
            if v.len() > TAG_VALUE_LEN_MAX {
                return Err(Error::invalid(
                    "tags",
                    format!(
                        "a tag value is at most {TAG_VALUE_LEN_MAX} bytes (got {})",
                        v.len()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The first field in which `self` and `other` differ.
    pub(crate) fn first_difference(&self, other: &QueueSettings) -> Option<&'static str> {
        let fields: [(&'static str, bool); 12] = [
            (
                "visibility_timeout_ms",
                self.visibility_timeout_ms != other.visibility_timeout_ms,
            ),
            (
                "max_deliveries",
                self.max_deliveries != other.max_deliveries,
            ),
            ("retention_ms", self.retention_ms != other.retention_ms),
            (
                "max_message_bytes",
                self.max_message_bytes != other.max_message_bytes,
            ),
            (
                "receive_wait_default_ms",
                self.receive_wait_default_ms != other.receive_wait_default_ms,
            ),
            (
                "dead_letter_on_expiration",
                self.dead_letter_on_expiration != other.dead_letter_on_expiration,
            ),
            (
                "dead_letter_target",
                self.dead_letter_target != other.dead_letter_target,
            ),
            ("max_messages", self.max_messages != other.max_messages),
            ("max_bytes", self.max_bytes != other.max_bytes),
            (
                "channel_capacity_pct",
                self.channel_capacity_pct != other.channel_capacity_pct,
            ),
            ("delay_ms", self.delay_ms != other.delay_ms),
            ("redrive_allow", self.redrive_allow != other.redrive_allow),
        ];
        fields
            .into_iter()
            .find(|(_, differs)| *differs)
            .map(|(name, _)| name)
    }
}

/// When a queue was made and last changed (ms since the epoch; 0 when not
/// known: made by a version that did not keep them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueTimes {
    /// When it was created.
    pub created_at_ms: u64,
    /// When its settings last changed (tags aside), or it was created.
    pub modified_at_ms: u64,
}

/// A change to some of a queue's settings; `None` keeps the current value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SettingsUpdate {
    /// See [`QueueSettings::visibility_timeout_ms`].
    pub visibility_timeout_ms: Option<u64>,
    /// See [`QueueSettings::max_deliveries`].
    pub max_deliveries: Option<u32>,
    /// See [`QueueSettings::retention_ms`].
    pub retention_ms: Option<u64>,
    /// See [`QueueSettings::max_message_bytes`].
    pub max_message_bytes: Option<u32>,
    /// See [`QueueSettings::receive_wait_default_ms`].
    pub receive_wait_default_ms: Option<u64>,
    /// See [`QueueSettings::dead_letter_on_expiration`].
    pub dead_letter_on_expiration: Option<bool>,
    /// `Some(None)` returns to the built-in DLQ.
    pub dead_letter_target: Option<Option<String>>,
    /// See [`QueueSettings::max_messages`].
    pub max_messages: Option<u64>,
    /// See [`QueueSettings::max_bytes`].
    pub max_bytes: Option<u64>,
    /// See [`QueueSettings::channel_capacity_pct`].
    pub channel_capacity_pct: Option<u8>,
    /// See [`QueueSettings::delay_ms`].
    pub delay_ms: Option<u64>,
    /// `Some(None)` allows any queue again.
    pub redrive_allow: Option<Option<String>>,
    /// Tags to add or change.
    pub tags_set: Vec<(String, String)>,
    /// Tag keys to remove (after `tags_set`).
    pub tags_remove: Vec<String>,
}

impl SettingsUpdate {
    /// `base` with this update applied.
    pub fn apply(&self, base: &QueueSettings) -> QueueSettings {
        QueueSettings {
            visibility_timeout_ms: self
                .visibility_timeout_ms
                .unwrap_or(base.visibility_timeout_ms),
            max_deliveries: self.max_deliveries.unwrap_or(base.max_deliveries),
            retention_ms: self.retention_ms.unwrap_or(base.retention_ms),
            max_message_bytes: self.max_message_bytes.unwrap_or(base.max_message_bytes),
            receive_wait_default_ms: self
                .receive_wait_default_ms
                .unwrap_or(base.receive_wait_default_ms),
            dead_letter_on_expiration: self
                .dead_letter_on_expiration
                .unwrap_or(base.dead_letter_on_expiration),
            dead_letter_target: self
                .dead_letter_target
                .clone()
                .unwrap_or_else(|| base.dead_letter_target.clone()),
            max_messages: self.max_messages.unwrap_or(base.max_messages),
            max_bytes: self.max_bytes.unwrap_or(base.max_bytes),
            channel_capacity_pct: self
                .channel_capacity_pct
                .unwrap_or(base.channel_capacity_pct),
            delay_ms: self.delay_ms.unwrap_or(base.delay_ms),
            redrive_allow: self
                .redrive_allow
                .clone()
                .unwrap_or_else(|| base.redrive_allow.clone()),
            tags: self.tags_of(&base.tags),
        }
    }

    /// `base` tags with this update's set and removed.
    fn tags_of(&self, base: &[(String, String)]) -> Vec<(String, String)> {
        if self.tags_set.is_empty() && self.tags_remove.is_empty() {
            return base.to_vec();
        }
        let mut tags: std::collections::BTreeMap<String, String> = base.iter().cloned().collect();
        for (k, v) in &self.tags_set {
            tags.insert(k.clone(), v.clone());
        }
        for k in &self.tags_remove {
            tags.remove(k);
        }
        tags.into_iter().collect()
    }

    /// Whether it changes anything but tags (what a queue's last-modified
    /// time follows).
    pub fn changes_settings(&self) -> bool {
        let SettingsUpdate {
            visibility_timeout_ms,
            max_deliveries,
            retention_ms,
            max_message_bytes,
            receive_wait_default_ms,
            dead_letter_on_expiration,
            dead_letter_target,
            max_messages,
            max_bytes,
            channel_capacity_pct,
            delay_ms,
            redrive_allow,
            tags_set: _,
            tags_remove: _,
        } = self;
        visibility_timeout_ms.is_some()
            || max_deliveries.is_some()
            || retention_ms.is_some()
            || max_message_bytes.is_some()
            || receive_wait_default_ms.is_some()
            || dead_letter_on_expiration.is_some()
            || dead_letter_target.is_some()
            || max_messages.is_some()
            || max_bytes.is_some()
            || channel_capacity_pct.is_some()
            || delay_ms.is_some()
            || redrive_allow.is_some()
    }
}

/// Checks a queue name: 1–80 of `[A-Za-z0-9_-]`.
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
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(Error::invalid(
            field,
            format!("may hold only [A-Za-z0-9_-] (got {bad:?})"),
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

/// A message id, unique on the server: the queue's id and the message's
/// first sequence number.
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
    /// When it was created and last changed.
    pub times: QueueTimes,
}

/// Where a move task stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoveStatus {
    /// Moving, a batch a second.
    Running,
    /// Everything it was to move is moved (or gone).
    Completed,
    /// Cancelled before the end.
    Cancelled,
    /// A destination refused a message (gone, or full): see `failure`.
    Failed,
}

impl MoveStatus {
    /// Its name (`RUNNING`, ... as the SQS API writes it).
    pub fn name(self) -> &'static str {
        match self {
            MoveStatus::Running => "RUNNING",
            MoveStatus::Completed => "COMPLETED",
            MoveStatus::Cancelled => "CANCELLED",
            MoveStatus::Failed => "FAILED",
        }
    }

    /// Its code on the wire and in the log.
    pub fn code(self) -> u8 {
        match self {
            MoveStatus::Running => 0,
            MoveStatus::Completed => 1,
            MoveStatus::Cancelled => 2,
            MoveStatus::Failed => 3,
        }
    }

    /// The status of a code.
    pub fn of_code(code: u8) -> Option<MoveStatus> {
        Some(match code {
            0 => MoveStatus::Running,
            1 => MoveStatus::Completed,
            2 => MoveStatus::Cancelled,
            3 => MoveStatus::Failed,
            _ => return None,
        })
    }
}

/// A move of messages out of a queue's DLQ (a redrive) or out of a queue
/// that is another's dead-letter target, back to where they came from or
/// to one named queue, a batch a second. A queue keeps its last
/// [`MOVE_TASKS_KEPT`] tasks; at most one runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveTask {
    /// Its number, counting from 1 per queue.
    pub id: u64,
    /// From the queue's own DLQ (a redrive), else from the queue itself.
    pub from_dlq: bool,
    /// Where to: `None` sends each message back to the queue it was
    /// dead-lettered from (from the DLQ: the queue itself).
    pub to: Option<String>,
    /// Messages a second.
    pub rate: u32,
    /// When it started (ms since the epoch).
    pub started_at_ms: u64,
    /// Messages moved so far.
    pub moved: u64,
    /// Messages there were to move when it started (at most its maximum).
    pub to_move: u64,
    /// At most this many (`None`: all there were at the start).
    pub max: Option<u64>,
    /// Where it stands.
    pub status: MoveStatus,
    /// Why it failed.
    pub failure: Option<String>,
    /// The first sequence number not yet looked at, and the end: messages
    /// put after the start are not moved.
    pub cursor: u64,
    /// See `cursor`.
    pub end: u64,
}

/// Move tasks a queue keeps (the running one and the last ended ones).
pub const MOVE_TASKS_KEPT: usize = 10;

/// What a redrive did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RedriveOutcome {
    /// Moved back now.
    pub moved: u64,
    /// Left to move at the requested rate (0 without a rate).
    pub scheduled: u64,
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
