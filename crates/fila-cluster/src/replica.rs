//! One replica of a partition: the group's Raft node, its state machine,
//! and — while it leads — the engine that executes requests.
//!
//! The leader executes: [`Replica::execute`] runs an operation on the
//! leader's engine, whose journal sink captures the records it made (the
//! same records a single node logs); they are proposed as one entry and
//! the answer is handed back only once that entry is committed — as a
//! single node answers only after its fsync. Followers apply committed
//! entries through the replay ([`crate::StateMachine`]) and keep no engine.
//!
//! A replica that becomes leader first catches up: it commits a blank
//! entry (so every entry before it in its log is committed) and waits
//! until the state machine has applied it, then rebuilds its engine from
//! the state machine's image; it serves from that engine for the rest of
//! its leadership. Operations are pipelined: the engine's state is the
//! committed state plus the operations whose entries are in flight. At most
//! a few entries are in flight; the records of operations run meanwhile
//! gather into the next entry, submitted by the leadership's committer as
//! soon as one of them commits (one entry for all of them). When a
//! proposal fails — leadership lost — the engine is dropped: what it
//! executed may or may not commit, and the next leadership rebuilds from
//! what did.
//!
//! An operation may also run outside any task ([`Replica::try_execute`],
//! a server's event loop): on the engine if it is free, its records left
//! for the leadership's submitter task, its caller told of the entry's
//! outcome through a [`Ticket`] (and [`OnCommit`] after each commit).
//!
//! Receipts name a lease by the message's sequence number, sub-queue and
//! delivery count, signed with the partition's secret: every leader holds
//! the same message under the same sequence number and count, so a
//! committed lease's receipt works on the next leader, and a receipt of
//! an earlier delivery is refused.
//!
//! Leases are committed before a receive is answered (a delivery's record
//! says when its lease ends, and every change of that time is a record),
//! so a deposed leader hands out nothing; a new leader keeps each
//! committed lease in flight until it ends, and at least for the longest
//! election timeout from when it took over.
//!
//! An operation that made no records — a read, a put answered as the
//! duplicate of an earlier one — may rest on entries still in flight: its
//! answer waits until every entry submitted before it has committed (and
//! is `Unknown` if one did not). A read that must not be stale
//! ([`Replica::read`]) first confirms the leadership with a quorum
//! (openraft's read index).

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use fila_core::event::{EngineImage, Event, EventSink};
use fila_core::{Clock, Engine, EngineLimits, Owner, ReceiptKey};
use fila_store::codec::batch_push;
use fila_wal::Storage;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::impls::ProgressResponder;
use openraft::{Config, Raft, RaftNetworkFactory};

use crate::{Batch, LogStore, NodeId, StateMachine, TypeConfig};

/// How long a new leader waits for its blank entry to be applied before
/// it gives up (it was deposed, or its peers are unreachable).
pub const CATCH_UP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long an operation waits for its entry to commit before its
/// outcome is reported unknown (a leader cut off from its peers does not
/// know it was deposed until it hears from them).
pub const COMMIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Timers the engine runs before an operation at most.
const TIMERS_PER_OPERATION: usize = 1_024;

/// Why a replica did not execute an operation.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// This replica does not lead the partition; `leader` does, when known.
    #[error("not the partition's leader (the leader is {})", leader.map_or("unknown".to_owned(), |l| format!("node {l}")))]
    NotLeader {
        /// The leader, when known.
        leader: Option<NodeId>,
    },
    /// Leadership was lost after the operation ran and before its records
    /// committed: they may still commit (a put retried with its
    /// deduplication id is stored once).
    #[error("leadership was lost before the change committed: it may or may not have been made")]
    Unknown {
        /// The leader, when known.
        leader: Option<NodeId>,
    },
    /// The Raft node stopped or its storage failed.
    #[error("the partition's Raft node failed: {0}")]
    Raft(String),
    /// A membership change or a transfer that cannot be made (why).
    #[error("{0}")]
    Refused(String),
    /// A limit of the cluster would be passed (`max_queues`: its value).
    #[error("{limit} of {max} reached")]
    Full {
        /// The limit's name.
        limit: &'static str,
        /// Its value.
        max: u64,
    },
    /// Rebuilding the engine from the state machine failed.
    #[error("rebuilding the partition's engine: {0}")]
    Rebuild(String),
}

