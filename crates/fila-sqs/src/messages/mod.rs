//! The message operations with no I/O: send, receive, delete and change
//! visibility, one at a time and in batches. Each is a small machine:
//! [`start`] checks its input as SQS checks it and names the fila request
//! it needs ([`Step::Call`]); [`MessageOp::resume`] takes that request's
//! answer and names the next request or the output ([`Step::Done`]). The
//! server runs the requests (authorized for the caller, on the loop that
//! owns the queue's shard) and feeds the answers back; nothing here waits.

use fila_proto::{self as proto, PutEntry, QueueRef, Request, Response};
use serde_json::Value;

use crate::attrs;
use crate::error::{Kind, SqsError};
use crate::fifo;
use crate::input::Input;
use crate::params::{
    number, queue_of, required, strings, BATCH_BYTES_MAX, RECEIVE_MAX, VISIBILITY_SECS_MAX,
    WAIT_SECS_MAX,
};

mod entries;
mod outgoing;
mod output;
mod received;

pub use output::{Batch, Done, Empty, Failed, Message, Output, Received, Sent};

use entries::{batch_entries, batch_result, changed, deleted, failed, handle_of};
use outgoing::Outgoing;
use received::received;

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
    /// The operation's output.
    Done(Output),
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
    BatchSettings(Vec<(String, Outgoing)>, Vec<Failed>),
    /// A batch send waiting for its put.
    BatchPut(Vec<(String, Outgoing)>, Vec<Failed>),
    /// A receive waiting for its messages: the system and user attributes
    /// asked for.
    Receive(Vec<String>, Vec<String>),
    /// A delete or a visibility change of one receipt.
    One(Judge),
    /// A batch of deletes or visibility changes: the ids sent, the entries
    /// that failed already.
    Batch(Judge, Vec<String>, Vec<Failed>),
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
pub fn start<I: Input>(op: &str, input: &I) -> Result<(MessageOp, Step), SqsError> {
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

    fn send<I: Input>(&mut self, input: &I) -> Result<Step, SqsError> {
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

    fn send_batch<I: Input>(&mut self, input: &I) -> Result<Step, SqsError> {
        let entries = batch_entries(input)?;
        let mut parsed = Vec::with_capacity(entries.len());
        let mut failures = Vec::new();
        let fifo = fifo::is_fifo(&self.queue);
        for (id, e) in &entries {
            match Outgoing::parse(*e, fifo) {
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
        failures: Vec<Failed>,
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

    fn receive<I: Input>(&mut self, input: &I) -> Result<Step, SqsError> {
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
    fn receipt_batch<I: Input>(&mut self, input: &I, judge: Judge) -> Result<Step, SqsError> {
        let mut ids = Vec::new();
        let mut failures = Vec::new();
        // Each good entry's receipt and, for a visibility change, its new
        // visibility (0 for a delete, which takes the receipts alone).
        let mut changes = Vec::new();
        for (id, e) in batch_entries(input)? {
            let parsed = handle_of(e).and_then(|r| match judge {
                Judge::Delete => Ok((r, 0)),
                Judge::Visibility => number(e, "VisibilityTimeout", 0, VISIBILITY_SECS_MAX)?
                    .map(|s| (r, s * 1000))
                    .ok_or_else(|| SqsError::missing("VisibilityTimeout")),
            });
            match parsed {
                Ok(change) => {
                    ids.push(id);
                    changes.push(change);
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
                receipts: changes.into_iter().map(|(r, _)| r).collect(),
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
                    return Ok(Step::Done(Output::Empty(Empty {})));
                }
                let messages = messages
                    .iter()
                    .map(|m| received(m, &system, &user))
                    .collect();
                Ok(Step::Done(Output::Received(Received { messages })))
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
                    Ok(ack) => Ok(Step::Done(Output::Sent(m.sent(&ack, None)))),
                    Err(e) => Err(SqsError::of_wire(&e)),
                }
            }
            State::BatchPut(parsed, mut failures) => {
                let acks = acks(wire(answer)?, parsed.len())?;
                let mut successful = Vec::new();
                for ((id, m), ack) in parsed.iter().zip(acks) {
                    match ack {
                        Ok(ack) => successful.push(Done::Sent(m.sent(&ack, Some(id.clone())))),
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
                Ok(Step::Done(Output::Empty(Empty {})))
            }
            State::Batch(judge, ids, mut failures) => {
                let outcomes = judged(judge, wire(answer)?)?;
                let mut successful = Vec::new();
                for (id, r) in ids.iter().zip(outcomes) {
                    match r {
                        Ok(()) => successful.push(Done::Id { id: id.clone() }),
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
pub async fn run<I: Input>(
    cx: &impl crate::Caller,
    op: &str,
    input: &I,
) -> Result<Value, SqsError> {
    let (mut machine, mut step) = start(op, input)?;
    loop {
        match step {
            Step::Done(output) => return Ok(output.to_value()),
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

#[cfg(test)]
mod tests;
