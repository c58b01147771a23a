//! Connections moving to the event loop their requests go to: after
//! [`MOVE_AFTER`] requests in a row to one other loop's shards, once
//! nothing of the connection is away, it is handed over with its buffers
//! and held answers, and its requests run there with no hand-off.

use super::*;

/// Requests in a row a connection sends to one other loop's shards before
/// it moves to that loop (then they run where it lives, with no hand-off).
pub const MOVE_AFTER: u32 = 32;

impl Loop {
    /// Counts a request's first hop into the connection's streak; a streak
    /// of [`MOVE_AFTER`] to one other loop marks the connection to move
    /// there.
    pub(super) fn note_streak(&mut self, slot: usize, first: usize, local: bool) {
        let stopping = self.shared.stopping.load(Ordering::Acquire);
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        if local {
            conn.streak = (usize::MAX, 0);
            return;
        }
        conn.streak = if conn.streak.0 == first {
            (first, conn.streak.1.saturating_add(1))
        } else {
            (first, 1)
        };
        if conn.streak.1 >= MOVE_AFTER && conn.moving_to.is_none() && !stopping {
            conn.moving_to = Some(first);
        }
    }

    /// Hands a connection with nothing away (no request at another loop,
    /// no parked receive) to loop `dest`, with its buffers and held
    /// answers.
    pub(super) fn move_conn(&mut self, slot: usize, dest: usize) {
        let Some(mut conn) = self.conns[slot].take() else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut conn.stream);
        self.free.push(slot);
        // Only an authenticated connection's requests reach a shard, so a
        // moving one is not counted among the unauthenticated.
        debug_assert!(!conn.unauthenticated);
        conn.moving_to = None;
        conn.streak = (usize::MAX, 0);
        conn.owners_paused = false;
        conn.queued = false;
        conn.in_holding = false;
        self.shared.metrics.moved.fetch_add(1, Ordering::Relaxed);
        debug!(peer = %conn.peer, from = self.index, to = dest, "connection moved");
        self.send_to(dest, Msg::Moved(Box::new(conn)));
    }

    /// Takes in a connection another loop moved here.
    pub(super) fn adopt_moved(&mut self, conn: Box<Conn>) {
        let mut conn = *conn;
        if self.shared.stopping.load(Ordering::Acquire) && conn.buffered() == 0 {
            // Moved while the server began to stop: nothing is owed to it.
            self.forget_connection();
            return;
        }
        let interest = if conn.output.is_empty() {
            Interest::READABLE
        } else {
            Interest::READABLE | Interest::WRITABLE
        };
        let Some(slot) = self.register(&mut conn.stream, interest) else {
            return;
        };
        conn.writable_interest = !conn.output.is_empty();
        conn.generation = self.generation;
        let holds = !conn.holds.is_empty();
        let log_paused = conn.log_paused;
        let generation = conn.generation;
        self.conns[slot] = Some(conn);
        if holds {
            self.note_holding(slot);
        }
        if log_paused {
            self.log_paused.push((slot, generation));
            self.want_wakeups();
        }
        // Bytes may wait in its input or its socket: a turn now.
        self.requeue(slot);
    }
}
