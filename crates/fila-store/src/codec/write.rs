//! Writing a record's parts: integers, strings, options, a queue's
//! settings and move tasks, a message as records and snapshots carry it.

use fila_core::event::{MessageView, Spot};
use fila_core::{
    DeadLetter, DeadLetterReason, MessageId, MoveFilter, MoveTask, QueueSettings, QueueTimes,
};

pub(super) fn u8_(out: &mut Vec<u8>, v: u8) {
    out.push(v);
}
pub(super) fn u32_(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}
pub(super) fn u64_(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}
pub(super) fn bytes_(out: &mut Vec<u8>, v: &[u8]) {
    u32_(
        out,
        u32::try_from(v.len()).expect("fields are far below 4 GiB"),
    );
    out.extend_from_slice(v);
}
pub(super) fn opt_str(out: &mut Vec<u8>, v: Option<&str>) {
    match v {
        None => u8_(out, 0),
        Some(s) => {
            u8_(out, 1);
            bytes_(out, s.as_bytes());
        }
    }
}
pub(super) fn spot(out: &mut Vec<u8>, s: &Spot) {
    u32_(out, s.queue);
    u8_(out, u8::from(s.dlq));
    u64_(out, s.seq);
}

pub(super) fn settings(out: &mut Vec<u8>, s: &QueueSettings) {
    u64_(out, s.visibility_timeout_ms);
    u32_(out, s.max_deliveries);
    u64_(out, s.retention_ms);
    u32_(out, s.max_message_bytes);
    u64_(out, s.receive_wait_default_ms);
    u8_(out, u8::from(s.dead_letter_on_expiration));
    opt_str(out, s.dead_letter_target.as_deref());
    u64_(out, s.max_messages);
    u64_(out, s.max_bytes);
    u8_(out, s.channel_capacity_pct);
}

/// A queue's move tasks.
pub(super) fn tasks(out: &mut Vec<u8>, tasks: &[MoveTask]) {
    u32_(out, tasks.len() as u32);
    for t in tasks {
        u64_(out, t.id);
        u8_(out, u8::from(t.from_dlq));
        opt_str(out, t.to.as_deref());
        u32_(out, t.rate);
        u64_(out, t.started_at_ms);
        u64_(out, t.moved);
        u64_(out, t.to_move);
        match t.max {
            None => u8_(out, 0),
            Some(m) => {
                u8_(out, 1);
                u64_(out, m);
            }
        }
        u8_(out, t.status.code());
        opt_str(out, t.failure.as_deref());
        u64_(out, t.cursor);
        u64_(out, t.end);
    }
}

/// Whether any of `tasks` has a filter (then [`filters`] follow them).
pub(super) fn any_filter(tasks: &[MoveTask]) -> bool {
    tasks.iter().any(|t| t.filter.is_some())
}

/// The filters of a queue's move tasks that have one: count, then (task
/// id, attributes, reason, text, since, until) each.
pub(super) fn filters(out: &mut Vec<u8>, tasks: &[MoveTask]) {
    let with: Vec<(u64, &MoveFilter)> = tasks
        .iter()
        .filter_map(|t| t.filter.as_deref().map(|f| (t.id, f)))
        .collect();
    u32_(out, with.len() as u32);
    for (id, f) in with {
        u64_(out, id);
        u32_(out, f.attributes.len() as u32);
        for (k, v) in &f.attributes {
            bytes_(out, k.as_bytes());
            bytes_(out, v.as_bytes());
        }
        opt_str(out, f.reason.as_deref());
        opt_str(out, f.text.as_deref());
        for time in [f.since_ms, f.until_ms] {
            match time {
                None => u8_(out, 0),
                Some(t) => {
                    u8_(out, 1);
                    u64_(out, t);
                }
            }
        }
    }
}

/// What settings gained after the first record format: the queue delay,
/// the redrive-allow policy, the tags, and the queue's times.
pub(super) fn extension(out: &mut Vec<u8>, s: &QueueSettings, times: QueueTimes) {
    u64_(out, s.delay_ms);
    opt_str(out, s.redrive_allow.as_deref());
    u32_(out, s.tags.len() as u32);
    for (k, v) in &s.tags {
        bytes_(out, k.as_bytes());
        bytes_(out, v.as_bytes());
    }
    u64_(out, times.created_at_ms);
    u64_(out, times.modified_at_ms);
}

/// Keys of the settings' keyed extension: each setting added after the
/// [`extension`] is one `u8` key and one `u64` value, so a setting added
/// later needs no new record kind. An unknown key does not parse (a log
/// written by a newer version is refused, not misread).
pub(super) mod setting {
    pub const DEDUP_WINDOW_MS: u8 = 1;
    pub const CONTENT_DEDUP: u8 = 2;
    pub const ORDERED: u8 = 3;
    pub const PRIORITY_LEVELS: u8 = 4;
    pub const PRIORITY_FAIRNESS: u8 = 5;
    pub const RETRY_INITIAL_MS: u8 = 6;
    pub const RETRY_MULTIPLIER_PCT: u8 = 7;
    pub const RETRY_MAX_MS: u8 = 8;
    pub const RETRY_JITTER_PCT: u8 = 9;
    pub const RECEIVE_PAUSED: u8 = 10;
    pub const SEND_PAUSED: u8 = 11;
}

