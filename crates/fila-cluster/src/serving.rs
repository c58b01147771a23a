//! The engine a partition's leader serves from, for one leadership
//! ([`Serving`]), and its entries: the records each operation makes are
//! one batch, numbered, handed by message to the leadership's task
//! ([`lead`]), which gathers the batches into Raft entries (at most
//! [`ENTRIES_IN_FLIGHT`] waiting for their commit; what is handed over
//! meanwhile goes into the next one), submits them and notes each
//! entry's outcome in order, by its batches' numbers, on a [`Board`]
//! (fila-core's, which the loops holding answers read); a [`Ticket`] for
//! an operation's answer. The engine's holder never waits for openraft,
//! and the task never takes the engine. A receive parked in the engine
//! that a later call completes is kept with the batch holding its
//! deliveries, for its home to answer (`Slot::take_woken`).

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use fila_core::commits::{Board, Failure, Ticket};
use fila_core::event::{Event, EventSink};
use fila_core::Owner;
use fila_store::codec::batch_push;
use fila_wal::Storage;
use openraft::impls::ProgressResponder;
use openraft::Raft;

use crate::replica::{LeaderId, ReplicaError, COMMIT_TIMEOUT};
use crate::{Batch, StateMachine, TypeConfig};

/// The records the leader's engine makes, captured for the operation
/// running (only the engine's holder touches them).
pub(crate) struct Capture(pub(crate) Arc<Mutex<Vec<u8>>>);

impl EventSink for Capture {
    fn record(&mut self, event: &Event<'_>) {
        if let Ok(mut b) = self.0.lock() {
            batch_push(event, &mut b);
        }
    }
}

/// The shards of the engine a leader serves from that one home keeps, for
/// one leadership: their owner. Each operation's records are one batch,
/// numbered from 1 in the owner, handed to the engine's leadership task
/// ([`lead`]), which gathers every owner's batches into entries, submits
/// those and notes their outcomes on each owner's board by batch number:
/// whoever holds an owner never waits for openraft, and the task never
/// takes one. Each owner's batches are in the log in the order it made
/// them; two owners' are independent (as a single node's shards' records
/// are in its log): only a dead letter crosses between them, as the one
/// record its target's shard makes.
pub(crate) struct Serving {
    pub(crate) owner: Owner,
    /// Which of how many homes it is at, the engine's shards, and the
    /// build of the engine it is part of (the owners of one build share
    /// its counters and task).
    index: usize,
    pub(crate) homes: usize,
    pub(crate) shards: usize,
    pub(crate) build: u64,
    /// Dead letters bound for queues of shards other homes keep.
    outbox: Vec<fila_core::Transit>,
    /// The leadership task (the first owner keeps it), until someone
    /// waits for its end.
    lead: Option<tokio::task::JoinHandle<()>>,
    /// What the engine's journal captured for the operation running.
    captured: Arc<Mutex<Vec<u8>>>,
    pub(crate) leader: LeaderId,
    /// Batches handed to the leadership's task so far.
    batches: u64,
    /// How far its batches committed, or that one failed.
    board: Arc<Board>,
    /// Sent after each outcome noted on the boards (for tasks waiting on
    /// one).
    noted: Arc<tokio::sync::watch::Sender<()>>,
    /// Each batch, with its owner's index, to the leadership's task
    /// (which ends once every owner of the engine is dropped and what
    /// they sent is settled).
    to_lead: tokio::sync::mpsc::UnboundedSender<(usize, u64, Vec<u8>)>,
    /// Receives parked here that its calls completed, not yet taken: the
    /// wait, the result, the batch holding its deliveries.
    woken: Vec<Completed>,
}

/// A completed parked receive: its wait, its result, its batch (what
/// [`crate::home::Woken`] holds, with the batch's number for its ticket).
type Completed = (
    fila_core::WaitId,
    Result<Vec<fila_core::Message>, fila_core::Error>,
    Option<u64>,
);

/// An entry's outcome waited for in a task ([`crate::Replica::execute`]).
pub(crate) struct Settle {
    ticket: Ticket,
    noted: tokio::sync::watch::Receiver<()>,
}

impl Settle {
    /// The entry's outcome, waited for at most `within` (then unknown).
    pub(crate) async fn settled(mut self, within: std::time::Duration) -> Result<(), ReplicaError> {
        let ticket = &self.ticket;
        // Each note is sent after it is on the board: a look that misses
        // it is followed by the send.
        let known = self.noted.wait_for(|_| ticket.outcome().is_some());
        match tokio::time::timeout(within, known).await {
            Ok(Ok(_)) => match ticket.outcome() {
                Some(outcome) => outcome.map_err(failed),
                None => Err(ReplicaError::Unknown { leader: None }),
            },
            _ => Err(ReplicaError::Unknown { leader: None }),
        }
    }
}

