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

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fila_core::{Engine, EngineLimits, Totals};
use mio::net::TcpListener;
use mio::{Events, Poll, Token, Waker};
use tracing::{debug, info, warn};

use crate::config::{Config, Sync};
use crate::metrics::Metrics;
use crate::scrape::MetricsEndpoint;

mod azure;
#[cfg(not(loom))]
mod cluster;
pub(crate) mod console;
mod durable;
mod front;
mod gateway;
mod held;
mod host;
#[cfg(not(loom))]
mod http;
mod log_wait;
#[cfg(all(test, loom))]
mod loom_model;
mod mailbox;
mod spin;
mod sqs;
mod view;

/// The headers of a hyper request as the dialects read them (the SQS API,
/// the console; outside `http` because the loom build keeps its types).
pub(in crate::server) fn headers_of(parts: &hyper::http::request::Parts) -> fila_http::Headers<'_> {
    fila_http::Headers::new(
        parts
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_bytes()))
            .collect(),
    )
}

pub use crate::limits::{
    ANSWER_ROOM_MIN, AUTH_FAILURES_MAX, FRAMES_PER_TURN, OUTPUT_BYTES_MIN, PREAUTH_FRAME_MAX,
    READ_BYTES_PER_TURN, SMALL_ANSWER_ROOM,
};
pub use durable::StartError;
pub use front::MOVE_AFTER;
use front::{Door, FrontEnd};
use host::ShardHost;
pub use host::{IN_FLIGHT_MAX, TIMERS_PER_TURN};
use log_wait::LogWait;
pub use log_wait::LOG_BACKLOG_MAX;
use mailbox::{Loops, Msg, Post};
pub use mailbox::{MAILBOX_CAPACITY, MESSAGES_PER_TURN};
use view::LoopsView;

const LISTENER: Token = Token(usize::MAX - 1);
const WAKER: Token = Token(usize::MAX - 2);
const SQS_LISTENER: Token = Token(usize::MAX - 3);
const AZURE_LISTENER: Token = Token(usize::MAX - 4);

/// What every part of every loop reads: the configuration, the figures,
/// the handle to the loops, the log's marks, the server-wide counts.
struct Shared {
    config: Config,
    /// The tokens and TLS configuration, swapped by reloads.
    live: Arc<crate::live::Live>,
    /// Engine-wide figures (atomics).
    totals: Totals,
    /// Every loop: its mailbox, doorbell and waker, and its flags.
    loops: Loops,
    /// Loops running (a snapshot or scrape does not wait for one that
    /// stopped).
    alive: Arc<AtomicU64>,
    /// The log's marks, when there is a log.
    marks: Option<fila_store::Marks>,
    /// Answers to calls that logged a change wait for the log (`sync =
    /// always`).
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
    /// The "unknown token" warning, at most once a second.
    auth_warn: WarnLimit,
    /// The "TLS handshake failed" warning, at most once a second.
    tls_warn: WarnLimit,
    /// A cluster node: the endpoint every queue request goes to (its
    /// partition's replica, `cluster/`), unless its loop runs it on the
    /// partition's leader here (`cluster/fast.rs`).
    cluster: Option<usize>,
    /// What a cluster node's thread publishes: its view of its cluster
    /// (what `ClusterStatus` answers), the partition's totals while it
    /// leads.
    published: Arc<view::Published>,
    /// Bytes of SQS request bodies held now, every connection together
    /// (at most `sqs::BODIES_BYTES_MAX`).
    sqs_bodies: Arc<std::sync::atomic::AtomicUsize>,
    /// Queues purged through the SQS API in the last minute.
    sqs_purges: Arc<sqs::Purges>,
    /// The Azure Queue API's service properties, per account.
    azure_properties: Arc<azure::Properties>,
    /// A cluster node: per loop, it holds answers waiting for a commit
    /// and wants word of the next one (`held.rs`).
    told: fila_core::commits::Told,
    /// A cluster node: what the loops run on a partition's leader
    /// themselves.
    #[cfg(not(loom))]
    fast: std::sync::OnceLock<Arc<cluster::fast::Fast>>,
}

/// A warning logged at most once a second, with how many were left out
/// since the last one.
#[derive(Default)]
struct WarnLimit {
    /// The second it was last logged.
    at: AtomicU64,
    unlogged: AtomicU64,
}