/// The records the leader's engine makes, captured per operation.
struct Capture(Arc<Mutex<Vec<u8>>>);

impl EventSink for Capture {
    fn record(&mut self, event: &Event<'_>) {
        if let Ok(mut b) = self.0.lock() {
            batch_push(event, &mut b);
        }
    }
}

/// The id of a leadership: its term and node.
pub(crate) type LeaderId = openraft::impls::leader_id_adv::LeaderId<u64, NodeId>;

/// The engine a leader serves from, for one leadership: one owner of
/// its one shard.
struct Serving {
    owner: Owner,
    /// The records its operations made that are in no entry yet: the
    /// next entry's.
    records: Arc<Mutex<Vec<u8>>>,
    leader: LeaderId,
    /// Entries submitted from this engine so far.
    submitted: u64,
    /// How far they committed, or that one failed.
    done: Arc<tokio::sync::watch::Sender<Done>>,
    /// Each submitted entry's commit, to the leadership's committer.
    commits: tokio::sync::mpsc::UnboundedSender<Commit>,
    /// Tells the leadership's submitter that records gathered outside a
    /// task ([`Replica::try_execute`]) wait for an entry.
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

/// Where an operation run by [`Replica::try_execute`] stands: its entry,
/// whose outcome is read with [`Ticket::outcome`].
pub struct Ticket {
    done: tokio::sync::watch::Receiver<Done>,
    k: u64,
}

impl Ticket {
    /// The entry's outcome, once known.
    pub fn outcome(&self) -> Option<Result<(), ReplicaError>> {
        self.done.borrow().outcome(self.k)
    }
}

/// Told after each entry's outcome is noted.
pub type OnCommit = Arc<dyn Fn() + Send + Sync>;

/// A submitted entry (its number) and its commit to wait for.
type Commit = (
    u64,
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ReplicaError>> + Send>>,
);

/// The entries of one engine that committed: every one up to `through`
/// (the first is 1), unless one failed — it did not commit in time or
/// was refused, and the engine is not served from again.
#[derive(Clone, Copy, Debug, Default)]
struct Done {
    through: u64,
    /// The first entry that failed, and how.
    failed: Option<(u64, Failure)>,
}

/// How an entry failed.
#[derive(Clone, Copy, Debug)]
enum Failure {
    /// Refused before it was appended (another leadership): nothing of it,
    /// nor of any entry after it, was made.
    Refused(Option<NodeId>),
    /// It may or may not commit.
    Unknown(Option<NodeId>),
}

impl Done {
    /// Entry `k`'s outcome, once known: committed, or failed (at or
    /// before it).
    fn outcome(&self, k: u64) -> Option<Result<(), ReplicaError>> {
        if self.through >= k {
            return Some(Ok(()));
        }
        match self.failed {
            Some((f, Failure::Refused(leader))) if f <= k => {
                Some(Err(ReplicaError::NotLeader { leader }))
            }
            Some((f, Failure::Unknown(leader))) if f <= k => {
                Some(Err(ReplicaError::Unknown { leader }))
            }
            _ => None,
        }
    }

    fn failed(&self) -> bool {
        self.failed.is_some()
    }
}

impl Serving {
    /// Entries submitted and not yet committed.
    fn in_flight(&self) -> u64 {
        self.submitted.saturating_sub(self.done.borrow().through)
    }

