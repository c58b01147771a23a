//! A batch's entries and each entry's outcome: the batch checked as a
//! whole, an entry's receipt handle, what a delete or a visibility change
//! of one receipt came to, and the batch's answer.

use std::collections::HashSet;

use super::output::{Batch, Done, Failed, Output};
use fila_proto::{self as proto, ErrorCode, WireError};

use crate::attrs;
use crate::error::{Kind, SqsError};
use crate::input::Input;
use crate::params::BATCH_MAX;

/// A batch's entries: checked as SQS checks the batch as a whole.
pub(super) fn batch_entries<I: Input>(input: &I) -> Result<Vec<(String, &I)>, SqsError> {
    let entries = match input.get("Entries").filter(|e| !e.is_null()) {
        None => return Err(SqsError::missing("Entries")),
        Some(e) => e
            .as_array()
            .ok_or_else(|| SqsError::invalid("Entries must be a list."))?,
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
            .and_then(I::as_str)
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

/// What a delete of one receipt came to: done (also when its lease had
/// ended: nothing is deleted, as SQS), or the SQS error.
pub(super) fn deleted(e: proto::Entry<()>) -> Result<(), SqsError> {
    match e {
        Ok(()) => Ok(()),
        Err(WireError { code, .. }) if code == ErrorCode::RECEIPT_STALE => Ok(()),
        Err(e) => Err(SqsError::of_wire(&e)),
    }
}

/// An entry's receipt handle.
pub(super) fn handle_of<I: Input>(e: &I) -> Result<proto::Receipt, SqsError> {
    e.get("ReceiptHandle")
        .and_then(I::as_str)
        .ok_or_else(|| SqsError::missing("ReceiptHandle"))
        .and_then(attrs::receipt_of)
}

/// What a change of visibility came to: an ended lease is
/// `MessageNotInflight`, as SQS.
pub(super) fn changed(e: proto::Entry<u64>) -> Result<(), SqsError> {
    match e {
        Ok(_) => Ok(()),
        Err(WireError { code, .. }) if code == ErrorCode::RECEIPT_STALE => Err(SqsError::new(
            Kind::MessageNotInflight,
            "The message referred to is not in flight.",
        )),
        Err(e) => Err(SqsError::of_wire(&e)),
    }
}

/// A batch entry that failed, as the batch answers it.
pub(super) fn failed(id: &str, e: &SqsError) -> Failed {
    Failed::of(id, e)
}

/// A batch's answer: the entries done and those that failed.
pub(super) fn batch_result(successful: Vec<Done>, failed: Vec<Failed>) -> Output {
    Output::Batch(Batch { successful, failed })
}
