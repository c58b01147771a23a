//! What comes back to a connection from the shards' owners: answers,
//! parked receives and their late answers, cancels.

use fila_core::{Message, WaitId};
use fila_proto::{self as proto, Response};

use super::conn::{Parked, Phase};
use super::FrontEnd;
use crate::dispatch;
use crate::server::host::{Done, Route, IN_FLIGHT_MAX};
use crate::server::Back;
use fila_sqs::Answer;

impl FrontEnd {
    /// (A cluster node.) A receive of this connection waits on its
    /// partition's leader: the room held for its answer drops from what
    /// its route said to `room`; a connection that stopped reading for want
    /// of room reads on once it has enough (a long poll does not hold up
    /// the requests sent after it).
    fn on_waits(&mut self, route: Route, room: usize) {
        let max_output = self.shared.config.max_output_bytes;
        let Some(conn) = self.get(route.conn) else {
            return;
        };
        conn.reserved = conn.reserved - route.room + room.min(route.room);
        if conn.read_paused
            && !conn.closing()
            && conn.output.len() < max_output / 2
            && conn.room(max_output) >= conn.room_needed()
        {
            conn.read_paused = false;
            self.requeue(route.conn.slot);
        }
    }

    /// What became of a request of one of this loop's connections, from
    /// whichever loop ran it.
    pub(in crate::server) fn on_done(&mut self, route: Route, done: Done, back: &mut Back<'_>) {
        let done = match done {
            Done::Late(result) => return self.on_late(route, result, back),
            Done::Waits(room) => return self.on_waits(route, room),
            Done::PartParked { part, wait, room } => {
                return self.on_part_parked(route, part, wait, room, back);
            }
            other => other,
        };
        let Some(conn) = self.get(route.conn) else {
            // Closed meanwhile: a receive that parked holds messages for
            // nobody: cancel it; messages an answer leased go back.
            match done {
                Done::Parked(wait) => back.host.cancel_wait(wait, None, back.post),
                Done::Answer(answer, _) => {
                    back.host.abandon(route.shard, answer.receipts(), back.post)
                }
                Done::Cancelled | Done::Late(_) | Done::Waits(_) | Done::PartParked { .. } => {}
            }
            return;
        };
        // Answered where it parked (or ended there): nothing left to cancel.
        conn.part_parked.remove(&route.park);
        let slot = route.conn.slot;
        let http = conn.http.is_some();
        if !matches!(done, Done::Cancelled) {
            conn.in_flight -= 1;
            conn.reserved -= route.room;
            if route.opcode == proto::Opcode::Receive as u8 {
                conn.receives_out -= 1;
            }
            let was_barrier = conn.barrier == Some(route.park);
            if was_barrier {
                conn.barrier = None;
            }
            let resume = if conn.barrier.is_some() {
                false
            } else if was_barrier {
                true
            } else if matches!(conn.phase, Phase::Moving { .. }) {
                conn.in_flight == 0
            } else {
                conn.in_flight < IN_FLIGHT_MAX / 2
            };
            if conn.owners_paused && resume {
                conn.owners_paused = false;
                self.requeue(slot);
            }
        }
        // An SQS connection's requests are counted per SQS operation.
        let op = proto::Opcode::from_u8(route.opcode).ok().filter(|_| !http);
        match done {
            Done::Answer(response, logged) if http => {
                let mark = back.wait.hold_mark(logged, &response, Some(route.shard));
                self.on_http_answer(route.conn, super::http::sqs_answer(response), mark, back);
            }
            Done::Answer(response, logged) => {
                if let Some(op) = op {
                    self.shared.metrics.record(
                        self.index,
                        op,
                        route.started.elapsed(),
                        response.is_error(),
                    );
                }
                let mark = back.wait.hold_mark(logged, &response, Some(route.shard));
                self.respond_held(slot, route.opcode, route.request_id, &response, mark, back);
            }
            Done::Parked(wait) => {
                if let Some(op) = op {
                    self.shared
                        .metrics
                        .record(self.index, op, route.started.elapsed(), false);
                }
                self.park(route, wait);
                if self.get(route.conn).is_some_and(|c| c.peer_gone()) {
                    // Its client closed while it was parking.
                    self.end_parked(slot, back);
                }
            }
            Done::Late(_) | Done::Waits(_) | Done::PartParked { .. } => {}
            Done::Cancelled => {
                let conn = self.get(route.conn).expect("found above");
                let Some(p) = conn.parked.remove(&route.park) else {
                    return;
                };
                conn.reserved -= p.reserved;
                if http {
                    self.on_http_answer(route.conn, Answer::Messages(Vec::new()), None, back);
                    return;
                }
                self.respond(
                    slot,
                    proto::Opcode::Receive as u8,
                    p.request_id,
                    &Response::Messages(Vec::new()).into(),
                    back,
                );
            }
        }
        self.dirty.push(slot);
    }

