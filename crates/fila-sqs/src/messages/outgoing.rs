//! A message to send: a send's input checked as SQS checks it, the fila
//! put entry it becomes, what SendMessage answers for it.

use std::collections::BTreeMap;

use super::output::Sent;
use bytes::Bytes;
use fila_proto::{self as proto, Availability, PutEntry};

use crate::attrs::{self, MessageAttribute};
use crate::error::{Kind, SqsError};
use crate::fifo::{self, FifoSend};
use crate::input::Input;
use crate::params::{number, required, DELAY_SECS_MAX};

/// One message to send, checked.
pub(super) struct Outgoing {
    body: String,
    delay_secs: Option<u64>,
    attributes: BTreeMap<String, MessageAttribute>,
    trace: Option<String>,
    /// Its group and deduplication id, to a FIFO queue.
    fifo: Option<FifoSend>,
}

impl Outgoing {
    /// A send's message, to a FIFO queue (`fifo`) or not.
    pub(super) fn parse<I: Input>(input: &I, fifo: bool) -> Result<Outgoing, SqsError> {
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
                let Some(m) = m.fields() else {
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
                        .and_then(I::as_str)
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
    pub(super) fn size(&self) -> usize {
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
    pub(super) fn wants_content_id(&self) -> bool {
        self.fifo.as_ref().is_some_and(|f| f.dedup.is_none())
    }

    /// Gives it its content's deduplication id, or fails as SQS does when
    /// the queue does not deduplicate by content.
    pub(super) fn take_content_id(&mut self, content_dedup: bool) -> Result<(), SqsError> {
        let Some(f) = self.fifo.as_mut().filter(|f| f.dedup.is_none()) else {
            return Ok(());
        };
        if !content_dedup {
            return Err(fifo::no_dedup_id());
        }
        f.dedup = Some(fifo::content_id(&self.body));
        Ok(())
    }

    pub(super) fn entry(&self) -> PutEntry {
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

    /// What SendMessage answers for it, with its acknowledgement (and
    /// SendMessageBatch, with its entry's `id`).
    pub(super) fn sent(&self, ack: &proto::PutAck, id: Option<String>) -> Sent {
        let md5_of_system_attributes = self.trace.as_ref().map(|t| {
            let mut system = BTreeMap::new();
            system.insert(
                "AWSTraceHeader".to_owned(),
                MessageAttribute {
                    data_type: "String".into(),
                    value: attrs::AttributeValue::String(t.clone()),
                },
            );
            attrs::md5_of_attributes(&system)
        });
        Sent {
            id,
            message_id: attrs::message_id(ack.id),
            sequence_number: self.fifo.as_ref().map(|_| ack.seq.to_string()),
            md5_of_body: attrs::md5_hex(self.body.as_bytes()),
            md5_of_attributes: (!self.attributes.is_empty())
                .then(|| attrs::md5_of_attributes(&self.attributes)),
            md5_of_system_attributes,
        }
    }
}
