//! The mio front end: event loops, connections, frames in and answers out.
//!
//! Loop 0 owns the listener and deals accepted connections round-robin to
//! every loop (itself included) through each loop's inbox and `Waker`. A
//! loop keeps its connections in a slab indexed by mio `Token`, reads each
//! until `WouldBlock`, answers every whole frame into the connection's
//! output buffer, and writes the buffer once per wake-up. A parked receive
//! carries a `Notify` that posts the late answer to the owning loop's inbox
//! and wakes it. A connection whose output passes `max_output_bytes` is not
//! read again until it drains: a client that stops reading is throttled.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use fila_core::{Engine, Message, Notify, WaitId};
use fila_proto::{self as proto, split_frame, ErrorCode, Request, Response};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use tracing::{debug, info, warn};

use crate::auth::TokenId;
use crate::config::Config;
use crate::dispatch::{self, error, Caller, Outcome};
use crate::metrics::{Metrics, MetricsEndpoint};

const LISTENER: Token = Token(usize::MAX - 1);
const WAKER: Token = Token(usize::MAX - 2);
const READ_CHUNK: usize = 64 << 10;

/// Messages to a loop.
enum Inbox {
    Accepted(TcpStream, SocketAddr),
    Answer {
        slot: usize,
        generation: u64,
        request_id: u64,
        result: Result<Vec<Message>, fila_core::Error>,
    },
}

struct Shared {
    config: Config,
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    stopping: AtomicBool,
    connections: AtomicU64,
}

struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    generation: u64,
    input: BytesMut,
    output: BytesMut,
    token: Option<TokenId>,
    parked: Vec<(WaitId, u64)>,
    last_active: Instant,
    /// Stopped reading: output over its cap, or a fatal frame error.
    read_paused: bool,
    /// Close once the output is written.
    closing: bool,
    writable_interest: bool,
}

struct Loop {
    index: usize,
    poll: Poll,
    listener: Option<TcpListener>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    generation: u64,
    inbox: Receiver<Inbox>,
    me: (Sender<Inbox>, Arc<Waker>),
    peers: Vec<(Sender<Inbox>, Arc<Waker>)>,
    next_peer: usize,
    shared: Arc<Shared>,
    /// One read buffer per loop; bytes read are copied into the
    /// connection's input, which frames are then split from without copies.
    scratch: Vec<u8>,
}

