//! A request read: its account, queue and operation from the method, the
//! path-style URI (`/account[/queue[/messages[/id]]]`) and its query
//! parameters, with each parameter, header and body checked as the
//! service checks them.

use crate::error::{AzureError, Code};
use crate::xml;
use fila_http::Head;

/// The largest message text, in bytes once read from its XML (64 KiB, as
/// Azure takes).
pub const MESSAGE_BYTES_MAX: usize = 64 << 10;
/// The longest a put message's visibility delay may be, in seconds (7
/// days, as Azure has it).
pub const VISIBILITY_SECS_MAX: i64 = 7 * 86_400;
/// The longest a lease may be, in seconds (12 hours: fila's longest
/// visibility timeout; Azure's is 7 days, docs/azure.md).
pub const LEASE_SECS_MAX: i64 = (fila_core::limits::VISIBILITY_MS_MAX / 1000) as i64;
/// The most messages one Get Messages or Peek Messages takes.
pub const GET_MAX: u8 = 32;
/// The most bytes of an account's service properties.
pub const PROPERTIES_BYTES_MAX: usize = 16 << 10;
/// The most stored access policies a queue keeps.
pub const POLICIES_MAX: usize = 5;

/// A request's query parameters, decoded, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Query {
    /// (name, value) pairs.
    pub pairs: Vec<(String, String)>,
}

impl Query {
    /// Reads a query string (`%XX` decoded; `+` stays as it is, as the
    /// SDKs encode a space as `%20`).
    pub fn parse(query: &str) -> Result<Query, AzureError> {
        let mut pairs = Vec::new();
        for part in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            let text = |s: &str| {
                String::from_utf8(fila_http::percent_decode(s, false))
                    .map_err(|_| AzureError::query(k, "not UTF-8"))
            };
            pairs.push((text(k)?, text(v)?));
        }
        Ok(Query { pairs })
    }

    /// The value of parameter `name` (its first; names are matched
    /// without regard to case).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// An integer parameter within `min..=max`, if present.
    pub fn int(&self, name: &str, min: i64, max: i64) -> Result<Option<i64>, AzureError> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        let n: i64 = v
            .parse()
            .map_err(|_| AzureError::query(name, format!("{v} is not an integer")))?;
        if n < min || n > max {
            return Err(AzureError::query_range(name, min, max));
        }
        Ok(Some(n))
    }
}

/// One stored access policy of a queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Its id (1–64 characters).
    pub id: String,
    /// When it starts (ms), if it says.
    pub start_ms: Option<u64>,
    /// When it ends (ms), if it says.
    pub expiry_ms: Option<u64>,
    /// Its permission letters (of `raup`).
    pub permission: String,
}

/// An operation of the Queue service, with its input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `GET /account?comp=list`.
    ListQueues {
        /// Names starting with this.
        prefix: String,
        /// Names from this one on (a previous page's `NextMarker`).
        marker: String,
        /// 1–5000 a page.
        max: u32,
        /// Each queue's metadata too (`include=metadata`).
        metadata: bool,
    },
    /// `GET /account?restype=service&comp=properties`.
    GetProperties,
    /// `PUT /account?restype=service&comp=properties`.
    SetProperties(Vec<u8>),
    /// `GET /account?restype=service&comp=stats`.
    GetStats,
    /// `PUT /account/queue`.
    CreateQueue {
        /// Its metadata (`x-ms-meta-*`).
        metadata: Vec<(String, String)>,
    },
    /// `DELETE /account/queue`.
    DeleteQueue,
    /// `GET|HEAD /account/queue?comp=metadata`.
    GetMetadata,
    /// `PUT /account/queue?comp=metadata`.
    SetMetadata {
        /// The new metadata (replacing all of it).
        metadata: Vec<(String, String)>,
    },
    /// `GET|HEAD /account/queue?comp=acl`.
    GetAcl,
    /// `PUT /account/queue?comp=acl`.
    SetAcl(Vec<Policy>),
    /// `POST /account/queue/messages`.
    PutMessage {
        /// Its text.
        text: String,
        /// Seconds before it is visible (0–7 days).
        visibility: i64,
        /// Seconds it lives (`None`: 7 days; -1: as long as the queue
        /// keeps messages).
        ttl: Option<i64>,
    },
    /// `GET /account/queue/messages`.
    GetMessages {
        /// 1–32.
        count: u8,
        /// Seconds each stays invisible (1 s – 7 days; default 30).
        visibility: i64,
    },
    /// `GET /account/queue/messages?peekonly=true`.
    PeekMessages {
        /// 1–32.
        count: u8,
    },
    /// `DELETE /account/queue/messages`.
    ClearMessages,
    /// `DELETE /account/queue/messages/id?popreceipt=...`.
    DeleteMessage {
        /// The message id of the URI.
        id: String,
        /// Its pop receipt.
        receipt: String,
    },
    /// `PUT /account/queue/messages/id?popreceipt=...&visibilitytimeout=...`.
    UpdateMessage {
        /// The message id of the URI.
        id: String,
        /// Its pop receipt.
        receipt: String,
        /// Seconds until it is visible again (0–7 days).
        visibility: i64,
        /// Its new text, when the body carries one.
        text: Option<String>,
    },
}