impl WarnLimit {
    /// At second `now_s`: `Some(left out since the last)` when this one is
    /// to be logged.
    fn allow(&self, now_s: u64) -> Option<u64> {
        let last = self.at.load(Ordering::Acquire);
        if last != now_s
            && self
                .at
                .compare_exchange(last, now_s, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            Some(self.unlogged.swap(0, Ordering::AcqRel))
        } else {
            self.unlogged.fetch_add(1, Ordering::AcqRel);
            None
        }
    }
}

impl Shared {
    /// Reads the tokens and TLS files again (SIGHUP, `fila reload`, a
    /// test), counted in the metrics when it takes effect.
    fn reload(&self) -> Result<crate::Reloaded, crate::ReloadError> {
        let r = self.live.reload();
        match &r {
            Ok(_) => {
                self.metrics.reloads.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => warn!("{e}"),
        }
        r
    }
}

/// One event loop: its three parts, the poll that drives them, and its
/// post to the other loops.
struct Loop {
    index: usize,
    shared: Arc<Shared>,
    poll: Poll,
    /// Connections, frames in and answers out.
    front: FrontEnd,
    /// The shards this loop owns.
    host: ShardHost,
    /// What waits for the log.
    wait: LogWait,
    /// Messages for the other loops.
    post: Post,
    /// Whether to poll a little before blocking.
    spin: spin::Spin,
}

/// The parts of a loop the front end calls on while it serves a
/// connection: the shard host, the log wait, the post.
struct Back<'a> {
    host: &'a mut ShardHost,
    wait: &'a mut LogWait,
    post: &'a mut Post,
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
    /// The SQS API's address, when it is on.
    sqs: Option<SocketAddr>,
    /// The Azure Queue API's address, when it is on.
    azure: Option<SocketAddr>,
    console: Option<console::ConsoleListener>,
    #[cfg(not(loom))]
    cluster: Option<cluster::ClusterNode>,
}

