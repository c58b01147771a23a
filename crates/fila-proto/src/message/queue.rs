//! A queue's settings, a change to them, and move tasks, on the wire.

use super::{get_pairs, put_pairs, Halves};
use crate::error::ProtoError;
use crate::wire::{Reader, Writer};

/// Queue settings on the wire; in a create or update, `None` means "the
/// default" or "unchanged".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SettingsPatch {
    /// Milliseconds.
    pub visibility_timeout_ms: Option<u64>,
    /// 0 = unlimited.
    pub max_deliveries: Option<u32>,
    /// Milliseconds.
    pub retention_ms: Option<u64>,
    /// Bytes.
    pub max_message_bytes: Option<u32>,
    /// Milliseconds.
    pub receive_wait_default_ms: Option<u64>,
    /// Expired messages to the DLQ.
    pub dead_letter_on_expiration: Option<bool>,
    /// `Some(None)` clears the target.
    pub dead_letter_target: Option<Option<String>>,
    /// Messages.
    pub max_messages: Option<u64>,
    /// Bytes.
    pub max_bytes: Option<u64>,
    /// Percent.
    pub channel_capacity_pct: Option<u8>,
    /// Milliseconds a put without a delay of its own waits.
    pub delay_ms: Option<u64>,
    /// `Some(None)` clears the redrive-allow policy.
    pub redrive_allow: Option<Option<String>>,
    /// Tags to add or change.
    pub tags_set: Vec<(String, String)>,
    /// Tag keys to remove.
    pub tags_remove: Vec<String>,
    /// Milliseconds a deduplication id is remembered.
    pub dedup_window_ms: Option<u64>,
    /// Puts without a deduplication id are deduplicated by content.
    pub content_dedup: Option<bool>,
    /// Every put must carry a group key.
    pub ordered: Option<bool>,
    /// Priority levels a put may name (1–10).
    pub priority_levels: Option<u8>,
    /// Every this many deliveries while lower levels wait, one from a
    /// lower level (0: strict).
    pub priority_fairness: Option<u32>,
    /// The retry policy's first delay, ms (0: off).
    pub retry_initial_ms: Option<u64>,
    /// Each retry waits this many percent of the one before (100–1000).
    pub retry_multiplier_pct: Option<u32>,
    /// The longest retry delay, ms.
    pub retry_max_ms: Option<u64>,
    /// Up to this share of a retry's delay taken off (0–100).
    pub retry_jitter_pct: Option<u8>,
    /// Failed attempts each message keeps (0–32).
    pub attempt_history: Option<u32>,
}

impl SettingsPatch {
    /// Whether it sets any of the retry policy's fields.
    pub fn sets_retry(&self) -> bool {
        self.retry_initial_ms.is_some()
            || self.retry_multiplier_pct.is_some()
            || self.retry_max_ms.is_some()
            || self.retry_jitter_pct.is_some()
    }
}

/// A queue's settings, all of them, as an answer carries them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// Milliseconds.
    pub visibility_timeout_ms: u64,
    /// 0 = unlimited.
    pub max_deliveries: u32,
    /// Milliseconds.
    pub retention_ms: u64,
    /// Bytes.
    pub max_message_bytes: u32,
    /// Milliseconds.
    pub receive_wait_default_ms: u64,
    /// Expired messages to the DLQ.
    pub dead_letter_on_expiration: bool,
    /// Another queue for dead letters.
    pub dead_letter_target: Option<String>,
    /// Messages.
    pub max_messages: u64,
    /// Bytes.
    pub max_bytes: u64,
    /// Percent.
    pub channel_capacity_pct: u8,
    /// Milliseconds a put without a delay of its own waits.
    pub delay_ms: u64,
    /// Which queues may use this one as their dead-letter target (the SQS
    /// API's RedriveAllowPolicy, as given).
    pub redrive_allow: Option<String>,
    /// Tags, sorted by key.
    pub tags: Vec<(String, String)>,
    /// Milliseconds a deduplication id is remembered.
    pub dedup_window_ms: u64,
    /// Puts without a deduplication id are deduplicated by content.
    pub content_dedup: bool,
    /// Every put must carry a group key.
    pub ordered: bool,
    /// Priority levels a put may name (1–10).
    pub priority_levels: u8,
    /// Every this many deliveries while lower levels wait, one from a
    /// lower level (0: strict).
    pub priority_fairness: u32,
    /// The retry policy's first delay, ms (0: off).
    pub retry_initial_ms: u64,
    /// Each retry waits this many percent of the one before.
    pub retry_multiplier_pct: u32,
    /// The longest retry delay, ms.
    pub retry_max_ms: u64,
    /// Up to this share of a retry's delay taken off.
    pub retry_jitter_pct: u8,
    /// What is paused (version 4).
    pub paused: Halves,
    /// Failed attempts each message keeps (version 5).
    pub attempt_history: u32,
}