impl Op {
    /// The operation's name, as the REST reference gives it (metrics
    /// count requests by it).
    pub fn name(&self) -> &'static str {
        match self {
            Op::ListQueues { .. } => "ListQueues",
            Op::GetProperties => "GetQueueServiceProperties",
            Op::SetProperties(_) => "SetQueueServiceProperties",
            Op::GetStats => "GetQueueServiceStats",
            Op::CreateQueue { .. } => "CreateQueue",
            Op::DeleteQueue => "DeleteQueue",
            Op::GetMetadata => "GetQueueMetadata",
            Op::SetMetadata { .. } => "SetQueueMetadata",
            Op::GetAcl => "GetQueueACL",
            Op::SetAcl(_) => "SetQueueACL",
            Op::PutMessage { .. } => "PutMessage",
            Op::GetMessages { .. } => "GetMessages",
            Op::PeekMessages { .. } => "PeekMessages",
            Op::ClearMessages => "ClearMessages",
            Op::DeleteMessage { .. } => "DeleteMessage",
            Op::UpdateMessage { .. } => "UpdateMessage",
        }
    }
}

/// A request read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// The account the URI names.
    pub account: String,
    /// The queue it names, if any.
    pub queue: Option<String>,
    /// The operation.
    pub op: Op,
    /// Its query parameters.
    pub query: Query,
}

/// The names every operation known to this dialect has (metrics count
/// requests by them; anything else counts as `Unknown`).
pub const OPERATIONS: [&str; 16] = [
    "ListQueues",
    "GetQueueServiceProperties",
    "SetQueueServiceProperties",
    "GetQueueServiceStats",
    "CreateQueue",
    "DeleteQueue",
    "GetQueueMetadata",
    "SetQueueMetadata",
    "GetQueueACL",
    "SetQueueACL",
    "PutMessage",
    "GetMessages",
    "PeekMessages",
    "ClearMessages",
    "DeleteMessage",
    "UpdateMessage",
];

fn verb(method: &str, what: &str) -> AzureError {
    AzureError::new(
        Code::UnsupportedHttpVerb,
        format!("The resource doesn't support the specified HTTP verb {method} ({what})."),
    )
}

