//! The SQS-compatible HTTP API: a second front end beside the binary one.
//!
//! `--sqs-threads` threads each run a single-threaded tokio runtime with
//! hyper's HTTP/1.1 server (keep-alive, one request at a time per
//! connection), all accepting from one socket (the least loaded takes new
//! connections). A request of the AWS JSON 1.0 protocol (`POST /`,
//! `X-Amz-Target: AmazonSQS.<Operation>`) or of the query protocol
//! (`query.rs`) becomes one or more requests of the binary protocol's kind,
//! which go to the shards' owners by the same path a binary request takes
//! (`gateway.rs`); the answers become the SQS API's. docs/sqs.md is the
//! user's reference.
//!
//! Limits, per connection: a request head of at most [`HEAD_BYTES_MAX`]
//! and [`HEADERS_MAX`] headers, sent within [`HEAD_SECS`]; a body of at
//! most [`BODY_BYTES_MAX`], sent within [`BODY_SECS`]; a connection idle
//! for [`IDLE_SECS`] between requests is closed. For the listener: request
//! bodies held at once at most [`BODIES_BYTES_MAX`]. Connections count
//! against `max_connections` with the binary protocol's; past it a
//! newcomer gets one `ServiceUnavailable` answer and is closed.
//!
//! Under `--cfg loom` (the loom models) tokio has no sockets: the listener
//! is not built and a start fails.
#![cfg_attr(loom, allow(dead_code, unused_imports))]

use std::cell::Cell;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::Notify;
use tracing::{debug, warn};

use super::Shared;
use crate::auth::TokenId;
use crate::guard::AuthGuard;

mod actions;
mod attrs;
mod error;
mod gateway;
mod query;
mod sigv4;

use error::{Kind, SqsError};
use gateway::Gateway;

/// The most bytes of a request's head.
pub const HEAD_BYTES_MAX: usize = 16 << 10;
/// The most headers of a request.
pub const HEADERS_MAX: usize = 64;
/// How long a client has to send a request's head.
pub const HEAD_SECS: u64 = 10;
/// The most bytes of a request's body: two of the largest messages and
/// room for their attributes, as JSON.
pub const BODY_BYTES_MAX: usize = 4 << 20;
/// How long a client has to send a request's body.
pub const BODY_SECS: u64 = 10;
/// The bytes of request bodies the listener holds at once, every
/// connection together (a body counts its declared length, or
/// [`BODY_BYTES_MAX`] when chunked, from its head until its answer).
pub const BODIES_BYTES_MAX: usize = 256 << 20;
/// How long a keep-alive connection may stay idle between requests.
pub const IDLE_SECS: u64 = 60;
/// The bytes of messages one receive may carry at most.
const ANSWER_ROOM: usize = 8 << 20;

/// The running SQS listener: its threads.
pub(in crate::server) struct SqsListener {
    addr: SocketAddr,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// What the listener's threads share: the failed authentications by
/// address and the recent purges.
struct Common {
    guard: std::sync::Mutex<AuthGuard>,
    purges: gateway::Purges,
    /// Connections each thread serves now.
    served: Vec<std::sync::atomic::AtomicUsize>,
    /// Request body bytes held now (at most [`BODIES_BYTES_MAX`]).
    bodies: std::sync::atomic::AtomicUsize,
}

/// Room for one request's body, given back when dropped.
struct BodyRoom<'a> {
    common: &'a Common,
    bytes: usize,
}

impl Drop for BodyRoom<'_> {
    fn drop(&mut self) {
        self.common.bodies.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

impl Common {
    /// Whether thread `k` takes new connections now: every thread accepts
    /// from the same socket, and one serving two more than the least
    /// loaded leaves them to the others (the least loaded always accepts).
    fn may_accept(&self, k: usize) -> bool {
        let load = |i: usize| self.served[i].load(Ordering::Relaxed);
        let least = (0..self.served.len()).map(load).min().unwrap_or(0);
        load(k) <= least + 2
    }

    /// Room for a body of `bytes`, if the listener's bodies leave it.
    fn body_room(&self, bytes: usize) -> Option<BodyRoom<'_>> {
        self.bodies
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n + bytes <= BODIES_BYTES_MAX).then_some(n + bytes)
            })
            .ok()
            .map(|_| BodyRoom {
                common: self,
                bytes,
            })
    }
}