/// A running server.
pub struct Server {
    local_addr: SocketAddr,
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
    /// Binds, starts the loops, the ticker and the metrics endpoint.
    pub fn start(config: Config) -> io::Result<Server> {
        let engine = Arc::new(Engine::new(config.shards, Arc::new(fila_core::SystemClock)));
        let metrics = Arc::new(Metrics::default());
        let listener = TcpListener::bind(config.listen)?;
        let local_addr = listener.local_addr()?;
        let metrics_endpoint = match config.metrics_listen {
            Some(addr) => Some(MetricsEndpoint::start(
                addr,
                metrics.clone(),
                engine.clone(),
            )?),
            None => None,
        };
        let shared = Arc::new(Shared {
            config: config.clone(),
            engine,
            metrics,
            stopping: AtomicBool::new(false),
            connections: AtomicU64::new(0),
        });
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
        let mut listener = Some(listener);
        let mut loops = Vec::new();
        for (index, (poll, inbox)) in polls.into_iter().zip(inboxes).enumerate() {
            let mut l = Loop {
                index,
                poll,
                listener: if index == 0 { listener.take() } else { None },
                conns: Vec::new(),
                free: Vec::new(),
                generation: 0,
                inbox,
                me: mes[index].clone(),
                peers: mes.clone(),
                next_peer: 0,
                shared: shared.clone(),
                scratch: vec![0; READ_CHUNK],
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

    /// Waits until the server has stopped (after a [`StopHandle::stop`]).
    pub fn wait(mut self) {
        self.join_all();
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
        loop {
            let timeout = if stop_deadline.is_some() {
                Some(Duration::from_millis(20))
            } else if self.shared.config.idle_timeout_secs > 0 {
                Some(Duration::from_secs(1))
            } else {
                None
            };
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
            self.drain_inbox();
            if self.shared.stopping.load(Ordering::Acquire) {
                let deadline = *stop_deadline.get_or_insert_with(|| {
                    self.begin_stop();
                    Instant::now() + Duration::from_secs(self.shared.config.shutdown_grace_secs)
                });
                let pending = self.conns.iter().flatten().any(|c| !c.output.is_empty());
                if !pending || Instant::now() >= deadline {
                    break;
                }
            } else if self.shared.config.idle_timeout_secs > 0 {
                self.close_idle();
            }
        }
        for slot in 0..self.conns.len() {
            self.close(slot, "server stopped");
        }
        debug!(index = self.index, "event loop stopped");
    }

    /// Stops accepting; answers parked receives with what they have
    /// (nothing) so every request in progress gets its answer.
    fn begin_stop(&mut self) {
        if let Some(mut listener) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut listener);
        }
        for slot in 0..self.conns.len() {
            let parked = match self.conns[slot].as_mut() {
                Some(c) => std::mem::take(&mut c.parked),
                None => continue,
            };
            for (id, request_id) in parked {
                if self.shared.engine.cancel_wait(id) {
                    self.shared.metrics.parked.fetch_sub(1, Ordering::Relaxed);
                    self.respond(
                        slot,
                        proto::Opcode::Receive as u8,
                        request_id,
                        &Response::Messages(Vec::new()),
                    );
                }
            }
            self.flush(slot);
        }
    }

    fn accept(&mut self) {
        loop {
            let Some(listener) = self.listener.as_ref() else {
                return;
            };
            match listener.accept() {
                Ok((stream, peer)) => {
                    let open = self.shared.connections.load(Ordering::Acquire);
                    if open as usize >= self.shared.config.max_connections {
                        self.shared.metrics.refused.fetch_add(1, Ordering::Relaxed);
                        debug!(%peer, "refused: max_connections reached");
                        drop(stream);
                        continue;
                    }
                    self.shared.connections.fetch_add(1, Ordering::AcqRel);
                    self.shared.metrics.accepted.fetch_add(1, Ordering::Relaxed);
                    self.shared
                        .metrics
                        .connections
                        .fetch_add(1, Ordering::Relaxed);
                    let target = self.next_peer % self.peers.len();
                    self.next_peer += 1;
                    if target == self.index {
                        self.adopt(stream, peer);
                    } else {
                        let (tx, waker) = &self.peers[target];
                        if tx.send(Inbox::Accepted(stream, peer)).is_ok() {
                            let _ = waker.wake();
                        }
                    }
                }
                Err(e) if would_block(&e) => return,
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    return;
                }
            }
        }
    }

    fn adopt(&mut self, mut stream: TcpStream, peer: SocketAddr) {
        let _ = stream.set_nodelay(true);
        let slot = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        if let Err(e) = self
            .poll
            .registry()
            .register(&mut stream, Token(slot), Interest::READABLE)
        {
            warn!(error = %e, "register failed");
            self.free.push(slot);
            self.forget_connection();
            return;
        }
        self.generation += 1;
        debug!(%peer, slot, "connection open");
        self.conns[slot] = Some(Conn {
            stream,
            peer,
            generation: self.generation,
            input: BytesMut::new(),
            output: BytesMut::new(),
            token: None,
            parked: Vec::new(),
            last_active: Instant::now(),
            read_paused: false,
            closing: false,
            writable_interest: false,
        });
        // Data may have arrived before registration.
        self.ready(slot);
    }

