//! The mio front end: event loops, connections, frames in and answers out.
//!
//! Loop 0 owns the listener and deals accepted connections round-robin to
//! every loop (itself included) through each loop's inbox and `Waker`. A
//! loop keeps its connections in a slab indexed by mio `Token`, reads each
//! until `WouldBlock`, answers every whole frame into the connection's
//! output buffer, and writes the buffer once per wake-up. A parked receive
//! carries a `Notify` that posts the late answer to the owning loop's inbox
//! and wakes it.
//!
//! Limits, per connection:
//! * A turn (one wake-up) answers at most [`FRAMES_PER_TURN`] frames and
//!   reads at most [`READ_BYTES_PER_TURN`]; a connection with more left
//!   waits in the loop's round-robin `pending` queue behind the others, so
//!   one busy client cannot starve the rest of its loop.
//! * Output room: answers buffered plus the room held for parked receives
//!   stay within `max_output_bytes`. A request is handled only while at
//!   least [`ANSWER_ROOM_MIN`] is free (else reading stops until the client
//!   drains its answers); receives and peeks answer only what fits, and a
//!   parked receive holds the room its late answer may need.
//! * Parked receives: `max_parked_per_connection`, and `max_parked` for the
//!   server; more are answered `resource_exhausted`.
//! * Before authentication (when tokens are configured) only hello and auth
//!   are answered, frames are at most [`PREAUTH_FRAME_MAX`] bytes, they do
//!   not count as activity, and the connection is closed
//!   `auth_timeout_secs` after it opened; [`AUTH_FAILURES_MAX`] failed
//!   auths close it.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use fila_core::{Engine, EngineLimits, Message, Notify, WaitId};
use fila_proto::{self as proto, split_frame, ErrorCode, Request, Response};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use tracing::{debug, info, warn};

use crate::auth::TokenId;
use crate::config::{Config, Sync};
use crate::dispatch::{self, error, Caller, Outcome};
use crate::metrics::{Metrics, MetricsEndpoint};

mod accept;
mod conn;
mod durable;

use accept::open_files_limit;
use conn::{Conn, Parked};
pub use durable::{StartError, LOG_BACKLOG_MAX};

const LISTENER: Token = Token(usize::MAX - 1);
const WAKER: Token = Token(usize::MAX - 2);
const READ_CHUNK: usize = 64 << 10;

/// Frames one connection may have answered in one turn of its loop.
pub const FRAMES_PER_TURN: usize = 32;
/// Bytes read from one connection in one turn of its loop.
pub const READ_BYTES_PER_TURN: usize = 4 * READ_CHUNK;
/// Output room a connection must have free before a request of it is
/// handled: more than any one answer that is not a receive or a peek, and
/// more than one largest message in a receive or peek answer.
pub const ANSWER_ROOM_MIN: usize = 2 << 20;
/// Output room a connection must have free before a request whose answer
/// carries no messages (anything but receive, peek, receive-deferred) is
/// handled: more than the largest such answer (a list page of 1 000 names).
pub const SMALL_ANSWER_ROOM: usize = 256 << 10;
/// The least `max_output_bytes` a config may set.
pub const OUTPUT_BYTES_MIN: usize = 2 * ANSWER_ROOM_MIN;
/// The largest frame accepted before a connection has authenticated.
pub const PREAUTH_FRAME_MAX: usize = 4 << 10;
/// Failed auths after which a connection is closed.
pub const AUTH_FAILURES_MAX: u32 = 3;
/// How long the listener waits before accepting again after the process
/// ran out of file descriptors.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// Messages to a loop.
enum Inbox {
    Accepted(TcpStream, SocketAddr),
    /// Close your oldest connection that has not authenticated: the server
    /// is at max_connections and a new one was let in in its place.
    EvictUnauthenticated,
    Answer {
        slot: usize,
        generation: u64,
        park: u64,
        request_id: u64,
        result: Result<Vec<Message>, fila_core::Error>,
    },
}

