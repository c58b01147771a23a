//! The engine a partition's leader serves from, for one leadership
//! ([`Serving`]), and its entries: the records its operations make,
//! gathered into the next Raft entry; at most [`ENTRIES_IN_FLIGHT`] entries
//! waiting for their commit; a committer task noting each entry's outcome
//! in order (on a [`Board`], fila-core's, which the loops holding answers
//! read) and submitting what gathered meanwhile; a submitter task woken by
//! operations run outside any task; a [`Ticket`] for such an operation's
//! answer.

use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use fila_core::commits::{Board, Failure, Ticket};
use fila_core::event::{Event, EventSink};
use fila_core::Owner;
use fila_store::codec::batch_push;
use fila_wal::Storage;
use openraft::impls::ProgressResponder;
use openraft::Raft;

use crate::replica::{poisoned, LeaderId, ReplicaError, COMMIT_TIMEOUT};
use crate::{Batch, StateMachine, TypeConfig};

/// The records the leader's engine makes, captured per operation.
pub(crate) struct Capture(pub(crate) Arc<Mutex<Vec<u8>>>);

impl EventSink for Capture {
    fn record(&mut self, event: &Event<'_>) {
        if let Ok(mut b) = self.0.lock() {
            batch_push(event, &mut b);
        }
    }
}

/// The engine a leader serves from, for one leadership: one owner of
/// its one shard.
pub(crate) struct Serving {
    pub(crate) owner: Owner,
    /// The records its operations made that are in no entry yet: the
    /// next entry's.
    records: Arc<Mutex<Vec<u8>>>,
    pub(crate) leader: LeaderId,
    /// Entries submitted from this engine so far.
    pub(crate) submitted: u64,
    /// How far they committed, or that one failed.
    board: Arc<Board>,
    /// Sent after each outcome noted on `board` (for tasks waiting on it).
    noted: Arc<tokio::sync::watch::Sender<()>>,
    /// Each submitted entry's commit, to the leadership's committer.
    commits: tokio::sync::mpsc::UnboundedSender<Commit>,
    /// Tells the leadership's submitter that records gathered outside a
    /// task ([`crate::Replica::try_execute`]) wait for an entry.
    kick: Arc<Kick>,
}

/// What wakes a leadership's submitter: records wait, or its engine was
/// dropped (`ended`).
#[derive(Default)]
struct Kick {
    notify: tokio::sync::Notify,
    ended: std::sync::atomic::AtomicBool,
}

impl Drop for Serving {
    fn drop(&mut self) {
        // Its submitter ends.
        self.kick
            .ended
            .store(true, std::sync::atomic::Ordering::Release);
        self.kick.notify.notify_one();
    }
}

/// The engine a leader serves from, behind its lock: the node's tasks
/// wait for it, an event loop only tries it
/// ([`crate::Replica::try_execute`]).
pub(crate) type EngineLock = tokio::sync::Mutex<Option<Serving>>;

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

/// A submitted entry (its number) and its commit to wait for.
type Commit = (
    u64,
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ReplicaError>> + Send>>,
);

/// What an entry's failure answers.
fn failed(how: Failure) -> ReplicaError {
    match how {
        Failure::Refused { leader } => ReplicaError::NotLeader { leader },
        Failure::Unknown { leader } => ReplicaError::Unknown { leader },
    }
}

