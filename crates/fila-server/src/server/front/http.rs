//! The SQS API's connections on a loop, beside the binary ones: requests
//! framed from the bytes read (`fila_http::Framer`), each read, signed and
//! checked by the dialect (`fila_sqs`), its fila requests sent as a binary
//! request's are (run here when this loop owns the queue's shard, else
//! through the mailbox; a receive that waits parks on its shard), its
//! answer written once the last one came.
//!
//! A connection answers one request at a time, in order: the bytes of the
//! next (pipelined) request wait unread until the one before is answered.
//! The message operations are step machines (`fila_sqs::messages`), fed
//! each answer as it comes. The others are `async` functions of the
//! dialect, polled here by hand with a waker that does nothing: each poll
//! leaves the fila request the operation waits for in the loop thread's
//! exchange (`sqs::LoopCaller`), and the next poll comes with its answer.
//! With `sync = always` the answer waits for the log when any of its fila
//! requests logged a change, as a binary answer does.
//!
//! No request is read into a `serde_json::Value` tree but a query
//! request's form: a JSON input is a `fila_sqs::Doc` whose text borrows
//! from the body (a message operation's read at once, into the loop's
//! lent buffer; another operation's inside its future, which owns the
//! body).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Buf;
use fila_http::Framer;
use fila_proto::Request;
use fila_sqs::error::{Kind, SqsError};
use fila_sqs::messages::{self, MessageOp, Step};
use fila_sqs::{Answer, Protocol, Read};
use serde_json::Value;

use super::conn::ConnRef;
use super::turn::Stop;
use super::FrontEnd;
use crate::auth::TokenId;
use crate::dispatch;
use crate::limits::AUTH_FAILURES_MAX;
use crate::live::Access;
use crate::server::azure;
use crate::server::mailbox::Msg;
use crate::server::sqs::{self, Output, BODIES_BYTES_MAX, BODY_SECS, HEAD_SECS, IDLE_SECS};
use crate::server::Back;
use fila_azure::{AzureError, Code, Reply};

/// An HTTP connection's state (the SQS API's or the Azure Queue API's).
pub(in crate::server) struct HttpConn {
    framer: Framer,
    /// It speaks the Azure Queue API (else the SQS API).
    azure: bool,
    /// The request being answered.
    op: Option<Box<Running>>,
    /// When the first bytes of the request being read came (its head is
    /// due [`HEAD_SECS`] after).
    head_since: Option<Instant>,
    /// When the head of the request being read came, while its body
    /// comes (due [`BODY_SECS`] after).
    body_since: Option<Instant>,
    /// Room for its request's body, out of the server's.
    room: BodyRoom,
    /// The id of its next fila request (its answer names it).
    next_id: u64,
}

impl HttpConn {
    pub(super) fn new(bodies: Arc<AtomicUsize>) -> HttpConn {
        HttpConn {
            framer: Framer::new(sqs::LIMITS),
            azure: false,
            op: None,
            head_since: None,
            body_since: None,
            room: BodyRoom { bodies, bytes: 0 },
            next_id: 0,
        }
    }

    /// An Azure Queue API connection's.
    pub(super) fn new_azure(bodies: Arc<AtomicUsize>) -> HttpConn {
        HttpConn {
            framer: Framer::new(azure::LIMITS),
            azure: true,
            ..HttpConn::new(bodies)
        }
    }

    /// Whether a request is being answered.
    pub(super) fn answering(&self) -> bool {
        self.op.is_some()
    }

    /// Why it is closed now, if it is: a head or a body late, or idle
    /// past [`IDLE_SECS`] between requests.
    pub(super) fn overdue(&self, now: Instant, last_active: Instant) -> Option<&'static str> {
        let past = |since: Option<Instant>, secs: u64| {
            since.is_some_and(|at| now.duration_since(at) >= Duration::from_secs(secs))
        };
        if past(self.body_since, BODY_SECS) {
            Some("SQS request body not sent in time")
        } else if past(self.head_since, HEAD_SECS) {
            Some("SQS request head not sent in time")
        } else if self.op.is_none()
            && self.framer.idle()
            && now.duration_since(last_active) >= Duration::from_secs(IDLE_SECS)
        {
            Some("SQS connection idle")
        } else {
            None
        }
    }

    /// Whether it is between requests, with nothing of the next one read.
    pub(super) fn between_requests(&self) -> bool {
        self.op.is_none() && self.framer.idle()
    }
}

