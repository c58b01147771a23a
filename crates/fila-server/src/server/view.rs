//! What other threads ask of the loops: the log writer (a consistent cut
//! for a snapshot, pieces of shards) and the metrics endpoint (per-queue
//! series). They never touch a shard: every question goes to the loop
//! that owns it, through its mailbox, and is answered between two of its
//! turns.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender as MpscSender;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use fila_core::event::{ExportCursor, ImagePart};
use fila_core::{QueueStats, Totals};

use super::mailbox::{Loops, Msg};

/// How long a snapshot or a scrape waits for every loop.
const GATHER_DEADLINE: Duration = Duration::from_secs(2);

/// Every loop stopped at once, for the moment a snapshot begins: the log
/// writer drains every shard's buffer with none of them changing, so the
/// snapshot's LSN is a consistent cut (no record before it follows one
/// after it).
pub(in crate::server) struct Pause {
    arrived: Mutex<usize>,
    all_in: Condvar,
    released: Mutex<bool>,
    release: Condvar,
}

impl Pause {
    fn new() -> Pause {
        Pause {
            arrived: Mutex::new(0),
            all_in: Condvar::new(),
            released: Mutex::new(false),
            release: Condvar::new(),
        }
    }

    /// A loop's part: it is stopped (it published everything it logged);
    /// then it waits to be let go.
    pub(in crate::server) fn arrive(&self) {
        *lock(&self.arrived) += 1;
        self.all_in.notify_all();
        let mut released = lock(&self.released);
        while !*released {
            released = self
                .release
                .wait(released)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    fn let_go(&self) {
        *lock(&self.released) = true;
        self.release.notify_all();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The log writer's question to one loop: the next piece of a shard's
/// state for a snapshot.
pub(in crate::server) struct ExportAsk {
    pub(in crate::server) cursor: ExportCursor,
    pub(in crate::server) max_messages: usize,
    pub(in crate::server) max_bytes: u64,
    pub(in crate::server) reply: MpscSender<(ExportCursor, Vec<ImagePart>)>,
}

/// A scrape's question to one loop.
pub(in crate::server) struct ScrapeAsk {
    pub(in crate::server) max: usize,
    pub(in crate::server) reply: MpscSender<Vec<(String, QueueStats)>>,
}

/// What a cluster node's thread publishes for the other threads.
#[derive(Default)]
pub(in crate::server) struct Published {
    /// Its view of its cluster, refreshed every 100 ms (what
    /// `ClusterStatus` answers, what `/metrics` shows).
    pub(in crate::server) view: Mutex<Option<fila_proto::ClusterStatus>>,
    /// While it leads: the totals of the partition's engine (`/metrics`).
    pub(in crate::server) totals: Mutex<Option<Totals>>,
}

/// The engine as the loops hold it, for the log writer (snapshots) and
/// the metrics endpoint (per-queue series): both ask every loop through
/// its mailbox and never touch a shard themselves. On a cluster node the
/// metrics endpoint asks the cluster's endpoint instead, which answers
/// while it leads the partition.
pub(in crate::server) struct LoopsView {
    pub(in crate::server) loops: Loops,
    pub(in crate::server) totals: Totals,
    /// Loops still running.
    pub(in crate::server) alive: Arc<AtomicU64>,
    /// A cluster node: its endpoint, and what its thread publishes.
    pub(in crate::server) cluster: Option<(usize, Arc<Published>)>,
}

impl LoopsView {
    /// Sends `msg()` to every loop, each within the gathering deadline;
    /// `false` when one's mailbox stayed full.
    fn ask(&self, msg: impl Fn() -> Msg, deadline: Instant) -> bool {
        (0..self.loops.owners()).all(|dest| self.loops.push_within(dest, msg(), deadline))
    }
}

impl fila_store::Source for LoopsView {
    fn quiesce(&self, during: &mut dyn FnMut()) -> bool {
        let n = self.loops.owners();
        let pause = Arc::new(Pause::new());
        let deadline = Instant::now() + GATHER_DEADLINE;
        let all_in = self.ask(|| Msg::Pause(pause.clone()), deadline) && {
            let mut arrived = lock(&pause.arrived);
            loop {
                if *arrived == n {
                    break true;
                }
                let now = Instant::now();
                if now >= deadline || self.alive.load(Ordering::Acquire) < n as u64 {
                    break false;
                }
                arrived = pause
                    .all_in
                    .wait_timeout(arrived, (deadline - now).min(Duration::from_millis(50)))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        };
        // Every loop is stopped: no shard changes and nothing is logged
        // until they are let go.
        if all_in {
            during();
        }
        pause.let_go();
        all_in
    }

    fn export_piece(
        &self,
        cursor: &mut ExportCursor,
        max_messages: usize,
        max_bytes: u64,
    ) -> Option<Vec<ImagePart>> {
        let shards = self.totals.shard_count();
        if cursor.shard >= shards {
            cursor.done = true;
            return Some(Vec::new());
        }
        // The loop that owns the shard takes the piece between two of its
        // turns: the others go on.
        let owner = fila_core::owner_of_shard(cursor.shard, self.loops.owners());
        let (reply, answer) = std::sync::mpsc::channel();
        let ask = Msg::Export(ExportAsk {
            cursor: cursor.clone(),
            max_messages,
            max_bytes,
            reply,
        });
        let deadline = Instant::now() + GATHER_DEADLINE;
        if !self.loops.push_within(owner, ask, deadline) {
            return None;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let (moved, parts) = answer.recv_timeout(left).ok()?;
        *cursor = moved;
        Some(parts)
    }

    fn next_queue_id(&self) -> u32 {
        self.totals.next_queue_id()
    }

    fn in_transit(&self) -> u64 {
        self.totals.in_transit()
    }

    fn stored_bytes(&self) -> u64 {
        self.totals.stored_bytes()
    }
}

impl crate::metrics::EngineView for LoopsView {
    fn totals(&self) -> Totals {
        self.totals.clone()
    }

    fn queue_stats(&self, max: usize) -> Vec<(String, QueueStats)> {
        let (reply, answers) = std::sync::mpsc::channel();
        let deadline = Instant::now() + GATHER_DEADLINE;
        if let Some((index, _)) = &self.cluster {
            let ask = Msg::Scrape(ScrapeAsk { max, reply });
            if !self.loops.push_within(*index, ask, deadline) {
                return Vec::new();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            return answers.recv_timeout(left).unwrap_or_default();
        }
        self.ask(
            || {
                Msg::Scrape(ScrapeAsk {
                    max,
                    reply: reply.clone(),
                })
            },
            deadline,
        );
        drop(reply);
        let mut all = Vec::new();
        for _ in 0..self.loops.owners() {
            let left = deadline.saturating_duration_since(Instant::now());
            match answers.recv_timeout(left) {
                Ok(mut part) => all.append(&mut part),
                Err(_) => break,
            }
        }
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        all.truncate(max);
        all
    }

    fn cluster(&self) -> Option<crate::metrics::ClusterSeries> {
        let (_, published) = self.cluster.as_ref()?;
        let status = published
            .view
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        let partition = published
            .totals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        Some(crate::metrics::ClusterSeries { status, partition })
    }
}
