//! Log records and snapshots as bytes.
//!
//! A record is a kind (one byte, the log's) and a body; integers are
//! big-endian, strings and byte strings are a `u32` length and the bytes,
//! options a `u8` flag. A snapshot body (version 2, written as a stream)
//! is a `u32` version and then frames — `u8` kind, `u32` length, bytes —
//! each a queue (id, name, settings, next sequence number, the settings'
//! extension, move tasks), a message (as a stored record carries it), or
//! the end (the next queue id), so it is read back a frame at a time
//! (`snapshot.rs`); version 1 (read only) is the version, the queues, and
//! each queue's messages. Decoding never panics and never
//! trusts a length: a body that does not parse whole is an error (the
//! log's CRC makes that a bug or a disk that lies, never a torn write).

use std::sync::Arc;

use fila_core::event::{DedupMark, Event, MessageImage, Spot};

use fila_core::{
    Attempt, AttemptEnd, DeadLetter, DeadLetterReason, MessageId, MoveFilter, MoveStatus, MoveTask,
    Payload, QueueSettings, QueueTimes,
};

use write::*;

/// Record kinds.
pub mod kind {
    /// A queue created or changed: id, name, settings.
    pub const QUEUE_SET: u8 = 1;
    /// A queue deleted: id.
    pub const QUEUE_DELETED: u8 = 2;
    /// A queue or its DLQ purged: id, dlq.
    pub const PURGED: u8 = 3;
    /// A message stored, maybe moved from somewhere: from, message.
    pub const STORED: u8 = 4;
    /// A message gone: spot.
    pub const REMOVED: u8 = 5;
    /// A message deferred or taken back: spot, flag.
    pub const DEFERRED: u8 = 6;
    /// A message delivered: spot, count (read only: [`DELIVERED_2`] is
    /// written).
    pub const DELIVERED: u8 = 7;
    /// A queue created or changed: id, name, settings and their extension
    /// (what [`QUEUE_SET`], read only now, did not carry).
    pub const QUEUE_SET_2: u8 = 8;
    /// A queue's move tasks, whole: id, tasks.
    pub const MOVES_SET: u8 = 9;
    /// A queue created or changed: what [`QUEUE_SET_2`] carries and the
    /// settings' keyed extension (deduplication).
    pub const QUEUE_SET_3: u8 = 10;
    /// A message stored with parts [`STORED`] does not carry (its group):
    /// from, message, then [`super::more`] flags and the parts flagged.
    pub const STORED_2: u8 = 11;
    /// A message delivered: spot, count, when its lease ends (what
    /// [`DELIVERED`], read only now, did not carry).
    pub const DELIVERED_2: u8 = 12;
    /// A lease's end changed: spot, when it ends.
    pub const LEASE_SET: u8 = 13;
    /// A lease ended and its message waits for its retry: spot, when it
    /// is visible again.
    pub const RETRY: u8 = 14;
    /// A failed attempt a message keeps: spot, the attempt (see
    /// [`super::more::ATTEMPTS`]).
    pub const ATTEMPT: u8 = 15;
    /// A queue's move tasks, whole, some with a filter: id, tasks, their
    /// filters (what [`MOVES_SET`], still written when no task has one,
    /// does not carry).
    pub const MOVES_SET_2: u8 = 16;
}

/// Flags of a message's optional parts, after the message in a
/// [`kind::STORED_2`] record or a snapshot's `MESSAGE_2` frame: which
/// follow, in this order. An unknown flag does not parse.
pub(crate) mod more {
    /// The deduplication key its put remembers (records only).
    pub const DEDUP: u8 = 1;
    /// Its group key.
    pub const GROUP: u8 = 2;
    /// Its priority level (a `u8`, when above 1).
    pub const PRIORITY: u8 = 4;
    /// When its last lease ends (a `u64`, when not 0; snapshots only).
    pub const LEASE: u8 = 8;
    /// Its failed attempts: a `u32` count, then each one's `u64` time,
    /// `u32` delivery, `u8` end (1 expired, 2 released, 3 dead-lettered),
    /// reason, description.
    pub const ATTEMPTS: u8 = 16;
    pub const KNOWN: u8 = DEDUP | GROUP | PRIORITY | LEASE | ATTEMPTS;
}

