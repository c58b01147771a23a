//! (A cluster node.) The shard host's side of the partitions whose
//! leader engines' shards this loop keeps (`cluster/fast.rs`): their slots, the
//! puts, receives and deletes run on them, the receives parked in them
//! and their timers, and what those engines complete.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use fila_core::WaitId;
use fila_proto::Request;

use super::super::mailbox::{Msg, Post};
use super::{park_limit, park_refused, Done, RunJob, ShardHost, TIMERS_PER_TURN};
use crate::dispatch;

/// (A cluster node.) The receives parked in one partition's engine, kept
/// by this loop: each one's request (run again at the endpoint if the
/// engine goes), and the engine's epoch they parked in.
#[derive(Default)]
pub(super) struct PartWaits {
    epoch: u64,
    waits: HashMap<WaitId, RunJob>,
}

impl ShardHost {
    /// (A cluster node.) When the next timer is due of the partitions'
    /// engines' shards kept here.
    pub(super) fn parts_deadline(&self) -> Option<u64> {
        self.engines
            .iter()
            .filter_map(fila_cluster::Slot::next_deadline)
            .min()
    }

    /// (A cluster node.) The slot of partition `part`'s engine, kept here.
    pub(super) fn engine(&mut self, part: usize) -> &mut fila_cluster::Slot {
        if self.engines.len() <= part {
            self.engines.resize_with(part + 1, Default::default);
        }
        &mut self.engines[part]
    }

    /// (A cluster node.) Runs `run` on partition `g`'s engine, kept here
    /// (`cluster/fast.rs`), its answer held until its entry commits;
    /// otherwise it goes to the cluster node's endpoint.
    pub(super) fn lead(&mut self, g: usize, run: RunJob, post: &mut Post) {
        self.engine(g);
        if crate::server::cluster::fast::Fast::may_wait(&run) {
            self.park_lead(g, run, post);
        } else {
            // Disjoint fields: the shared state is only read.
            let (Some(f), Some(cluster)) = (self.shared.fast.get(), self.shared.cluster) else {
                debug_assert!(
                    false,
                    "a partition's request on a node that is no cluster's"
                );
                return;
            };
            if let Some(run) = f.run_here(g, run, &mut self.held, &mut self.engines[g]) {
                post.send(cluster, Msg::Run(run));
            }
        }
        // What it ran may have filled receives parked here; its entry
        // may have committed before this loop asked to be told.
        self.after_engine(g, post);
    }

    /// (A cluster node.) Runs `run`, a receive that may wait, on
    /// partition `g`'s engine kept here: answered, or parked in the
    /// engine within the limits on parked receives (as on a single node,
    /// `confirm_park`), its connection then keeping only the room its
    /// answer could need (`Done::Waits`).
    fn park_lead(&mut self, g: usize, run: RunJob, post: &mut Post) {
        use crate::server::cluster::fast::Parking;
        let shared = self.shared.clone();
        let (Some(f), Some(cluster)) = (shared.fast.get(), shared.cluster) else {
            return;
        };
        let may_park = run.may_park;
        let (wait, mut job, largest) =
            match f.park_here(g, run, &mut self.held, &mut self.engines[g]) {
                Parking::Held => return,
                Parking::Elsewhere(run) => {
                    post.send(cluster, Msg::Run(run));
                    return;
                }
                Parking::Waits { wait, job, largest } => (wait, job, largest),
            };
        if let Some((limit, max)) = park_limit(&shared, may_park) {
            // Nothing ran since it parked: it is still there.
            f.cancel_here(g, &mut self.engines[g], wait);
            let answer = park_refused(limit, max);
            self.deliver(job.route, Done::Answer(answer, false), post);
            return;
        }
        shared.metrics.parked.fetch_add(1, Ordering::Relaxed);
        let mut room = job.route.room;
        if let (Some(largest), Request::Receive(r)) = (largest, &job.req) {
            let need = largest.saturating_mul(u64::from(r.max_messages));
            room = room.min(usize::try_from(need).unwrap_or(usize::MAX));
        }
        // Its connection learns where it parked (to cancel it if it
        // closes first), told with the room it held until now.
        let held = job.route;
        job.route.room = room;
        let parked = Done::PartParked {
            part: g,
            wait,
            room,
        };
        self.deliver(held, parked, post);
        let epoch = self.engines[g].epoch();
        if self.part_waits.len() <= g {
            self.part_waits.resize_with(g + 1, Default::default);
        }
        if self.part_waits[g].epoch != epoch {
            // Any left of an engine gone go first (`after_engine` sends
            // them on).
            self.after_engine(g, post);
            self.part_waits[g].epoch = epoch;
        }
        self.part_waits[g].waits.insert(wait, job);
    }