impl SqsListener {
    /// Binds `addr` (so a refused address fails the start).
    pub(in crate::server) fn bind(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
        let l = std::net::TcpListener::bind(addr)?;
        l.set_nonblocking(true)?;
        Ok(l)
    }

    #[cfg(not(loom))]
    /// Serves `listener` on one thread per notifier, each a runtime of
    /// its own accepting from the same socket; thread `k`'s gateway is
    /// endpoint `first + k` of the loops' post, woken through its notifier.
    pub(in crate::server) fn start(
        listener: std::net::TcpListener,
        first: usize,
        notifies: Vec<Arc<Notify>>,
        shared: Arc<Shared>,
    ) -> io::Result<SqsListener> {
        let addr = listener.local_addr()?;
        let common = Arc::new(Common {
            guard: std::sync::Mutex::new(AuthGuard::with_capacity(crate::guard::PEERS_MAX)),
            purges: Arc::default(),
            served: (0..notifies.len()).map(|_| Default::default()).collect(),
            bodies: Default::default(),
        });
        let mut threads = Vec::with_capacity(notifies.len());
        for (k, notify) in notifies.into_iter().enumerate() {
            let listener = listener.try_clone()?;
            let (shared, common) = (shared.clone(), common.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("fila-sqs-{k}"))
                    .spawn(move || {
                        let rt = match tokio::runtime::Builder::new_current_thread()
                            .enable_io()
                            .enable_time()
                            .build()
                        {
                            Ok(rt) => rt,
                            Err(e) => {
                                warn!(error = %e, "an SQS listener's runtime did not start");
                                return;
                            }
                        };
                        let local = tokio::task::LocalSet::new();
                        local.block_on(&rt, serve(listener, k, first + k, notify, shared, common));
                    })?,
            );
        }
        Ok(SqsListener { addr, threads })
    }

    /// No SQS listener under `--cfg loom`.
    #[cfg(loom)]
    pub(in crate::server) fn start(
        _listener: std::net::TcpListener,
        _first: usize,
        _notifies: Vec<Arc<Notify>>,
        _shared: Arc<Shared>,
    ) -> io::Result<SqsListener> {
        Err(io::Error::other("the SQS API is not built with --cfg loom"))
    }

    /// The address it listens on.
    pub(in crate::server) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits for its threads (once the server stops).
    pub(in crate::server) fn join(&mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(not(loom))]