/// Told after each entry's outcome is noted.
pub type OnCommit = Arc<dyn Fn() + Send + Sync>;

/// A submitted entry's commit, to wait for.
type Commit = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ReplicaError>> + Send>>;

/// What an entry's failure answers.
fn failed(how: Failure) -> ReplicaError {
    match how {
        Failure::Refused { leader } => ReplicaError::NotLeader { leader },
        Failure::Unknown { leader } => ReplicaError::Unknown { leader },
    }
}

/// Where an operation's answer stands once it ran on the engine.
pub(crate) enum Ran {
    /// Batch `k` holds its records: its answer waits for `k`.
    Made(u64),
    /// It made none, and batch `k`, the last it saw, is not committed
    /// yet: its answer waits for `k`.
    Saw(u64),
    /// It made no records and every batch it saw committed.
    Settled,
}

impl Serving {
    /// The owners (one a home, each with where its records are
    /// captured) of build `build` of the engine of leadership `leader`,
    /// of `shards` shards, with their leadership task started (ended once
    /// every owner is dropped and what they sent is settled); `on_commit`
    /// is told after each entry's outcome.
    pub(crate) fn start_engine<S: Storage + 'static>(
        owners: Vec<(Owner, Arc<Mutex<Vec<u8>>>)>,
        shards: usize,
        build: u64,
        leader: LeaderId,
        raft: &Raft<TypeConfig, StateMachine<S>>,
        on_commit: Option<OnCommit>,
    ) -> Vec<Serving> {
        let homes = owners.len();
        let boards: Vec<Arc<Board>> = (0..homes).map(|_| Arc::new(Board::new())).collect();
        let noted = Arc::new(tokio::sync::watch::channel(()).0);
        let (to_lead, batches) = tokio::sync::mpsc::unbounded_channel();
        let mut lead = Some(tokio::spawn(lead(
            batches,
            Leadership {
                boards: boards.clone(),
                noted: noted.clone(),
                raft: raft.clone(),
                leader,
                on_commit,
            },
        )));
        owners
            .into_iter()
            .zip(boards)
            .enumerate()
            .map(|(index, ((owner, captured), board))| Serving {
                owner,
                index,
                homes,
                shards,
                build,
                outbox: Vec::new(),
                lead: lead.take(),
                captured,
                leader,
                batches: 0,
                board,
                noted: noted.clone(),
                to_lead: to_lead.clone(),
                woken: Vec::new(),
            })
            .collect()
    }

    /// Runs `op` on the owner, taking in a dead letter for its shards and
    /// keeping those for other homes' ([`crate::Slot::take_outbox`]),
    /// and hands the records it made to the leadership's task as the next
    /// batch: its result, and where its answer stands.
    pub(crate) fn run<R>(&mut self, op: impl FnOnce(&mut Owner) -> R) -> (R, Ran) {
        let result = op(&mut self.owner);
        let woken_before = self.woken.len();
        while self.owner.has_output() {
            for t in self.owner.take_transit() {
                if self.owner.owns(t.shard(self.shards)) {
                    self.owner.accept(t);
                } else {
                    self.outbox.push(t);
                }
            }
            for c in self.owner.take_completions() {
                // Parked receives this call completed: their deliveries
                // are in its batch.
                self.woken.push((c.wait, c.result, None));
            }
        }
        let records = std::mem::take(&mut *self.captured.lock().unwrap_or_else(|p| p.into_inner()));
        if !records.is_empty() {
            self.batches += 1;
            for w in &mut self.woken[woken_before..] {
                if w.1.as_ref().is_ok_and(|ms| !ms.is_empty()) {
                    w.2 = Some(self.batches);
                }
            }
            // Refused only once the task ended (a failure): the board
            // answers this batch so.
            let _ = self.to_lead.send((self.index, self.batches, records));
            return (result, Ran::Made(self.batches));
        }
        if self.batches > self.board.through() {
            (result, Ran::Saw(self.batches))
        } else {
            (result, Ran::Settled)
        }
    }

    /// Whether dead letters for other homes' shards wait to be taken.
    pub(crate) fn has_outbox(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// The dead letters for other homes' shards since the last look.
    pub(crate) fn take_outbox(&mut self) -> Vec<fila_core::Transit> {
        std::mem::take(&mut self.outbox)
    }

    /// The leadership task, to wait for its end (once).
    pub(crate) fn take_lead(&mut self) -> Option<tokio::task::JoinHandle<()>> {
        self.lead.take()
    }

    /// The parked receives its calls completed since the last look, each
    /// with the ticket of the batch holding its deliveries.
    pub(crate) fn take_woken(&mut self) -> Vec<crate::home::Woken> {
        let woken = std::mem::take(&mut self.woken);
        woken
            .into_iter()
            .map(|(wait, result, k)| crate::home::Woken {
                wait,
                result,
                ticket: k.map(|k| self.ticket(k)),
            })
            .collect()
    }

    /// The ticket of batch `k` of this engine.
    pub(crate) fn ticket(&self, k: u64) -> Ticket {
        Ticket::new(self.board.clone(), k)
    }

    /// Batch `k`'s outcome, to be waited for in a task.
    pub(crate) fn settle(&self, k: u64) -> Settle {
        Settle {
            ticket: self.ticket(k),
            noted: self.noted.subscribe(),
        }
    }

    /// Whether one of its entries failed (it is not served from again).
    pub(crate) fn failed(&self) -> bool {
        self.board.failed()
    }
}