/// A message's optional parts: flags, then each one present.
pub(crate) fn message_more(
    out: &mut Vec<u8>,
    dedup: Option<&DedupMark>,
    group: Option<&str>,
    priority: u8,
    lease_until: u64,
    attempts: &[Attempt],
) {
    let flags = if dedup.is_some() { more::DEDUP } else { 0 }
        | if group.is_some() { more::GROUP } else { 0 }
        | if priority > 1 { more::PRIORITY } else { 0 }
        | if lease_until > 0 { more::LEASE } else { 0 }
        | if attempts.is_empty() {
            0
        } else {
            more::ATTEMPTS
        };
    u8_(out, flags);
    if let Some(d) = dedup {
        out.extend_from_slice(&d.key.to_be_bytes());
        u64_(out, d.expires_at_ms);
    }
    if let Some(g) = group {
        bytes_(out, g.as_bytes());
    }
    if priority > 1 {
        u8_(out, priority);
    }
    if lease_until > 0 {
        u64_(out, lease_until);
    }
    if !attempts.is_empty() {
        u32_(out, attempts.len() as u32);
        for a in attempts {
            attempt(out, a);
        }
    }
}

/// One failed attempt's bytes (see [`more::ATTEMPTS`]).
pub(crate) fn attempt(out: &mut Vec<u8>, a: &Attempt) {
    u64_(out, a.at_ms);
    u32_(out, a.delivery);
    u8_(
        out,
        match a.end {
            AttemptEnd::Expired => 1,
            AttemptEnd::Released => 2,
            AttemptEnd::DeadLettered => 3,
        },
    );
    bytes_(out, a.reason.as_bytes());
    bytes_(out, a.description.as_bytes());
}

/// A message's optional parts as read: its put's deduplication key, its
/// group key, its priority level, when its last lease ends, its failed
/// attempts.
pub(crate) type MoreParts = (Option<DedupMark>, Option<Arc<str>>, u8, u64, Vec<Attempt>);

/// Whether a message needs [`message_more`] (a group, a level above 1, a
/// lease's end or failed attempts).
pub(crate) fn needs_more(
    group: Option<&str>,
    priority: u8,
    lease_until: u64,
    attempts: &[Attempt],
) -> bool {
    group.is_some() || priority > 1 || lease_until > 0 || !attempts.is_empty()
}

/// A record or snapshot that does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{what}")]
pub struct CodecError {
    /// What is wrong.
    pub what: &'static str,
}

fn bad(what: &'static str) -> CodecError {
    CodecError { what }
}

/// A decoded record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// See [`Event::QueueSet`].
    QueueSet {
        /// Id.
        queue: u32,
        /// Name.
        name: String,
        /// Settings.
        settings: QueueSettings,
        /// When it was created and last changed.
        times: QueueTimes,
    },
    /// See [`Event::MovesSet`].
    MovesSet {
        /// Id.
        queue: u32,
        /// Its tasks, oldest first.
        tasks: Vec<MoveTask>,
    },
    /// See [`Event::QueueDeleted`].
    QueueDeleted {
        /// Id.
        queue: u32,
    },
    /// See [`Event::Purged`].
    Purged {
        /// Id.
        queue: u32,
        /// The DLQ.
        dlq: bool,
    },
    /// See [`Event::Stored`].
    Stored {
        /// The queue it is now in.
        queue: u32,
        /// The message.
        message: MessageImage,
        /// Where it was.
        from: Option<Spot>,
        /// The deduplication key its put remembers.
        dedup: Option<DedupMark>,
    },
    /// See [`Event::Removed`].
    Removed {
        /// Where it was.
        at: Spot,
    },
    /// See [`Event::Deferred`].
    Deferred {
        /// The message.
        at: Spot,
        /// Deferred now.
        deferred: bool,
    },
    /// See [`Event::Delivered`].
    Delivered {
        /// The message.
        at: Spot,
        /// Its count.
        count: u32,
        /// When its lease ends (0: a record of the first format, which
        /// did not say).
        until: u64,
    },
    /// See [`Event::LeaseSet`].
    LeaseSet {
        /// The message.
        at: Spot,
        /// When its lease ends.
        until: u64,
    },
    /// See [`Event::Retry`].
    Retry {
        /// The message.
        at: Spot,
        /// When it is visible again.
        visible_at: u64,
    },
    /// See [`Event::Attempt`].
    Attempt {
        /// The message.
        at: Spot,
        /// The attempt.
        attempt: Attempt,
    },
}