struct Shared {
    config: Config,
    engine: Arc<Engine>,
    /// The log's marks, when there is a log.
    marks: Option<fila_store::Marks>,
    /// Answers that changed something wait for the log (`sync = always`).
    hold: bool,
    /// Per loop: it holds answers or connections for the log and wants a
    /// wake-up when a batch is durable.
    waiting: Arc<Vec<AtomicBool>>,
    /// The log failed: why (the server stops).
    fatal: Arc<Mutex<Option<String>>>,
    metrics: Arc<Metrics>,
    stopping: Arc<AtomicBool>,
    connections: AtomicU64,
    /// Receives parked on the whole server.
    parked: AtomicU64,
    /// With tokens: connections not yet authenticated, per loop, and
    /// evictions asked for but not done yet.
    unauthenticated: Vec<AtomicU64>,
    evictions_pending: AtomicU64,
    /// Rate limit of the "unknown token" warning: the second it was last
    /// logged, and how many were left out since.
    auth_warned_at: AtomicU64,
    auth_unlogged: AtomicU64,
}

struct Loop {
    index: usize,
    poll: Poll,
    listener: Option<TcpListener>,
    /// Accepting failed (out of descriptors): retry at this time.
    accept_retry: Option<Instant>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    /// Connections whose turn ended with work left, round-robin.
    pending: VecDeque<usize>,
    generation: u64,
    inbox: Receiver<Inbox>,
    me: (Sender<Inbox>, Arc<Waker>),
    peers: Vec<(Sender<Inbox>, Arc<Waker>)>,
    next_peer: usize,
    shared: Arc<Shared>,
    /// One read buffer per loop; bytes read are copied into the
    /// connection's input, which frames are then split from without copies.
    scratch: Vec<u8>,
    /// The most answer bytes one of this loop's connections has held.
    high_water: usize,
    /// Connections with answers held for the log.
    holding: Vec<(usize, u64)>,
    /// Connections that stopped reading while the log's backlog is full.
    log_paused: Vec<(usize, u64)>,
}

/// A running server.
pub struct Server {
    local_addr: SocketAddr,
    store: Option<fila_store::Store<fila_wal::FsStorage>>,
    /// Held while running: no second server on the data directory.
    _data_lock: Option<std::fs::File>,
    shared: Arc<Shared>,
    wakers: Vec<Arc<Waker>>,
    loops: Vec<std::thread::JoinHandle<()>>,
    ticker: Option<std::thread::JoinHandle<()>>,
    metrics: Option<MetricsEndpoint>,
}

/// Stops a server from another thread (a signal handler's, a test's).
#[derive(Clone)]
pub struct StopHandle {
    shared: Arc<Shared>,
    wakers: Vec<Arc<Waker>>,
}

impl StopHandle {
    /// Begins a graceful shutdown: stop accepting, answer what is in
    /// progress, close.
    pub fn stop(&self) {
        if !self.shared.stopping.swap(true, Ordering::AcqRel) {
            info!("shutting down");
        }
        for w in &self.wakers {
            let _ = w.wake();
        }
    }
}

