//! Connections moving to the event loop their requests go to: after
//! [`MOVE_AFTER`] requests in a row to one other loop's shards, once
//! nothing of the connection is away, it is handed over with its buffers
//! and held answers, and its requests run there with no hand-off.

use std::sync::atomic::Ordering;

use mio::Interest;
use tracing::debug;

use super::conn::{Conn, ConnRef, Phase};
use super::FrontEnd;
use crate::server::mailbox::Msg;
use crate::server::Back;

/// Requests in a row a connection sends to one other loop's shards before
/// it moves to that loop (then they run where it lives, with no hand-off).
pub const MOVE_AFTER: u32 = 32;

impl FrontEnd {
    /// Counts a request's first hop into the connection's streak; a streak
    /// of [`MOVE_AFTER`] to one other loop marks the connection to move
    /// there.
    pub(super) fn note_streak(&mut self, slot: usize, first: usize, local: bool) {
        let stopping = self.shared.stopping.load(Ordering::Acquire);
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        // A cluster node's endpoint is no loop: nothing to move to.
        if local || first >= self.shared.loops.owners() {
            conn.streak = (usize::MAX, 0);
            return;
        }
        conn.streak = if conn.streak.0 == first {
            (first, conn.streak.1.saturating_add(1))
        } else {
            (first, 1)
        };
        if conn.streak.1 >= MOVE_AFTER && conn.phase == Phase::Open && !stopping {
            conn.phase = Phase::Moving { to: first };
        }
    }

    /// Hands a connection with nothing away (no request at another loop,
    /// no parked receive) to loop `dest`, with its buffers and held
    /// answers.
    pub(super) fn move_conn(&mut self, slot: usize, dest: usize, back: &mut Back<'_>) {
        let Some(mut conn) = self.conns[slot].take() else {
            return;
        };
        let _ = self.registry.deregister(conn.stream.socket());
        self.free.push(slot);
        // Only an authenticated connection's requests reach a shard, so a
        // moving one is not counted among the unauthenticated.
        debug_assert!(!conn.unauthenticated());
        conn.phase = Phase::Open;
        conn.streak = (usize::MAX, 0);
        conn.owners_paused = false;
        conn.queued = false;
        conn.listed_holding = false;
        self.shared.metrics.moved.fetch_add(1, Ordering::Relaxed);
        debug!(peer = %conn.peer, from = self.index, to = dest, "connection moved");
        back.post.send(dest, Msg::Moved(Box::new(conn)));
    }

    /// Takes in a connection another loop moved here.
    pub(in crate::server) fn adopt_moved(&mut self, conn: Box<Conn>, back: &mut Back<'_>) {
        let mut conn = *conn;
        if self.shared.stopping.load(Ordering::Acquire) && conn.buffered() == 0 {
            // Moved while the server began to stop: nothing is owed to it.
            self.forget_connection();
            return;
        }
        let interest = if conn.output.is_empty() && !conn.stream.wants_write() {
            Interest::READABLE
        } else {
            Interest::READABLE | Interest::WRITABLE
        };
        let Some(slot) = self.register(conn.stream.socket(), interest) else {
            return;
        };
        conn.writable_interest = interest.is_writable();
        conn.generation = self.generation;
        let c = ConnRef {
            slot,
            generation: conn.generation,
        };
        let holds = !conn.holds.is_empty();
        conn.listed_holding = holds;
        let paused = conn.listed_paused;
        self.conns[slot] = Some(conn);
        if holds {
            back.wait.holding(c);
        }
        if paused {
            back.wait.paused(c);
        }
        // Bytes may wait in its input or its socket: a turn now.
        self.requeue(slot);
    }
}
