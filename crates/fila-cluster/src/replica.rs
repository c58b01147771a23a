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
//! committed state plus the operations whose entries are in flight. Each
//! operation's records are handed, as one numbered batch, to the
//! leadership's task, which submits them; at most a few entries are in
//! flight, and the batches handed over meanwhile gather into the next
//! entry, submitted as soon as one of them commits (one entry for all of
//! them). The engine's shards live on its [`Home`]s (a server's event
//! loops, or tasks of their own) as a single node's on its loops, its
//! queues hashed over them as a single node's are; each shard lives on its
//! home's thread, which runs
//! every operation on it, and hands its batches to the engine's one
//! leadership task, which gathers every shard's into the entries: a task
//! sends an operation on a queue to its shard's home as a job and waits
//! for the answer; no shard is behind a lock, no home waits for openraft,
//! and the leadership task touches no shard. When a proposal
//! fails — leadership lost — the whole engine is dropped: what it
//! executed may or may not commit, and the next leadership rebuilds from
//! what did.
//!
//! The home runs an operation of its own ([`Replica::run_at_home`], a
//! request a server's event loop read) with the engine in hand, its
//! caller told of its batch's outcome through a [`Ticket`](fila_core::commits::Ticket) (and
//! [`OnCommit`] after each entry's).
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

mod at_home;

use std::sync::{Arc, Mutex};

use fila_core::event::EngineImage;
use fila_core::{Clock, Engine, EngineLimits, Owner, ReceiptKey};
use fila_wal::Storage;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::{Config, Raft, RaftNetworkFactory};

use crate::home::{Home, Job};
use crate::serving::{refused_write, Capture, OnCommit, Ran, Serving, Settle};
use crate::{LogStore, NodeId, StateMachine, TypeConfig};

/// How long a new leader waits for its blank entry to be applied before
/// it gives up (it was deposed, or its peers are unreachable).
pub const CATCH_UP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long an operation waits for its entry to commit before its
/// outcome is reported unknown (a leader cut off from its peers does not
/// know it was deposed until it hears from them).
pub const COMMIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a job sent to the engine's home waits for its answer at
/// most (a home's thread that stopped, or stalls).
pub const HOME_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a stopping replica waits for room at its engine's home at
/// most.
const SHUTDOWN_SEND: std::time::Duration = std::time::Duration::from_secs(1);

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
    #[error("{}", fila_core::commits::UNKNOWN_WHY)]
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
    /// The cluster cannot serve this yet (a new cluster whose partitions
    /// are still being made): the same request may succeed in a moment.
    #[error("{0}")]
    Unready(&'static str),
}

/// The id of a leadership: its term and node.
pub(crate) type LeaderId = openraft::impls::leader_id_adv::LeaderId<u64, NodeId>;

/// What became of an operation sent to the engine's home.
enum AtHome<R, F> {
    /// It ran: its result, where its answer stands, the batch it waits
    /// for, and the leadership it ran under.
    Ran(R, Ran, Option<Settle>, LeaderId),
    /// This node leads (`LeaderId`) but has no engine for it yet: the
    /// operation, not run.
    Stale(F, LeaderId),
    /// Another node leads, when known.
    NotLeader(Option<NodeId>),
}