/// The settings' keyed extension. Each of the retry policy's keys, and
/// each half's pause, is written only when its value is not the default,
/// so the log of a server that never set one reads in a version before
/// them.
pub(super) fn keyed(out: &mut Vec<u8>, s: &QueueSettings) {
    let mut pairs = vec![
        (setting::DEDUP_WINDOW_MS, s.dedup_window_ms),
        (setting::CONTENT_DEDUP, u64::from(s.content_dedup)),
        (setting::ORDERED, u64::from(s.ordered)),
        (setting::PRIORITY_LEVELS, u64::from(s.priority_levels)),
        (setting::PRIORITY_FAIRNESS, u64::from(s.priority_fairness)),
    ];
    let base = QueueSettings::default();
    let retry = [
        (
            setting::RETRY_INITIAL_MS,
            s.retry_initial_ms,
            base.retry_initial_ms,
        ),
        (
            setting::RETRY_MULTIPLIER_PCT,
            u64::from(s.retry_multiplier_pct),
            u64::from(base.retry_multiplier_pct),
        ),
        (setting::RETRY_MAX_MS, s.retry_max_ms, base.retry_max_ms),
        (
            setting::RETRY_JITTER_PCT,
            u64::from(s.retry_jitter_pct),
            u64::from(base.retry_jitter_pct),
        ),
        (
            setting::RECEIVE_PAUSED,
            u64::from(s.receive_paused),
            u64::from(base.receive_paused),
        ),
        (
            setting::SEND_PAUSED,
            u64::from(s.send_paused),
            u64::from(base.send_paused),
        ),
    ];
    pairs.extend(
        retry
            .into_iter()
            .filter(|(_, v, default)| v != default)
            .map(|(k, v, _)| (k, v)),
    );
    u32_(out, pairs.len() as u32);
    for (k, v) in pairs {
        u8_(out, k);
        u64_(out, v);
    }
}

/// The parts of a message both records and snapshots carry.
pub(super) struct MessageParts<'a> {
    pub(super) at: Spot,
    pub(super) id: Option<MessageId>,
    pub(super) payload: &'a [u8],
    pub(super) attributes: Option<&'a [(Box<str>, Box<str>)]>,
    pub(super) channel: Option<&'a str>,
    pub(super) inserted_at_ms: u64,
    pub(super) visible_at_ms: u64,
    pub(super) expires_at_ms: u64,
    pub(super) delivery_count: u32,
    pub(super) deferred: bool,
    pub(super) dead_letter: Option<&'a DeadLetter>,
}

pub(super) fn message(out: &mut Vec<u8>, m: &MessageParts<'_>) {
    spot(out, &m.at);
    match m.id {
        None => u8_(out, 0),
        Some(id) => {
            u8_(out, 1);
            out.extend_from_slice(&id.0.to_be_bytes());
        }
    }
    u64_(out, m.inserted_at_ms);
    u64_(out, m.visible_at_ms);
    u64_(out, m.expires_at_ms);
    u32_(out, m.delivery_count);
    u8_(out, u8::from(m.deferred));
    opt_str(out, m.channel);
    let attributes = m.attributes.unwrap_or(&[]);
    u32_(out, attributes.len() as u32);
    for (k, v) in attributes {
        bytes_(out, k.as_bytes());
        bytes_(out, v.as_bytes());
    }
    match m.dead_letter {
        None => u8_(out, 0),
        Some(d) => {
            u8_(out, 1);
            bytes_(out, d.source_queue.as_bytes());
            u64_(out, d.at_ms);
            u32_(out, d.delivery_count);
            match &d.reason {
                DeadLetterReason::MaxDeliveries => u8_(out, 0),
                DeadLetterReason::Expired => u8_(out, 1),
                DeadLetterReason::Consumer {
                    reason,
                    description,
                } => {
                    u8_(out, 2);
                    bytes_(out, reason.as_bytes());
                    bytes_(out, description.as_bytes());
                }
            }
        }
    }
    bytes_(out, m.payload);
}

pub(super) fn view_parts<'a>(v: &MessageView<'a>) -> MessageParts<'a> {
    MessageParts {
        at: v.at,
        id: v.id,
        payload: v.payload,
        attributes: v.attributes.map(|a| &a[..]),
        channel: v.channel,
        inserted_at_ms: v.inserted_at_ms,
        visible_at_ms: v.visible_at_ms,
        expires_at_ms: v.expires_at_ms,
        delivery_count: v.delivery_count,
        deferred: false,
        dead_letter: v.dead_letter,
    }
}
