//! Every operation of the Queue service as fila requests: the SAS's
//! permission checked first (with its stored access policy when it names
//! one), then the requests run by the [`Caller`], then the answer.
//!
//! Where each thing lives in fila: an Azure queue is the fila queue of
//! that name; its metadata are the queue's tags whose names are metadata
//! names (C# identifiers), so the SQS API's tags show as metadata and back;
//! its stored access policies are tags named `azure-acl:<id>`; a message's
//! text is its payload; a pop receipt is the fila receipt of the lease and
//! the message's id, in base64.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;

use fila_proto::{
    Availability, Fields, PutEntry, QueueRef, Receive, Request, Response, SettingsPatch,
};

use crate::auth::{Need, Sas, SasScope};
use crate::error::{AzureError, Code};
use crate::request::{valid_metadata_name, valid_queue_name, Call, Op, Policy};
use crate::{time, xml, Answer, Caller, Reply};

/// The prefix of the tags that hold a queue's stored access policies.
pub const ACL_TAG: &str = "azure-acl:";
/// The bytes of messages one receive of a Get Messages may carry.
const RECEIVE_ROOM: usize = 4 << 20;
/// Pages of 100 a Peek Messages looks at, at most, for visible messages
/// among leased ones.
const PEEK_PAGES_MAX: usize = 10;

/// Runs a request whose answer is a wire response; an error answer is
/// the Azure error it maps to.
async fn wire(cx: &impl Caller, request: Request) -> Result<Response, AzureError> {
    match cx.call(request, 0).await? {
        Answer::Wire(Response::Error(e)) => Err(AzureError::of_wire(&e)),
        Answer::Wire(r) => Ok(r),
        Answer::Engine(e) => Err(AzureError::of_engine(&e)),
        Answer::Messages(_) => Err(unexpected()),
    }
}

fn unexpected() -> AzureError {
    AzureError::new(Code::InternalError, "The server answered unexpectedly.")
}

/// A wire error of an entry, as Azure's.
fn entry_error(e: &fila_proto::WireError) -> AzureError {
    AzureError::of_wire(e)
}

/// What operation `op` needs of a SAS.
fn need(op: &Op) -> Need {
    let n = |service, account, resource_type| Need {
        service,
        account,
        resource_type,
    };
    match op {
        Op::ListQueues { .. } => n(None, 'l', 's'),
        Op::GetProperties | Op::GetStats => n(None, 'r', 's'),
        Op::SetProperties(_) => n(None, 'w', 's'),
        Op::CreateQueue { .. } => n(None, 'c', 'c'),
        Op::DeleteQueue => n(None, 'd', 'c'),
        Op::GetMetadata => n(Some('r'), 'r', 'c'),
        Op::SetMetadata { .. } => n(None, 'w', 'c'),
        Op::GetAcl => n(None, 'r', 'c'),
        Op::SetAcl(_) => n(None, 'w', 'c'),
        Op::PutMessage { .. } => n(Some('a'), 'a', 'o'),
        Op::GetMessages { .. } => n(Some('p'), 'p', 'o'),
        Op::PeekMessages { .. } => n(Some('r'), 'r', 'o'),
        Op::ClearMessages => n(None, 'd', 'o'),
        Op::DeleteMessage { .. } => n(Some('p'), 'p', 'o'),
        Op::UpdateMessage { .. } => n(Some('u'), 'u', 'o'),
    }
}

/// The settings of queue `name`.
async fn settings(cx: &impl Caller, name: &str) -> Result<Box<fila_proto::Settings>, AzureError> {
    match wire(
        cx,
        Request::GetQueue {
            name: name.to_owned(),
        },
    )
    .await?
    {
        Response::Queue(s) => Ok(s),
        _ => Err(unexpected()),
    }
}

/// The metadata among a queue's tags.
fn metadata_of(tags: &[(String, String)]) -> Vec<(String, String)> {
    tags.iter()
        .filter(|(k, _)| valid_metadata_name(k))
        .cloned()
        .collect()
}