/// Bytes of records gathered in one entry at most, unless a single
/// operation made more.
pub(crate) const ENTRY_BYTES: usize = 1 << 20;

/// Entries of one leadership in flight at most: the batches handed over
/// while this many wait for their commit go into the next entry,
/// submitted as soon as one of them commits — one entry, one append on
/// each replica, one apply, for every operation that ran meanwhile.
pub(crate) const ENTRIES_IN_FLIGHT: usize = 4;

/// What a leadership's task works with.
struct Leadership<S: Storage + 'static> {
    /// Each shard's.
    boards: Vec<Arc<Board>>,
    noted: Arc<tokio::sync::watch::Sender<()>>,
    raft: Raft<TypeConfig, StateMachine<S>>,
    leader: LeaderId,
    on_commit: Option<OnCommit>,
}

impl<S: Storage + 'static> Leadership<S> {
    /// Notes an entry's outcome, `spans` its batches of each shard (first,
    /// last), then tells whoever waits. Committed: each shard's last
    /// batch in it. Failed: on every shard, its first batch in the entry
    /// or, with none there, its first not yet settled (every entry before
    /// was noted, in order): a failure answers for every later batch of
    /// every shard, and the task submits nothing more.
    fn note(&self, spans: &[Option<(u64, u64)>], outcome: Result<(), ReplicaError>) {
        let outcome = outcome.map_err(failure);
        for (board, span) in self.boards.iter().zip(spans) {
            match (outcome, span) {
                (Ok(()), Some((_, last))) => board.note(*last, Ok(())),
                (Ok(()), None) => {}
                (Err(how), Some((first, _))) => board.note(*first, Err(how)),
                (Err(how), None) => board.note(board.through() + 1, Err(how)),
            }
        }
        self.noted.send_replace(());
        if let Some(f) = &self.on_commit {
            f();
        }
    }

    /// Whether an entry failed (then nothing more is submitted).
    fn failed(&self) -> bool {
        self.boards.iter().any(|b| b.failed())
    }

    /// Submits `records` as the next entry, on the condition that this
    /// leadership still holds: its commit, waited for at most
    /// [`COMMIT_TIMEOUT`].
    async fn submit(&self, records: Vec<u8>) -> Commit {
        let (responder, committed) = ProgressResponder::complete_only();
        let written = self
            .raft
            .write(Batch(Bytes::from(records)))
            .with_leader(self.leader)
            .responder(responder)
            .await;
        if let Err(fatal) = written {
            let e = ReplicaError::Raft(fatal.to_string());
            return Box::pin(std::future::ready(Err(e)));
        }
        let deadline = tokio::time::Instant::now() + COMMIT_TIMEOUT;
        Box::pin(async move { outcome(tokio::time::timeout_at(deadline, committed).await) })
    }
}

/// What a leadership's task waits for next.
enum Next {
    /// A batch from a shard, with its shard; `None` once every shard is
    /// dropped.
    Batch(Option<(usize, u64, Vec<u8>)>),
    /// The outcome of the oldest entry in flight.
    Outcome(Result<(), ReplicaError>),
}

/// Each shard's batches in an entry: its first and last, if any.
type Spans = Vec<Option<(u64, u64)>>;