/// Bytes of request bodies a connection holds, counted in the server's
/// [`BODIES_BYTES_MAX`]; given back when dropped.
struct BodyRoom {
    bodies: Arc<AtomicUsize>,
    bytes: usize,
}

impl BodyRoom {
    /// Holds `bytes` (more than it held: `false` when the server's room
    /// does not have them; less: kept until [`BodyRoom::release`]).
    fn hold(&mut self, bytes: usize) -> bool {
        if bytes <= self.bytes {
            return true;
        }
        let more = bytes - self.bytes;
        let taken = self
            .bodies
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n + more <= BODIES_BYTES_MAX).then_some(n + more)
            })
            .is_ok();
        if taken {
            self.bytes = bytes;
        }
        taken
    }

    fn release(&mut self) {
        self.bodies.fetch_sub(self.bytes, Ordering::AcqRel);
        self.bytes = 0;
    }
}

impl Drop for BodyRoom {
    fn drop(&mut self) {
        self.release();
    }
}

/// An operation that polls by hand (see the module docs).
type Polled = Pin<Box<dyn Future<Output = Result<Value, SqsError>> + Send>>;
/// An Azure operation, polled by hand as SQS ones are.
type AzurePolled = Pin<Box<dyn Future<Output = Result<Reply, AzureError>> + Send>>;

/// What an Azure answer echoes, and whether it is a `HEAD`'s (no body).
struct AzureEcho {
    common: fila_azure::Common,
    head_only: bool,
}

/// A request being answered.
struct Running {
    protocol: Protocol,
    operation: String,
    keep_alive: bool,
    started: Instant,
    /// The reload its signature was checked in, and the token that
    /// signed it: every fila request it makes is authorized for that.
    access: Arc<Access>,
    token: Option<TokenId>,
    /// The latest log mark one of its fila requests' answers waits for.
    mark: Option<u64>,
    drive: Drive,
    /// An Azure request's echo (`None` for an SQS request).
    azure: Option<Box<AzureEcho>>,
}

enum Drive {
    Steps(MessageOp),
    Polled(Polled),
    Azure(AzurePolled),
}

/// A request's operation and input as read: a message operation's JSON
/// borrowing from the body, another JSON operation's name, or a query
/// request's as a `Value`.
enum Parsed<'a> {
    Doc(String, fila_sqs::Doc<'a>),
    /// Another JSON operation: its input is read from the body later.
    Json(String),
    Value(Read),
}

/// What moves an operation on. (Made and taken apart once per step:
/// boxing the request would cost an allocation each time for nothing.)
#[allow(clippy::large_enum_variant)]
enum Resume {
    /// A message operation's first step.
    First(Step),
    /// A polled operation's first poll.
    Poll,
    /// The answer of its last fila request.
    Answer(Answer),
}

/// What it does next.
#[allow(clippy::large_enum_variant)]
enum Next {
    Call(Request, usize),
    Done(Result<Output, SqsError>),
    Azure(Result<Reply, AzureError>),
}

/// Where one poll left an operation written as an `async` function.
#[allow(clippy::large_enum_variant)]
enum Polling<T> {
    /// Its output.
    Ready(T),
    /// The fila request it waits for, and its room.
    Call(Request, usize),
    /// It waits for something other than the server (never comes).
    Stuck,
}

/// Polls such an operation once, with the answer of its last fila
/// request when `resume` has one.
fn poll_once<T>(future: Pin<&mut (dyn Future<Output = T> + Send)>, resume: Resume) -> Polling<T> {
    sqs::clear_exchange();
    if let Resume::Answer(answer) = resume {
        sqs::put_answer(answer);
    }
    match future.poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(result) => Polling::Ready(result),
        Poll::Pending => match sqs::take_call() {
            Some((request, room)) => Polling::Call(request, room),
            None => Polling::Stuck,
        },
    }
}

const STUCK: &str = "the operation waited for something other than the server";

