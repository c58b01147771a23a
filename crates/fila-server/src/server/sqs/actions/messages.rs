//! Message operations: send, receive, delete and change visibility, one
//! at a time and in batches.

use std::collections::{BTreeMap, HashSet};

use bytes::Bytes;
use fila_proto::{
    self as proto, Availability, ErrorCode, PutEntry, QueueRef, Request, Response, WireError,
};
use serde_json::{json, Map, Value};

use super::fifo::{self, FifoSend};
use super::{
    number, queue_of, required, strings, Context, BATCH_BYTES_MAX, BATCH_MAX, DELAY_SECS_MAX,
    RECEIVE_MAX, VISIBILITY_SECS_MAX, WAIT_SECS_MAX,
};
use crate::dispatch::Answer;
use crate::server::sqs::attrs::{self, MessageAttribute};
use crate::server::sqs::error::{Kind, SqsError};
use crate::server::sqs::gateway::Reply;
use crate::server::sqs::ANSWER_ROOM;

/// One message to send, checked.
struct Outgoing {
    body: String,
    delay_secs: Option<u64>,
    attributes: BTreeMap<String, MessageAttribute>,
    trace: Option<String>,
    /// Its group and deduplication id, to a FIFO queue.
    fifo: Option<FifoSend>,
}

impl Outgoing {
    /// A send's message, to a FIFO queue (`fifo`) or not.
    fn parse(input: &Value, fifo: bool) -> Result<Outgoing, SqsError> {
        let fifo = fifo::send_of(input, fifo)?;
        let body = required(input, "MessageBody")?;
        if body.is_empty() {
            return Err(SqsError::missing("MessageBody"));
        }
        if !attrs::valid_text(body) {
            return Err(SqsError::new(
                Kind::InvalidMessageContents,
                "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF",
            ));
        }
        let delay_secs = number(input, "DelaySeconds", 0, DELAY_SECS_MAX)?;
        let attributes = attrs::parse_message_attributes(input.get("MessageAttributes"))?;
        let trace = match input
            .get("MessageSystemAttributes")
            .filter(|v| !v.is_null())
        {
            None => None,
            Some(m) => {
                let Some(m) = m.as_object() else {
                    return Err(SqsError::invalid("MessageSystemAttributes must be a map."));
                };
                let mut trace = None;
                for (k, v) in m {
                    if k != "AWSTraceHeader" {
                        return Err(SqsError::invalid(format!(
                            "The message system attribute {k} is not supported (only AWSTraceHeader)."
                        )));
                    }
                    let s = v
                        .get("StringValue")
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .ok_or_else(|| {
                            SqsError::invalid("AWSTraceHeader must have a StringValue.")
                        })?;
                    trace = Some(s.to_owned());
                }
                trace
            }
        };
        Ok(Outgoing {
            body: body.to_owned(),
            delay_secs,
            attributes,
            trace,
            fifo,
        })
    }

    /// Bytes as SQS counts them against the message size: the body and
    /// each attribute's name, type and value.
    fn size(&self) -> usize {
        self.body.len()
            + self
                .attributes
                .iter()
                .map(|(n, a)| {
                    n.len()
                        + a.data_type.len()
                        + match &a.value {
                            attrs::AttributeValue::String(s) => s.len(),
                            attrs::AttributeValue::Binary(b) => b.len(),
                        }
                })
                .sum::<usize>()
    }

    /// Whether it goes to a FIFO queue without a deduplication id (its
    /// queue must deduplicate by content).
    fn wants_content_id(&self) -> bool {
        self.fifo.as_ref().is_some_and(|f| f.dedup.is_none())
    }

    /// Gives it its content's deduplication id, or fails as SQS does when
    /// the queue does not deduplicate by content.
    fn take_content_id(&mut self, content_dedup: bool) -> Result<(), SqsError> {
        let Some(f) = self.fifo.as_mut().filter(|f| f.dedup.is_none()) else {
            return Ok(());
        };
        if !content_dedup {
            return Err(fifo::no_dedup_id());
        }
        f.dedup = Some(fifo::content_id(&self.body));
        Ok(())
    }