/// A move task as answers show it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MoveInfo {
    /// Its number in its queue.
    pub id: u64,
    /// A redrive from the queue's own DLQ.
    pub from_dlq: bool,
    /// Where to (`None`: each message's source).
    pub to: Option<String>,
    /// Messages a second.
    pub rate_per_second: u32,
    /// When it started, ms since the epoch.
    pub started_at_ms: u64,
    /// Moved so far.
    pub moved: u64,
    /// There were to move when it started.
    pub to_move: u64,
    /// Its maximum.
    pub max_messages: Option<u64>,
    /// 0 running, 1 completed, 2 cancelled, 3 failed.
    pub status: u8,
    /// Why it failed.
    pub failure: Option<String>,
    /// Which messages it takes (version 6; empty: every one).
    pub filter: MoveFilter,
}

pub(super) fn put_patch(w: &mut Writer<'_>, p: &SettingsPatch) {
    w.opt(&p.visibility_timeout_ms, |w, v| w.u64(*v));
    w.opt(&p.max_deliveries, |w, v| w.u32(*v));
    w.opt(&p.retention_ms, |w, v| w.u64(*v));
    w.opt(&p.max_message_bytes, |w, v| w.u32(*v));
    w.opt(&p.receive_wait_default_ms, |w, v| w.u64(*v));
    w.opt(&p.dead_letter_on_expiration, |w, v| w.bool(*v));
    w.opt(&p.dead_letter_target, |w, v| w.opt(v, |w, s| w.str(s)));
    w.opt(&p.max_messages, |w, v| w.u64(*v));
    w.opt(&p.max_bytes, |w, v| w.u64(*v));
    w.opt(&p.channel_capacity_pct, |w, v| w.u8(*v));
    w.opt(&p.delay_ms, |w, v| w.u64(*v));
    w.opt(&p.redrive_allow, |w, v| w.opt(v, |w, s| w.str(s)));
    put_pairs(w, &p.tags_set);
    w.list(&p.tags_remove, |w, k| w.str(k));
    // Added later: written only when used, so the patch of an older
    // client reads the same.
    let fifth = p.attempt_history.is_some();
    let fourth = fifth || p.sets_retry();
    let third = fourth || p.priority_levels.is_some() || p.priority_fairness.is_some();
    let second = third || p.ordered.is_some();
    if second || p.dedup_window_ms.is_some() || p.content_dedup.is_some() {
        w.opt(&p.dedup_window_ms, |w, v| w.u64(*v));
        w.opt(&p.content_dedup, |w, v| w.bool(*v));
    }
    if second {
        w.opt(&p.ordered, |w, v| w.bool(*v));
    }
    if third {
        w.opt(&p.priority_levels, |w, v| w.u8(*v));
        w.opt(&p.priority_fairness, |w, v| w.u32(*v));
    }
    if fourth {
        w.opt(&p.retry_initial_ms, |w, v| w.u64(*v));
        w.opt(&p.retry_multiplier_pct, |w, v| w.u32(*v));
        w.opt(&p.retry_max_ms, |w, v| w.u64(*v));
        w.opt(&p.retry_jitter_pct, |w, v| w.u8(*v));
    }
    if fifth {
        w.opt(&p.attempt_history, |w, v| w.u32(*v));
    }
}

