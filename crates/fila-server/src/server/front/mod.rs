//! The front end of a loop: its connections, frames in and answers out.
//!
//! The front end owns the listener (loop 0's), the connections (a slab
//! indexed by mio `Token`), their turns, the output room, authentication,
//! and connections moving between loops. The other parts of a loop name a
//! connection by [`ConnRef`] and reach it only through the methods here.
//!
//! Files: `conn.rs` (a connection and its state machine), `turn.rs`
//! (reading, answering and writing within a turn's budgets), `request.rs`
//! (hello, auth, permissions; a request handed to the shard host),
//! `answers.rs` (what comes back from the shards' owners), `accept.rs`
//! (taking connections in), `moving.rs` (connections moving to the loop
//! their requests go to), `http.rs` (the SQS API's connections: HTTP
//! requests framed, their operations driven).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fila_core::WaitId;
use fila_proto as proto;
use mio::net::TcpListener;
use mio::{Interest, Registry};
use tracing::debug;

use super::host::Route;
use super::{Back, Shared, AZURE_LISTENER, LISTENER, SQS_LISTENER};
use crate::limits::READ_CHUNK;

mod accept;
mod answers;
mod conn;
mod http;
mod moving;
mod request;
mod turn;

pub(in crate::server) use accept::open_files_limit;
use conn::{Auth, Phase};
pub(in crate::server) use conn::{Conn, ConnRef};
pub use moving::MOVE_AFTER;

/// How long the listener waits before accepting again after the process
/// ran out of file descriptors.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// Which listener a connection came in by: what it speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::server) enum Door {
    /// The binary protocol.
    Binary,
    /// The SQS API (HTTP/1.1).
    Sqs,
    /// The Azure Queue Storage API (HTTP/1.1).
    Azure,
}

/// Loop 0's listeners (the other loops have none).
#[derive(Default)]
pub(in crate::server) struct Listeners {
    pub(in crate::server) binary: Option<TcpListener>,
    pub(in crate::server) sqs: Option<TcpListener>,
    pub(in crate::server) azure: Option<TcpListener>,
}

/// A loop's connections (see the module docs).
pub(in crate::server) struct FrontEnd {
    index: usize,
    shared: Arc<Shared>,
    registry: Registry,
    listener: Option<TcpListener>,
    /// The SQS API's listener (loop 0's, when it is configured).
    sqs_listener: Option<TcpListener>,
    /// The Azure Queue API's listener (loop 0's, when it is configured).
    azure_listener: Option<TcpListener>,
    /// Accepting failed (out of descriptors): retry at this time.
    accept_retry: Option<Instant>,
    /// The next loop an accepted connection goes to.
    next_peer: usize,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    /// Connections whose turn ended with work left, round-robin.
    pending: VecDeque<usize>,
    generation: u64,
    /// One read buffer per loop; bytes read are copied into the
    /// connection's input, which frames are then split from without copies.
    scratch: Vec<u8>,
    /// The most answer bytes one of this loop's connections has held.
    high_water: usize,
    /// Connections that got answers outside their own turn, to write at
    /// the end of this one.
    dirty: Vec<usize>,
    /// Failed authentications per peer address (the accepting loop's:
    /// every loop reports its failures there, and blocked peers are
    /// refused when they connect).
    guard: crate::guard::AuthGuard,
    /// The tokens and TLS configuration of the last reload seen (checked
    /// at each connection's turn).
    access: Arc<crate::live::Access>,
    /// Buffers the loop's SQS requests and answers are made in, kept
    /// from one to the next (`http.rs`): the body being framed, an
    /// answer's body, an answer's head.
    spare_body: Vec<u8>,
    http_body: Vec<u8>,
    http_out: Vec<u8>,
}

impl FrontEnd {
    /// Loop `index`'s front end; loop 0's takes the listener.
    pub(in crate::server) fn new(
        index: usize,
        shared: Arc<Shared>,
        registry: Registry,
        listeners: Listeners,
    ) -> std::io::Result<FrontEnd> {
        let Listeners {
            binary: mut listener,
            sqs: mut sqs_listener,
            azure: mut azure_listener,
        } = listeners;
        if let Some(l) = listener.as_mut() {
            registry.register(l, LISTENER, Interest::READABLE)?;
        }
        if let Some(l) = sqs_listener.as_mut() {
            registry.register(l, SQS_LISTENER, Interest::READABLE)?;
        }
        if let Some(l) = azure_listener.as_mut() {
            registry.register(l, AZURE_LISTENER, Interest::READABLE)?;
        }
        Ok(FrontEnd {
            index,
            access: shared.live.load(),
            shared,
            registry,
            listener,
            sqs_listener,
            azure_listener,
            accept_retry: None,
            next_peer: 0,
            conns: Vec::new(),
            free: Vec::new(),
            pending: VecDeque::new(),
            generation: 0,
            scratch: vec![0; READ_CHUNK],
            spare_body: Vec::new(),
            http_body: Vec::new(),
            http_out: Vec::new(),
            high_water: 0,
            dirty: Vec::new(),
            guard: crate::guard::AuthGuard::with_capacity(if index == 0 {
                crate::guard::PEERS_MAX
            } else {
                1
            }),
        })
    }

