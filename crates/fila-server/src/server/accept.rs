//! Taking connections in: accepting (retried after running out of
//! descriptors), refusing past max_connections with an error frame, making
//! room by closing the oldest unauthenticated connection, adopting a
//! stream into a loop.

use super::*;

impl Loop {
    pub(super) fn accept(&mut self) {
        loop {
            let Some(listener) = self.listener.as_ref() else {
                return;
            };
            match listener.accept() {
                Ok((stream, peer)) => {
                    if !self.shared.config.tokens.is_empty() {
                        if let Some(left) = self.guard.blocked(peer.ip(), Instant::now()) {
                            self.shared.metrics.refused.fetch_add(1, Ordering::Relaxed);
                            debug!(%peer, "refused: too many failed authentications");
                            refuse(
                                stream,
                                ErrorCode::UNAUTHENTICATED,
                                &format!(
                                    "unauthenticated: too many failed authentications from this address; \
                                     try again in {} s",
                                    left.as_secs().max(1)
                                ),
                            );
                            continue;
                        }
                    }
                    let open = self.shared.connections.load(Ordering::Acquire);
                    if open as usize >= self.shared.config.max_connections
                        && !self.evict_for_newcomer()
                    {
                        self.shared.metrics.refused.fetch_add(1, Ordering::Relaxed);
                        debug!(%peer, "refused: max_connections reached");
                        refuse(
                            stream,
                            ErrorCode::RESOURCE_EXHAUSTED,
                            &format!(
                                "resource_exhausted: the server is at its max_connections of {}",
                                self.shared.config.max_connections
                            ),
                        );
                        continue;
                    }
                    self.shared.connections.fetch_add(1, Ordering::AcqRel);
                    self.shared.metrics.accepted.fetch_add(1, Ordering::Relaxed);
                    self.shared
                        .metrics
                        .connections
                        .fetch_add(1, Ordering::Relaxed);
                    let target = self.next_peer % self.shared.loops.len();
                    self.next_peer += 1;
                    if target == self.index {
                        self.adopt(stream, peer);
                    } else {
                        self.send_to(target, Msg::Accepted(stream, peer));
                    }
                }
                Err(e) if would_block(&e) => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of descriptors (EMFILE, ENFILE) or a transient
                    // failure: the edge-triggered listener would not fire
                    // again for connections already waiting, so try again
                    // shortly, whatever else happens.
                    if self.accept_retry.is_none() {
                        warn!(error = %e, "accept failed; retrying in 50 ms");
                    }
                    self.accept_retry = Some(Instant::now() + ACCEPT_RETRY);
                    return;
                }
            }
        }
    }

    /// At max_connections with tokens configured: asks the loop with the
    /// most unauthenticated connections to close its oldest, so that the
    /// newcomer (who may hold a token) can come in; connections that never
    /// authenticate cannot keep clients that do out. `false` when there is
    /// none to evict.
    pub(super) fn evict_for_newcomer(&mut self) -> bool {
        if self.shared.config.tokens.is_empty() {
            return false;
        }
        let (loop_index, count) = self
            .shared
            .loops
            .iter()
            .map(|l| l.unauthenticated.load(Ordering::Acquire))
            .enumerate()
            .max_by_key(|(_, n)| *n)
            .unwrap_or((0, 0));
        let total: u64 = self
            .shared
            .loops
            .iter()
            .map(|l| l.unauthenticated.load(Ordering::Acquire))
            .sum();
        let pending = self.shared.evictions_pending.load(Ordering::Acquire);
        if count == 0 || total <= pending {
            return false;
        }
        self.shared.evictions_pending.fetch_add(1, Ordering::AcqRel);
        if loop_index == self.index {
            self.evict_unauthenticated();
        } else {
            self.send_to(loop_index, Msg::EvictUnauthenticated);
        }
        true
    }

    /// Closes this loop's oldest unauthenticated connection, telling it why.
    pub(super) fn evict_unauthenticated(&mut self) {
        self.shared.evictions_pending.fetch_sub(1, Ordering::AcqRel);
        let oldest = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(slot, c)| {
                c.as_ref()
                    .filter(|c| c.unauthenticated)
                    .map(|c| (slot, c.opened))
            })
            .min_by_key(|(_, opened)| *opened)
            .map(|(slot, _)| slot);
        let Some(slot) = oldest else {
            return;
        };
        self.respond(
            slot,
            proto::Opcode::Auth as u8,
            0,
            &error(
                ErrorCode::UNAUTHENTICATED,
                "unauthenticated: the server is at max_connections; connections that have not authenticated make room",
            )
            .into(),
        );
        let _ = self.write_out(slot);
        self.close(slot, "evicted: not authenticated at max_connections");
    }

    /// A free slot for a connection, its stream registered there with
    /// `interest`; `None` (the connection forgotten) when registering
    /// failed.
    pub(super) fn register(&mut self, stream: &mut TcpStream, interest: Interest) -> Option<usize> {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        if let Err(e) = self.poll.registry().register(stream, Token(slot), interest) {
            warn!(error = %e, "register failed");
            self.free.push(slot);
            self.forget_connection();
            return None;
        }
        self.generation += 1;
        Some(slot)
    }

    pub(super) fn adopt(&mut self, mut stream: TcpStream, peer: SocketAddr) {
        let _ = stream.set_nodelay(true);
        let Some(slot) = self.register(&mut stream, Interest::READABLE) else {
            return;
        };
        debug!(%peer, slot, "connection open");
        let now = Instant::now();
        let unauthenticated = !self.shared.config.tokens.is_empty();
        if unauthenticated {
            self.shared
                .loops
                .get(self.index)
                .unauthenticated
                .fetch_add(1, Ordering::AcqRel);
        }
        self.conns[slot] = Some(Conn {
            stream,
            peer,
            generation: self.generation,
            input: BytesMut::new(),
            output: BytesMut::new(),
            held: BytesMut::new(),
            holds: VecDeque::new(),
            in_holding: false,
            log_paused: false,
            token: None,
            unauthenticated,
            auth_failures: 0,
            parked: HashMap::new(),
            next_park: 0,
            reserved: 0,
            in_flight: 0,
            receives_out: 0,
            owners_paused: false,
            streak: (usize::MAX, 0),
            moving_to: None,
            barrier: None,
            opened: now,
            last_active: now,
            read_paused: false,
            queued: false,
            closing: false,
            peer_closed: false,
            writable_interest: false,
        });
        // Data may have arrived before registration.
        self.ready(slot);
    }

    /// Counts a failed authentication from `ip` (the accepting loop's
    /// table); says so once when it blocks the address.
    pub(super) fn note_auth_failure(&mut self, ip: std::net::IpAddr) {
        let now = Instant::now();
        let was = self.guard.blocked(ip, now).is_some();
        if let Some(block) = self.guard.failed(ip, now) {
            if !was {
                warn!(
                    peer = %ip,
                    block_secs = block.as_secs(),
                    "too many failed authentications: new connections from this address are refused for a while"
                );
            }
        }
    }

    pub(super) fn forget_connection(&self) {
        self.shared.connections.fetch_sub(1, Ordering::AcqRel);
        self.shared
            .metrics
            .connections
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// The soft limit of open files, from /proc/self/limits (Linux).
pub(super) fn open_files_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// Answers a connection the server will not take with one error frame
/// (best effort: a fresh socket's send buffer takes it whole), then closes.
pub(super) fn refuse(mut stream: TcpStream, code: ErrorCode, message: &str) {
    let mut out = BytesMut::new();
    error(code, message).encode(proto::Opcode::Hello as u8, 0, &mut out);
    let _ = stream.write(&out);
}
