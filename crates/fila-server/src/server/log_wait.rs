//! The log wait of a loop: answers held until the log is durable up to
//! them, and connections paused while the log's backlog is full.
//!
//! With `sync = always` an answer to a call that logged a change (the
//! engine says so: `Owner::changes`) is encoded at once into its
//! connection's held buffer, in regions held on a mark, and moved to the
//! output when the writer has synced the batch that holds its records. So
//! is an answer that hands out messages (receive, peek, receive-deferred)
//! while a message stored on their shard is not durable yet. Other answers
//! go out at once, ahead of held ones if need be (answers come in the order
//! they finish). The writer wakes the loops that asked for it.
//!
//! The held bytes are the connection's (the front end's); the log wait
//! keeps which connections hold some and which are paused, the marks, and
//! the asking for wake-ups.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::front::ConnRef;
use super::Shared;
use crate::dispatch::Answer;

/// Bytes of records the log writer may have waiting: past it, requests
/// that add payloads to the log (puts, redrives) wait until it catches up;
/// past twice it, every request does.
pub const LOG_BACKLOG_MAX: u64 = 64 << 20;

/// A loop's log wait (see the module docs).
pub(in crate::server) struct LogWait {
    index: usize,
    shared: Arc<Shared>,
    /// Connections with answers held for the log.
    holding: Vec<ConnRef>,
    /// Connections that stopped reading while the log's backlog is full.
    paused: Vec<ConnRef>,
}

impl LogWait {
    pub(in crate::server) fn new(index: usize, shared: Arc<Shared>) -> LogWait {
        LogWait {
            index,
            shared,
            holding: Vec::new(),
            paused: Vec::new(),
        }
    }

    /// The mark an answer is held on, if it is held: the answer to a call
    /// that `logged` a change, and an answer that hands out a message of
    /// shard `shard` that may not be durable yet (stored there after the
    /// latest message made durable): no message id or sequence number
    /// reaches anyone before its put is durable (a crash would give them to
    /// the next put). Messages of a backlog, durable long ago, go at once.
    pub(in crate::server) fn hold_mark(
        &self,
        logged: bool,
        answer: &Answer,
        shard: Option<usize>,
    ) -> Option<u64> {
        if !self.shared.hold {
            return None;
        }
        let marks = self.shared.marks.as_ref()?;
        let wait = logged
            || answer
                .newest_message()
                .is_some_and(|newest| shard.is_some_and(|s| marks.pending_since(s, newest)));
        if !wait {
            return None;
        }
        // Ask for the wake-up before the mark is read: a batch that
        // completes at once (its records were taken by the one before) then
        // still finds this loop waiting and wakes it.
        // Only this loop writes its flag, so a true it reads is its own
        // (stored SeqCst) and still stands.
        let waiting = &self.shared.loops.get(self.index).waiting_for_log;
        if !waiting.load(Ordering::Relaxed) {
            waiting.store(true, Ordering::SeqCst);
        }
        Some(marks.mark())
    }

    /// Whether a connection's next request (of `opcode`, as far as its head
    /// is in) waits for the log writer: past [`LOG_BACKLOG_MAX`] of records
    /// waiting, a request that adds payloads to the log (a put, a redrive)
    /// waits — the connections that make the backlog are throttled, the
    /// others' requests go on; past twice that, every request waits. The
    /// caller lists the connection ([`LogWait::paused`]) when it waits.
    pub(in crate::server) fn log_full(&mut self, opcode: Option<u8>) -> bool {
        let Some(marks) = self.shared.marks.as_ref() else {
            return false;
        };
        let backlog = marks.backlog_bytes();
        if backlog <= LOG_BACKLOG_MAX {
            return false;
        }
        let heavy = opcode
            .and_then(crate::ops::op)
            .is_some_and(|op| op.adds_payloads);
        if !heavy && backlog <= 2 * LOG_BACKLOG_MAX {
            return false;
        }
        // Past the line at every check: the writer wakes this loop when it
        // catches up.
        self.want_wakeups(true);
        true
    }

    /// Lists a connection paused for the log's backlog (once: the front
    /// end knows whether it is listed).
    pub(in crate::server) fn paused(&mut self, c: ConnRef) {
        self.paused.push(c);
        self.want_wakeups(false);
    }

    /// Lists a connection that holds answers for the log (once: the front
    /// end knows whether it is listed).
    pub(in crate::server) fn holding(&mut self, c: ConnRef) {
        self.holding.push(c);
        self.want_wakeups(false);
    }

    /// Asks the writer for a wake-up while anything waits for it (or
    /// `anyway`).
    fn want_wakeups(&self, anyway: bool) {
        let want = anyway || !self.holding.is_empty() || !self.paused.is_empty();
        self.shared
            .loops
            .get(self.index)
            .waiting_for_log
            .store(want, Ordering::SeqCst);
    }

    /// The connections holding answers, taken to be released up to the
    /// durable mark it answers (each that still holds some after is
    /// listed again with [`LogWait::holding`]); none without a log or
    /// when none holds any.
    pub(in crate::server) fn take_holding(&mut self) -> Option<(u64, Vec<ConnRef>)> {
        let marks = self.shared.marks.as_ref()?;
        if self.holding.is_empty() {
            return None;
        }
        Some((marks.durable(), std::mem::take(&mut self.holding)))
    }

    /// The connections paused for the backlog, once it is back under
    /// [`LOG_BACKLOG_MAX`]: they go on.
    pub(in crate::server) fn take_resumable(&mut self) -> Vec<ConnRef> {
        match self.shared.marks.as_ref() {
            Some(marks) if !self.paused.is_empty() && marks.backlog_bytes() <= LOG_BACKLOG_MAX => {
                std::mem::take(&mut self.paused)
            }
            _ => Vec::new(),
        }
    }

    /// Asks for a wake-up from the writer exactly while something waits
    /// for it (after a release).
    pub(in crate::server) fn settle(&self) {
        if self.shared.marks.is_some() {
            self.want_wakeups(false);
        }
    }
}