/// The stored access policies among a queue's tags (`start|expiry|perm`).
fn policies_of(tags: &[(String, String)]) -> Vec<Policy> {
    tags.iter()
        .filter_map(|(k, v)| {
            let id = k.strip_prefix(ACL_TAG)?;
            let mut parts = v.splitn(3, '|');
            let when = |p: Option<&str>| p.and_then(|t| t.parse::<u64>().ok());
            Some(Policy {
                id: id.to_owned(),
                start_ms: when(parts.next()),
                expiry_ms: when(parts.next()),
                permission: parts.next().unwrap_or("").to_owned(),
            })
        })
        .collect()
}

fn policy_tag(p: &Policy) -> (String, String) {
    let t = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    (
        format!("{ACL_TAG}{}", p.id),
        format!("{}|{}|{}", t(p.start_ms), t(p.expiry_ms), p.permission),
    )
}

/// Checks what a SAS allows for `call`: with a stored access policy
/// (`si`), the policy's permission and times stand where the SAS leaves
/// them out.
async fn check_sas(cx: &impl Caller, call: &Call, sas: &Sas) -> Result<(), AzureError> {
    let queue = call.queue.as_deref();
    let Some(id) = &sas.identifier else {
        return sas.allows(need(&call.op), queue, &sas.permissions);
    };
    let (SasScope::Queue(q), Some(_)) = (&sas.scope, queue) else {
        return Err(AzureError::new(
            Code::AuthenticationFailed,
            "A stored access policy (si) is named by a service SAS for a queue only.",
        ));
    };
    let tags = match settings(cx, q).await {
        Ok(s) => s.tags,
        Err(e) if e.code == Code::QueueNotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    let Some(policy) = policies_of(&tags).into_iter().find(|p| &p.id == id) else {
        return Err(AzureError::new(
            Code::AuthenticationFailed,
            format!("Server failed to authenticate the request: the stored access policy {id} does not exist."),
        ));
    };
    let both = |a: bool, b: bool, what: &str| {
        if a && b {
            Err(AzureError::new(
                Code::AuthenticationFailed,
                format!("Server failed to authenticate the request: {what} is given by both the SAS and its stored access policy."),
            ))
        } else {
            Ok(())
        }
    };
    both(
        !sas.permissions.is_empty(),
        !policy.permission.is_empty(),
        "the permission",
    )?;
    both(
        sas.expiry_ms.is_some(),
        policy.expiry_ms.is_some(),
        "the expiry",
    )?;
    both(
        sas.start_ms.is_some(),
        policy.start_ms.is_some(),
        "the start",
    )?;
    let permissions = if sas.permissions.is_empty() {
        &policy.permission
    } else {
        &sas.permissions
    };
    Sas::check_time(
        sas.start_ms.or(policy.start_ms),
        sas.expiry_ms.or(policy.expiry_ms),
        cx.now_ms(),
    )?;
    sas.allows(need(&call.op), queue, permissions)
}

/// Runs a request read by [`crate::request::read`], sent by a principal
/// with `sas` when it came with one.
pub async fn run(cx: &impl Caller, call: &Call, sas: Option<&Sas>) -> Result<Reply, AzureError> {
    if let Some(sas) = sas {
        check_sas(cx, call, sas).await?;
    }
    let queue = call.queue.as_deref().unwrap_or("");
    match &call.op {
        Op::ListQueues {
            prefix,
            marker,
            max,
            metadata,
        } => list_queues(cx, &call.account, prefix, marker, *max, *metadata).await,
        Op::GetProperties => Ok(Reply::xml(
            200,
            cx.properties(&call.account)
                .unwrap_or_else(|| DEFAULT_PROPERTIES.as_bytes().to_vec()),
        )),
        Op::SetProperties(body) => {
            cx.set_properties(&call.account, body.clone());
            Ok(Reply::empty(202))
        }
        Op::GetStats => {
            let mut out = String::from(xml::DECLARATION);
            out.push_str("<StorageServiceStats><GeoReplication><Status>live</Status>");
            xml::element(&mut out, "LastSyncTime", &time::rfc1123(cx.now_ms()));
            out.push_str("</GeoReplication></StorageServiceStats>");
            Ok(Reply::xml(200, out.into_bytes()))
        }
        Op::CreateQueue { metadata } => create_queue(cx, queue, metadata).await,
        Op::DeleteQueue => {
            wire(
                cx,
                Request::DeleteQueue {
                    name: queue.to_owned(),
                    if_exists: false,
                },
            )
            .await?;
            Ok(Reply::empty(204))
        }
        Op::GetMetadata => {
            let s = settings(cx, queue).await?;
            let count = match wire(
                cx,
                Request::QueueStats {
                    name: queue.to_owned(),
                },
            )
            .await?
            {
                Response::Stats(st) => st.visible + st.in_flight + st.delayed + st.deferred,
                _ => return Err(unexpected()),
            };
            let mut reply = Reply::empty(200);
            reply
                .headers
                .push(("x-ms-approximate-messages-count".into(), count.to_string()));
            for (k, v) in metadata_of(&s.tags) {
                reply.headers.push((format!("x-ms-meta-{k}"), v));
            }
            Ok(reply)
        }
        Op::SetMetadata { metadata } => {
            let s = settings(cx, queue).await?;
            let tags_remove = metadata_of(&s.tags)
                .into_iter()
                .filter(|(k, _)| !metadata.iter().any(|(n, _)| n == k))
                .map(|(k, _)| k)
                .collect();
            update_tags(cx, queue, metadata.clone(), tags_remove).await?;
            Ok(Reply::empty(204))
        }
        Op::GetAcl => {
            let s = settings(cx, queue).await?;
            let mut out = String::from(xml::DECLARATION);
            out.push_str("<SignedIdentifiers>");
            for p in policies_of(&s.tags) {
                out.push_str("<SignedIdentifier>");
                xml::element(&mut out, "Id", &p.id);
                out.push_str("<AccessPolicy>");
                if let Some(t) = p.start_ms {
                    xml::element(&mut out, "Start", &time::iso8601(t));
                }
                if let Some(t) = p.expiry_ms {
                    xml::element(&mut out, "Expiry", &time::iso8601(t));
                }
                xml::element(&mut out, "Permission", &p.permission);
                out.push_str("</AccessPolicy></SignedIdentifier>");
            }
            out.push_str("</SignedIdentifiers>");
            Ok(Reply::xml(200, out.into_bytes()))
        }
        Op::SetAcl(policies) => {
            let s = settings(cx, queue).await?;
            let tags_remove = policies_of(&s.tags)
                .into_iter()
                .filter(|old| !policies.iter().any(|p| p.id == old.id))
                .map(|old| format!("{ACL_TAG}{}", old.id))
                .collect();
            update_tags(
                cx,
                queue,
                policies.iter().map(policy_tag).collect(),
                tags_remove,
            )
            .await?;
            Ok(Reply::empty(204))
        }
        Op::PutMessage {
            text,
            visibility,
            ttl,
        } => put_message(cx, queue, text, *visibility, *ttl).await,
        Op::GetMessages { count, visibility } => get_messages(cx, queue, *count, *visibility).await,
        Op::PeekMessages { count } => peek_messages(cx, queue, *count).await,
        Op::ClearMessages => {
            wire(
                cx,
                Request::Purge {
                    queue: QueueRef {
                        name: queue.to_owned(),
                        dlq: false,
                    },
                },
            )
            .await?;
            Ok(Reply::empty(204))
        }
        Op::DeleteMessage { id, receipt } => {
            let receipt = pop_receipt(id, receipt)?;
            let answer = wire(
                cx,
                Request::Delete {
                    queue: QueueRef {
                        name: queue.to_owned(),
                        dlq: false,
                    },
                    receipts: vec![receipt],
                },
            )
            .await?;
            match answer {
                Response::Deleted(entries) => match entries.first() {
                    Some(Ok(())) => Ok(Reply::empty(204)),
                    Some(Err(e)) => Err(entry_error(e)),
                    None => Err(unexpected()),
                },
                _ => Err(unexpected()),
            }
        }
        Op::UpdateMessage {
            id,
            receipt: text_receipt,
            visibility,
            text,
        } => {
            let receipt = pop_receipt(id, text_receipt)?;
            let answer = wire(
                cx,
                Request::UpdateMessage {
                    queue: QueueRef {
                        name: queue.to_owned(),
                        dlq: false,
                    },
                    receipt,
                    timeout_ms: *visibility as u64 * 1000,
                    payload: text
                        .as_ref()
                        .map(|t| bytes::Bytes::copy_from_slice(t.as_bytes())),
                },
            )
            .await?;
            let Response::Updated {
                receipt: renewed,
                visible_at_ms: next,
            } = answer
            else {
                return Err(unexpected());
            };
            // Released (a timeout of 0): no lease, and the old pop receipt
            // names an ended one (docs/azure.md).
            let pop = match renewed {
                Some(r) => pop_receipt_of(&r, parse_message_id(id).unwrap_or_default()),
                None => text_receipt.clone(),
            };
            let mut reply = Reply::empty(204);
            reply.headers.push(("x-ms-popreceipt".into(), pop));
            reply
                .headers
                .push(("x-ms-time-next-visible".into(), time::rfc1123(next)));
            Ok(reply)
        }
    }
}

/// Service properties as a new account has them: logging and metrics off,
/// no CORS rules.
const DEFAULT_PROPERTIES: &str = "<?xml version=\"1.0\" encoding=\"utf-8\"?><StorageServiceProperties><Logging><Version>1.0</Version><Read>false</Read><Write>false</Write><Delete>false</Delete><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></Logging><HourMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></HourMetrics><MinuteMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></MinuteMetrics><Cors /></StorageServiceProperties>";

async fn update_tags(
    cx: &impl Caller,
    queue: &str,
    tags_set: Vec<(String, String)>,
    tags_remove: Vec<String>,
) -> Result<(), AzureError> {
    wire(
        cx,
        Request::UpdateQueue {
            name: queue.to_owned(),
            settings: SettingsPatch {
                tags_set,
                tags_remove,
                ..SettingsPatch::default()
            },
        },
    )
    .await
    .map(drop)
}

async fn create_queue(
    cx: &impl Caller,
    queue: &str,
    metadata: &[(String, String)],
) -> Result<Reply, AzureError> {
    if !valid_queue_name(queue) {
        return Err(AzureError::new(
            Code::InvalidResourceName,
            format!("The specifed resource name contains invalid characters: {queue} (3 to 63 lowercase letters, digits and single hyphens, starting and ending with a letter or digit)."),
        ));
    }
    let made = wire(
        cx,
        Request::CreateQueue {
            name: queue.to_owned(),
            settings: SettingsPatch {
                tags_set: metadata.to_vec(),
                ..SettingsPatch::default()
            },
        },
    )
    .await;
    match made {
        Ok(Response::Created(true)) => Ok(Reply::empty(201)),
        Ok(Response::Created(false))
        | Err(AzureError {
            code: Code::QueueAlreadyExists,
            ..
        }) => {
            // Settings other than its metadata (made over SQS or the
            // binary protocol) do not count: only the metadata must match.
            let s = settings(cx, queue).await?;
            let mut have = metadata_of(&s.tags);
            let mut want = metadata.to_vec();
            have.sort();
            want.sort();
            if have == want {
                Ok(Reply::empty(204))
            } else {
                Err(AzureError::new(
                    Code::QueueAlreadyExists,
                    "The specified queue already exists (with other metadata).",
                ))
            }
        }
        Ok(_) => Err(unexpected()),
        Err(e) => Err(e),
    }
}

async fn list_queues(
    cx: &impl Caller,
    account: &str,
    prefix: &str,
    marker: &str,
    max: u32,
    with_metadata: bool,
) -> Result<Reply, AzureError> {
    let mut names: Vec<String> = Vec::new();
    let mut after = marker.to_owned();
    let mut next = None;
    while (names.len() as u32) < max {
        let limit = (max - names.len() as u32).min(1000) as u16;
        let answer = wire(
            cx,
            Request::ListQueues {
                prefix: prefix.to_owned(),
                after: after.clone(),
                limit,
            },
        )
        .await?;
        let Response::Queues {
            names: page,
            next: n,
        } = answer
        else {
            return Err(unexpected());
        };
        names.extend(page);
        next = n;
        match &next {
            Some(n) => after = n.clone(),
            None => break,
        }
    }
    let mut out = String::from(xml::DECLARATION);
    out.push_str("<EnumerationResults ServiceEndpoint=\"");
    let mut endpoint = String::new();
    xml::escape_into(&format!("http://{}/{account}/", cx.host()), &mut endpoint);
    out.push_str(&endpoint);
    out.push_str("\">");
    if !prefix.is_empty() {
        xml::element(&mut out, "Prefix", prefix);
    }
    if !marker.is_empty() {
        xml::element(&mut out, "Marker", marker);
    }
    xml::element(&mut out, "MaxResults", &max.to_string());
    out.push_str("<Queues>");
    for name in &names {
        out.push_str("<Queue>");
        xml::element(&mut out, "Name", name);
        if with_metadata {
            // A queue deleted since it was listed shows no metadata.
            let tags = match settings(cx, name).await {
                Ok(s) => s.tags,
                Err(e) if e.code == Code::QueueNotFound => Vec::new(),
                Err(e) => return Err(e),
            };
            out.push_str("<Metadata>");
            for (k, v) in metadata_of(&tags) {
                xml::element(&mut out, &k, &v);
            }
            out.push_str("</Metadata>");
        }
        out.push_str("</Queue>");
    }
    out.push_str("</Queues>");
    match next {
        Some(n) => xml::element(&mut out, "NextMarker", &n),
        None => out.push_str("<NextMarker />"),
    }
    out.push_str("</EnumerationResults>");
    Ok(Reply::xml(200, out.into_bytes()))
}

/// A message id as the Queue service shows it (the SQS API shows the
/// same text).
pub fn message_id(id: u128) -> String {
    let mut out = String::with_capacity(36);
    for (i, b) in id.to_be_bytes().iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        for nibble in [b >> 4, b & 0xf] {
            out.push(char::from_digit(u32::from(nibble), 16).expect("a nibble"));
        }
    }
    out
}

