//! The SQS operations: each request's parameters checked as SQS checks
//! them, turned into fila requests, run through the gateway, and the
//! answers turned into SQS's. docs/sqs.md lists what differs.

use std::collections::{BTreeMap, HashSet};

use bytes::Bytes;
use fila_proto::{
    self as proto, Availability, ErrorCode, PutEntry, QueueRef, Request, Response, SettingsPatch,
    WireError,
};
use serde_json::{json, Map, Value};

use super::attrs::{self, MessageAttribute};
use super::error::{Kind, SqsError};
use super::gateway::{Gateway, Reply};
use super::ANSWER_ROOM;
use crate::auth::TokenId;
use crate::dispatch::{self, Answer, Caller};
use fila_core::MoveStatus;

/// Entries of one batch request.
pub(in crate::server) const BATCH_MAX: usize = 10;
/// Messages one receive takes at most.
const RECEIVE_MAX: u64 = 10;
/// The longest wait of a receive, in seconds.
const WAIT_SECS_MAX: u64 = 20;
/// The longest visibility timeout, in seconds (12 h).
const VISIBILITY_SECS_MAX: u64 = 43_200;
/// The longest delay, in seconds (15 min).
const DELAY_SECS_MAX: u64 = 900;
/// A batch's entries together are at most this many bytes (body and
/// attributes).
const BATCH_BYTES_MAX: usize = 1 << 20;

/// The defaults of a queue created through the SQS API (SQS's, where they
/// differ from fila's own).
const SQS_RETENTION_MS: u64 = 4 * 86_400_000;
const SQS_MAX_MESSAGE_BYTES: u32 = 1 << 20;

/// Who asks, and where the request was sent (for queue URLs).
pub(in crate::server) struct Context<'a> {
    pub(in crate::server) gateway: &'a Gateway,
    pub(in crate::server) token: Option<TokenId>,
    pub(in crate::server) host: &'a str,
}

impl Context<'_> {
    /// Runs a fila request the caller may make.
    async fn call(&self, req: Request, room: usize) -> Result<Reply, SqsError> {
        let caller = Caller {
            tokens: &self.gateway.shared.config.tokens,
            token: self.token,
        };
        if let Some(Response::Error(e)) = dispatch::authorize(&caller, &req) {
            return Err(SqsError::new(Kind::AccessDenied, e.message));
        }
        self.gateway.call(req, self.token, room).await
    }

    /// Runs a fila request whose answer is a wire response; an error
    /// answer is the SQS error it maps to.
    async fn wire(&self, req: Request) -> Result<Response, SqsError> {
        match self.call(req, 0).await? {
            Reply::Answer(Answer::Wire(Response::Error(e))) => Err(SqsError::of_wire(&e)),
            Reply::Answer(Answer::Wire(r)) => Ok(r),
            _ => Err(SqsError::new(Kind::InternalError, "an unexpected answer")),
        }
    }
}

/// Runs SQS operation `op` with its JSON input.
pub(in crate::server) async fn run(
    cx: &Context<'_>,
    op: &str,
    input: &Value,
) -> Result<Value, SqsError> {
    match op {
        "CreateQueue" => create_queue(cx, input).await,
        "GetQueueUrl" => get_queue_url(cx, input).await,
        "ListQueues" => list_queues(cx, input).await,
        "DeleteQueue" => delete_queue(cx, input).await,
        "PurgeQueue" => purge_queue(cx, input).await,
        "GetQueueAttributes" => get_queue_attributes(cx, input).await,
        "SetQueueAttributes" => set_queue_attributes(cx, input).await,
        "SendMessage" => send_message(cx, input).await,
        "SendMessageBatch" => send_message_batch(cx, input).await,
        "ReceiveMessage" => receive_message(cx, input).await,
        "DeleteMessage" => delete_message(cx, input).await,
        "DeleteMessageBatch" => delete_message_batch(cx, input).await,
        "ChangeMessageVisibility" => change_visibility(cx, input).await,
        "ChangeMessageVisibilityBatch" => change_visibility_batch(cx, input).await,
        "AddPermission" | "RemovePermission" => Err(SqsError::new(
            Kind::UnsupportedOperation,
            format!("{op} is not supported: fila grants access with tokens (docs/sqs.md)."),
        )),
        "TagQueue" => tag_queue(cx, input).await,
        "UntagQueue" => untag_queue(cx, input).await,
        "ListQueueTags" => list_queue_tags(cx, input).await,
        "ListDeadLetterSourceQueues" => list_dead_letter_source_queues(cx, input).await,
        "StartMessageMoveTask" => start_move_task(cx, input).await,
        "ListMessageMoveTasks" => list_move_tasks(cx, input).await,
        "CancelMessageMoveTask" => cancel_move_task(cx, input).await,
        _ => Err(SqsError::new(
            Kind::InvalidAction,
            format!("{op} is not an operation of the SQS API."),
        )),
    }
}