    /// Submits the records gathered so far as the next entry, on the
    /// condition that this engine's leadership still holds.
    async fn submit(
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

/// What an operation's answer waits for.
enum Wait {
    /// The entry its records are in — or, when it made none, the last
    /// entry its engine had records for when it ran (what it saw includes
    /// them): its commit.
    Entry(tokio::sync::watch::Receiver<Done>, u64),
    /// It made no records and none are in flight: a quorum confirms the
    /// leadership (openraft's read index).
    Confirm,
}

/// Records of several operations gathered in one entry at most, unless a
/// single operation made more.
const ENTRY_BYTES: usize = 1 << 20;

/// Entries of one leadership in flight at most: an operation's records
/// made while this many wait for their commit go into the next entry,
/// submitted as soon as one of them commits — one entry, one append on
/// each replica, one apply, for every operation that ran meanwhile.
const ENTRIES_IN_FLIGHT: u64 = 4;

/// A leadership's committer: notes each entry's outcome in order, and
/// once one committed submits the records gathered meanwhile. Ends when
/// the engine it serves is dropped.
async fn commit_entries<S: Storage + 'static>(
    mut commits: tokio::sync::mpsc::UnboundedReceiver<Commit>,
    done: Arc<tokio::sync::watch::Sender<Done>>,
    records: Arc<Mutex<Vec<u8>>>,
    serving: std::sync::Weak<tokio::sync::Mutex<Option<Serving>>>,
    raft: Raft<TypeConfig, StateMachine<S>>,
    on_commit: Option<OnCommit>,
) {
    while let Some((k, commit)) = commits.recv().await {
        let outcome = commit.await;
        note(&done, k, outcome);
        if let Some(f) = &on_commit {
            f();
        }
        if done.borrow().failed() {
            continue;
        }
        submit_gathered(&records, &serving, &raft).await;
    }
}

/// Submits what gathered, when room: from the committer after a commit,
/// from the submitter when kicked.
async fn submit_gathered<S: Storage + 'static>(
    records: &Arc<Mutex<Vec<u8>>>,
    serving: &std::sync::Weak<tokio::sync::Mutex<Option<Serving>>>,
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
    if s.in_flight() < ENTRIES_IN_FLIGHT && !s.done.borrow().failed() {
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
    serving: std::sync::Weak<tokio::sync::Mutex<Option<Serving>>>,
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

/// Notes entry `k`'s outcome (the first failure is kept).
fn note(done: &tokio::sync::watch::Sender<Done>, k: u64, outcome: Result<(), ReplicaError>) {
    done.send_modify(|d| match outcome {
        Ok(()) => d.through = d.through.max(k),
        Err(e) => {
            let how = match e {
                ReplicaError::NotLeader { leader } => Failure::Refused(leader),
                ReplicaError::Unknown { leader } => Failure::Unknown(leader),
                _ => Failure::Unknown(None),
            };
            d.failed.get_or_insert((k, how));
        }
    });
}

/// A replica of one partition.
pub struct Replica<S: Storage + 'static> {
    id: NodeId,
    raft: Raft<TypeConfig, StateMachine<S>>,
    sm: StateMachine<S>,
    /// The Raft log (the same one openraft holds).
    log: LogStore<S>,
    clock: Arc<dyn Clock>,
    /// The partition's receipt secret; a replica that does not know it
    /// yet does not serve.
    secret: Mutex<Option<[u64; 2]>>,
    /// How long a lease of the last leader is kept past now at least: the
    /// longest election timeout.
    lease_grace_ms: u64,
    /// The limits the leader's engine enforces (none until set).
    limits: std::sync::Mutex<EngineLimits>,
    serving: Arc<tokio::sync::Mutex<Option<Serving>>>,
    /// Told after each entry's outcome is noted (from the next leadership on).
    on_commit: std::sync::Mutex<Option<OnCommit>>,
}

impl<S: Storage + 'static> Replica<S> {
    /// Starts the replica `id` of a partition on its log and state
    /// machine; peers are reached through `network`. `secret` is the
    /// partition's receipt secret (every replica has the same); without
    /// one it takes part in its group but serves nothing until
    /// [`Replica::set_secret`].
    pub async fn start<N>(
        id: NodeId,
        config: Arc<Config>,
        network: N,
        log: LogStore<S>,
        sm: StateMachine<S>,
        clock: Arc<dyn Clock>,
        secret: Option<[u64; 2]>,
    ) -> Result<Replica<S>, ReplicaError>
    where
        N: RaftNetworkFactory<TypeConfig>,
        N::Network:
            openraft::network::NetSnapshot<TypeConfig, SnapshotData = std::io::Cursor<Vec<u8>>>,
    {
        let lease_grace_ms = config.election_timeout_max;
        let raft = Raft::new(id, config, network, log.clone(), sm.clone())
            .await
            .map_err(|e| ReplicaError::Raft(e.to_string()))?;
        Ok(Replica {
            id,
            raft,
            sm,
            log,
            clock,
            secret: Mutex::new(secret),
            lease_grace_ms,
            limits: std::sync::Mutex::new(EngineLimits::default()),
            serving: Arc::new(tokio::sync::Mutex::new(None)),
            on_commit: std::sync::Mutex::new(None),
        })
    }