impl Running {
    fn next(&mut self, resume: Resume) -> Next {
        match (&mut self.drive, resume) {
            (Drive::Steps(_), Resume::First(step)) => self.step(Ok(step)),
            (Drive::Steps(machine), Resume::Answer(answer)) => {
                let step = machine.resume(answer);
                self.step(step)
            }
            (Drive::Polled(future), resume) => match poll_once(future.as_mut(), resume) {
                Polling::Ready(result) => Next::Done(result.map(Output::Value)),
                Polling::Call(request, room) => Next::Call(request, room),
                Polling::Stuck => Next::Done(Err(SqsError::new(Kind::InternalError, STUCK))),
            },
            (Drive::Azure(future), resume) => match poll_once(future.as_mut(), resume) {
                Polling::Ready(result) => Next::Azure(result),
                Polling::Call(request, room) => Next::Call(request, room),
                Polling::Stuck => Next::Azure(Err(AzureError::new(Code::InternalError, STUCK))),
            },
            (Drive::Steps(_), Resume::Poll) => Next::Done(Err(SqsError::unexpected())),
        }
    }

    /// A message operation's step: its request authorized, or its output.
    fn step(&self, step: Result<Step, SqsError>) -> Next {
        match step {
            Ok(Step::Done(output)) => Next::Done(Ok(Output::Typed(output))),
            Ok(Step::Call { request, room }) => {
                match sqs::authorize(&self.access.tokens, self.token, &request) {
                    Ok(()) => Next::Call(request, room),
                    Err(e) => Next::Done(Err(e)),
                }
            }
            Err(e) => Next::Done(Err(e)),
        }
    }
}

/// The most bytes a loop's buffers keep from one SQS request or answer to
/// the next (a larger one is given back).
const KEPT_BYTES_MAX: usize = 256 << 10;

/// `buf` emptied, or a new one in place of one that grew past
/// [`KEPT_BYTES_MAX`].
fn kept(mut buf: Vec<u8>) -> Vec<u8> {
    if buf.capacity() > KEPT_BYTES_MAX {
        return Vec::new();
    }
    buf.clear();
    buf
}

/// A fila answer as the dialect reads it.
pub(super) fn sqs_answer(answer: dispatch::Answer) -> Answer {
    match answer {
        dispatch::Answer::Wire(r) => Answer::Wire(r),
        dispatch::Answer::Messages(_, ms) => Answer::Messages(ms),
    }
}

impl FrontEnd {
    /// Whether connection `slot` speaks HTTP (the SQS API).
    pub(super) fn is_http(&self, slot: usize) -> bool {
        self.conns
            .get(slot)
            .and_then(|c| c.as_ref())
            .is_some_and(|c| c.http.is_some())
    }

    /// Frames and starts the requests in an SQS connection's input, one
    /// at a time (the turn's frame budget counts requests).
    pub(super) fn process_http(
        &mut self,
        slot: usize,
        frames: &mut usize,
        back: &mut Back<'_>,
    ) -> Stop {
        loop {
            let Some(conn) = self.conns[slot].as_mut() else {
                return Stop::Closed;
            };
            if conn.http.as_ref().is_some_and(|h| h.answering()) {
                // Its bytes wait until this answer is written.
                return Stop::Throttled;
            }
            if let Some(stop) = self.may_go_on(slot, *frames, back) {
                return stop;
            }
            let conn = self.conns[slot].as_mut().expect("open");
            let http = conn.http.as_mut().expect("an SQS connection");
            let progress = match http.framer.next_with(&conn.input, &mut self.spare_body) {
                Ok(p) => p,
                Err(e) => {
                    let err = sqs::framing_error(&e);
                    self.http_refuse(slot, Protocol::Json, &err, Some(e.status()), back);
                    return Stop::Closed;
                }
            };
            conn.input.advance(progress.consumed);
            if progress.send_continue {
                conn.output
                    .extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
            }
            let now = Instant::now();
            let Some(request) = progress.request else {
                if http.framer.in_body() {
                    http.head_since = None;
                    http.body_since.get_or_insert(now);
                    let bound = http.framer.body_bound().unwrap_or(0);
                    if !http.room.hold(bound) {
                        self.refuse_body(slot, back);
                        return Stop::Closed;
                    }
                } else if !http.framer.idle() {
                    http.head_since.get_or_insert(now);
                }
                return Stop::NeedMore;
            };
            http.head_since = None;
            http.body_since = None;
            if !http.room.hold(request.body.len()) {
                self.refuse_body(slot, back);
                return Stop::Closed;
            }
            *frames -= 1;
            conn.last_active = now;
            self.http_request(slot, request, back);
        }
    }

    /// The server's room for request bodies is spent: a clear error, and
    /// the connection closes (what it was sending cannot be skipped).
    fn refuse_body(&mut self, slot: usize, back: &mut Back<'_>) {
        let e = SqsError::new(
            Kind::ServiceUnavailable,
            format!(
                "The server holds {BODIES_BYTES_MAX} bytes of request bodies at most, and has them now; try again."
            ),
        );
        self.http_refuse(slot, Protocol::Json, &e, None, back);
    }