    fn entry(&self) -> PutEntry {
        let mut attributes = attrs::to_fila(&self.attributes, self.trace.as_deref());
        let dedup = self.fifo.as_ref().and_then(|f| f.dedup.clone());
        if let Some(id) = &dedup {
            attributes.push((attrs::DEDUP_KEY.to_owned(), id.clone()));
        }
        PutEntry {
            payload: Bytes::from(self.body.clone().into_bytes()),
            attributes,
            channel: None,
            // No DelaySeconds: the queue's delay; an explicit one, even 0,
            // overrides it (as SQS).
            availability: match self.delay_secs {
                Some(d) => Availability::DelayMs(d * 1000),
                None => Availability::Now,
            },
            ttl_ms: None,
            dedup_id: dedup,
            group: self.fifo.as_ref().map(|f| f.group.clone()),
            priority: None,
        }
    }

    /// What SendMessage answers for it, with its acknowledgement.
    fn sent(&self, ack: &proto::PutAck) -> Map<String, Value> {
        let mut out = Map::new();
        out.insert("MessageId".into(), Value::String(attrs::message_id(ack.id)));
        if self.fifo.is_some() {
            out.insert("SequenceNumber".into(), Value::String(ack.seq.to_string()));
        }
        out.insert(
            "MD5OfMessageBody".into(),
            Value::String(attrs::md5_hex(self.body.as_bytes())),
        );
        if !self.attributes.is_empty() {
            out.insert(
                "MD5OfMessageAttributes".into(),
                Value::String(attrs::md5_of_attributes(&self.attributes)),
            );
        }
        if let Some(t) = &self.trace {
            let mut system = BTreeMap::new();
            system.insert(
                "AWSTraceHeader".to_owned(),
                MessageAttribute {
                    data_type: "String".into(),
                    value: attrs::AttributeValue::String(t.clone()),
                },
            );
            out.insert(
                "MD5OfMessageSystemAttributes".into(),
                Value::String(attrs::md5_of_attributes(&system)),
            );
        }
        out
    }
}

/// Whether FIFO queue `queue` deduplicates by content (asked only when a
/// send to it names no deduplication id).
async fn content_dedup(cx: &Context<'_>, queue: &str) -> Result<bool, SqsError> {
    match cx
        .wire(Request::GetQueue {
            name: queue.to_owned(),
        })
        .await?
    {
        Response::Queue(s) => Ok(s.content_dedup),
        _ => Err(SqsError::unexpected()),
    }
}

/// Puts `entries` in one request; each one's acknowledgement or error.
async fn put(
    cx: &Context<'_>,
    queue: &str,
    entries: Vec<PutEntry>,
) -> Result<Vec<proto::Entry<proto::PutAck>>, SqsError> {
    let n = entries.len();
    let req = Request::Put {
        queue: queue.to_owned(),
        messages: entries,
    };
    match cx.wire(req).await? {
        Response::Put(acks) if acks.len() == n => Ok(acks),
        _ => Err(SqsError::unexpected()),
    }
}

pub(super) async fn send_message(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let queue = queue_of(input)?;
    let mut m = Outgoing::parse(input, fifo::is_fifo(&queue))?;
    if m.wants_content_id() {
        m.take_content_id(content_dedup(cx, &queue).await?)?;
    }
    if m.size() > BATCH_BYTES_MAX {
        return Err(SqsError::invalid(format!(
            "One or more parameters are invalid. Reason: Message must be shorter than {BATCH_BYTES_MAX} bytes."
        )));
    }
    let mut acks = put(cx, &queue, vec![m.entry()]).await?;
    match acks.remove(0) {
        Ok(ack) => Ok(Value::Object(m.sent(&ack))),
        Err(e) => Err(SqsError::of_wire(&e)),
    }
}

/// A batch's entries: checked as SQS checks the batch as a whole.
fn batch_entries(input: &Value) -> Result<Vec<(String, &Value)>, SqsError> {
    let entries = match input.get("Entries") {
        None | Some(Value::Null) => return Err(SqsError::missing("Entries")),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(SqsError::invalid("Entries must be a list.")),
    };
    if entries.is_empty() {
        return Err(SqsError::new(
            Kind::EmptyBatchRequest,
            "There should be at least one entry in the request.",
        ));
    }
    if entries.len() > BATCH_MAX {
        return Err(SqsError::new(
            Kind::TooManyEntriesInBatchRequest,
            format!(
                "Maximum number of entries per request are {BATCH_MAX}. You have sent {}.",
                entries.len()
            ),
        ));
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let id = e
            .get("Id")
            .and_then(Value::as_str)
            .ok_or_else(|| SqsError::missing("Id"))?;
        if id.is_empty()
            || id.len() > 80
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(SqsError::new(
                Kind::InvalidBatchEntryId,
                "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long.",
            ));
        }
        if !seen.insert(id) {
            return Err(SqsError::new(
                Kind::BatchEntryIdsNotDistinct,
                format!("Id {id} repeated."),
            ));
        }
        out.push((id.to_owned(), e));
    }
    Ok(out)
}