    /// The connection `c` names, if it is still there.
    fn get(&mut self, c: ConnRef) -> Option<&mut Conn> {
        self.conns
            .get_mut(c.slot)
            .and_then(|x| x.as_mut())
            .filter(|x| x.generation == c.generation)
    }

    /// Whether connections had work left at the end of their turns (the
    /// loop then polls without blocking).
    pub(in crate::server) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// When accepting should be tried again (after running out of
    /// descriptors).
    pub(in crate::server) fn accept_retry(&self) -> Option<Instant> {
        self.accept_retry
    }

    /// Whether any connection has anything in progress (answers to write,
    /// requests away, receives parked).
    pub(in crate::server) fn busy(&self) -> bool {
        self.conns.iter().flatten().any(|c| c.busy())
    }

    /// Takes the tokens and TLS configuration of a reload that happened
    /// since the last look (one atomic load when none did).
    fn refresh_access(&mut self) {
        if self.shared.live.generation() != self.access.generation {
            self.access = self.shared.live.load();
        }
    }

    /// A socket event for connection `slot`.
    pub(in crate::server) fn event(&mut self, slot: usize, read_closed: bool, back: &mut Back<'_>) {
        if read_closed {
            // Even while it is not being read (no output room): nothing
            // more is leased to it.
            self.peer_closed(slot, back);
        }
        self.ready(slot, back);
    }