fn parse_message_id(id: &str) -> Option<u128> {
    let hex: String = id.chars().filter(|c| *c != '-').collect();
    (hex.len() == 32)
        .then(|| u128::from_str_radix(&hex, 16).ok())
        .flatten()
}

/// A pop receipt: the lease's fila receipt and the message's id.
pub fn pop_receipt_of(receipt: &[u8; 32], id: u128) -> String {
    let mut b = Vec::with_capacity(48);
    b.extend_from_slice(receipt);
    b.extend_from_slice(&id.to_be_bytes());
    B64.encode(b)
}

/// The receipt a pop receipt carries, for the message `id` of the URI.
fn pop_receipt(id: &str, text: &str) -> Result<[u8; 32], AzureError> {
    let bytes = B64
        .decode(text)
        .map_err(|_| AzureError::query("popreceipt", "not a pop receipt this server made"))?;
    if bytes.len() == 16 {
        return Err(AzureError::new(
            Code::PopReceiptMismatch,
            "The specified pop receipt did not match the pop receipt for a dequeued message: a pop receipt from Put Message names no lease here (docs/azure.md); get the message first.",
        ));
    }
    if bytes.len() != 48 {
        return Err(AzureError::query(
            "popreceipt",
            "not a pop receipt this server made",
        ));
    }
    let receipt: [u8; 32] = bytes[..32].try_into().expect("32 bytes");
    let of = u128::from_be_bytes(bytes[32..].try_into().expect("16 bytes"));
    if parse_message_id(id) != Some(of) {
        return Err(AzureError::new(
            Code::MessageNotFound,
            "The specified message does not exist (the pop receipt is another message's).",
        ));
    }
    Ok(receipt)
}

