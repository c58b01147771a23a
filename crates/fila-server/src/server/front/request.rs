//! One decoded request on its connection's loop: hello and auth, the
//! authentication and permission checks, server stats; everything else is
//! handed to the shard host (`host.rs`), which runs it on the loop that
//! owns its queue's shard, with the room its answer may take held while it
//! is away.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use fila_proto::{self as proto, ErrorCode, Request, Response};
use tracing::{debug, warn};

use super::conn::{Auth, ConnRef, Credential};
use super::FrontEnd;
use crate::dispatch::{self, error, Caller};
use crate::limits::{ANSWER_ROOM_MIN, AUTH_FAILURES_MAX, SMALL_ANSWER_ROOM};
use crate::ops::{self, AnswerRoom, Place};
use crate::server::host::{Route, RunJob};
use crate::server::mailbox::Msg;
use crate::server::Back;
use crate::tls::CertNames;

impl FrontEnd {
    /// Logs an unknown token at most once a second, with how many were
    /// left out since.
    fn warn_unknown_token(&self, peer: SocketAddr) {
        let second = self.shared.totals.now_ms() / 1000;
        if let Some(unlogged) = self.shared.auth_warn.allow(second) {
            warn!(%peer, unlogged_since_last = unlogged, "unknown token presented");
        }
    }

    /// An auth request: the token's connection is authenticated, or not
    /// (a failure leaves it unauthenticated, whatever it presented
    /// before; the last allowed failure closes it).
    fn authenticate(&mut self, slot: usize, token: &str, back: &mut Back<'_>) -> Response {
        let access = self.access.clone();
        let tokens = &access.tokens;
        let conn = self.conns[slot].as_mut().expect("open");
        if tokens.is_empty() {
            return Response::Ok;
        }
        if let Some(id) = tokens.find(token) {
            let was_pending = conn.unauthenticated();
            conn.auth = Auth::As(id);
            conn.credential = Some(Credential::Secret(token.into()));
            conn.auth_generation = access.generation;
            conn.last_active = Instant::now();
            if was_pending {
                self.count_unauthenticated(-1);
            }
            return Response::Ok;
        }
        let was_pending = std::mem::replace(&mut conn.auth, Auth::Pending) == Auth::Pending;
        conn.credential = None;
        conn.auth_failures += 1;
        let peer = conn.peer;
        let last = conn.auth_failures >= AUTH_FAILURES_MAX;
        if last {
            conn.close_when_written(false);
        }
        if !was_pending {
            self.count_unauthenticated(1);
        }
        self.warn_unknown_token(peer);
        // Counted per address by the accepting loop.
        if self.index == 0 {
            self.note_auth_failure(peer.ip());
        } else {
            back.post.send(0, Msg::AuthFailed(peer.ip()));
        }
        if last {
            error(
                ErrorCode::UNAUTHENTICATED,
                format!(
                    "unauthenticated: unknown token ({AUTH_FAILURES_MAX} failures: closing the connection)"
                ),
            )
        } else {
            error(ErrorCode::UNAUTHENTICATED, "unauthenticated: unknown token")
        }
    }

    /// A TLS handshake ended: a verified client certificate that names a
    /// token authenticates the connection as that token.
    pub(super) fn on_handshake(&mut self, slot: usize, names: Option<CertNames>) {
        let Some(names) = names else {
            return;
        };
        let access = self.access.clone();
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        let Some(id) = access.tokens.by_certificate(&names.names) else {
            debug!(peer = %conn.peer, names = ?names.names, "client certificate names no token");
            return;
        };
        debug!(peer = %conn.peer, names = ?names.names, "authenticated by client certificate");
        let was_pending = conn.unauthenticated();
        conn.auth = Auth::As(id);
        conn.credential = Some(Credential::Certificate(names.names.into_boxed_slice()));
        conn.auth_generation = access.generation;
        if was_pending {
            self.count_unauthenticated(-1);
        }
    }

