//! The SQS-compatible HTTP API, served by the event loops beside the
//! binary protocol (docs/sqs.md is the user's reference).
//!
//! Loop 0 accepts from the SQS socket and deals the connections to every
//! loop as it deals binary ones; a loop frames their requests with
//! `fila_http::Framer` and answers them in order (`front/http.rs`). What a
//! request means — its protocol (AWS JSON 1.0 or query), SigV4, every
//! operation's checks, fila requests and answer — is the dialect crate
//! `fila_sqs`, which does no I/O. This module holds what joins the two:
//! the limits, the signature check against the tokens, the grants of each
//! fila request an operation makes, the purges of the last minute, and the
//! [`LoopCaller`] that lets a loop poll an operation written as an `async`
//! function without a runtime.
//!
//! Limits, per connection: a request head of at most [`HEAD_BYTES_MAX`]
//! and [`HEADERS_MAX`] headers, sent within [`HEAD_SECS`] of its first
//! byte; a body of at most [`BODY_BYTES_MAX`], sent within [`BODY_SECS`]
//! of its head; a connection idle for [`IDLE_SECS`] between requests is
//! closed; a request's bytes wait unread while the one before it is
//! answered. For the server: request bodies held at once at most
//! [`BODIES_BYTES_MAX`]. Connections count against `max_connections` with
//! the binary protocol's; past it a newcomer gets one `ServiceUnavailable`
//! answer and is closed.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use fila_proto::{Request, Response};
use fila_sqs::{sigv4, Answer, Caller, Head};
use tracing::debug;

use error::{Kind, SqsError};
pub(in crate::server) use fila_sqs::error;

use crate::auth::{TokenId, TokenTable};
use crate::dispatch::{self, Caller as Grants};
use crate::live::Access;

/// The most bytes of a request's head.
pub const HEAD_BYTES_MAX: usize = 16 << 10;
/// The most headers of a request.
pub const HEADERS_MAX: usize = 64;
/// How long a client has to send a request's head.
pub const HEAD_SECS: u64 = 10;
/// The most bytes of a request's body: two of the largest messages and
/// room for their attributes, as JSON.
pub const BODY_BYTES_MAX: usize = 4 << 20;
/// How long a client has to send a request's body, from its head.
pub const BODY_SECS: u64 = 10;
/// The bytes of request bodies the server holds at once, every connection
/// together (a body still coming counts what its `Content-Length` says,
/// or [`BODY_BYTES_MAX`] when chunked, until it is whole).
pub const BODIES_BYTES_MAX: usize = 256 << 20;
/// How long a keep-alive connection may stay idle between requests.
pub const IDLE_SECS: u64 = 60;

/// The framer's limits for an SQS connection.
pub(in crate::server) const LIMITS: fila_http::Limits = fila_http::Limits {
    head_bytes: HEAD_BYTES_MAX,
    headers: HEADERS_MAX,
    body_bytes: BODY_BYTES_MAX,
};

/// A queue is purged at most once in this long through the SQS API
/// (`PurgeQueueInProgress`, as SQS).
pub(in crate::server) const PURGE_SPACING: Duration = Duration::from_secs(60);

/// Queues purged through the SQS API in the last [`PURGE_SPACING`] (at
/// most one entry per queue). Taken only by `PurgeQueue`.
pub(in crate::server) type Purges = Mutex<HashMap<String, Instant>>;

