//! The SQS-compatible HTTP API: a second front end beside the binary one.
//!
//! `--sqs-threads` threads each run a single-threaded tokio runtime with
//! hyper's HTTP/1.1 server (keep-alive, one request at a time per
//! connection), all accepting from one socket (the least loaded takes new
//! connections). A request of the AWS JSON 1.0 protocol (`POST /`,
//! `X-Amz-Target: AmazonSQS.<Operation>`) or of the query protocol, read
//! by the dialect crate `fila_sqs` (which also checks signatures and writes
//! the answers' bodies), becomes one or more requests of the binary
//! protocol's kind, which go to the shards' owners by the same path a
//! binary request takes (`gateway.rs`); the answers become the SQS API's.
//! docs/sqs.md is the user's reference.
//!
//! Limits, per connection: a request head of at most [`HEAD_BYTES_MAX`]
//! and [`HEADERS_MAX`] headers, sent within [`HEAD_SECS`] of its first
//! byte; a body of at
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
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::Notify;
use tracing::{debug, warn};

use super::Shared;
use crate::guard::AuthGuard;

mod actions;
mod auth;
pub(in crate::server) mod gateway;
mod request;

use fila_sqs::sigv4;
pub(in crate::server) use fila_sqs::{error, query};

use request::handle;

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
            threads.push(super::http::spawn_runtime(
                format!("fila-sqs-{k}"),
                move || serve(listener, k, first + k, notify, shared, common),
            )?);
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
        if shared.config.tls_cert.is_none() {
            tokio::task::spawn_local(refuse(stream, shared.config.max_connections));
        }
        // Over TLS it is only closed (no handshake for a refusal).
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
    let body = fila_sqs::error_body(fila_sqs::Protocol::Json, &e, &fila_sqs::request_id());
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
/// Serves one connection (over TLS when TLS is configured: the handshake
/// within `tls_handshake_timeout_secs`, with the certificate of the last
/// reload), then counts it closed.
async fn connection(
    gateway: Rc<Gateway>,
    common: Arc<Common>,
    thread: usize,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
) {
    let tls = gateway.shared.live.load().tls.clone();
    match tls {
        None => serve_http(&gateway, &common, stream, peer).await,
        Some(config) => {
            if let Some(tls) =
                super::http::tls_accept(&gateway.shared, config, stream, peer, "SQS").await
            {
                serve_http(&gateway, &common, tls, peer).await;
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

#[cfg(not(loom))]
/// Between requests, when the next request's first bytes came (its head's
/// deadline counts from there).
struct Watched<S> {
    inner: S,
    idle_since: Rc<Cell<Option<Instant>>>,
    head_since: Rc<Cell<Option<Instant>>>,
}

#[cfg(not(loom))]
impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Watched<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before
            && self.idle_since.get().is_some()
            && self.head_since.get().is_none()
        {
            self.head_since.set(Some(Instant::now()));
        }
        polled
    }
}

#[cfg(not(loom))]
impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(not(loom))]
/// Serves one keep-alive connection until its client closes it, it idles
/// past [`IDLE_SECS`] between requests, a request's head takes longer than
/// [`HEAD_SECS`] from its first byte, or it breaks a limit. (hyper's own
/// head timeout is not used: it also runs while a keep-alive connection
/// waits for its next request, and would close it after [`HEAD_SECS`].)
async fn serve_http<S>(gateway: &Rc<Gateway>, common: &Arc<Common>, stream: S, peer: SocketAddr)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + 'static,
{
    // When its last request ended (`None` while one is in progress).
    let idle_since: Rc<Cell<Option<Instant>>> = Rc::new(Cell::new(Some(Instant::now())));
    // When the next request's first bytes came (`None` before).
    let head_since: Rc<Cell<Option<Instant>>> = Rc::new(Cell::new(None));
    let io = TokioIo::new(Watched {
        inner: stream,
        idle_since: idle_since.clone(),
        head_since: head_since.clone(),
    });
    let service = {
        let (gateway, common, idle_since, head_since) = (
            gateway.clone(),
            common.clone(),
            idle_since.clone(),
            head_since.clone(),
        );
        service_fn(move |req| {
            let (gateway, common, idle_since, head_since) = (
                gateway.clone(),
                common.clone(),
                idle_since.clone(),
                head_since.clone(),
            );
            async move {
                idle_since.set(None);
                head_since.set(None);
                let answer = handle(&gateway, &common, req, peer).await;
                idle_since.set(Some(Instant::now()));
                Ok::<_, Infallible>(answer)
            }
        })
    };
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .max_buf_size(HEAD_BYTES_MAX.max(8192))
        .max_headers(HEADERS_MAX)
        .keep_alive(true)
        .serve_connection(io, service);
    tokio::pin!(conn);
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let (idle, head) = (
        Duration::from_secs(IDLE_SECS),
        Duration::from_secs(HEAD_SECS),
    );
    loop {
        tokio::select! {
            done = conn.as_mut() => {
                if let Err(e) = done {
                    debug!(%peer, error = %e, "SQS connection ended");
                }
                break;
            }
            _ = tick.tick() => {
                let between = idle_since.get().is_some();
                if between && head_since.get().is_some_and(|at| at.elapsed() >= head) {
                    // A head not sent whole in time: closed as it is.
                    debug!(%peer, "SQS request head not sent in time");
                    break;
                }
                let stopping = gateway.shared.stopping.load(Ordering::Acquire);
                let idled = head_since.get().is_none()
                    && idle_since.get().is_some_and(|at| at.elapsed() >= idle);
                if stopping || idled {
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}