    /// After a reload, finds an authenticated connection's token again
    /// (its secret or its certificate's names) in the new tokens; a token
    /// no longer there takes the connection's grants with it (`false`).
    fn recheck_token(&mut self, slot: usize) -> bool {
        let access = self.access.clone();
        let conn = self.conns[slot].as_mut().expect("open");
        if conn.auth_generation == access.generation || !matches!(conn.auth, Auth::As(_)) {
            return true;
        }
        let found = match &conn.credential {
            Some(Credential::Secret(s)) => access.tokens.find(s),
            Some(Credential::Certificate(names)) => access.tokens.by_certificate(names),
            None => None,
        };
        conn.auth_generation = access.generation;
        match found {
            Some(id) => {
                conn.auth = Auth::As(id);
                true
            }
            None => {
                debug!(peer = %conn.peer, "its token was removed by a reload");
                conn.auth = Auth::Pending;
                conn.credential = None;
                // Its time to authenticate again counts from now.
                conn.opened = Instant::now();
                self.count_unauthenticated(1);
                false
            }
        }
    }

    /// A reload asked over the protocol (manage on every queue, or no
    /// tokens configured).
    fn reload(&mut self, slot: usize) -> Response {
        let conn = self.conns[slot].as_ref().expect("open");
        if let Some(token) = conn.token() {
            if !self
                .access
                .tokens
                .allows_all(token, crate::auth::Permission::Manage)
            {
                return error(
                    ErrorCode::FORBIDDEN,
                    "forbidden: a reload needs manage on every queue (a grant on \"*\")",
                );
            }
        }
        match self.shared.reload() {
            Ok(r) => {
                self.refresh_access();
                Response::Reloaded {
                    generation: r.generation,
                    tokens: u32::try_from(r.tokens).unwrap_or(u32::MAX),
                    tls: r.tls,
                }
            }
            Err(e) => error(ErrorCode::INVALID_ARGUMENT, e.to_string()),
        }
    }

    /// Handles one decoded request: answers what the connection answers
    /// itself (hello, auth, refusals, server stats); `None` when the
    /// request went to the shard host (`on_done` answers it).
    pub(super) fn request(
        &mut self,
        slot: usize,
        request_id: u64,
        started: Instant,
        req: Request,
        room: usize,
        back: &mut Back<'_>,
    ) -> Option<Response> {
        let shared = self.shared.clone();
        if shared.stopping.load(Ordering::Acquire) {
            return Some(error(
                ErrorCode::SHUTTING_DOWN,
                "shutting_down: the server is stopping",
            ));
        }
        match &req {
            Request::Hello {
                client,
                max_version,
            } => {
                let conn = self.conns[slot].as_ref().expect("open");
                debug!(peer = %conn.peer, client, ?max_version, "hello");
                // A client that names no version speaks version 1; the
                // server uses the newest both speak.
                let version = max_version.unwrap_or(1).min(proto::VERSION);
                if version < proto::OLDEST_VERSION {
                    return Some(error(
                        ErrorCode::UNSUPPORTED_VERSION,
                        format!(
                            "unsupported_version: the client speaks versions up to {version}; this server speaks versions {} to {}",
                            proto::OLDEST_VERSION,
                            proto::VERSION
                        ),
                    ));
                }
                return Some(Response::Hello {
                    server: format!("fila-server/{}", env!("CARGO_PKG_VERSION")),
                    protocol_version: version,
                    max_frame_len: shared.config.max_frame_bytes as u32,
                });
            }
            Request::Auth { token } => return Some(self.authenticate(slot, token, back)),
            _ => {}
        }
        if !self.recheck_token(slot) {
            return Some(error(
                ErrorCode::UNAUTHENTICATED,
                "unauthenticated: this connection's token was removed by a reload; send auth with a token",
            ));
        }
        let access = self.access.clone();
        let conn = self.conns[slot].as_mut().expect("open");
        if conn.unauthenticated() {
            return Some(error(
                ErrorCode::UNAUTHENTICATED,
                "unauthenticated: send auth with a token first",
            ));
        }
        if let Request::Reload = req {
            return Some(self.reload(slot));
        }
        let conn = self.conns[slot].as_mut().expect("open");
        let token = conn.token();
        let caller = Caller {
            tokens: &access.tokens,
            token,
        };
        if let Some(forbidden) = dispatch::authorize(&caller, &req) {
            return Some(forbidden);
        }
        // A cluster node's queues are its partition's: its stats come from
        // the partition's leader (the cluster endpoint), not from here.
        if let (Request::ServerStats, None) = (&req, shared.cluster) {
            return Some(Response::ServerStats(
                shared.metrics.server_stats(&shared.totals),
            ));
        }
        if let Request::ClusterStatus = req {
            let view = shared
                .published
                .view
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            return Some(match view.as_ref() {
                Some(status) => Response::ClusterStatus(Box::new(status.clone())),
                None if shared.cluster.is_none() => error(
                    ErrorCode::INVALID_ARGUMENT,
                    "invalid_argument: this server is a single node, not a cluster's (docs/cluster.md)",
                ),
                None => error(
                    ErrorCode::SHUTTING_DOWN,
                    "shutting_down: the cluster node is starting or stopping",
                ),
            });
        }
        if let Request::ChangeCluster(_) = req {
            if token.is_some_and(|t| !access.tokens.allows_all(t, crate::auth::Permission::Manage))
            {
                return Some(error(
                    ErrorCode::FORBIDDEN,
                    "forbidden: a cluster change needs manage on every queue (a grant on \"*\")",
                ));
            }
            if shared.cluster.is_none() {
                return Some(error(
                    ErrorCode::INVALID_ARGUMENT,
                    "invalid_argument: this server is a single node, not a cluster's (docs/cluster.md)",
                ));
            }
        }
        self.send_request(slot, request_id, started, req, room, token, &access, back);
        None
    }