/// A message's text: its payload when that is XML text, else the
/// payload in base64 (docs/azure.md).
fn text_of(payload: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(payload) {
        Ok(t) if xml::is_xml_text(t) => std::borrow::Cow::Borrowed(t),
        _ => std::borrow::Cow::Owned(B64.encode(payload)),
    }
}

async fn put_message(
    cx: &impl Caller,
    queue: &str,
    text: &str,
    visibility: i64,
    ttl: Option<i64>,
) -> Result<Reply, AzureError> {
    let retention = match cx.recent_retention(queue) {
        Some(r) => r,
        None => {
            let r = settings(cx, queue).await?.retention_ms;
            cx.keep_retention(queue, Some(r));
            r
        }
    };
    // A time to live the queue does not keep messages for is the queue's
    // retention: a message never outlives it (-1 included).
    let ttl_ms = match ttl {
        Some(t) if t > 0 && (t as u64) * 1000 < retention => Some(t as u64 * 1000),
        _ => None,
    };
    let lifetime = ttl_ms.unwrap_or(retention);
    let delay = visibility as u64 * 1000;
    if delay > 0 && delay >= lifetime {
        return Err(AzureError::query(
            "visibilitytimeout",
            "must be less than the message's time to live",
        ));
    }
    let now = cx.now_ms();
    let entry = PutEntry {
        payload: bytes::Bytes::copy_from_slice(text.as_bytes()),
        // A time, not a delay: a put's delay is at most 15 minutes, an
        // Azure message's up to 7 days.
        availability: if delay > 0 {
            Availability::At(now + delay)
        } else {
            Availability::Now
        },
        ttl_ms,
        ..PutEntry::default()
    };
    let answer = wire(
        cx,
        Request::Put {
            queue: queue.to_owned(),
            messages: vec![entry],
        },
    )
    .await
    .inspect_err(|_| cx.keep_retention(queue, None))?;
    let ack = match answer {
        Response::Put(entries) => match entries.into_iter().next() {
            Some(Ok(ack)) => ack,
            Some(Err(e)) => {
                // What was kept may be what changed.
                cx.keep_retention(queue, None);
                return Err(entry_error(&e));
            }
            None => return Err(unexpected()),
        },
        _ => return Err(unexpected()),
    };
    let mut out = String::from(xml::DECLARATION);
    out.push_str("<QueueMessagesList><QueueMessage>");
    xml::element(&mut out, "MessageId", &message_id(ack.id));
    xml::element(&mut out, "InsertionTime", &time::rfc1123(now));
    xml::element(&mut out, "ExpirationTime", &time::rfc1123(now + lifetime));
    xml::element(&mut out, "PopReceipt", &B64.encode(ack.id.to_be_bytes()));
    xml::element(&mut out, "TimeNextVisible", &time::rfc1123(now + delay));
    out.push_str("</QueueMessage></QueueMessagesList>");
    Ok(Reply::xml(201, out.into_bytes()))
}