/// Who signed the request: without tokens anyone (`None`, whatever the
/// credentials); with tokens a valid SigV4 signature by a token's access
/// key id, or an error (counted in `fila_sqs_auth_failures_total`).
pub(in crate::server) fn authenticate(
    metrics: &crate::metrics::Metrics,
    tokens: &TokenTable,
    head: &Head<'_>,
    body: &[u8],
    peer: SocketAddr,
) -> Result<Option<TokenId>, SqsError> {
    if tokens.is_empty() {
        return Ok(None);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let result = sigv4::check(head, body, now, |key_id| tokens.by_id(key_id));
    if let Err(e) = &result {
        metrics.sqs.auth_failures.fetch_add(1, Ordering::Relaxed);
        debug!(%peer, error = %e.message, "SQS request not authenticated");
    }
    result.map(Some)
}

/// Whether `token` (of `tokens`) may make `request`; `AccessDenied` when
/// its grants refuse it.
pub(in crate::server) fn authorize(
    tokens: &TokenTable,
    token: Option<TokenId>,
    request: &Request,
) -> Result<(), SqsError> {
    match dispatch::authorize(&Grants { tokens, token }, request) {
        Some(Response::Error(e)) => Err(SqsError::new(Kind::AccessDenied, e.message)),
        _ => Ok(()),
    }
}

/// Notes a purge of `queue`; `PurgeQueueInProgress` when one was made
/// within [`PURGE_SPACING`].
fn begin_purge(purges: &Purges, queue: &str) -> Result<(), SqsError> {
    let mut purges = purges.lock().unwrap_or_else(|p| p.into_inner());
    let now = Instant::now();
    purges.retain(|_, at| now.duration_since(*at) < PURGE_SPACING);
    if purges.contains_key(queue) {
        return Err(SqsError::new(
            Kind::PurgeQueueInProgress,
            format!("Only one PurgeQueue operation on {queue} is allowed every 60 seconds."),
        ));
    }
    purges.insert(queue.to_owned(), now);
    Ok(())
}

/// What an operation answers: a message operation's typed output, or
/// another's as a `Value`.
pub(in crate::server) enum Output {
    Typed(fila_sqs::messages::Output),
    Value(serde_json::Value),
}

/// Writes an operation's answer as `protocol` writes it: its output's
/// body into `body` (emptied first) and its head, which names the body's
/// length, into `head`; an error's whole answer goes into `head` (and
/// `body` stays empty). The caller sends `head` then `body`; both are its
/// to keep for the next answer. `close` says the connection closes after
/// it.
pub(in crate::server) fn write_answer(
    head: &mut Vec<u8>,
    body: &mut Vec<u8>,
    protocol: fila_sqs::Protocol,
    operation: &str,
    result: &Result<Output, SqsError>,
    close: bool,
) {
    let id = fila_sqs::request_id();
    body.clear();
    match result {
        Ok(Output::Typed(o)) => fila_sqs::write_output(protocol, operation, o, &id, body),
        Ok(Output::Value(v)) => {
            body.extend_from_slice(&fila_sqs::answer_body(protocol, operation, v, &id))
        }
        Err(e) => return write_error(head, protocol, e, None, close),
    }
    write_head(head, protocol, 200, body.len(), &id, None, close);
}

/// Appends the answer of error `e` to `out`, with `status` when given
/// (else the error's own).
pub(in crate::server) fn write_error(
    out: &mut Vec<u8>,
    protocol: fila_sqs::Protocol,
    e: &SqsError,
    status: Option<u16>,
    close: bool,
) {
    let id = fila_sqs::request_id();
    let body = fila_sqs::error_body(protocol, e, &id);
    let query_error = (protocol == fila_sqs::Protocol::Json).then(|| e.query_header());
    write(
        out,
        protocol,
        status.unwrap_or_else(|| e.status()),
        &body,
        &id,
        query_error.as_deref(),
        close,
    );
}

fn write(
    out: &mut Vec<u8>,
    protocol: fila_sqs::Protocol,
    status: u16,
    body: &[u8],
    id: &str,
    query_error: Option<&str>,
    close: bool,
) {
    write_head(out, protocol, status, body.len(), id, query_error, close);
    out.extend_from_slice(body);
}

/// An answer's head, for a body of `len` bytes.
fn write_head(
    out: &mut Vec<u8>,
    protocol: fila_sqs::Protocol,
    status: u16,
    len: usize,
    id: &str,
    query_error: Option<&str>,
    close: bool,
) {
    let mut headers = [
        ("content-type", protocol.content_type()),
        ("x-amzn-requestid", id),
        ("x-amzn-query-error", ""),
    ];
    let n = match query_error {
        Some(q) => {
            headers[2].1 = q;
            3
        }
        None => 2,
    };
    fila_http::write_head(out, status, &headers[..n], len, close);
}

/// The SQS error a framing error answers, with the framing error's
/// status (the connection then closes).
pub(in crate::server) fn framing_error(e: &fila_http::HttpError) -> SqsError {
    let kind = match e {
        fila_http::HttpError::BodyTooLarge(..) => Kind::RequestTooLarge,
        _ => Kind::InvalidParameterValue,
    };
    SqsError::new(kind, e.to_string())
}

/// The caller of an operation written as an `async` function of
/// `fila_sqs` (the queue operations, move tasks), for a loop that polls it
/// by hand: each fila request it awaits is authorized for the request's
/// token, then left in this thread's exchange ([`take_call`]); the loop
/// sends it as it sends a binary request and polls again once the answer
/// is in the exchange ([`put_answer`]). An operation awaits one request at
/// a time, and a loop polls one operation at a time, so the exchange holds
/// at most one of each.
pub(in crate::server) struct LoopCaller {
    pub(in crate::server) access: Arc<Access>,
    pub(in crate::server) token: Option<TokenId>,
    pub(in crate::server) host: String,
    pub(in crate::server) purges: Arc<Purges>,
}

#[derive(Default)]
struct Exchange {
    call: Option<(Request, usize)>,
    answer: Option<Answer>,
}

thread_local! {
    static EXCHANGE: RefCell<Exchange> = RefCell::default();
}

/// The fila request the operation just polled waits for, if it waits for
/// one (and its room).
pub(in crate::server) fn take_call() -> Option<(Request, usize)> {
    EXCHANGE.with(|e| e.borrow_mut().call.take())
}

/// Leaves `request` in the exchange for the loop to send (an operation
/// then awaits [`Answered`]).
pub(in crate::server) fn leave_call(request: Request, room: usize) {
    EXCHANGE.with(|e| e.borrow_mut().call = Some((request, room)));
}

/// The answer of the request taken with [`take_call`], for the operation's
/// next poll.
pub(in crate::server) fn put_answer(answer: Answer) {
    EXCHANGE.with(|e| e.borrow_mut().answer = Some(answer));
}

/// Clears the exchange (before a new operation's first poll).
pub(in crate::server) fn clear_exchange() {
    EXCHANGE.with(|e| *e.borrow_mut() = Exchange::default());
}

/// The answer of the request an operation left in the exchange: pending
/// until the loop puts it there.
pub(in crate::server) struct Answered;

impl Future for Answered {
    type Output = Answer;
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Answer> {
        match EXCHANGE.with(|e| e.borrow_mut().answer.take()) {
            Some(a) => Poll::Ready(a),
            None => Poll::Pending,
        }
    }
}

impl Caller for LoopCaller {
    async fn call(&self, request: Request, room: usize) -> Result<Answer, SqsError> {
        authorize(&self.access.tokens, self.token, &request)?;
        leave_call(request, room);
        Ok(Answered.await)
    }

    fn host(&self) -> &str {
        &self.host
    }

    fn begin_purge(&self, queue: &str) -> Result<(), SqsError> {
        begin_purge(&self.purges, queue)
    }

    fn forget_purge(&self, queue: &str) {
        self.purges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(queue);
    }
}