/// A patch as version `version` writes it: version 1's is the first ten
/// fields, and nothing after them. A version-1 patch that goes on past the
/// tenth field is read as version 2's (the layout this crate wrote between
/// 5db3f1f and the versions, in frames that still said 1): a client of
/// that time keeps creating and updating queues.
pub(super) fn get_patch(r: &mut Reader, version: u8) -> Result<SettingsPatch, ProtoError> {
    let mut p = SettingsPatch {
        visibility_timeout_ms: r.opt(Reader::u64)?,
        max_deliveries: r.opt(Reader::u32)?,
        retention_ms: r.opt(Reader::u64)?,
        max_message_bytes: r.opt(Reader::u32)?,
        receive_wait_default_ms: r.opt(Reader::u64)?,
        dead_letter_on_expiration: r.opt(Reader::bool)?,
        dead_letter_target: r.opt(|r| r.opt(Reader::str))?,
        max_messages: r.opt(Reader::u64)?,
        max_bytes: r.opt(Reader::u64)?,
        channel_capacity_pct: r.opt(Reader::u8)?,
        ..SettingsPatch::default()
    };
    if version == 1 && r.remaining() == 0 {
        return Ok(p);
    }
    p.delay_ms = r.opt(Reader::u64)?;
    p.redrive_allow = r.opt(|r| r.opt(Reader::str))?;
    p.tags_set = get_pairs(r)?;
    p.tags_remove = r.list(2, Reader::str)?;
    // Added later, each part whole or not at all; a part with nothing
    // set is written only before a later part (so a patch has one layout).
    let empty_end = |r: &Reader, empty: bool| {
        if empty && r.remaining() == 0 {
            Err(ProtoError::Malformed(
                "a patch's optional part sets nothing and ends it",
            ))
        } else {
            Ok(())
        }
    };
    if r.remaining() > 0 {
        p.dedup_window_ms = r.opt(Reader::u64)?;
        p.content_dedup = r.opt(Reader::bool)?;
        empty_end(r, p.dedup_window_ms.is_none() && p.content_dedup.is_none())?;
    }
    if r.remaining() > 0 {
        p.ordered = r.opt(Reader::bool)?;
        empty_end(r, p.ordered.is_none())?;
    }
    if r.remaining() > 0 {
        p.priority_levels = r.opt(Reader::u8)?;
        p.priority_fairness = r.opt(Reader::u32)?;
        empty_end(
            r,
            p.priority_levels.is_none() && p.priority_fairness.is_none(),
        )?;
    }
    if r.remaining() > 0 {
        p.retry_initial_ms = r.opt(Reader::u64)?;
        p.retry_multiplier_pct = r.opt(Reader::u32)?;
        p.retry_max_ms = r.opt(Reader::u64)?;
        p.retry_jitter_pct = r.opt(Reader::u8)?;
        empty_end(r, !p.sets_retry())?;
    }
    if r.remaining() > 0 {
        p.attempt_history = r.opt(Reader::u32)?;
        empty_end(r, p.attempt_history.is_none())?;
    }
    Ok(p)
}

/// Settings as version `version` writes them: version 1's are the first
/// ten fields.
pub(super) fn put_settings_in(w: &mut Writer<'_>, s: &Settings, version: u8) {
    w.u64(s.visibility_timeout_ms);
    w.u32(s.max_deliveries);
    w.u64(s.retention_ms);
    w.u32(s.max_message_bytes);
    w.u64(s.receive_wait_default_ms);
    w.bool(s.dead_letter_on_expiration);
    w.opt(&s.dead_letter_target, |w, v| w.str(v));
    w.u64(s.max_messages);
    w.u64(s.max_bytes);
    w.u8(s.channel_capacity_pct);
    if version == 1 {
        return;
    }
    w.u64(s.delay_ms);
    w.opt(&s.redrive_allow, |w, v| w.str(v));
    put_pairs(w, &s.tags);
    w.u64(s.dedup_window_ms);
    w.bool(s.content_dedup);
    w.bool(s.ordered);
    w.u8(s.priority_levels);
    w.u32(s.priority_fairness);
    if version < 3 {
        return;
    }
    w.u64(s.retry_initial_ms);
    w.u32(s.retry_multiplier_pct);
    w.u64(s.retry_max_ms);
    w.u8(s.retry_jitter_pct);
    if version < 4 {
        return;
    }
    w.u8(s.paused.bits());
    if version < 5 {
        return;
    }
    w.u32(s.attempt_history);
}

