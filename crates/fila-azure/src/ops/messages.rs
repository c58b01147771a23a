//! The message operations' own parts: put, get and peek with their XML,
//! message ids and pop receipts, and a payload as message text.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use fila_proto::{Availability, Fields, PutEntry, QueueRef, Receive, Request, Response};

use super::{entry_error, settings, unexpected, wire};
use crate::error::{AzureError, Code};
use crate::{time, xml, Answer, Caller, Reply};

/// The bytes of messages one receive of a Get Messages may carry.
const RECEIVE_ROOM: usize = 4 << 20;
/// Pages of 100 a Peek Messages looks at, at most, for visible messages
/// among leased ones.
const PEEK_PAGES_MAX: usize = 10;

/// A message id as the Queue service shows it (the SQS API shows the
/// same text).
pub fn message_id(id: u128) -> String {
    let mut out = String::with_capacity(36);
    for (i, b) in id.to_be_bytes().iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        for nibble in [b >> 4, b & 0xf] {
            out.push(char::from_digit(u32::from(nibble), 16).expect("a nibble"));
        }
    }
    out
}

pub(super) fn parse_message_id(id: &str) -> Option<u128> {
    let hex: String = id.chars().filter(|c| *c != '-').collect();
    (hex.len() == 32)
        .then(|| u128::from_str_radix(&hex, 16).ok())
        .flatten()
}

/// A pop receipt: the lease's fila receipt and the message's id.
pub fn pop_receipt_of(receipt: &[u8; 32], id: u128) -> String {
    let mut b = Vec::with_capacity(48);
    b.extend_from_slice(receipt);
    b.extend_from_slice(&id.to_be_bytes());
    B64.encode(b)
}

/// The receipt a pop receipt carries, for the message `id` of the URI.
pub(super) fn pop_receipt(id: &str, text: &str) -> Result<[u8; 32], AzureError> {
    let bytes = B64
        .decode(text)
        .map_err(|_| AzureError::query("popreceipt", "not a pop receipt this server made"))?;
    if bytes.len() == 16 {
        return Err(AzureError::new(
            Code::PopReceiptMismatch,
            "The specified pop receipt did not match the pop receipt for a dequeued message: a pop receipt from Put Message names no lease here (docs/azure.md); get the message first.",
        ));
    }
    if bytes.len() != 48 {
        return Err(AzureError::query(
            "popreceipt",
            "not a pop receipt this server made",
        ));
    }
    let receipt: [u8; 32] = bytes[..32].try_into().expect("32 bytes");
    let of = u128::from_be_bytes(bytes[32..].try_into().expect("16 bytes"));
    if parse_message_id(id) != Some(of) {
        return Err(AzureError::new(
            Code::MessageNotFound,
            "The specified message does not exist (the pop receipt is another message's).",
        ));
    }
    Ok(receipt)
}

/// A message's text: its payload when that is XML text, else the
/// payload in base64 (docs/azure.md).
fn text_of(payload: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(payload) {
        Ok(t) if xml::is_xml_text(t) => std::borrow::Cow::Borrowed(t),
        _ => std::borrow::Cow::Owned(B64.encode(payload)),
    }
}

