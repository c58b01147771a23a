//! Requests encoded from borrowed data: a client's hot path (put, receive,
//! delete, visibility, receive-deferred) writes its frame straight from the
//! caller's `&str` and slices, with no owned [`Request`] built first.
//! [`Request::encode`] writes those variants through the same functions, so
//! the two can never disagree.

use super::*;

/// A request that writes its own frame: [`Request`] and the borrowed views
/// of this module.
pub trait Encode {
    /// The request's opcode.
    fn opcode(&self) -> Opcode;
    /// Appends the whole frame of this request to `buf`.
    fn encode(&self, request_id: u64, buf: &mut BytesMut);
    /// Milliseconds the server may hold the answer on purpose (a long
    /// poll's wait; the protocol's longest when the queue's default
    /// applies), for a client's timeout.
    fn long_poll_ms(&self) -> u64 {
        0
    }
    /// The queue it names, if any (where a cluster's client sends it).
    fn queue(&self) -> Option<&str> {
        None
    }
}

fn frame(buf: &mut BytesMut, op: Opcode, request_id: u64, body: impl FnOnce(&mut Writer<'_>)) {
    let start = begin_frame(buf, op as u8, 0, request_id);
    body(&mut Writer(buf));
    end_frame(buf, start);
}

fn queue_ref(w: &mut Writer<'_>, name: &str, dlq: bool) {
    w.str(name);
    w.bool(dlq);
}

/// A put of whole entries.
#[derive(Clone, Copy, Debug)]
pub struct PutRef<'a> {
    /// Queue name.
    pub queue: &'a str,
    /// 1–20 messages.
    pub messages: &'a [PutEntry],
}

impl Encode for PutRef<'_> {
    fn queue(&self) -> Option<&str> {
        Some(self.queue)
    }

    fn opcode(&self) -> Opcode {
        Opcode::Put
    }
    fn encode(&self, request_id: u64, buf: &mut BytesMut) {
        frame(buf, Opcode::Put, request_id, |w| {
            w.str(self.queue);
            w.list(self.messages, put_entry);
            if needs_more(self.messages) {
                w.list(self.messages, put_more);
            }
        });
    }
}

/// A put of bare payloads: no attributes, no channel, visible at once, the
/// queue's retention.
#[derive(Clone, Copy, Debug)]
pub struct PayloadsRef<'a> {
    /// Queue name.
    pub queue: &'a str,
    /// 1–20 payloads.
    pub payloads: &'a [Bytes],
}

impl Encode for PayloadsRef<'_> {
    fn queue(&self) -> Option<&str> {
        Some(self.queue)
    }

    fn opcode(&self) -> Opcode {
        Opcode::Put
    }
    fn encode(&self, request_id: u64, buf: &mut BytesMut) {
        frame(buf, Opcode::Put, request_id, |w| {
            w.str(self.queue);
            w.list(self.payloads, |w, p| {
                w.bytes(p);
                w.u16(0); // no attributes
                w.u8(0); // no channel
                w.u8(0); // available now
                w.u8(0); // no ttl
            });
        });
    }
}

/// A receive.
#[derive(Clone, Copy, Debug)]
pub struct ReceiveRef<'a> {
    /// Queue name.
    pub queue: &'a str,
    /// Its DLQ rather than the queue.
    pub dlq: bool,
    /// 1–20.
    pub max_messages: u8,
    /// Milliseconds; `None` = the queue's.
    pub visibility_ms: Option<u64>,
    /// Milliseconds; `None` = the queue's receive_wait_default.
    pub wait_ms: Option<u64>,
    /// `name` or `prefix*`.
    pub channel: Option<&'a str>,
    /// The fields the answer's messages carry.
    pub fields: Fields,
}

impl<'a> ReceiveRef<'a> {
    /// A view of an owned receive.
    pub fn of(r: &'a Receive) -> ReceiveRef<'a> {
        ReceiveRef {
            queue: &r.queue.name,
            dlq: r.queue.dlq,
            max_messages: r.max_messages,
            visibility_ms: r.visibility_ms,
            wait_ms: r.wait_ms,
            channel: r.channel.as_deref(),
            fields: r.fields,
        }
    }
}

impl Encode for ReceiveRef<'_> {
    fn queue(&self) -> Option<&str> {
        Some(self.queue)
    }