    /// Answers `e` and closes once it is written.
    fn http_refuse(
        &mut self,
        slot: usize,
        protocol: Protocol,
        e: &SqsError,
        status: Option<u16>,
        back: &mut Back<'_>,
    ) {
        let mut out = Vec::new();
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        if conn.http.as_ref().is_some_and(|h| h.azure) {
            let code = match e.kind {
                Kind::RequestTooLarge => Code::RequestBodyTooLarge,
                Kind::ServiceUnavailable => Code::ServerBusy,
                _ => Code::InvalidInput,
            };
            let e = Err(AzureError::new(code, e.message.clone()));
            let common = fila_azure::Common::default();
            fila_azure::write_reply(&mut out, &e, &common, azure::now_ms(), false, true);
        } else {
            sqs::write_error(&mut out, protocol, e, status, true);
        }
        if let Some(http) = conn.http.as_mut() {
            http.room.release();
            http.head_since = None;
            http.body_since = None;
        }
        conn.close_when_written(false);
        self.emit(slot, &[&out], None, back);
    }

    /// One whole request: its sender authenticated, its protocol read, its
    /// operation started.
    fn http_request(&mut self, slot: usize, mut request: fila_http::Request, back: &mut Back<'_>) {
        if self.conns[slot]
            .as_ref()
            .is_some_and(|c| c.http.as_ref().is_some_and(|h| h.azure))
        {
            return self.azure_request(slot, request, back);
        }
        let shared = self.shared.clone();
        let access = self.access.clone();
        let conn = self.conns[slot].as_mut().expect("open");
        let peer = conn.peer;
        let head = request.head();
        let protocol = Protocol::of(&head.headers);
        let started = Instant::now();
        let mut failed_auth = false;
        let read = if shared.stopping.load(Ordering::Acquire) {
            Err(SqsError::new(
                Kind::ServiceUnavailable,
                "The server is stopping.",
            ))
        } else {
            fila_sqs::check_method(head.method, protocol).and_then(|()| {
                let token =
                    sqs::authenticate(&shared.metrics, &access.tokens, &head, &request.body, peer)
                        .inspect_err(|_| failed_auth = true)?;
                // A message operation's JSON input borrows from the body;
                // another JSON operation's is read in its own future, from
                // the body it owns; a query form becomes a `Value`.
                let read = match fila_sqs::read_message(&head, protocol, &request.body) {
                    Some(read) => read.map(|(op, doc)| Parsed::Doc(op, doc))?,
                    None if protocol == Protocol::Json => {
                        fila_sqs::check_method(head.method, protocol)?;
                        Parsed::Json(fila_sqs::json_operation(&head.headers)?.to_owned())
                    }
                    None => Parsed::Value(fila_sqs::read(&head, protocol, &request.body)?),
                };
                Ok((read, token))
            })
        };
        let (read, token) = match read {
            Ok(r) => r,
            Err(e) => {
                if failed_auth {
                    conn.auth_failures += 1;
                    // Counted per address by the accepting loop, as the
                    // binary protocol's failures are: a blocked address's
                    // new connections are refused.
                    if self.index == 0 {
                        self.note_auth_failure(peer.ip());
                    } else {
                        back.post.send(0, Msg::AuthFailed(peer.ip()));
                    }
                }
                let close = !request.keep_alive
                    || shared.stopping.load(Ordering::Acquire)
                    || self.conns[slot]
                        .as_ref()
                        .is_some_and(|c| c.auth_failures >= AUTH_FAILURES_MAX);
                let mut out = Vec::new();
                sqs::write_error(&mut out, protocol, &e, None, close);
                self.finish_http(slot, &[&out], None, close, back);
                return;
            }
        };
        let host = head.headers.text("host").unwrap_or("localhost").to_owned();
        let keep_alive = request.keep_alive;
        let caller = |token| sqs::LoopCaller {
            access: access.clone(),
            token,
            host,
            purges: shared.sqs_purges.clone(),
        };
        let (operation, started_op) = match read {
            Parsed::Doc(operation, input) => {
                let start = messages::start(&operation, &input);
                (
                    operation,
                    start.map(|(m, step)| (Drive::Steps(m), Resume::First(step))),
                )
            }
            Parsed::Value(Read { operation, input })
                if messages::OPERATIONS.contains(&operation.as_str()) =>
            {
                let start = messages::start(&operation, &input);
                (
                    operation,
                    start.map(|(m, step)| (Drive::Steps(m), Resume::First(step))),
                )
            }
            Parsed::Value(Read { operation, input }) => {
                let caller = caller(token);
                let name = operation.clone();
                let future: Polled =
                    Box::pin(async move { fila_sqs::run(&caller, &name, &input).await });
                (operation, Ok((Drive::Polled(future), Resume::Poll)))
            }
            Parsed::Json(operation) => {
                // The operation owns the body and reads its input from it.
                let (caller, name, body) = (
                    caller(token),
                    operation.clone(),
                    std::mem::take(&mut request.body),
                );
                let future: Polled = Box::pin(async move {
                    let input = fila_sqs::json_doc(&body)?;
                    fila_sqs::run(&caller, &name, &input).await
                });
                (operation, Ok((Drive::Polled(future), Resume::Poll)))
            }
        };
        // Read: its buffer serves the loop's next body.
        self.spare_body = kept(request.body);
        let (drive, first) = match started_op {
            Ok(started_op) => started_op,
            Err(e) => {
                let mut out = Vec::new();
                let close = !keep_alive;
                sqs::write_error(&mut out, protocol, &e, None, close);
                shared
                    .metrics
                    .sqs
                    .record(&operation, started.elapsed(), true);
                self.finish_http(slot, &[&out], None, close, back);
                return;
            }
        };
        let conn = self.conns[slot].as_mut().expect("open");
        conn.http.as_mut().expect("an SQS connection").op = Some(Box::new(Running {
            protocol,
            operation,
            keep_alive,
            started,
            access,
            token,
            mark: None,
            drive,
            azure: None,
        }));
        self.http_advance(slot, first, back);
    }