    /// (A cluster node.) A receive of this connection parked as `wait` in
    /// partition `part`'s engine on the loop that keeps it: noted, to be
    /// cancelled there if the connection closes first, and the room held
    /// for its answer drops to `room` ([`FrontEnd::on_waits`]); one whose
    /// connection closed meanwhile is cancelled now, and one whose client
    /// closed its side is ended with no messages.
    fn on_part_parked(
        &mut self,
        route: Route,
        part: usize,
        wait: WaitId,
        room: usize,
        back: &mut Back<'_>,
    ) {
        let Some(conn) = self.get(route.conn) else {
            back.host
                .cancel_part(part, wait, (route.lp, route.conn), false, back.post);
            return;
        };
        conn.part_parked.insert(route.park, (part, wait));
        let peer_gone = conn.peer_gone();
        self.on_waits(route, room);
        if peer_gone {
            back.host
                .cancel_part(part, wait, (route.lp, route.conn), true, back.post);
        }
    }

    /// A parked receive's answer, for one of this loop's connections.
    fn on_late(
        &mut self,
        route: Route,
        result: Result<Vec<Message>, fila_core::Error>,
        back: &mut Back<'_>,
    ) {
        let parked = self
            .get(route.conn)
            .and_then(|c| c.parked.remove(&route.park));
        let Some(p) = parked else {
            // Its connection closed (or cancelled it) while the answer was
            // on its way: what it leased goes back.
            if let Ok(ms) = result {
                let receipts = ms.iter().filter_map(|m| m.receipt).collect();
                back.host.abandon(route.shard, receipts, back.post);
            }
            return;
        };
        let conn = self.get(route.conn).expect("just found");
        conn.reserved -= p.reserved;
        let result = match result {
            // Filled as its client was closing (its cancel came too late):
            // answered empty, what it leased back.
            Ok(ms) if conn.peer_gone() && !ms.is_empty() => {
                let receipts = ms.iter().filter_map(|m| m.receipt).collect();
                back.host.abandon(route.shard, receipts, back.post);
                Ok(Vec::new())
            }
            other => other,
        };
        if conn.http.is_some() {
            let (answer, mark) = match result {
                Ok(ms) => {
                    let view = dispatch::messages_of(ms, p.fields);
                    let mark = back.wait.hold_mark(false, &view, Some(p.wait.shard()));
                    (super::http::sqs_answer(view), mark)
                }
                Err(e) => (Answer::Engine(e), None),
            };
            self.on_http_answer(route.conn, answer, mark, back);
            return;
        }
        let response = match result {
            Ok(ms) => dispatch::messages_of(ms, p.fields),
            Err(e) => dispatch::Answer::failed(&e),
        };
        // Most often filled by a put not yet durable: held until it is.
        let mark = back.wait.hold_mark(false, &response, Some(p.wait.shard()));
        self.respond_held(
            route.conn.slot,
            proto::Opcode::Receive as u8,
            p.request_id,
            &response,
            mark,
            back,
        );
        self.dirty.push(route.conn.slot);
    }

    /// Notes a receive parked on its shard: the connection holds room for
    /// its answer until it comes.
    fn park(&mut self, route: Route, wait: WaitId) {
        let conn = self.get(route.conn).expect("open");
        let reserved = usize::try_from(wait.reserved_bytes()).unwrap_or(usize::MAX);
        conn.reserved += reserved;
        let held = conn.buffered() + conn.reserved;
        conn.parked.insert(
            route.park,
            Parked {
                wait,
                request_id: route.request_id,
                reserved,
                fields: route.fields,
            },
        );
        self.note_held(held);
    }
}