/// What an operation's answer waits for.
enum Wait {
    /// The batch its records are in — or, when it made none, the last
    /// batch its engine had made when it ran, not committed yet (what it
    /// saw includes it): its commit.
    Entry(Settle),
    /// It made no records and every batch before it committed: a quorum
    /// confirms the leadership (openraft's read index).
    Confirm,
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
    /// The threads its engine's shards live on, and how many shards it
    /// has (one task of its own and one shard unless set before first
    /// use, [`Replica::set_homes`]).
    homes: std::sync::OnceLock<(Vec<Arc<dyn Home>>, usize)>,
    /// Engines built so far (each build's shards share its counters).
    builds: std::sync::atomic::AtomicU64,
    /// Held while a new leadership's engine is built: one at a time.
    catching_up: tokio::sync::Mutex<()>,
    /// Told after each entry's outcome is noted (from the next leadership on).
    on_commit: std::sync::Mutex<Option<OnCommit>>,
    /// The id space of the message ids its leaders give
    /// ([`fila_core::Engine::set_id_space`]; from the next leadership on).
    id_space: std::sync::atomic::AtomicU32,
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
            homes: std::sync::OnceLock::new(),
            builds: std::sync::atomic::AtomicU64::new(0),
            catching_up: tokio::sync::Mutex::new(()),
            on_commit: std::sync::Mutex::new(None),
            id_space: std::sync::atomic::AtomicU32::new(0),
        })
    }

    /// Runs `op` on shard `shard` of the engine this node serves the
    /// partition with, while it leads and has caught up (none otherwise):
    /// unconfirmed by a quorum, for figures such as metrics, never for an
    /// answer.
    pub async fn serving<R: Send + 'static>(
        &self,
        shard: usize,
        op: impl FnOnce(&mut Owner) -> R + Send + 'static,
    ) -> Option<R> {
        let leader_id = self.leading().ok()?;
        self.at_home(shard, move |slot| {
            let s = slot.serving.as_mut().filter(|s| s.leader == leader_id)?;
            Some(op(&mut s.owner))
        })
        .await
        .ok()
        .flatten()
    }

    /// How long until the shards of the leader's engine that keep shard
    /// `shard` (its home's) have timers due — a lease or a delay that
    /// ends, making a message visible — while this node serves the
    /// partition (`None` otherwise, or with no timer set): how long a
    /// receive waiting here for messages of a queue of that shard may
    /// sleep before it looks again, when no put wakes it first. Zero when
    /// timers are due already.
    pub async fn next_due(&self, shard: usize) -> Option<std::time::Duration> {
        let at = self.serving(shard, |owner| owner.next_timer()).await??;
        let now = self.clock.now_ms();
        Some(std::time::Duration::from_millis(at.saturating_sub(now)))
    }

    /// The leadership this node holds (its committed vote, while it is in
    /// the leader's state), or the leader it knows of. A leader that
    /// committed a membership without itself keeps its vote but is no
    /// longer a leader: it leads nothing, and names no leader (it hears
    /// from none).
    fn leading(&self) -> Result<LeaderId, Option<NodeId>> {
        leading(&self.raft)
    }

    /// Whether this node leads the partition now (its engine may not be
    /// built yet).
    pub fn leads(&self) -> bool {
        self.leading().is_ok()
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

    /// Sets the id space of the message ids the partition's leaders give
    /// from the next leadership on (a node sets it, its partition's number
    /// plus one, before the replica serves): two partitions' queues are
    /// numbered apart, so without it their messages would share ids.
    pub fn set_id_space(&self, space: u32) {
        self.id_space
            .store(space, std::sync::atomic::Ordering::Release);
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

    /// Runs `op` on shard `shard` of the leader's engine (the shard of the
    /// queue it is about, [`Replica::shard_of`]) and answers its result once the
    /// records it made are committed; when it made none, once the batches
    /// it saw are committed or, with all committed, once a quorum
    /// confirmed this node still leads (an answer from a deposed leader's
    /// state would be a stale read).
    ///
    /// Operations are pipelined: each runs on the engine and its records
    /// go, as one batch, into the next entry, which the leadership's task
    /// submits at once unless `ENTRIES_IN_FLIGHT` (4) entries wait for
    /// their commit, else as soon as one of them commits, together with
    /// every batch handed over meanwhile (so entries hold the records in
    /// the order the engine made them); the next operation may run while
    /// earlier ones wait. Every entry is
    /// submitted on the condition that the leader is still the one the
    /// engine was rebuilt for, so an engine that another leader's entries
    /// have overtaken never gets an entry in.
    ///
    /// `op` must not park a receive (a receive with a wait answers what is
    /// there: a waiting receive is its caller's loop of tries).
    pub async fn execute<R: Send + 'static>(
        &self,
        shard: usize,
        op: impl FnOnce(&mut Owner) -> R + Send + 'static,
    ) -> Result<R, ReplicaError> {
        let ran = self.execute_unless(shard, op, |_| false).await?;
        Ok(ran.expect("never dropped"))
    }

    /// [`Replica::execute`], except that an operation that made no records
    /// and whose result `drop` says to drop is not answered at all: `None`,
    /// at once, with no quorum asked — it changed nothing, and its caller
    /// looks again later (a receive waiting for messages that found none:
    /// only the look that answers it needs the leadership confirmed).
    pub async fn execute_unless<R: Send + 'static, F>(
        &self,
        shard: usize,
        op: F,
        drop: impl FnOnce(&R) -> bool,
    ) -> Result<Option<R>, ReplicaError>
    where
        F: FnOnce(&mut Owner) -> R + Send + 'static,
    {
        let mut op = op;
        // At most twice: once more after this node built the engine of
        // its new leadership.
        let mut tries = 0;
        let (result, ran, wait, leader_id) = loop {
            let raft = self.raft.clone();
            let at = self
                .at_home(shard, move |slot| {
                    let leader_id = match leading(&raft) {
                        Ok(leader_id) => leader_id,
                        Err(leader) => {
                            slot.set(None);
                            return AtHome::NotLeader(leader);
                        }
                    };
                    let serving = slot.serving.as_mut();
                    let Some(s) = serving.filter(|s| s.leader == leader_id && !s.failed()) else {
                        return AtHome::Stale(op, leader_id);
                    };
                    let (result, ran) = s.run(op);
                    let wait = match ran {
                        Ran::Made(k) | Ran::Saw(k) => Some(s.settle(k)),
                        Ran::Settled => None,
                    };
                    AtHome::Ran(result, ran, wait, leader_id)
                })
                .await?;
            match at {
                AtHome::NotLeader(leader) => return Err(ReplicaError::NotLeader { leader }),
                AtHome::Stale(back, leader_id) if tries == 0 => {
                    tries += 1;
                    op = back;
                    self.serve_leadership(leader_id).await?;
                }
                // Built, and gone again already: another leadership.
                AtHome::Stale(..) => return Err(ReplicaError::NotLeader { leader: None }),
                AtHome::Ran(result, ran, wait, leader_id) => break (result, ran, wait, leader_id),
            }
        };
        if !matches!(ran, Ran::Made(_)) && drop(&result) {
            // It changed nothing.
            return Ok(None);
        }
        let wait = match wait {
            // Its records are in its batch, handed to the leadership's
            // task, which submits it in the next entry; or it made none,
            // but its answer may rest on batches not committed yet (a put
            // answered as a duplicate of one in flight, a read of it): it
            // waits for them — their commit, after it ran, shows this
            // leadership was still the one.
            Some(settle) => Wait::Entry(settle),
            // It made no records and every batch before it committed: a
            // quorum confirms the leadership. A leader cut off from the
            // others, that another leader has overtaken, must not answer
            // from its old state (a receipt refused as stale, a receive
            // finding nothing).
            None => Wait::Confirm,
        };
        let outcome = match wait {
            Wait::Confirm => confirm(&self.raft).await,
            // At most a commit's wait for the entries in flight before
            // it, and its own.
            Wait::Entry(settle) => settle.settled(COMMIT_TIMEOUT * 2).await,
        };
        match outcome {
            Ok(()) => Ok(Some(result)),
            Err(e) => {
                // Leadership was lost, or no quorum answered in time: what
                // the engine executed may or may not commit, so it is not
                // served from again.
                self.forget(leader_id).await;
                Err(e)
            }
        }
    }

    /// Makes sure the engine of leadership `leader_id` is at home: built
    /// (caught up) unless another request built it meanwhile, one at a
    /// time. Its shards are built together and go together: a shard from
    /// another build (or none) in any home and the engine is built again,
    /// once the leadership task of the engine it replaces (of the same
    /// leadership: its entries are not refused) has ended — an entry of
    /// its after the new engine's blank would be missing from it.
    async fn serve_leadership(&self, leader_id: LeaderId) -> Result<(), ReplicaError> {
        let _one = self.catching_up.lock().await;
        let mut builds = Vec::new();
        for home in 0..self.homes().len() {
            let build = self
                .at_slot(home, move |slot| {
                    slot.serving
                        .as_ref()
                        .filter(|s| s.leader == leader_id && !s.failed())
                        .map(|s| s.build)
                })
                .await?;
            builds.push(build);
        }
        if builds[0].is_some() && builds.iter().all(|b| *b == builds[0]) {
            return Ok(());
        }
        // The stale engine goes first (a whole copy of the partition).
        let mut leads = Vec::new();
        for home in 0..self.homes().len() {
            let lead = self
                .at_slot(home, move |slot| {
                    let lead = slot
                        .serving
                        .as_mut()
                        .filter(|s| s.leader == leader_id && !s.failed())
                        .and_then(|s| s.take_lead());
                    slot.set(None);
                    lead
                })
                .await?;
            leads.extend(lead);
        }
        for lead in leads {
            if tokio::time::timeout(COMMIT_TIMEOUT * 2, lead)
                .await
                .is_err()
            {
                return Err(ReplicaError::Unknown { leader: None });
            }
        }
        let servings = self.catch_up(leader_id).await?;
        for (home, serving) in servings.into_iter().enumerate() {
            self.at_slot(home, move |slot| slot.set(Some(serving)))
                .await?;
        }
        Ok(())
    }

    /// Sets what is told after each entry's outcome is noted (from the
    /// next leadership on).
    pub fn set_on_commit(&self, f: OnCommit) {
        *self.on_commit.lock().unwrap_or_else(|p| p.into_inner()) = Some(f);
    }

    /// Runs `op`, a read (it changes nothing), once this replica has
    /// confirmed with a quorum that it still leads and has applied every
    /// entry committed before (openraft's read index): a leader cut off
    /// from the others answers `NotLeader` instead of its old state. What
    /// `op` sees is the committed state and the operations in flight.
    pub async fn read<R: Send + 'static>(
        &self,
        shard: usize,
        op: impl FnOnce(&mut Owner) -> R + Send + 'static,
    ) -> Result<R, ReplicaError> {
        // An operation that makes no records is answered only once the
        // leadership is confirmed (or proved by the commit of entries in
        // flight before it): `execute` is that.
        self.execute(shard, op).await
    }

    /// Drops the engine of a leadership this node no longer holds (a
    /// deposed leader otherwise keeps it, a whole copy of the partition,
    /// until a request reaches it): answers whether it dropped one. The next
    /// leadership rebuilds its own from the state machine.
    pub async fn drop_stale_engine(&self) -> bool {
        let leading = self.leading().ok();
        let mut dropped = false;
        for home in 0..self.homes().len() {
            dropped |= self
                .at_slot(home, move |slot| {
                    let stale = slot
                        .serving
                        .as_ref()
                        .is_some_and(|s| Some(s.leader) != leading);
                    if stale {
                        slot.set(None);
                    }
                    stale
                })
                .await
                .unwrap_or(false);
        }
        dropped
    }

    /// Drops the engine of leadership `leader`, if it is still the one.
    async fn forget(&self, leader: LeaderId) {
        for home in 0..self.homes().len() {
            let _ = self
                .at_slot(home, move |slot| {
                    if slot.serving.as_ref().is_some_and(|s| s.leader == leader) {
                        slot.set(None);
                    }
                })
                .await;
        }
    }

    /// Everything in the leader's log committed and applied, an engine
    /// rebuilt from it. A blank entry is committed first: entries of
    /// earlier terms in the log (some of which clients may have been told
    /// are committed — a leader that restarted does not know) are then
    /// committed too, and applying up to the blank applies them all.
    async fn catch_up(&self, leader: LeaderId) -> Result<Vec<Serving>, ReplicaError> {
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
        let shards = self.shards();
        let engine = Engine::with_receipt_key(shards, self.clock.clone(), partition_key(secret));
        engine.set_id_space(self.id_space.load(std::sync::atomic::Ordering::Acquire));
        engine
            .restore_leased(image)
            .map_err(|e| ReplicaError::Rebuild(e.to_string()))?;
        // After the restore: what is stored stays whatever the limits.
        engine.set_limits(*self.limits.lock().unwrap_or_else(|p| p.into_inner()));
        // One owner a home, holding the shards that live there; the
        // records of an owner's shards are captured together (it runs one
        // operation at a time).
        let homes = self.homes().len();
        let captures: Vec<Arc<Mutex<Vec<u8>>>> = (0..homes)
            .map(|_| Arc::new(Mutex::new(Vec::new())))
            .collect();
        for shard in 0..shards {
            let records = captures[fila_core::owner_of_shard(shard, homes)].clone();
            engine.set_journal(shard, Some(Box::new(Capture(records))));
        }
        let owners = engine.into_owners(homes, TIMERS_PER_OPERATION);
        let on_commit = self
            .on_commit
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let build = self
            .builds
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(Serving::start_engine(
            owners.into_iter().zip(captures).collect(),
            shards,
            build,
            leader,
            &self.raft,
            on_commit,
        ))
    }

    /// Stops the Raft node.
    pub async fn shutdown(&self) -> Result<(), ReplicaError> {
        // The engine goes, without waiting for it to be gone (a server's
        // loops may have stopped already: the engine went with them, and
        // their mailboxes may have no room left).
        for home in self.homes() {
            let job: Job = Box::new(|slot| slot.set(None));
            let _ = tokio::time::timeout(SHUTDOWN_SEND, home.send(job)).await;
        }
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

/// The receipt key of the partition's engines: the partition's secret,
/// naming leases by sequence number, sub-queue and delivery count — what
/// every leader holds alike — so a committed lease's receipt works on the
/// next leader, and one of an earlier delivery does not.
fn partition_key(secret: [u64; 2]) -> ReceiptKey {
    ReceiptKey::fixed(secret[0], secret[1], 1).by_sequence()
}

pub(crate) fn poisoned() -> ReplicaError {
    ReplicaError::Raft("a lock was poisoned".to_owned())
}
