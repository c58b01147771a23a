//! The web console (docs/console.md): the pages of `fila_console` (which
//! show the queues and the server, browse messages, and act on them),
//! served by one thread of the server on a listener of its own
//! (`--console-listen`); `Console` is their `Backend`.
//!
//! The thread runs a current-thread tokio runtime with hyper's HTTP/1.1
//! server (HTTPS with TLS configured) and is one more endpoint of the
//! loops' post: every figure and every action is a request of the binary
//! protocol's kind, authorized against the signed-in token's grants and
//! run by the loop that owns the queue's shard (`server/gateway.rs`); the
//! console holds no lock any loop takes.
//!
//! Pages are written on the server (`fila_console::html`: every value
//! escaped); the one script (`assets/console.js`) only refreshes the parts of a page
//! marked live. Security: sign-in with a token (`fila_console::session`), an
//! HttpOnly SameSite=Strict session cookie, a CSRF token in every form
//! that changes something, `Origin` checked on every POST, a strict
//! Content-Security-Policy (scripts and styles from the console only, no
//! inline script or style, no frames).
//!
//! Limits: [`CONNECTIONS_MAX`] connections (when all are open a newcomer
//! takes the place of the one idle the longest, and gets a 503 only when
//! every one is in the middle of a request: `conns.rs`), a request head within [`HEAD_SECS`] (also the most a
//! keep-alive connection idles), a form body of at most [`BODY_BYTES_MAX`]
//! within [`BODY_SECS`], messages of at most [`ANSWER_ROOM`] bytes an
//! answer, [`session::SESSIONS_MAX`] sessions, failed sign-ins counted
//! per address as on the other listeners, the history bounded
//! (`fila_console::history`).
#![cfg_attr(loom, allow(dead_code, unused_imports))]

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode};
use tokio::sync::Notify;
use tracing::{debug, warn};

use super::gateway::{Gateway, Reply};
use super::Shared;
use crate::auth::{Permission, TokenId};
use crate::dispatch::{self, Answer, Caller};
use crate::guard::AuthGuard;
use crate::live::Access;

mod conns;
mod figures;
mod routes;

use fila_console::page::{Backend, Visitor};
use fila_console::{history, html, session};

use history::History;
use session::Sessions;

/// Connections served at once.
pub const CONNECTIONS_MAX: usize = 32;
/// How long a client has to send a request's head (and the longest a
/// keep-alive connection waits for its next request).
pub const HEAD_SECS: u64 = 10;
/// The most bytes of a request's body (a form).
pub const BODY_BYTES_MAX: usize = 64 << 10;
/// How long a client has to send a request's body.
pub const BODY_SECS: u64 = 10;
/// The bytes of messages one page's answer may carry.
pub use fila_console::page::ANSWER_ROOM;

/// The running console: its thread.
pub(in crate::server) struct ConsoleListener {
    addr: SocketAddr,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What the console's requests share (one thread: no locks).
pub(super) struct Console {
    gateway: Rc<Gateway>,
    shared: Arc<Shared>,
    sessions: RefCell<Sessions>,
    history: RefCell<History>,
    guard: RefCell<AuthGuard>,
    /// Connections open now.
    conns: conns::Conns,
    /// The names of its session and sign-in cookies (with its port).
    cookie: String,
    pre_cookie: String,
    /// The data directory's storage, for its free space (none with
    /// `sync = none`).
    disk: Option<fila_wal::FsStorage>,
    /// On a cluster node: the partition's server stats, as its leader
    /// answered them at the last sample (none before, or while no leader
    /// answers).
    partition: RefCell<Option<Vec<(String, u64)>>>,
}

/// Who a visitor is, as the server knows it: the tokens of the last
/// reload, and the token it signed in with (none without tokens). Kept in
/// the pages' `Visitor::who`.
pub(super) struct Who {
    pub(super) access: Arc<Access>,
    pub(super) token: Option<TokenId>,
}

/// The pages' visitor for session `session` (CSRF token `csrf`) of `who`.
pub(super) fn visitor(session: String, csrf: String, who: Who) -> Visitor {
    let label = match who.token {
        None => "no tokens configured (loopback only)".into(),
        Some(t) => match who.access.tokens.id_of(t) {
            Some(id) => format!("signed in as {id}"),
            None => "signed in with a token".into(),
        },
    };
    let (access, token) = (who.access.clone(), who.token);
    Visitor {
        session,
        csrf,
        label,
        grants: Box::new(move |queue, p| {
            let p = match p {
                fila_console::page::Permission::Send => Permission::Send,
                fila_console::page::Permission::Receive => Permission::Receive,
                fila_console::page::Permission::Manage => Permission::Manage,
            };
            token.is_none_or(|t| access.tokens.allows(t, queue, p))
        }),
        who: Box::new(who),
    }
}

impl ConsoleListener {
    #[cfg(not(loom))]
    /// Serves `listener` on a thread of its own, as endpoint `index` of
    /// the loops' post, woken through `notify`.
    pub(in crate::server) fn start(
        listener: std::net::TcpListener,
        index: usize,
        notify: Arc<Notify>,
        shared: Arc<Shared>,
    ) -> io::Result<ConsoleListener> {
        let addr = listener.local_addr()?;
        let disk = match shared.config.sync {
            crate::config::Sync::None => None,
            _ => fila_wal::FsStorage::new(&shared.config.data_dir).ok(),
        };
        let thread = super::http::spawn_runtime("fila-console".into(), move || {
            serve(listener, index, notify, shared, disk)
        })?;
        Ok(ConsoleListener {
            addr,
            thread: Some(thread),
        })
    }

