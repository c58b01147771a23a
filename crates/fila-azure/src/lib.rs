//! The Azure Queue Storage dialect of fila, with no I/O: what the Queue
//! service REST API's requests and answers are, apart from how they
//! travel.
//!
//! This crate owns, for a request whose head and body have arrived whole:
//! its account, queue, operation and parameters from a path-style URI
//! ([`request`]); SharedKey, SharedKeyLite and shared access signatures
//! ([`auth`]); XML both ways, with a reader of bounded work for request
//! bodies ([`xml`]); RFC 1123 and ISO 8601 times ([`time`]); the service's
//! errors with their codes and statuses ([`error`]); and every operation
//! as an `async fn` over a [`Caller`] that runs its fila requests
//! ([`ops`]), with the answer's status, headers and body ([`Reply`],
//! written by [`write_reply`]). Heads and bodies are framed by `fila-http`;
//! the server (`fila-server`) owns the sockets, the limits on what a
//! connection may send, the accounts and their keys, and running the
//! fila requests against the engine; docs/azure.md is the user's
//! reference.

#![forbid(unsafe_code)]

pub mod auth;
pub mod error;
pub mod ops;
pub mod request;
pub mod time;
pub mod xml;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

pub use error::{AzureError, Code};
pub use fila_http::{Head, Headers};
use fila_proto::{Request, Response};
pub use request::{read, Call, Op, Query};

/// The service version answers name in `x-ms-version` when the request
/// named none (the requests' own is echoed).
pub const VERSION: &str = "2025-01-05";

/// The answer of one fila request, as the server hands it back.
#[derive(Debug)]
pub enum Answer {
    /// An answer of the wire protocol's kind (an error among them).
    Wire(Response),
    /// A receive's messages.
    Messages(Vec<fila_core::Message>),
    /// A receive that ended with an engine error.
    Engine(fila_core::Error),
}

/// What runs an operation's fila requests: the server, for the account
/// that signed the request (each request checked against its token's
/// grants first).
pub trait Caller {
    /// Runs `request` (a receive's answer within `room` bytes of
    /// messages); an error ends the operation (the grants refuse it, the
    /// server is stopping).
    fn call(
        &self,
        request: Request,
        room: usize,
    ) -> impl Future<Output = Result<Answer, AzureError>>;
    /// The time now, ms since the Unix epoch.
    fn now_ms(&self) -> u64;
    /// The host the request was sent to (answers name it).
    fn host(&self) -> &str;
    /// The service properties last set for `account` (its XML), if any.
    fn properties(&self, account: &str) -> Option<Vec<u8>>;
    /// Keeps `xml` as `account`'s service properties.
    fn set_properties(&self, account: &str, xml: Vec<u8>);
    /// Queue `queue`'s retention (ms) as read within the last second, if
    /// the caller kept it: Put Message answers a message's expiry with it
    /// without asking the queue's settings each time.
    fn recent_retention(&self, queue: &str) -> Option<u64> {
        let _ = queue;
        None
    }
    /// Keeps queue `queue`'s retention as read now (`None`: forgets it).
    fn keep_retention(&self, queue: &str, retention_ms: Option<u64>) {
        let _ = (queue, retention_ms);
    }
}

/// An operation's answer: status, the headers of its own, and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Its own headers (the common ones are added by [`write_reply`]).
    pub headers: Vec<(String, String)>,
    /// Its body (XML, or empty).
    pub body: Vec<u8>,
}

impl Reply {
    /// An answer with no body.
    pub fn empty(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// An answer with an XML body.
    pub fn xml(status: u16, body: Vec<u8>) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".into(), "application/xml".into())],
            body,
        }
    }
}

/// A request id for `x-ms-request-id` (unique per process run,
/// GUID-shaped).
pub fn request_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("00000000-0000-4000-9000-{n:012x}")
}

/// What every answer to a request carries besides its own: the version
/// it speaks and the client's request id, echoed.
#[derive(Clone, Debug, Default)]
pub struct Common {
    /// The request's `x-ms-version` (else [`VERSION`]).
    pub version: Option<String>,
    /// The request's `x-ms-client-request-id`.
    pub client_request_id: Option<String>,
}

impl Common {
    /// What `head` asks to be echoed.
    pub fn of(head: &Head<'_>) -> Common {
        let text = |n| head.headers.text(n).map(|v| v.trim().to_owned());
        Common {
            version: text("x-ms-version"),
            client_request_id: text("x-ms-client-request-id"),
        }
    }
}

/// Writes the answer of `result` into `out`: its head (with
/// `x-ms-request-id`, `x-ms-version`, `date`, and for an error
/// `x-ms-error-code`) then its body. A `HEAD` request's answer has its
/// body's length and no body (`head_only`).
pub fn write_reply(
    out: &mut Vec<u8>,
    result: &Result<Reply, AzureError>,
    common: &Common,
    now_ms: u64,
    head_only: bool,
    close: bool,
) {
    let id = request_id();
    let date = time::rfc1123(now_ms);
    let error_reply;
    let reply = match result {
        Ok(r) => r,
        Err(e) => {
            error_reply = Reply {
                status: e.status(),
                headers: vec![
                    ("content-type".into(), "application/xml".into()),
                    ("x-ms-error-code".into(), e.code.as_str().into()),
                ],
                body: if head_only {
                    Vec::new()
                } else {
                    e.body(&id, &date)
                },
            };
            &error_reply
        }
    };
    let mut headers: Vec<(&str, &str)> = reply
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    headers.push(("x-ms-request-id", &id));
    headers.push(("x-ms-version", common.version.as_deref().unwrap_or(VERSION)));
    headers.push(("date", &date));
    if let Some(c) = &common.client_request_id {
        headers.push(("x-ms-client-request-id", c));
    }
    fila_http::write_head(out, reply.status, &headers, reply.body.len(), close);
    if !head_only {
        out.extend_from_slice(&reply.body);
    }
}

/// Authenticates and reads a request (its signature is checked before its
/// body is read), running nothing: the common path of a request up to its
/// operation, for the server and the fuzz target. `keys` and
/// `peer` are as [`auth::authenticate`] takes them.
pub fn admit<T>(
    head: &Head<'_>,
    body: &[u8],
    now_ms: u64,
    peer: (core::net::IpAddr, bool),
    keys: impl Fn(&str) -> Option<(T, Vec<u8>)>,
) -> Result<(Call, auth::Principal<T>), AzureError> {
    // Who sent it is known before its body is read.
    let query = Query::parse(head.query)?;
    let account = request::account_of(head.path)?;
    let principal = auth::authenticate(head, &account, &query, now_ms, peer, keys)?;
    let call = request::read_with(head, query, body)?;
    Ok((call, principal))
}