impl Server {
    /// Recovers the data directory, binds, starts the loops, the log
    /// writer, the ticker and the metrics endpoint.
    pub fn start(config: Config) -> Result<Server, StartError> {
        let engine = Arc::new(Engine::new(config.shards, Arc::new(fila_core::SystemClock)));
        engine.set_limits(EngineLimits {
            max_stored_bytes: config.max_stored_bytes,
            max_queues: config.max_queues,
        });
        let metrics = Arc::new(Metrics::default());
        let listener = TcpListener::bind(config.listen).map_err(|source| StartError::Listen {
            addr: config.listen,
            source,
        })?;
        let local_addr = listener.local_addr().map_err(|source| StartError::Listen {
            addr: config.listen,
            source,
        })?;
        // The loops' wakers exist before the log, whose writer wakes them.
        let mut polls = Vec::new();
        let mut mes = Vec::new();
        let mut inboxes = Vec::new();
        for _ in 0..config.event_loops {
            let poll = Poll::new()?;
            let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
            let (tx, rx) = channel();
            polls.push(poll);
            mes.push((tx, waker));
            inboxes.push(rx);
        }
        let wakers: Vec<Arc<Waker>> = mes.iter().map(|(_, w)| w.clone()).collect();
        let waiting: Arc<Vec<AtomicBool>> = Arc::new(
            (0..config.event_loops)
                .map(|_| AtomicBool::new(false))
                .collect(),
        );
        let fatal: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let stopping = Arc::new(AtomicBool::new(false));
        let (store, data_lock) =
            durable::open(&config, &engine, &wakers, &waiting, &fatal, &stopping)?;
        let metrics_endpoint = match config.metrics_listen {
            Some(addr) => Some(MetricsEndpoint::start(
                addr,
                &config,
                metrics.clone(),
                engine.clone(),
            )?),
            None => None,
        };
        if let Some(limit) = open_files_limit() {
            if limit < config.max_connections as u64 + 64 {
                warn!(
                    open_files_limit = limit,
                    max_connections = config.max_connections,
                    "the open-files limit is below max_connections (+64 for the server's own); \
                     connections past it wait until descriptors free up (raise it with ulimit -n)"
                );
            }
        }
        let shared = Arc::new(Shared {
            config: config.clone(),
            engine,
            marks: store.as_ref().map(|s| s.marks()),
            hold: config.sync == Sync::Always,
            waiting,
            fatal,
            metrics,
            stopping,
            connections: AtomicU64::new(0),
            parked: AtomicU64::new(0),
            unauthenticated: (0..config.event_loops).map(|_| AtomicU64::new(0)).collect(),
            evictions_pending: AtomicU64::new(0),
            auth_warned_at: AtomicU64::new(0),
            auth_unlogged: AtomicU64::new(0),
        });
        let mut listener = Some(listener);
        let mut loops = Vec::new();
        for (index, (poll, inbox)) in polls.into_iter().zip(inboxes).enumerate() {
            let mut l = Loop {
                index,
                poll,
                listener: if index == 0 { listener.take() } else { None },
                accept_retry: None,
                conns: Vec::new(),
                free: Vec::new(),
                pending: VecDeque::new(),
                generation: 0,
                inbox,
                me: mes[index].clone(),
                peers: mes.clone(),
                next_peer: 0,
                shared: shared.clone(),
                scratch: vec![0; READ_CHUNK],
                high_water: 0,
                holding: Vec::new(),
                log_paused: Vec::new(),
            };
            if let Some(listener) = l.listener.as_mut() {
                l.poll
                    .registry()
                    .register(listener, LISTENER, Interest::READABLE)?;
            }
            loops.push(
                std::thread::Builder::new()
                    .name(format!("fila-loop-{index}"))
                    .spawn(move || l.run())?,
            );
        }
        let ticker_shared = shared.clone();
        let ticker = std::thread::Builder::new()
            .name("fila-ticker".into())
            .spawn(move || tick(&ticker_shared))?;
        info!(
            listen = %local_addr,
            metrics = ?metrics_endpoint.as_ref().map(|m| m.addr()),
            shards = config.shards,
            event_loops = config.event_loops,
            auth = !config.tokens.is_empty(),
            "fila-server listening"
        );
        Ok(Server {
            local_addr,
            store,
            _data_lock: data_lock,
            shared,
            wakers,
            loops,
            ticker: Some(ticker),
            metrics: metrics_endpoint,
        })
    }

    /// The protocol's address (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The metrics endpoint's address.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|m| m.addr())
    }

    /// The metrics, for in-process inspection.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.shared.metrics
    }

    /// The engine, for in-process inspection.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.shared.engine
    }

    /// A handle that stops the server from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle {
            shared: self.shared.clone(),
            wakers: self.wakers.clone(),
        }
    }

    /// Stops gracefully and waits for every thread.
    pub fn stop(mut self) {
        self.stop_handle().stop();
        self.join_all();
    }

    /// Waits until the server has stopped (after a [`StopHandle::stop`]);
    /// answers why it stopped when the log failed.
    pub fn wait(mut self) -> Option<String> {
        self.join_all();
        self.shared
            .fatal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn join_all(&mut self) {
        for l in self.loops.drain(..) {
            let _ = l.join();
        }
        if let Some(t) = self.ticker.take() {
            t.thread().unpark();
            let _ = t.join();
        }
        if let Some(m) = self.metrics.as_mut() {
            m.stop();
        }
        // Every loop has stopped: what they logged is synced, then the
        // writer stops.
        if let Some(store) = self.store.take() {
            store.stop();
        }
        info!("fila-server stopped");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if !self.loops.is_empty() {
            self.stop_handle().stop();
            self.join_all();
        }
    }
}