/// A leadership's task: gathers the batches of the engine's shards into
/// entries (one entry for every batch handed over while
/// [`ENTRIES_IN_FLIGHT`] wait, up to [`ENTRY_BYTES`]), submits each, and
/// notes each entry's outcome in order, by its batches' numbers on each
/// shard's board. After a failure it submits nothing more (the boards
/// answer every later batch), but still notes the entries in flight. Ends
/// once every shard is dropped and every entry it submitted is settled,
/// or after a failure once those are.
async fn lead<S: Storage + 'static>(
    mut batches: tokio::sync::mpsc::UnboundedReceiver<(usize, u64, Vec<u8>)>,
    l: Leadership<S>,
) {
    let shards = l.boards.len();
    // Each entry in flight: its spans, and its commit.
    let mut in_flight: std::collections::VecDeque<(Spans, Commit)> = Default::default();
    let mut gathered: Vec<u8> = Vec::new();
    let mut spans: Spans = vec![None; shards];
    let mut open = true;
    loop {
        while open && gathered.len() < ENTRY_BYTES {
            match batches.try_recv() {
                Ok(batch) => gather(&mut gathered, &mut spans, batch),
                Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => open = false,
            }
        }
        if l.failed() {
            // Nothing more is submitted; the engine is rebuilt.
            gathered.clear();
            batches.close();
            open = false;
        } else if !gathered.is_empty()
            && (in_flight.len() < ENTRIES_IN_FLIGHT || gathered.len() >= ENTRY_BYTES)
        {
            let commit = l.submit(std::mem::take(&mut gathered)).await;
            in_flight.push_back((std::mem::replace(&mut spans, vec![None; shards]), commit));
            continue;
        }
        if in_flight.is_empty() && !open {
            return;
        }
        let next = std::future::poll_fn(|cx| {
            if let Some((_, commit)) = in_flight.front_mut() {
                if let std::task::Poll::Ready(o) = commit.as_mut().poll(cx) {
                    return std::task::Poll::Ready(Next::Outcome(o));
                }
            }
            if open {
                if let std::task::Poll::Ready(b) = batches.poll_recv(cx) {
                    return std::task::Poll::Ready(Next::Batch(b));
                }
            }
            std::task::Poll::Pending
        })
        .await;
        match next {
            Next::Batch(Some(batch)) => gather(&mut gathered, &mut spans, batch),
            Next::Batch(None) => open = false,
            Next::Outcome(outcome) => {
                let (spans, _) = in_flight.pop_front().expect("polled");
                l.note(&spans, outcome);
            }
        }
    }
}

/// Adds batch `k` of shard `shard` to the entry being gathered, whose
/// batches of each shard `spans` holds (first, last).
fn gather(gathered: &mut Vec<u8>, spans: &mut Spans, (shard, k, records): (usize, u64, Vec<u8>)) {
    if gathered.is_empty() {
        *gathered = records;
    } else {
        gathered.extend_from_slice(&records);
    }
    if let Some(span) = spans.get_mut(shard) {
        *span = Some(span.map_or((k, k), |(first, _)| (first, k)));
    }
}

/// How an entry failed, on the board: refused before it was appended
/// (another leadership: nothing of it, nor of any entry after it, was
/// made), or it may or may not commit.
fn failure(e: ReplicaError) -> Failure {
    match e {
        ReplicaError::NotLeader { leader } => Failure::Refused { leader },
        ReplicaError::Unknown { leader } => Failure::Unknown { leader },
        _ => Failure::Unknown { leader: None },
    }
}

/// What a write the leader refused or dropped says.
pub(crate) fn refused_write(e: openraft::errors::ClientWriteError<TypeConfig>) -> ReplicaError {
    use openraft::errors::ClientWriteError as E;
    match e {
        // Refused before it was appended: nothing was made.
        E::ForwardToLeader(f) => ReplicaError::NotLeader {
            leader: f.leader_id,
        },
        E::PreconditionFailed(_) => ReplicaError::NotLeader { leader: None },
        E::LogEntryDiscarded(f) => ReplicaError::Unknown {
            leader: f.leader_id,
        },
        _ => ReplicaError::Unknown { leader: None },
    }
}

/// What an entry's commit, waited for at most [`COMMIT_TIMEOUT`], says
/// (`X`: the responder's channel closed).
type Committed<X> = Result<
    Result<
        Result<
            openraft::raft::ClientWriteResponse<TypeConfig>,
            openraft::errors::ClientWriteError<TypeConfig>,
        >,
        X,
    >,
    tokio::time::error::Elapsed,
>;

fn outcome<X>(committed: Committed<X>) -> Result<(), ReplicaError> {
    match committed {
        Ok(Ok(Ok(_))) => Ok(()),
        // No quorum answered in time: the entry may still commit.
        Err(_) => Err(ReplicaError::Unknown { leader: None }),
        Ok(Ok(Err(e))) => Err(refused_write(e)),
        // The responder went away.
        Ok(Err(_)) => Err(ReplicaError::Unknown { leader: None }),
    }
}
