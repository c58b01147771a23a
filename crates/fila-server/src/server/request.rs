//! One decoded request on its connection's loop: hello and auth, the
//! authentication and permission checks, server stats; everything else is
//! routed to the owner of its queue's shard (`route.rs`), with the room its
//! answer may take held while it is away.

use super::*;
use crate::ops::{self, AnswerRoom, Place};

impl Loop {
    /// Logs an unknown token at most once a second, with how many were
    /// left out since.
    fn warn_unknown_token(&self, peer: SocketAddr) {
        let second = self.shared.totals.now_ms() / 1000;
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

    /// Handles one decoded request: answers what the connection answers
    /// itself (hello, auth, refusals, server stats); `None` when the
    /// request went to its shard's owner (`on_done` answers it).
    pub(super) fn request(
        &mut self,
        slot: usize,
        request_id: u64,
        opcode: u8,
        started: Instant,
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
                        shared
                            .loops
                            .get(self.index)
                            .unauthenticated
                            .fetch_sub(1, Ordering::AcqRel);
                    }
                    return Some(Response::Ok);
                }
                // A failed auth leaves the connection unauthenticated,
                // whatever it presented before.
                conn.token = None;
                if !std::mem::replace(&mut conn.unauthenticated, true) {
                    shared
                        .loops
                        .get(self.index)
                        .unauthenticated
                        .fetch_add(1, Ordering::AcqRel);
                }
                conn.auth_failures += 1;
                let peer = conn.peer;
                let last = conn.auth_failures >= AUTH_FAILURES_MAX;
                if last {
                    conn.closing = true;
                }
                self.warn_unknown_token(peer);
                // Counted per address by the accepting loop.
                if self.index == 0 {
                    self.note_auth_failure(peer.ip());
                } else {
                    self.send_to(0, Msg::AuthFailed(peer.ip()));
                }
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
        if let Some(forbidden) = dispatch::authorize(&caller, &req) {
            return Some(forbidden);
        }
        let token = conn.token;
        let fields = match &req {
            Request::Receive(r) => r.fields,
            _ => proto::Fields::ALL,
        };
        let is_receive = matches!(req, Request::Receive(_));
        let may_park =
            conn.parked.len() + conn.receives_out < shared.config.max_parked_per_connection;
        let park = conn.next_park;
        conn.next_park += 1;
        let generation = conn.generation;
        let nothing_away = conn.in_flight == 0;
        if let Request::ServerStats = req {
            return Some(Response::ServerStats(
                shared.metrics.server_stats(&shared.totals),
            ));
        }
        // A request that goes to another loop holds room for its answer
        // while it is away: an answer with messages all of it when nothing
        // else is away (as a request run here may use), else the least it
        // needs; any other answer the room such answers need, so the
        // connection's next requests keep the rest.
        let op = ops::of(&req);
        let first = self.first_hop(&req);
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
            slot,
            generation,
            request_id,
            opcode,
            started,
            room,
            park,
            fields,
            shard: ops::queue_of(&req).map_or(0, |q| shared.totals.shard_of(q)),
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
            self.start_list(route, req, token);
            return None;
        }
        if op.place == Place::TargetThenShard && dispatch::target_of(&req).is_some() {
            conn.barrier = Some(park);
        }
        if let Some(done) = self.serve(RunJob {
            route,
            req,
            may_park,
            checked: false,
        }) {
            self.on_done(route, done);
            self.hand_on();
        }
        None
    }
}
