//! A connection's turn: reading and answering whole frames within the
//! turn's budgets, writing out, throttling and resuming.

use std::io;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::BytesMut;
use fila_proto::{self as proto, split_frame, Request, Response};
use mio::{Interest, Token};
use tracing::{debug, warn};

use super::conn::{Conn, ConnRef, Phase};
use super::FrontEnd;
use crate::dispatch::{error, Answer};
use crate::limits::{FRAMES_PER_TURN, PREAUTH_FRAME_MAX, READ_BYTES_PER_TURN, READ_CHUNK};
use crate::server::host::IN_FLIGHT_MAX;
use crate::server::Back;

/// Why a turn of [`FrontEnd::process`] stopped.
pub(super) enum Stop {
    /// No whole frame left in the input.
    NeedMore,
    /// The turn's frame budget is spent; more may be left.
    Budget,
    /// Reading stopped until something changes (output room, answers from
    /// other loops, the log).
    Throttled,
    /// Closing, closed or moved away.
    Closed,
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

impl FrontEnd {
    /// A turn for connection `slot`: what is buffered is written, frames
    /// are answered, what that produced is written.
    pub(super) fn ready(&mut self, slot: usize, back: &mut Back<'_>) {
        if self.conns.get(slot).is_none_or(|c| c.is_none()) {
            return;
        }
        self.refresh_access();
        self.flush(slot, back);
        self.turn(slot, back);
        self.flush(slot, back);
    }

    /// One turn: answers whole frames and reads, within the turn's budgets.
    fn turn(&mut self, slot: usize, back: &mut Back<'_>) {
        let mut frames = FRAMES_PER_TURN;
        let mut read_left = READ_BYTES_PER_TURN;
        // A read that came back short emptied the socket: the next bytes
        // to arrive raise a new (edge-triggered) event, so no read is
        // spent on the `WouldBlock` that would follow. Not so once the
        // client's close was seen (`peer_gone`): that event is spent, and
        // only a read of 0 bytes ends the stream, so reading goes on.
        let mut drained = false;
        loop {
            match self.process(slot, &mut frames, back) {
                Stop::NeedMore => {}
                Stop::Budget => {
                    self.requeue(slot);
                    return;
                }
                Stop::Throttled | Stop::Closed => return,
            }
            if drained && !self.conns[slot].as_ref().is_some_and(|c| c.peer_gone()) {
                return;
            }
            if read_left == 0 {
                self.requeue(slot);
                return;
            }
            let max_frame = self.shared.config.max_frame_bytes;
            let Some(conn) = self.conns[slot].as_mut() else {
                return;
            };
            if conn.read_paused {
                return;
            }
            if conn.input.len() > max_frame + proto::LEN_PREFIX {
                // Whole frames are taken off as they complete, so this
                // cannot happen; stop rather than grow.
                conn.read_paused = true;
                return;
            }
            let want = read_left.min(self.scratch.len());
            let read = conn.stream.read(&mut self.scratch[..want]);
            if let Some(names) = conn.stream.handshake_done() {
                self.on_handshake(slot, names);
            }
            let Some(conn) = self.conns[slot].as_mut() else {
                return;
            };
            match read {
                Ok(0) => {
                    // The peer is done sending; answers already due (and
                    // those of requests at other loops) still go out before
                    // the connection closes.
                    if conn.buffered() == 0 && conn.in_flight == 0 {
                        self.close(slot, "peer closed", back);
                    } else {
                        conn.close_when_written(true);
                    }
                    return;
                }
                Ok(n) => {
                    conn.input.extend_from_slice(&self.scratch[..n]);
                    read_left -= n;
                    // TLS hands out a record at a time: a short read
                    // says nothing of the socket.
                    drained = n < want && !conn.stream.is_tls();
                }
                Err(e) if would_block(&e) => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    // A TLS error: the alert saying why goes out as the
                    // connection closes.
                    let second = self.shared.totals.now_ms() / 1000;
                    if let Some(unlogged) = self.shared.tls_warn.allow(second) {
                        warn!(peer = %conn.peer, error = %e, unlogged_since_last = unlogged, "TLS connection refused");
                    } else {
                        debug!(peer = %conn.peer, error = %e, "TLS connection refused");
                    }
                    self.shared
                        .metrics
                        .tls_errors
                        .fetch_add(1, Ordering::Relaxed);
                    self.close(slot, &format!("TLS error: {e}"), back);
                    return;
                }
                Err(e) => {
                    self.close(slot, &format!("read error: {e}"), back);
                    return;
                }
            }
        }
    }