// ----- parameters -----------------------------------------------------------

fn text<'a>(input: &'a Value, name: &str) -> Result<Option<&'a str>, SqsError> {
    match input.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(SqsError::invalid(format!("{name} must be a string."))),
    }
}

fn required<'a>(input: &'a Value, name: &str) -> Result<&'a str, SqsError> {
    text(input, name)?.ok_or_else(|| SqsError::missing(name))
}

/// A whole number parameter (a JSON number, or its text as the query
/// protocol sends it) within `min..=max`.
fn number(input: &Value, name: &str, min: u64, max: u64) -> Result<Option<u64>, SqsError> {
    let v = match input.get(name) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.trim().parse::<u64>().ok(),
        Some(_) => None,
    };
    match v {
        Some(v) if (min..=max).contains(&v) => Ok(Some(v)),
        _ => Err(SqsError::invalid(format!(
            "Value {} for parameter {name} is invalid. Reason: must be between {min} and {max}.",
            input.get(name).map_or(String::new(), |v| v.to_string())
        ))),
    }
}

fn strings(input: &Value, name: &str) -> Result<Vec<String>, SqsError> {
    match input.get(name) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| SqsError::invalid(format!("{name} must be a list of strings.")))
            })
            .collect(),
        Some(_) => Err(SqsError::invalid(format!(
            "{name} must be a list of strings."
        ))),
    }
}

fn queue_of(input: &Value) -> Result<String, SqsError> {
    attrs::name_of_url(required(input, "QueueUrl")?)
}

fn no_fifo(input: &Value) -> Result<(), SqsError> {
    for name in ["MessageGroupId", "MessageDeduplicationId"] {
        if input.get(name).is_some_and(|v| !v.is_null()) {
            return Err(SqsError::invalid(format!(
                "The request includes the parameter {name}, which is only for FIFO queues (not supported yet)."
            )));
        }
    }
    Ok(())
}

// ----- queues ---------------------------------------------------------------

/// The settings an SQS attribute map asks for, on top of `patch`.
fn settings_of(attributes: &Value, patch: &mut SettingsPatch) -> Result<(), SqsError> {
    let Some(map) = attributes.as_object() else {
        return Err(SqsError::invalid("Attributes must be a map."));
    };
    for (name, v) in map {
        let value = match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let bad = || {
            SqsError::new(
                Kind::InvalidAttributeValue,
                format!("Invalid value for the parameter {name}: {value}."),
            )
        };
        let secs = |min: u64, max: u64| -> Result<u64, SqsError> {
            value
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|v| (min..=max).contains(v))
                .ok_or_else(bad)
        };
        match name.as_str() {
            "VisibilityTimeout" => {
                patch.visibility_timeout_ms = Some(secs(0, VISIBILITY_SECS_MAX)? * 1000)
            }
            "MessageRetentionPeriod" => patch.retention_ms = Some(secs(60, 1_209_600)? * 1000),
            "ReceiveMessageWaitTimeSeconds" => {
                patch.receive_wait_default_ms = Some(secs(0, WAIT_SECS_MAX)? * 1000)
            }
            "MaximumMessageSize" => patch.max_message_bytes = Some(secs(1024, 1 << 20)? as u32),
            "DelaySeconds" => patch.delay_ms = Some(secs(0, DELAY_SECS_MAX)? * 1000),
            "RedriveAllowPolicy" => {
                if value.is_empty() {
                    patch.redrive_allow = Some(None);
                    continue;
                }
                let policy = RedriveAllow::parse(&value).map_err(|why| {
                    SqsError::new(
                        Kind::InvalidAttributeValue,
                        format!("Value {value} for parameter RedriveAllowPolicy is invalid. Reason: {why}"),
                    )
                })?;
                patch.redrive_allow = Some(Some(policy.to_json()));
            }
            "RedrivePolicy" => {
                if value.is_empty() {
                    patch.dead_letter_target = Some(None);
                    patch.max_deliveries = Some(0);
                    continue;
                }
                let policy: Value = serde_json::from_str(&value).map_err(|_| bad())?;
                let target = policy
                    .get("deadLetterTargetArn")
                    .and_then(Value::as_str)
                    .ok_or_else(bad)?;
                let max = match policy.get("maxReceiveCount") {
                    Some(Value::Number(n)) => n.as_u64(),
                    Some(Value::String(s)) => s.parse().ok(),
                    _ => None,
                }
                .filter(|n| (1..=1000).contains(n))
                .ok_or_else(bad)?;
                patch.dead_letter_target = Some(Some(attrs::name_of_arn(target)?));
                patch.max_deliveries = Some(max as u32);
            }
            // Encryption at rest is the disk's business here: taken, not
            // kept.
            "SqsManagedSseEnabled" => {}
            "FifoQueue"
            | "ContentBasedDeduplication"
            | "DeduplicationScope"
            | "FifoThroughputLimit" => {
                return Err(SqsError::new(
                    Kind::UnsupportedOperation,
                    format!("{name}: FIFO queues are not supported yet (docs/sqs.md)."),
                ))
            }
            "Policy" | "KmsMasterKeyId" | "KmsDataKeyReusePeriodSeconds" => {
                return Err(SqsError::new(
                    Kind::InvalidAttributeName,
                    format!("The attribute {name} is not supported (docs/sqs.md)."),
                ))
            }
            _ => {
                return Err(SqsError::new(
                    Kind::InvalidAttributeName,
                    format!("Unknown Attribute {name}."),
                ))
            }
        }
    }
    Ok(())
}