    /// One whole request of the Azure Queue API: read, authenticated, its
    /// operation started (`fila_azure::ops::run`, polled by hand).
    fn azure_request(&mut self, slot: usize, request: fila_http::Request, back: &mut Back<'_>) {
        let started = Instant::now();
        let shared = self.shared.clone();
        let access = self.access.clone();
        let conn = self.conns[slot].as_mut().expect("open");
        let (peer, tls) = (conn.peer, conn.stream.is_tls());
        let head = request.head();
        let echo = Box::new(AzureEcho {
            common: fila_azure::Common::of(&head),
            head_only: head.method == "HEAD",
        });
        let host = head.headers.text("host").unwrap_or("localhost").to_owned();
        let stopping = shared.stopping.load(Ordering::Acquire);
        let admitted = if stopping {
            Err(AzureError::new(Code::ServerBusy, "The server is stopping."))
        } else {
            azure::admit(&shared.metrics, &access, &head, &request.body, peer, tls)
        };
        let keep_alive = request.keep_alive;
        // Read: its buffer serves the loop's next body.
        self.spare_body = kept(request.body);
        let (call, principal) = match admitted {
            Ok(a) => a,
            Err(e) => {
                if azure::failed_auth(&e) {
                    conn.auth_failures += 1;
                    if self.index == 0 {
                        self.note_auth_failure(peer.ip());
                    } else {
                        back.post.send(0, Msg::AuthFailed(peer.ip()));
                    }
                }
                let close = !keep_alive
                    || stopping
                    || self.conns[slot]
                        .as_ref()
                        .is_some_and(|c| c.auth_failures >= AUTH_FAILURES_MAX);
                let mut out = Vec::new();
                fila_azure::write_reply(
                    &mut out,
                    &Err(e),
                    &echo.common,
                    azure::now_ms(),
                    echo.head_only,
                    close,
                );
                self.finish_http(slot, &[&out], None, close, back);
                return;
            }
        };
        let caller = azure::AzureCaller {
            access: access.clone(),
            token: principal.token,
            host,
            properties: shared.azure_properties.clone(),
        };
        let operation = call.op.name().to_owned();
        let sas = principal.sas;
        let future: AzurePolled =
            Box::pin(async move { fila_azure::ops::run(&caller, &call, sas.as_ref()).await });
        let conn = self.conns[slot].as_mut().expect("open");
        conn.http.as_mut().expect("an HTTP connection").op = Some(Box::new(Running {
            protocol: Protocol::Json,
            operation,
            keep_alive,
            started,
            access,
            token: principal.token,
            mark: None,
            drive: Drive::Azure(future),
            azure: Some(echo),
        }));
        self.http_advance(slot, Resume::Poll, back);
    }