/// Accepts and serves connections until the server stops and what is in
/// progress is answered.
async fn serve(
    listener: std::net::TcpListener,
    thread: usize,
    index: usize,
    notify: Arc<Notify>,
    shared: Arc<Shared>,
    common: Arc<Common>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            warn!(error = %e, "the SQS listener could not take its socket");
            return;
        }
    };
    let gateway = Rc::new(Gateway::new(
        index,
        shared.clone(),
        notify,
        common.purges.clone(),
    ));
    tokio::task::spawn_local(gateway.clone().mail());
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut stop_deadline: Option<Instant> = None;
    loop {
        let accepting = stop_deadline.is_none() && common.may_accept(thread);
        tokio::select! {
            accepted = listener.accept(), if accepting => match accepted {
                Ok((stream, peer)) => take_in(&gateway, &common, thread, stream, peer),
                Err(e) => {
                    // Out of descriptors or a transient failure: try again
                    // shortly.
                    warn!(error = %e, "SQS accept failed; retrying in 50 ms");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = tick.tick() => {}
        }
        if shared.stopping.load(Ordering::Acquire) {
            let deadline = *stop_deadline.get_or_insert_with(|| {
                gateway.end_parked();
                Instant::now() + Duration::from_secs(shared.config.shutdown_grace_secs)
            });
            if gateway.in_progress() == 0 || Instant::now() >= deadline {
                break;
            }
        }
    }
    shared
        .loops
        .get(index)
        .drained
        .store(true, Ordering::SeqCst);
    debug!("SQS listener stopped");
}

#[cfg(not(loom))]
/// One accepted connection: counted and served, or refused past
/// max_connections.
fn take_in(
    gateway: &Rc<Gateway>,
    common: &Arc<Common>,
    thread: usize,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
) {
    let shared = &gateway.shared;
    let open = shared.connections.load(Ordering::Acquire);
    if open as usize >= shared.config.max_connections {
        shared.metrics.refused.fetch_add(1, Ordering::Relaxed);
        debug!(%peer, "SQS connection refused: max_connections reached");
        tokio::task::spawn_local(refuse(stream, shared.config.max_connections));
        return;
    }
    shared.connections.fetch_add(1, Ordering::AcqRel);
    shared.metrics.accepted.fetch_add(1, Ordering::Relaxed);
    shared.metrics.connections.fetch_add(1, Ordering::Relaxed);
    let _ = stream.set_nodelay(true);
    common.served[thread].fetch_add(1, Ordering::Relaxed);
    tokio::task::spawn_local(connection(
        gateway.clone(),
        common.clone(),
        thread,
        stream,
        peer,
    ));
}

#[cfg(not(loom))]
/// Answers a connection past max_connections with one error, then closes.
async fn refuse(mut stream: tokio::net::TcpStream, max: usize) {
    use tokio::io::AsyncWriteExt;
    let e = SqsError::new(
        Kind::ServiceUnavailable,
        format!("The server is at its max_connections of {max}."),
    );
    let body = error_body(&e);
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/x-amz-json-1.0\r\nx-amzn-query-error: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        e.query_header(),
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(&body).await;
    })
    .await;
}