/// A queue's RedriveAllowPolicy: which source queues may dead-letter into
/// it.
#[derive(Debug, PartialEq, Eq)]
enum RedriveAllow {
    All,
    None,
    /// These source queues (by name), 1 to 10.
    ByQueue(Vec<String>),
}

impl RedriveAllow {
    fn parse(text: &str) -> Result<RedriveAllow, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let permission = v
            .get("redrivePermission")
            .and_then(Value::as_str)
            .ok_or("redrivePermission is missing")?;
        let arns = v.get("sourceQueueArns");
        match permission {
            "allowAll" | "denyAll" if arns.is_some() => {
                Err("sourceQueueArns is only for redrivePermission byQueue".into())
            }
            "allowAll" => Ok(RedriveAllow::All),
            "denyAll" => Ok(RedriveAllow::None),
            "byQueue" => {
                let list = arns
                    .and_then(Value::as_array)
                    .filter(|a| (1..=10).contains(&a.len()))
                    .ok_or("byQueue needs sourceQueueArns, a list of 1 to 10 ARNs")?;
                let names = list
                    .iter()
                    .map(|a| {
                        a.as_str()
                            .ok_or_else(|| "an ARN is not a string".to_owned())
                            .and_then(|a| attrs::name_of_arn(a).map_err(|e| e.message))
                    })
                    .collect::<Result<_, _>>()?;
                Ok(RedriveAllow::ByQueue(names))
            }
            other => Err(format!(
                "redrivePermission {other:?} is not allowAll, denyAll or byQueue"
            )),
        }
    }

    /// As the attribute shows it.
    fn to_json(&self) -> String {
        match self {
            RedriveAllow::All => json!({ "redrivePermission": "allowAll" }),
            RedriveAllow::None => json!({ "redrivePermission": "denyAll" }),
            RedriveAllow::ByQueue(names) => json!({
                "redrivePermission": "byQueue",
                "sourceQueueArns": names.iter().map(|n| attrs::queue_arn(n)).collect::<Vec<_>>(),
            }),
        }
        .to_string()
    }

    fn allows(&self, source: &str) -> bool {
        match self {
            RedriveAllow::All => true,
            RedriveAllow::None => false,
            RedriveAllow::ByQueue(names) => names.iter().any(|n| n == source),
        }
    }
}

/// Checks that queue `source` may name `target` as its dead-letter queue:
/// the target exists and its RedriveAllowPolicy lets `source` in.
async fn check_redrive(cx: &Context<'_>, source: &str, target: &str) -> Result<(), SqsError> {
    let refuse = |why: &str| {
        SqsError::invalid(format!(
            "Value for parameter RedrivePolicy is invalid. Reason: {why}"
        ))
    };
    if source == target {
        return Err(refuse("A queue cannot be its own dead-letter queue."));
    }
    let settings = match cx
        .wire(Request::GetQueue {
            name: target.to_owned(),
        })
        .await
    {
        Ok(Response::Queue(s)) => *s,
        Ok(_) => return Err(SqsError::new(Kind::InternalError, "an unexpected answer")),
        Err(e) if e.kind == Kind::QueueDoesNotExist => {
            return Err(refuse("Dead letter target does not exist."))
        }
        Err(e) => return Err(e),
    };
    let policy = match settings.redrive_allow.as_deref() {
        None => RedriveAllow::All,
        Some(text) => RedriveAllow::parse(text).unwrap_or(RedriveAllow::All),
    };
    if !policy.allows(source) {
        return Err(refuse(&format!(
            "The dead-letter queue {target}'s RedriveAllowPolicy does not allow {source}."
        )));
    }
    Ok(())
}