/// Settings as version `version` writes them (version 1's: the first ten
/// fields; the others read as their defaults).
pub(super) fn get_settings(r: &mut Reader, version: u8) -> Result<Settings, ProtoError> {
    let mut s = Settings {
        visibility_timeout_ms: r.u64()?,
        max_deliveries: r.u32()?,
        retention_ms: r.u64()?,
        max_message_bytes: r.u32()?,
        receive_wait_default_ms: r.u64()?,
        dead_letter_on_expiration: r.bool()?,
        dead_letter_target: r.opt(Reader::str)?,
        max_messages: r.u64()?,
        max_bytes: r.u64()?,
        channel_capacity_pct: r.u8()?,
        delay_ms: 0,
        redrive_allow: None,
        tags: Vec::new(),
        dedup_window_ms: 0,
        content_dedup: false,
        ordered: false,
        priority_levels: 1,
        priority_fairness: 0,
        retry_initial_ms: 0,
        retry_multiplier_pct: 200,
        retry_max_ms: 900_000,
        retry_jitter_pct: 0,
        paused: Halves::default(),
        attempt_history: 0,
    };
    if version == 1 {
        return Ok(s);
    }
    s.delay_ms = r.u64()?;
    s.redrive_allow = r.opt(Reader::str)?;
    s.tags = get_pairs(r)?;
    // Absent from an older server's answer; each part whole or not at all.
    if r.remaining() > 0 {
        s.dedup_window_ms = r.u64()?;
        s.content_dedup = r.bool()?;
    }
    if r.remaining() > 0 {
        s.ordered = r.bool()?;
    }
    if r.remaining() > 0 {
        s.priority_levels = r.u8()?;
        s.priority_fairness = r.u32()?;
    }
    // Version 3's: absent from an older server's answer.
    if version >= 3 && r.remaining() > 0 {
        s.retry_initial_ms = r.u64()?;
        s.retry_multiplier_pct = r.u32()?;
        s.retry_max_ms = r.u64()?;
        s.retry_jitter_pct = r.u8()?;
    }
    // Version 4's.
    if version >= 4 && r.remaining() > 0 {
        s.paused =
            Halves::of_bits(r.u8()?).ok_or(ProtoError::Malformed("an unknown paused bit"))?;
    }
    // Version 5's.
    if version >= 5 && r.remaining() > 0 {
        s.attempt_history = r.u32()?;
    }
    Ok(s)
}

/// A move task as version `version` writes it: version 6 adds its filter.
pub(super) fn put_move(w: &mut Writer<'_>, m: &MoveInfo, version: u8) {
    w.u64(m.id);
    w.bool(m.from_dlq);
    w.opt(&m.to, |w, v| w.str(v));
    w.u32(m.rate_per_second);
    w.u64(m.started_at_ms);
    w.u64(m.moved);
    w.u64(m.to_move);
    w.opt(&m.max_messages, |w, v| w.u64(*v));
    w.u8(m.status);
    w.opt(&m.failure, |w, v| w.str(v));
    if version >= 6 {
        put_filter(w, &m.filter);
    }
}

pub(super) fn get_move(r: &mut Reader, version: u8) -> Result<MoveInfo, ProtoError> {
    Ok(MoveInfo {
        id: r.u64()?,
        from_dlq: r.bool()?,
        to: r.opt(Reader::str)?,
        rate_per_second: r.u32()?,
        started_at_ms: r.u64()?,
        moved: r.u64()?,
        to_move: r.u64()?,
        max_messages: r.opt(Reader::u64)?,
        status: r.u8()?,
        failure: r.opt(Reader::str)?,
        filter: if version >= 6 {
            get_filter(r)?
        } else {
            MoveFilter::default()
        },
    })
}