fn failed(id: &str, e: &SqsError) -> Value {
    json!({ "Id": id, "SenderFault": e.fault() == "Sender", "Code": e.code(), "Message": e.message })
}

fn batch_result(successful: Vec<Value>, failed: Vec<Value>) -> Value {
    json!({ "Successful": successful, "Failed": failed })
}

pub(super) async fn send_message_batch(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let queue = queue_of(input)?;
    let entries = batch_entries(input)?;
    let mut parsed = Vec::with_capacity(entries.len());
    let mut failures = Vec::new();
    let fifo = fifo::is_fifo(&queue);
    for (id, e) in &entries {
        match Outgoing::parse(e, fifo) {
            Ok(m) => parsed.push((id.clone(), m)),
            Err(err) => failures.push(failed(id, &err)),
        }
    }
    if parsed.iter().any(|(_, m)| m.wants_content_id()) {
        let by_content = content_dedup(cx, &queue).await?;
        parsed.retain_mut(|(id, m)| match m.take_content_id(by_content) {
            Ok(()) => true,
            Err(err) => {
                failures.push(failed(id, &err));
                false
            }
        });
    }
    let total: usize = parsed.iter().map(|(_, m)| m.size()).sum();
    if total > BATCH_BYTES_MAX {
        return Err(SqsError::new(
            Kind::BatchRequestTooLong,
            format!("Batch requests cannot be longer than {BATCH_BYTES_MAX} bytes. You have sent {total} bytes."),
        ));
    }
    let mut successful = Vec::new();
    if !parsed.is_empty() {
        let acks = put(cx, &queue, parsed.iter().map(|(_, m)| m.entry()).collect()).await?;
        for ((id, m), ack) in parsed.iter().zip(acks) {
            match ack {
                Ok(ack) => {
                    let mut out = m.sent(&ack);
                    out.insert("Id".into(), Value::String(id.clone()));
                    successful.push(Value::Object(out));
                }
                Err(e) => failures.push(failed(id, &SqsError::of_wire(&e))),
            }
        }
    }
    Ok(batch_result(successful, failures))
}

pub(super) async fn receive_message(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let queue = queue_of(input)?;
    let max = number(input, "MaxNumberOfMessages", 1, RECEIVE_MAX)?.unwrap_or(1);
    let visibility = number(input, "VisibilityTimeout", 0, VISIBILITY_SECS_MAX)?;
    let wait = number(input, "WaitTimeSeconds", 0, WAIT_SECS_MAX)?;
    let mut system = strings(input, "AttributeNames")?;
    system.extend(strings(input, "MessageSystemAttributeNames")?);
    let user = strings(input, "MessageAttributeNames")?;
    let req = Request::Receive(proto::Receive {
        queue: QueueRef {
            name: queue,
            dlq: false,
        },
        max_messages: max as u8,
        visibility_ms: visibility.map(|v| v * 1000),
        wait_ms: wait.map(|w| w * 1000),
        channel: None,
        fields: proto::Fields::ALL,
    });
    let messages = match cx.call(req, ANSWER_ROOM).await? {
        Reply::Answer(Answer::Messages(_, ms)) | Reply::Late(Ok(ms)) => ms,
        Reply::Answer(Answer::Wire(Response::Error(e))) => return Err(SqsError::of_wire(&e)),
        Reply::Late(Err(e)) => return Err(SqsError::of_engine(&e)),
        Reply::Answer(_) => return Err(SqsError::unexpected()),
    };
    if messages.is_empty() {
        return Ok(json!({}));
    }
    let out: Vec<Value> = messages
        .iter()
        .map(|m| received(m, &system, &user))
        .collect();
    Ok(json!({ "Messages": out }))
}

