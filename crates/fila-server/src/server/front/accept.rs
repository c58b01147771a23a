//! Taking connections in: accepting (retried after running out of
//! descriptors), refusing past max_connections with an error frame, making
//! room by closing the oldest unauthenticated connection, adopting a
//! stream into a loop.

use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::BytesMut;
use fila_proto::{self as proto, ErrorCode};
use mio::net::TcpStream;
use mio::{Interest, Token};
use tracing::{debug, warn};

use super::conn::{Auth, Conn};
use super::http::HttpConn;
use super::{Door, FrontEnd, ACCEPT_RETRY};
use crate::dispatch::error;
use crate::server::mailbox::Msg;
use crate::server::Back;
use crate::tls::Stream;

impl FrontEnd {
    /// Accepts from the listener of `door` until it would block.
    pub(in crate::server) fn accept(&mut self, door: Door, back: &mut Back<'_>) {
        loop {
            let listener = match door {
                Door::Binary => self.listener.as_ref(),
                Door::Sqs => self.sqs_listener.as_ref(),
                Door::Azure => self.azure_listener.as_ref(),
            };
            let Some(listener) = listener else {
                return;
            };
            match listener.accept() {
                Ok((stream, peer)) => self.take_in(stream, peer, door, back),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
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

    /// One accepted stream: refused (a blocked address, max_connections),
    /// or dealt to the next loop.
    fn take_in(&mut self, stream: TcpStream, peer: SocketAddr, door: Door, back: &mut Back<'_>) {
        self.refresh_access();
        let tls = self.access.tls.is_some();
        if !self.shared.config.tokens.is_empty() {
            if let Some(left) = self.guard.blocked(peer.ip(), Instant::now()) {
                self.shared.metrics.refused.fetch_add(1, Ordering::Relaxed);
                debug!(%peer, "refused: too many failed authentications");
                refuse(
                    stream,
                    tls,
                    door,
                    ErrorCode::UNAUTHENTICATED,
                    &format!(
                        "unauthenticated: too many failed authentications from this address; \
                         try again in {} s",
                        left.as_secs().max(1)
                    ),
                );
                return;
            }
        }
        let open = self.shared.connections.load(Ordering::Acquire);
        if open as usize >= self.shared.config.max_connections && !self.evict_for_newcomer(back) {
            self.shared.metrics.refused.fetch_add(1, Ordering::Relaxed);
            debug!(%peer, "refused: max_connections reached");
            refuse(
                stream,
                tls,
                door,
                ErrorCode::RESOURCE_EXHAUSTED,
                &format!(
                    "resource_exhausted: the server is at its max_connections of {}",
                    self.shared.config.max_connections
                ),
            );
            return;
        }
        self.shared.connections.fetch_add(1, Ordering::AcqRel);
        self.shared.metrics.accepted.fetch_add(1, Ordering::Relaxed);
        self.shared
            .metrics
            .connections
            .fetch_add(1, Ordering::Relaxed);
        let target = self.next_peer % self.shared.loops.owners();
        self.next_peer += 1;
        if target == self.index {
            self.adopt(stream, peer, door, back);
        } else {
            back.post.send(target, Msg::Accepted(stream, peer, door));
        }
    }

    /// At max_connections with tokens configured: asks the loop with the
    /// most unauthenticated connections to close its oldest, so that the
    /// newcomer (who may hold a token) can come in; connections that never
    /// authenticate cannot keep clients that do out. `false` when there is
    /// none to evict.
    fn evict_for_newcomer(&mut self, back: &mut Back<'_>) -> bool {
        if self.shared.config.tokens.is_empty() {
            return false;
        }
        let loops = &self.shared.loops;
        let (loop_index, count) = loops
            .iter()
            .map(|l| l.unauthenticated.load(Ordering::Acquire))
            .enumerate()
            .max_by_key(|(_, n)| *n)
            .unwrap_or((0, 0));
        let total: u64 = loops
            .iter()
            .map(|l| l.unauthenticated.load(Ordering::Acquire))
            .sum();
        let pending = self.shared.evictions_pending.load(Ordering::Acquire);
        if count == 0 || total <= pending {
            return false;
        }
        self.shared.evictions_pending.fetch_add(1, Ordering::AcqRel);
        if loop_index == self.index {
            self.evict_unauthenticated(back);
        } else {
            back.post.send(loop_index, Msg::EvictUnauthenticated);
        }
        true
    }

    /// Closes this loop's oldest unauthenticated connection, telling it why.
    pub(in crate::server) fn evict_unauthenticated(&mut self, back: &mut Back<'_>) {
        self.shared.evictions_pending.fetch_sub(1, Ordering::AcqRel);
        let oldest = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(slot, c)| {
                c.as_ref()
                    .filter(|c| c.unauthenticated())
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
            back,
        );
        let _ = self.write_out(slot, back);
        self.close(slot, "evicted: not authenticated at max_connections", back);
    }

    /// A free slot for a connection, its stream registered there with
    /// `interest`; `None` (the connection forgotten) when registering
    /// failed.
    pub(super) fn register(&mut self, stream: &mut TcpStream, interest: Interest) -> Option<usize> {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        if let Err(e) = self.registry.register(stream, Token(slot), interest) {
            warn!(error = %e, "register failed");
            self.free.push(slot);
            self.forget_connection();
            return None;
        }
        self.generation += 1;
        Some(slot)
    }

    /// Takes in a stream accepted for this loop (unless the server is
    /// stopping).
    pub(in crate::server) fn adopt(
        &mut self,
        mut stream: TcpStream,
        peer: SocketAddr,
        door: Door,
        back: &mut Back<'_>,
    ) {
        if self.shared.stopping.load(Ordering::Acquire) {
            self.forget_connection();
            return;
        }
        let _ = stream.set_nodelay(true);
        let Some(slot) = self.register(&mut stream, Interest::READABLE) else {
            return;
        };
        self.refresh_access();
        let stream = match &self.access.tls {
            None => Stream::Plain(stream),
            Some(config) => match Stream::tls(stream, config.clone()) {
                Ok(s) => s,
                Err(e) => {
                    warn!(%peer, error = %e, "TLS session refused");
                    self.free.push(slot);
                    self.forget_connection();
                    return;
                }
            },
        };
        debug!(%peer, slot, tls = stream.is_tls(), ?door, "connection open");
        // An SQS request is signed on its own: the connection needs no
        // authentication.
        let auth = match door {
            Door::Binary => self.new_auth(),
            Door::Sqs | Door::Azure => Auth::NotNeeded,
        };
        if auth == Auth::Pending {
            self.count_unauthenticated(1);
        }
        let mut conn = Conn::new(stream, peer, self.generation, auth);
        conn.auth_generation = self.access.generation;
        match door {
            Door::Sqs => {
                conn.http = Some(Box::new(HttpConn::new(self.shared.sqs_bodies.clone())));
            }
            Door::Azure => {
                conn.http = Some(Box::new(HttpConn::new_azure(
                    self.shared.sqs_bodies.clone(),
                )));
            }
            Door::Binary => {}
        }
        self.conns[slot] = Some(conn);
        // Data may have arrived before registration.
        self.ready(slot, back);
    }

    /// Counts a failed authentication from `ip` (the accepting loop's
    /// table); says so once when it blocks the address.
    pub(in crate::server) fn note_auth_failure(&mut self, ip: IpAddr) {
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
pub(in crate::server) fn open_files_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// Answers a connection the server will not take with one error frame
/// (best effort: a fresh socket's send buffer takes it whole), or one SQS
/// error answer, then closes; over TLS it only closes (no handshake is
/// made for a refusal).
fn refuse(mut stream: TcpStream, tls: bool, door: Door, code: ErrorCode, message: &str) {
    if tls {
        return;
    }
    if door == Door::Azure {
        use fila_azure::{AzureError, Code};
        let e = AzureError::new(Code::ServerBusy, message);
        let mut out = Vec::new();
        let common = fila_azure::Common::default();
        fila_azure::write_reply(
            &mut out,
            &Err(e),
            &common,
            crate::server::azure::now_ms(),
            false,
            true,
        );
        let _ = stream.write(&out);
        return;
    }
    if door == Door::Sqs {
        use fila_sqs::error::{Kind, SqsError};
        let kind = if code == ErrorCode::UNAUTHENTICATED {
            Kind::RequestThrottled
        } else {
            Kind::ServiceUnavailable
        };
        let mut out = Vec::new();
        let e = SqsError::new(kind, message);
        crate::server::sqs::write_error(&mut out, fila_sqs::Protocol::Json, &e, None, true);
        let _ = stream.write(&out);
        return;
    }
    let mut out = BytesMut::new();
    // In the oldest version: any client reads it (an error's body is the
    // same in every version).
    error(code, message).encode_in(
        proto::OLDEST_VERSION,
        proto::Opcode::Hello as u8,
        0,
        &mut out,
    );
    let _ = stream.write(&out);
}
