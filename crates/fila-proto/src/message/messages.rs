//! Messages as receive, peek and receive-deferred answer them, both ways:
//! [`Message`] (owned, what a client decodes) and [`MessageRef`] (borrowed,
//! what a server encodes its own messages through with no conversion). Both
//! are written by one function, so they can never disagree.

use super::*;

/// Why a message was dead-lettered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// Where from.
    pub source_queue: String,
    /// When (ms since the epoch).
    pub at_ms: u64,
    /// 1 = max_deliveries, 2 = expired, 3 = consumer.
    pub reason: u8,
    /// The consumer's reason (empty otherwise).
    pub consumer_reason: String,
    /// The consumer's description (empty otherwise).
    pub description: String,
    /// Deliveries it had in its source queue when it was dead-lettered.
    pub delivery_count: u32,
}

/// A message as receive and peek answer it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Unique on the server.
    pub id: u128,
    /// Sequence number.
    pub seq: u64,
    /// The body.
    pub payload: Bytes,
    /// Key/value pairs.
    pub attributes: Vec<(String, String)>,
    /// The channel.
    pub channel: Option<String>,
    /// ms since the epoch.
    pub inserted_at_ms: u64,
    /// ms since the epoch.
    pub expires_at_ms: u64,
    /// ms since the epoch.
    pub next_visible_at_ms: u64,
    /// Deliveries so far.
    pub delivery_count: u32,
    /// 1 visible, 2 in flight, 3 delayed, 4 deferred, 5 dead-lettered.
    pub state: u8,
    /// The lease's receipt, for a delivered message.
    pub receipt: Option<Receipt>,
    /// Where from and why, for a dead letter.
    pub dead_letter: Option<DeadLetter>,
    /// Its group key, when it was put with one.
    pub group: Option<String>,
    /// Its priority level (1 when the queue has none).
    pub priority: u8,
    /// Its failed attempts, oldest first (only in an answer that asked
    /// for [`Fields::ATTEMPTS`]).
    pub attempts: Vec<Attempt>,
}

/// One failed attempt at a message: a delivery whose lease ended without
/// a delete.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attempt {
    /// When its lease ended (ms since the epoch).
    pub at_ms: u64,
    /// Which delivery it was.
    pub delivery: u32,
    /// How: 1 its lease ran out, 2 released as failed, 3 dead-lettered.
    pub end: u8,
    /// The consumer's reason (empty for a lease that ran out).
    pub reason: String,
    /// The consumer's description.
    pub description: String,
}

/// A message with every field, in protocol version `version`.
pub(super) fn put_message_in(w: &mut Writer<'_>, m: &Message, version: u8) {
    put_fields_in(w, m, Fields::ALL, version);
}

/// A message with the groups of `f`, in the order of the full layout, in
/// protocol version `version`.
pub(super) fn put_fields_in(w: &mut Writer<'_>, m: &Message, f: Fields, version: u8) {
    put_view(w, &in_version(MessageRef::of(m), version), f);
}

/// A message as version `version` shows it: version 1 has no group keys
/// and no priority levels (its `channel_and_group` is an `opt<str>`
/// channel).
fn in_version<K: AsRef<str>>(mut m: MessageRef<'_, K>, version: u8) -> MessageRef<'_, K> {
    if version == 1 {
        m.group = None;
        m.priority = 1;
    }
    m
}

/// A message as an answer carries it, borrowed from wherever it lives: a
/// server encodes its own messages through it with no conversion
/// ([`encode_messages`]); [`Message`] is encoded through it too, so the two
/// can never disagree. `K` is how attribute keys and values are held.
#[derive(Clone, Copy, Debug)]
pub struct MessageRef<'a, K: AsRef<str> = String> {
    /// Unique on the server.
    pub id: u128,
    /// Sequence number.
    pub seq: u64,
    /// The body.
    pub payload: &'a [u8],
    /// Key/value pairs.
    pub attributes: &'a [(K, K)],
    /// The channel.
    pub channel: Option<&'a str>,
    /// ms since the epoch.
    pub inserted_at_ms: u64,
    /// ms since the epoch.
    pub expires_at_ms: u64,
    /// ms since the epoch.
    pub next_visible_at_ms: u64,
    /// Deliveries so far.
    pub delivery_count: u32,
    /// As [`Message::state`].
    pub state: u8,
    /// The lease's receipt, for a delivered message.
    pub receipt: Option<Receipt>,
    /// Where from and why, for a dead letter.
    pub dead_letter: Option<DeadLetterRef<'a>>,
    /// Its group key.
    pub group: Option<&'a str>,
    /// Its priority level.
    pub priority: u8,
    /// Its failed attempts (written when the answer asks for
    /// [`Fields::ATTEMPTS`]).
    pub attempts: &'a [Attempt],
}