/// A received message as ReceiveMessage answers it.
fn received(m: &fila_core::Message, system: &[String], user: &[String]) -> Value {
    // A payload a binary-protocol client put that is not UTF-8 is shown
    // with replacement characters (docs/sqs.md).
    let body = String::from_utf8_lossy(&m.payload).into_owned();
    let mut out = Map::new();
    out.insert("MessageId".into(), Value::String(attrs::message_id(m.id.0)));
    if let Some(r) = m.receipt {
        out.insert(
            "ReceiptHandle".into(),
            Value::String(attrs::receipt_handle(&r.to_bytes())),
        );
    }
    out.insert(
        "MD5OfBody".into(),
        Value::String(attrs::md5_hex(body.as_bytes())),
    );
    let (all_user, trace) = attrs::from_fila(m.attributes.as_deref().unwrap_or_default());
    let all = system.iter().any(|s| s == "All");
    let want = |n: &str| all || system.iter().any(|s| s == n);
    let mut sys = Map::new();
    if want("SenderId") {
        sys.insert("SenderId".into(), Value::String(attrs::ACCOUNT.into()));
    }
    if want("SentTimestamp") {
        sys.insert(
            "SentTimestamp".into(),
            Value::String(m.inserted_at_ms.to_string()),
        );
    }
    if want("ApproximateReceiveCount") {
        // SQS counts a message's receives across queues: one moved to its
        // dead-letter queue keeps the count it had there.
        let before = m.dead_letter.as_ref().map_or(0, |d| d.delivery_count);
        sys.insert(
            "ApproximateReceiveCount".into(),
            Value::String(m.delivery_count.saturating_add(before).to_string()),
        );
    }
    if let (true, Some(d)) = (want("DeadLetterQueueSourceArn"), &m.dead_letter) {
        sys.insert(
            "DeadLetterQueueSourceArn".into(),
            Value::String(attrs::queue_arn(&d.source_queue)),
        );
    }
    if let (true, Some(at)) = (
        want("ApproximateFirstReceiveTimestamp"),
        m.first_received_at_ms,
    ) {
        sys.insert(
            "ApproximateFirstReceiveTimestamp".into(),
            Value::String(at.to_string()),
        );
    }
    if let (true, Some(t)) = (want("AWSTraceHeader"), &trace) {
        sys.insert("AWSTraceHeader".into(), Value::String(t.clone()));
    }
    if let Some(group) = &m.group {
        if want("MessageGroupId") {
            sys.insert("MessageGroupId".into(), Value::String(group.to_string()));
        }
        if want("SequenceNumber") {
            sys.insert("SequenceNumber".into(), Value::String(m.seq.to_string()));
        }
        let dedup = m
            .attributes
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|(k, _)| &**k == attrs::DEDUP_KEY);
        if let (true, Some((_, id))) = (want("MessageDeduplicationId"), dedup) {
            sys.insert(
                "MessageDeduplicationId".into(),
                Value::String(id.to_string()),
            );
        }
    }
    out.insert("Body".into(), Value::String(body));
    if !sys.is_empty() {
        out.insert("Attributes".into(), Value::Object(sys));
    }
    let chosen: BTreeMap<String, MessageAttribute> = all_user
        .into_iter()
        .filter(|(n, _)| attrs::asked(user, n))
        .collect();
    if !chosen.is_empty() {
        out.insert(
            "MD5OfMessageAttributes".into(),
            Value::String(attrs::md5_of_attributes(&chosen)),
        );
        out.insert("MessageAttributes".into(), attrs::attributes_json(&chosen));
    }
    Value::Object(out)
}

/// What a delete of one receipt came to: done (also when its lease had
/// ended: nothing is deleted, as SQS), or the SQS error.
fn deleted(e: proto::Entry<()>) -> Result<(), SqsError> {
    match e {
        Ok(()) => Ok(()),
        Err(WireError { code, .. }) if code == ErrorCode::RECEIPT_STALE => Ok(()),
        Err(e) => Err(SqsError::of_wire(&e)),
    }
}

pub(super) async fn delete_message(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let queue = queue_of(input)?;
    let receipt = attrs::receipt_of(required(input, "ReceiptHandle")?)?;
    let Response::Deleted(mut entries) = cx
        .wire(Request::Delete {
            queue: QueueRef {
                name: queue,
                dlq: false,
            },
            receipts: vec![receipt],
        })
        .await?
    else {
        return Err(SqsError::unexpected());
    };
    deleted(entries.remove(0))?;
    Ok(json!({}))
}

