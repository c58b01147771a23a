//! Where a partition's leader keeps its engine: [`Home`]s, each one
//! thread that owns the [`Slot`] of the shards it keeps (shard *i* on home
//! *i* mod homes) and runs, one at a time and in the order they were sent, the [`Job`]s sent
//! to it. Nothing else touches the shard, so it is behind no lock: a
//! request run elsewhere (a task of the node, another event loop) is sent
//! to the home of its queue's shard as a job, and its result comes back by
//! message. A dead letter bound for a queue of another shard leaves its
//! slot as a job for that shard's home ([`Slot::take_outbox`]), as a
//! single node's loops hand dead letters on.
//!
//! A server's event loops are the homes of the partitions it hosts (each
//! keeps the shards a single node's loop would; they run their requests themselves, and
//! the node's tasks send them jobs through their mailboxes); without
//! them, a replica's one shard is at home in a task of its own
//! ([`TaskHome`]: the simulation, the tests, which may start several that
//! hand each other their dead letters, [`TaskHome::start_set`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use crate::replica::LeaderId;
use crate::serving::Serving;

/// The shards of its engine a home keeps for one partition: the leader's,
/// while this node serves it (none otherwise).
#[derive(Default)]
pub struct Slot {
    pub(crate) serving: Option<Serving>,
    /// The leadership this node holds, as the home was last told
    /// (`replica::tell_leadership`).
    pub(crate) leading: Option<LeaderId>,
    /// How many times the engine was replaced or dropped: receives parked
    /// in an earlier one are gone with it.
    epoch: u64,
    /// Receives parked in an engine dropped before their completions
    /// were taken.
    orphans: Vec<Woken>,
    /// Dead letters (or moved messages) from other homes' shards were
    /// taken in since the last look ([`Slot::take_moved_in`]).
    moved_in: bool,
}

/// A receive parked in the engine that a later call completed (see
/// [`crate::Replica::park_at_home`]).
pub struct Woken {
    /// The receive, as its parking named it.
    pub wait: fila_core::WaitId,
    /// Its messages, none when its wait ended, or an error.
    pub result: Result<Vec<fila_core::Message>, fila_core::Error>,
    /// The batch holding its deliveries: its answer waits for that
    /// batch's commit (none when it leased nothing).
    pub ticket: Option<fila_core::commits::Ticket>,
}

impl Slot {
    /// Replaces (or drops) the engine: receives parked in the old one end
    /// with it (the epoch moves on).
    pub(crate) fn set(&mut self, serving: Option<Serving>) {
        if self.serving.is_none() && serving.is_none() {
            return;
        }
        if let Some(mut old) = self.serving.take() {
            self.orphans.extend(old.take_woken());
        }
        self.serving = serving;
        self.epoch += 1;
    }

    /// When the engine's next timer is due (none without an engine).
    pub fn next_deadline(&self) -> Option<u64> {
        self.serving.as_ref().and_then(|s| s.owner.next_deadline())
    }

    /// How many times the engine was replaced or dropped.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The dead letters the engine's calls since the last look sent to
    /// queues of shards other homes keep, as one job for each home they
    /// are bound for: `(home, job)`, the home by its index. The home sends
    /// each there after every job or call it ran, in the order taken (so a
    /// home takes another's dead letters in the order they were made).
    /// The job takes them into that home's shards if they are of the same
    /// leadership; else they are dropped with the engine they left
    /// (nothing of their move was recorded: the next leadership has them
    /// where they were).
    pub fn take_outbox(&mut self) -> Vec<(usize, Job)> {
        let Some(s) = self.serving.as_mut().filter(|s| s.has_outbox()) else {
            return Vec::new();
        };
        let (leader, shards, homes) = (s.leader, s.shards, s.homes);
        let mut bound: BTreeMap<usize, Vec<fila_core::Transit>> = BTreeMap::new();
        for t in s.take_outbox() {
            let home = fila_core::owner_of_shard(t.shard(shards), homes);
            bound.entry(home).or_default().push(t);
        }
        bound
            .into_iter()
            .map(|(home, ts)| {
                let job: Job = Box::new(move |slot: &mut Slot| slot.accept(leader, ts));
                (home, job)
            })
            .collect()
    }

    /// Takes dead letters another shard of leadership `leader` sent.
    fn accept(&mut self, leader: LeaderId, ts: Vec<fila_core::Transit>) {
        if let Some(s) = self
            .serving
            .as_mut()
            .filter(|s| s.leader == leader && !s.failed())
        {
            s.run(|owner| {
                for t in ts {
                    owner.accept(t);
                }
            });
            self.moved_in = true;
        }
    }

    /// Whether messages from other homes' shards were taken in since the
    /// last look (receives waiting elsewhere for them look again).
    pub fn take_moved_in(&mut self) -> bool {
        std::mem::take(&mut self.moved_in)
    }

    /// The receives parked in the engine that calls since the last look
    /// completed, in the order they completed.
    pub fn take_woken(&mut self) -> Vec<Woken> {
        let mut woken = std::mem::take(&mut self.orphans);
        if let Some(s) = self.serving.as_mut() {
            woken.extend(s.take_woken());
        }
        woken
    }
}

/// Work for a partition's engine, run on its home's thread.
pub type Job = Box<dyn FnOnce(&mut Slot) + Send>;

/// The thread one shard of a partition's engine lives on.
pub trait Home: Send + Sync {
    /// Has `job` run on the partition's slot on the home's thread, after
    /// the jobs sent before it; waits (without blocking its thread) while
    /// the home has no room. A home that stopped drops the job (its
    /// sender sees its answer never come). After each job (and each call
    /// of its own on the slot) the home sends what [`Slot::take_outbox`]
    /// answers to the homes of those shards.
    fn send(&self, job: Job) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// A home that is a task of its own, on the runtime it was started on.
pub struct TaskHome {
    jobs: tokio::sync::mpsc::UnboundedSender<Job>,
}

impl TaskHome {
    /// Starts `n` homes (at least one), one for each shard of an engine,
    /// each a task on the current tokio runtime, that send each other the
    /// jobs their slots' outboxes hold; a task ends, dropping its shard,
    /// once its home is dropped.
    pub fn start_set(n: usize) -> Vec<Arc<dyn Home>> {
        let peers: Arc<OnceLock<Vec<tokio::sync::mpsc::UnboundedSender<Job>>>> = Arc::default();
        let homes: Vec<TaskHome> = (0..n.max(1))
            .map(|_| {
                let (jobs, mut to_run) = tokio::sync::mpsc::unbounded_channel::<Job>();
                let peers = peers.clone();
                tokio::spawn(async move {
                    let mut slot = Slot::default();
                    while let Some(job) = to_run.recv().await {
                        job(&mut slot);
                        for (home, job) in slot.take_outbox() {
                            if let Some(peer) = peers.get().and_then(|p| p.get(home)) {
                                let _ = peer.send(job);
                            }
                        }
                    }
                });
                TaskHome { jobs }
            })
            .collect();
        let _ = peers.set(homes.iter().map(|h| h.jobs.clone()).collect());
        homes
            .into_iter()
            .map(|h| Arc::new(h) as Arc<dyn Home>)
            .collect()
    }
}

impl Home for TaskHome {
    fn send(&self, job: Job) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let _ = self.jobs.send(job);
        Box::pin(std::future::ready(()))
    }
}