/// Which messages a move takes (version 6): each condition given must
/// hold; empty, every message (docs/protocol.md "Filters").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MoveFilter {
    /// Attributes it has, each with exactly this value.
    pub attributes: Vec<(String, String)>,
    /// A reason it failed for, exactly: its dead-letter record's
    /// (`max_deliveries`, `expired`, or the consumer's) or an attempt's.
    pub reason: Option<String>,
    /// Text in a consumer's reason or description (its dead-letter
    /// record's or an attempt's).
    pub text: Option<String>,
    /// When it failed (dead-lettered, else put) is at or after this, ms
    /// since the epoch.
    pub since_ms: Option<u64>,
    /// ... and before this.
    pub until_ms: Option<u64>,
}

impl MoveFilter {
    /// Whether it has no condition.
    pub fn is_empty(&self) -> bool {
        *self == MoveFilter::default()
    }

    /// A time as the CLI and the console take one for `since_ms` and
    /// `until_ms`: ms since the epoch, or an age counted back from
    /// `now_ms` (`90s`, `30m`, `2h`, `7d`); `None` when it is neither.
    pub fn time_of(value: &str, now_ms: u64) -> Option<u64> {
        if let Ok(ms) = value.parse::<u64>() {
            return Some(ms);
        }
        let unit = match value.chars().last()? {
            's' => 1_000,
            'm' => 60_000,
            'h' => 3_600_000,
            'd' => 86_400_000,
            _ => return None,
        };
        let n = value[..value.len() - 1].parse::<u64>().ok()?;
        Some(now_ms.saturating_sub(n.saturating_mul(unit)))
    }
}

/// Its conditions in words, as the CLI and the console show a task's
/// (`attribute tenant=a, reason timeout, failed at or after 5 ms`).
impl std::fmt::Display for MoveFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = self
            .attributes
            .iter()
            .map(|(k, v)| format!("attribute {k}={v}"))
            .collect();
        if let Some(r) = &self.reason {
            parts.push(format!("reason {r}"));
        }
        if let Some(t) = &self.text {
            parts.push(format!("text {t:?}"));
        }
        if let Some(s) = self.since_ms {
            parts.push(format!("failed at or after {s} ms"));
        }
        if let Some(u) = self.until_ms {
            parts.push(format!("failed before {u} ms"));
        }
        f.write_str(&parts.join(", "))
    }
}

pub(super) fn put_filter(w: &mut Writer<'_>, f: &MoveFilter) {
    w.list(&f.attributes, |w, (k, v)| {
        w.str(k);
        w.str(v);
    });
    w.opt(&f.reason, |w, v| w.str(v));
    w.opt(&f.text, |w, v| w.str(v));
    w.opt(&f.since_ms, |w, v| w.u64(*v));
    w.opt(&f.until_ms, |w, v| w.u64(*v));
}

pub(super) fn get_filter(r: &mut Reader) -> Result<MoveFilter, ProtoError> {
    Ok(MoveFilter {
        attributes: r.list(4, |r| Ok((r.str()?, r.str()?)))?,
        reason: r.opt(Reader::str)?,
        text: r.opt(Reader::str)?,
        since_ms: r.opt(Reader::u64)?,
        until_ms: r.opt(Reader::u64)?,
    })
}

/// A filter at the end of a request: absent (an older client's, or no
/// condition) is empty.
pub(super) fn get_filter_tail(r: &mut Reader) -> Result<MoveFilter, ProtoError> {
    if r.remaining() == 0 {
        Ok(MoveFilter::default())
    } else {
        get_filter(r)
    }
}

/// A channel and its backlog, as the channels request answers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelInfo {
    /// Its name (`None`: the default channel).
    pub name: Option<String>,
    /// Its visible messages.
    pub visible: u64,
    /// Its messages in every state.
    pub held: u64,
}

/// What put answers per entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutAck {
    /// Message id.
    pub id: u128,
    /// Sequence number.
    pub seq: u64,
}
