//! Answers that wait for a replicated entry's commit, and the word that
//! lets them out.
//!
//! On a cluster node an operation runs on the leader's engine at once,
//! but its answer may leave only once the Raft entry holding its records
//! committed. Each operation's records are one batch, numbered in the
//! order the engine made them, and an entry holds consecutive batches;
//! the board and the tickets count batches. One thread, the leadership's
//! committer, learns each entry's outcome in order and notes it on a
//! [`Board`]; the event loops hold the answers, each with the [`Ticket`]
//! of its batch, in [`Held`]; a loop
//! holding answers raises its flag in [`Told`], and the committer, after
//! each note, tells every loop whose flag is up (and only those) to look
//! again.
//!
//! No word is lost: a loop raises its flag before it reads the board, and
//! the committer notes an outcome before it reads the flags. Either the
//! loop's read comes after the note, or the committer's read of the flags
//! comes after the flag went up: a sequentially consistent fence on each
//! side, between its write and its read ([`Told::wait`], [`Told::tell`]),
//! makes one of the two reads see the other side's write (no lock on
//! either side). It is checked under loom through the server's loops
//! (`scripts/loom.sh`), which fails with either fence taken out.
//!
//! No answer leaves early or wrong: an answer is let out only once its
//! entry's outcome is on the board, in the order its operations ran. An
//! entry refused before it was appended (another node leads) makes
//! nothing, so its operation may run again elsewhere; one whose outcome is
//! unknown (no quorum in time, leadership lost after the append) is
//! answered as such; neither is ever answered as done. Once an entry
//! failed, every later entry of the same board fails the same way, unless
//! a later one is known to have committed (then the earlier ones did too:
//! a Raft log commits in order).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::sync::{fence, AtomicBool, AtomicU64, Ordering};

/// How an entry did not commit; `leader` is the node that leads instead,
/// when known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Refused before it was appended: nothing of it was made.
    Refused {
        /// The leader, when known.
        leader: Option<u64>,
    },
    /// It may or may not commit.
    Unknown {
        /// The leader, when known.
        leader: Option<u64>,
    },
}

/// What an answer says of an entry whose outcome is unknown.
pub const UNKNOWN_WHY: &str =
    "leadership was lost before the change committed: it may or may not have been made";

/// An entry's outcome: committed, or how it failed.
pub type Outcome = Result<(), Failure>;

/// The outcomes of one leadership's batches of records (each
/// operation's), numbered from 1 in the order they were made; an entry
/// holds consecutive batches, and its outcome is noted for its last batch
/// when it committed, for its first when it failed. Noted by one thread
/// at a time (the leadership's committer), read by any, with no lock:
/// atomics, every note and look sequentially consistent (so a loop's flag
/// and the board order as the module docs say).
pub struct Board {
    /// Every batch up to this one committed.
    through: AtomicU64,
    /// The first batch that failed (0: none yet); set once, after `how`.
    failed_at: AtomicU64,
    /// How it failed: [`REFUSED`] or [`UNKNOWN`], and the leader named
    /// ([`NO_LEADER`]: none).
    how: AtomicU64,
    leader: AtomicU64,
}

const REFUSED: u64 = 1;
const UNKNOWN: u64 = 2;
const NO_LEADER: u64 = u64::MAX;

impl Default for Board {
    fn default() -> Board {
        Board::new()
    }
}

impl Board {
    /// A board on which nothing is noted yet.
    pub fn new() -> Board {
        Board {
            through: AtomicU64::new(0),
            failed_at: AtomicU64::new(0),
            how: AtomicU64::new(0),
            leader: AtomicU64::new(NO_LEADER),
        }
    }

