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

use fila_proto::{QueueRef, Request, Response, SettingsPatch};

use crate::auth::{Need, Sas, SasScope};
use crate::error::{AzureError, Code};
use crate::request::{valid_metadata_name, valid_queue_name, Call, Op, Policy};
use crate::{time, xml, Answer, Caller, Reply};

mod messages;

use messages::{get_messages, parse_message_id, peek_messages, pop_receipt, put_message};
pub use messages::{message_id, pop_receipt_of};

/// The prefix of the tags that hold a queue's stored access policies.
pub const ACL_TAG: &str = "azure-acl:";

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