    /// Runs `op` on the engine this node serves the partition with, while
    /// it leads and has caught up (none otherwise): unconfirmed by a
    /// quorum, for figures such as metrics, never for an answer.
    pub async fn serving<R>(&self, op: impl FnOnce(&mut Owner) -> R) -> Option<R> {
        let leader_id = self.leading().ok()?;
        let mut serving = self.serving.lock().await;
        let s = serving.as_mut().filter(|s| s.leader == leader_id)?;
        Some(op(&mut s.owner))
    }

    /// The leadership this node holds (its committed vote, while it is in
    /// the leader's state), or the leader it knows of. A leader that
    /// committed a membership without itself keeps its vote but is no
    /// longer a leader: it leads nothing, and names no leader (it hears
    /// from none).
    fn leading(&self) -> Result<LeaderId, Option<NodeId>> {
        leading(&self.raft)
    }

    /// The leader this node knows of: openraft's current leader, unless
    /// that is this node's own old leadership (it was removed while it
    /// led, and hears from no leader since).
    pub fn known_leader(&self) -> Option<NodeId> {
        known_leader(&self.raft)
    }

    /// The partition's receipt secret, once this node knows it (from the
    /// cluster's map); a secret set before stays — a partition's key never
    /// changes.
    pub fn set_secret(&self, secret: [u64; 2]) {
        self.secret
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(secret);
    }

    /// The server-wide limits (stored bytes, queues) the partition's
    /// leader enforces from its next leadership on (a node sets them
    /// before it serves). Replaying committed entries never checks them:
    /// what the leader took stays.
    pub fn set_limits(&self, limits: EngineLimits) {
        *self.limits.lock().unwrap_or_else(|p| p.into_inner()) = limits;
    }

    /// The Raft node (membership changes, metrics, the network's
    /// handlers).
    pub fn raft(&self) -> &Raft<TypeConfig, StateMachine<S>> {
        &self.raft
    }

    /// The state machine.
    pub fn state(&self) -> &StateMachine<S> {
        &self.sm
    }

    /// Lets go of the Raft log's tail kept in memory (a replica this node
    /// gave up: see [`LogStore::drop_tail`]); answers the bytes it held.
    pub fn drop_log_tail(&self) -> usize {
        self.log.drop_tail()
    }

    /// Asks openraft for a snapshot of the group when one is due
    /// ([`StateMachine::snapshot_due`]); answers whether it asked (a node
    /// run with openraft's `SnapshotPolicy::Never` takes its snapshots so).
    pub async fn snapshot_if_due(&self) -> bool {
        snapshot_if_due(&self.raft, &self.sm).await
    }