#[cfg(not(loom))]
/// Serves one keep-alive connection until its client closes it, it idles
/// past [`IDLE_SECS`], or it breaks a limit.
async fn connection(
    gateway: Rc<Gateway>,
    common: Arc<Common>,
    thread: usize,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
) {
    // When its last request ended (`None` while one is in progress).
    let idle_since: Rc<Cell<Option<Instant>>> = Rc::new(Cell::new(Some(Instant::now())));
    let service = {
        let (gateway, common, idle_since) = (gateway.clone(), common.clone(), idle_since.clone());
        service_fn(move |req| {
            let (gateway, common, idle_since) =
                (gateway.clone(), common.clone(), idle_since.clone());
            async move {
                idle_since.set(None);
                let answer = handle(&gateway, &common, req, peer).await;
                idle_since.set(Some(Instant::now()));
                Ok::<_, Infallible>(answer)
            }
        })
    };
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(HEAD_SECS))
        .max_buf_size(HEAD_BYTES_MAX.max(8192))
        .max_headers(HEADERS_MAX)
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let idle = Duration::from_secs(IDLE_SECS);
    loop {
        tokio::select! {
            done = conn.as_mut() => {
                if let Err(e) = done {
                    debug!(%peer, error = %e, "SQS connection ended");
                }
                break;
            }
            _ = tick.tick() => {
                let stopping = gateway.shared.stopping.load(Ordering::Acquire);
                let idled = idle_since.get().is_some_and(|at| at.elapsed() >= idle);
                if stopping || idled {
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
    common.served[thread].fetch_sub(1, Ordering::Relaxed);
    gateway.shared.connections.fetch_sub(1, Ordering::AcqRel);
    gateway
        .shared
        .metrics
        .connections
        .fetch_sub(1, Ordering::Relaxed);
}

/// The protocol a request speaks: the JSON protocol names its operation
/// in `X-Amz-Target`; anything else is the query protocol.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Json,
    Query,
}

impl Protocol {
    fn of(parts: &hyper::http::request::Parts) -> Protocol {
        if parts.headers.contains_key("x-amz-target") {
            Protocol::Json
        } else {
            Protocol::Query
        }
    }

    fn error(self, e: &SqsError) -> Response<Full<Bytes>> {
        let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
        match self {
            Protocol::Json => json_response(status, error_body(e), Some(e.query_header())),
            Protocol::Query => {
                let id = request_id();
                xml_response(status, query::error(e, &id).into_bytes(), &id)
            }
        }
    }
}

/// A request id for the answer's `x-amzn-requestid` (unique per process
/// run; UUID-shaped as the SDKs log it).
fn request_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("00000000-0000-4000-8000-{n:012x}")
}

/// One HTTP request: read within the limits, authenticated, dispatched by
/// protocol, answered.
async fn handle(
    gateway: &Gateway,
    common: &Common,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let protocol = Protocol::of(&parts);
    let get = parts.method == Method::GET && protocol == Protocol::Query;
    if parts.method != Method::POST && !get {
        return protocol.error(&SqsError::new(
            Kind::InvalidAction,
            "The SQS API takes POST requests (or GET with the query protocol).",
        ));
    }
    // The body's room first: its declared length (refused at once past the
    // limit), or the most a chunked one may be.
    let declared = match parts.headers.get(hyper::header::CONTENT_LENGTH) {
        Some(v) => match v.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()) {
            Some(n) if n > BODY_BYTES_MAX as u64 => {
                return protocol.error(&SqsError::new(
                    Kind::RequestTooLarge,
                    format!("A request body is at most {BODY_BYTES_MAX} bytes."),
                ))
            }
            Some(n) => n as usize,
            None => return protocol.error(&SqsError::invalid("Content-Length is not a number.")),
        },
        None if parts.headers.contains_key(hyper::header::TRANSFER_ENCODING) => BODY_BYTES_MAX,
        None => 0,
    };
    let Some(_room) = common.body_room(declared) else {
        return protocol.error(&SqsError::new(
            Kind::ServiceUnavailable,
            format!(
                "The server holds {BODIES_BYTES_MAX} bytes of request bodies at most, and has them now; try again."
            ),
        ));
    };
    let guard = &common.guard;
    let body = match tokio::time::timeout(
        Duration::from_secs(BODY_SECS),
        Limited::new(body, BODY_BYTES_MAX).collect(),
    )
    .await
    {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return protocol.error(&SqsError::new(
                Kind::RequestTooLarge,
                format!("A request body is at most {BODY_BYTES_MAX} bytes."),
            ))
        }
        Ok(Err(e)) => {
            debug!(%peer, error = %e, "SQS request body failed");
            return protocol.error(&SqsError::invalid("The request body could not be read."));
        }
        Err(_) => {
            return protocol.error(&SqsError::new(
                Kind::RequestExpired,
                format!("The request body was not sent within {BODY_SECS} s."),
            ))
        }
    };
    let token = match authenticate(gateway, guard, &parts, &body, peer) {
        Ok(t) => t,
        Err(e) => return protocol.error(&e),
    };
    let host = parts
        .headers
        .get(hyper::header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("localhost");
    let parsed = match protocol {
        Protocol::Json => json_input(&parts, &body),
        Protocol::Query => {
            let mut params = match query::parse_form(parts.uri.query().unwrap_or("").as_bytes()) {
                Ok(p) => p,
                Err(e) => return protocol.error(&e),
            };
            if !get {
                match query::parse_form(&body) {
                    Ok(p) => params.extend(p),
                    Err(e) => return protocol.error(&e),
                }
            }
            query::input(&params, parts.uri.path())
        }
    };
    let (operation, input) = match parsed {
        Ok(p) => p,
        Err(e) => return protocol.error(&e),
    };
    let started = Instant::now();
    let context = actions::Context {
        gateway,
        token,
        host,
    };
    let result = actions::run(&context, &operation, &input).await;
    gateway
        .shared
        .metrics
        .sqs
        .record(&operation, started.elapsed(), result.is_err());
    debug!(%peer, operation, elapsed_us = started.elapsed().as_micros() as u64, ok = result.is_ok(), "SQS request");
    match (result, protocol) {
        (Ok(output), Protocol::Json) => {
            json_response(StatusCode::OK, output.to_string().into_bytes(), None)
        }
        (Ok(output), Protocol::Query) => {
            let id = request_id();
            xml_response(
                StatusCode::OK,
                query::answer(&operation, &output, &id).into_bytes(),
                &id,
            )
        }
        (Err(e), protocol) => protocol.error(&e),
    }
}

