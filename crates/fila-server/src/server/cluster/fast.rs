//! A put, receive or delete run on the loop that read it, when this node
//! leads the queue's partition: the engine call is made on the loop, its
//! records go into the partition's next Raft entry (submitted by the
//! leadership's tasks, [`fila_cluster::Replica::try_execute`]), and the
//! loop holds the answer until that entry committed (`server/held.rs`) —
//! told by the partition's committer, which raises each holding loop's
//! flag and wakes it (`Loops::tell_committed`). No hop to the cluster
//! node's thread and back, no task per request. Anything else goes to the
//! cluster node's endpoint as before: a request of another kind, a queue
//! not in the routing table, a partition this node does not lead or whose
//! engine is taken (the loop only tries its lock), a receive that found
//! nothing and waits, an operation that made no records (it changed
//! nothing: run again there, its answer waits for what a quorum
//! confirms), and a request whose entry was refused before it was
//! appended (nothing was made: it runs again there, waiting for the next
//! leader).

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

    /// After an entry's outcome is noted: tells each loop waiting for word.
    pub(super) fn committed(&self) {
        if let Some(c) = self.c.upgrade() {
            crate::server::held::tell_loops(&c.shared.told, &c.shared.loops);
        }
    }

    /// Runs `job` on the calling loop when it can (see the module docs)
    /// and holds its answer in `held` (the loop then calls
    /// `HeldAnswers::take_done`: its entry may have committed already);
    /// gives it back for the endpoint otherwise (`None`: it ran here).
    pub(in crate::server) fn try_run(&self, job: RunJob, held: &mut HeldAnswers) -> Option<RunJob> {
        let Some(c) = self.c.upgrade() else {
            return Some(job);
        };
        if crate::ops::of(&job.req).cluster != crate::ops::OnCluster::LoopWrite
            || job.route.lp >= c.shared.loops.owners()
        {
            return Some(job);
        }
        let g = match crate::ops::queue_of(&job.req).and_then(|q| c.routes.get(q)) {
            Some(g) => *g as usize,
            None => return Some(job),
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
        let Some((answer, ticket)) = part.try_execute(run, keep) else {
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
