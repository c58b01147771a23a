//! Move tasks as the engine answers them: a redrive, or a move out of a
//! queue (docs/engine.md "The DLQ and redrive"), with the filter that
//! chooses their messages and the preview that counts them first.

use crate::error::Error;
use crate::limits::{
    ATTRIBUTES_BYTES_MAX, ATTRIBUTES_MAX, ATTRIBUTE_KEY_LEN_MAX, DEAD_LETTER_DESCRIPTION_LEN_MAX,
    DEAD_LETTER_REASON_LEN_MAX,
};
use crate::types::{Attempt, Attempts, Attributes, DeadLetter, DeadLetterReason, Message};

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
    /// Which messages it takes (`None`: every one).
    pub filter: Option<Box<MoveFilter>>,
}

/// Which messages a move task takes, or a preview counts: each condition
/// given must hold (docs/engine.md "Filtered redrive and move").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MoveFilter {
    /// Attributes it has, each with exactly this value.
    pub attributes: Vec<(String, String)>,
    /// Equals a reason it failed for: its dead-letter record's reason
    /// (`max_deliveries`, `expired`, or its consumer's reason) or the
    /// consumer's reason of an attempt it keeps.
    pub reason: Option<String>,
    /// Is contained in a consumer's reason or description: its
    /// dead-letter record's or an attempt's it keeps (case-sensitive).
    pub text: Option<String>,
    /// Its time is at or after this (ms since the epoch): when it was
    /// dead-lettered, else when it entered its queue.
    pub since_ms: Option<u64>,
    /// Its time is before this (see `since_ms`).
    pub until_ms: Option<u64>,
}

impl MoveFilter {
    /// Whether it has no condition (it takes every message).
    pub fn is_empty(&self) -> bool {
        *self == MoveFilter::default()
    }

    /// Checks its limits: at most [`ATTRIBUTES_MAX`] attributes with
    /// names of 1–[`ATTRIBUTE_KEY_LEN_MAX`] bytes and [`ATTRIBUTES_BYTES_MAX`]
    /// bytes in all, a reason of 1–[`DEAD_LETTER_REASON_LEN_MAX`] bytes,
    /// a text of 1–[`DEAD_LETTER_DESCRIPTION_LEN_MAX`], `since` before
    /// `until`.
    pub fn check(&self) -> Result<(), Error> {
        if self.attributes.len() > ATTRIBUTES_MAX {
            return Err(Error::invalid(
                "filter.attributes",
                format!(
                    "must be at most {ATTRIBUTES_MAX} (got {})",
                    self.attributes.len()
                ),
            ));
        }
        let mut bytes = 0;
        for (k, v) in &self.attributes {
            if k.is_empty() || k.len() > ATTRIBUTE_KEY_LEN_MAX {
                return Err(Error::invalid(
                    "filter.attributes",
                    format!("names are 1..={ATTRIBUTE_KEY_LEN_MAX} bytes"),
                ));
            }
            bytes += k.len() + v.len();
        }
        if bytes > ATTRIBUTES_BYTES_MAX {
            return Err(Error::invalid(
                "filter.attributes",
                format!("must be at most {ATTRIBUTES_BYTES_MAX} bytes in all (got {bytes})"),
            ));
        }
        for (field, value, max) in [
            ("filter.reason", &self.reason, DEAD_LETTER_REASON_LEN_MAX),
            ("filter.text", &self.text, DEAD_LETTER_DESCRIPTION_LEN_MAX),
        ] {
            if let Some(v) = value {
                if v.is_empty() || v.len() > max {
                    return Err(Error::invalid(
                        field,
                        format!("must be 1..={max} bytes when given (got {})", v.len()),
                    ));
                }
            }
        }
        if let (Some(since), Some(until)) = (self.since_ms, self.until_ms) {
            if since >= until {
                return Err(Error::invalid(
                    "filter.until_ms",
                    format!("must be after since_ms (got {since}..{until})"),
                ));
            }
        }
        Ok(())
    }

    /// Whether a message with these parts meets every condition.
    pub fn matches(
        &self,
        attributes: Option<&Attributes>,
        dead_letter: Option<&DeadLetter>,
        attempts: Option<&Attempts>,
        inserted_at_ms: u64,
    ) -> bool {
        let attempts: &[Attempt] = attempts.map_or(&[], |a| a.as_slice());
        let consumer = match dead_letter.map(|d| &d.reason) {
            Some(DeadLetterReason::Consumer {
                reason,
                description,
            }) => Some((reason.as_str(), description.as_str())),
            _ => None,
        };
        let has = |k: &str, v: &str| {
            attributes.is_some_and(|a| a.iter().any(|(ak, av)| &**ak == k && &**av == v))
        };
        if !self.attributes.iter().all(|(k, v)| has(k, v)) {
            return false;
        }
        if let Some(want) = &self.reason {
            let of_dead_letter = dead_letter.is_some_and(|d| d.reason.as_str() == want)
                || consumer.is_some_and(|(r, _)| r == want);
            if !of_dead_letter && !attempts.iter().any(|a| &a.reason == want) {
                return false;
            }
        }
        if let Some(text) = &self.text {
            let said = consumer.into_iter().chain(
                attempts
                    .iter()
                    .map(|a| (a.reason.as_str(), a.description.as_str())),
            );
            if !said
                .into_iter()
                .any(|(r, d)| r.contains(text.as_str()) || d.contains(text.as_str()))
            {
                return false;
            }
        }
        let at = dead_letter.map_or(inserted_at_ms, |d| d.at_ms);
        self.since_ms.is_none_or(|s| at >= s) && self.until_ms.is_none_or(|u| at < u)
    }
}

/// Index entries one preview call looks at, at most: a longer queue is
/// counted a page at a time (see [`MovePreview::next`]).
pub const PREVIEW_LOOK_MAX: u64 = 10_000;

/// Matching messages a preview shows, at most.
pub const PREVIEW_SHOW_MAX: usize = 20;

/// What a preview of a move found in one bounded look.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MovePreview {
    /// Visible messages the move would take, in the part looked at.
    pub matched: u64,
    /// The first of them in sequence order, at most
    /// [`PREVIEW_SHOW_MAX`].
    pub first: Vec<Message>,
    /// Where to go on (a sequence number) when the look stopped at
    /// [`PREVIEW_LOOK_MAX`] entries before the end; `None`: it reached it.
    pub next: Option<u64>,
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
