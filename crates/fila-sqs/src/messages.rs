//! The message operations with no I/O: send, receive, delete and change
//! visibility, one at a time and in batches. Each is a small machine:
//! [`start`] checks its input as SQS checks it and names the fila request
//! it needs ([`Step::Call`]); [`MessageOp::resume`] takes that request's
//! answer and names the next request or the output ([`Step::Done`]). The
//! server runs the requests (authorized for the caller, on the loop that
//! owns the queue's shard) and feeds the answers back; nothing here waits.

use std::collections::{BTreeMap, HashSet};

use bytes::Bytes;
use fila_proto::{
    self as proto, Availability, ErrorCode, PutEntry, QueueRef, Request, Response, WireError,
};
use serde_json::{json, Map, Value};

use crate::attrs::{self, MessageAttribute};
use crate::error::{Kind, SqsError};
use crate::fifo::{self, FifoSend};
use crate::params::{
    number, queue_of, required, strings, BATCH_BYTES_MAX, BATCH_MAX, DELAY_SECS_MAX, RECEIVE_MAX,
    VISIBILITY_SECS_MAX, WAIT_SECS_MAX,
};

/// The bytes of messages one receive may carry at most.
pub const RECEIVE_ROOM: usize = 8 << 20;

/// What an operation needs next.
// A step is made and taken apart once per request: boxing the request to
// shrink `Done` would cost an allocation each time for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Step {
    /// Run `request` (a receive's answer within `room` bytes of messages)
    /// and [`MessageOp::resume`] with its answer.
    Call {
        /// The fila request.
        request: Request,
        /// Bytes of messages its answer may carry (receives only).
        room: usize,
    },
    /// The operation's output, as the JSON protocol's object.
    Done(Value),
}

/// A fila request's answer, as an operation reads it.
#[derive(Debug)]
pub enum Answer {
    /// An answer of the wire protocol's kind (an error among them).
    Wire(Response),
    /// A receive's messages (also a parked receive's, when its wait ended).
    Messages(Vec<fila_core::Message>),
    /// A parked receive that ended with an engine error.
    Engine(fila_core::Error),
}

/// The message operations [`start`] runs.
pub const OPERATIONS: [&str; 7] = [
    "SendMessage",
    "SendMessageBatch",
    "ReceiveMessage",
    "DeleteMessage",
    "DeleteMessageBatch",
    "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch",
];

/// An operation between its steps.
pub struct MessageOp {
    queue: String,
    state: State,
}

enum State {
    /// A send waiting for its FIFO queue's settings (content dedup?).
    SendSettings(Outgoing),
    /// A send waiting for its put.
    SendPut(Outgoing),
    /// A batch send waiting for its FIFO queue's settings.
    BatchSettings(Vec<(String, Outgoing)>, Vec<Value>),
    /// A batch send waiting for its put.
    BatchPut(Vec<(String, Outgoing)>, Vec<Value>),
    /// A receive waiting for its messages: the system and user attributes
    /// asked for.
    Receive(Vec<String>, Vec<String>),
    /// A delete or a visibility change of one receipt.
    One(Judge),
    /// A batch of deletes or visibility changes: the ids sent, the entries
    /// that failed already.
    Batch(Judge, Vec<String>, Vec<Value>),
    /// Answered.
    Finished,
}

/// Which receipt operation, and how its entries' outcomes read.
#[derive(Clone, Copy)]
enum Judge {
    Delete,
    Visibility,
}