    /// No console under `--cfg loom`.
    #[cfg(loom)]
    pub(in crate::server) fn start(
        _listener: std::net::TcpListener,
        _index: usize,
        _notify: Arc<Notify>,
        _shared: Arc<Shared>,
    ) -> io::Result<ConsoleListener> {
        Err(io::Error::other("the console is not built with --cfg loom"))
    }

    /// The address it listens on.
    pub(in crate::server) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits for its thread (once the server stops).
    pub(in crate::server) fn join(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Backend for Console {
    /// Runs `req` for `v` (authorized by its token's grants first);
    /// answers the wire answer, or the error's text.
    async fn call(
        &self,
        v: &Visitor,
        req: fila_proto::Request,
    ) -> Result<fila_proto::Response, String> {
        match self.run(v, req).await? {
            Answer::Wire(fila_proto::Response::Error(e)) => Err(e.message),
            Answer::Wire(r) => Ok(r),
            Answer::Messages(..) => Err("an unexpected answer".into()),
        }
    }

    /// Runs a peek for `v`: the messages, or the error's text.
    async fn peek(
        &self,
        v: &Visitor,
        queue: &str,
        dlq: bool,
        from_seq: u64,
        max: u8,
    ) -> Result<Vec<fila_core::Message>, String> {
        let req = fila_proto::Request::Peek {
            queue: fila_proto::QueueRef {
                name: queue.into(),
                dlq,
            },
            from_seq,
            max_messages: max,
            // The console shows each message's failed attempts.
            fields: fila_proto::Fields::KNOWN,
        };
        match self.run(v, req).await? {
            Answer::Messages(_, ms) => Ok(ms),
            Answer::Wire(fila_proto::Response::Error(e)) => Err(e.message),
            Answer::Wire(_) => Err("an unexpected answer".into()),
        }
    }

    fn history(&self) -> &RefCell<History> {
        &self.history
    }

    fn server_rows(&self) -> Vec<(&'static str, String)> {
        figures::rows(self)
    }
}

impl Console {
    async fn run(&self, v: &Visitor, req: fila_proto::Request) -> Result<Answer, String> {
        let Some(who) = v.who.downcast_ref::<Who>() else {
            return Err("a visitor the server did not make".into());
        };
        let caller = Caller {
            tokens: &who.access.tokens,
            token: who.token,
        };
        if let Some(fila_proto::Response::Error(e)) = dispatch::authorize(&caller, &req) {
            return Err(e.message);
        }
        let token = who.token.map(|t| (&who.access.tokens, t));
        match self.gateway.call(req, token, ANSWER_ROOM).await {
            Ok(Reply::Answer(a)) => Ok(a),
            Ok(Reply::Late(Ok(ms))) => Ok(dispatch::messages_of(ms, fila_proto::Fields::ALL)),
            Ok(Reply::Late(Err(e))) => Err(e.to_string()),
            Err(e) => Err(e.message),
        }
    }

    /// A request the console makes for itself (the history's samples):
    /// no token's grants apply.
    async fn call_internal(&self, req: fila_proto::Request) -> Option<fila_proto::Response> {
        match self.gateway.call(req, None, 0).await {
            Ok(Reply::Answer(Answer::Wire(r))) => Some(r),
            _ => None,
        }
    }
}

#[cfg(not(loom))]
/// Accepts and serves connections, and samples the history once a
/// second, until the server stops and what is in progress is answered.
async fn serve(
    listener: std::net::TcpListener,
    index: usize,
    notify: Arc<Notify>,
    shared: Arc<Shared>,
    disk: Option<fila_wal::FsStorage>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            warn!(error = %e, "the console could not take its socket");
            return;
        }
    };
    let gateway = Rc::new(Gateway::new(index, shared.clone(), notify));
    tokio::task::spawn_local(gateway.clone().mail());
    let port = listener.local_addr().map_or(0, |a| a.port());
    let (cookie, pre_cookie) = session::cookie_names(port);
    let console = Rc::new(Console {
        gateway: gateway.clone(),
        shared: shared.clone(),
        sessions: RefCell::default(),
        history: RefCell::default(),
        guard: RefCell::new(AuthGuard::with_capacity(crate::guard::PEERS_MAX)),
        conns: conns::Conns::default(),
        cookie,
        pre_cookie,
        disk,
        partition: RefCell::default(),
    });
    tokio::task::spawn_local(sample(console.clone()));
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut stop_deadline: Option<Instant> = None;
    loop {
        tokio::select! {
            accepted = listener.accept(), if stop_deadline.is_none() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    match console.conns.admit(CONNECTIONS_MAX, Instant::now()) {
                        Some(conn) => {
                            tokio::task::spawn_local(connection(console.clone(), conn, stream, peer));
                        }
                        None => {
                            debug!(%peer, "console connection refused: {CONNECTIONS_MAX} are busy");
                            tokio::task::spawn_local(routes::refuse(stream));
                        }
                    }
                }
                Err(e) => {
                    warn!(error = %e, "console accept failed; retrying in 50 ms");
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
    debug!("console stopped");
}

#[cfg(not(loom))]
/// Once a second: the queues shown lately and the server, into the
/// history.
async fn sample(console: Rc<Console>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let shared = &console.shared;
        if shared.stopping.load(Ordering::Acquire) {
            return;
        }
        let local = shared.metrics.server_stats(&shared.totals);
        let stat = |stats: &[(String, u64)], name: &str| {
            stats.iter().find(|(k, _)| k == name).map_or(0, |(_, v)| *v)
        };
        let requests = stat(&local, "requests");
        // A cluster node's queues are its partition's: their figures come
        // from its leader.
        let stored = if shared.cluster.is_some() {
            let req = fila_proto::Request::ServerStats;
            let partition = match console.call_internal(req).await {
                Some(fila_proto::Response::ServerStats(stats)) => Some(stats),
                _ => None,
            };
            let stored = partition.as_deref().map_or(0, |p| stat(p, "stored_bytes"));
            *console.partition.borrow_mut() = partition;
            stored
        } else {
            shared.totals.stored_bytes()
        };
        console.history.borrow_mut().record_server(
            shared.connections.load(Ordering::Relaxed),
            requests,
            stored,
        );
        let due = console.history.borrow_mut().due(Instant::now());
        for name in due {
            let req = fila_proto::Request::QueueStats { name: name.clone() };
            match console.call_internal(req).await {
                Some(fila_proto::Response::Stats(s)) => {
                    console.history.borrow_mut().record(
                        &name,
                        history::Reading {
                            visible: s.visible,
                            in_flight: s.in_flight,
                            delayed: s.delayed,
                            deferred: s.deferred,
                            dead_lettered: s.dead_lettered,
                            puts: s.puts,
                            deliveries: s.deliveries,
                            deletes: s.deletes,
                        },
                    );
                }
                _ => console.history.borrow_mut().forget(&name),
            }
        }
    }
}

#[cfg(not(loom))]
/// Serves one connection (over TLS when TLS is configured), then counts
/// it closed.
async fn connection(
    console: Rc<Console>,
    conn: Rc<conns::Conn>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
) {
    let tls = console.shared.live.load().tls.clone();
    let served = async {
        match tls {
            None => serve_http(&console, &conn, stream, peer, false).await,
            Some(config) => {
                if let Some(tls) =
                    super::http::tls_accept(&console.shared, config, stream, peer, "console").await
                {
                    serve_http(&console, &conn, tls, peer, true).await;
                }
            }
        }
    };
    tokio::select! {
        () = served => {}
        () = conn.close.notified() => debug!(%peer, "console connection closed: a newcomer took its place"),
    }
    console.conns.gone(&conn);
}

#[cfg(not(loom))]
/// Serves one keep-alive connection until its client closes it, it waits
/// past [`HEAD_SECS`] for a request's head, or the server stops.
async fn serve_http<S>(
    console: &Rc<Console>,
    conn: &Rc<conns::Conn>,
    stream: S,
    peer: SocketAddr,
    secure: bool,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + 'static,
{
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper_util::rt::{TokioIo, TokioTimer};
    let service = {
        let (console, conn) = (console.clone(), conn.clone());
        service_fn(move |req| {
            let (console, conn) = (console.clone(), conn.clone());
            async move {
                conn.busy();
                let answer = routes::handle(&console, req, peer, secure).await;
                conn.idle(Instant::now());
                Ok::<_, std::convert::Infallible>(answer)
            }
        })
    };
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(HEAD_SECS))
        .max_buf_size(16 << 10)
        .max_headers(64)
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            done = conn.as_mut() => {
                if let Err(e) = done {
                    debug!(%peer, error = %e, "console connection ended");
                }
                break;
            }
            _ = tick.tick() => {
                if console.shared.stopping.load(Ordering::Acquire) {
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// A page answer with the console's security headers.
pub(super) fn answer(
    status: StatusCode,
    content_type: &str,
    body: Vec<u8>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    let h = r.headers_mut();
    let mut set = |k: &'static str, v: &str| {
        if let Ok(v) = hyper::header::HeaderValue::from_str(v) {
            h.insert(k, v);
        }
    };
    set("content-type", content_type);
    set("content-security-policy", CSP);
    set("x-content-type-options", "nosniff");
    set("x-frame-options", "DENY");
    set("referrer-policy", "same-origin");
    set("cross-origin-opener-policy", "same-origin");
    set("cache-control", "no-store");
    r
}

/// The Content-Security-Policy of every answer: scripts, styles and
/// fetches from the console itself only, no inline script or style, no
/// plugins, frames, or forms sent elsewhere.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