    /// Moves connection `slot`'s operation on: its next fila request sent,
    /// or its answer written.
    fn http_advance(&mut self, slot: usize, resume: Resume, back: &mut Back<'_>) {
        let max_output = self.shared.config.max_output_bytes;
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        let room_left = conn.room(max_output);
        let Some(http) = conn.http.as_mut() else {
            return;
        };
        let Some(running) = http.op.as_mut() else {
            return;
        };
        match running.next(resume) {
            Next::Call(request, room) => {
                let id = http.next_id;
                http.next_id += 1;
                let (token, access) = (running.token, running.access.clone());
                self.send_request(
                    slot,
                    id,
                    Instant::now(),
                    request,
                    room.min(room_left),
                    token,
                    &access,
                    back,
                );
            }
            Next::Azure(result) => {
                let running = http.op.take().expect("running");
                http.room.release();
                let stopping = self.shared.stopping.load(Ordering::Acquire);
                let close = !running.keep_alive || stopping;
                let mut out = std::mem::take(&mut self.http_out);
                out.clear();
                let echo = running.azure.as_deref();
                let (common, head_only) = match echo {
                    Some(e) => (&e.common, e.head_only),
                    None => (&fila_azure::Common::default(), false),
                };
                fila_azure::write_reply(
                    &mut out,
                    &result,
                    common,
                    azure::now_ms(),
                    head_only,
                    close,
                );
                self.shared.metrics.azure.record(
                    &running.operation,
                    running.started.elapsed(),
                    result.is_err(),
                );
                self.finish_http(slot, &[&out], running.mark, close, back);
                self.http_out = kept(out);
            }
            Next::Done(result) => {
                let running = http.op.take().expect("running");
                http.room.release();
                let stopping = self.shared.stopping.load(Ordering::Acquire);
                let close = !running.keep_alive || stopping;
                // The loop's buffers, kept from one answer to the next.
                let (mut out, mut body) = (
                    std::mem::take(&mut self.http_out),
                    std::mem::take(&mut self.http_body),
                );
                out.clear();
                sqs::write_answer(
                    &mut out,
                    &mut body,
                    running.protocol,
                    &running.operation,
                    &result,
                    close,
                );
                self.shared.metrics.sqs.record(
                    &running.operation,
                    running.started.elapsed(),
                    result.is_err(),
                );
                // The head, then the body straight from the buffer it was
                // written in: its one copy, into the connection's output.
                self.finish_http(slot, &[&out, &body], running.mark, close, back);
                self.http_out = kept(out);
                self.http_body = kept(body);
            }
        }
    }

    /// Writes a request's answer (held for the log until `mark` when
    /// there is one); the next request's turn comes.
    fn finish_http(
        &mut self,
        slot: usize,
        answer: &[&[u8]],
        mark: Option<u64>,
        close: bool,
        back: &mut Back<'_>,
    ) {
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        if let Some(http) = conn.http.as_mut() {
            http.room.release();
        }
        // Its idle time counts from its last answer.
        conn.last_active = Instant::now();
        if close {
            conn.close_when_written(false);
        }
        self.emit(slot, answer, mark, back);
        self.requeue(slot);
        self.dirty.push(slot);
    }

    /// The answer of one of an SQS connection's fila requests.
    pub(super) fn on_http_answer(
        &mut self,
        c: ConnRef,
        answer: Answer,
        mark: Option<u64>,
        back: &mut Back<'_>,
    ) {
        let Some(conn) = self.get(c) else {
            return;
        };
        let Some(running) = conn.http.as_mut().and_then(|h| h.op.as_mut()) else {
            return;
        };
        running.mark = running.mark.max(mark);
        self.http_advance(c.slot, Resume::Answer(answer), back);
    }

    /// Begins a stop: SQS connections between requests close now; the
    /// others after their answer.
    pub(super) fn close_between_requests(&mut self, slot: usize, back: &mut Back<'_>) {
        let idle = self.conns[slot].as_ref().is_some_and(|c| {
            c.http.as_ref().is_some_and(|h| h.between_requests())
                && c.input.is_empty()
                && c.buffered() == 0
                && c.in_flight == 0
        });
        if idle {
            self.close(slot, "server stopping", back);
        }
    }
}