    /// Notes batch `k`'s outcome (the first failure is kept; a commit
    /// counts for every batch before it too). One thread at a time.
    pub fn note(&self, k: u64, outcome: Outcome) {
        match outcome {
            Ok(()) => {
                self.through.fetch_max(k, Ordering::SeqCst);
            }
            Err(how) => {
                if self.failed_at.load(Ordering::SeqCst) != 0 {
                    return;
                }
                let (kind, leader) = match how {
                    Failure::Refused { leader } => (REFUSED, leader),
                    Failure::Unknown { leader } => (UNKNOWN, leader),
                };
                self.how.store(kind, Ordering::Relaxed);
                self.leader
                    .store(leader.unwrap_or(NO_LEADER), Ordering::Relaxed);
                // Published after how it failed: a look that sees the
                // failure sees how.
                self.failed_at.store(k.max(1), Ordering::SeqCst);
            }
        }
    }

    /// The first failure, if any: its batch and how.
    fn first_failure(&self) -> Option<(u64, Failure)> {
        let f = self.failed_at.load(Ordering::SeqCst);
        if f == 0 {
            return None;
        }
        let leader = match self.leader.load(Ordering::Relaxed) {
            NO_LEADER => None,
            l => Some(l),
        };
        let how = match self.how.load(Ordering::Relaxed) {
            REFUSED => Failure::Refused { leader },
            _ => Failure::Unknown { leader },
        };
        Some((f, how))
    }

    /// Batch `k`'s outcome, once known: committed, or failed (it or a
    /// batch before it). The failure is read before how far batches
    /// committed (which only grows): so both are as they stood together
    /// when the failure was read, as under a lock.
    pub fn outcome(&self, k: u64) -> Option<Outcome> {
        let failed = self.first_failure();
        if self.through.load(Ordering::SeqCst) >= k {
            return Some(Ok(()));
        }
        match failed {
            Some((f, how)) if f <= k => Some(Err(how)),
            _ => None,
        }
    }

    /// How far its batches committed.
    pub fn through(&self) -> u64 {
        self.through.load(Ordering::SeqCst)
    }

    /// Whether one of its batches failed.
    pub fn failed(&self) -> bool {
        self.failed_at.load(Ordering::SeqCst) != 0
    }
}

/// Where an operation's answer stands: the batch holding its records (or
/// the last one it saw).
#[derive(Clone)]
pub struct Ticket {
    board: Arc<Board>,
    k: u64,
}

impl Ticket {
    /// Batch `k` of `board`.
    pub fn new(board: Arc<Board>, k: u64) -> Ticket {
        Ticket { board, k }
    }

    /// The batch's outcome, once known.
    pub fn outcome(&self) -> Option<Outcome> {
        self.board.outcome(self.k)
    }
}

/// Per event loop: it holds answers and waits for word of the next
/// outcome.
pub struct Told {
    waiting: Vec<AtomicBool>,
}