/// Appends an event's record body to `out`; answers its kind.
pub fn encode_event(event: &Event<'_>, out: &mut Vec<u8>) -> u8 {
    match event {
        Event::QueueSet {
            queue,
            name,
            settings: s,
            times,
        } => {
            u32_(out, *queue);
            bytes_(out, name.as_bytes());
            settings(out, s);
            extension(out, s, *times);
            keyed(out, s);
            kind::QUEUE_SET_3
        }
        Event::QueueDeleted { queue } => {
            u32_(out, *queue);
            kind::QUEUE_DELETED
        }
        Event::MovesSet { queue, tasks: t } => {
            u32_(out, *queue);
            tasks(out, t);
            if any_filter(t) {
                filters(out, t);
                kind::MOVES_SET_2
            } else {
                kind::MOVES_SET
            }
        }
        Event::Purged { queue, dlq } => {
            u32_(out, *queue);
            u8_(out, u8::from(*dlq));
            kind::PURGED
        }
        Event::Stored {
            message: m,
            from,
            dedup,
        } => {
            match from {
                None => u8_(out, 0),
                Some(f) => {
                    u8_(out, 1);
                    spot(out, f);
                }
            }
            message(out, &view_parts(m));
            if needs_more(m.group, m.priority, 0, m.attempts) {
                message_more(out, dedup.as_ref(), m.group, m.priority, 0, m.attempts);
                return kind::STORED_2;
            }
            // Added later, at the end: a record without it reads as before.
            if let Some(d) = dedup {
                out.extend_from_slice(&d.key.to_be_bytes());
                u64_(out, d.expires_at_ms);
            }
            kind::STORED
        }
        Event::Removed { at } => {
            spot(out, at);
            kind::REMOVED
        }
        Event::Deferred { at, deferred } => {
            spot(out, at);
            u8_(out, u8::from(*deferred));
            kind::DEFERRED
        }
        Event::Delivered { at, count, until } => {
            spot(out, at);
            u32_(out, *count);
            u64_(out, *until);
            kind::DELIVERED_2
        }
        Event::LeaseSet { at, until } => {
            spot(out, at);
            u64_(out, *until);
            kind::LEASE_SET
        }
        Event::Retry { at, visible_at } => {
            spot(out, at);
            u64_(out, *visible_at);
            kind::RETRY
        }
        Event::Attempt { at, attempt: a } => {
            spot(out, at);
            attempt(out, a);
            kind::ATTEMPT
        }
    }
}

