//! Queue operations: create, URL, list, delete, purge, attributes, tags,
//! dead-letter sources.

use fila_proto::{QueueRef, Request, Response, SettingsPatch};
use serde_json::{json, Map, Value};

use crate::attrs;
use crate::error::{Kind, SqsError};
use crate::fifo;
use crate::input::Input;
use crate::params::{
    number, queue_of, required, strings, text, DELAY_SECS_MAX, VISIBILITY_SECS_MAX, WAIT_SECS_MAX,
};
use crate::{wire, Caller};

/// The defaults of a queue created through the SQS API (SQS's, where they
/// differ from fila's own): four days' retention.
const SQS_RETENTION_MS: u64 = 4 * 86_400_000;
/// Messages of at most 1 MiB, as SQS's.
const SQS_MAX_MESSAGE_BYTES: u32 = 1 << 20;

/// fila's own queue attribute `FilaRetryPolicy` (docs/sqs.md), set whole:
/// a JSON object of `initialMs`, `multiplier` (a factor, two decimals at
/// most), `maxMs` and `jitterPercent`, a field left out taking its
/// default; "" turns the policy off.
fn retry_policy(value: &str, patch: &mut SettingsPatch) -> Result<(), String> {
    let base = fila_core::QueueSettings::default();
    let mut policy = fila_core::QueueSettings {
        retry_initial_ms: 0,
        ..base.clone()
    };
    if !value.trim().is_empty() {
        read_retry_policy(value, &mut policy)?;
        policy.validate().map_err(|e| e.to_string())?;
    }
    patch.retry_initial_ms = Some(policy.retry_initial_ms);
    patch.retry_multiplier_pct = Some(policy.retry_multiplier_pct);
    patch.retry_max_ms = Some(policy.retry_max_ms);
    patch.retry_jitter_pct = Some(policy.retry_jitter_pct);
    Ok(())
}

/// The fields of a `FilaRetryPolicy` into `s`.
fn read_retry_policy(value: &str, s: &mut fila_core::QueueSettings) -> Result<(), String> {
    let policy: Value = serde_json::from_str(value).map_err(|_| "not JSON".to_owned())?;
    let Some(fields) = policy.as_object() else {
        return Err("not a JSON object".into());
    };
    let whole = |v: &Value, key: &str| {
        v.as_u64()
            .ok_or_else(|| format!("{key} is not a whole number"))
    };
    for (key, v) in fields {
        match key.as_str() {
            "initialMs" => s.retry_initial_ms = whole(v, key)?,
            "maxMs" => s.retry_max_ms = whole(v, key)?,
            "jitterPercent" => {
                let pct = whole(v, key)?;
                s.retry_jitter_pct = u8::try_from(pct).map_err(|_| format!("{key} is past 100"))?;
            }
            "multiplier" => {
                let factor = v
                    .as_f64()
                    .filter(|f| f.is_finite() && *f >= 0.0 && *f <= 1e6)
                    .ok_or_else(|| format!("{key} is not a number"))?;
                let pct = (factor * 100.0).round();
                if (factor * 100.0 - pct).abs() > 1e-6 {
                    return Err(format!("{key} has more than two decimals"));
                }
                s.retry_multiplier_pct = pct as u32;
            }
            other => return Err(format!("unknown field {other}")),
        }
    }
    Ok(())
}