impl Serving {
    /// The engine of leadership `leader`, its records captured into
    /// `records`, with its committer and submitter tasks started (both
    /// end with it); `serving` is where it will be held, `on_commit` is
    /// told after each entry's outcome.
    pub(crate) fn start<S: Storage + 'static>(
        owner: Owner,
        records: Arc<Mutex<Vec<u8>>>,
        leader: LeaderId,
        raft: &Raft<TypeConfig, StateMachine<S>>,
        serving: Weak<EngineLock>,
        on_commit: Option<OnCommit>,
    ) -> Serving {
        let board = Arc::new(Board::new());
        let noted = Arc::new(tokio::sync::watch::channel(()).0);
        let (commits, to_commit) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(commit_entries(
            to_commit,
            (board.clone(), noted.clone()),
            records.clone(),
            serving.clone(),
            raft.clone(),
            on_commit,
        ));
        let kick = Arc::new(Kick::default());
        tokio::spawn(submit_kicked(
            kick.clone(),
            records.clone(),
            serving,
            raft.clone(),
        ));
        Serving {
            owner,
            records,
            leader,
            submitted: 0,
            board,
            noted,
            commits,
            kick,
        }
    }

    /// Runs `op` on the engine, taking in a dead letter for the
    /// partition's own shard (no receive parks here: nothing completes
    /// later).
    pub(crate) fn run<R>(&mut self, op: impl FnOnce(&mut Owner) -> R) -> R {
        let result = op(&mut self.owner);
        while self.owner.has_output() {
            for t in self.owner.take_transit() {
                self.owner.accept(t);
            }
            self.owner.take_completions();
        }
        result
    }

    /// The ticket of entry `k` of this engine.
    pub(crate) fn ticket(&self, k: u64) -> Ticket {
        Ticket::new(self.board.clone(), k)
    }

    /// Entry `k`'s outcome, to be waited for in a task.
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

    /// Wakes its submitter: records gathered outside any task wait.
    pub(crate) fn wake_submitter(&self) {
        self.kick.notify.notify_one();
    }

    /// Bytes of records waiting for the next entry.
    pub(crate) fn gathered(&self) -> usize {
        self.records.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Entries submitted and not yet committed.
    pub(crate) fn in_flight(&self) -> u64 {
        self.submitted.saturating_sub(self.board.through())
    }

    /// Submits the records gathered so far as the next entry, on the
    /// condition that this engine's leadership still holds.
    pub(crate) async fn submit(
        &mut self,
        raft: &Raft<TypeConfig, StateMachine<impl Storage + 'static>>,
    ) -> Result<(), ReplicaError> {
        let records = std::mem::take(&mut *self.records.lock().map_err(|_| poisoned())?);
        if records.is_empty() {
            return Ok(());
        }
        let (responder, committed) = ProgressResponder::complete_only();
        raft.write(Batch(Bytes::from(records)))
            .with_leader(self.leader)
            .responder(responder)
            .await
            .map_err(|fatal| ReplicaError::Raft(fatal.to_string()))?;
        self.submitted += 1;
        let deadline = tokio::time::Instant::now() + COMMIT_TIMEOUT;
        let commit =
            Box::pin(async move { outcome(tokio::time::timeout_at(deadline, committed).await) });
        // The committer ends only once this engine is dropped.
        let _ = self.commits.send((self.submitted, commit));
        Ok(())
    }
}

/// Records of several operations gathered in one entry at most, unless a
/// single operation made more.
pub(crate) const ENTRY_BYTES: usize = 1 << 20;

/// Entries of one leadership in flight at most: an operation's records
/// made while this many wait for their commit go into the next entry,
/// submitted as soon as one of them commits — one entry, one append on
/// each replica, one apply, for every operation that ran meanwhile.
pub(crate) const ENTRIES_IN_FLIGHT: u64 = 4;

/// A leadership's committer: notes each entry's outcome in order, and
/// once one committed submits the records gathered meanwhile. Ends when
/// the engine it serves is dropped.
async fn commit_entries<S: Storage + 'static>(
    mut commits: tokio::sync::mpsc::UnboundedReceiver<Commit>,
    (board, noted): (Arc<Board>, Arc<tokio::sync::watch::Sender<()>>),
    records: Arc<Mutex<Vec<u8>>>,
    serving: Weak<EngineLock>,
    raft: Raft<TypeConfig, StateMachine<S>>,
    on_commit: Option<OnCommit>,
) {
    while let Some((k, commit)) = commits.recv().await {
        let outcome = commit.await;
        board.note(k, outcome.map_err(failure));
        noted.send_replace(());
        if let Some(f) = &on_commit {
            f();
        }
        if board.failed() {
            continue;
        }
        submit_gathered(&records, &serving, &raft).await;
    }
}

/// Submits what gathered, when room: from the committer after a commit,
/// from the submitter when kicked.
async fn submit_gathered<S: Storage + 'static>(
    records: &Arc<Mutex<Vec<u8>>>,
    serving: &Weak<EngineLock>,
    raft: &Raft<TypeConfig, StateMachine<S>>,
) -> bool {
    let gathered = records.lock().is_ok_and(|r| !r.is_empty());
    let Some(serving) = serving.upgrade().filter(|_| gathered) else {
        return true;
    };
    let mut serving = serving.lock().await;
    let Some(s) = serving
        .as_mut()
        .filter(|s| Arc::ptr_eq(&s.records, records))
    else {
        return false;
    };
    if s.in_flight() < ENTRIES_IN_FLIGHT && !s.failed() {
        if let Err(e) = s.submit(raft).await {
            tracing::warn!(error = %e, "an entry could not be submitted");
            *serving = None;
            return false;
        }
    }
    true
}

/// A leadership's submitter: submits the records gathered outside a task
/// when kicked. Ends with its engine (kicked once more as it is dropped).
async fn submit_kicked<S: Storage + 'static>(
    kick: Arc<Kick>,
    records: Arc<Mutex<Vec<u8>>>,
    serving: Weak<EngineLock>,
    raft: Raft<TypeConfig, StateMachine<S>>,
) {
    loop {
        kick.notify.notified().await;
        if kick.ended.load(std::sync::atomic::Ordering::Acquire)
            || !submit_gathered(&records, &serving, &raft).await
        {
            return;
        }
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