    /// This replica's node id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Runs `op` on the leader's engine and answers its result once the
    /// records it made are committed; when it made none, once the entries
    /// in flight before it are committed or, with none, once a quorum
    /// confirmed this node still leads (an answer from a deposed leader's
    /// state would be a stale read).
    ///
    /// Operations are pipelined: each runs on the engine and its records
    /// go into the next entry, submitted at once unless
    /// `ENTRIES_IN_FLIGHT` (4) entries wait for their commit, else as soon
    /// as one of them commits, together with every record made meanwhile
    /// (so entries hold the records in the order the engine made them);
    /// the next operation may run while earlier ones wait. Every entry is
    /// submitted on the condition that the leader is still the one the
    /// engine was rebuilt for, so an engine that another leader's entries
    /// have overtaken never gets an entry in.
    ///
    /// `op` must not park a receive (a receive with a wait answers what is
    /// there: a waiting receive is its caller's loop of tries).
    pub async fn execute<R>(&self, op: impl FnOnce(&mut Owner) -> R) -> Result<R, ReplicaError> {
        let (result, leader_id, wait) = {
            let mut serving = self.serving.lock().await;
            let leader_id = match self.leading() {
                Ok(leader_id) => leader_id,
                Err(leader) => {
                    *serving = None;
                    return Err(ReplicaError::NotLeader { leader });
                }
            };
            let stale = serving
                .as_ref()
                .is_none_or(|s| s.leader != leader_id || s.done.borrow().failed());
            if stale {
                *serving = None;
                *serving = Some(self.catch_up(leader_id).await?);
            }
            let s = serving.as_mut().expect("set above");
            let result = op(&mut s.owner);
            // A dead letter for the partition's own shard: taken in here.
            while s.owner.has_output() {
                for t in s.owner.take_transit() {
                    s.owner.accept(t);
                }
                // No receive parks here: nothing completes later.
                s.owner.take_completions();
            }
            let gathered = s.records.lock().map_err(|_| poisoned())?.len();
            if gathered == 0 {
                // It made no records, and none wait for an entry. Its
                // answer may rest on entries still in flight (a put
                // answered as a duplicate of one not committed yet, a read
                // of it): it waits for them — their commit, after it ran,
                // shows this leadership was still the one. With none in
                // flight, a quorum confirms it: a leader cut off from the
                // others, that another leader has overtaken, must not
                // answer from its old state (a receipt refused as stale,
                // a receive finding nothing).
                let k = s.submitted;
                if k == 0 || s.done.borrow().through >= k {
                    (result, leader_id, Wait::Confirm)
                } else {
                    (result, leader_id, Wait::Entry(s.done.subscribe(), k))
                }
            } else {
                // Its records (or what it saw, when it made none) are in
                // the next entry: submitted now unless `ENTRIES_IN_FLIGHT`
                // entries are in flight already — then by the committer,
                // as soon as one of them commits, with whatever gathered
                // meanwhile (or by an operation that takes the records
                // past `ENTRY_BYTES`).
                let k = s.submitted + 1;
                if s.in_flight() < ENTRIES_IN_FLIGHT || gathered >= ENTRY_BYTES {
                    if let Err(e) = s.submit(&self.raft).await {
                        *serving = None;
                        return Err(e);
                    }
                }
                (result, leader_id, Wait::Entry(s.done.subscribe(), k))
            }
        };
        let outcome = match wait {
            Wait::Confirm => confirm(&self.raft).await,
            Wait::Entry(mut rx, k) => {
                let seen = tokio::time::timeout(
                    COMMIT_TIMEOUT * 2,
                    rx.wait_for(|d| d.outcome(k).is_some()),
                )
                .await;
                match seen {
                    Ok(Ok(d)) => d
                        .outcome(k)
                        .unwrap_or(Err(ReplicaError::Unknown { leader: None })),
                    _ => Err(ReplicaError::Unknown { leader: None }),
                }
            }
        };
        match outcome {
            Ok(()) => Ok(result),
            Err(e) => {
                // Leadership was lost, or no quorum answered in time: what
                // the engine executed may or may not commit, so it is not
                // served from again.
                self.forget(leader_id).await;
                Err(e)
            }
        }
    }

    /// Sets what is told after each entry's outcome is noted (from the
    /// next leadership on).
    pub fn set_on_commit(&self, f: OnCommit) {
        *self.on_commit.lock().unwrap_or_else(|p| p.into_inner()) = Some(f);
    }

    /// Runs `op` at once, outside any task, when this node serves the
    /// partition and its engine is free: its result and the entry its
    /// answer waits for (see [`Replica::execute`]). `None` when it did not
    /// run, or ran and made no records nor saw any waiting for an entry
    /// (then it changed nothing, and `keep` said to drop its result): the
    /// caller runs it through [`Replica::execute`] instead.
    pub fn try_execute<R>(
        &self,
        op: impl FnOnce(&mut Owner) -> R,
        keep: impl FnOnce(&R) -> bool,
    ) -> Option<(R, Ticket)> {
        let leader_id = self.leading().ok()?;
        let mut serving = self.serving.try_lock().ok()?;
        let s = serving
            .as_mut()
            .filter(|s| s.leader == leader_id && !s.done.borrow().failed())?;
        let gathered = |s: &Serving| s.records.lock().unwrap_or_else(|p| p.into_inner()).len();
        let held = gathered(s);
        let result = op(&mut s.owner);
        while s.owner.has_output() {
            for t in s.owner.take_transit() {
                s.owner.accept(t);
            }
            s.owner.take_completions();
        }
        // It ran: from here on it is answered through its ticket.
        let gathered = gathered(s);
        if gathered == held && (gathered == 0 || !keep(&result)) {
            return None;
        }
        let k = s.submitted + 1;
        if s.in_flight() < ENTRIES_IN_FLIGHT {
            // Else the committer submits them after the next commit.
            s.kick.notify.notify_one();
        }
        Some((
            result,
            Ticket {
                done: s.done.subscribe(),
                k,
            },
        ))
    }