/// [`DeadLetter`], borrowed.
#[derive(Clone, Copy, Debug)]
pub struct DeadLetterRef<'a> {
    /// Where from.
    pub source_queue: &'a str,
    /// When (ms since the epoch).
    pub at_ms: u64,
    /// As [`DeadLetter::reason`].
    pub reason: u8,
    /// The consumer's reason (empty otherwise).
    pub consumer_reason: &'a str,
    /// The consumer's description (empty otherwise).
    pub description: &'a str,
    /// Deliveries it had in its source queue when it was dead-lettered.
    pub delivery_count: u32,
}

impl<'a> MessageRef<'a> {
    /// A view of an owned message.
    pub fn of(m: &'a Message) -> MessageRef<'a> {
        MessageRef {
            id: m.id,
            seq: m.seq,
            payload: &m.payload,
            attributes: &m.attributes,
            channel: m.channel.as_deref(),
            inserted_at_ms: m.inserted_at_ms,
            expires_at_ms: m.expires_at_ms,
            next_visible_at_ms: m.next_visible_at_ms,
            delivery_count: m.delivery_count,
            state: m.state,
            receipt: m.receipt,
            dead_letter: m.dead_letter.as_ref().map(|d| DeadLetterRef {
                source_queue: &d.source_queue,
                at_ms: d.at_ms,
                reason: d.reason,
                consumer_reason: &d.consumer_reason,
                description: &d.description,
                delivery_count: d.delivery_count,
            }),
            group: m.group.as_deref(),
            priority: m.priority,
            attempts: &m.attempts,
        }
    }
}

impl<K: AsRef<str>> MessageRef<'_, K> {
    /// An owned copy whose payload is `payload`: the caller's owned handle
    /// on the same bytes (`Bytes::copy_from_slice(view.payload)` when it has
    /// none), so a stored body can be shared rather than copied.
    pub fn to_message(&self, payload: Bytes) -> Message {
        debug_assert_eq!(&payload[..], self.payload, "the view's own payload");
        Message {
            id: self.id,
            seq: self.seq,
            payload,
            attributes: self
                .attributes
                .iter()
                .map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned()))
                .collect(),
            channel: self.channel.map(str::to_owned),
            inserted_at_ms: self.inserted_at_ms,
            expires_at_ms: self.expires_at_ms,
            next_visible_at_ms: self.next_visible_at_ms,
            delivery_count: self.delivery_count,
            state: self.state,
            receipt: self.receipt,
            dead_letter: self.dead_letter.map(|d| DeadLetter {
                source_queue: d.source_queue.to_owned(),
                at_ms: d.at_ms,
                reason: d.reason,
                consumer_reason: d.consumer_reason.to_owned(),
                description: d.description.to_owned(),
                delivery_count: d.delivery_count,
            }),
            group: self.group.map(str::to_owned),
            priority: self.priority,
            attempts: self.attempts.to_vec(),
        }
    }
}

/// Appends the whole frame of a receive's or peek's answer (opcode
/// `opcode`) with `messages`, carrying the groups of `fields` (all: the
/// plain answer; fewer: the answer with the fields flag), exactly as
/// [`Response::Messages`] or [`Response::Selected`] would.
///
/// # Panics
/// On more than 65 535 messages (an answer carries at most 100).
pub fn encode_messages<'a, K: AsRef<str> + 'a>(
    opcode: u8,
    request_id: u64,
    fields: Fields,
    messages: impl ExactSizeIterator<Item = MessageRef<'a, K>>,
    buf: &mut BytesMut,
) {
    encode_messages_in(VERSION, opcode, request_id, fields, messages, buf)
}

/// [`encode_messages`] in protocol version `version`, as
/// [`Response::encode_in`] writes messages.
///
/// # Panics
/// On more than 65 535 messages (an answer carries at most 100).
pub fn encode_messages_in<'a, K: AsRef<str> + 'a>(
    version: u8,
    opcode: u8,
    request_id: u64,
    fields: Fields,
    messages: impl ExactSizeIterator<Item = MessageRef<'a, K>>,
    buf: &mut BytesMut,
) {
    let all = fields == Fields::ALL;
    let flags = if all {
        flags::RESPONSE
    } else {
        flags::RESPONSE | flags::FIELDS
    };
    let start = begin_frame_in(version, buf, opcode, flags, request_id);
    let w = &mut Writer(buf);
    if !all {
        w.u8(fields.0);
    }
    let n = u16::try_from(messages.len()).expect("an answer of at most 65 535 messages");
    w.u16(n);
    for m in messages {
        put_view(w, &in_version(m, version), fields);
    }
    end_frame(buf, start);
}

/// Tags of a message's channel byte: which of its channel and its group
/// key follow (a message without a group is written as before groups
/// existed: an option of its channel).
mod tag {
    pub const CHANNEL: u8 = 1;
    pub const GROUP: u8 = 2;
    pub const PRIORITY: u8 = 4;
}

