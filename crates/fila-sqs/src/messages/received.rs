//! A received message as ReceiveMessage answers it: body, digests, the
//! system attributes asked for, the message attributes asked for.

use std::collections::BTreeMap;

use super::output::Message;
use crate::attrs::{self, MessageAttribute};

/// A received message as ReceiveMessage answers it.
pub(super) fn received(m: &fila_core::Message, system: &[String], user: &[String]) -> Message {
    // A payload a binary-protocol client put that is not UTF-8 is shown
    // with replacement characters (docs/sqs.md).
    let body = String::from_utf8_lossy(&m.payload).into_owned();
    let message_id = attrs::message_id(m.id.0);
    let receipt_handle = m.receipt.map(|r| attrs::receipt_handle(&r.to_bytes()));
    let md5_of_body = attrs::md5_hex(body.as_bytes());
    let (all_user, trace) = attrs::from_fila(m.attributes.as_deref().unwrap_or_default());
    let all = system.iter().any(|s| s == "All");
    let want = |n: &str| all || system.iter().any(|s| s == n);
    let mut sys: Vec<(&'static str, String)> = Vec::new();
    if want("SenderId") {
        sys.push(("SenderId", attrs::ACCOUNT.into()));
    }
    if want("SentTimestamp") {
        sys.push(("SentTimestamp", m.inserted_at_ms.to_string()));
    }
    if want("ApproximateReceiveCount") {
        // SQS counts a message's receives across queues: one moved to its
        // dead-letter queue keeps the count it had there.
        let before = m.dead_letter.as_ref().map_or(0, |d| d.delivery_count);
        sys.push((
            "ApproximateReceiveCount",
            m.delivery_count.saturating_add(before).to_string(),
        ));
    }
    if let (true, Some(d)) = (want("DeadLetterQueueSourceArn"), &m.dead_letter) {
        sys.push((
            "DeadLetterQueueSourceArn",
            attrs::queue_arn(&d.source_queue),
        ));
    }
    if let (true, Some(at)) = (
        want("ApproximateFirstReceiveTimestamp"),
        m.first_received_at_ms,
    ) {
        sys.push(("ApproximateFirstReceiveTimestamp", at.to_string()));
    }
    if let (true, Some(t)) = (want("AWSTraceHeader"), &trace) {
        sys.push(("AWSTraceHeader", t.clone()));
    }
    if let Some(group) = &m.group {
        if want("MessageGroupId") {
            sys.push(("MessageGroupId", group.to_string()));
        }
        if want("SequenceNumber") {
            sys.push(("SequenceNumber", m.seq.to_string()));
        }
        let dedup = m
            .attributes
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|(k, _)| &**k == attrs::DEDUP_KEY);
        if let (true, Some((_, id))) = (want("MessageDeduplicationId"), dedup) {
            sys.push(("MessageDeduplicationId", id.to_string()));
        }
    }
    // Written in name order, as SQS's answers have them.
    sys.sort_unstable_by_key(|(name, _)| *name);
    let chosen: BTreeMap<String, MessageAttribute> = all_user
        .into_iter()
        .filter(|(n, _)| attrs::asked(user, n))
        .collect();
    let (md5_of_attributes, message_attributes) = if chosen.is_empty() {
        (None, None)
    } else {
        (Some(attrs::md5_of_attributes(&chosen)), Some(chosen))
    };
    Message {
        message_id,
        receipt_handle,
        md5_of_body,
        body,
        attributes: sys,
        md5_of_attributes,
        message_attributes,
    }
}
