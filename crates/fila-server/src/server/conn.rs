//! One connection: its buffers, the room its answers may take, its parked
//! receives, and its turns — reading and answering frames within the
//! turn's budgets, writing out, throttling and resuming.

use bytes::Buf;

use super::*;

/// A parked receive of a connection.
pub(super) struct Parked {
    pub(super) wait: WaitId,
    pub(super) request_id: u64,
    /// Output room held for its answer.
    pub(super) reserved: usize,
    /// The fields its answer carries.
    pub(super) fields: proto::Fields,
}

pub(super) struct Conn {
    pub(super) stream: TcpStream,
    pub(super) peer: SocketAddr,
    pub(super) generation: u64,
    pub(super) input: BytesMut,
    pub(super) output: BytesMut,
    /// Answers held until the log is durable up to their marks, in order.
    pub(super) held: BytesMut,
    /// The regions of `held`: bytes and mark.
    pub(super) holds: VecDeque<(usize, u64)>,
    /// Listed in the loop's `holding`.
    pub(super) in_holding: bool,
    /// Listed in the loop's `log_paused`.
    pub(super) log_paused: bool,
    pub(super) token: Option<TokenId>,
    /// Counted in this loop's `unauthenticated` (tokens configured, no
    /// successful auth yet).
    pub(super) unauthenticated: bool,
    pub(super) auth_failures: u32,
    /// Parked receives by a number of this connection (request ids are the
    /// client's and may repeat).
    pub(super) parked: HashMap<u64, Parked>,
    pub(super) next_park: u64,
    /// Output room held for parked receives and for the answers of
    /// requests at other loops.
    pub(super) reserved: usize,
    /// Requests sent to shards' owners whose answers have not come back
    /// (at most [`IN_FLIGHT_MAX`]).
    pub(super) in_flight: usize,
    /// Receives among them.
    pub(super) receives_out: usize,
    /// The turn stopped at [`IN_FLIGHT_MAX`] (or to move the connection):
    /// resumed when answers come.
    pub(super) owners_paused: bool,
    /// The loop its last requests all went to, and how many in a row
    /// (`usize::MAX`: none).
    pub(super) streak: (usize, u32),
    /// Moving to this loop once nothing of it is away.
    pub(super) moving_to: Option<usize>,
    /// A create or update naming a dead-letter target is away (it visits
    /// the target's loop, then the queue's): later requests wait for it,
    /// so they never overtake it.
    /// (Its number, as `Route::park`.)
    pub(super) barrier: Option<u64>,
    pub(super) opened: Instant,
    pub(super) last_active: Instant,
    /// Stopped reading: no output room, or a fatal frame error.
    pub(super) read_paused: bool,
    /// In the loop's `pending` queue.
    pub(super) queued: bool,
    /// Close once the output is written.
    pub(super) closing: bool,
    /// Its client closed its side (seen even while it is not read): its
    /// parked receives were ended, and a late answer to one is not
    /// written (what it leased goes back).
    pub(super) peer_closed: bool,
    pub(super) writable_interest: bool,
}

impl Conn {
    /// Counts `len` bytes just appended to `held`, held on `mark`.
    pub(super) fn held_on(&mut self, len: usize, mark: u64) {
        match self.holds.back_mut() {
            Some(last) if last.1 == mark => last.0 += len,
            _ => self.holds.push_back((len, mark)),
        }
    }

    /// Moves the held answers whose mark is durable to the output;
    /// answers whether any was.
    pub(super) fn release(&mut self, durable: u64) -> bool {
        let mut bytes = 0;
        while let Some(&(len, mark)) = self.holds.front() {
            if mark > durable {
                break;
            }
            self.holds.pop_front();
            bytes += len;
        }
        if bytes > 0 {
            self.output.extend_from_slice(&self.held[..bytes]);
            self.held.advance(bytes);
        }
        bytes > 0
    }

    /// Answer bytes buffered: to be written, and held for the log.
    pub(super) fn buffered(&self) -> usize {
        self.output.len() + self.held.len()
    }