    /// Whether the connection reads and answers its next frame now, and
    /// why not.
    pub(super) fn may_go_on(
        &mut self,
        slot: usize,
        frames: usize,
        back: &mut Back<'_>,
    ) -> Option<Stop> {
        let max_output = self.shared.config.max_output_bytes;
        let conn = self.conns[slot].as_mut()?;
        if conn.closing() {
            return Some(Stop::Closed);
        }
        if frames == 0 {
            return Some(Stop::Budget);
        }
        if back.post.is_backlogged() {
            // Other loops' mailboxes stayed full: no more requests are read
            // (each could post more) until this loop's backlog went out;
            // the connection's turn comes again next turn.
            return Some(Stop::Budget);
        }
        if conn.room(max_output) < conn.room_needed() {
            conn.read_paused = true;
            return Some(Stop::Throttled);
        }
        if conn.barrier.is_some() {
            conn.owners_paused = true;
            return Some(Stop::Throttled);
        }
        if let Phase::Moving { to } = conn.phase {
            if !conn.parked.is_empty() {
                // Parked receives stay where they are: no move.
                conn.phase = Phase::Open;
                conn.streak = (usize::MAX, 0);
            } else if conn.in_flight == 0 {
                self.move_conn(slot, to, back);
                return Some(Stop::Closed);
            } else {
                // Nothing more is read here until what is away came back.
                conn.owners_paused = true;
                return Some(Stop::Throttled);
            }
        }
        if conn.in_flight >= IN_FLIGHT_MAX {
            conn.owners_paused = true;
            return Some(Stop::Throttled);
        }
        // Past the log's backlog, the next request waits for the writer.
        // (An SQS request's operation is not known before it is read:
        // taken as one that adds payloads.)
        let next = if conn.http.is_some() {
            Some(proto::Opcode::Put as u8)
        } else {
            conn.input.get(5).copied()
        };
        if back.wait.log_full(next) {
            if !std::mem::replace(&mut conn.listed_paused, true) {
                back.wait.paused(ConnRef {
                    slot,
                    generation: conn.generation,
                });
            }
            return Some(Stop::Throttled);
        }
        None
    }

    /// Answers whole frames in the input while there is output room and
    /// frames left in this turn's budget.
    fn process(&mut self, slot: usize, frames: &mut usize, back: &mut Back<'_>) -> Stop {
        if self.is_http(slot) {
            return self.process_http(slot, frames, back);
        }
        let max_output = self.shared.config.max_output_bytes;
        loop {
            if self.conns[slot].is_none() {
                return Stop::Closed;
            }
            if let Some(stop) = self.may_go_on(slot, *frames, back) {
                return stop;
            }
            let conn = self.conns[slot].as_mut().expect("open");
            let room = conn.room(max_output);
            let authenticated = !conn.unauthenticated();
            let max_frame = if authenticated {
                self.shared.config.max_frame_bytes
            } else {
                PREAUTH_FRAME_MAX
            };
            let (header, body) = match split_frame(&mut conn.input, max_frame) {
                Ok(Some(frame)) => frame,
                Ok(None) => return Stop::NeedMore,
                Err(e) => {
                    // The stream cannot be resynchronised: say why and close.
                    self.shared
                        .metrics
                        .bad_frames
                        .fetch_add(1, Ordering::Relaxed);
                    debug!(peer = %conn.peer, error = %e, "broken frame");
                    let opcode = conn.input.get(5).copied().unwrap_or(0);
                    conn.close_when_written(false);
                    let message = if authenticated {
                        e.to_string()
                    } else {
                        format!("{e} (before auth a frame is at most {PREAUTH_FRAME_MAX} bytes)")
                    };
                    self.respond(slot, opcode, 0, &error(e.code(), message).into(), back);
                    return Stop::Closed;
                }
            };
            *frames -= 1;
            // Answers are written in the version of the frame they answer;
            // one the server does not speak is refused in the oldest, which
            // every client reads.
            conn.version = if proto::speaks(header.version) {
                header.version
            } else {
                proto::OLDEST_VERSION
            };
            if authenticated {
                // Only an authenticated client's requests count as activity.
                conn.last_active = Instant::now();
            }
            let started = Instant::now();
            let opcode = header.opcode;
            let response = match Request::decode(&header, body) {
                Ok(req) => self.request(slot, header.request_id, started, req, room, back),
                Err(e) => {
                    self.shared
                        .metrics
                        .bad_frames
                        .fetch_add(1, Ordering::Relaxed);
                    if !e.is_recoverable() {
                        self.conns[slot]
                            .as_mut()
                            .expect("open")
                            .close_when_written(false);
                    }
                    Some(error(e.code(), e.to_string()))
                }
            };
            if let Some(response) = response {
                if let Ok(op) = proto::Opcode::from_u8(opcode) {
                    self.shared.metrics.record(
                        self.index,
                        op,
                        started.elapsed(),
                        matches!(response, Response::Error(_)),
                    );
                }
                self.respond(slot, opcode, header.request_id, &response.into(), back);
            }
            // Else the shard host took it: `on_done` records and answers.
        }
    }