/// Tags as the request gives them (a map of strings), checked.
fn tags_of(v: Option<&Value>) -> Result<Vec<(String, String)>, SqsError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let map = v
        .as_object()
        .ok_or_else(|| SqsError::invalid("Tags must be a map of strings."))?;
    map.iter()
        .map(|(k, v)| {
            let v = v.as_str().ok_or_else(|| {
                SqsError::invalid(format!("The tag {k:?} must have a string value."))
            })?;
            if k.is_empty() || k.len() > 128 || v.len() > 256 {
                return Err(SqsError::invalid(format!(
                    "The tag {k:?}: a key is 1 to 128 characters, a value at most 256."
                )));
            }
            Ok((k.clone(), v.to_owned()))
        })
        .collect()
}

async fn create_queue(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let name = required(input, "QueueName")?;
    if name.ends_with(".fifo") {
        return Err(SqsError::new(
            Kind::UnsupportedOperation,
            "FIFO queues are not supported yet (docs/sqs.md).",
        ));
    }
    if name.is_empty()
        || name.len() > 80
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(SqsError::invalid(
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length",
        ));
    }
    // SQS's defaults where they differ from fila's: no dead-lettering
    // unless asked, four days' retention, no long poll unless asked.
    let mut settings = SettingsPatch {
        max_deliveries: Some(0),
        retention_ms: Some(SQS_RETENTION_MS),
        receive_wait_default_ms: Some(0),
        max_message_bytes: Some(SQS_MAX_MESSAGE_BYTES),
        ..SettingsPatch::default()
    };
    if let Some(a) = input.get("Attributes").filter(|a| !a.is_null()) {
        settings_of(a, &mut settings)?;
    }
    settings.tags_set = tags_of(input.get("tags"))?;
    if let Some(Some(target)) = &settings.dead_letter_target {
        check_redrive(cx, name, target).await?;
    }
    let req = Request::CreateQueue {
        name: name.to_owned(),
        settings,
    };
    match cx.wire(req).await {
        Ok(Response::Created(_)) => Ok(json!({ "QueueUrl": attrs::queue_url(cx.host, name) })),
        Ok(_) => Err(SqsError::new(Kind::InternalError, "an unexpected answer")),
        Err(e) if e.kind == Kind::QueueNameExists => Err(SqsError::new(
            Kind::QueueNameExists,
            format!("A queue already exists with the same name and a different value for attribute(s): {name}"),
        )),
        Err(e) => Err(e),
    }
}

async fn get_queue_url(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let name = required(input, "QueueName")?;
    // Any grant on the queue will do (a producer looks its queue up): a
    // list, which shows only what the token sees, finds it.
    let req = Request::ListQueues {
        prefix: name.to_owned(),
        after: String::new(),
        limit: 1,
    };
    match cx.wire(req).await? {
        Response::Queues { names, .. } if names.first().map(String::as_str) == Some(name) => {
            Ok(json!({ "QueueUrl": attrs::queue_url(cx.host, name) }))
        }
        Response::Queues { .. } => Err(SqsError::new(
            Kind::QueueDoesNotExist,
            "The specified queue does not exist.",
        )),
        _ => Err(SqsError::new(Kind::InternalError, "an unexpected answer")),
    }
}

async fn list_queues(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let prefix = text(input, "QueueNamePrefix")?.unwrap_or("").to_owned();
    let max = number(input, "MaxResults", 1, 1000)?;
    let after = text(input, "NextToken")?.unwrap_or("").to_owned();
    let req = Request::ListQueues {
        prefix,
        after,
        limit: max.unwrap_or(1000) as u16,
    };
    let Response::Queues { names, next } = cx.wire(req).await? else {
        return Err(SqsError::new(Kind::InternalError, "an unexpected answer"));
    };
    let mut out = Map::new();
    if !names.is_empty() {
        let urls: Vec<Value> = names
            .iter()
            .map(|n| Value::String(attrs::queue_url(cx.host, n)))
            .collect();
        out.insert("QueueUrls".into(), Value::Array(urls));
    }
    // Pages only when asked for (as SQS: without MaxResults, up to 1 000
    // and no token).
    if let (Some(_), Some(next)) = (max, next) {
        out.insert("NextToken".into(), Value::String(next));
    }
    Ok(Value::Object(out))
}