/// Starts operation `op` (one of [`OPERATIONS`]) on its input: the
/// operation and its first step, or the error that refuses it.
pub fn start(op: &str, input: &Value) -> Result<(MessageOp, Step), SqsError> {
    let queue = queue_of(input)?;
    let mut machine = MessageOp {
        queue,
        state: State::Finished,
    };
    let step = match op {
        "SendMessage" => machine.send(input)?,
        "SendMessageBatch" => machine.send_batch(input)?,
        "ReceiveMessage" => machine.receive(input)?,
        "DeleteMessage" => {
            let receipt = attrs::receipt_of(required(input, "ReceiptHandle")?)?;
            machine.state = State::One(Judge::Delete);
            machine.call(Request::Delete {
                queue: machine.queue_ref(),
                receipts: vec![receipt],
            })
        }
        "ChangeMessageVisibility" => {
            let receipt = attrs::receipt_of(required(input, "ReceiptHandle")?)?;
            let secs = number(input, "VisibilityTimeout", 0, VISIBILITY_SECS_MAX)?
                .ok_or_else(|| SqsError::missing("VisibilityTimeout"))?;
            machine.state = State::One(Judge::Visibility);
            machine.call(Request::UpdateVisibility {
                queue: machine.queue_ref(),
                entries: vec![(receipt, secs * 1000)],
            })
        }
        "DeleteMessageBatch" => machine.receipt_batch(input, Judge::Delete)?,
        "ChangeMessageVisibilityBatch" => machine.receipt_batch(input, Judge::Visibility)?,
        _ => {
            return Err(SqsError::new(
                Kind::InvalidAction,
                format!("{op} is not a message operation."),
            ))
        }
    };
    Ok((machine, step))
}

impl MessageOp {
    fn queue_ref(&self) -> QueueRef {
        QueueRef {
            name: self.queue.clone(),
            dlq: false,
        }
    }

    fn call(&self, request: Request) -> Step {
        Step::Call { request, room: 0 }
    }

    /// The settings of the queue, to learn whether it deduplicates by
    /// content (asked only when a send to a FIFO queue names no
    /// deduplication id).
    fn settings(&self) -> Step {
        self.call(Request::GetQueue {
            name: self.queue.clone(),
        })
    }

    fn put(&self, entries: Vec<PutEntry>) -> Step {
        self.call(Request::Put {
            queue: self.queue.clone(),
            messages: entries,
        })
    }

    fn send(&mut self, input: &Value) -> Result<Step, SqsError> {
        let m = Outgoing::parse(input, fifo::is_fifo(&self.queue))?;
        if m.wants_content_id() {
            let step = self.settings();
            self.state = State::SendSettings(m);
            return Ok(step);
        }
        self.send_put(m)
    }

    fn send_put(&mut self, m: Outgoing) -> Result<Step, SqsError> {
        if m.size() > BATCH_BYTES_MAX {
            return Err(SqsError::invalid(format!(
                "One or more parameters are invalid. Reason: Message must be shorter than {BATCH_BYTES_MAX} bytes."
            )));
        }
        let step = self.put(vec![m.entry()]);
        self.state = State::SendPut(m);
        Ok(step)
    }

    fn send_batch(&mut self, input: &Value) -> Result<Step, SqsError> {
        let entries = batch_entries(input)?;
        let mut parsed = Vec::with_capacity(entries.len());
        let mut failures = Vec::new();
        let fifo = fifo::is_fifo(&self.queue);
        for (id, e) in &entries {
            match Outgoing::parse(e, fifo) {
                Ok(m) => parsed.push((id.clone(), m)),
                Err(err) => failures.push(failed(id, &err)),
            }
        }
        if parsed.iter().any(|(_, m)| m.wants_content_id()) {
            let step = self.settings();
            self.state = State::BatchSettings(parsed, failures);
            return Ok(step);
        }
        self.batch_put(parsed, failures)
    }

    fn batch_put(
        &mut self,
        parsed: Vec<(String, Outgoing)>,
        failures: Vec<Value>,
    ) -> Result<Step, SqsError> {
        let total: usize = parsed.iter().map(|(_, m)| m.size()).sum();
        if total > BATCH_BYTES_MAX {
            return Err(SqsError::new(
                Kind::BatchRequestTooLong,
                format!("Batch requests cannot be longer than {BATCH_BYTES_MAX} bytes. You have sent {total} bytes."),
            ));
        }
        if parsed.is_empty() {
            self.state = State::Finished;
            return Ok(Step::Done(batch_result(Vec::new(), failures)));
        }
        let step = self.put(parsed.iter().map(|(_, m)| m.entry()).collect());
        self.state = State::BatchPut(parsed, failures);
        Ok(step)
    }