/// Binds a listener of an HTTP front end (so a refused address fails the
/// start), non-blocking for its runtime.
fn bind_nonblocking(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Stops a server from another thread (a signal handler's, a test's).
#[derive(Clone)]
pub struct StopHandle {
    shared: Arc<Shared>,
}

impl StopHandle {
    /// Reads the tokens and TLS files again (SIGHUP): see
    /// [`Server::reload`].
    pub fn reload(&self) -> Result<crate::Reloaded, crate::ReloadError> {
        self.shared.reload()
    }

    /// Begins a graceful shutdown: stop accepting, answer what is in
    /// progress, close.
    pub fn stop(&self) {
        if !self.shared.stopping.swap(true, Ordering::AcqRel) {
            info!("shutting down");
        }
        for index in 0..self.shared.loops.endpoints() {
            self.shared.loops.wake(index);
        }
    }
}

impl Server {
    /// Recovers the data directory, binds, starts the loops (each given
    /// the shards it owns), the log writer and the metrics endpoint.
    pub fn start(config: Config) -> Result<Server, StartError> {
        Server::start_with_clock(config, Arc::new(fila_core::SystemClock))
    }

    /// [`Server::start`] on a clock of the caller's (tests drive time with
    /// a [`fila_core::ManualClock`]; a loop still sleeps in real time, for
    /// as long as the clock says its next timer is away).
    #[doc(hidden)]
    pub fn start_with_clock(
        config: Config,
        clock: Arc<dyn fila_core::Clock>,
    ) -> Result<Server, StartError> {
        crate::tls::install_provider();
        let live = Arc::new(crate::live::Live::new(&config)?);
        if config.sqs_threads != 0 {
            warn!("sqs_threads has no effect: the event loops serve the SQS API");
        }
        for (name, addr) in config.plaintext_off_loopback() {
            warn!(%addr, "{name} is off loopback without TLS (allow_plaintext): tokens and messages cross the network in clear text");
        }
        let engine = Arc::new(Engine::new(config.shards, clock));
        engine.set_limits(EngineLimits {
            max_stored_bytes: config.max_stored_bytes,
            max_queues: config.max_queues,
        });
        let metrics = Arc::new(Metrics::default());
        let listener = TcpListener::bind(config.listen).map_err(|source| StartError::Listen {
            addr: config.listen,
            setting: "listen",
            source,
        })?;
        let local_addr = listener.local_addr().map_err(|source| StartError::Listen {
            addr: config.listen,
            setting: "listen",
            source,
        })?;
        // The loops' wakers exist before the log, whose writer wakes them.
        let sqs_listener = match config.sqs_listen {
            Some(addr) => Some(
                TcpListener::bind(addr).map_err(|source| StartError::Listen {
                    addr,
                    setting: "sqs_listen",
                    source,
                })?,
            ),
            None => None,
        };
        let sqs_addr = match &sqs_listener {
            Some(l) => Some(l.local_addr()?),
            None => None,
        };
        let azure_listener = match config.azure_listen {
            Some(addr) => Some(
                TcpListener::bind(addr).map_err(|source| StartError::Listen {
                    addr,
                    setting: "azure_listen",
                    source,
                })?,
            ),
            None => None,
        };
        let azure_addr = match &azure_listener {
            Some(l) => Some(l.local_addr()?),
            None => None,
        };
        let console_listener = match config.console_listen {
            Some(addr) => Some(bind_nonblocking(addr).map_err(|source| StartError::Listen {
                addr,
                setting: "console_listen",
                source,
            })?),
            None => None,
        };
        let mut polls = Vec::new();
        let mut wakers = Vec::new();
        for _ in 0..config.event_loops {
            let poll = Poll::new()?;
            wakers.push(Arc::new(Waker::new(poll.registry(), WAKER)?));
            polls.push(poll);
        }
        // The console's gateway is the endpoint after the loops.
        let console_notify = console_listener
            .as_ref()
            .map(|_| Arc::new(tokio::sync::Notify::new()));
        let mut gateways: Vec<Arc<tokio::sync::Notify>> = console_notify.iter().cloned().collect();
        // A cluster node's endpoint is the last.
        #[cfg(not(loom))]
        let cluster_notify = config
            .cluster
            .as_ref()
            .map(|_| Arc::new(tokio::sync::Notify::new()));
        #[cfg(loom)]
        let cluster_notify: Option<Arc<tokio::sync::Notify>> = None;
        let cluster_index = cluster_notify
            .as_ref()
            .map(|_| config.event_loops + gateways.len());
        gateways.extend(cluster_notify.clone());
        let loops = Loops::new(wakers, gateways);
        let fatal: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let stopping = Arc::new(AtomicBool::new(false));
        // Once recovered, the loops own the shards: the log writer and the
        // metrics endpoint ask them, never the engine.
        let alive = Arc::new(AtomicU64::new(config.event_loops as u64));
        let published = Arc::new(view::Published::default());
        let view = Arc::new(LoopsView {
            loops: loops.clone(),
            totals: engine.totals(),
            alive: alive.clone(),
            cluster: cluster_index.map(|i| (i, published.clone())),
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
                live.clone(),
                metrics.clone(),
                view,
            )?),
            None => None,
        };
        if let Some(limit) = front::open_files_limit() {
            if limit < config.max_connections as u64 + 64 {
                warn!(
                    open_files_limit = limit,
                    max_connections = config.max_connections,
                    "the open-files limit is below max_connections (+64 for the server's own); \
                     connections past it wait until descriptors free up (raise it with ulimit -n)"
                );
            }
        }
        let owner_count = loops.owners();
        let shared = Arc::new(Shared {
            config: config.clone(),
            live: live.clone(),
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
            auth_warn: WarnLimit::default(),
            tls_warn: WarnLimit::default(),
            cluster: cluster_index,
            published,
            sqs_bodies: Arc::default(),
            sqs_purges: Arc::default(),
            azure_properties: Arc::default(),
            told: fila_core::commits::Told::new(owner_count),
            #[cfg(not(loom))]
            fast: std::sync::OnceLock::new(),
        });
        let (mut listener, mut sqs_listener, mut azure_listener) =
            (Some(listener), sqs_listener, azure_listener);
        let mut threads = Vec::new();
        for (index, (poll, owner)) in polls.into_iter().zip(owners).enumerate() {
            let registry = poll.registry().try_clone()?;
            let listeners = if index == 0 {
                front::Listeners {
                    binary: listener.take(),
                    sqs: sqs_listener.take(),
                    azure: azure_listener.take(),
                }
            } else {
                front::Listeners::default()
            };
            let l = Loop {
                index,
                shared: shared.clone(),
                front: FrontEnd::new(index, shared.clone(), registry, listeners)?,
                host: ShardHost::new(index, shared.clone(), owner),
                wait: LogWait::new(index, shared.clone()),
                post: Post::new(index, shared.loops.clone()),
                poll,
                spin: spin::Spin::default(),
            };
            threads.push(
                std::thread::Builder::new()
                    .name(format!("fila-loop-{index}"))
                    .spawn(move || l.run())?,
            );
        }
        let console_index = config.event_loops;
        let sqs = sqs_addr;
        let console = match (console_listener, console_notify) {
            (Some(l), Some(notify)) => Some(console::ConsoleListener::start(
                l,
                console_index,
                notify,
                shared.clone(),
            )?),
            _ => None,
        };
        #[cfg(not(loom))]
        let cluster = match (&config.cluster, cluster_index, cluster_notify) {
            (Some(c), Some(index), Some(notify)) => Some(cluster::ClusterNode::start(
                c,
                index,
                notify,
                shared.clone(),
            )?),
            _ => None,
        };
        info!(
            listen = %local_addr,
            sqs = %shown(sqs),
            azure = %shown(azure_addr),
            metrics = %shown(metrics_endpoint.as_ref().map(|m| m.addr())),
            console = %shown(console.as_ref().map(|c| c.addr())),
            shards = config.shards,
            event_loops = config.event_loops,
            auth = !config.tokens.is_empty(),
            tls = config.tls_cert.is_some(),
            "fila-server listening"
        );
        Ok(Server {
            local_addr,
            store,
            _data_lock: data_lock,
            shared,
            threads,
            metrics: metrics_endpoint,
            sqs,
            azure: azure_addr,
            console,
            #[cfg(not(loom))]
            cluster,
        })
    }

    /// Reads the tokens and the TLS files again (as SIGHUP does) and puts
    /// them in place, or changes nothing and says why.
    pub fn reload(&self) -> Result<crate::Reloaded, crate::ReloadError> {
        self.shared.reload()
    }

    /// The protocol's address (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The SQS API's address (the real port when 0 was asked for).
    pub fn sqs_addr(&self) -> Option<SocketAddr> {
        self.sqs
    }

    /// The Azure Queue API's address (the real port when 0 was asked
    /// for).
    pub fn azure_addr(&self) -> Option<SocketAddr> {
        self.azure
    }

    /// The web console's address (the real port when 0 was asked for).
    pub fn console_addr(&self) -> Option<SocketAddr> {
        self.console.as_ref().map(|c| c.addr())
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
        if let Some(c) = self.console.as_mut() {
            c.join();
        }
        #[cfg(not(loom))]
        if let Some(c) = self.cluster.as_mut() {
            c.join();
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

impl Loop {
    /// Splits the loop into the front end and what it calls on.
    fn parts(&mut self) -> (&mut FrontEnd, Back<'_>) {
        (
            &mut self.front,
            Back {
                host: &mut self.host,
                wait: &mut self.wait,
                post: &mut self.post,
            },
        )
    }

    fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let mut stop_deadline: Option<Instant> = None;
        let housekeeping = self.shared.config.idle_timeout_secs > 0
            || self.shared.config.sqs_listen.is_some()
            || self.shared.config.azure_listen.is_some()
            || !self.shared.config.tokens.is_empty()
            || self.shared.config.tls_cert.is_some();
        let mut busy = false;
        loop {
            // The shards' time: due timers within the turn's budget. What
            // they gave this loop's connections (a parked receive served by
            // a lease's end, a wait's end) is written out before the loop
            // sleeps: nothing else would wake it for them.
            let caught_up = self.host.advance(&mut self.post);
            let (front, mut back) = self.parts();
            front.take_local(&mut back);
            front.flush_dirty(&mut back);
            busy |= self.post.flush();
            let mut timeout = if self.front.has_pending() || busy || !caught_up {
                Some(Duration::ZERO)
            } else if stop_deadline.is_some() {
                Some(Duration::from_millis(20))
            } else if housekeeping {
                Some(Duration::from_secs(1))
            } else {
                None
            };
            if let Some(at) = self.front.accept_retry() {
                let left = at.saturating_duration_since(Instant::now());
                timeout = Some(timeout.map_or(left, |t| t.min(left)));
            }
            if let Some(due) = self.host.next_deadline() {
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
            let (front, mut back) = self.parts();
            for event in events.iter() {
                match event.token() {
                    LISTENER => front.accept(Door::Binary, &mut back),
                    SQS_LISTENER => front.accept(Door::Sqs, &mut back),
                    AZURE_LISTENER => front.accept(Door::Azure, &mut back),
                    WAKER => {}
                    Token(slot) => {
                        let closed = event.is_read_closed() || event.is_error();
                        front.event(slot, closed, &mut back);
                    }
                }
            }
            front.retry_accept(&mut back);
            busy = self.drain_mailbox();
            self.release_held();
            let (front, mut back) = self.parts();
            front.run_pending(&mut back);
            front.flush_dirty(&mut back);
            if self.shared.stopping.load(Ordering::Acquire) {
                let deadline = *stop_deadline.get_or_insert_with(|| {
                    let (front, mut back) = self.parts();
                    front.begin_stop(&mut back);
                    Instant::now() + Duration::from_secs(self.shared.config.shutdown_grace_secs)
                });
                // Every loop owns shards the others' connections may still
                // wait on: they stop together, once none has anything in
                // progress (or at the deadline).
                let mine = self.front.busy() || !self.post.is_empty();
                let loops = &self.shared.loops;
                loops.get(self.index).drained.store(!mine, Ordering::SeqCst);
                let all = loops.iter().all(|l| l.drained.load(Ordering::SeqCst));
                if all || Instant::now() >= deadline {
                    break;
                }
            } else if housekeeping {
                let (front, mut back) = self.parts();
                front.close_idle(&mut back);
            }
        }
        let (front, mut back) = self.parts();
        front.close_all(&mut back);
        self.post.flush();
        self.post.clear();
        self.shared.alive.fetch_sub(1, Ordering::AcqRel);
        // The others may be waiting for this loop's word to stop.
        for index in 0..self.shared.loops.endpoints() {
            self.shared.loops.wake(index);
        }
        debug!(index = self.index, "event loop stopped");
    }

    /// Waits for events or mail: polls without blocking for the spin
    /// window first when the last waits were all that short (`spin.rs`),
    /// then blocks (up to `timeout`) once it has said it is about to
    /// sleep.
    fn wait_for_work(&mut self, events: &mut Events, timeout: Option<Duration>) -> io::Result<()> {
        let me = self.shared.loops.get(self.index);
        let started = Instant::now();
        let window = timeout.map_or(self.spin.window(), |t| t.min(self.spin.window()));
        if !window.is_zero() {
            let until = started + window;
            loop {
                let polled = self.poll.poll(events, Some(Duration::ZERO));
                if polled.is_err() || !events.is_empty() || me.has_mail() {
                    self.spin.waited(started.elapsed());
                    return polled;
                }
                if Instant::now() >= until {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        // Says this loop is about to block, then looks once more for mail:
        // a loop sending to this one wakes it only when the flag is set, so
        // a busy loop is not woken at all.
        me.about_to_sleep();
        let timeout = if me.has_mail() {
            Some(Duration::ZERO)
        } else {
            timeout.map(|t| t.saturating_sub(started.elapsed()))
        };
        let polled = self.poll.poll(events, timeout);
        me.awake();
        self.spin.waited(started.elapsed());
        polled
    }

    /// Takes this turn's messages from the mailbox (at most
    /// [`MESSAGES_PER_TURN`]); answers whether more are waiting.
    fn drain_mailbox(&mut self) -> bool {
        let shared = self.shared.clone();
        let me = shared.loops.get(self.index);
        if me.take_committed() {
            let (front, mut back) = self.parts();
            back.host.committed(back.post);
            front.take_local(&mut back);
        }
        let mut took = false;
        for _ in 0..MESSAGES_PER_TURN {
            let Some(msg) = me.take() else {
                break;
            };
            took = true;
            let (front, mut back) = self.parts();
            match msg {
                Msg::Accepted(stream, peer, door) => front.adopt(stream, peer, door, &mut back),
                Msg::Moved(conn) => front.adopt_moved(conn, &mut back),
                Msg::EvictUnauthenticated => front.evict_unauthenticated(&mut back),
                Msg::AuthFailed(ip) => front.note_auth_failure(ip),
                Msg::Done { route, done } => front.on_done(route, done, &mut back),
                Msg::Pause(pause) => back.host.pause(pause),
                Msg::Export(ask) => back.host.export(ask),
                Msg::Scrape(ask) => back.host.scrape(ask, back.post),
                job => back.host.serve_msg(job, back.post),
            }
            front.take_local(&mut back);
        }
        if took {
            me.took();
        }
        me.has_mail()
    }

    /// Lets out the answers whose records are durable, and resumes the
    /// connections that waited for the log's backlog.
    fn release_held(&mut self) {
        let (front, mut back) = self.parts();
        if let Some((durable, holding)) = back.wait.take_holding() {
            for c in holding {
                if front.release_held(c, durable, &mut back) == Some(true) {
                    back.wait.holding(c);
                }
            }
        }
        for c in back.wait.take_resumable() {
            front.resume_after_log(c);
        }
        back.wait.settle();
    }
}

/// An optional listener's address as the start-up line shows it: the address, or `off`.
fn shown(addr: Option<SocketAddr>) -> String {
    addr.map_or_else(|| "off".to_string(), |a| a.to_string())
}