    fn opcode(&self) -> Opcode {
        Opcode::Receive
    }
    fn encode(&self, request_id: u64, buf: &mut BytesMut) {
        frame(buf, Opcode::Receive, request_id, |w| {
            queue_ref(w, self.queue, self.dlq);
            w.u8(self.max_messages);
            w.opt(&self.visibility_ms, |w, v| w.u64(*v));
            w.opt(&self.wait_ms, |w, v| w.u64(*v));
            w.opt(&self.channel, |w, c| w.str(c));
            // Absent means every field, so older peers read the same bytes.
            if self.fields != Fields::ALL {
                w.u8(self.fields.0);
            }
        });
    }
    fn long_poll_ms(&self) -> u64 {
        self.wait_ms.unwrap_or(crate::limits::WAIT_MS_MAX)
    }
}

/// A delete by receipts.
#[derive(Clone, Copy, Debug)]
pub struct DeleteRef<'a> {
    /// Queue name.
    pub queue: &'a str,
    /// Its DLQ rather than the queue.
    pub dlq: bool,
    /// 1–20 receipts.
    pub receipts: &'a [Receipt],
}

impl Encode for DeleteRef<'_> {
    fn queue(&self) -> Option<&str> {
        Some(self.queue)
    }

    fn opcode(&self) -> Opcode {
        Opcode::Delete
    }
    fn encode(&self, request_id: u64, buf: &mut BytesMut) {
        frame(buf, Opcode::Delete, request_id, |w| {
            queue_ref(w, self.queue, self.dlq);
            w.list(self.receipts, |w, r| w.array(r));
        });
    }
}

/// New next-visible times for leases.
#[derive(Clone, Copy, Debug)]
pub struct VisibilityRef<'a> {
    /// Queue name.
    pub queue: &'a str,
    /// Its DLQ rather than the queue.
    pub dlq: bool,
    /// 1–20 (receipt, timeout ms) pairs.
    pub entries: &'a [(Receipt, u64)],
}

impl Encode for VisibilityRef<'_> {
    fn queue(&self) -> Option<&str> {
        Some(self.queue)
    }

    fn opcode(&self) -> Opcode {
        Opcode::UpdateVisibility
    }
    fn encode(&self, request_id: u64, buf: &mut BytesMut) {
        frame(buf, Opcode::UpdateVisibility, request_id, |w| {
            queue_ref(w, self.queue, self.dlq);
            w.list(self.entries, |w, (r, t)| {
                w.array(r);
                w.u64(*t);
            });
        });
    }
}

/// A take of deferred messages by sequence number.
#[derive(Clone, Copy, Debug)]
pub struct DeferredRef<'a> {
    /// Queue name.
    pub queue: &'a str,
    /// 1–20 sequence numbers.
    pub seqs: &'a [u64],
    /// Milliseconds; `None` = the queue's.
    pub visibility_ms: Option<u64>,
}

impl Encode for DeferredRef<'_> {
    fn queue(&self) -> Option<&str> {
        Some(self.queue)
    }

    fn opcode(&self) -> Opcode {
        Opcode::ReceiveDeferred
    }
    fn encode(&self, request_id: u64, buf: &mut BytesMut) {
        frame(buf, Opcode::ReceiveDeferred, request_id, |w| {
            w.str(self.queue);
            w.list(self.seqs, |w, s| w.u64(*s));
            w.opt(&self.visibility_ms, |w, v| w.u64(*v));
        });
    }
}

impl Encode for Request {
    fn queue(&self) -> Option<&str> {
        Request::queue(self)
    }

    fn opcode(&self) -> Opcode {
        Request::opcode(self)
    }
    fn encode(&self, request_id: u64, buf: &mut BytesMut) {
        Request::encode(self, request_id, buf)
    }
    fn long_poll_ms(&self) -> u64 {
        match self {
            Request::Receive(r) => ReceiveRef::of(r).long_poll_ms(),
            _ => 0,
        }
    }
}
