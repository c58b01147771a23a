//! A put, receive or delete run by a loop on its partition's leader
//! engine, whose shards the event loops keep as a single node's — a
//! partition's engine has the node's `shards`, shard *i* on loop *i* mod
//! loops (`Replica::home_of`), a queue's shard `fila_core::shard_of` —
//! and nothing else touches: the loop that
//! read the request runs it when it keeps the queue's shard, else sends
//! it there (`Msg::Lead`); the node's tasks send their work there too
//! (`LoopHome`, `Msg::Engine`), and so do the other shards the dead
//! letters bound for it (`Slot::take_outbox`, posted after each call on a
//! shard, `after_engine`). The engine call is made on the home, its
//! records go, as one batch, to the engine's leadership task, which puts
//! them into the next Raft entry ([`fila_cluster::Replica::run_at_home`]),
//! and the home holds the answer until that entry committed
//! (`server/held.rs`) — told by the partition's committer, which raises
//! each holding loop's flag and wakes it (`Loops::tell_committed`); the
//! answer then goes to the connection's loop. No lock, no task per
//! request. A receive that finds nothing and may wait parks in the shard
//! as on a single node (`Fast::park_here`, `ShardHost::park_lead`): a
//! later call on the shard that fills it, or the timer that ends its
//! wait, completes it, and the home answers it once the batch with its
//! deliveries commits (`ShardHost::after_engine`). Anything else goes to
//! the cluster node's endpoint: a request of another kind, a queue not in
//! the routing table, a partition this node does not lead or whose engine
//! is not built yet, an operation that made no records and saw every
//! batch committed (it changed nothing: run again there, its answer waits
//! for what a quorum confirms), a request whose entry was refused before
//! it was appended and a receive parked in an engine since dropped
//! (nothing was made: they run again there, waiting for the next leader).

use std::sync::{Arc, Weak};

use fila_proto::Request;

use super::groups::Cluster;
use crate::dispatch::Answer;
use crate::server::held::HeldAnswers;
use crate::server::host::RunJob;

/// What the loops reach of the cluster node.
pub(in crate::server) struct Fast {
    c: Weak<Cluster>,
}

impl Fast {
    pub(super) fn new(c: &Arc<Cluster>) -> Arc<Fast> {
        Arc::new(Fast {
            c: Arc::downgrade(c),
        })
    }

    /// After messages moved into partition `g`'s queues from a shard
    /// another loop keeps: the receives waiting at the endpoint on its
    /// queues look again (`ops.rs`'s moves wake the same way).
    pub(in crate::server) fn moved_in(&self, g: usize) {
        if let Some(w) = self.c.upgrade().as_ref().and_then(|c| c.waiters.get(g)) {
            w.wake_all();
        }
    }

    /// After an entry's outcome is noted: tells each loop waiting for word.
    pub(super) fn committed(&self) {
        if let Some(c) = self.c.upgrade() {
            crate::server::held::tell_loops(&c.shared.told, &c.shared.loops);
        }
    }

    /// The partition a request goes to and the loop that keeps its
    /// queue's shard of the partition's engine, when a loop runs it there
    /// itself: a put,
    /// receive or delete of a queue in the routing table, for a connection
    /// of a loop. `None`: for the endpoint.
    pub(in crate::server) fn route(&self, job: &RunJob) -> Option<(usize, usize)> {
        let c = self.c.upgrade()?;
        let owners = c.shared.loops.owners();
        if crate::ops::of(&job.req).cluster != crate::ops::OnCluster::LoopWrite
            || job.route.lp >= owners
        {
            return None;
        }
        let queue = crate::ops::queue_of(&job.req)?;
        let g = c.route(queue)? as usize;
        // Whether this node leads it is for the home to say (it knows
        // without a lock, `Replica::run_at_home`).
        let part = c.parts.get(g)?;
        Some((g, part.home_of(part.shard_of(queue))))
    }

    /// Runs `job` on partition `g`'s engine, which this loop keeps in
    /// `slot` (see the module docs), and holds its answer in `held` (the
    /// loop then calls `HeldAnswers::take_done`: its entry may have
    /// committed already); gives it back for the endpoint otherwise
    /// (`None`: it ran here).
    pub(in crate::server) fn run_here(
        &self,
        g: usize,
        job: RunJob,
        held: &mut HeldAnswers,
        slot: &mut fila_cluster::Slot,
    ) -> Option<RunJob> {
        let Some(c) = self.c.upgrade() else {
            return Some(job);
        };
        let Some(part) = c.parts.get(g) else {
            return Some(job);
        };
        let mut req = job.req.clone();
        let waits = match &mut req {
            Request::Receive(r) => r.wait_ms.replace(0) != Some(0),
            _ => false,
        };
        let room = job.route.room;
        let put = match &req {
            Request::Put {
                queue, messages, ..
            } => Some((queue.clone(), messages.len())),
            _ => None,
        };
        // A receive that found nothing and may wait: the endpoint's.
        let keep = |answer: &Answer| {
            !(waits && matches!(answer, Answer::Messages(_, ms) if ms.is_empty()))
        };
        let run = move |owner: &mut fila_core::Owner| super::run::run_on(owner, req, room);
        let Some((answer, ticket)) = part.run_at_home(slot, run, keep) else {
            return Some(job);
        };
        if let Some((queue, n)) = put.filter(|_| !answer.is_error()) {
            // Receives waiting at the endpoint look again.
            c.waiters[g].put(&queue, n);
        }
        held.hold(g, ticket, job, answer);
        None
    }
}