// ----- reading ---------------------------------------------------------------

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8]) -> Reader<'a> {
        Reader { data, at: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if self.data.len() - self.at < n {
            return Err(bad("a field runs past the end"));
        }
        let s = &self.data[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }
    fn flag(&mut self) -> Result<bool, CodecError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(bad("a flag is neither 0 nor 1")),
        }
    }
    fn u32(&mut self) -> Result<u32, CodecError> {
        let mut b = [0; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_be_bytes(b))
    }
    fn u64(&mut self) -> Result<u64, CodecError> {
        let mut b = [0; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(b))
    }
    fn bytes(&mut self) -> Result<&'a [u8], CodecError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn str(&mut self) -> Result<&'a str, CodecError> {
        std::str::from_utf8(self.bytes()?).map_err(|_| bad("a string is not UTF-8"))
    }
    fn opt_str(&mut self) -> Result<Option<&'a str>, CodecError> {
        Ok(if self.flag()? {
            Some(self.str()?)
        } else {
            None
        })
    }
    fn spot(&mut self) -> Result<Spot, CodecError> {
        Ok(Spot {
            queue: self.u32()?,
            dlq: self.flag()?,
            seq: self.u64()?,
        })
    }
    fn settings(&mut self) -> Result<QueueSettings, CodecError> {
        Ok(QueueSettings {
            visibility_timeout_ms: self.u64()?,
            max_deliveries: self.u32()?,
            retention_ms: self.u64()?,
            max_message_bytes: self.u32()?,
            receive_wait_default_ms: self.u64()?,
            dead_letter_on_expiration: self.flag()?,
            dead_letter_target: self.opt_str()?.map(str::to_owned),
            max_messages: self.u64()?,
            max_bytes: self.u64()?,
            channel_capacity_pct: self.u8()?,
            ..QueueSettings::default()
        })
    }
    /// Reads a queue's move [`tasks`].
    fn tasks(&mut self) -> Result<Vec<MoveTask>, CodecError> {
        let n = self.u32()? as usize;
        // A task takes at least 57 bytes.
        if n > (self.data.len() - self.at) / 57 {
            return Err(bad("more move tasks than bytes"));
        }
        (0..n)
            .map(|_| {
                Ok(MoveTask {
                    id: self.u64()?,
                    from_dlq: self.flag()?,
                    to: self.opt_str()?.map(str::to_owned),
                    rate: self.u32()?,
                    started_at_ms: self.u64()?,
                    moved: self.u64()?,
                    to_move: self.u64()?,
                    max: if self.flag()? {
                        Some(self.u64()?)
                    } else {
                        None
                    },
                    status: MoveStatus::of_code(self.u8()?)
                        .ok_or(bad("unknown move task status"))?,
                    failure: self.opt_str()?.map(str::to_owned),
                    cursor: self.u64()?,
                    end: self.u64()?,
                    filter: None,
                })
            })
            .collect()
    }
    /// Reads the [`filters`] of a queue's move tasks into `tasks`.
    fn filters(&mut self, tasks: &mut [MoveTask]) -> Result<(), CodecError> {
        let n = self.u32()? as usize;
        // A filter takes at least 22 bytes.
        if n > (self.data.len() - self.at) / 22 {
            return Err(bad("more move filters than bytes"));
        }
        for _ in 0..n {
            let id = self.u64()?;
            let pairs = self.u32()? as usize;
            if pairs > (self.data.len() - self.at) / 8 {
                return Err(bad("more filter attributes than bytes"));
            }
            let attributes = (0..pairs)
                .map(|_| Ok((self.str()?.to_owned(), self.str()?.to_owned())))
                .collect::<Result<_, CodecError>>()?;
            let reason = self.opt_str()?.map(str::to_owned);
            let text = self.opt_str()?.map(str::to_owned);
            let mut time = || -> Result<Option<u64>, CodecError> {
                Ok(if self.flag()? {
                    Some(self.u64()?)
                } else {
                    None
                })
            };
            let (since_ms, until_ms) = (time()?, time()?);
            let task = tasks
                .iter_mut()
                .find(|t| t.id == id)
                .ok_or(bad("a filter of no move task"))?;
            task.filter = Some(Box::new(MoveFilter {
                attributes,
                reason,
                text,
                since_ms,
                until_ms,
            }));
        }
        Ok(())
    }
    /// Reads a message's optional parts ([`message_more`]).
    pub(crate) fn more(&mut self) -> Result<MoreParts, CodecError> {
        let flags = self.u8()?;
        if flags & !more::KNOWN != 0 {
            return Err(bad(
                "an unknown part of a message (written by a newer version?)",
            ));
        }
        let dedup = if flags & more::DEDUP != 0 {
            Some(DedupMark {
                key: self.u128()?,
                expires_at_ms: self.u64()?,
            })
        } else {
            None
        };
        let group = if flags & more::GROUP != 0 {
            Some(Arc::from(self.str()?))
        } else {
            None
        };
        let priority = if flags & more::PRIORITY != 0 {
            match self.u8()? {
                p @ 2..=10 => p,
                _ => return Err(bad("a priority level is 2 to 10")),
            }
        } else {
            1
        };
        let lease = if flags & more::LEASE != 0 {
            match self.u64()? {
                0 => return Err(bad("a lease's end is not 0")),
                l => l,
            }
        } else {
            0
        };
        let attempts = if flags & more::ATTEMPTS != 0 {
            let n = self.u32()? as usize;
            // An attempt takes 21 bytes at least.
            if n == 0 || n > (self.data.len() - self.at) / 21 {
                return Err(bad("a count of attempts past the bytes"));
            }
            (0..n).map(|_| self.attempt()).collect::<Result<_, _>>()?
        } else {
            Vec::new()
        };
        Ok((dedup, group, priority, lease, attempts))
    }
    /// Reads one failed attempt ([`attempt`]).
    pub(crate) fn attempt(&mut self) -> Result<Attempt, CodecError> {
        Ok(Attempt {
            at_ms: self.u64()?,
            delivery: self.u32()?,
            end: match self.u8()? {
                1 => AttemptEnd::Expired,
                2 => AttemptEnd::Released,
                3 => AttemptEnd::DeadLettered,
                _ => return Err(bad("an unknown end of an attempt")),
            },
            reason: self.str()?.to_owned(),
            description: self.str()?.to_owned(),
        })
    }
    /// Reads the settings' [`keyed`] extension into `s`.
    fn keyed(&mut self, s: &mut QueueSettings) -> Result<(), CodecError> {
        let n = self.u32()? as usize;
        // A pair takes 9 bytes.
        if n > (self.data.len() - self.at) / 9 {
            return Err(bad("more settings than bytes"));
        }
        for _ in 0..n {
            let (k, v) = (self.u8()?, self.u64()?);
            match k {
                setting::DEDUP_WINDOW_MS => s.dedup_window_ms = v,
                setting::CONTENT_DEDUP => s.content_dedup = v != 0,
                setting::ORDERED => s.ordered = v != 0,
                setting::PRIORITY_LEVELS => {
                    s.priority_levels =
                        u8::try_from(v).map_err(|_| bad("priority levels past 255"))?
                }
                setting::PRIORITY_FAIRNESS => {
                    s.priority_fairness =
                        u32::try_from(v).map_err(|_| bad("priority fairness past 2^32"))?
                }
                setting::RETRY_INITIAL_MS => s.retry_initial_ms = v,
                setting::RETRY_MULTIPLIER_PCT => {
                    s.retry_multiplier_pct =
                        u32::try_from(v).map_err(|_| bad("retry multiplier past 2^32"))?
                }
                setting::RETRY_MAX_MS => s.retry_max_ms = v,
                setting::RETRY_JITTER_PCT => {
                    s.retry_jitter_pct =
                        u8::try_from(v).map_err(|_| bad("retry jitter past 255"))?
                }
                setting::RECEIVE_PAUSED => s.receive_paused = v != 0,
                setting::SEND_PAUSED => s.send_paused = v != 0,
                _ => return Err(bad("an unknown setting (written by a newer version?)")),
            }
        }
        Ok(())
    }
    /// A 128-bit value.
    fn u128(&mut self) -> Result<u128, CodecError> {
        let mut b = [0; 16];
        b.copy_from_slice(self.take(16)?);
        Ok(u128::from_be_bytes(b))
    }
    /// Reads the settings' [`extension`] into `s`; answers the times.
    fn extension(&mut self, s: &mut QueueSettings) -> Result<QueueTimes, CodecError> {
        s.delay_ms = self.u64()?;
        s.redrive_allow = self.opt_str()?.map(str::to_owned);
        let n = self.u32()? as usize;
        // A tag takes at least 8 bytes.
        if n > (self.data.len() - self.at) / 8 {
            return Err(bad("more tags than bytes"));
        }
        s.tags = (0..n)
            .map(|_| Ok((self.str()?.to_owned(), self.str()?.to_owned())))
            .collect::<Result<_, CodecError>>()?;
        Ok(QueueTimes {
            created_at_ms: self.u64()?,
            modified_at_ms: self.u64()?,
        })
    }
    /// A message; answers its queue id and image.
    fn message(&mut self) -> Result<(u32, MessageImage), CodecError> {
        let at = self.spot()?;
        let id = if self.flag()? {
            let mut b = [0; 16];
            b.copy_from_slice(self.take(16)?);
            Some(MessageId(u128::from_be_bytes(b)))
        } else {
            None
        };
        let inserted_at_ms = self.u64()?;
        let visible_at_ms = self.u64()?;
        let expires_at_ms = self.u64()?;
        let delivery_count = self.u32()?;
        let deferred = self.flag()?;
        let channel = self.opt_str()?.map(Arc::from);
        let n = self.u32()? as usize;
        // Each pair takes at least 8 bytes: never allocate past the data.
        if n > (self.data.len() - self.at) / 8 {
            return Err(bad("more attributes than bytes"));
        }
        let attributes = if n == 0 {
            None
        } else {
            let mut pairs = Vec::with_capacity(n);
            for _ in 0..n {
                let k: Box<str> = self.str()?.into();
                let v: Box<str> = self.str()?.into();
                pairs.push((k, v));
            }
            Some(Arc::from(pairs))
        };
        let dead_letter = if self.flag()? {
            let source_queue: Arc<str> = Arc::from(self.str()?);
            let at_ms = self.u64()?;
            let count = self.u32()?;
            let reason = match self.u8()? {
                0 => DeadLetterReason::MaxDeliveries,
                1 => DeadLetterReason::Expired,
                2 => DeadLetterReason::Consumer {
                    reason: self.str()?.to_owned(),
                    description: self.str()?.to_owned(),
                },
                _ => return Err(bad("unknown dead-letter reason")),
            };
            Some(Arc::new(DeadLetter {
                source_queue,
                at_ms,
                reason,
                delivery_count: count,
            }))
        } else {
            None
        };
        let payload = self.bytes()?;
        Ok((
            at.queue,
            MessageImage {
                dlq: at.dlq,
                seq: at.seq,
                id,
                payload: Payload::copy_from_slice(payload),
                attributes,
                channel,
                inserted_at_ms,
                visible_at_ms,
                expires_at_ms,
                delivery_count,
                deferred,
                dead_letter,
                group: None,
                priority: 1,
                lease_until_ms: 0,
                attempts: Vec::new(),
            },
        ))
    }
    fn end(&self) -> Result<(), CodecError> {
        if self.at == self.data.len() {
            Ok(())
        } else {
            Err(bad("bytes left after the last field"))
        }
    }
}