/// What Get Messages and Peek Messages show of a message.
struct Shown {
    id: u128,
    inserted_at_ms: u64,
    expires_at_ms: u64,
    next_visible_at_ms: u64,
    delivery_count: u32,
    receipt: Option<[u8; 32]>,
    payload: bytes::Bytes,
}

impl From<fila_core::Message> for Shown {
    fn from(m: fila_core::Message) -> Shown {
        Shown {
            id: m.id.0,
            inserted_at_ms: m.inserted_at_ms,
            expires_at_ms: m.expires_at_ms,
            next_visible_at_ms: m.next_visible_at_ms,
            delivery_count: m.delivery_count,
            receipt: m.receipt.map(|r| r.to_bytes()),
            payload: m.payload.to_bytes(),
        }
    }
}

impl From<fila_proto::Message> for Shown {
    fn from(m: fila_proto::Message) -> Shown {
        Shown {
            id: m.id,
            inserted_at_ms: m.inserted_at_ms,
            expires_at_ms: m.expires_at_ms,
            next_visible_at_ms: m.next_visible_at_ms,
            delivery_count: m.delivery_count,
            receipt: m.receipt,
            payload: m.payload,
        }
    }
}

/// The state code of a visible message in a peek's answer.
const VISIBLE: u8 = 1;