/// The settings an SQS attribute map asks for, on top of `patch`;
/// `creating`: whether a queue being created is FIFO (`None`: a set).
fn settings_of<I: Input>(
    attributes: &I,
    creating: Option<bool>,
    patch: &mut SettingsPatch,
) -> Result<(), SqsError> {
    let Some(map) = attributes.fields() else {
        return Err(SqsError::invalid("Attributes must be a map."));
    };
    for (name, v) in map {
        let value = match v.as_str() {
            Some(s) => s.to_owned(),
            None => v.shown(),
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
        match name {
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
            "FilaRetryPolicy" => retry_policy(&value, patch).map_err(|why| {
                SqsError::new(
                    Kind::InvalidAttributeValue,
                    format!(
                        "Value {value} for parameter FilaRetryPolicy is invalid. Reason: {why}"
                    ),
                )
            })?,
            // Encryption at rest is the disk's business here: taken, not
            // kept.
            "SqsManagedSseEnabled" => {}
            "FifoQueue"
            | "ContentBasedDeduplication"
            | "DeduplicationScope"
            | "FifoThroughputLimit" => {
                fifo::setting(name, &value, creating, patch)?;
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
async fn check_redrive(cx: &impl Caller, source: &str, target: &str) -> Result<(), SqsError> {
    let refuse = |why: &str| {
        SqsError::invalid(format!(
            "Value for parameter RedrivePolicy is invalid. Reason: {why}"
        ))
    };
    if source == target {
        return Err(refuse("A queue cannot be its own dead-letter queue."));
    }
    let settings = match wire(
        cx,
        Request::GetQueue {
            name: target.to_owned(),
        },
    )
    .await
    {
        Ok(Response::Queue(s)) => *s,
        Ok(_) => return Err(SqsError::unexpected()),
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
fn tags_of<I: Input>(v: Option<&I>) -> Result<Vec<(String, String)>, SqsError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let map = v
        .fields()
        .ok_or_else(|| SqsError::invalid("Tags must be a map of strings."))?;
    map.into_iter()
        .map(|(k, v)| {
            let v = v.as_str().ok_or_else(|| {
                SqsError::invalid(format!("The tag {k:?} must have a string value."))
            })?;
            if k.is_empty() || k.len() > 128 || v.len() > 256 {
                return Err(SqsError::invalid(format!(
                    "The tag {k:?}: a key is 1 to 128 characters, a value at most 256."
                )));
            }
            Ok((k.to_owned(), v.to_owned()))
        })
        .collect()
}

/// CreateQueue: a queue with SQS's defaults and the attributes and tags asked for.
pub async fn create_queue<I: Input>(cx: &impl Caller, input: &I) -> Result<Value, SqsError> {
    let name = required(input, "QueueName")?;
    let attributes = input.get("Attributes").filter(|a| !a.is_null());
    let fifo_attribute = match attributes.and_then(|a| a.get("FifoQueue")) {
        None => None,
        Some(v) => Some(match v.as_str().unwrap_or_default() {
            "true" => true,
            "false" => false,
            other => {
                return Err(SqsError::new(
                    Kind::InvalidAttributeValue,
                    format!("Invalid value for the parameter FifoQueue: {other}."),
                ))
            }
        }),
    };
    let fifo = fifo::check_name(name, fifo_attribute)?;
    // SQS's defaults where they differ from fila's: no dead-lettering
    // unless asked, four days' retention, no long poll unless asked.
    let mut settings = SettingsPatch {
        max_deliveries: Some(0),
        retention_ms: Some(SQS_RETENTION_MS),
        receive_wait_default_ms: Some(0),
        max_message_bytes: Some(SQS_MAX_MESSAGE_BYTES),
        ..SettingsPatch::default()
    };
    if fifo {
        // Every message in a group, deduplicated for five minutes (fila's
        // default window, as SQS's).
        settings.ordered = Some(true);
        settings.content_dedup = Some(false);
    }
    if let Some(a) = attributes {
        settings_of(a, Some(fifo), &mut settings)?;
    }
    settings.tags_set = tags_of(input.get("tags"))?;
    if let Some(Some(target)) = &settings.dead_letter_target {
        check_redrive(cx, name, target).await?;
    }
    let req = Request::CreateQueue {
        name: name.to_owned(),
        settings,
    };
    match wire(cx, req).await {
        Ok(Response::Created(_)) => Ok(json!({ "QueueUrl": attrs::queue_url(cx.host(), name) })),
        Ok(_) => Err(SqsError::unexpected()),
        Err(e) if e.kind == Kind::QueueNameExists => Err(SqsError::new(
            Kind::QueueNameExists,
            format!("A queue already exists with the same name and a different value for attribute(s): {name}"),
        )),
        Err(e) => Err(e),
    }
}

/// GetQueueUrl: a queue's URL, if the caller's token sees it.
pub async fn get_queue_url<I: Input>(cx: &impl Caller, input: &I) -> Result<Value, SqsError> {
    let name = required(input, "QueueName")?;
    // Any grant on the queue will do (a producer looks its queue up): a
    // list, which shows only what the token sees, finds it.
    let req = Request::ListQueues {
        prefix: name.to_owned(),
        after: String::new(),
        limit: 1,
    };
    match wire(cx, req).await? {
        Response::Queues { names, .. } if names.first().map(String::as_str) == Some(name) => {
            Ok(json!({ "QueueUrl": attrs::queue_url(cx.host(), name) }))
        }
        Response::Queues { .. } => Err(SqsError::new(
            Kind::QueueDoesNotExist,
            "The specified queue does not exist.",
        )),
        _ => Err(SqsError::unexpected()),
    }
}

/// ListQueues: the queues' URLs by prefix, a page when MaxResults asks for one.
pub async fn list_queues<I: Input>(cx: &impl Caller, input: &I) -> Result<Value, SqsError> {
    let prefix = text(input, "QueueNamePrefix")?.unwrap_or("").to_owned();
    let max = number(input, "MaxResults", 1, 1000)?;
    let after = text(input, "NextToken")?.unwrap_or("").to_owned();
    let req = Request::ListQueues {
        prefix,
        after,
        limit: max.unwrap_or(1000) as u16,
    };
    let Response::Queues { names, next } = wire(cx, req).await? else {
        return Err(SqsError::unexpected());
    };
    let mut out = Map::new();
    if !names.is_empty() {
        let urls: Vec<Value> = names
            .iter()
            .map(|n| Value::String(attrs::queue_url(cx.host(), n)))
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

/// DeleteQueue.
pub async fn delete_queue<I: Input>(cx: &impl Caller, input: &I) -> Result<Value, SqsError> {
    let name = queue_of(input)?;
    wire(
        cx,
        Request::DeleteQueue {
            name,
            if_exists: false,
        },
    )
    .await?;
    Ok(json!({}))
}

/// PurgeQueue: at most once a minute a queue, as SQS.
pub async fn purge_queue<I: Input>(cx: &impl Caller, input: &I) -> Result<Value, SqsError> {
    let name = queue_of(input)?;
    cx.begin_purge(&name)?;
    let result = wire(
        cx,
        Request::Purge {
            queue: QueueRef {
                name: name.clone(),
                dlq: false,
            },
        },
    )
    .await;
    if result.is_err() {
        cx.forget_purge(&name);
    }
    result.map(|_| json!({}))
}

/// GetQueueAttributes: the settings and counts asked for, as SQS names them.
pub async fn get_queue_attributes<I: Input>(
    cx: &impl Caller,
    input: &I,
) -> Result<Value, SqsError> {
    let name = queue_of(input)?;
    let asked = strings(input, "AttributeNames")?;
    let all = asked.iter().any(|a| a == "All");
    let want = |n: &str| all || asked.iter().any(|a| a == n);
    const KNOWN: [&str; 20] = [
        "All",
        "FilaRetryPolicy",
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
        "FifoQueue",
        "ContentBasedDeduplication",
        "DeduplicationScope",
        "FifoThroughputLimit",
    ];
    if let Some(bad) = asked.iter().find(|a| !KNOWN.contains(&a.as_str())) {
        return Err(SqsError::new(
            Kind::InvalidAttributeName,
            format!("Unknown Attribute {bad}."),
        ));
    }
    let Response::Queue(s) = wire(cx, Request::GetQueue { name: name.clone() }).await? else {
        return Err(SqsError::unexpected());
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
    if fifo::is_fifo(&name) {
        put("FifoQueue", "true".into());
        put("ContentBasedDeduplication", s.content_dedup.to_string());
        put("DeduplicationScope", "queue".into());
        put("FifoThroughputLimit", "perQueue".into());
    }
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
    // fila's own: shown while the queue has a retry policy (docs/sqs.md).
    if s.retry_initial_ms > 0 {
        let factor = format!(
            "{}.{:02}",
            s.retry_multiplier_pct / 100,
            s.retry_multiplier_pct % 100
        );
        put(
            "FilaRetryPolicy",
            json!({
                "initialMs": s.retry_initial_ms,
                "multiplier": factor.parse::<f64>().unwrap_or(2.0),
                "maxMs": s.retry_max_ms,
                "jitterPercent": s.retry_jitter_pct,
            })
            .to_string(),
        );
    }
    let counts = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
        "CreatedTimestamp",
        "LastModifiedTimestamp",
    ];
    if counts.iter().any(|c| want(c)) {
        let Response::Stats(st) = wire(cx, Request::QueueStats { name }).await? else {
            return Err(SqsError::unexpected());
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

/// SetQueueAttributes: settings changed as SQS's attributes ask.
pub async fn set_queue_attributes<I: Input>(
    cx: &impl Caller,
    input: &I,
) -> Result<Value, SqsError> {
    let name = queue_of(input)?;
    let attributes = input
        .get("Attributes")
        .filter(|a| !a.is_null())
        .ok_or_else(|| SqsError::missing("Attributes"))?;
    let mut settings = SettingsPatch::default();
    // A standard queue takes no FIFO attribute, as at its create.
    let creating = (!fifo::is_fifo(&name)).then_some(false);
    settings_of(attributes, creating, &mut settings)?;
    if let Some(Some(target)) = &settings.dead_letter_target {
        check_redrive(cx, &name, target).await?;
    }
    wire(cx, Request::UpdateQueue { name, settings }).await?;
    Ok(json!({}))
}

/// TagQueue.
pub async fn tag_queue<I: Input>(cx: &impl Caller, input: &I) -> Result<Value, SqsError> {
    let name = queue_of(input)?;
    let tags = tags_of(input.get("Tags"))?;
    if tags.is_empty() {
        return Err(SqsError::missing("Tags"));
    }
    let settings = SettingsPatch {
        tags_set: tags,
        ..SettingsPatch::default()
    };
    wire(cx, Request::UpdateQueue { name, settings }).await?;
    Ok(json!({}))
}

/// UntagQueue.
pub async fn untag_queue<I: Input>(cx: &impl Caller, input: &I) -> Result<Value, SqsError> {
    let name = queue_of(input)?;
    let keys = strings(input, "TagKeys")?;
    if keys.is_empty() {
        return Err(SqsError::missing("TagKeys"));
    }
    let settings = SettingsPatch {
        tags_remove: keys,
        ..SettingsPatch::default()
    };
    wire(cx, Request::UpdateQueue { name, settings }).await?;
    Ok(json!({}))
}

/// ListQueueTags.
pub async fn list_queue_tags<I: Input>(cx: &impl Caller, input: &I) -> Result<Value, SqsError> {
    let name = queue_of(input)?;
    let Response::Queue(s) = wire(cx, Request::GetQueue { name }).await? else {
        return Err(SqsError::unexpected());
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

/// ListDeadLetterSourceQueues: the queues that dead-letter into this one.
pub async fn list_dead_letter_source_queues<I: Input>(
    cx: &impl Caller,
    input: &I,
) -> Result<Value, SqsError> {
    let target = queue_of(input)?;
    let max = number(input, "MaxResults", 1, 1000)?;
    let after = text(input, "NextToken")?.unwrap_or("").to_owned();
    // The target must exist.
    wire(
        cx,
        Request::GetQueue {
            name: target.clone(),
        },
    )
    .await?;
    let (names, next) =
        dead_letter_sources(cx, &target, max.unwrap_or(1000) as usize, after).await?;
    let found = names
        .iter()
        .map(|name| Value::String(attrs::queue_url(cx.host(), name)))
        .collect();
    let mut out = Map::new();
    out.insert("queueUrls".into(), Value::Array(found));
    if let Some(n) = next {
        out.insert("NextToken".into(), Value::String(n));
    }
    Ok(Value::Object(out))
}

/// The queues whose dead-letter target is `target`, in name order after
/// `after`: at most `want`, looking at most at [`SOURCE_SCAN_MAX`] queues;
/// with the name to go on from when it stopped early.
pub async fn dead_letter_sources(
    cx: &impl Caller,
    target: &str,
    want: usize,
    mut after: String,
) -> Result<(Vec<String>, Option<String>), SqsError> {
    let mut found = Vec::new();
    let mut scanned = 0usize;
    loop {
        let page = Request::ListQueues {
            prefix: String::new(),
            after: after.clone(),
            limit: 100,
        };
        let Response::Queues { names, next: more } = wire(cx, page).await? else {
            return Err(SqsError::unexpected());
        };
        for name in names {
            scanned += 1;
            after.clone_from(&name);
            if let Ok(Response::Queue(s)) = wire(cx, Request::GetQueue { name: name.clone() }).await
            {
                if s.dead_letter_target.as_deref() == Some(target) {
                    found.push(name.clone());
                }
            }
            if found.len() == want || scanned == SOURCE_SCAN_MAX {
                return Ok((found, Some(name)));
            }
        }
        if more.is_none() {
            return Ok((found, None));
        }
    }
}
