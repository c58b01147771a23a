//! A queue's settings, a change to some of them, and when it was made
//! and last changed.

use crate::error::{check_range, Error};
use crate::limits::*;
use crate::types::validate_queue_name;

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
    /// How long a put's deduplication id is remembered: a second put with
    /// it within this time stores nothing and is answered with the first
    /// put's id and sequence number (1 s ..= 24 h).
    pub dedup_window_ms: u64,
    /// A put without a deduplication id takes one from its content (a
    /// hash of its payload and attributes).
    pub content_dedup: bool,
    /// Every put must carry a group key (the queue is ordered: each
    /// group's messages are delivered in sequence order, one at a time).
    pub ordered: bool,
    /// Priority levels a put may name (1 ..= 10; 1: no priorities). A
    /// receive takes the highest level with messages first, within each
    /// channel.
    pub priority_levels: u8,
    /// Every this many deliveries of a channel while lower levels wait,
    /// one is taken from a lower level, each in turn (0: strict priority,
    /// lower levels wait for the higher ones to empty).
    pub priority_fairness: u32,
    /// The retry policy's first delay: a lease that ends without a delete
    /// (it expired, or its consumer released it as failed) makes the
    /// message visible this long after its end (0: off, visible at once;
    /// ..= 12 h). See [`QueueSettings::retry_delay`].
    pub retry_initial_ms: u64,
    /// Each later retry waits this many percent of the one before
    /// (100 ..= 1000: ×1.00 ..= ×10.00).
    pub retry_multiplier_pct: u32,
    /// No retry waits longer than this (`retry_initial_ms` ..= 12 h).
    pub retry_max_ms: u64,
    /// Up to this share (percent) of a retry's delay is taken off, by an
    /// amount drawn from the message and its delivery count, so that
    /// messages that failed together do not come back together (0 ..= 100).
    pub retry_jitter_pct: u8,
    /// Failed attempts each message keeps (0 ..= 32; 0: none): when a
    /// delivery's lease ended without a delete, how, and the consumer's
    /// reason and description.
    pub attempt_history: u32,
    /// Receives are paused: they find nothing (those that wait, wait) until
    /// the queue is resumed. Not a setting a create compares (as tags are
    /// not): set by [`crate::Engine::pause`] and `resume`.
    pub receive_paused: bool,
    /// Puts are paused: refused `queue_paused` until the queue is resumed.
    pub send_paused: bool,
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
            dedup_window_ms: DEDUP_WINDOW_MS_DEFAULT,
            content_dedup: false,
            ordered: false,
            priority_levels: 1,
            priority_fairness: 0,
            retry_initial_ms: 0,
            retry_multiplier_pct: RETRY_MULTIPLIER_PCT_DEFAULT,
            retry_max_ms: RETRY_MAX_MS_DEFAULT,
            retry_jitter_pct: 0,
            attempt_history: ATTEMPT_HISTORY_DEFAULT,
            receive_paused: false,
            send_paused: false,
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
        check_range(
            "priority_levels",
            self.priority_levels.into(),
            1,
            PRIORITY_LEVELS_MAX.into(),
            "",
        )?;
        check_range(
            "priority_fairness",
            self.priority_fairness.into(),
            0,
            PRIORITY_FAIRNESS_MAX.into(),
            "",
        )?;
        self.validate_retry()?;
        check_range(
            "attempt_history",
            self.attempt_history.into(),
            0,
            ATTEMPT_HISTORY_MAX.into(),
            "",
        )?;
        check_range(
            "dedup_window_ms",
            self.dedup_window_ms,
            DEDUP_WINDOW_MS_MIN,
            DEDUP_WINDOW_MS_MAX,
            " ms",
        )?;
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
        macro_rules! differing {
            ($($field:ident),*) => {{
                // Every field is named (tags and the pause are no
                // setting): a new one must join `for_each_setting!`.
                let QueueSettings { $($field: _,)* tags: _, receive_paused: _, send_paused: _ } = self;
                [$((stringify!($field), self.$field != other.$field)),*]
            }};
        }
        crate::for_each_setting!(differing)
            .into_iter()
            .find(|(_, differs)| *differs)
            .map(|(name, _)| name)
    }
}

/// Calls macro `$then` with the names of every queue setting, in the order
/// a create compares them (tags are no setting): one list for the engine's
/// comparisons and the reference model's.
#[doc(hidden)]
#[macro_export]
macro_rules! for_each_setting {
    ($then:ident) => {
        $then!(
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
            dedup_window_ms,
            content_dedup,
            ordered,
            priority_levels,
            priority_fairness,
            retry_initial_ms,
            retry_multiplier_pct,
            retry_max_ms,
            retry_jitter_pct,
            attempt_history
        )
    };
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
    /// See [`QueueSettings::dedup_window_ms`].
    pub dedup_window_ms: Option<u64>,
    /// See [`QueueSettings::content_dedup`].
    pub content_dedup: Option<bool>,
    /// See [`QueueSettings::ordered`].
    pub ordered: Option<bool>,
    /// See [`QueueSettings::priority_levels`].
    pub priority_levels: Option<u8>,
    /// See [`QueueSettings::priority_fairness`].
    pub priority_fairness: Option<u32>,
    /// See [`QueueSettings::retry_initial_ms`].
    pub retry_initial_ms: Option<u64>,
    /// See [`QueueSettings::retry_multiplier_pct`].
    pub retry_multiplier_pct: Option<u32>,
    /// See [`QueueSettings::retry_max_ms`].
    pub retry_max_ms: Option<u64>,
    /// See [`QueueSettings::retry_jitter_pct`].
    pub retry_jitter_pct: Option<u8>,
    /// See [`QueueSettings::attempt_history`].
    pub attempt_history: Option<u32>,
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
            dedup_window_ms: self.dedup_window_ms.unwrap_or(base.dedup_window_ms),
            content_dedup: self.content_dedup.unwrap_or(base.content_dedup),
            ordered: self.ordered.unwrap_or(base.ordered),
            priority_levels: self.priority_levels.unwrap_or(base.priority_levels),
            priority_fairness: self.priority_fairness.unwrap_or(base.priority_fairness),
            retry_initial_ms: self.retry_initial_ms.unwrap_or(base.retry_initial_ms),
            retry_multiplier_pct: self
                .retry_multiplier_pct
                .unwrap_or(base.retry_multiplier_pct),
            retry_max_ms: self.retry_max_ms.unwrap_or(base.retry_max_ms),
            retry_jitter_pct: self.retry_jitter_pct.unwrap_or(base.retry_jitter_pct),
            attempt_history: self.attempt_history.unwrap_or(base.attempt_history),
            // Not changed by an update: by a pause or a resume.
            receive_paused: base.receive_paused,
            send_paused: base.send_paused,
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
        macro_rules! any_set {
            ($($field:ident),*) => {{
                // Every field is named: a new one must join
                // `for_each_setting!`.
                let SettingsUpdate { $($field,)* tags_set: _, tags_remove: _ } = self;
                false $(|| $field.is_some())*
            }};
        }
        crate::for_each_setting!(any_set)
    }
}