/// The operation and input of a JSON protocol request.
fn json_input(
    parts: &hyper::http::request::Parts,
    body: &[u8],
) -> Result<(String, serde_json::Value), SqsError> {
    let target = parts
        .headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok());
    let Some(operation) = target.and_then(|t| t.strip_prefix("AmazonSQS.")) else {
        return Err(SqsError::new(
            Kind::InvalidAction,
            "The request names no operation (X-Amz-Target: AmazonSQS.<Operation>).",
        ));
    };
    let input: serde_json::Value = if body.is_empty() {
        serde_json::Value::Object(Default::default())
    } else {
        match serde_json::from_slice(body) {
            Ok(v @ serde_json::Value::Object(_)) => v,
            Ok(_) => return Err(SqsError::invalid("The request body must be a JSON object.")),
            Err(e) => {
                return Err(SqsError::invalid(format!(
                    "The request body is not valid JSON: {e}"
                )))
            }
        }
    };
    Ok((operation.to_owned(), input))
}

/// Who signed the request: without tokens anyone (`None`, whatever the
/// credentials); with tokens a valid SigV4 signature by a token's access
/// key id, or an error. Failures count against the peer's address as on
/// the binary protocol; a blocked address is refused before any check.
fn authenticate(
    gateway: &Gateway,
    guard: &std::sync::Mutex<AuthGuard>,
    parts: &hyper::http::request::Parts,
    body: &[u8],
    peer: SocketAddr,
) -> Result<Option<TokenId>, SqsError> {
    let tokens = &gateway.shared.config.tokens;
    if tokens.is_empty() {
        return Ok(None);
    }
    let now = Instant::now();
    let blocked = guard
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .blocked(peer.ip(), now);
    if let Some(left) = blocked {
        return Err(SqsError::new(
            Kind::RequestThrottled,
            format!(
                "Too many failed authentications from this address; try again in {} s.",
                left.as_secs().max(1)
            ),
        ));
    }
    let result = check_signature(tokens, parts, body);
    if let Err(e) = &result {
        gateway
            .shared
            .metrics
            .sqs
            .auth_failures
            .fetch_add(1, Ordering::Relaxed);
        let (was, block) = {
            let mut g = guard.lock().unwrap_or_else(|p| p.into_inner());
            (
                g.blocked(peer.ip(), now).is_some(),
                g.failed(peer.ip(), now),
            )
        };
        if let (Some(block), false) = (block, was) {
            warn!(
                %peer,
                block_secs = block.as_secs(),
                "too many failed SQS authentications: requests from this address are refused for a while"
            );
        }
        debug!(%peer, error = %e.message, "SQS request not authenticated");
    }
    result.map(Some)
}

fn check_signature(
    tokens: &crate::auth::TokenTable,
    parts: &hyper::http::request::Parts,
    body: &[u8],
) -> Result<TokenId, SqsError> {
    let header = parts
        .headers
        .get(hyper::header::AUTHORIZATION)
        .ok_or_else(|| {
            SqsError::new(
                Kind::MissingAuthenticationToken,
                "Request is missing Authentication Token (sign it with SigV4: the access key id names a token, the token is the secret).",
            )
        })?
        .to_str()
        .map_err(|_| SqsError::new(Kind::IncompleteSignature, "The Authorization header is not text."))?;
    let auth = sigv4::parse_authorization(header)?;
    if auth.service != sigv4::SERVICE {
        return Err(SqsError::new(
            Kind::SignatureDoesNotMatch,
            format!(
                "Credential should be scoped to correct service: '{}'.",
                sigv4::SERVICE
            ),
        ));
    }
    let (id, secret) = tokens.by_id(auth.key_id).ok_or_else(|| {
        SqsError::new(
            Kind::InvalidClientTokenId,
            "The security token included in the request is invalid (no token has this access key id).",
        )
    })?;
    let signed = sigv4::Signed {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        query: parts.uri.query().unwrap_or(""),
        headers: &parts.headers,
        body,
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    sigv4::verify(&signed, &auth, secret, now)?;
    Ok(id)
}

fn error_body(e: &SqsError) -> Vec<u8> {
    serde_json::json!({ "__type": e.json_type(), "message": e.message })
        .to_string()
        .into_bytes()
}

fn json_response(
    status: StatusCode,
    body: Vec<u8>,
    query_error: Option<String>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-amz-json-1.0"),
    );
    if let Ok(id) = HeaderValue::from_str(&request_id()) {
        h.insert("x-amzn-requestid", id);
    }
    if let Some(q) = query_error.and_then(|q| HeaderValue::from_str(&q).ok()) {
        h.insert("x-amzn-query-error", q);
    }
    r
}

