//! Where a partition's leader keeps its engine: a [`Home`], one thread
//! that owns the engine's [`Slot`] and runs, one at a time and in the
//! order they were sent, the [`Job`]s sent to it. Nothing else touches
//! the engine, so it is behind no lock: a request run elsewhere (a task
//! of the node, another event loop) is sent to the home as a job, and its
//! result comes back by message.
//!
//! A server's event loop is the home of the partitions it hosts (it runs
//! their requests itself, and the node's tasks send it jobs through its
//! mailbox); without one, a replica's home is a task of its own
//! ([`TaskHome`]: the simulation, the tests).

use std::future::Future;
use std::pin::Pin;

use crate::replica::LeaderId;
use crate::serving::Serving;

/// The engine a home keeps for one partition: the leader's, while this
/// node serves it (none otherwise).
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

/// The thread a partition's engine lives on.
pub trait Home: Send + Sync {
    /// Has `job` run on the partition's slot on the home's thread, after
    /// the jobs sent before it; waits (without blocking its thread) while
    /// the home has no room. A home that stopped drops the job (its
    /// sender sees its answer never come).
    fn send(&self, job: Job) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// A home that is a task of its own, on the runtime it was started on.
pub struct TaskHome {
    jobs: tokio::sync::mpsc::UnboundedSender<Job>,
}

impl TaskHome {
    /// Starts its task (on the current tokio runtime); the task ends,
    /// dropping the engine, once the home is dropped.
    pub fn start() -> TaskHome {
        let (jobs, mut to_run) = tokio::sync::mpsc::unbounded_channel::<Job>();
        tokio::spawn(async move {
            let mut slot = Slot::default();
            while let Some(job) = to_run.recv().await {
                job(&mut slot);
            }
        });
        TaskHome { jobs }
    }
}

impl Home for TaskHome {
    fn send(&self, job: Job) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let _ = self.jobs.send(job);
        Box::pin(std::future::ready(()))
    }
}