/// A batch of operations on receipts: each entry read by `parse` (a bad
/// one fails alone), the others sent as one request made by `request`,
/// whose answer `entries` takes apart and `judge` reads entry by entry.
async fn receipt_batch<P: Copy, A>(
    cx: &Context<'_>,
    input: &Value,
    parse: impl Fn(&Value) -> Result<P, SqsError>,
    request: impl FnOnce(QueueRef, Vec<P>) -> Request,
    entries: impl FnOnce(Response) -> Option<Vec<A>>,
    judge: impl Fn(A) -> Result<(), SqsError>,
) -> Result<Value, SqsError> {
    let queue = QueueRef {
        name: queue_of(input)?,
        dlq: false,
    };
    let mut good = Vec::new();
    let mut failures = Vec::new();
    for (id, e) in batch_entries(input)? {
        match parse(e) {
            Ok(p) => good.push((id, p)),
            Err(err) => failures.push(failed(&id, &err)),
        }
    }
    let mut successful = Vec::new();
    if !good.is_empty() {
        let req = request(queue, good.iter().map(|(_, p)| *p).collect());
        let results = entries(cx.wire(req).await?).ok_or_else(SqsError::unexpected)?;
        for ((id, _), r) in good.iter().zip(results) {
            match judge(r) {
                Ok(()) => successful.push(json!({ "Id": id })),
                Err(e) => failures.push(failed(id, &e)),
            }
        }
    }
    Ok(batch_result(successful, failures))
}

/// An entry's receipt handle.
fn handle_of(e: &Value) -> Result<proto::Receipt, SqsError> {
    e.get("ReceiptHandle")
        .and_then(Value::as_str)
        .ok_or_else(|| SqsError::missing("ReceiptHandle"))
        .and_then(attrs::receipt_of)
}

pub(super) async fn delete_message_batch(
    cx: &Context<'_>,
    input: &Value,
) -> Result<Value, SqsError> {
    receipt_batch(
        cx,
        input,
        handle_of,
        |queue, receipts| Request::Delete { queue, receipts },
        |r| match r {
            Response::Deleted(results) => Some(results),
            _ => None,
        },
        deleted,
    )
    .await
}

/// What a change of visibility came to: an ended lease is
/// `MessageNotInflight`, as SQS.
fn changed(e: proto::Entry<u64>) -> Result<(), SqsError> {
    match e {
        Ok(_) => Ok(()),
        Err(WireError { code, .. }) if code == ErrorCode::RECEIPT_STALE => Err(SqsError::new(
            Kind::MessageNotInflight,
            "The message referred to is not in flight.",
        )),
        Err(e) => Err(SqsError::of_wire(&e)),
    }
}

pub(super) async fn change_visibility(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let queue = queue_of(input)?;
    let receipt = attrs::receipt_of(required(input, "ReceiptHandle")?)?;
    let secs = number(input, "VisibilityTimeout", 0, VISIBILITY_SECS_MAX)?
        .ok_or_else(|| SqsError::missing("VisibilityTimeout"))?;
    let Response::Visibility(mut entries) = cx
        .wire(Request::UpdateVisibility {
            queue: QueueRef {
                name: queue,
                dlq: false,
            },
            entries: vec![(receipt, secs * 1000)],
        })
        .await?
    else {
        return Err(SqsError::unexpected());
    };
    changed(entries.remove(0))?;
    Ok(json!({}))
}

pub(super) async fn change_visibility_batch(
    cx: &Context<'_>,
    input: &Value,
) -> Result<Value, SqsError> {
    receipt_batch(
        cx,
        input,
        |e| {
            let r = handle_of(e)?;
            number(e, "VisibilityTimeout", 0, VISIBILITY_SECS_MAX)?
                .map(|s| (r, s * 1000))
                .ok_or_else(|| SqsError::missing("VisibilityTimeout"))
        },
        |queue, entries| Request::UpdateVisibility { queue, entries },
        |r| match r {
            Response::Visibility(results) => Some(results),
            _ => None,
        },
        changed,
    )
    .await
}
