//! A received message as ReceiveMessage answers it: body, digests, the
//! system attributes asked for, the message attributes asked for.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::attrs::{self, MessageAttribute};

/// A received message as ReceiveMessage answers it.
pub(super) fn received(m: &fila_core::Message, system: &[String], user: &[String]) -> Value {
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