async fn delete_queue(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let name = queue_of(input)?;
    cx.wire(Request::DeleteQueue {
        name,
        if_exists: false,
    })
    .await?;
    Ok(json!({}))
}

async fn purge_queue(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let name = queue_of(input)?;
    cx.gateway.begin_purge(&name)?;
    let result = cx
        .wire(Request::Purge {
            queue: QueueRef {
                name: name.clone(),
                dlq: false,
            },
        })
        .await;
    if result.is_err() {
        cx.gateway.forget_purge(&name);
    }
    result.map(|_| json!({}))
}

async fn get_queue_attributes(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let name = queue_of(input)?;
    let asked = strings(input, "AttributeNames")?;
    let all = asked.iter().any(|a| a == "All");
    let want = |n: &str| all || asked.iter().any(|a| a == n);
    const KNOWN: [&str; 15] = [
        "All",
        "QueueArn",
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
        "VisibilityTimeout",
        "MaximumMessageSize",
        "MessageRetentionPeriod",
        "DelaySeconds",
        "ReceiveMessageWaitTimeSeconds",
        "RedrivePolicy",
        "SqsManagedSseEnabled",
        "CreatedTimestamp",
        "LastModifiedTimestamp",
        "RedriveAllowPolicy",
    ];
    if let Some(bad) = asked.iter().find(|a| !KNOWN.contains(&a.as_str())) {
        return Err(SqsError::new(
            Kind::InvalidAttributeName,
            format!("Unknown Attribute {bad}."),
        ));
    }
    let Response::Queue(s) = cx.wire(Request::GetQueue { name: name.clone() }).await? else {
        return Err(SqsError::new(Kind::InternalError, "an unexpected answer"));
    };
    let mut out = Map::new();
    let mut put = |k: &str, v: String| {
        if want(k) {
            out.insert(k.to_owned(), Value::String(v));
        }
    };
    put("QueueArn", attrs::queue_arn(&name));
    put(
        "VisibilityTimeout",
        (s.visibility_timeout_ms / 1000).to_string(),
    );
    put("MaximumMessageSize", s.max_message_bytes.to_string());
    put(
        "MessageRetentionPeriod",
        (s.retention_ms / 1000).to_string(),
    );
    put("DelaySeconds", (s.delay_ms / 1000).to_string());
    put(
        "ReceiveMessageWaitTimeSeconds",
        (s.receive_wait_default_ms / 1000).to_string(),
    );
    put("SqsManagedSseEnabled", "false".into());
    if let Some(target) = &s.dead_letter_target {
        put(
            "RedrivePolicy",
            json!({ "deadLetterTargetArn": attrs::queue_arn(target), "maxReceiveCount": s.max_deliveries })
                .to_string(),
        );
    }
    if let Some(policy) = &s.redrive_allow {
        put("RedriveAllowPolicy", policy.clone());
    }
    let counts = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
        "CreatedTimestamp",
        "LastModifiedTimestamp",
    ];
    if counts.iter().any(|c| want(c)) {
        let Response::Stats(st) = cx.wire(Request::QueueStats { name }).await? else {
            return Err(SqsError::new(Kind::InternalError, "an unexpected answer"));
        };
        put("ApproximateNumberOfMessages", st.visible.to_string());
        put(
            "ApproximateNumberOfMessagesNotVisible",
            st.in_flight.to_string(),
        );
        put("ApproximateNumberOfMessagesDelayed", st.delayed.to_string());
        put("CreatedTimestamp", (st.created_at_ms / 1000).to_string());
        put(
            "LastModifiedTimestamp",
            (st.modified_at_ms / 1000).to_string(),
        );
    }
    if out.is_empty() {
        return Ok(json!({}));
    }
    Ok(json!({ "Attributes": out }))
}

async fn set_queue_attributes(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let name = queue_of(input)?;
    let attributes = input
        .get("Attributes")
        .filter(|a| !a.is_null())
        .ok_or_else(|| SqsError::missing("Attributes"))?;
    let mut settings = SettingsPatch::default();
    settings_of(attributes, &mut settings)?;
    if let Some(Some(target)) = &settings.dead_letter_target {
        check_redrive(cx, &name, target).await?;
    }
    cx.wire(Request::UpdateQueue { name, settings }).await?;
    Ok(json!({}))
}