    fn receive(&mut self, input: &Value) -> Result<Step, SqsError> {
        let max = number(input, "MaxNumberOfMessages", 1, RECEIVE_MAX)?.unwrap_or(1);
        let visibility = number(input, "VisibilityTimeout", 0, VISIBILITY_SECS_MAX)?;
        let wait = number(input, "WaitTimeSeconds", 0, WAIT_SECS_MAX)?;
        let mut system = strings(input, "AttributeNames")?;
        system.extend(strings(input, "MessageSystemAttributeNames")?);
        let user = strings(input, "MessageAttributeNames")?;
        let request = Request::Receive(proto::Receive {
            queue: self.queue_ref(),
            max_messages: max as u8,
            visibility_ms: visibility.map(|v| v * 1000),
            wait_ms: wait.map(|w| w * 1000),
            channel: None,
            fields: proto::Fields::ALL,
        });
        self.state = State::Receive(system, user);
        Ok(Step::Call {
            request,
            room: RECEIVE_ROOM,
        })
    }

    /// A batch of operations on receipts: each entry read on its own (a
    /// bad one fails alone), the others sent as one request.
    fn receipt_batch(&mut self, input: &Value, judge: Judge) -> Result<Step, SqsError> {
        let mut ids = Vec::new();
        let mut failures = Vec::new();
        let mut receipts = Vec::new();
        let mut changes = Vec::new();
        for (id, e) in batch_entries(input)? {
            let parsed = handle_of(e).and_then(|r| match judge {
                Judge::Delete => Ok((r, 0)),
                Judge::Visibility => number(e, "VisibilityTimeout", 0, VISIBILITY_SECS_MAX)?
                    .map(|s| (r, s * 1000))
                    .ok_or_else(|| SqsError::missing("VisibilityTimeout")),
            });
            match parsed {
                Ok((r, ms)) => {
                    ids.push(id);
                    receipts.push(r);
                    changes.push((r, ms));
                }
                Err(err) => failures.push(failed(&id, &err)),
            }
        }
        if ids.is_empty() {
            self.state = State::Finished;
            return Ok(Step::Done(batch_result(Vec::new(), failures)));
        }
        let request = match judge {
            Judge::Delete => Request::Delete {
                queue: self.queue_ref(),
                receipts,
            },
            Judge::Visibility => Request::UpdateVisibility {
                queue: self.queue_ref(),
                entries: changes,
            },
        };
        self.state = State::Batch(judge, ids, failures);
        Ok(self.call(request))
    }

    /// Takes the answer of the request the last step named: the next
    /// step, or the error the operation answers.
    pub fn resume(&mut self, answer: Answer) -> Result<Step, SqsError> {
        let state = std::mem::replace(&mut self.state, State::Finished);
        match state {
            State::Receive(system, user) => {
                let messages = match answer {
                    Answer::Messages(ms) => ms,
                    Answer::Wire(Response::Error(e)) => return Err(SqsError::of_wire(&e)),
                    Answer::Engine(e) => return Err(SqsError::of_engine(&e)),
                    Answer::Wire(_) => return Err(SqsError::unexpected()),
                };
                if messages.is_empty() {
                    return Ok(Step::Done(json!({})));
                }
                let out: Vec<Value> = messages
                    .iter()
                    .map(|m| received(m, &system, &user))
                    .collect();
                Ok(Step::Done(json!({ "Messages": out })))
            }
            State::SendSettings(mut m) => {
                m.take_content_id(content_dedup(wire(answer)?)?)?;
                self.send_put(m)
            }
            State::BatchSettings(mut parsed, mut failures) => {
                let by_content = content_dedup(wire(answer)?)?;
                parsed.retain_mut(|(id, m)| match m.take_content_id(by_content) {
                    Ok(()) => true,
                    Err(err) => {
                        failures.push(failed(id, &err));
                        false
                    }
                });
                self.batch_put(parsed, failures)
            }
            State::SendPut(m) => {
                let mut acks = acks(wire(answer)?, 1)?;
                match acks.remove(0) {
                    Ok(ack) => Ok(Step::Done(Value::Object(m.sent(&ack)))),
                    Err(e) => Err(SqsError::of_wire(&e)),
                }
            }
            State::BatchPut(parsed, mut failures) => {
                let acks = acks(wire(answer)?, parsed.len())?;
                let mut successful = Vec::new();
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
                Ok(Step::Done(batch_result(successful, failures)))
            }
            State::One(judge) => {
                let mut outcomes = judged(judge, wire(answer)?)?;
                if outcomes.is_empty() {
                    return Err(SqsError::unexpected());
                }
                outcomes.remove(0)?;
                Ok(Step::Done(json!({})))
            }
            State::Batch(judge, ids, mut failures) => {
                let outcomes = judged(judge, wire(answer)?)?;
                let mut successful = Vec::new();
                for (id, r) in ids.iter().zip(outcomes) {
                    match r {
                        Ok(()) => successful.push(json!({ "Id": id })),
                        Err(e) => failures.push(failed(id, &e)),
                    }
                }
                Ok(Step::Done(batch_result(successful, failures)))
            }
            State::Finished => Err(SqsError::unexpected()),
        }
    }
}