/// Decodes a record body of `kind`.
pub fn decode(kind: u8, body: &[u8]) -> Result<Op, CodecError> {
    let mut r = Reader::new(body);
    let op = match kind {
        kind::QUEUE_SET => Op::QueueSet {
            queue: r.u32()?,
            name: r.str()?.to_owned(),
            settings: r.settings()?,
            times: QueueTimes::default(),
        },
        kind @ (kind::QUEUE_SET_2 | kind::QUEUE_SET_3) => {
            let queue = r.u32()?;
            let name = r.str()?.to_owned();
            let mut settings = r.settings()?;
            let times = r.extension(&mut settings)?;
            if kind == kind::QUEUE_SET_3 {
                r.keyed(&mut settings)?;
            }
            Op::QueueSet {
                queue,
                name,
                settings,
                times,
            }
        }
        kind::QUEUE_DELETED => Op::QueueDeleted { queue: r.u32()? },
        kind @ (kind::MOVES_SET | kind::MOVES_SET_2) => {
            let queue = r.u32()?;
            let mut tasks = r.tasks()?;
            if kind == kind::MOVES_SET_2 {
                r.filters(&mut tasks)?;
            }
            Op::MovesSet { queue, tasks }
        }
        kind::PURGED => Op::Purged {
            queue: r.u32()?,
            dlq: r.flag()?,
        },
        kind @ (kind::STORED | kind::STORED_2) => {
            let from = if r.flag()? { Some(r.spot()?) } else { None };
            let (queue, mut message) = r.message()?;
            let dedup = if kind == kind::STORED_2 {
                let (dedup, group, priority, lease, attempts) = r.more()?;
                if lease != 0 {
                    return Err(bad("a stored message carries no lease"));
                }
                (message.group, message.priority, message.attempts) = (group, priority, attempts);
                dedup
            } else if r.at < r.data.len() {
                Some(DedupMark {
                    key: r.u128()?,
                    expires_at_ms: r.u64()?,
                })
            } else {
                None
            };
            Op::Stored {
                queue,
                message,
                from,
                dedup,
            }
        }
        kind::REMOVED => Op::Removed { at: r.spot()? },
        kind::DEFERRED => Op::Deferred {
            at: r.spot()?,
            deferred: r.flag()?,
        },
        kind::DELIVERED => Op::Delivered {
            at: r.spot()?,
            count: r.u32()?,
            until: 0,
        },
        kind::DELIVERED_2 => Op::Delivered {
            at: r.spot()?,
            count: r.u32()?,
            until: r.u64()?,
        },
        kind::LEASE_SET => Op::LeaseSet {
            at: r.spot()?,
            until: r.u64()?,
        },
        kind::RETRY => Op::Retry {
            at: r.spot()?,
            visible_at: r.u64()?,
        },
        kind::ATTEMPT => Op::Attempt {
            at: r.spot()?,
            attempt: r.attempt()?,
        },
        _ => return Err(bad("unknown record kind")),
    };
    r.end()?;
    Ok(op)
}

mod batch;
mod snapshot;
mod write;

pub use batch::{batch_push, batch_records};

pub use snapshot::{
    decode_snapshot, encode_dedup_part, encode_image, encode_message_part, encode_part,
    encode_queue_part, encode_snapshot, encode_snapshot_end, encode_snapshot_start, read_snapshot,
    SNAPSHOT_VERSION,
};
