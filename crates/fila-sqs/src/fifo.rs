//! FIFO queues, as SQS has them: a queue whose name ends in `.fifo` is a
//! fila queue with `ordered` on (every message in a group: its
//! MessageGroupId) and a deduplication id on every send (its
//! MessageDeduplicationId, or the SHA-256 of its body with
//! ContentBasedDeduplication), remembered for fila's dedup window (5
//! minutes, as SQS's). A send answers the message's SequenceNumber (fila's
//! sequence number); a receive shows MessageGroupId,
//! MessageDeduplicationId and SequenceNumber among the system attributes.

use fila_proto::SettingsPatch;
use sha2::{Digest, Sha256};

use crate::attrs;
use crate::error::{Kind, SqsError};
use crate::input::Input;

/// The name suffix of a FIFO queue.
pub const SUFFIX: &str = ".fifo";

/// Whether queue `name` is a FIFO queue.
pub fn is_fifo(name: &str) -> bool {
    name.ends_with(SUFFIX)
}

/// Checks a new queue's name against its FifoQueue attribute; answers
/// whether it is a FIFO queue.
pub fn check_name(name: &str, fifo_attribute: Option<bool>) -> Result<bool, SqsError> {
    let fifo = is_fifo(name);
    let base = name.strip_suffix(SUFFIX).unwrap_or(name);
    let good_chars = base
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if base.is_empty() || name.len() > 80 || !good_chars {
        return Err(SqsError::invalid(
            "Can only include alphanumeric characters, hyphens, or underscores (a FIFO queue's \
             name ends in .fifo). 1 to 80 in length",
        ));
    }
    match (fifo, fifo_attribute) {
        (true, Some(true)) | (false, None | Some(false)) => Ok(fifo),
        (true, _) => Err(SqsError::invalid(
            "The name of a queue ending in .fifo is a FIFO queue's: set the FifoQueue attribute \
             to true.",
        )),
        (false, Some(true)) => Err(SqsError::invalid(
            "The name of a FIFO queue must end with the .fifo suffix.",
        )),
    }
}

/// A FIFO attribute onto `patch`: `creating` is whether the queue is FIFO
/// at its create, `None` at a set of a FIFO queue's attributes, and
/// `Some(false)` too at a set of a standard queue's (which takes none of
/// them). `Ok(false)`: not one.
pub fn setting(
    name: &str,
    value: &str,
    creating: Option<bool>,
    patch: &mut SettingsPatch,
) -> Result<bool, SqsError> {
    let bad = || {
        SqsError::new(
            Kind::InvalidAttributeValue,
            format!("Invalid value for the parameter {name}: {value}."),
        )
    };
    let boolean = || match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(bad()),
    };
    let fifo_only = |creating: Option<bool>| {
        if creating == Some(false) {
            Err(SqsError::new(
                Kind::InvalidAttributeName,
                format!("Unknown Attribute {name}: it is a FIFO queue's."),
            ))
        } else {
            Ok(())
        }
    };
    match name {
        "FifoQueue" if creating == Some(false) && value == "false" => {}
        "FifoQueue" => {
            if creating != Some(true) {
                return Err(SqsError::new(
                    Kind::InvalidAttributeName,
                    "FifoQueue cannot be changed after the queue is created.",
                ));
            }
            boolean()?;
        }
        "ContentBasedDeduplication" => {
            fifo_only(creating)?;
            patch.content_dedup = Some(boolean()?);
        }
        "DeduplicationScope" => {
            fifo_only(creating)?;
            match value {
                "queue" => {}
                "messageGroup" => {
                    return Err(SqsError::new(
                        Kind::InvalidAttributeValue,
                        "DeduplicationScope messageGroup is not supported: deduplication ids \
                         are remembered per queue (docs/sqs.md).",
                    ))
                }
                _ => return Err(bad()),
            }
        }
        "FifoThroughputLimit" => {
            fifo_only(creating)?;
            match value {
                "perQueue" => {}
                "perMessageGroupId" => {
                    return Err(SqsError::new(
                        Kind::InvalidAttributeValue,
                        "FifoThroughputLimit perMessageGroupId is not supported (it needs \
                         DeduplicationScope messageGroup; docs/sqs.md).",
                    ))
                }
                _ => return Err(bad()),
            }
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// What a send to a FIFO queue carries.
pub struct FifoSend {
    /// Its MessageGroupId.
    pub group: String,
    /// `None`: the queue must deduplicate by content.
    pub dedup: Option<String>,
}

/// A MessageGroupId or MessageDeduplicationId: 1 to 128 characters,
/// letters, digits and punctuation.
fn id_of<I: Input>(input: &I, name: &str) -> Result<Option<String>, SqsError> {
    let Some(v) = input.get(name).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let s = v
        .as_str()
        .ok_or_else(|| SqsError::invalid(format!("{name} must be a string.")))?;
    if s.is_empty() || s.len() > 128 || !s.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(SqsError::invalid(format!(
            "Value {s} for parameter {name} is invalid. Reason: 1 to 128 characters of letters, \
             digits and punctuation."
        )));
    }
    Ok(Some(s.to_owned()))
}

/// A send's FIFO parameters: required on a FIFO queue (a group; no
/// per-message DelaySeconds), refused on a standard one.
pub fn send_of<I: Input>(input: &I, fifo: bool) -> Result<Option<FifoSend>, SqsError> {
    let group = id_of(input, "MessageGroupId")?;
    let dedup = id_of(input, "MessageDeduplicationId")?;
    if !fifo {
        if let Some(name) = [
            ("MessageGroupId", &group),
            ("MessageDeduplicationId", &dedup),
        ]
        .into_iter()
        .find_map(|(n, v)| v.is_some().then_some(n))
        {
            return Err(SqsError::invalid(format!(
                "The request includes the parameter {name}, which is only for FIFO queues."
            )));
        }
        return Ok(None);
    }
    if input.get("DelaySeconds").is_some_and(|v| !v.is_null()) {
        return Err(SqsError::invalid(
            "Value for parameter DelaySeconds is invalid. Reason: The request include parameter \
             that is not valid for this queue type (a FIFO queue's delay is the queue's).",
        ));
    }
    let group = group.ok_or_else(|| SqsError::missing("MessageGroupId"))?;
    Ok(Some(FifoSend { group, dedup }))
}

/// The deduplication id of a body, for a queue with
/// ContentBasedDeduplication: its SHA-256, in hex.
pub fn content_id(body: &str) -> String {
    attrs::hex(&Sha256::digest(body.as_bytes()))
}

/// The error of a FIFO send without a deduplication id to a queue without
/// content-based deduplication.
pub fn no_dedup_id() -> SqsError {
    SqsError::invalid(
        "The queue should either have ContentBasedDeduplication enabled or \
         MessageDeduplicationId provided explicitly",
    )
}