/// Runs message operation `op` (one of [`OPERATIONS`]): its steps'
/// requests through `cx`.
pub async fn run(cx: &impl crate::Caller, op: &str, input: &Value) -> Result<Value, SqsError> {
    let (mut machine, mut step) = start(op, input)?;
    loop {
        match step {
            Step::Done(output) => return Ok(output),
            Step::Call { request, room } => {
                let answer = cx.call(request, room).await?;
                step = machine.resume(answer)?;
            }
        }
    }
}

/// A wire answer; an error answer is the SQS error it maps to.
fn wire(answer: Answer) -> Result<Response, SqsError> {
    match answer {
        Answer::Wire(Response::Error(e)) => Err(SqsError::of_wire(&e)),
        Answer::Wire(r) => Ok(r),
        _ => Err(SqsError::unexpected()),
    }
}

/// Whether the FIFO queue a settings answer describes deduplicates by
/// content.
fn content_dedup(r: Response) -> Result<bool, SqsError> {
    match r {
        Response::Queue(s) => Ok(s.content_dedup),
        _ => Err(SqsError::unexpected()),
    }
}

/// A put's acknowledgements, one for each of its `n` entries.
fn acks(r: Response, n: usize) -> Result<Vec<proto::Entry<proto::PutAck>>, SqsError> {
    match r {
        Response::Put(acks) if acks.len() == n => Ok(acks),
        _ => Err(SqsError::unexpected()),
    }
}

/// Each receipt's outcome in a delete's or a visibility change's answer.
fn judged(judge: Judge, r: Response) -> Result<Vec<Result<(), SqsError>>, SqsError> {
    match (judge, r) {
        (Judge::Delete, Response::Deleted(entries)) => {
            Ok(entries.into_iter().map(deleted).collect())
        }
        (Judge::Visibility, Response::Visibility(entries)) => {
            Ok(entries.into_iter().map(changed).collect())
        }
        _ => Err(SqsError::unexpected()),
    }
}

fn failed(id: &str, e: &SqsError) -> Value {
    json!({ "Id": id, "SenderFault": e.fault() == "Sender", "Code": e.code(), "Message": e.message })
}

fn batch_result(successful: Vec<Value>, failed: Vec<Value>) -> Value {
    json!({ "Successful": successful, "Failed": failed })
}

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