/// Appends `<name>` and the time `ms` (RFC 1123) and `</name>`.
fn time_element(out: &mut String, name: &str, ms: u64) {
    out.push('<');
    out.push_str(name);
    out.push('>');
    time::push_rfc1123(ms, out);
    out.push_str("</");
    out.push_str(name);
    out.push('>');
}

/// Appends a message as Get Messages (`receipt`) or Peek Messages shows it.
fn write_message(out: &mut String, m: &Shown, receipt: bool) {
    out.push_str("<QueueMessage>");
    xml::element(out, "MessageId", &message_id(m.id));
    time_element(out, "InsertionTime", m.inserted_at_ms);
    time_element(out, "ExpirationTime", m.expires_at_ms);
    if receipt {
        if let Some(r) = &m.receipt {
            xml::element(out, "PopReceipt", &pop_receipt_of(r, m.id));
        }
        time_element(out, "TimeNextVisible", m.next_visible_at_ms);
    }
    xml::element(out, "DequeueCount", &m.delivery_count.to_string());
    xml::element(out, "MessageText", &text_of(&m.payload));
    out.push_str("</QueueMessage>");
}

async fn get_messages(
    cx: &impl Caller,
    queue: &str,
    count: u8,
    visibility: i64,
) -> Result<Reply, AzureError> {
    let mut got: Vec<Shown> = Vec::with_capacity(usize::from(count));
    while got.len() < usize::from(count) {
        let ask = (usize::from(count) - got.len()).min(20) as u8;
        let request = Request::Receive(Receive {
            queue: QueueRef {
                name: queue.to_owned(),
                dlq: false,
            },
            max_messages: ask,
            visibility_ms: Some(visibility as u64 * 1000),
            wait_ms: Some(0),
            channel: None,
            fields: Fields::ALL,
        });
        let messages: Vec<Shown> = match cx.call(request, RECEIVE_ROOM).await? {
            Answer::Messages(ms) => ms.into_iter().map(Shown::from).collect(),
            Answer::Wire(Response::Messages(ms)) => ms.into_iter().map(Shown::from).collect(),
            Answer::Wire(Response::Error(e)) => return Err(AzureError::of_wire(&e)),
            Answer::Engine(e) => return Err(AzureError::of_engine(&e)),
            Answer::Wire(_) => return Err(unexpected()),
        };
        let short = messages.len() < usize::from(ask);
        got.extend(messages);
        if short {
            break;
        }
    }
    let mut out =
        String::with_capacity(256 + got.iter().map(|m| m.payload.len() + 400).sum::<usize>());
    out.push_str(xml::DECLARATION);
    out.push_str("<QueueMessagesList>");
    for m in &got {
        write_message(&mut out, m, true);
    }
    out.push_str("</QueueMessagesList>");
    Ok(Reply::xml(200, out.into_bytes()))
}

