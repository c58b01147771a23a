//! The mio front end: event loops, connections, frames in and answers out.
//!
//! Loop 0 owns the listener and deals accepted connections round-robin to
//! every loop (itself included) through each loop's mailbox (`mailbox.rs`,
//! the one way into a loop). A loop keeps its connections in a slab
//! indexed by mio `Token`, reads each until a read comes back short or
//! would block, answers every whole frame into the connection's output
//! buffer, and writes the buffer once per wake-up. A parked receive's late
//! answer comes from the loop that owns its shard, through the mailbox.
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
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use fila_core::{Engine, EngineLimits, Owner, Totals, WaitId};
use fila_proto::{self as proto, split_frame, ErrorCode, Request, Response};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use tracing::{debug, info, warn};

use crate::auth;
use crate::auth::TokenId;
use crate::config::{Config, Sync};
use crate::dispatch::{self, error, Answer, Caller, Outcome};
use crate::metrics::Metrics;
use crate::scrape::MetricsEndpoint;

mod accept;
mod conn;
mod durable;
mod mailbox;
mod moving;
mod request;
mod route;
mod spin;

use crate::limits::READ_CHUNK;
pub use crate::limits::{
    ANSWER_ROOM_MIN, AUTH_FAILURES_MAX, FRAMES_PER_TURN, OUTPUT_BYTES_MIN, PREAUTH_FRAME_MAX,
    READ_BYTES_PER_TURN, SMALL_ANSWER_ROOM,
};
use accept::open_files_limit;
use conn::{Conn, Parked};
pub use durable::{StartError, LOG_BACKLOG_MAX};
use mailbox::{Loops, Msg, Outbox};
pub use mailbox::{MAILBOX_CAPACITY, MESSAGES_PER_TURN};
pub use moving::MOVE_AFTER;
use route::{LoopsView, Route, RunJob};
pub use route::{IN_FLIGHT_MAX, TIMERS_PER_TURN};

const LISTENER: Token = Token(usize::MAX - 1);
const WAKER: Token = Token(usize::MAX - 2);

/// How long the listener waits before accepting again after the process
/// ran out of file descriptors.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

struct Shared {
    config: Config,
    /// Engine-wide figures (atomics).
    totals: Totals,
    /// Every loop: its mailbox, doorbell and waker, and its flags.
    loops: Loops,
    /// Loops running (a snapshot or scrape does not wait for one that
    /// stopped).
    alive: Arc<AtomicU64>,
    /// The log's marks, when there is a log.
    marks: Option<fila_store::Marks>,
    /// Answers that changed something wait for the log (`sync = always`).
    hold: bool,
    /// The log failed: why (the server stops).
    fatal: Arc<Mutex<Option<String>>>,
    metrics: Arc<Metrics>,
    stopping: Arc<AtomicBool>,
    connections: AtomicU64,
    /// Receives parked on the whole server.
    parked: AtomicU64,
    /// With tokens: evictions of unauthenticated connections asked for
    /// but not done yet.
    evictions_pending: AtomicU64,
    /// Rate limit of the "unknown token" warning: the second it was last
    /// logged, and how many were left out since.
    auth_warned_at: AtomicU64,
    auth_unlogged: AtomicU64,
}

struct Loop {
    index: usize,
    /// The shards this loop owns: no other thread touches them.
    owner: Owner,
    /// Messages for other loops, gathered during a turn.
    outbox: Outbox,
    /// Receives parked on the shards owned here, by their wait: where
    /// each one's answer goes.
    parked_here: HashMap<WaitId, Route>,
    /// Connections that got answers from other loops this turn.
    dirty: Vec<usize>,
    poll: Poll,
    listener: Option<TcpListener>,
    /// Accepting failed (out of descriptors): retry at this time.
    accept_retry: Option<Instant>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    /// Connections whose turn ended with work left, round-robin.
    pending: VecDeque<usize>,
    generation: u64,
    /// The next loop an accepted connection goes to.
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
    /// Failed authentications per peer address (the accepting loop's:
    /// every loop reports its failures there, and blocked peers are
    /// refused when they connect).
    guard: crate::guard::AuthGuard,
    /// Whether to poll a little before blocking.
    spin: spin::Spin,
}