/// An entry's receipt handle.
fn handle_of(e: &Value) -> Result<proto::Receipt, SqsError> {
    e.get("ReceiptHandle")
        .and_then(Value::as_str)
        .ok_or_else(|| SqsError::missing("ReceiptHandle"))
        .and_then(attrs::receipt_of)
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

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://127.0.0.1:9324/000000000000/jobs";

    fn handle(n: u8) -> String {
        attrs::receipt_handle(&[n; proto::RECEIPT_LEN])
    }

    fn stale() -> WireError {
        WireError {
            code: ErrorCode::RECEIPT_STALE,
            message: "stale".into(),
        }
    }

    /// The request of a step that must be a call.
    fn call(step: Step) -> (Request, usize) {
        match step {
            Step::Call { request, room } => (request, room),
            Step::Done(v) => panic!("a call, not {v}"),
        }
    }

    fn done(step: Step) -> Value {
        match step {
            Step::Done(v) => v,
            Step::Call { request, .. } => panic!("done, not {request:?}"),
        }
    }

    #[test]
    fn a_send_puts_then_answers_its_id_and_digests() {
        let input = json!({"QueueUrl": URL, "MessageBody": "hello", "DelaySeconds": 3});
        let (mut op, step) = start("SendMessage", &input).unwrap();
        let (Request::Put { queue, messages }, 0) = call(step) else {
            panic!("a put")
        };
        assert_eq!(queue, "jobs");
        assert_eq!(&messages[0].payload[..], b"hello");
        assert_eq!(messages[0].availability, Availability::DelayMs(3000));
        let ack = proto::PutAck { id: 7, seq: 1 };
        let out = done(
            op.resume(Answer::Wire(Response::Put(vec![Ok(ack)])))
                .unwrap(),
        );
        assert_eq!(out["MD5OfMessageBody"], attrs::md5_hex(b"hello"));
        assert_eq!(out["MessageId"], attrs::message_id(7));
        assert!(out.get("SequenceNumber").is_none());
        // Answered: nothing more to take.
        assert!(op.resume(Answer::Wire(Response::Put(vec![]))).is_err());
    }

    #[test]
    fn a_fifo_send_without_a_dedup_id_asks_the_queue_first() {
        let url = "http://h/000000000000/jobs.fifo";
        let input = json!({"QueueUrl": url, "MessageBody": "b", "MessageGroupId": "g"});
        for by_content in [true, false] {
            let (mut op, step) = start("SendMessage", &input).unwrap();
            let (Request::GetQueue { name }, _) = call(step) else {
                panic!("the queue's settings first")
            };
            assert_eq!(name, "jobs.fifo");
            let settings = proto::Settings {
                content_dedup: by_content,
                ..Default::default()
            };
            let next = op.resume(Answer::Wire(Response::Queue(Box::new(settings))));
            if !by_content {
                assert_eq!(next.unwrap_err().kind, Kind::InvalidParameterValue);
                continue;
            }
            let (Request::Put { messages, .. }, _) = call(next.unwrap()) else {
                panic!("a put")
            };
            assert_eq!(
                messages[0].dedup_id.as_deref(),
                Some(fifo::content_id("b").as_str())
            );
            assert_eq!(messages[0].group.as_deref(), Some("g"));
            let ack = proto::PutAck { id: 1, seq: 42 };
            let out = done(
                op.resume(Answer::Wire(Response::Put(vec![Ok(ack)])))
                    .unwrap(),
            );
            assert_eq!(out["SequenceNumber"], "42");
        }
    }

    #[test]
    fn a_batch_send_fails_bad_entries_alone_and_puts_the_rest() {
        let input = json!({"QueueUrl": URL, "Entries": [
            {"Id": "a", "MessageBody": "one"},
            {"Id": "b", "MessageBody": ""},
            {"Id": "c", "MessageBody": "three"},
        ]});
        let (mut op, step) = start("SendMessageBatch", &input).unwrap();
        let (Request::Put { messages, .. }, _) = call(step) else {
            panic!("a put")
        };
        assert_eq!(messages.len(), 2);
        let full = WireError {
            code: ErrorCode::QUEUE_FULL,
            message: "full".into(),
        };
        let acks = vec![Ok(proto::PutAck { id: 1, seq: 1 }), Err(full)];
        let out = done(op.resume(Answer::Wire(Response::Put(acks))).unwrap());
        let ids = |k: &str| -> Vec<String> {
            out[k]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["Id"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(ids("Successful"), ["a"]);
        assert_eq!(ids("Failed"), ["b", "c"]);
        // A batch whose every entry is bad asks nothing.
        let input = json!({"QueueUrl": URL, "Entries": [{"Id": "a", "MessageBody": ""}]});
        let (_, step) = start("SendMessageBatch", &input).unwrap();
        assert_eq!(done(step)["Failed"].as_array().unwrap().len(), 1);
        // Repeated ids refuse the whole batch.
        let input = json!({"QueueUrl": URL, "Entries": [
            {"Id": "a", "MessageBody": "x"}, {"Id": "a", "MessageBody": "y"}]});
        assert_eq!(
            start("SendMessageBatch", &input).err().unwrap().kind,
            Kind::BatchEntryIdsNotDistinct
        );
    }

    #[test]
    fn a_receive_asks_for_its_room_and_maps_what_came() {
        let input = json!({"QueueUrl": URL, "MaxNumberOfMessages": 5, "WaitTimeSeconds": 2});
        let (mut op, step) = start("ReceiveMessage", &input).unwrap();
        let (Request::Receive(r), room) = call(step) else {
            panic!("a receive")
        };
        assert_eq!(
            (r.max_messages, r.wait_ms, room),
            (5, Some(2000), RECEIVE_ROOM)
        );
        assert_eq!(
            done(op.resume(Answer::Messages(vec![])).unwrap()),
            json!({})
        );
        let (mut op, _) = start("ReceiveMessage", &input).unwrap();
        let e = fila_core::Error::QueueNotFound("jobs".into());
        assert_eq!(
            op.resume(Answer::Engine(e)).unwrap_err().kind,
            Kind::QueueDoesNotExist
        );
        assert_eq!(
            start(
                "ReceiveMessage",
                &json!({"QueueUrl": URL, "MaxNumberOfMessages": 11})
            )
            .err()
            .unwrap()
            .kind,
            Kind::InvalidParameterValue
        );
    }

    #[test]
    fn receipts_judge_a_stale_lease_as_sqs_does() {
        // A delete of an ended lease is done; a visibility change of one
        // is MessageNotInflight.
        let input = json!({"QueueUrl": URL, "ReceiptHandle": handle(1)});
        let (mut op, step) = start("DeleteMessage", &input).unwrap();
        let (Request::Delete { receipts, .. }, _) = call(step) else {
            panic!("a delete")
        };
        assert_eq!(receipts, [[1; proto::RECEIPT_LEN]]);
        assert_eq!(
            done(
                op.resume(Answer::Wire(Response::Deleted(vec![Err(stale())])))
                    .unwrap()
            ),
            json!({})
        );
        let input = json!({"QueueUrl": URL, "ReceiptHandle": handle(1), "VisibilityTimeout": 5});
        let (mut op, step) = start("ChangeMessageVisibility", &input).unwrap();
        let (Request::UpdateVisibility { entries, .. }, _) = call(step) else {
            panic!("a change")
        };
        assert_eq!(entries[0].1, 5000);
        let e = op
            .resume(Answer::Wire(Response::Visibility(vec![Err(stale())])))
            .unwrap_err();
        assert_eq!(e.kind, Kind::MessageNotInflight);
        // In a batch, each entry on its own.
        let input = json!({"QueueUrl": URL, "Entries": [
            {"Id": "a", "ReceiptHandle": handle(1), "VisibilityTimeout": 1},
            {"Id": "b", "ReceiptHandle": "not a handle", "VisibilityTimeout": 1},
            {"Id": "c", "ReceiptHandle": handle(3), "VisibilityTimeout": 1},
        ]});
        let (mut op, step) = start("ChangeMessageVisibilityBatch", &input).unwrap();
        let (Request::UpdateVisibility { entries, .. }, _) = call(step) else {
            panic!("a change")
        };
        assert_eq!(entries.len(), 2);
        let out = done(
            op.resume(Answer::Wire(Response::Visibility(vec![
                Ok(1),
                Err(stale()),
            ])))
            .unwrap(),
        );
        assert_eq!(out["Successful"], json!([{"Id": "a"}]));
        let failed: Vec<&str> = out["Failed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["Code"].as_str().unwrap())
            .collect();
        assert_eq!(
            failed,
            [
                "ReceiptHandleIsInvalid",
                "AWS.SimpleQueueService.MessageNotInflight"
            ]
        );
    }

    #[test]
    fn a_wire_error_or_an_answer_of_another_kind_is_the_operation_s_error() {
        let input = json!({"QueueUrl": URL, "ReceiptHandle": handle(1)});
        let (mut op, _) = start("DeleteMessage", &input).unwrap();
        let gone = WireError {
            code: ErrorCode::QUEUE_NOT_FOUND,
            message: "no queue".into(),
        };
        assert_eq!(
            op.resume(Answer::Wire(Response::Error(gone)))
                .unwrap_err()
                .kind,
            Kind::QueueDoesNotExist
        );
        let (mut op, _) = start("DeleteMessage", &input).unwrap();
        assert!(op.resume(Answer::Messages(vec![])).is_err());
        let (mut op, _) = start("DeleteMessage", &input).unwrap();
        assert!(op.resume(Answer::Wire(Response::Deleted(vec![]))).is_err());
        assert_eq!(
            start("PurgeQueue", &json!({"QueueUrl": URL}))
                .err()
                .unwrap()
                .kind,
            Kind::InvalidAction
        );
    }
}
