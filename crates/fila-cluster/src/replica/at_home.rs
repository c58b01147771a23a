//! A replica's side of its engine's homes ([`crate::home`]): where the
//! engine's shards live (`set_homes`, one task of its own otherwise), how
//! a task's work reaches a shard (`at_home`, a job and its answer by
//! message), what a home itself runs with its shard in hand (a request of
//! its own, a receive that parks, the timers, a cancel), and the word
//! each home is sent of the node's leadership (`tell_leadership`).

use std::sync::Arc;

use fila_core::commits::Ticket;
use fila_core::Owner;
use fila_wal::Storage;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::Raft;

use super::{Replica, ReplicaError, HOME_TIMEOUT};
use crate::home::{Home, Job, Slot, TaskHome};
use crate::serving::{Ran, Serving};
use crate::{StateMachine, TypeConfig};

impl<S: Storage + 'static> Replica<S> {
    /// Sets the threads its engine's shards live on (a server's event
    /// loops) and how many shards it has (at least one): shard *i* lives
    /// on home `fila_core::owner_of_shard(i, homes)`, as a single node's
    /// shards on its loops. Before it is first used; `false` when it was
    /// used already (then it keeps its homes). Each home is told which
    /// leadership this node holds whenever that changes
    /// (`tell_leadership`).
    pub fn set_homes(&self, homes: Vec<Arc<dyn Home>>, shards: usize) -> bool {
        if homes.is_empty() || self.homes.set((homes.clone(), shards.max(1))).is_err() {
            return false;
        }
        for home in homes {
            tokio::spawn(tell_leadership(self.raft.clone(), home));
        }
        true
    }

    pub(super) fn homes(&self) -> &[Arc<dyn Home>] {
        &self.placed().0
    }

    fn placed(&self) -> &(Vec<Arc<dyn Home>>, usize) {
        self.homes.get_or_init(|| {
            let homes = TaskHome::start_set(1);
            for home in &homes {
                tokio::spawn(tell_leadership(self.raft.clone(), home.clone()));
            }
            (homes, 1)
        })
    }

    /// How many shards its engine has.
    pub fn shards(&self) -> usize {
        self.placed().1
    }

    /// The shard of its engine that holds queue `name`.
    pub fn shard_of(&self, name: &str) -> usize {
        fila_core::shard_of(name, self.shards())
    }

    /// One shard of each home that keeps any (shard *h* lives on home
    /// *h*): what an operation over every queue — a list — runs on, once
    /// a home, since an owner answers for all its shards.
    pub fn home_shards(&self) -> std::ops::Range<usize> {
        0..self.shards().min(self.homes().len())
    }

    /// The home (its index) that shard `shard` lives on.
    pub fn home_of(&self, shard: usize) -> usize {
        fila_core::owner_of_shard(shard, self.homes().len())
    }

    /// Runs `job` on the slot of shard `shard`'s home: its result, waited
    /// for at most [`HOME_TIMEOUT`] (then `Unknown`: it may still run).
    pub(super) async fn at_home<T: Send + 'static>(
        &self,
        shard: usize,
        job: impl FnOnce(&mut Slot) -> T + Send + 'static,
    ) -> Result<T, ReplicaError> {
        self.at_slot(self.home_of(shard), job).await
    }

    /// Runs `job` on the slot of home `home` (its index).
    pub(super) async fn at_slot<T: Send + 'static>(
        &self,
        home: usize,
        job: impl FnOnce(&mut Slot) -> T + Send + 'static,
    ) -> Result<T, ReplicaError> {
        let Some(home) = self.homes().get(home) else {
            return Err(ReplicaError::Raft(format!("the engine has no home {home}")));
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |slot| {
            let _ = tx.send(job(slot));
        });
        let ran = tokio::time::timeout(HOME_TIMEOUT, async {
            home.send(job).await;
            rx.await
        })
        .await;
        match ran {
            Ok(Ok(t)) => Ok(t),
            Ok(Err(_)) => Err(ReplicaError::Raft("the engine's home stopped".to_owned())),
            Err(_) => Err(ReplicaError::Unknown { leader: None }),
        }
    }

    /// Runs `op` at once on the engine in `slot` — called by the engine's
    /// home, on its thread (a server's event loop, for a request it read)
    /// — when this node serves the partition from it: its result and the
    /// batch its answer waits for (see [`Replica::execute`]). `None` when
    /// it did not run (this node does not serve the partition, or has not
    /// built the engine of its leadership yet), or ran and made no records
    /// and either saw every batch committed or `keep` said to drop its
    /// result (then it changed nothing): the caller runs it through
    /// [`Replica::execute`] instead.
    pub fn run_at_home<R>(
        &self,
        slot: &mut Slot,
        op: impl FnOnce(&mut Owner) -> R,
        keep: impl FnOnce(&R) -> bool,
    ) -> Option<(R, Ticket)> {
        // What the home was last told of the leadership (no lock: see
        // `tell_leadership`; an entry goes in only on the condition that
        // its leadership still holds, so a word late by a moment makes
        // nothing wrong).
        let s = Self::serving_at_home(slot)?;
        // It ran: from here on it is answered through its ticket.
        match s.run(op) {
            (result, Ran::Made(k)) => Some((result, s.ticket(k))),
            (result, Ran::Saw(k)) if keep(&result) => Some((result, s.ticket(k))),
            _ => None,
        }
    }

    /// The engine of `slot`, when the home serves the partition from it
    /// (see [`Replica::run_at_home`]).
    fn serving_at_home(slot: &mut Slot) -> Option<&mut Serving> {
        let leader_id = slot.leading?;
        slot.serving
            .as_mut()
            .filter(|s| s.leader == leader_id && !s.failed())
    }

    /// Runs `op` — a receive that may park in the engine — at once on the
    /// engine in `slot`, on its home's thread, when this node serves the
    /// partition from it: its result, and the batch its answer waits for
    /// (none when it made no records and saw every batch committed; then
    /// it changed nothing, and an answer from it needs the leadership
    /// confirmed). A receive parked so is completed by a later call on
    /// the engine (a put, a release, a timer: [`Replica::advance_at_home`])
    /// and found in [`Slot::take_woken`], with the batch its deliveries
    /// are in; one the engine was dropped with is found there too (its
    /// slot's epoch moved on). `None` when it did not run.
    pub fn park_at_home<R>(
        &self,
        slot: &mut Slot,
        op: impl FnOnce(&mut Owner) -> R,
    ) -> Option<(R, Option<Ticket>)> {
        let s = Self::serving_at_home(slot)?;
        match s.run(op) {
            (result, Ran::Made(k) | Ran::Saw(k)) => Some((result, Some(s.ticket(k)))),
            (result, Ran::Settled) => Some((result, None)),
        }
    }

    /// Runs the timers of the engine in `slot` that are due, at most
    /// `budget` (on its home's thread): a lease or a wait that ends
    /// completes a parked receive. Answers when the next is due, if any
    /// (none when the home does not serve the partition).
    pub fn advance_at_home(&self, slot: &mut Slot, budget: usize) -> Option<u64> {
        let s = Self::serving_at_home(slot)?;
        s.run(|owner| {
            owner.advance(budget);
        });
        s.owner.next_deadline()
    }

    /// Ends a receive parked in the engine of `slot` (its answer is not
    /// wanted); `false` when it was completed already (then it is among
    /// the woken) or is gone with its engine.
    pub fn cancel_at_home(&self, slot: &mut Slot, wait: fila_core::WaitId) -> bool {
        slot.serving
            .as_mut()
            .is_some_and(|s| s.owner.cancel_wait(wait))
    }

    /// [`Replica::run_at_home`] on shard `shard`, sent to its home as a
    /// job (what a server's event loop does, for a test or a caller that
    /// is not the home).
    pub async fn try_at_home<R: Send + 'static>(
        self: &Arc<Self>,
        shard: usize,
        op: impl FnOnce(&mut Owner) -> R + Send + 'static,
        keep: impl FnOnce(&R) -> bool + Send + 'static,
    ) -> Option<(R, Ticket)> {
        let me = self.clone();
        self.at_home(shard, move |slot| me.run_at_home(slot, op, keep))
            .await
            .ok()
            .flatten()
    }
}

/// Tells `home` which leadership this node holds (`Slot::leading`), once
/// and then after each change of its vote, state or leader (openraft's
/// server metrics, which change with those only, not with every entry);
/// ends when the Raft node stops. The home's own look at the leadership
/// takes no lock.
async fn tell_leadership<S: Storage + 'static>(
    raft: Raft<TypeConfig, StateMachine<S>>,
    home: Arc<dyn Home>,
) {
    let mut changes = raft.server_metrics();
    let mut told = None;
    loop {
        let now = {
            let m = changes.borrow_watched();
            let leader = *m.vote.leader_id();
            let mine = m.vote.is_committed()
                && leader.node_id == m.id
                && m.state == openraft::ServerState::Leader;
            mine.then_some(leader)
        };
        if told != Some(now) {
            home.send(Box::new(move |slot: &mut Slot| slot.leading = now))
                .await;
            told = Some(now);
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}