/// Whether `name` is a queue name Azure takes: 3–63 characters of
/// lowercase letters, digits and single hyphens, starting and ending with
/// a letter or digit.
pub fn valid_queue_name(name: &str) -> bool {
    let b = name.as_bytes();
    (3..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
        && !name.contains("--")
}

/// Whether `name` can be a metadata name (a C# identifier, ASCII).
pub fn valid_metadata_name(name: &str) -> bool {
    let mut b = name.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// The `x-ms-meta-*` headers, checked.
fn metadata(head: &Head<'_>) -> Result<Vec<(String, String)>, AzureError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (name, value) in head.headers.iter() {
        let prefixed = name.len() > 10
            && name.is_char_boundary(10)
            && name[..10].eq_ignore_ascii_case("x-ms-meta-");
        let Some(key) = prefixed.then(|| &name[10..]) else {
            continue;
        };
        if !valid_metadata_name(key) {
            return Err(AzureError::new(
                Code::InvalidMetadata,
                format!("The metadata specified is invalid. It has characters that are not permitted: {key}"),
            ));
        }
        let value = std::str::from_utf8(value)
            .ok()
            .filter(|v| v.is_ascii())
            .ok_or_else(|| {
                AzureError::new(
                    Code::InvalidMetadata,
                    format!("The value of metadata {key} is not ASCII."),
                )
            })?;
        if out.iter().any(|(k, _)| k.eq_ignore_ascii_case(key)) {
            return Err(AzureError::new(
                Code::InvalidMetadata,
                format!("Metadata {key} is given twice."),
            ));
        }
        out.push((key.to_owned(), value.trim().to_owned()));
    }
    let size: usize = out.iter().map(|(k, v)| k.len() + v.len()).sum();
    if size > 8 << 10 {
        return Err(AzureError::new(
            Code::OutOfRangeInput,
            "The metadata is larger than 8 KiB.",
        ));
    }
    Ok(out)
}

/// The text of a `<QueueMessage><MessageText>` body.
fn message_text(body: &[u8]) -> Result<String, AzureError> {
    let doc = xml::parse(body)?;
    if doc.name != "QueueMessage" {
        return Err(AzureError::new(
            Code::InvalidXmlDocument,
            format!(
                "XML specified is not syntactically valid: the root is {}, not QueueMessage.",
                doc.name
            ),
        ));
    }
    let text = doc.child("MessageText").ok_or_else(|| {
        AzureError::new(
            Code::MissingRequiredXmlNode,
            "An XML node that is required for this request is missing: MessageText.",
        )
    })?;
    if text.text.len() > MESSAGE_BYTES_MAX {
        return Err(AzureError::new(
            Code::RequestBodyTooLarge,
            format!(
                "The request body is too large and exceeds the maximum permissible limit: a message's text is at most {MESSAGE_BYTES_MAX} bytes (got {}).",
                text.text.len()
            ),
        ));
    }
    Ok(text.text.clone())
}

/// The stored access policies of a `<SignedIdentifiers>` body.
fn policies(body: &[u8]) -> Result<Vec<Policy>, AzureError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    let doc = xml::parse(body)?;
    if doc.name != "SignedIdentifiers" {
        return Err(AzureError::new(
            Code::InvalidXmlDocument,
            "XML specified is not syntactically valid: the root must be SignedIdentifiers.",
        ));
    }
    let node = |what: &str| {
        AzureError::new(
            Code::InvalidXmlNodeValue,
            format!("The value for one of the XML nodes is not in the correct format: {what}"),
        )
    };
    let mut out: Vec<Policy> = Vec::new();
    for si in doc.all("SignedIdentifier") {
        let id = si.child("Id").map(|e| e.text.clone()).unwrap_or_default();
        if id.is_empty() || id.chars().count() > 64 {
            return Err(node("Id is 1 to 64 characters"));
        }
        if out.iter().any(|p| p.id == id) {
            return Err(node("Id is given twice"));
        }
        let policy = si.child("AccessPolicy");
        let field = |name: &str| {
            policy
                .and_then(|p| p.child(name))
                .map(|e| e.text.trim().to_owned())
                .filter(|t| !t.is_empty())
        };
        let when = |name: &str| -> Result<Option<u64>, AzureError> {
            field(name)
                .map(|t| crate::time::parse_iso8601(&t).ok_or_else(|| node(&format!("{name} {t}"))))
                .transpose()
        };
        let permission = field("Permission").unwrap_or_default();
        if !permission.chars().all(|c| "raup".contains(c)) {
            return Err(node("Permission takes the letters r, a, u and p"));
        }
        out.push(Policy {
            id,
            start_ms: when("Start")?,
            expiry_ms: when("Expiry")?,
            permission,
        });
    }
    if out.len() > POLICIES_MAX {
        return Err(AzureError::new(
            Code::InvalidXmlDocument,
            format!("XML specified is not syntactically valid: a queue has at most {POLICIES_MAX} stored access policies."),
        ));
    }
    Ok(out)
}