    /// Raises the high-water gauge of answer bytes held for one connection;
    /// the shared atomic is touched only when this loop's own mark rises.
    pub(super) fn note_held(&mut self, held: usize) {
        if held > self.high_water {
            self.high_water = held;
            self.shared
                .metrics
                .output_high_water
                .fetch_max(held as u64, Ordering::Relaxed);
        }
    }

    /// An answer no call logged anything for: held only if it hands out a
    /// message not durable yet (it never does: answers made here carry no
    /// messages).
    pub(super) fn respond(
        &mut self,
        slot: usize,
        opcode: u8,
        request_id: u64,
        response: &Answer,
        back: &mut Back<'_>,
    ) {
        self.respond_held(slot, opcode, request_id, response, None, back);
    }

    /// Encodes an answer for connection `slot`, held until the log is
    /// durable up to `mark` when there is one.
    pub(super) fn respond_held(
        &mut self,
        slot: usize,
        opcode: u8,
        request_id: u64,
        response: &Answer,
        mark: Option<u64>,
        back: &mut Back<'_>,
    ) {
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        // An answer that waits for the log goes to the held buffer; the
        // others go out at once, ahead of held ones if need be (answers
        // come in the order they finish: docs/protocol.md).
        match mark {
            Some(mark) => {
                let before = conn.held.len();
                response.encode(conn.version, opcode, request_id, &mut conn.held);
                conn.held_on(conn.held.len() - before, mark);
            }
            None => response.encode(conn.version, opcode, request_id, &mut conn.output),
        }
        self.answered(slot, back);
    }

    /// Appends an answer written already (an SQS one, in parts: its head
    /// and its body) for connection `slot`, held until the log is durable
    /// up to `mark` when there is one.
    pub(super) fn emit(
        &mut self,
        slot: usize,
        answer: &[&[u8]],
        mark: Option<u64>,
        back: &mut Back<'_>,
    ) {
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        // HTTP answers go out in their requests' order: behind answers
        // held for the log, one that needs no wait still waits for them.
        match mark.or_else(|| conn.holds.back().map(|h| h.1)) {
            Some(mark) => {
                let mut len = 0;
                for part in answer {
                    conn.held.extend_from_slice(part);
                    len += part.len();
                }
                conn.held_on(len, mark);
            }
            None => {
                for part in answer {
                    conn.output.extend_from_slice(part);
                }
            }
        }
        self.answered(slot, back);
    }

    /// After an answer was added: the high-water gauge, and the log wait
    /// told of a connection that newly holds answers.
    fn answered(&mut self, slot: usize, back: &mut Back<'_>) {
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        let held = conn.buffered() + conn.reserved;
        let newly_holding =
            !conn.holds.is_empty() && !std::mem::replace(&mut conn.listed_holding, true);
        let c = ConnRef {
            slot,
            generation: conn.generation,
        };
        self.note_held(held);
        if newly_holding {
            back.wait.holding(c);
        }
    }

    /// Writes the output until `WouldBlock`; watches for writability while
    /// some is left; resumes reading a throttled connection once it has
    /// room again.
    pub(super) fn flush(&mut self, slot: usize, back: &mut Back<'_>) {
        let max_output = self.shared.config.max_output_bytes;
        if !self.write_out(slot, back) {
            return;
        }
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        // Edge-triggered: a throttled connection's pending bytes raise no
        // new event, so once its output has room again it takes a turn
        // like any connection with work left.
        if conn.read_paused
            && !conn.closing()
            && conn.output.len() < max_output / 2
            && conn.room(max_output) >= conn.room_needed()
        {
            conn.read_paused = false;
            self.requeue(slot);
        }
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        if conn.buffered() == 0 && conn.in_flight == 0 && conn.closing() {
            self.close(slot, "closed once its answers were written", back);
            return;
        }
        let want_write = !conn.output.is_empty() || conn.stream.wants_write();
        if want_write != conn.writable_interest {
            let interest = if want_write {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            let _ = self
                .registry
                .reregister(conn.stream.socket(), Token(slot), interest);
            conn.writable_interest = want_write;
        }
    }

    /// Writes until the output is empty or `WouldBlock`; `false` when the
    /// connection failed and was closed.
    pub(super) fn write_out(&mut self, slot: usize, back: &mut Back<'_>) -> bool {
        let Some(conn) = self.conns[slot].as_mut() else {
            return false;
        };
        match write_all(conn) {
            Ok(()) => true,
            Err(why) => {
                self.close(slot, &why, back);
                false
            }
        }
    }
}

/// Writes a connection's output until it is empty or the socket would
/// block; the reason when the connection failed.
fn write_all(conn: &mut Conn) -> Result<(), String> {
    conn.stream
        .write_from(&mut conn.output)
        .map_err(|e| format!("write error: {e}"))?;
    if conn.output.is_empty() && conn.output.capacity() > READ_CHUNK {
        // Give back what a burst of large answers grew.
        conn.output = BytesMut::new();
    }
    Ok(())
}