async fn peek_messages(cx: &impl Caller, queue: &str, count: u8) -> Result<Reply, AzureError> {
    let mut shown: Vec<Shown> = Vec::new();
    let mut from = 0;
    for _ in 0..PEEK_PAGES_MAX {
        let request = Request::Peek {
            queue: QueueRef {
                name: queue.to_owned(),
                dlq: false,
            },
            from_seq: from,
            max_messages: 100,
            fields: Fields::ALL,
        };
        let (last, full) = match cx.call(request, RECEIVE_ROOM).await? {
            Answer::Wire(Response::Messages(page) | Response::Selected(_, page)) => {
                let at = (page.last().map(|m| m.seq), page.len() == 100);
                let visible = page.into_iter().filter(|m| m.state == VISIBLE);
                shown.extend(visible.map(Shown::from));
                at
            }
            Answer::Messages(page) => {
                let at = (page.last().map(|m| m.seq), page.len() == 100);
                let visible = page
                    .into_iter()
                    .filter(|m| m.state == fila_core::State::Visible);
                shown.extend(visible.map(Shown::from));
                at
            }
            Answer::Wire(Response::Error(e)) => return Err(AzureError::of_wire(&e)),
            Answer::Engine(e) => return Err(AzureError::of_engine(&e)),
            Answer::Wire(_) => return Err(unexpected()),
        };
        let Some(last) = last else {
            break;
        };
        if shown.len() >= usize::from(count) || !full {
            break;
        }
        from = last + 1;
    }
    shown.truncate(usize::from(count));
    let mut out = String::from(xml::DECLARATION);
    out.push_str("<QueueMessagesList>");
    for m in &shown {
        write_message(&mut out, m, false);
    }
    out.push_str("</QueueMessagesList>");
    Ok(Reply::xml(200, out.into_bytes()))
}