/// A running server.
pub struct Server {
    local_addr: SocketAddr,
    store: Option<fila_store::Store<fila_wal::FsStorage>>,
    /// Held while running: no second server on the data directory.
    _data_lock: Option<std::fs::File>,
    shared: Arc<Shared>,
    threads: Vec<std::thread::JoinHandle<()>>,
    metrics: Option<MetricsEndpoint>,
}

/// Stops a server from another thread (a signal handler's, a test's).
#[derive(Clone)]
pub struct StopHandle {
    shared: Arc<Shared>,
}

impl StopHandle {
    /// Begins a graceful shutdown: stop accepting, answer what is in
    /// progress, close.
    pub fn stop(&self) {
        if !self.shared.stopping.swap(true, Ordering::AcqRel) {
            info!("shutting down");
        }
        for index in 0..self.shared.loops.len() {
            self.shared.loops.wake(index);
        }
    }
}

impl Server {
    /// Recovers the data directory, binds, starts the loops (each given
    /// the shards it owns), the log writer and the metrics endpoint.
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
        let mut wakers = Vec::new();
        for _ in 0..config.event_loops {
            let poll = Poll::new()?;
            wakers.push(Arc::new(Waker::new(poll.registry(), WAKER)?));
            polls.push(poll);
        }
        let loops = Loops::new(wakers);
        let fatal: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let stopping = Arc::new(AtomicBool::new(false));
        // Once recovered, the loops own the shards: the log writer and the
        // metrics endpoint ask them, never the engine.
        let alive = Arc::new(AtomicU64::new(config.event_loops as u64));
        let view = Arc::new(LoopsView {
            loops: loops.clone(),
            totals: engine.totals(),
            alive: alive.clone(),
        });
        let (store, data_lock) =
            durable::open(&config, &engine, view.clone(), &loops, &fatal, &stopping)?;
        let engine = Arc::try_unwrap(engine)
            .map_err(|_| io::Error::other("the engine is still shared after recovery"))?;
        let totals = engine.totals();
        let owners = engine.into_owners(config.event_loops, TIMERS_PER_TURN);
        let metrics_endpoint = match config.metrics_listen {
            Some(addr) => Some(MetricsEndpoint::start(
                addr,
                &config,
                metrics.clone(),
                view,
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
            totals,
            loops,
            alive,
            marks: store.as_ref().map(|s| s.marks()),
            hold: config.sync == Sync::Always,
            fatal,
            metrics,
            stopping,
            connections: AtomicU64::new(0),
            parked: AtomicU64::new(0),
            evictions_pending: AtomicU64::new(0),
            auth_warned_at: AtomicU64::new(0),
            auth_unlogged: AtomicU64::new(0),
        });
        let mut listener = Some(listener);
        let mut threads = Vec::new();
        for (index, (poll, owner)) in polls.into_iter().zip(owners).enumerate() {
            let mut l = Loop {
                index,
                owner,
                outbox: Outbox::new(config.event_loops),
                parked_here: HashMap::new(),
                dirty: Vec::new(),
                poll,
                listener: if index == 0 { listener.take() } else { None },
                accept_retry: None,
                conns: Vec::new(),
                free: Vec::new(),
                pending: VecDeque::new(),
                generation: 0,
                next_peer: 0,
                shared: shared.clone(),
                scratch: vec![0; READ_CHUNK],
                high_water: 0,
                holding: Vec::new(),
                log_paused: Vec::new(),
                guard: crate::guard::AuthGuard::with_capacity(if index == 0 {
                    crate::guard::PEERS_MAX
                } else {
                    1
                }),
                spin: spin::Spin::default(),
            };
            if let Some(listener) = l.listener.as_mut() {
                l.poll
                    .registry()
                    .register(listener, LISTENER, Interest::READABLE)?;
            }
            threads.push(
                std::thread::Builder::new()
                    .name(format!("fila-loop-{index}"))
                    .spawn(move || l.run())?,
            );
        }
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
            threads,
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

    /// The engine-wide figures, for in-process inspection.
    pub fn totals(&self) -> &Totals {
        &self.shared.totals
    }

    /// Asks the log writer for a snapshot at its next batch (every loop
    /// stops for the moment the state is copied); the log before it is
    /// then deleted. Does nothing without a data directory.
    pub fn request_snapshot(&self) {
        if let Some(store) = &self.store {
            store.request_snapshot();
        }
    }

    /// Snapshots written since the server started.
    pub fn snapshots(&self) -> u64 {
        self.store.as_ref().map_or(0, |s| s.snapshots())
    }

    /// A handle that stops the server from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle {
            shared: self.shared.clone(),
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
        for l in self.threads.drain(..) {
            let _ = l.join();
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
        if !self.threads.is_empty() {
            self.stop_handle().stop();
            self.join_all();
        }
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
        let mut busy = false;
        loop {
            // The shards' time: due timers within the turn's budget.
            let caught_up = self.owner.advance(TIMERS_PER_TURN);
            self.hand_on();
            busy |= self.flush_outgoing();
            let mut timeout = if !self.pending.is_empty() || busy || !caught_up {
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
            if let Some(due) = self.owner.next_deadline() {
                let left = Duration::from_millis(due.saturating_sub(self.shared.totals.now_ms()));
                timeout = Some(timeout.map_or(left, |t| t.min(left)));
            }
            let polled = if timeout == Some(Duration::ZERO) {
                self.poll.poll(&mut events, timeout)
            } else {
                self.wait_for_work(&mut events, timeout)
            };
            if let Err(e) = polled {
                if e.kind() != io::ErrorKind::Interrupted {
                    warn!(error = %e, "poll failed");
                }
                continue;
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept(),
                    WAKER => {}
                    Token(slot) => {
                        if event.is_read_closed() || event.is_error() {
                            // Even while it is not being read (no output
                            // room): nothing more is leased to it.
                            self.peer_closed(slot);
                        }
                        self.ready(slot)
                    }
                }
            }
            if self.accept_retry.is_some_and(|at| Instant::now() >= at) {
                self.accept_retry = None;
                self.accept();
            }
            busy = self.drain_mailbox();
            self.release_held();
            self.run_pending();
            let mut dirty = std::mem::take(&mut self.dirty);
            for &slot in &dirty {
                self.flush(slot);
            }
            // The list's room is kept for the next turn.
            dirty.clear();
            self.dirty = dirty;
            if self.shared.stopping.load(Ordering::Acquire) {
                let deadline = *stop_deadline.get_or_insert_with(|| {
                    self.begin_stop();
                    Instant::now() + Duration::from_secs(self.shared.config.shutdown_grace_secs)
                });
                // Every loop owns shards the others' connections may still
                // wait on: they stop together, once none has anything in
                // progress (or at the deadline).
                let mine = self
                    .conns
                    .iter()
                    .flatten()
                    .any(|c| c.buffered() > 0 || c.in_flight > 0 || !c.parked.is_empty())
                    || !self.outbox.is_empty();
                let loops = &self.shared.loops;
                loops.get(self.index).drained.store(!mine, Ordering::SeqCst);
                let all = loops.iter().all(|l| l.drained.load(Ordering::SeqCst));
                if all || Instant::now() >= deadline {
                    break;
                }
            } else if housekeeping {
                self.close_idle();
            }
        }
        for slot in 0..self.conns.len() {
            self.close(slot, "server stopped");
        }
        self.flush_outgoing();
        self.outbox.clear();
        self.shared.alive.fetch_sub(1, Ordering::AcqRel);
        // The others may be waiting for this loop's word to stop.
        for index in 0..self.shared.loops.len() {
            self.shared.loops.wake(index);
        }
        debug!(index = self.index, "event loop stopped");
    }

    /// Waits for events or work handed in: polls without blocking for
    /// the spin window first when the last waits were all that short
    /// (`spin.rs`), then blocks (up to `timeout`) once it has said it is
    /// about to sleep.
    fn wait_for_work(&mut self, events: &mut Events, timeout: Option<Duration>) -> io::Result<()> {
        let started = Instant::now();
        let window = timeout.map_or(self.spin.window(), |t| t.min(self.spin.window()));
        if !window.is_zero() {
            let until = started + window;
            loop {
                let polled = self.poll.poll(events, Some(Duration::ZERO));
                if polled.is_err() || !events.is_empty() || self.work_handed_in() {
                    self.spin.waited(started.elapsed());
                    return polled;
                }
                if Instant::now() >= until {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        let timeout = if self.going_to_sleep() {
            Some(Duration::ZERO)
        } else {
            timeout.map(|t| t.saturating_sub(started.elapsed()))
        };
        let polled = self.poll.poll(events, timeout);
        self.shared.loops.get(self.index).awake();
        self.spin.waited(started.elapsed());
        polled
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
            self.end_parked(slot);
            self.flush(slot);
        }
    }

    /// Its client closed its side: its parked receives end (once).
    fn peer_closed(&mut self, slot: usize) {
        let Some(Some(c)) = self.conns.get_mut(slot) else {
            return;
        };
        if !std::mem::replace(&mut c.peer_closed, true) {
            self.end_parked(slot);
        }
    }

    /// Ends a connection's parked receives now, each answered with no
    /// messages: the server is stopping, or its client closed its side
    /// (it sends no more, and may be gone: nothing more is leased to it).
    pub(super) fn end_parked(&mut self, slot: usize) {
        let parked: Vec<(u64, WaitId, u64, u64)> = match self.conns.get(slot) {
            Some(Some(c)) => c
                .parked
                .iter()
                .map(|(park, p)| (*park, p.wait, p.request_id, c.generation))
                .collect(),
            _ => return,
        };
        for (park, wait, request_id, generation) in parked {
            // One already answered keeps its entry: its answer is on its
            // way through the mailbox. One cancelled is answered empty.
            let route = Route {
                lp: self.index,
                slot,
                generation,
                request_id,
                opcode: proto::Opcode::Receive as u8,
                started: Instant::now(),
                room: 0,
                park,
                fields: proto::Fields::ALL,
                shard: wait.shard(),
            };
            self.cancel_wait(wait, Some(route));
        }
    }

    pub(super) fn unpark_count(&self) {
        self.shared.parked.fetch_sub(1, Ordering::AcqRel);
        self.shared.metrics.parked.fetch_sub(1, Ordering::Relaxed);
    }

    /// Takes this turn's messages from the mailbox (at most
    /// [`MESSAGES_PER_TURN`]); answers whether more are waiting.
    fn drain_mailbox(&mut self) -> bool {
        let shared = self.shared.clone();
        let me = shared.loops.get(self.index);
        for _ in 0..MESSAGES_PER_TURN {
            let Some(msg) = me.take() else {
                return false;
            };
            match msg {
                Msg::Accepted(stream, peer) => {
                    if self.shared.stopping.load(Ordering::Acquire) {
                        self.forget_connection();
                        continue;
                    }
                    self.adopt(stream, peer);
                }
                Msg::Moved(conn) => self.adopt_moved(conn),
                Msg::EvictUnauthenticated => self.evict_unauthenticated(),
                Msg::AuthFailed(ip) => self.note_auth_failure(ip),
                Msg::Done { route, done } => self.on_done(route, done),
                Msg::Pause(pause) => self.pause(pause),
                Msg::Export(ask) => self.export(ask),
                Msg::Scrape(ask) => self.scrape(ask),
                job => self.serve_job(job),
            }
        }
        me.has_mail()
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
                        && c.in_flight == 0
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
            self.cancel_wait(p.wait, None);
        }
        if conn.unauthenticated {
            self.shared
                .loops
                .get(self.index)
                .unauthenticated
                .fetch_sub(1, Ordering::AcqRel);
        }
        let _ = self.poll.registry().deregister(&mut conn.stream);
        debug!(peer = %conn.peer, why, "connection closed");
        self.free.push(slot);
        self.forget_connection();
    }
}