async fn tag_queue(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let name = queue_of(input)?;
    let tags = tags_of(input.get("Tags"))?;
    if tags.is_empty() {
        return Err(SqsError::missing("Tags"));
    }
    let settings = SettingsPatch {
        tags_set: tags,
        ..SettingsPatch::default()
    };
    cx.wire(Request::UpdateQueue { name, settings }).await?;
    Ok(json!({}))
}

async fn untag_queue(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let name = queue_of(input)?;
    let keys = strings(input, "TagKeys")?;
    if keys.is_empty() {
        return Err(SqsError::missing("TagKeys"));
    }
    let settings = SettingsPatch {
        tags_remove: keys,
        ..SettingsPatch::default()
    };
    cx.wire(Request::UpdateQueue { name, settings }).await?;
    Ok(json!({}))
}

async fn list_queue_tags(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let name = queue_of(input)?;
    let Response::Queue(s) = cx.wire(Request::GetQueue { name }).await? else {
        return Err(SqsError::new(Kind::InternalError, "an unexpected answer"));
    };
    if s.tags.is_empty() {
        return Ok(json!({}));
    }
    let tags: Map<String, Value> = s
        .tags
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    Ok(json!({ "Tags": tags }))
}

/// Queues a dead-letter-source scan looks at per request at most.
const SOURCE_SCAN_MAX: usize = 1000;

async fn list_dead_letter_source_queues(
    cx: &Context<'_>,
    input: &Value,
) -> Result<Value, SqsError> {
    let target = queue_of(input)?;
    let max = number(input, "MaxResults", 1, 1000)?;
    let mut after = text(input, "NextToken")?.unwrap_or("").to_owned();
    // The target must exist.
    cx.wire(Request::GetQueue {
        name: target.clone(),
    })
    .await?;
    let want = max.unwrap_or(1000) as usize;
    let mut found = Vec::new();
    let mut scanned = 0usize;
    let mut next = None;
    'pages: loop {
        let page = Request::ListQueues {
            prefix: String::new(),
            after: after.clone(),
            limit: 100,
        };
        let Response::Queues { names, next: more } = cx.wire(page).await? else {
            return Err(SqsError::new(Kind::InternalError, "an unexpected answer"));
        };
        for name in names {
            scanned += 1;
            after.clone_from(&name);
            if let Ok(Response::Queue(s)) = cx.wire(Request::GetQueue { name: name.clone() }).await
            {
                if s.dead_letter_target.as_deref() == Some(target.as_str()) {
                    found.push(Value::String(attrs::queue_url(cx.host, &name)));
                }
            }
            if found.len() == want || scanned == SOURCE_SCAN_MAX {
                next = Some(name);
                break 'pages;
            }
        }
        if more.is_none() {
            break;
        }
    }
    let mut out = Map::new();
    out.insert("queueUrls".into(), Value::Array(found));
    if let Some(n) = next {
        out.insert("NextToken".into(), Value::String(n));
    }
    Ok(Value::Object(out))
}

// ----- messages -------------------------------------------------------------

/// One message to send, checked.
struct Outgoing {
    body: String,
    delay_secs: Option<u64>,
    attributes: BTreeMap<String, MessageAttribute>,
    trace: Option<String>,
}

impl Outgoing {
    fn parse(input: &Value) -> Result<Outgoing, SqsError> {
        no_fifo(input)?;
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

    fn entry(&self) -> PutEntry {
        PutEntry {
            payload: Bytes::from(self.body.clone().into_bytes()),
            attributes: attrs::to_fila(&self.attributes, self.trace.as_deref()),
            channel: None,
            // No DelaySeconds: the queue's delay; an explicit one, even 0,
            // overrides it (as SQS).
            availability: match self.delay_secs {
                Some(d) => Availability::DelayMs(d * 1000),
                None => Availability::Now,
            },
            ttl_ms: None,
        }
    }

    /// What SendMessage answers for it, with `id`.
    fn sent(&self, id: u128) -> Map<String, Value> {
        let mut out = Map::new();
        out.insert("MessageId".into(), Value::String(attrs::message_id(id)));
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
        _ => Err(SqsError::new(Kind::InternalError, "an unexpected answer")),
    }
}

async fn send_message(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let queue = queue_of(input)?;
    let m = Outgoing::parse(input)?;
    if m.size() > BATCH_BYTES_MAX {
        return Err(SqsError::invalid(format!(
            "One or more parameters are invalid. Reason: Message must be shorter than {BATCH_BYTES_MAX} bytes."
        )));
    }
    let mut acks = put(cx, &queue, vec![m.entry()]).await?;
    match acks.remove(0) {
        Ok(ack) => Ok(Value::Object(m.sent(ack.id))),
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

async fn send_message_batch(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let queue = queue_of(input)?;
    let entries = batch_entries(input)?;
    let mut parsed = Vec::with_capacity(entries.len());
    let mut failures = Vec::new();
    for (id, e) in &entries {
        match Outgoing::parse(e) {
            Ok(m) => parsed.push((id.clone(), m)),
            Err(err) => failures.push(failed(id, &err)),
        }
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
                    let mut out = m.sent(ack.id);
                    out.insert("Id".into(), Value::String(id.clone()));
                    successful.push(Value::Object(out));
                }
                Err(e) => failures.push(failed(id, &SqsError::of_wire(&e))),
            }
        }
    }
    Ok(batch_result(successful, failures))
}