/// What became of a receive that may wait, run on its partition's engine
/// ([`Fast::park_here`]).
pub(in crate::server) enum Parking {
    /// It was answered: held until its batch commits.
    Held,
    /// It parked in the engine as `wait`; its answer may take at most
    /// `largest` bytes a message.
    Waits {
        wait: fila_core::WaitId,
        job: RunJob,
        largest: Option<u64>,
    },
    /// For the endpoint (it did not run, or changed nothing).
    Elsewhere(RunJob),
}

impl Fast {
    /// Whether `job` is a receive that may wait, to park in its
    /// partition's engine on its home ([`Fast::park_here`]).
    pub(in crate::server) fn may_wait(job: &RunJob) -> bool {
        matches!(&job.req, Request::Receive(r) if r.wait_ms != Some(0))
    }

    /// Runs `job`, a receive that may wait, on partition `g`'s engine kept
    /// here in `slot`: answered when it found messages (held in `held`
    /// until their batch commits), else parked in the engine, as on a
    /// single node, until a put, a release or a timer fills it or its
    /// wait ends (the home then finds it in `Slot::take_woken`).
    pub(in crate::server) fn park_here(
        &self,
        g: usize,
        job: RunJob,
        held: &mut HeldAnswers,
        slot: &mut fila_cluster::Slot,
    ) -> Parking {
        let Some(c) = self.c.upgrade() else {
            return Parking::Elsewhere(job);
        };
        let Some(part) = c.parts.get(g) else {
            return Parking::Elsewhere(job);
        };
        let Some(queue) = crate::ops::queue_of(&job.req).map(str::to_owned) else {
            return Parking::Elsewhere(job);
        };
        let (req, room) = (job.req.clone(), job.route.room);
        let op = move |owner: &mut fila_core::Owner| {
            let largest = owner
                .queue_settings(&queue)
                .ok()
                .map(|s| fila_core::answer_bytes_max(s.max_message_bytes));
            (crate::dispatch::run(owner, req, room), largest)
        };
        match part.park_at_home(slot, op) {
            Some(((crate::dispatch::Outcome::Parked(wait), largest), _)) => {
                Parking::Waits { wait, job, largest }
            }
            Some(((crate::dispatch::Outcome::Answer(answer), _), Some(ticket))) => {
                held.hold(g, ticket, job, answer);
                Parking::Held
            }
            // It changed nothing: answered where a quorum confirms it.
            Some(((crate::dispatch::Outcome::Answer(_), _), None)) | None => {
                Parking::Elsewhere(job)
            }
        }
    }

    /// Ends receive `wait` parked in partition `g`'s engine in `slot`
    /// (see `Replica::cancel_at_home`).
    pub(in crate::server) fn cancel_here(
        &self,
        g: usize,
        slot: &mut fila_cluster::Slot,
        wait: fila_core::WaitId,
    ) -> bool {
        let Some(c) = self.c.upgrade() else {
            return false;
        };
        c.parts
            .get(g)
            .is_some_and(|part| part.cancel_at_home(slot, wait))
    }

    /// Runs the due timers of partition `g`'s engine in `slot`, at most
    /// `budget` (see `Replica::advance_at_home`).
    pub(in crate::server) fn advance_here(
        &self,
        g: usize,
        slot: &mut fila_cluster::Slot,
        budget: usize,
    ) {
        if let Some(part) = self.c.upgrade().as_ref().and_then(|c| c.parts.get(g)) {
            part.advance_at_home(slot, budget);
        }
    }
}

/// The home of a partition's engine's shards that one event loop keeps
/// (its index is the loop's), reached by the node's
/// tasks and the other shards through its mailbox (`Msg::Engine`).
pub(super) struct LoopHome {
    pub(super) loops: crate::server::mailbox::Loops,
    pub(super) lp: usize,
    pub(super) part: usize,
}

impl fila_cluster::Home for LoopHome {
    fn send(
        &self,
        job: fila_cluster::Job,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        let msg = crate::server::mailbox::Msg::Engine {
            part: self.part,
            job,
        };
        Box::pin(self.loops.push(self.lp, msg))
    }
}