fn xml_response(status: StatusCode, body: Vec<u8>, id: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/xml"),
    );
    if let Ok(id) = HeaderValue::from_str(id) {
        h.insert("x-amzn-requestid", id);
    }
    r
}

/// What a hostile client can send the parsers: anything, and nothing
/// panics (each is an answer or a typed error).
#[cfg(test)]
mod hostile_input {
    use proptest::prelude::*;

    use super::{attrs, query, sigv4};

    /// Form-like text: names of the flattened shapes, dots, numbers,
    /// escapes.
    fn form() -> impl Strategy<Value = String> {
        let part = prop_oneof![
            Just("Action".to_owned()),
            Just("Attribute".to_owned()),
            Just("MessageAttribute".to_owned()),
            Just("SendMessageBatchRequestEntry".to_owned()),
            Just("Tag".to_owned()),
            Just("Name".to_owned()),
            Just("Value".to_owned()),
            Just("Key".to_owned()),
            "[0-9]{1,3}",
            "[ -~]{0,6}",
        ];
        proptest::collection::vec(
            (proptest::collection::vec(part, 1..8), "[ -~%+]{0,12}"),
            0..40,
        )
        .prop_map(|pairs| {
            pairs
                .into_iter()
                .map(|(key, v)| format!("{}={v}", key.join(".")))
                .collect::<Vec<_>>()
                .join("&")
        })
    }

    proptest! {
        #[test]
        fn forms_parse_or_are_refused(text in form(), path in "[/a-z0-9]{0,20}") {
            if let Ok(params) = query::parse_form(text.as_bytes()) {
                let _ = query::input(&params, &path);
            }
        }

        #[test]
        fn bytes_as_a_form_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(params) = query::parse_form(&bytes) {
                let _ = query::input(&params, "/");
            }
        }

        #[test]
        fn authorization_headers_and_names_parse_or_are_refused(s in "[ -~]{0,120}") {
            let _ = sigv4::parse_authorization(&s);
            let _ = sigv4::parse_timestamp(&s);
            let _ = sigv4::canonical_query(&s);
            let _ = attrs::name_of_url(&s);
            let _ = attrs::name_of_arn(&s);
            let _ = attrs::receipt_of(&s);
        }

        #[test]
        fn message_attributes_of_any_json_are_checked(
            json in proptest::collection::vec(any::<u8>(), 0..120),
            names in proptest::collection::vec("[a-zA-Z.]{0,6}", 0..12),
            types in proptest::collection::vec(
                prop_oneof![
                    Just("String"), Just("Number"), Just("Binary"),
                    Just("Number.x"), Just("Weird"), Just("")
                ],
                0..12,
            ),
        ) {
            // Random bytes read as JSON, and well-formed maps of random
            // names, types and values.
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&json) {
                let _ = attrs::parse_message_attributes(Some(&v));
            }
            let map: serde_json::Map<String, serde_json::Value> = names
                .iter()
                .zip(types.iter().cycle())
                .map(|(n, t)| {
                    (n.clone(), serde_json::json!({
                        "DataType": t, "StringValue": n, "BinaryValue": n
                    }))
                })
                .collect();
            if let Ok(parsed) = attrs::parse_message_attributes(Some(&serde_json::Value::Object(map))) {
                // What was taken goes round through fila's attributes.
                let fila = attrs::to_fila(&parsed, None);
                let pairs: Vec<(Box<str>, Box<str>)> = fila
                    .into_iter()
                    .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
                    .collect();
                let (back, _) = attrs::from_fila(&pairs);
                prop_assert_eq!(back, parsed);
            }
        }
    }
}