async fn receive_message(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
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
        Reply::Answer(_) => return Err(SqsError::new(Kind::InternalError, "an unexpected answer")),
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
        sys.insert(
            "ApproximateReceiveCount".into(),
            Value::String(m.delivery_count.to_string()),
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

async fn delete_message(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
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
        return Err(SqsError::new(Kind::InternalError, "an unexpected answer"));
    };
    deleted(entries.remove(0))?;
    Ok(json!({}))
}

async fn delete_message_batch(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let queue = queue_of(input)?;
    let entries = batch_entries(input)?;
    let mut good = Vec::new();
    let mut failures = Vec::new();
    for (id, e) in &entries {
        let receipt = e
            .get("ReceiptHandle")
            .and_then(Value::as_str)
            .ok_or_else(|| SqsError::missing("ReceiptHandle"))
            .and_then(attrs::receipt_of);
        match receipt {
            Ok(r) => good.push((id.clone(), r)),
            Err(err) => failures.push(failed(id, &err)),
        }
    }
    let mut successful = Vec::new();
    if !good.is_empty() {
        let Response::Deleted(results) = cx
            .wire(Request::Delete {
                queue: QueueRef {
                    name: queue,
                    dlq: false,
                },
                receipts: good.iter().map(|(_, r)| *r).collect(),
            })
            .await?
        else {
            return Err(SqsError::new(Kind::InternalError, "an unexpected answer"));
        };
        for ((id, _), r) in good.iter().zip(results) {
            match deleted(r) {
                Ok(()) => successful.push(json!({ "Id": id })),
                Err(e) => failures.push(failed(id, &e)),
            }
        }
    }
    Ok(batch_result(successful, failures))
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

async fn change_visibility(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
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
        return Err(SqsError::new(Kind::InternalError, "an unexpected answer"));
    };
    changed(entries.remove(0))?;
    Ok(json!({}))
}

async fn change_visibility_batch(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let queue = queue_of(input)?;
    let entries = batch_entries(input)?;
    let mut good = Vec::new();
    let mut failures = Vec::new();
    for (id, e) in &entries {
        let parsed = e
            .get("ReceiptHandle")
            .and_then(Value::as_str)
            .ok_or_else(|| SqsError::missing("ReceiptHandle"))
            .and_then(attrs::receipt_of)
            .and_then(|r| {
                number(e, "VisibilityTimeout", 0, VISIBILITY_SECS_MAX)?
                    .map(|s| (r, s * 1000))
                    .ok_or_else(|| SqsError::missing("VisibilityTimeout"))
            });
        match parsed {
            Ok(p) => good.push((id.clone(), p)),
            Err(err) => failures.push(failed(id, &err)),
        }
    }
    let mut successful = Vec::new();
    if !good.is_empty() {
        let Response::Visibility(results) = cx
            .wire(Request::UpdateVisibility {
                queue: QueueRef {
                    name: queue,
                    dlq: false,
                },
                entries: good.iter().map(|(_, p)| *p).collect(),
            })
            .await?
        else {
            return Err(SqsError::new(Kind::InternalError, "an unexpected answer"));
        };
        for ((id, _), r) in good.iter().zip(results) {
            match changed(r) {
                Ok(()) => successful.push(json!({ "Id": id })),
                Err(e) => failures.push(failed(id, &e)),
            }
        }
    }
    Ok(batch_result(successful, failures))
}

// ----- message move tasks ---------------------------------------------------

/// The most messages a second a move task may be asked for (SQS's).
const MOVE_RATE_MAX: u64 = 500;

/// A task's handle: its queue and number, opaque to the client.
fn task_handle(queue: &str, id: u64) -> String {
    attrs::receipt_handle(format!("{id}:{queue}").as_bytes())
}

fn task_of_handle(handle: &str) -> Result<(String, u64), SqsError> {
    let bad = || SqsError::new(Kind::ResourceNotFound, "The task handle is not valid.");
    let bytes = attrs::bytes_of_handle(handle).ok_or_else(bad)?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let (id, queue) = text.split_once(':').ok_or_else(bad)?;
    Ok((queue.to_owned(), id.parse().map_err(|_| bad())?))
}

/// The move tasks of `queue` (fila's own redrives aside), most recent first.
async fn move_tasks(cx: &Context<'_>, queue: &str) -> Result<Vec<proto::MoveInfo>, SqsError> {
    match cx
        .wire(Request::ListMoves {
            queue: queue.to_owned(),
        })
        .await?
    {
        Response::Moves(ms) => Ok(ms.into_iter().rev().filter(|m| !m.from_dlq).collect()),
        _ => Err(SqsError::new(Kind::InternalError, "an unexpected answer")),
    }
}

async fn start_move_task(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let source = attrs::name_of_arn(required(input, "SourceArn")?)?;
    let to = match text(input, "DestinationArn")? {
        Some(arn) => Some(attrs::name_of_arn(arn)?),
        None => None,
    };
    let rate = number(input, "MaxNumberOfMessagesPerSecond", 1, MOVE_RATE_MAX)?;
    if let Some(t) = &to {
        cx.wire(Request::GetQueue { name: t.clone() })
            .await
            .map_err(|e| match e.kind {
                Kind::QueueDoesNotExist => {
                    SqsError::invalid(format!("The destination queue {t} does not exist."))
                }
                _ => e,
            })?;
    }
    if move_tasks(cx, &source)
        .await?
        .first()
        .is_some_and(|t| t.status == MoveStatus::Running.code())
    {
        return Err(SqsError::invalid(format!(
            "A message move task is already running on {source}."
        )));
    }
    let req = Request::StartMove {
        queue: source.clone(),
        to,
        max_messages: None,
        rate_per_second: rate.map(|r| r as u32),
    };
    let Response::Move(task) = cx.wire(req).await? else {
        return Err(SqsError::new(Kind::InternalError, "an unexpected answer"));
    };
    Ok(json!({ "TaskHandle": task_handle(&source, task.id) }))
}

async fn list_move_tasks(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let source = attrs::name_of_arn(required(input, "SourceArn")?)?;
    let max = number(input, "MaxResults", 1, 10)?.unwrap_or(1) as usize;
    let results: Vec<Value> = move_tasks(cx, &source)
        .await?
        .into_iter()
        .take(max)
        .map(|t| {
            let status = MoveStatus::of_code(t.status).unwrap_or(MoveStatus::Failed);
            let mut out = Map::new();
            if status == MoveStatus::Running {
                out.insert(
                    "TaskHandle".into(),
                    Value::String(task_handle(&source, t.id)),
                );
            }
            out.insert("Status".into(), Value::String(status.name().into()));
            out.insert("SourceArn".into(), Value::String(attrs::queue_arn(&source)));
            if let Some(to) = &t.to {
                out.insert("DestinationArn".into(), Value::String(attrs::queue_arn(to)));
            }
            out.insert(
                "MaxNumberOfMessagesPerSecond".into(),
                json!(t.rate_per_second),
            );
            out.insert("ApproximateNumberOfMessagesMoved".into(), json!(t.moved));
            out.insert("ApproximateNumberOfMessagesToMove".into(), json!(t.to_move));
            if let Some(f) = &t.failure {
                out.insert("FailureReason".into(), Value::String(f.clone()));
            }
            out.insert("StartedTimestamp".into(), json!(t.started_at_ms));
            Value::Object(out)
        })
        .collect();
    Ok(json!({ "Results": results }))
}

async fn cancel_move_task(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let (queue, id) = task_of_handle(required(input, "TaskHandle")?)?;
    let running = move_tasks(cx, &queue)
        .await
        .ok()
        .and_then(|ts| ts.into_iter().find(|t| t.id == id))
        .is_some_and(|t| t.status == MoveStatus::Running.code());
    if !running {
        return Err(SqsError::new(
            Kind::ResourceNotFound,
            "The task does not exist or is not running.",
        ));
    }
    let Response::Move(task) = cx.wire(Request::CancelMove { queue, id }).await? else {
        return Err(SqsError::new(Kind::InternalError, "an unexpected answer"));
    };
    Ok(json!({ "ApproximateNumberOfMessagesMoved": task.moved }))
}