    /// One more turn for each connection that had work left, in order.
    pub(in crate::server) fn run_pending(&mut self, back: &mut Back<'_>) {
        for _ in 0..self.pending.len() {
            let Some(slot) = self.pending.pop_front() else {
                return;
            };
            if let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) {
                conn.queued = false;
                self.ready(slot, back);
            }
        }
    }

    /// Writes out what connections were answered outside their turns.
    pub(in crate::server) fn flush_dirty(&mut self, back: &mut Back<'_>) {
        let mut dirty = std::mem::take(&mut self.dirty);
        for &slot in &dirty {
            self.flush(slot, back);
        }
        // The list's room is kept for the next turn.
        dirty.clear();
        self.dirty = dirty;
    }

    /// Stops accepting; answers parked receives with what they have
    /// (nothing) so every request in progress gets its answer.
    pub(in crate::server) fn begin_stop(&mut self, back: &mut Back<'_>) {
        for mut listener in [
            self.listener.take(),
            self.sqs_listener.take(),
            self.azure_listener.take(),
        ]
        .into_iter()
        .flatten()
        {
            let _ = self.registry.deregister(&mut listener);
        }
        for slot in 0..self.conns.len() {
            self.end_parked(slot, back);
            self.flush(slot, back);
            self.close_between_requests(slot, back);
        }
    }

    /// Closes every connection (the loop is stopping).
    pub(in crate::server) fn close_all(&mut self, back: &mut Back<'_>) {
        for slot in 0..self.conns.len() {
            self.close(slot, "server stopped", back);
        }
    }

    /// Its client closed its side: its parked receives end (once).
    fn peer_closed(&mut self, slot: usize, back: &mut Back<'_>) {
        let Some(Some(c)) = self.conns.get_mut(slot) else {
            return;
        };
        if c.peer_gone() {
            return;
        }
        c.phase = match c.phase {
            Phase::Closing { .. } => Phase::Closing { peer_gone: true },
            // A move is pointless now.
            Phase::Open | Phase::Moving { .. } | Phase::Draining => Phase::Draining,
        };
        self.end_parked(slot, back);
    }

    /// Ends a connection's parked receives now, each answered with no
    /// messages: the server is stopping, or its client closed its side
    /// (it sends no more, and may be gone: nothing more is leased to it).
    fn end_parked(&mut self, slot: usize, back: &mut Back<'_>) {
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
                conn: ConnRef { slot, generation },
                request_id,
                opcode: proto::Opcode::Receive as u8,
                started: Instant::now(),
                room: 0,
                park,
                fields: proto::Fields::ALL,
                shard: wait.shard(),
                forward: false,
            };
            back.host.cancel_wait(wait, Some(route), back.post);
        }
        // (A cluster node.) Those parked on a partition's home loop end
        // there, answered with no messages.
        let part_parked: Vec<(usize, WaitId, u64)> = match self.conns.get(slot) {
            Some(Some(c)) => c
                .part_parked
                .values()
                .map(|&(part, wait)| (part, wait, c.generation))
                .collect(),
            _ => Vec::new(),
        };
        for (part, wait, generation) in part_parked {
            let at = (self.index, ConnRef { slot, generation });
            back.host.cancel_part(part, wait, at, true, back.post);
        }
        self.take_local(back);
    }

    /// Closes connections idle past `idle_timeout_secs`, and those not
    /// authenticated within `auth_timeout_secs`.
    pub(in crate::server) fn close_idle(&mut self, back: &mut Back<'_>) {
        let shared = self.shared.clone();
        let config = &shared.config;
        let idle = Duration::from_secs(config.idle_timeout_secs);
        let auth = Duration::from_secs(config.auth_timeout_secs);
        let handshake = Duration::from_secs(config.tls_handshake_timeout_secs);
        let now = Instant::now();
        for slot in 0..self.conns.len() {
            let why = match &self.conns[slot] {
                Some(c) if c.stream.handshaking() && now.duration_since(c.opened) >= handshake => {
                    "TLS handshake not finished in time"
                }
                Some(c) if c.http.is_some() => {
                    match c.http.as_ref().and_then(|h| h.overdue(now, c.last_active)) {
                        Some(why) => why,
                        None => continue,
                    }
                }
                Some(c) if c.unauthenticated() && now.duration_since(c.opened) >= auth => {
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
            if self.conns[slot]
                .as_ref()
                .is_some_and(|c| c.stream.handshaking())
            {
                self.shared
                    .metrics
                    .tls_errors
                    .fetch_add(1, Ordering::Relaxed);
            }
            self.close(slot, why, back);
        }
    }

    fn close(&mut self, slot: usize, why: &str, back: &mut Back<'_>) {
        let Some(mut conn) = self.conns[slot].take() else {
            return;
        };
        // Every receive it parked, whatever its request id.
        for (_, p) in conn.parked.drain() {
            back.host.cancel_wait(p.wait, None, back.post);
        }
        let at = (
            self.index,
            ConnRef {
                slot,
                generation: conn.generation,
            },
        );
        for (_, (part, wait)) in conn.part_parked.drain() {
            back.host.cancel_part(part, wait, at, false, back.post);
        }
        if conn.unauthenticated() {
            self.count_unauthenticated(-1);
        }
        conn.stream.close_notify();
        let _ = self.registry.deregister(conn.stream.socket());
        debug!(peer = %conn.peer, why, "connection closed");
        self.free.push(slot);
        self.forget_connection();
    }

    /// Moves this loop's count of unauthenticated connections by `by`.
    fn count_unauthenticated(&self, by: i64) {
        let n = &self.shared.loops.get(self.index).unauthenticated;
        if by >= 0 {
            n.fetch_add(by as u64, Ordering::AcqRel);
        } else {
            n.fetch_sub(by.unsigned_abs(), Ordering::AcqRel);
        }
    }

    /// Answers the shard host produced for this loop's connections
    /// (requests run here, late answers of receives parked here, cancels):
    /// each is handled now, in order; handling one may produce more.
    pub(in crate::server) fn take_local(&mut self, back: &mut Back<'_>) {
        while let Some((route, done)) = back.host.next_local() {
            self.on_done(route, done, back);
        }
    }

    /// Moves held answers whose marks are durable up to `durable` to the
    /// output and writes them; answers whether `c` still holds some
    /// (`None`: it is gone). For the log wait.
    pub(in crate::server) fn release_held(
        &mut self,
        c: ConnRef,
        durable: u64,
        back: &mut Back<'_>,
    ) -> Option<bool> {
        let conn = self.get(c)?;
        let released = conn.release(durable);
        let still = !conn.holds.is_empty();
        conn.listed_holding = still;
        if released {
            self.flush(c.slot, back);
        }
        self.get(c).map(|_| still)
    }

    /// A connection paused for the log's backlog may go on. For the log
    /// wait.
    pub(in crate::server) fn resume_after_log(&mut self, c: ConnRef) {
        if let Some(conn) = self.get(c) {
            conn.listed_paused = false;
            self.requeue(c.slot);
        }
    }

    /// Puts a connection at the back of the round-robin queue of work left.
    fn requeue(&mut self, slot: usize) {
        if let Some(conn) = self.conns[slot].as_mut() {
            if !conn.queued {
                conn.queued = true;
                self.pending.push_back(slot);
            }
        }
    }

    /// Accepts again if the retry time has come.
    pub(in crate::server) fn retry_accept(&mut self, back: &mut Back<'_>) {
        if self.accept_retry.is_some_and(|at| Instant::now() >= at) {
            self.accept_retry = None;
            self.accept(Door::Binary, back);
            self.accept(Door::Sqs, back);
            self.accept(Door::Azure, back);
        }
    }

    /// The token of a new connection's state: pending when tokens are
    /// configured.
    fn new_auth(&self) -> Auth {
        if self.access.tokens.is_empty() {
            Auth::NotNeeded
        } else {
            Auth::Pending
        }
    }
}