    /// Runs `op`, a read (it changes nothing), once this replica has
    /// confirmed with a quorum that it still leads and has applied every
    /// entry committed before (openraft's read index): a leader cut off
    /// from the others answers `NotLeader` instead of its old state. What
    /// `op` sees is the committed state and the operations in flight.
    pub async fn read<R>(&self, op: impl FnOnce(&mut Owner) -> R) -> Result<R, ReplicaError> {
        // An operation that makes no records is answered only once the
        // leadership is confirmed (or proved by the commit of entries in
        // flight before it): `execute` is that.
        self.execute(op).await
    }

    /// Drops the engine of a leadership this node no longer holds (a
    /// deposed leader otherwise keeps it, a whole copy of the partition,
    /// until a request reaches it): answers whether it dropped one. The next
    /// leadership rebuilds its own from the state machine. While a request
    /// holds the engine (running, or catching up a new leadership) nothing
    /// is dropped: that request drops a stale one itself.
    pub fn drop_stale_engine(&self) -> bool {
        let leading = self.leading().ok();
        let Ok(mut serving) = self.serving.try_lock() else {
            return false;
        };
        let stale = serving.as_ref().is_some_and(|s| Some(s.leader) != leading);
        if stale {
            *serving = None;
        }
        stale
    }

    /// Drops the engine of leadership `leader`, if it is still the one.
    async fn forget(&self, leader: LeaderId) {
        let mut serving = self.serving.lock().await;
        if serving.as_ref().is_some_and(|s| s.leader == leader) {
            *serving = None;
        }
    }

    /// Everything in the leader's log committed and applied, an engine
    /// rebuilt from it. A blank entry is committed first: entries of
    /// earlier terms in the log (some of which clients may have been told
    /// are committed — a leader that restarted does not know) are then
    /// committed too, and applying up to the blank applies them all.
    async fn catch_up(&self, leader: LeaderId) -> Result<Serving, ReplicaError> {
        // Bounded: a leader that steps down (removed from the membership)
        // may never answer an entry it took just before.
        let Ok(written) = tokio::time::timeout(CATCH_UP_TIMEOUT, self.raft.write_blank()).await
        else {
            return Err(ReplicaError::Unknown { leader: None });
        };
        let blank = match written {
            Ok(written) => written.log_id,
            Err(e) => {
                let leader = e.forward_to_leader().and_then(|f| f.leader_id);
                return Err(match e {
                    openraft::errors::RaftError::Fatal(f) => ReplicaError::Raft(f.to_string()),
                    _ => ReplicaError::NotLeader { leader },
                });
            }
        };
        self.raft
            .wait(Some(CATCH_UP_TIMEOUT))
            .applied_index_at_least(Some(blank.index), "the partition catches up")
            .await
            .map_err(|_| ReplicaError::Unknown { leader: None })?;
        let mut image = self
            .sm
            .image()
            .map_err(|e| ReplicaError::Rebuild(e.to_string()))?;
        keep_leases(&mut image, self.clock.now_ms() + self.lease_grace_ms);
        let secret = *self.secret.lock().map_err(|_| poisoned())?;
        let Some(secret) = secret else {
            // It learns the key from the cluster's map.
            return Err(ReplicaError::NotLeader { leader: None });
        };
        let engine = Engine::with_receipt_key(1, self.clock.clone(), partition_key(secret));
        engine
            .restore_leased(image)
            .map_err(|e| ReplicaError::Rebuild(e.to_string()))?;
        // After the restore: what is stored stays whatever the limits.
        engine.set_limits(*self.limits.lock().unwrap_or_else(|p| p.into_inner()));
        let records = Arc::new(Mutex::new(Vec::new()));
        engine.set_journal(0, Some(Box::new(Capture(records.clone()))));
        let owner = engine
            .into_owners(1, TIMERS_PER_OPERATION)
            .pop()
            .expect("one owner");
        let done = Arc::new(tokio::sync::watch::channel(Done::default()).0);
        let (commits, to_commit) = tokio::sync::mpsc::unbounded_channel();
        let on_commit = self
            .on_commit
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        tokio::spawn(commit_entries(
            to_commit,
            done.clone(),
            records.clone(),
            Arc::downgrade(&self.serving),
            self.raft.clone(),
            on_commit,
        ));
        let kick = Arc::new(Kick::default());
        tokio::spawn(submit_kicked(
            kick.clone(),
            records.clone(),
            Arc::downgrade(&self.serving),
            self.raft.clone(),
        ));
        Ok(Serving {
            owner,
            records,
            leader,
            submitted: 0,
            done,
            commits,
            kick,
        })
    }