    /// (A cluster node.) Cancels receive `wait` parked in partition
    /// `part`'s engine kept here when it is still connection `conn`'s of
    /// loop `lp` (not answered yet, not sent on after its engine went);
    /// answers it with no messages when `answer`.
    pub(super) fn cancel_part_here(
        &mut self,
        part: usize,
        wait: WaitId,
        (lp, conn): (usize, crate::server::front::ConnRef),
        answer: bool,
        post: &mut Post,
    ) {
        let shared = self.shared.clone();
        let Some(f) = shared.fast.get() else {
            return;
        };
        let ours = self
            .part_waits
            .get(part)
            .and_then(|w| w.waits.get(&wait))
            .is_some_and(|job| job.route.lp == lp && job.route.conn == conn);
        if !ours || part >= self.engines.len() {
            return;
        }
        if f.cancel_here(part, &mut self.engines[part], wait) {
            let job = self.part_waits[part].waits.remove(&wait).expect("ours");
            self.unpark_count();
            if answer {
                let none = dispatch::messages_of(Vec::new(), job.route.fields);
                self.deliver(job.route, Done::Answer(none, false), post);
            }
        }
        // Else it was filled or ended: its answer is on its way.
        self.after_engine(part, post);
    }

    /// (A cluster node.) After partition `g`'s engine ran something:
    /// answers the receives parked in it that were filled or whose wait
    /// ended (held until the batch with their deliveries commits), sends
    /// those of an engine since dropped to the endpoint (which waits for
    /// the next leader), and lets out held answers whose entries settled.
    pub(super) fn after_engine(&mut self, g: usize, post: &mut Post) {
        let Some(cluster) = self.shared.cluster else {
            return;
        };
        if let Some(slot) = self.engines.get_mut(g) {
            // Dead letters for shards of the engine other loops keep, to
            // those loops (a home's index is its loop's), in the order
            // they were made.
            for (lp, job) in slot.take_outbox() {
                post.send(lp, Msg::Engine { part: g, job });
            }
            if slot.take_moved_in() {
                if let Some(f) = self.shared.fast.get() {
                    f.moved_in(g);
                }
            }
        }
        if g < self.engines.len() && g < self.part_waits.len() {
            let woken = self.engines[g].take_woken();
            let epoch = self.engines[g].epoch();
            for w in woken {
                let Some(job) = self.part_waits[g].waits.remove(&w.wait) else {
                    continue;
                };
                self.unpark_count();
                let answer = match w.result {
                    Ok(ms) => dispatch::messages_of(ms, job.route.fields),
                    Err(e) => dispatch::Answer::failed(&e),
                };
                match w.ticket {
                    Some(ticket) => self.held.hold(g, ticket, job, answer),
                    None => self.deliver(job.route, Done::Answer(answer, false), post),
                }
            }
            if self.part_waits[g].epoch != epoch {
                let gone = std::mem::take(&mut self.part_waits[g].waits);
                self.part_waits[g].epoch = epoch;
                for (_, job) in gone {
                    self.unpark_count();
                    post.send(cluster, Msg::Run(job));
                }
            }
        }
        self.committed(post);
    }

    /// (A cluster node.) Runs the due timers of the partitions' engines'
    /// shards kept here, as a single node's loop runs its shards' (a wait
    /// that ends, a lease that ends and fills a parked receive, or that
    /// dead-letters its message to a queue another loop keeps), and the
    /// timers of those with receives parked, and answers what they
    /// completed; while the server stops, ends every parked receive with
    /// no messages.
    pub(super) fn advance_parts(&mut self, post: &mut Post) {
        let shared = self.shared.clone();
        let Some(f) = shared.fast.get() else {
            return;
        };
        let stopping = shared.stopping.load(Ordering::Acquire);
        let now = self.owner.totals().now_ms();
        for g in 0..self.engines.len() {
            let parked = self.part_waits.get(g).is_some_and(|w| !w.waits.is_empty());
            let due = self.engines[g].next_deadline().is_some_and(|at| at <= now);
            if !parked && !due {
                continue;
            }
            f.advance_here(g, &mut self.engines[g], TIMERS_PER_TURN);
            self.after_engine(g, post);
            if stopping && parked {
                let waits: Vec<WaitId> = self.part_waits[g].waits.keys().copied().collect();
                for wait in waits {
                    if f.cancel_here(g, &mut self.engines[g], wait) {
                        let job = self.part_waits[g].waits.remove(&wait).expect("parked");
                        self.unpark_count();
                        let answer = dispatch::messages_of(Vec::new(), job.route.fields);
                        self.deliver(job.route, Done::Answer(answer, false), post);
                    }
                }
                self.after_engine(g, post);
            }
        }
    }
}