pub(super) async fn put_message(
    cx: &impl Caller,
    queue: &str,
    text: &str,
    visibility: i64,
    ttl: Option<i64>,
) -> Result<Reply, AzureError> {
    let retention = match cx.recent_retention(queue) {
        Some(r) => r,
        None => {
            let r = settings(cx, queue).await?.retention_ms;
            cx.keep_retention(queue, Some(r));
            r
        }
    };
    // A time to live the queue does not keep messages for is the queue's
    // retention: a message never outlives it (-1 included).
    let ttl_ms = match ttl {
        Some(t) if t > 0 && (t as u64) * 1000 < retention => Some(t as u64 * 1000),
        _ => None,
    };
    let lifetime = ttl_ms.unwrap_or(retention);
    let delay = visibility as u64 * 1000;
    if delay > 0 && delay >= lifetime {
        return Err(AzureError::query(
            "visibilitytimeout",
            "must be less than the message's time to live",
        ));
    }
    let now = cx.now_ms();
    let entry = PutEntry {
        payload: bytes::Bytes::copy_from_slice(text.as_bytes()),
        // A time, not a delay: a put's delay is at most 15 minutes, an
        // Azure message's up to 7 days.
        availability: if delay > 0 {
            Availability::At(now + delay)
        } else {
            Availability::Now
        },
        ttl_ms,
        ..PutEntry::default()
    };
    let answer = wire(
        cx,
        Request::Put {
            queue: queue.to_owned(),
            messages: vec![entry],
        },
    )
    .await
    .inspect_err(|_| cx.keep_retention(queue, None))?;
    let ack = match answer {
        Response::Put(entries) => match entries.into_iter().next() {
            Some(Ok(ack)) => ack,
            Some(Err(e)) => {
                // What was kept may be what changed.
                cx.keep_retention(queue, None);
                return Err(entry_error(&e));
            }
            None => return Err(unexpected()),
        },
        _ => return Err(unexpected()),
    };
    let mut out = String::from(xml::DECLARATION);
    out.push_str("<QueueMessagesList><QueueMessage>");
    xml::element(&mut out, "MessageId", &message_id(ack.id));
    xml::element(&mut out, "InsertionTime", &time::rfc1123(now));
    xml::element(&mut out, "ExpirationTime", &time::rfc1123(now + lifetime));
    xml::element(&mut out, "PopReceipt", &B64.encode(ack.id.to_be_bytes()));
    xml::element(&mut out, "TimeNextVisible", &time::rfc1123(now + delay));
    out.push_str("</QueueMessage></QueueMessagesList>");
    Ok(Reply::xml(201, out.into_bytes()))
}

/// What Get Messages and Peek Messages show of a message.
struct Shown {
    id: u128,
    inserted_at_ms: u64,
    expires_at_ms: u64,
    next_visible_at_ms: u64,
    delivery_count: u32,
    receipt: Option<[u8; 32]>,
    payload: bytes::Bytes,
}

impl From<fila_core::Message> for Shown {
    fn from(m: fila_core::Message) -> Shown {
        Shown {
            id: m.id.0,
            inserted_at_ms: m.inserted_at_ms,
            expires_at_ms: m.expires_at_ms,
            next_visible_at_ms: m.next_visible_at_ms,
            delivery_count: m.delivery_count,
            receipt: m.receipt.map(|r| r.to_bytes()),
            payload: m.payload.to_bytes(),
        }
    }
}

impl From<fila_proto::Message> for Shown {
    fn from(m: fila_proto::Message) -> Shown {
        Shown {
            id: m.id,
            inserted_at_ms: m.inserted_at_ms,
            expires_at_ms: m.expires_at_ms,
            next_visible_at_ms: m.next_visible_at_ms,
            delivery_count: m.delivery_count,
            receipt: m.receipt,
            payload: m.payload,
        }
    }
}

/// The state code of a visible message in a peek's answer.
const VISIBLE: u8 = 1;

/// Appends `<name>` and the time `ms` (RFC 1123) and `</name>`.
fn time_element(out: &mut String, name: &str, ms: u64) {
    out.push('<');
    out.push_str(name);
    out.push('>');
    time::push_rfc1123(ms, out);
    out.push_str("</");
    out.push_str(name);
    out.push('>');
}

/// Appends a message as Get Messages (`receipt`) or Peek Messages shows it.
fn write_message(out: &mut String, m: &Shown, receipt: bool) {
    out.push_str("<QueueMessage>");
    xml::element(out, "MessageId", &message_id(m.id));
    time_element(out, "InsertionTime", m.inserted_at_ms);
    time_element(out, "ExpirationTime", m.expires_at_ms);
    if receipt {
        if let Some(r) = &m.receipt {
            xml::element(out, "PopReceipt", &pop_receipt_of(r, m.id));
        }
        time_element(out, "TimeNextVisible", m.next_visible_at_ms);
    }
    xml::element(out, "DequeueCount", &m.delivery_count.to_string());
    xml::element(out, "MessageText", &text_of(&m.payload));
    out.push_str("</QueueMessage>");
}