    /// Stops the Raft node.
    pub async fn shutdown(&self) -> Result<(), ReplicaError> {
        *self.serving.lock().await = None;
        self.raft
            .shutdown()
            .await
            .map_err(|e| ReplicaError::Raft(e.to_string()))
    }
}

/// Keeps every committed lease: a message leased by an earlier leader stays
/// in flight until its lease ends, and at least until `floor` (now plus
/// the longest election timeout: the clocks of two leaders differ, and a
/// consumer holding the lease may not have heard of the change); its
/// receipt works here.
fn keep_leases(image: &mut EngineImage, floor: u64) {
    for q in &mut image.queues {
        for m in &mut q.messages {
            if m.lease_until_ms > 0 && !m.deferred {
                m.lease_until_ms = m.lease_until_ms.max(floor);
            }
        }
    }
}

/// See [`Replica::snapshot_if_due`].
pub(crate) async fn snapshot_if_due<S: Storage + 'static>(
    raft: &Raft<TypeConfig, StateMachine<S>>,
    sm: &StateMachine<S>,
) -> bool {
    sm.snapshot_due() && raft.trigger().snapshot().await.is_ok()
}

/// The leadership `raft` holds (its committed vote, while it is in the
/// leader's state), or the leader it knows of (see [`Replica::leading`]).
pub(crate) fn leading<S: Storage + 'static>(
    raft: &Raft<TypeConfig, StateMachine<S>>,
) -> Result<LeaderId, Option<NodeId>> {
    match raft.as_leader() {
        Ok(leader) if raft.is_leader() => Ok(*leader.leader_id()),
        Ok(_) => Err(None),
        Err(forward) => Err(forward.leader_id),
    }
}

/// The leader `raft` knows of (see [`Replica::known_leader`]).
pub(crate) fn known_leader<S: Storage + 'static>(
    raft: &Raft<TypeConfig, StateMachine<S>>,
) -> Option<NodeId> {
    let m = raft.metrics();
    let m = m.borrow_watched();
    m.current_leader
        .filter(|&l| l != m.id || m.state == openraft::ServerState::Leader)
}

/// Confirms with a quorum that `raft` still leads and has applied every
/// entry committed before (openraft's read index), within
/// [`COMMIT_TIMEOUT`]; else `NotLeader`.
pub(crate) async fn confirm<S: Storage + 'static>(
    raft: &Raft<TypeConfig, StateMachine<S>>,
) -> Result<(), ReplicaError> {
    let confirmed = tokio::time::timeout(
        COMMIT_TIMEOUT,
        raft.ensure_linearizable(openraft::ReadPolicy::ReadIndex),
    )
    .await;
    match confirmed {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(openraft::errors::RaftError::Fatal(f))) => Err(ReplicaError::Raft(f.to_string())),
        Ok(Err(e)) => Err(ReplicaError::NotLeader {
            leader: e.forward_to_leader().and_then(|f| f.leader_id),
        }),
        Err(_) => Err(ReplicaError::NotLeader { leader: None }),
    }
}

/// What a failed `client_write` says.
pub(crate) fn write_error(
    e: openraft::errors::RaftError<TypeConfig, openraft::errors::ClientWriteError<TypeConfig>>,
) -> ReplicaError {
    match e {
        openraft::errors::RaftError::Fatal(f) => ReplicaError::Raft(f.to_string()),
        openraft::errors::RaftError::APIError(e) => refused_write(e),
    }
}

/// What a write the leader refused or dropped says.
fn refused_write(e: openraft::errors::ClientWriteError<TypeConfig>) -> ReplicaError {
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

/// The receipt key of the partition's engines: the partition's secret,
/// naming leases by sequence number, sub-queue and delivery count — what
/// every leader holds alike — so a committed lease's receipt works on the
/// next leader, and one of an earlier delivery does not.
fn partition_key(secret: [u64; 2]) -> ReceiptKey {
    ReceiptKey::fixed(secret[0], secret[1], 1).by_sequence()
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

fn poisoned() -> ReplicaError {
    ReplicaError::Raft("a lock was poisoned".to_owned())
}