    fn forget_connection(&self) {
        self.shared.connections.fetch_sub(1, Ordering::AcqRel);
        self.shared
            .metrics
            .connections
            .fetch_sub(1, Ordering::Relaxed);
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
                Inbox::Answer {
                    slot,
                    generation,
                    request_id,
                    result,
                } => {
                    let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
                        continue;
                    };
                    if conn.generation != generation {
                        continue;
                    }
                    conn.parked.retain(|(_, id)| *id != request_id);
                    self.shared.metrics.parked.fetch_sub(1, Ordering::Relaxed);
                    let response = match result {
                        Ok(ms) => dispatch::messages_of(ms),
                        Err(e) => Response::Error(dispatch::wire_error(&e)),
                    };
                    self.respond(slot, proto::Opcode::Receive as u8, request_id, &response);
                    self.flush(slot);
                }
            }
        }
    }

    fn ready(&mut self, slot: usize) {
        if self.conns.get(slot).is_none_or(|c| c.is_none()) {
            return;
        }
        self.flush(slot);
        self.read(slot);
        self.flush(slot);
    }

    /// Reads until `WouldBlock` (or the output cap), answering whole frames.
    fn read(&mut self, slot: usize) {
        let max_frame = self.shared.config.max_frame_bytes;
        let max_output = self.shared.config.max_output_bytes;
        loop {
            self.process(slot);
            let Some(conn) = self.conns[slot].as_mut() else {
                return;
            };
            if conn.closing {
                return;
            }
            if conn.output.len() >= max_output {
                conn.read_paused = true;
                return;
            }
            conn.read_paused = false;
            if conn.input.len() > max_frame + proto::LEN_PREFIX {
                // Whole frames are taken off as they complete, so this
                // cannot happen; stop rather than grow.
                conn.read_paused = true;
                return;
            }
            match conn.stream.read(&mut self.scratch) {
                Ok(0) => {
                    // The peer is done sending; answers already due still
                    // go out before the connection closes.
                    if conn.output.is_empty() {
                        self.close(slot, "peer closed");
                    } else {
                        conn.closing = true;
                    }
                    return;
                }
                Ok(n) => {
                    conn.input.extend_from_slice(&self.scratch[..n]);
                    conn.last_active = Instant::now();
                }
                Err(e) if would_block(&e) => {
                    self.process(slot);
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.close(slot, &format!("read error: {e}"));
                    return;
                }
            }
        }
    }

    /// Answers every whole frame in the input, until the output cap.
    fn process(&mut self, slot: usize) {
        let max_frame = self.shared.config.max_frame_bytes;
        let max_output = self.shared.config.max_output_bytes;
        loop {
            let Some(conn) = self.conns[slot].as_mut() else {
                return;
            };
            if conn.closing || conn.output.len() >= max_output {
                return;
            }
            let (header, body) = match split_frame(&mut conn.input, max_frame) {
                Ok(Some(frame)) => frame,
                Ok(None) => return,
                Err(e) => {
                    // The stream cannot be resynchronised: say why and close.
                    self.shared
                        .metrics
                        .bad_frames
                        .fetch_add(1, Ordering::Relaxed);
                    debug!(peer = %conn.peer, error = %e, "broken frame");
                    let opcode = conn.input.get(5).copied().unwrap_or(0);
                    conn.closing = true;
                    self.respond(slot, opcode, 0, &error(e.code(), e.to_string()));
                    return;
                }
            };
            let started = Instant::now();
            let opcode = header.opcode;
            let response = match Request::decode(&header, body) {
                Ok(req) => self.request(slot, header.request_id, req),
                Err(e) => {
                    self.shared
                        .metrics
                        .bad_frames
                        .fetch_add(1, Ordering::Relaxed);
                    if !e.is_recoverable() {
                        self.conns[slot].as_mut().expect("open").closing = true;
                    }
                    Some(error(e.code(), e.to_string()))
                }
            };
            if let Some(response) = response {
                if let Ok(op) = proto::Opcode::from_u8(opcode) {
                    self.shared.metrics.record(
                        op,
                        started.elapsed(),
                        matches!(response, Response::Error(_)),
                    );
                }
                self.respond(slot, opcode, header.request_id, &response);
            } else if let Ok(op) = proto::Opcode::from_u8(opcode) {
                self.shared.metrics.record(op, started.elapsed(), false);
            }
        }
    }

    /// Handles one decoded request; `None` when a receive parked.
    fn request(&mut self, slot: usize, request_id: u64, req: Request) -> Option<Response> {
        let shared = self.shared.clone();
        let conn = self.conns[slot].as_mut().expect("open");
        if shared.stopping.load(Ordering::Acquire) {
            return Some(error(
                ErrorCode::SHUTTING_DOWN,
                "shutting_down: the server is stopping",
            ));
        }
        let tokens = &shared.config.tokens;
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
                return Some(match tokens.find(token) {
                    Some(id) => {
                        conn.token = Some(id);
                        Response::Ok
                    }
                    None => {
                        warn!(peer = %conn.peer, "unknown token presented");
                        error(ErrorCode::UNAUTHENTICATED, "unauthenticated: unknown token")
                    }
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
        let (tx, waker) = self.me.clone();
        let notify = move || -> Notify {
            Box::new(move |result| {
                if tx
                    .send(Inbox::Answer {
                        slot,
                        generation,
                        request_id,
                        result,
                    })
                    .is_ok()
                {
                    let _ = waker.wake();
                }
            })
        };
        match dispatch::handle(&shared.engine, &shared.metrics, &caller, req, notify) {
            Outcome::Answer(r) => Some(r),
            Outcome::Parked(id) => {
                shared.metrics.parked.fetch_add(1, Ordering::Relaxed);
                self.conns[slot]
                    .as_mut()
                    .expect("open")
                    .parked
                    .push((id, request_id));
                None
            }
        }
    }

    fn respond(&mut self, slot: usize, opcode: u8, request_id: u64, response: &Response) {
        if let Some(conn) = self.conns[slot].as_mut() {
            response.encode(opcode, request_id, &mut conn.output);
        }
    }

    /// Writes the output until `WouldBlock`; watches for writability while
    /// some is left; resumes reading a throttled connection once drained.
    fn flush(&mut self, slot: usize) {
        let max_output = self.shared.config.max_output_bytes;
        loop {
            if !self.write_out(slot) {
                return;
            }
            let Some(conn) = self.conns[slot].as_mut() else {
                return;
            };
            // Edge-triggered: a throttled connection's pending bytes raise no
            // new event, so resume reading here once the output has room
            // again, and write what that produced.
            if conn.read_paused && conn.output.len() < max_output / 2 && !conn.closing {
                conn.read_paused = false;
                self.read(slot);
                continue;
            }
            break;
        }
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        if conn.output.is_empty() && conn.closing {
            self.close(slot, "closed once its answers were written");
            return;
        }
        let want_write = !conn.output.is_empty();
        if want_write != conn.writable_interest {
            let interest = if want_write {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            let _ = self
                .poll
                .registry()
                .reregister(&mut conn.stream, Token(slot), interest);
            conn.writable_interest = want_write;
        }
    }

    /// Writes until the output is empty or `WouldBlock`; `false` when the
    /// connection failed and was closed.
    fn write_out(&mut self, slot: usize) -> bool {
        let Some(conn) = self.conns[slot].as_mut() else {
            return false;
        };
        while !conn.output.is_empty() {
            match conn.stream.write(&conn.output) {
                Ok(0) => {
                    self.close(slot, "write returned 0");
                    return false;
                }
                Ok(n) => {
                    let _ = conn.output.split_to(n);
                }
                Err(e) if would_block(&e) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.close(slot, &format!("write error: {e}"));
                    return false;
                }
            }
        }
        true
    }

    fn close_idle(&mut self) {
        let idle = Duration::from_secs(self.shared.config.idle_timeout_secs);
        let now = Instant::now();
        for slot in 0..self.conns.len() {
            let expired = matches!(&self.conns[slot], Some(c) if c.parked.is_empty() && now.duration_since(c.last_active) >= idle);
            if expired {
                self.close(slot, "idle timeout");
            }
        }
    }

    fn close(&mut self, slot: usize, why: &str) {
        let Some(mut conn) = self.conns[slot].take() else {
            return;
        };
        for (id, _) in conn.parked.drain(..) {
            if self.shared.engine.cancel_wait(id) {
                self.shared.metrics.parked.fetch_sub(1, Ordering::Relaxed);
            }
        }
        let _ = self.poll.registry().deregister(&mut conn.stream);
        debug!(peer = %conn.peer, why, "connection closed");
        self.free.push(slot);
        self.forget_connection();
    }
}