    pub(super) fn room(&self, max_output: usize) -> usize {
        max_output.saturating_sub(self.buffered() + self.reserved)
    }

    /// The room the next frame's answer needs before it is handled (as far
    /// as its head is in): answers that carry messages need room for at
    /// least one largest message, the others far less.
    pub(super) fn room_needed(&self) -> usize {
        if self
            .input
            .get(5)
            .is_none_or(|op| crate::ops::carries_messages(*op))
        {
            ANSWER_ROOM_MIN
        } else {
            SMALL_ANSWER_ROOM
        }
    }
}

/// Why a turn of [`Loop::process`] stopped.
pub(super) enum Stop {
    /// No whole frame left in the input.
    NeedMore,
    /// The turn's frame budget is spent; more may be left.
    Budget,
    /// No output room: reading stopped until the client drains.
    Throttled,
    /// Closing or closed.
    Closed,
}

impl Loop {
    pub(super) fn ready(&mut self, slot: usize) {
        if self.conns.get(slot).is_none_or(|c| c.is_none()) {
            return;
        }
        self.flush(slot);
        self.turn(slot);
        self.flush(slot);
    }

    /// Puts a connection at the back of the round-robin queue of work left.
    pub(super) fn requeue(&mut self, slot: usize) {
        if let Some(conn) = self.conns[slot].as_mut() {
            if !conn.queued {
                conn.queued = true;
                self.pending.push_back(slot);
            }
        }
    }

    /// One turn: answers whole frames and reads, within the turn's budgets.
    pub(super) fn turn(&mut self, slot: usize) {
        let mut frames = FRAMES_PER_TURN;
        let mut read_left = READ_BYTES_PER_TURN;
        // A read that came back short emptied the socket: the next bytes
        // to arrive raise a new (edge-triggered) event, so no read is
        // spent on the `WouldBlock` that would follow.
        let mut drained = false;
        loop {
            match self.process(slot, &mut frames) {
                Stop::NeedMore => {}
                Stop::Budget => {
                    self.requeue(slot);
                    return;
                }
                Stop::Throttled | Stop::Closed => return,
            }
            if drained {
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
            match conn.stream.read(&mut self.scratch[..want]) {
                Ok(0) => {
                    // The peer is done sending; answers already due (and
                    // those of requests at other loops) still go out before
                    // the connection closes.
                    if conn.buffered() == 0 && conn.in_flight == 0 {
                        self.close(slot, "peer closed");
                    } else {
                        conn.closing = true;
                    }
                    return;
                }
                Ok(n) => {
                    conn.input.extend_from_slice(&self.scratch[..n]);
                    read_left -= n;
                    drained = n < want;
                }
                Err(e) if would_block(&e) => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.close(slot, &format!("read error: {e}"));
                    return;
                }
            }
        }
    }