impl Told {
    /// Flags for `loops` loops, all down.
    pub fn new(loops: usize) -> Told {
        Told {
            waiting: (0..loops).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// Loop `lp` waits for word of the next outcome. The fence orders the
    /// flag before the loop's next look at the board; with the fence in
    /// [`Told::tell`], either that look sees the outcome or the committer
    /// sees the flag.
    pub fn wait(&self, lp: usize) {
        if let Some(w) = self.waiting.get(lp) {
            w.store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
        }
    }

    /// After an outcome was noted: `tell` each loop that waits for word
    /// (its flag goes down). The fence orders the note before the look
    /// at the flags.
    pub fn tell(&self, mut tell: impl FnMut(usize)) {
        fence(Ordering::SeqCst);
        for (lp, w) in self.waiting.iter().enumerate() {
            if w.load(Ordering::SeqCst) && w.swap(false, Ordering::SeqCst) {
                tell(lp);
            }
        }
    }
}

/// The answers one loop holds: per board's owner (a partition), in the
/// order their operations ran.
pub struct Held<T> {
    parts: Vec<VecDeque<(Ticket, T)>>,
}

impl<T> Default for Held<T> {
    fn default() -> Held<T> {
        Held { parts: Vec::new() }
    }
}

impl<T> Held<T> {
    /// Holds `answer` of partition `part` until `ticket`'s outcome is
    /// known (the loop then calls [`Held::take_done`]: it may be known
    /// already).
    pub fn push(&mut self, part: usize, ticket: Ticket, answer: T) {
        if self.parts.len() <= part {
            self.parts.resize_with(part + 1, VecDeque::new);
        }
        self.parts[part].push_back((ticket, answer));
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.parts.iter().all(VecDeque::is_empty)
    }

    /// Gives `done` (partition, answer, outcome) each answer whose
    /// outcome is known, in order per partition; while answers are left,
    /// loop `lp` waits for word of the next outcome (`told`).
    pub fn take_done(&mut self, lp: usize, told: &Told, mut done: impl FnMut(usize, T, Outcome)) {
        // The flag goes up before the look: an outcome noted after the
        // look below sends word.
        if !self.is_empty() {
            told.wait(lp);
        }
        for (g, part) in self.parts.iter_mut().enumerate() {
            while let Some(outcome) = part.front().and_then(|(t, _)| t.outcome()) {
                let Some((_, answer)) = part.pop_front() else {
                    break;
                };
                done(g, answer, outcome);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_done_once_it_or_a_later_one_committed() {
        let board = Board::new();
        assert_eq!(board.outcome(1), None);
        board.note(2, Ok(()));
        assert_eq!(board.outcome(1), Some(Ok(())));
        assert_eq!(board.outcome(2), Some(Ok(())));
        assert_eq!(board.outcome(3), None);
        assert_eq!(board.through(), 2);
    }

    #[test]
    fn a_failure_answers_for_its_entry_and_every_later_one_never_ok() {
        let board = Board::new();
        board.note(1, Ok(()));
        board.note(2, Err(Failure::Refused { leader: Some(3) }));
        board.note(3, Err(Failure::Unknown { leader: None }));
        assert!(board.failed());
        assert_eq!(board.outcome(1), Some(Ok(())));
        let refused = Some(Err(Failure::Refused { leader: Some(3) }));
        assert_eq!(board.outcome(2), refused);
        assert_eq!(board.outcome(3), refused, "the first failure is kept");
        assert_eq!(board.outcome(9), refused);
    }

    #[test]
    fn held_answers_leave_in_order_and_only_once_known() {
        let (a, b) = (Arc::new(Board::new()), Arc::new(Board::new()));
        let told = Told::new(2);
        let mut held = Held::default();
        held.push(0, Ticket::new(a.clone(), 1), "a1");
        held.push(0, Ticket::new(a.clone(), 2), "a2");
        held.push(3, Ticket::new(b.clone(), 1), "b1");
        let mut out = Vec::new();
        held.take_done(1, &told, |g, x, o| out.push((g, x, o)));
        assert!(out.is_empty());
        let mut word = Vec::new();
        told.tell(|lp| word.push(lp));
        assert_eq!(word, [1], "the loop holding answers waits for word");
        // The second entry committing lets out both, in order; the other
        // partition's answer stays.
        a.note(2, Ok(()));
        held.take_done(1, &told, |g, x, o| out.push((g, x, o)));
        assert_eq!(out, [(0, "a1", Ok(())), (0, "a2", Ok(()))]);
        b.note(1, Err(Failure::Unknown { leader: None }));
        out.clear();
        held.take_done(1, &told, |g, x, o| out.push((g, x, o)));
        assert_eq!(out, [(3, "b1", Err(Failure::Unknown { leader: None }))]);
        assert!(held.is_empty());
        // Nothing is held: word is not waited for.
        word.clear();
        told.tell(|lp| word.push(lp));
        assert_eq!(word, [1], "raised by the look that still held b1");
        held.take_done(1, &told, |_, _, _| panic!("nothing is held"));
        told.tell(|lp| word.push(lp));
        assert_eq!(word, [1]);
    }
}