fn decoded_path(path: &str) -> Result<String, AzureError> {
    String::from_utf8(fila_http::percent_decode(path, false))
        .map_err(|_| AzureError::new(Code::InvalidUri, "The request URI is not UTF-8."))
}

/// The account a path-style URI names (its first segment).
pub fn account_of(path: &str) -> Result<String, AzureError> {
    let path = decoded_path(path)?;
    let account = path.trim_start_matches('/').split('/').next().unwrap_or("");
    if account.is_empty() {
        return Err(no_account());
    }
    Ok(account.to_owned())
}

fn no_account() -> AzureError {
    AzureError::new(
        Code::InvalidUri,
        "The request URI is invalid: it names no account (path-style: /account/queue).",
    )
}

/// Reads a whole request.
pub fn read(head: &Head<'_>, body: &[u8]) -> Result<Call, AzureError> {
    read_with(head, Query::parse(head.query)?, body)
}

/// [`read`] with its query parameters read already.
pub fn read_with(head: &Head<'_>, query: Query, body: &[u8]) -> Result<Call, AzureError> {
    let path = decoded_path(head.path)?;
    let mut segments = path.trim_start_matches('/').split('/');
    let account = segments.next().unwrap_or("").to_owned();
    let rest: Vec<&str> = segments.collect();
    let rest: &[&str] = match rest.as_slice() {
        // `/account/` and `/account/queue/` name what they would without
        // the slash.
        [r @ .., ""] => r,
        r => r,
    };
    if account.is_empty() {
        return Err(no_account());
    }
    let comp = query.get("comp").unwrap_or("");
    let restype = query.get("restype").unwrap_or("");
    let method = match head.method {
        "HEAD" => "GET",
        m => m,
    };
    query.int("timeout", 0, i64::from(i32::MAX))?;
    let (queue, op) = match rest {
        [] => {
            let op = match (method, comp, restype) {
                ("GET", "list", _) => {
                    let max = query.int("maxresults", 1, 5000)?.unwrap_or(5000) as u32;
                    let include = query.get("include").unwrap_or("");
                    let metadata = include.split(',').any(|i| i.trim() == "metadata");
                    if !include.split(',').all(|i| matches!(i.trim(), "" | "metadata")) {
                        return Err(AzureError::query("include", include));
                    }
                    Op::ListQueues {
                        prefix: query.get("prefix").unwrap_or("").to_owned(),
                        marker: query.get("marker").unwrap_or("").to_owned(),
                        max,
                        metadata,
                    }
                }
                ("GET", "properties", "service") => Op::GetProperties,
                ("PUT", "properties", "service") => {
                    // Kept in memory per account: bounded.
                    if body.len() > PROPERTIES_BYTES_MAX {
                        return Err(AzureError::new(
                            Code::RequestBodyTooLarge,
                            format!("The request body is too large and exceeds the maximum permissible limit: service properties are at most {PROPERTIES_BYTES_MAX} bytes."),
                        ));
                    }
                    let doc = xml::parse(body)?;
                    if doc.name != "StorageServiceProperties" {
                        return Err(AzureError::new(
                            Code::InvalidXmlDocument,
                            "XML specified is not syntactically valid: the root must be StorageServiceProperties.",
                        ));
                    }
                    Op::SetProperties(body.to_vec())
                }
                ("GET", "stats", "service") => Op::GetStats,
                (_, "list" | "properties" | "stats", _) => return Err(verb(head.method, "the account")),
                _ => {
                    return Err(AzureError::new(
                        Code::InvalidQueryParameterValue,
                        format!("Value for one of the query parameters specified in the request URI is invalid: comp={comp} restype={restype} names no operation of the account."),
                    ))
                }
            };
            (None, op)
        }
        [queue] => {
            let op = match (method, comp) {
                ("PUT", "") => Op::CreateQueue {
                    metadata: metadata(head)?,
                },
                ("DELETE", "") => Op::DeleteQueue,
                ("GET", "metadata") => Op::GetMetadata,
                ("PUT", "metadata") => Op::SetMetadata {
                    metadata: metadata(head)?,
                },
                ("GET", "acl") => Op::GetAcl,
                ("PUT", "acl") => Op::SetAcl(policies(body)?),
                (_, "" | "metadata" | "acl") => return Err(verb(head.method, "a queue")),
                _ => return Err(AzureError::query("comp", comp)),
            };
            (Some(*queue), op)
        }
        [queue, "messages"] => {
            let op = match method {
                "POST" => {
                    let visibility = query
                        .int("visibilitytimeout", 0, VISIBILITY_SECS_MAX)?
                        .unwrap_or(0);
                    let ttl = query.int("messagettl", -1, i64::from(i32::MAX))?;
                    if ttl == Some(0) {
                        return Err(AzureError::query(
                            "messagettl",
                            "0: a message's time to live is -1 (no end) or at least 1 second",
                        ));
                    }
                    if let Some(t) = ttl.filter(|t| *t > 0) {
                        if visibility >= t {
                            return Err(AzureError::query(
                                "visibilitytimeout",
                                "must be less than messagettl",
                            ));
                        }
                    }
                    Op::PutMessage {
                        text: message_text(body)?,
                        visibility,
                        ttl,
                    }
                }
                "GET" => {
                    let count = query
                        .int("numofmessages", 1, i64::from(GET_MAX))?
                        .unwrap_or(1) as u8;
                    if query
                        .get("peekonly")
                        .is_some_and(|p| p.eq_ignore_ascii_case("true"))
                    {
                        Op::PeekMessages { count }
                    } else {
                        let visibility = query
                            .int("visibilitytimeout", 1, LEASE_SECS_MAX)?
                            .unwrap_or(30);
                        Op::GetMessages { count, visibility }
                    }
                }
                "DELETE" => Op::ClearMessages,
                m => return Err(verb(m, "a queue's messages")),
            };
            (Some(*queue), op)
        }
        [queue, "messages", id] if !id.is_empty() => {
            let receipt = || {
                query.get("popreceipt").map(str::to_owned).ok_or_else(|| {
                    AzureError::new(
                        Code::MissingRequiredQueryParameter,
                        "A query parameter that's mandatory for this request is not specified: popreceipt.",
                    )
                })
            };
            let op = match method {
                "DELETE" => Op::DeleteMessage {
                    id: (*id).to_owned(),
                    receipt: receipt()?,
                },
                "PUT" => {
                    let visibility = query.int("visibilitytimeout", 0, LEASE_SECS_MAX)?.ok_or_else(|| {
                        AzureError::new(
                            Code::MissingRequiredQueryParameter,
                            "A query parameter that's mandatory for this request is not specified: visibilitytimeout.",
                        )
                    })?;
                    let text = if body.iter().all(u8::is_ascii_whitespace) {
                        None
                    } else {
                        Some(message_text(body)?)
                    };
                    Op::UpdateMessage {
                        id: (*id).to_owned(),
                        receipt: receipt()?,
                        visibility,
                        text,
                    }
                }
                m => return Err(verb(m, "a message")),
            };
            (Some(*queue), op)
        }
        _ => {
            return Err(AzureError::new(
                Code::InvalidUri,
                format!("The requested URI does not represent any resource on the server: {path}"),
            ))
        }
    };
    Ok(Call {
        account,
        queue: queue.map(str::to_owned),
        op,
        query,
    })
}