fn channel_and_group(w: &mut Writer<'_>, channel: Option<&str>, group: Option<&str>, priority: u8) {
    let tag = if channel.is_some() { tag::CHANNEL } else { 0 }
        | if group.is_some() { tag::GROUP } else { 0 }
        | if priority > 1 { tag::PRIORITY } else { 0 };
    w.u8(tag);
    if let Some(c) = channel {
        w.str(c);
    }
    if let Some(g) = group {
        w.str(g);
    }
    if priority > 1 {
        w.u8(priority);
    }
}

type ChannelAndGroup = (Option<String>, Option<String>, u8);

fn get_channel_and_group(r: &mut Reader) -> Result<ChannelAndGroup, ProtoError> {
    let tag = r.u8()?;
    if tag & !(tag::CHANNEL | tag::GROUP | tag::PRIORITY) != 0 {
        return Err(ProtoError::Malformed("a message's channel tag is 0 to 7"));
    }
    let channel = r.flagged(tag & tag::CHANNEL != 0, Reader::str)?;
    let group = r.flagged(tag & tag::GROUP != 0, Reader::str)?;
    let priority = r.flagged(tag & tag::PRIORITY != 0, Reader::u8)?;
    Ok((channel, group, priority.unwrap_or(1)))
}

/// A message view with the groups of `f`, in the order of the full layout.
fn put_view<K: AsRef<str>>(w: &mut Writer<'_>, m: &MessageRef<'_, K>, f: Fields) {
    if f.contains(Fields::ID) {
        w.u128(m.id);
        w.u64(m.seq);
    }
    w.bytes(m.payload);
    if f.contains(Fields::ATTRIBUTES) {
        w.list(m.attributes, |w, (k, v)| {
            w.str(k.as_ref());
            w.str(v.as_ref());
        });
        channel_and_group(w, m.channel, m.group, m.priority);
    }
    if f.contains(Fields::TIMES) {
        w.u64(m.inserted_at_ms);
        w.u64(m.expires_at_ms);
        w.u64(m.next_visible_at_ms);
    }
    if f.contains(Fields::DELIVERY) {
        w.u32(m.delivery_count);
        w.u8(m.state);
    }
    w.opt(&m.receipt, |w, r| w.array(r));
    if f.contains(Fields::DELIVERY) {
        w.opt(&m.dead_letter, |w, d| {
            w.str(d.source_queue);
            w.u64(d.at_ms);
            w.u8(d.reason);
            w.str(d.consumer_reason);
            w.str(d.description);
            w.u32(d.delivery_count);
        });
    }
    if f.contains(Fields::ATTEMPTS) {
        w.list(m.attempts, |w, a| {
            w.u64(a.at_ms);
            w.u32(a.delivery);
            w.u8(a.end);
            w.str(&a.reason);
            w.str(&a.description);
        });
    }
}

pub(super) fn get_message(r: &mut Reader) -> Result<Message, ProtoError> {
    get_fields(r, Fields::ALL)
}

/// A message laid out by [`put_fields`]; absent groups are zero or empty.
pub(super) fn get_fields(r: &mut Reader, f: Fields) -> Result<Message, ProtoError> {
    let (id, seq) = if f.contains(Fields::ID) {
        (r.u128()?, r.u64()?)
    } else {
        (0, 0)
    };
    let payload = r.bytes()?;
    let (attributes, (channel, group, priority)) = if f.contains(Fields::ATTRIBUTES) {
        (get_pairs(r)?, get_channel_and_group(r)?)
    } else {
        (Vec::new(), (None, None, 1))
    };
    let (inserted_at_ms, expires_at_ms, next_visible_at_ms) = if f.contains(Fields::TIMES) {
        (r.u64()?, r.u64()?, r.u64()?)
    } else {
        (0, 0, 0)
    };
    let (delivery_count, state) = if f.contains(Fields::DELIVERY) {
        (r.u32()?, r.u8()?)
    } else {
        (0, 0)
    };
    let receipt = r.opt(Reader::array::<RECEIPT_LEN>)?;
    let dead_letter = if f.contains(Fields::DELIVERY) {
        r.opt(|r| {
            Ok(DeadLetter {
                source_queue: r.str()?,
                at_ms: r.u64()?,
                reason: r.u8()?,
                consumer_reason: r.str()?,
                description: r.str()?,
                delivery_count: r.u32()?,
            })
        })?
    } else {
        None
    };
    let attempts = if f.contains(Fields::ATTEMPTS) {
        // An attempt takes 17 bytes at least.
        r.list(17, |r| {
            Ok(Attempt {
                at_ms: r.u64()?,
                delivery: r.u32()?,
                end: r.u8()?,
                reason: r.str()?,
                description: r.str()?,
            })
        })?
    } else {
        Vec::new()
    };
    Ok(Message {
        id,
        seq,
        payload,
        attributes,
        channel,
        inserted_at_ms,
        expires_at_ms,
        next_visible_at_ms,
        delivery_count,
        state,
        receipt,
        dead_letter,
        group,
        priority,
        attempts,
    })
}