    /// Sends a request its caller may make (checked above, or by the SQS
    /// API for its signer's token) to the shard host: run here when this
    /// loop owns its shard, else sent on; `on_done` gets its answer.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_request(
        &mut self,
        slot: usize,
        request_id: u64,
        started: Instant,
        req: Request,
        room: usize,
        token: Option<crate::auth::TokenId>,
        access: &crate::live::Access,
        back: &mut Back<'_>,
    ) {
        let shared = self.shared.clone();
        let conn = self.conns[slot].as_mut().expect("open");
        let op = ops::of(&req);
        let opcode = op.opcode as u8;
        let fields = match &req {
            Request::Receive(r) => r.fields,
            _ => proto::Fields::ALL,
        };
        let is_receive = matches!(req, Request::Receive(_));
        let may_park =
            conn.parked.len() + conn.receives_out < shared.config.max_parked_per_connection;
        let park = conn.next_park;
        conn.next_park += 1;
        let c = ConnRef {
            slot,
            generation: conn.generation,
        };
        let nothing_away = conn.in_flight == 0;
        // A request that goes to another loop holds room for its answer
        // while it is away: an answer with messages all of it when nothing
        // else is away (as a request run here may use), else the least it
        // needs; any other answer the room such answers need, so the
        // connection's next requests keep the rest.
        let first = back.host.first_hop(&req);
        let local = first == self.index;
        self.note_streak(slot, first, local);
        // A list visits every loop: it is away even when it starts here.
        let runs_here = local && op.place != Place::EveryLoop;
        let room = if runs_here {
            room
        } else if op.answer != AnswerRoom::Messages {
            room.min(SMALL_ANSWER_ROOM)
        } else if nothing_away {
            room
        } else {
            room.min(ANSWER_ROOM_MIN)
        };
        let route = Route {
            lp: self.index,
            conn: c,
            request_id,
            opcode,
            started,
            room,
            park,
            fields,
            shard: ops::queue_of(&req).map_or(0, |q| shared.totals.shard_of(q)),
            forward: self.conns[slot].as_ref().is_some_and(|c| c.http.is_some()),
        };
        // Counted as away until its answer comes (`on_done`), even when it
        // comes at once.
        let conn = self.conns[slot].as_mut().expect("open");
        conn.in_flight += 1;
        conn.reserved += room;
        if is_receive {
            conn.receives_out += 1;
        }
        if op.place == Place::EveryLoop {
            back.host
                .start_list(route, req, token.map(|t| (&access.tokens, t)), back.post);
        } else {
            if op.place == Place::TargetThenShard && dispatch::target_of(&req).is_some() {
                conn.barrier = Some(park);
            }
            back.host.submit(
                RunJob {
                    route,
                    req,
                    may_park,
                    checked: false,
                },
                back.post,
            );
        }
        // Its answer when it ran here, then what its call completed for
        // others (a put fills a parked receive after it is answered).
        self.take_local(back);
    }
}