    /// Answers whole frames in the input while there is output room and
    /// frames left in this turn's budget.
    pub(super) fn process(&mut self, slot: usize, frames: &mut usize) -> Stop {
        let max_output = self.shared.config.max_output_bytes;
        let need_auth = !self.shared.config.tokens.is_empty();
        loop {
            let Some(conn) = self.conns[slot].as_mut() else {
                return Stop::Closed;
            };
            if conn.closing {
                return Stop::Closed;
            }
            if *frames == 0 {
                return Stop::Budget;
            }
            let room = conn.room(max_output);
            if room < conn.room_needed() {
                conn.read_paused = true;
                return Stop::Throttled;
            }
            if conn.barrier.is_some() {
                conn.owners_paused = true;
                return Stop::Throttled;
            }
            if let Some(dest) = conn.moving_to {
                if !conn.parked.is_empty() {
                    // Parked receives stay where they are: no move.
                    conn.moving_to = None;
                    conn.streak = (usize::MAX, 0);
                } else if conn.in_flight == 0 {
                    self.move_conn(slot, dest);
                    return Stop::Closed;
                } else {
                    // Nothing more is read here until what is away came
                    // back.
                    conn.owners_paused = true;
                    return Stop::Throttled;
                }
            }
            if conn.in_flight >= IN_FLIGHT_MAX {
                conn.owners_paused = true;
                return Stop::Throttled;
            }
            if self.log_full(slot) {
                // Answered once the log writer has caught up.
                return Stop::Throttled;
            }
            let conn = self.conns[slot].as_mut().expect("open");
            let authenticated = !need_auth || conn.token.is_some();
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
                    conn.closing = true;
                    let message = if authenticated {
                        e.to_string()
                    } else {
                        format!("{e} (before auth a frame is at most {PREAUTH_FRAME_MAX} bytes)")
                    };
                    self.respond(slot, opcode, 0, &error(e.code(), message).into());
                    return Stop::Closed;
                }
            };
            *frames -= 1;
            if authenticated {
                // Only an authenticated client's requests count as activity.
                conn.last_active = Instant::now();
            }
            let started = Instant::now();
            let opcode = header.opcode;
            let response = match Request::decode(&header, body) {
                Ok(req) => self.request(slot, header.request_id, opcode, started, req, room),
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
                        self.index,
                        op,
                        started.elapsed(),
                        matches!(response, Response::Error(_)),
                    );
                }
                let answer = response.into();
                // Answered here: nothing was logged.
                let mark = self.hold_mark(false, &answer, None);
                self.respond_held(slot, opcode, header.request_id, &answer, mark);
            }
            // Else the shard's owner took it: `on_done` records and answers.
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

    pub(super) fn respond(&mut self, slot: usize, opcode: u8, request_id: u64, response: &Answer) {
        self.respond_held(slot, opcode, request_id, response, None);
    }

    /// [`Loop::respond`], the answer held until the log is durable up to
    /// `mark` when there is one.
    pub(super) fn respond_held(
        &mut self,
        slot: usize,
        opcode: u8,
        request_id: u64,
        response: &Answer,
        mark: Option<u64>,
    ) {
        if let Some(conn) = self.conns[slot].as_mut() {
            // An answer that waits for the log goes to the held buffer; the
            // others go out at once, ahead of held ones if need be (answers
            // come in the order they finish: docs/protocol.md).
            match mark {
                Some(mark) => {
                    let before = conn.held.len();
                    response.encode(opcode, request_id, &mut conn.held);
                    conn.held_on(conn.held.len() - before, mark);
                }
                None => response.encode(opcode, request_id, &mut conn.output),
            }
            let held = conn.buffered() + conn.reserved;
            let holding = !conn.holds.is_empty();
            self.note_held(held);
            if holding {
                self.note_holding(slot);
            }
        }
    }

    /// Writes the output until `WouldBlock`; watches for writability while
    /// some is left; resumes reading a throttled connection once it has
    /// room again.
    pub(super) fn flush(&mut self, slot: usize) {
        let max_output = self.shared.config.max_output_bytes;
        if !self.write_out(slot) {
            return;
        }
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        // Edge-triggered: a throttled connection's pending bytes raise no
        // new event, so once its output has room again it takes a turn
        // like any connection with work left.
        if conn.read_paused
            && !conn.closing
            && conn.output.len() < max_output / 2
            && conn.room(max_output) >= conn.room_needed()
        {
            conn.read_paused = false;
            self.requeue(slot);
        }
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        if conn.buffered() == 0 && conn.in_flight == 0 && conn.closing {
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
    pub(super) fn write_out(&mut self, slot: usize) -> bool {
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
                    // Moves the start: no new handle on the buffer.
                    conn.output.advance(n);
                }
                Err(e) if would_block(&e) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.close(slot, &format!("write error: {e}"));
                    return false;
                }
            }
        }
        if conn.output.is_empty() && conn.output.capacity() > READ_CHUNK {
            // Give back what a burst of large answers grew.
            conn.output = BytesMut::new();
        }
        true
    }
}
