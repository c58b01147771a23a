//! What the message operations answer, as typed values: written straight
//! to JSON (no `serde_json::Value` tree on the way), or made into the
//! query protocol's XML through one ([`Output::to_value`]).

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::Serialize;
use serde_json::Value;

use crate::attrs::{AttributeValue, MessageAttribute};
use crate::error::SqsError;

/// A message operation's output.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Output {
    /// SendMessage's.
    Sent(Sent),
    /// A batch's: the entries done and those that failed.
    Batch(Batch),
    /// ReceiveMessage's, with at least one message.
    Received(Received),
    /// An answer with nothing in it (`{}`): a delete, a visibility
    /// change, a receive that found nothing.
    Empty(Empty),
}

/// `{}`.
#[derive(Debug, Serialize)]
pub struct Empty {}

/// What SendMessage answers for a message (and SendMessageBatch for each,
/// with its `Id`).
#[derive(Debug, Serialize)]
pub struct Sent {
    /// The batch entry's id (batches only).
    #[serde(rename = "Id", skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `MessageId`.
    #[serde(rename = "MessageId")]
    pub message_id: String,
    /// A FIFO queue's sequence number.
    #[serde(rename = "SequenceNumber", skip_serializing_if = "Option::is_none")]
    pub sequence_number: Option<String>,
    /// `MD5OfMessageBody`.
    #[serde(rename = "MD5OfMessageBody")]
    pub md5_of_body: String,
    /// `MD5OfMessageAttributes`.
    #[serde(
        rename = "MD5OfMessageAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    pub md5_of_attributes: Option<String>,
    /// `MD5OfMessageSystemAttributes`.
    #[serde(
        rename = "MD5OfMessageSystemAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    pub md5_of_system_attributes: Option<String>,
}

/// A batch's answer.
#[derive(Debug, Serialize)]
pub struct Batch {
    /// `Successful`.
    #[serde(rename = "Successful")]
    pub successful: Vec<Done>,
    /// `Failed`.
    #[serde(rename = "Failed")]
    pub failed: Vec<Failed>,
}

/// A batch entry done: a send's answer, or a receipt operation's id.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Done {
    /// A sent message.
    Sent(Sent),
    /// A receipt deleted or changed.
    Id {
        /// `Id`.
        #[serde(rename = "Id")]
        id: String,
    },
}

/// A batch entry that failed.
#[derive(Debug, Serialize)]
pub struct Failed {
    /// `Id`.
    #[serde(rename = "Id")]
    pub id: String,
    /// `SenderFault`.
    #[serde(rename = "SenderFault")]
    pub sender_fault: bool,
    /// `Code`.
    #[serde(rename = "Code")]
    pub code: &'static str,
    /// `Message`.
    #[serde(rename = "Message")]
    pub message: String,
}

impl Failed {
    /// Entry `id` failed with `e`.
    pub fn of(id: &str, e: &SqsError) -> Failed {
        Failed {
            id: id.to_owned(),
            sender_fault: e.fault() == "Sender",
            code: e.code(),
            message: e.message.clone(),
        }
    }
}

/// ReceiveMessage's answer.
#[derive(Debug, Serialize)]
pub struct Received {
    /// `Messages`.
    #[serde(rename = "Messages")]
    pub messages: Vec<Message>,
}

/// A received message.
#[derive(Debug, Serialize)]
pub struct Message {
    /// `MessageId`.
    #[serde(rename = "MessageId")]
    pub message_id: String,
    /// `ReceiptHandle`.
    #[serde(rename = "ReceiptHandle", skip_serializing_if = "Option::is_none")]
    pub receipt_handle: Option<String>,
    /// `MD5OfBody`.
    #[serde(rename = "MD5OfBody")]
    pub md5_of_body: String,
    /// `Body`.
    #[serde(rename = "Body")]
    pub body: String,
    /// The system attributes asked for, by name.
    #[serde(rename = "Attributes", skip_serializing_if = "Vec::is_empty")]
    #[serde(serialize_with = "as_map")]
    pub attributes: Vec<(&'static str, String)>,
    /// `MD5OfMessageAttributes`.
    #[serde(
        rename = "MD5OfMessageAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    pub md5_of_attributes: Option<String>,
    /// The message attributes asked for.
    #[serde(rename = "MessageAttributes", skip_serializing_if = "Option::is_none")]
    #[serde(serialize_with = "as_attributes")]
    pub message_attributes: Option<BTreeMap<String, MessageAttribute>>,
}

/// Pairs as a JSON object, in their order.
fn as_map<S: serde::Serializer>(pairs: &[(&'static str, String)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(pairs.iter().map(|(k, v)| (k, v)))
}

/// Message attributes as SQS writes them: each with its `DataType` and
/// its `StringValue` or base64 `BinaryValue`.
fn as_attributes<S: serde::Serializer>(
    attrs: &Option<BTreeMap<String, MessageAttribute>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Shown<'a> {
        /// `DataType`.
        #[serde(rename = "DataType")]
        data_type: &'a str,
        /// `StringValue`.
        #[serde(rename = "StringValue", skip_serializing_if = "Option::is_none")]
        string: Option<&'a str>,
        /// `BinaryValue`.
        #[serde(rename = "BinaryValue", skip_serializing_if = "Option::is_none")]
        binary: Option<String>,
    }
    fn shown(a: &MessageAttribute) -> Shown<'_> {
        let (string, binary) = match &a.value {
            AttributeValue::String(v) => (Some(v.as_str()), None),
            AttributeValue::Binary(b) => (None, Some(B64.encode(b))),
        };
        Shown {
            data_type: &a.data_type,
            string,
            binary,
        }
    }
    s.collect_map(
        attrs
            .iter()
            .flat_map(|m| m.iter())
            .map(|(n, a)| (n, shown(a))),
    )
}

impl Output {
    /// Its JSON, appended to `out`.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        // Writing typed values into a Vec cannot fail.
        let _ = serde_json::to_writer(out, self);
    }

    /// The same as a `Value` (for the query protocol's XML, and callers
    /// of [`crate::run`]).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}