pub(super) async fn get_messages(
    cx: &impl Caller,
    queue: &str,
    count: u8,
    visibility: i64,
) -> Result<Reply, AzureError> {
    let mut got: Vec<Shown> = Vec::with_capacity(usize::from(count));
    while got.len() < usize::from(count) {
        let ask = (usize::from(count) - got.len()).min(20) as u8;
        let request = Request::Receive(Receive {
            queue: QueueRef {
                name: queue.to_owned(),
                dlq: false,
            },
            max_messages: ask,
            visibility_ms: Some(visibility as u64 * 1000),
            wait_ms: Some(0),
            channel: None,
            fields: Fields::ALL,
        });
        let messages: Vec<Shown> = match cx.call(request, RECEIVE_ROOM).await? {
            Answer::Messages(ms) => ms.into_iter().map(Shown::from).collect(),
            Answer::Wire(Response::Messages(ms)) => ms.into_iter().map(Shown::from).collect(),
            Answer::Wire(Response::Error(e)) => return Err(AzureError::of_wire(&e)),
            Answer::Engine(e) => return Err(AzureError::of_engine(&e)),
            Answer::Wire(_) => return Err(unexpected()),
        };
        let short = messages.len() < usize::from(ask);
        got.extend(messages);
        if short {
            break;
        }
    }
    let mut out =
        String::with_capacity(256 + got.iter().map(|m| m.payload.len() + 400).sum::<usize>());
    out.push_str(xml::DECLARATION);
    out.push_str("<QueueMessagesList>");
    for m in &got {
        write_message(&mut out, m, true);
    }
    out.push_str("</QueueMessagesList>");
    Ok(Reply::xml(200, out.into_bytes()))
}

pub(super) async fn peek_messages(
    cx: &impl Caller,
    queue: &str,
    count: u8,
) -> Result<Reply, AzureError> {
    let mut shown: Vec<Shown> = Vec::new();
    let mut from = 0;
    for _ in 0..PEEK_PAGES_MAX {
        let request = Request::Peek {
            queue: QueueRef {
                name: queue.to_owned(),
                dlq: false,
            },
            from_seq: from,
            max_messages: 100,
            fields: Fields::ALL,
        };
        let (last, full) = match cx.call(request, RECEIVE_ROOM).await? {
            Answer::Wire(Response::Messages(page) | Response::Selected(_, page)) => {
                let at = (page.last().map(|m| m.seq), page.len() == 100);
                let visible = page.into_iter().filter(|m| m.state == VISIBLE);
                shown.extend(visible.map(Shown::from));
                at
            }
            Answer::Messages(page) => {
                let at = (page.last().map(|m| m.seq), page.len() == 100);
                let visible = page
                    .into_iter()
                    .filter(|m| m.state == fila_core::State::Visible);
                shown.extend(visible.map(Shown::from));
                at
            }
            Answer::Wire(Response::Error(e)) => return Err(AzureError::of_wire(&e)),
            Answer::Engine(e) => return Err(AzureError::of_engine(&e)),
            Answer::Wire(_) => return Err(unexpected()),
        };
        let Some(last) = last else {
            break;
        };
        if shown.len() >= usize::from(count) || !full {
            break;
        }
        from = last + 1;
    }
    shown.truncate(usize::from(count));
    let mut out = String::from(xml::DECLARATION);
    out.push_str("<QueueMessagesList>");
    for m in &shown {
        write_message(&mut out, m, false);
    }
    out.push_str("</QueueMessagesList>");
    Ok(Reply::xml(200, out.into_bytes()))
}