/// Drives the engine's time: leases end, delays come due, long polls time
/// out. Sleeps until the next deadline, at most 10 ms (a lease granted
/// meanwhile may be due sooner).
fn tick(shared: &Shared) {
    while !shared.stopping.load(Ordering::Acquire) {
        let next = shared.engine.tick();
        let now = shared.engine.now_ms();
        let wait = next.map_or(10, |d| d.saturating_sub(now)).clamp(1, 10);
        std::thread::park_timeout(Duration::from_millis(wait));
    }
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

impl Loop {
    fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let mut stop_deadline: Option<Instant> = None;
        let housekeeping =
            self.shared.config.idle_timeout_secs > 0 || !self.shared.config.tokens.is_empty();
        loop {
            let mut timeout = if !self.pending.is_empty() {
                Some(Duration::ZERO)
            } else if stop_deadline.is_some() {
                Some(Duration::from_millis(20))
            } else if housekeeping {
                Some(Duration::from_secs(1))
            } else {
                None
            };
            if let Some(at) = self.accept_retry {
                let left = at.saturating_duration_since(Instant::now());
                timeout = Some(timeout.map_or(left, |t| t.min(left)));
            }
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    warn!(error = %e, "poll failed");
                }
                continue;
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept(),
                    WAKER => {}
                    Token(slot) => self.ready(slot),
                }
            }
            if self.accept_retry.is_some_and(|at| Instant::now() >= at) {
                self.accept_retry = None;
                self.accept();
            }
            self.drain_inbox();
            self.release_held();
            self.run_pending();
            if self.shared.stopping.load(Ordering::Acquire) {
                let deadline = *stop_deadline.get_or_insert_with(|| {
                    self.begin_stop();
                    Instant::now() + Duration::from_secs(self.shared.config.shutdown_grace_secs)
                });
                let pending = self.conns.iter().flatten().any(|c| c.buffered() > 0);
                if !pending || Instant::now() >= deadline {
                    break;
                }
            } else if housekeeping {
                self.close_idle();
            }
        }
        for slot in 0..self.conns.len() {
            self.close(slot, "server stopped");
        }
        debug!(index = self.index, "event loop stopped");
    }

    /// One more turn for each connection that had work left, in order.
    fn run_pending(&mut self) {
        for _ in 0..self.pending.len() {
            let Some(slot) = self.pending.pop_front() else {
                return;
            };
            if let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) {
                conn.queued = false;
                self.ready(slot);
            }
        }
    }

    /// Stops accepting; answers parked receives with what they have
    /// (nothing) so every request in progress gets its answer.
    fn begin_stop(&mut self) {
        if let Some(mut listener) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut listener);
        }
        for slot in 0..self.conns.len() {
            let parked: Vec<u64> = match self.conns[slot].as_ref() {
                Some(c) => c.parked.keys().copied().collect(),
                None => continue,
            };
            for park in parked {
                let conn = self.conns[slot].as_mut().expect("open");
                let p = &conn.parked[&park];
                // One already answered keeps its entry: its answer is on its
                // way through the inbox.
                if self.shared.engine.cancel_wait(p.wait) {
                    let p = conn.parked.remove(&park).expect("present");
                    conn.reserved -= p.reserved;
                    self.unpark_count();
                    self.respond(
                        slot,
                        proto::Opcode::Receive as u8,
                        p.request_id,
                        &Response::Messages(Vec::new()),
                    );
                }
            }
            self.flush(slot);
        }
    }

    fn unpark_count(&self) {
        self.shared.parked.fetch_sub(1, Ordering::AcqRel);
        self.shared.metrics.parked.fetch_sub(1, Ordering::Relaxed);
    }

    fn drain_inbox(&mut self) {
        while let Ok(msg) = self.inbox.try_recv() {
            match msg {
                Inbox::Accepted(stream, peer) => {
                    if self.shared.stopping.load(Ordering::Acquire) {
                        self.forget_connection();
                        continue;
                    }
                    self.adopt(stream, peer);
                }
                Inbox::EvictUnauthenticated => self.evict_unauthenticated(),
                Inbox::Answer {
                    slot,
                    generation,
                    park,
                    request_id,
                    result,
                } => {
                    let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
                        continue;
                    };
                    if conn.generation != generation {
                        continue;
                    }
                    let Some(p) = conn.parked.remove(&park) else {
                        continue;
                    };
                    conn.reserved -= p.reserved;
                    self.unpark_count();
                    let response = match result {
                        Ok(ms) => dispatch::messages_of(ms, p.fields),
                        Err(e) => Response::Error(dispatch::wire_error(&e)),
                    };
                    self.respond(slot, proto::Opcode::Receive as u8, request_id, &response);
                    self.flush(slot);
                }
            }
        }
    }

    /// Logs an unknown token at most once a second, with how many were
    /// left out since.
    fn warn_unknown_token(&self, peer: SocketAddr) {
        let second = self.shared.engine.now_ms() / 1000;
        let last = self.shared.auth_warned_at.load(Ordering::Acquire);
        if last != second
            && self
                .shared
                .auth_warned_at
                .compare_exchange(last, second, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            let unlogged = self.shared.auth_unlogged.swap(0, Ordering::AcqRel);
            warn!(%peer, unlogged_since_last = unlogged, "unknown token presented");
        } else {
            self.shared.auth_unlogged.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Handles one decoded request; `None` when a receive parked.
    fn request(
        &mut self,
        slot: usize,
        request_id: u64,
        req: Request,
        room: usize,
    ) -> Option<Response> {
        let shared = self.shared.clone();
        if shared.stopping.load(Ordering::Acquire) {
            return Some(error(
                ErrorCode::SHUTTING_DOWN,
                "shutting_down: the server is stopping",
            ));
        }
        let tokens = &shared.config.tokens;
        let conn = self.conns[slot].as_mut().expect("open");
        match &req {
            Request::Hello { client } => {
                debug!(peer = %conn.peer, client, "hello");
                return Some(Response::Hello {
                    server: format!("fila-server/{}", env!("CARGO_PKG_VERSION")),
                    protocol_version: proto::VERSION,
                    max_frame_len: shared.config.max_frame_bytes as u32,
                });
            }
            Request::Auth { token } => {
                if tokens.is_empty() {
                    return Some(Response::Ok);
                }
                if let Some(id) = tokens.find(token) {
                    conn.token = Some(id);
                    conn.last_active = Instant::now();
                    if std::mem::take(&mut conn.unauthenticated) {
                        shared.unauthenticated[self.index].fetch_sub(1, Ordering::AcqRel);
                    }
                    return Some(Response::Ok);
                }
                // A failed auth leaves the connection unauthenticated,
                // whatever it presented before.
                conn.token = None;
                if !std::mem::replace(&mut conn.unauthenticated, true) {
                    shared.unauthenticated[self.index].fetch_add(1, Ordering::AcqRel);
                }
                conn.auth_failures += 1;
                let peer = conn.peer;
                let last = conn.auth_failures >= AUTH_FAILURES_MAX;
                if last {
                    conn.closing = true;
                }
                self.warn_unknown_token(peer);
                return Some(if last {
                    error(
                        ErrorCode::UNAUTHENTICATED,
                        format!(
                            "unauthenticated: unknown token ({AUTH_FAILURES_MAX} failures: closing the connection)"
                        ),
                    )
                } else {
                    error(ErrorCode::UNAUTHENTICATED, "unauthenticated: unknown token")
                });
            }
            _ => {}
        }
        if !tokens.is_empty() && conn.token.is_none() {
            return Some(error(
                ErrorCode::UNAUTHENTICATED,
                "unauthenticated: send auth with a token first",
            ));
        }
        let caller = Caller {
            tokens,
            token: conn.token,
        };
        let generation = conn.generation;
        let park = conn.next_park;
        let fields = match &req {
            Request::Receive(r) => r.fields,
            _ => proto::Fields::ALL,
        };
        let parked_here = conn.parked.len();
        let (tx, waker) = self.me.clone();
        let notify = move || -> Notify {
            Box::new(move |result| {
                if tx
                    .send(Inbox::Answer {
                        slot,
                        generation,
                        park,
                        request_id,
                        result,
                    })
                    .is_ok()
                {
                    let _ = waker.wake();
                }
            })
        };
        match dispatch::handle(&shared.engine, &shared.metrics, &caller, req, room, notify) {
            Outcome::Answer(r) => Some(r),
            Outcome::Parked(wait) => {
                let config = &shared.config;
                let refused = if parked_here >= config.max_parked_per_connection {
                    Some((
                        "max_parked_per_connection",
                        config.max_parked_per_connection,
                    ))
                } else if shared
                    .parked
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                        (n < config.max_parked as u64).then_some(n + 1)
                    })
                    .is_err()
                {
                    Some(("max_parked", config.max_parked))
                } else {
                    None
                };
                if let Some((limit, max)) = refused {
                    // Never leave it parked: it would hold messages for
                    // nobody. If it was answered meanwhile, that answer is on
                    // its way: take it like any other.
                    if shared.engine.cancel_wait(wait) {
                        return Some(error(
                            ErrorCode::RESOURCE_EXHAUSTED,
                            format!("resource_exhausted: {limit} of {max} parked receives reached"),
                        ));
                    }
                    if limit == "max_parked_per_connection" {
                        shared.parked.fetch_add(1, Ordering::AcqRel);
                    }
                }
                shared.metrics.parked.fetch_add(1, Ordering::Relaxed);
                let conn = self.conns[slot].as_mut().expect("open");
                let reserved = usize::try_from(wait.reserved_bytes()).unwrap_or(usize::MAX);
                conn.reserved += reserved;
                let held = conn.buffered() + conn.reserved;
                conn.next_park += 1;
                conn.parked.insert(
                    park,
                    Parked {
                        wait,
                        request_id,
                        reserved,
                        fields,
                    },
                );
                self.note_held(held);
                None
            }
        }
    }

    fn close_idle(&mut self) {
        let shared = self.shared.clone();
        let config = &shared.config;
        let idle = Duration::from_secs(config.idle_timeout_secs);
        let auth = Duration::from_secs(config.auth_timeout_secs);
        let need_auth = !config.tokens.is_empty();
        let now = Instant::now();
        for slot in 0..self.conns.len() {
            let why = match &self.conns[slot] {
                Some(c)
                    if need_auth && c.token.is_none() && now.duration_since(c.opened) >= auth =>
                {
                    "not authenticated in time"
                }
                Some(c)
                    if config.idle_timeout_secs > 0
                        && c.parked.is_empty()
                        && now.duration_since(c.last_active) >= idle =>
                {
                    "idle timeout"
                }
                _ => continue,
            };
            self.close(slot, why);
        }
    }

    fn close(&mut self, slot: usize, why: &str) {
        let Some(mut conn) = self.conns[slot].take() else {
            return;
        };
        // Every receive it parked, whatever its request id.
        for (_, p) in conn.parked.drain() {
            if self.shared.engine.cancel_wait(p.wait) {
                self.unpark_count();
            }
        }
        if conn.unauthenticated {
            self.shared.unauthenticated[self.index].fetch_sub(1, Ordering::AcqRel);
        }
        let _ = self.poll.registry().deregister(&mut conn.stream);
        debug!(peer = %conn.peer, why, "connection closed");
        self.free.push(slot);
        self.forget_connection();
    }
}
