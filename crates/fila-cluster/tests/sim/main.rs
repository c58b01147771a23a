//! Simulation of one replicated partition: three replicas in one process
//! on a paused tokio clock (time moves only when every task waits), their
//! disks simulated, their network in process. Each seed draws a run of
//! client operations — puts, receives, deletes — among crashes (the Raft
//! node stopped, its disks crashed, restarted later), nodes cut off from
//! the others and healed, and message delays. A history checker then
//! holds the end state to what clients were told:
//!
//! * every acknowledged put is still there or was delivered;
//! * no acknowledged delete comes back;
//! * no message is there that was never put;
//! * a delivery count acknowledged (its receive committed) never goes
//!   backwards;
//! * no two acknowledged leases of a message overlap: a redelivery comes
//!   no sooner than the end of the lease before it, across failovers;
//! * a receipt of an earlier delivery is refused after a later one;
//! * every replica holds the same state.
//!
//! `FILA_SIM_SEEDS` sets how many seeds run (20 by default, in the debug
//! test run; CI runs 1000 in a release build, `.ci/run`; the long run is in
//! docs/cluster.md).

mod forwards;
mod history;
mod leaders;
mod members;
mod moves;
mod net;
mod partitions;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use fila_cluster::{LogStore, Member, NodeId, NodeLog, Replica, ReplicaError, StateMachine};
use fila_core::{Address, Clock, NewMessage, Owner, QueueSettings, ReceiveOptions, Received};
use fila_wal::LogOptions;
use history::{check, normal, History};
use net::{Disk, Factory, Net, Rng};

const NODES: [NodeId; 3] = [1, 2, 3];
const QUEUE: &str = "jobs";
/// Receives lease for this long: failovers happen within a lease.
const LEASE_MS: u64 = 2_000;

/// The engines' clock: the paused tokio clock, from a fixed start.
#[derive(Debug)]
struct SimClock(tokio::time::Instant);

impl Clock for SimClock {
    fn now_ms(&self) -> u64 {
        1_700_000_000_000 + self.0.elapsed().as_millis() as u64
    }
}

struct Slot {
    log: Disk,
    state: Disk,
    replica: Option<Arc<Replica<Disk>>>,
    store: Option<LogStore<Disk>>,
}

struct Cluster {
    net: Arc<Net>,
    slots: BTreeMap<NodeId, Slot>,
    config: Arc<openraft::Config>,
    clock: Arc<dyn Clock>,
    secret: [u64; 2],
    /// The node that answered last, tried first.
    leader: NodeId,
    /// The highest id a node ever had (ids are never reused).
    retired: NodeId,
    /// Operations tried so far: every other one is first tried at the
    /// engine's home (`try_at_home`, as a server's event loop runs it).
    tried: u64,
    /// Homes and shards of each leader's engine: one and one, two and
    /// two, or two and three (a home keeping two shards), by the seed.
    shape: (usize, usize),
}

/// An operation the simulation runs on a partition's leader: sent to the
/// engine's home, once per node tried.
trait Op<R>: Fn(&mut Owner) -> R + Clone + Send + 'static {}

impl<R, F: Fn(&mut Owner) -> R + Clone + Send + 'static> Op<R> for F {}

fn options() -> LogOptions {
    LogOptions {
        segment_bytes: 16 << 10,
    }
}

/// The simulated nodes' Raft timers: short, so that elections, snapshots
/// and purges happen within a run.
fn sim_config() -> Arc<openraft::Config> {
    let config = openraft::Config {
        heartbeat_interval: 50,
        election_timeout_min: 150,
        election_timeout_max: 300,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(40),
        max_in_snapshot_log_to_keep: 10,
        ..Default::default()
    };
    Arc::new(config.validate().unwrap())
}

/// The one seed to replay (`FILA_SIM_SEED`), if any.
fn only_seed() -> Option<u64> {
    std::env::var("FILA_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
}

/// Runs `run` on a paused clock for each seed up to `seeds` (or only the
/// one `FILA_SIM_SEED` names); answers what each run answered.
fn each_seed<T, F: std::future::Future<Output = T>>(seeds: u64, run: impl Fn(u64) -> F) -> Vec<T> {
    let only = only_seed();
    (1..=seeds)
        .filter(|seed| only.is_none_or(|o| o == *seed))
        .map(|seed| {
            // A seed that fails says which it was (FILA_SIM_SEED=N replays
            // its faults and operations).
            struct Says(u64);
            impl Drop for Says {
                fn drop(&mut self) {
                    if std::thread::panicking() {
                        eprintln!("the failing seed: {}", self.0);
                    }
                }
            }
            let _says = Says(seed);
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap()
                .block_on(run(seed))
        })
        .collect()
}

impl Cluster {
    /// Each node's Raft state, a line each (what a failure or a trace
    /// shows).
    fn states(&self) -> String {
        let mut states = String::new();
        for (id, slot) in &self.slots {
            let Some(r) = &slot.replica else {
                states.push_str(&format!("\n  node {id}: down"));
                continue;
            };
            let m = r.raft().metrics();
            let m = m.borrow_watched();
            states.push_str(&format!(
                "\n  node {id}: {:?} term {} vote {} leader {:?} last log {:?} applied {:?} membership {:?} (entry {:?})",
                m.state,
                m.current_term,
                m.vote,
                m.current_leader,
                m.last_log_index,
                m.last_applied.map(|l| l.index),
                m.membership_config.membership(),
                m.membership_config.log_id().map(|l| l.index),
            ));
        }
        states
    }

    /// The three voters [`NODES`], started.
    async fn new(seed: u64) -> Cluster {
        Cluster::with(seed, &NODES).await
    }

    /// Nodes `slots` started; the first three are the first membership
    /// (node 1 makes it; the others wait to be added).
    async fn with(seed: u64, slots: &[NodeId]) -> Cluster {
        let mut c = Cluster {
            net: Net::new(seed, 20),
            slots: slots
                .iter()
                .map(|&id| {
                    (
                        id,
                        Slot {
                            log: Disk::new(seed * 10 + id),
                            state: Disk::new(seed * 10 + id + 5),
                            replica: None,
                            store: None,
                        },
                    )
                })
                .collect(),
            config: sim_config(),
            clock: Arc::new(SimClock(tokio::time::Instant::now())),
            secret: [seed, seed ^ 0x5eed],
            leader: 1,
            tried: 0,
            retired: 0,
            shape: [(1, 1), (2, 2), (2, 3)][(seed % 3) as usize],
        };
        for &id in slots {
            c.start(id).await;
        }
        let members: BTreeMap<NodeId, Member> = NODES
            .iter()
            .map(|&id| {
                (
                    id,
                    Member {
                        addr: format!("node-{id}"),
                        client: format!("client-{id}"),
                    },
                )
            })
            .collect();
        c.replica(1)
            .unwrap()
            .raft()
            .initialize(members)
            .await
            .unwrap();
        c
    }

    fn replica(&self, id: NodeId) -> Option<Arc<Replica<Disk>>> {
        self.slots.get(&id)?.replica.clone()
    }

    async fn start(&mut self, id: NodeId) {
        let slot = self.slots.get_mut(&id).unwrap();
        if slot.replica.is_some() {
            return;
        }
        let log = NodeLog::open(slot.log.clone(), options())
            .and_then(|l| l.group(0))
            .unwrap();
        slot.store = Some(log.clone());
        let state = StateMachine::open(slot.state.clone()).unwrap();
        let factory = Factory {
            from: id,
            net: self.net.clone(),
            group: 0,
        };
        let replica = Replica::start(
            id,
            self.config.clone(),
            factory,
            log,
            state,
            self.clock.clone(),
            Some(self.secret),
        )
        .await
        .unwrap();
        let (homes, shards) = self.shape;
        assert!(replica.set_homes(fila_cluster::TaskHome::start_set(homes), shards));
        self.net.up(id, replica.raft().clone());
        slot.replica = Some(Arc::new(replica));
    }

    /// The end of a run: every node up and reachable, the end state read on
    /// the leader, then a blank entry after everything — entries of
    /// operations whose clients gave up may still have been on their way;
    /// once a replica has applied the blank, it has applied those too
    /// (leadership may move in between: then again). Answers the end state
    /// and the blank's index.
    async fn settle(&mut self, seed: u64, down: &mut Vec<NodeId>) -> (BTreeMap<String, u32>, u64) {
        self.net.heal();
        for id in down.drain(..) {
            self.start(id).await;
        }
        for _ in 0..600 {
            if let Some(e) = self.run(contents).await {
                let leader = self.replica(self.leader).unwrap();
                // Bounded: a leader removed from the membership steps down
                // and may never answer it.
                let blank =
                    tokio::time::timeout(Duration::from_secs(5), leader.raft().write_blank()).await;
                if let Ok(Ok(blank)) = blank {
                    return (e, blank.log_id.index);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let states = self.states();
        panic!("seed {seed}: no leader at the end{states}")
    }

    /// Every one of `members` applies the log up to `index` (within 30 s)
    /// and then holds the same state.
    async fn agree(&self, seed: u64, members: &BTreeSet<NodeId>, index: u64) {
        let mut images = Vec::new();
        for &id in members {
            let r = self.replica(id).unwrap();
            r.raft()
                .wait(Some(Duration::from_secs(30)))
                .applied_index_at_least(Some(index), "catch up")
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: member {id} did not catch up: {e}"));
            images.push((id, normal(r.state().image().unwrap())));
        }
        for w in images.windows(2) {
            assert!(
                w[0].1 == w[1].1,
                "seed {seed}: members {} and {} differ",
                w[0].0,
                w[1].0
            );
        }
    }

    /// The node stops and its machine crashes: what it had not synced is
    /// lost.
    async fn crash(&mut self, id: NodeId) {
        let slot = self.slots.get_mut(&id).unwrap();
        let Some(replica) = slot.replica.take() else {
            return;
        };
        slot.store = None;
        self.net.down(id);
        replica.shutdown().await.unwrap();
        drop(replica);
        slot.log = slot.log.crash();
        slot.state = slot.state.crash();
    }

    /// Runs `op` on whichever node leads, trying each (the last leader
    /// first); answers its result, or `None` when no node took it (or the
    /// outcome is unknown).
    async fn run<R: Send + 'static>(&mut self, op: impl Op<R>) -> Option<R> {
        match self.attempt(&op).await {
            Outcome::Done(r) => Some(r),
            Outcome::Refused | Outcome::Unknown => None,
        }
    }

    /// [`Cluster::run`], tried again (up to 5 s) while no node takes it
    /// and nothing was made; an unknown outcome is not tried again.
    async fn run_patiently<R: Send + 'static>(&mut self, op: impl Op<R>) -> Option<R> {
        for _ in 0..50 {
            match self.attempt(&op).await {
                Outcome::Done(r) => return Some(r),
                Outcome::Unknown => return None,
                Outcome::Refused => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        None
    }

    async fn attempt<R: Send + 'static>(&mut self, op: &impl Op<R>) -> Outcome<R> {
        let mut order: Vec<NodeId> = vec![self.leader];
        order.extend(self.slots.keys().filter(|&&n| n != self.leader));
        for id in order {
            let Some(replica) = self.replica(id) else {
                continue;
            };
            self.tried += 1;
            if self.tried.is_multiple_of(2) {
                let shard = replica.shard_of(QUEUE);
                if let Some((r, ticket)) = replica.try_at_home(shard, op.clone(), |_| true).await {
                    // Its entry's outcome, looked at as a loop would (at
                    // most 12 s: a commit's wait and a gathered entry's).
                    let mut outcome = None;
                    for _ in 0..2_400 {
                        outcome = ticket.outcome();
                        if outcome.is_some() {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    match outcome {
                        Some(Ok(())) => {
                            self.leader = id;
                            return Outcome::Done(r);
                        }
                        // Refused before it was appended: nothing made.
                        Some(Err(fila_core::commits::Failure::Refused { .. })) => continue,
                        _ => return Outcome::Unknown,
                    }
                }
            }
            let shard = replica.shard_of(QUEUE);
            let done =
                tokio::time::timeout(Duration::from_secs(3), replica.execute(shard, op.clone()))
                    .await;
            if tracing() {
                if let Ok(Err(e)) = &done {
                    eprintln!("  node {id}: {e}");
                } else if done.is_err() {
                    eprintln!("  node {id}: no answer within 3 s");
                }
            }
            match done {
                Ok(Ok(r)) => {
                    self.leader = id;
                    return Outcome::Done(r);
                }
                Ok(Err(ReplicaError::NotLeader { leader: Some(l) })) => self.leader = l,
                Ok(Err(ReplicaError::Unknown { .. })) | Err(_) => return Outcome::Unknown,
                Ok(Err(_)) => {}
            }
        }
        Outcome::Refused
    }
}

/// How an operation went.
enum Outcome<R> {
    Done(R),
    /// No node took it: nothing was made.
    Refused,
    /// It may or may not have been made.
    Unknown,
}

/// Creates the queue on whichever node leads first (within 5 s).
async fn create_queue(c: &mut Cluster, seed: u64) {
    for _ in 0..50 {
        if let Some(r) = c
            .run(|e| e.create_queue(QUEUE, QueueSettings::default()))
            .await
        {
            r.unwrap();
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("seed {seed}: no leader took the queue");
}

async fn put(c: &mut Cluster, h: &mut History, n: u64) {
    let body = format!("m{n}");
    h.attempted.insert(body.clone());
    let b = body.clone();
    let answer = c
        .run(move |e| e.put(QUEUE, vec![NewMessage::new(b.clone())]))
        .await;
    if tracing() {
        eprintln!("put {body} -> {answer:?} via {}", c.leader);
    }
    if let Some(Ok(entries)) = answer {
        if entries.iter().all(|r| r.is_ok()) {
            h.acked.insert(body);
        }
    }
}

async fn receive_and_delete(
    c: &mut Cluster,
    h: &mut History,
    rng: &mut Rng,
    down: &mut Vec<NodeId>,
) {
    let max = 1 + rng.below(5) as u32;
    let mut options = ReceiveOptions::now(max);
    options.visibility_ms = Some(LEASE_MS);
    let got = c.run(move |e| receive_now(e, &options)).await;
    if tracing() {
        let b: Option<Vec<String>> = got.as_ref().and_then(|g| g.as_ref().ok()).map(|ms| {
            ms.iter()
                .map(|m| {
                    format!(
                        "{}#{}",
                        String::from_utf8_lossy(&m.payload),
                        m.delivery_count
                    )
                })
                .collect()
        });
        eprintln!("receive -> {b:?} via {}{}", c.leader, c.states());
    }
    let Some(Ok(messages)) = got else {
        return;
    };
    let mut receipts = Vec::new();
    let mut bodies = Vec::new();
    let mut stale = Vec::new();
    for m in messages {
        let body = String::from_utf8_lossy(&m.payload).into_owned();
        let seen = h.delivered.entry(body.clone()).or_default();
        assert!(
            m.delivery_count >= *seen,
            "{body}: delivered with count {} after {seen}",
            m.delivery_count
        );
        *seen = m.delivery_count;
        // No two committed leases of a message overlap: this delivery
        // (made when its lease began) is not before the last one's lease
        // ended.
        let delivered_at = m.next_visible_at_ms - LEASE_MS;
        if let Some(end) = h.lease_ends.insert(body.clone(), m.next_visible_at_ms) {
            assert!(
                delivered_at >= end,
                "{body}: delivered again at {delivered_at}, before the lease that ends at {end}"
            );
            h.leases_checked += 1;
        }
        let receipt = m.receipt.expect("a received message has a receipt");
        if let Some(old) = h.receipts.insert(body.clone(), receipt) {
            stale.push((body.clone(), old));
        }
        if rng.below(4) != 0 {
            receipts.push(m.receipt.expect("a received message has a receipt"));
            bodies.push(body);
        }
    }
    // A receipt of an earlier delivery of a message delivered again is
    // refused.
    for (body, old) in stale {
        let refused = c
            .run(move |e| e.delete(Address::queue(QUEUE), std::slice::from_ref(&old)))
            .await;
        if let Some(Ok(results)) = refused {
            assert!(
                results[0].is_err(),
                "{body}: an old receipt deleted it after a later delivery"
            );
            h.stale_tried += 1;
        }
    }
    if receipts.is_empty() {
        return;
    }
    if rng.below(3) == 0 {
        // The consumer is slow: a failover may come first.
        tokio::time::sleep(Duration::from_millis(rng.below(400))).await;
    }
    let received_on = c.leader;
    if down.is_empty() && rng.below(4) == 0 {
        // The leader that granted the leases crashes before the delete.
        if tracing() {
            eprintln!("crash {received_on} (the receive's leader)");
        }
        c.crash(received_on).await;
        down.push(received_on);
    }
    let given = receipts.clone();
    let deleted = c
        .run_patiently(move |e| e.delete(Address::queue(QUEUE), &given))
        .await;
    let after = c.clock.now_ms();
    if tracing() {
        eprintln!("delete {bodies:?} -> {deleted:?} via {}", c.leader);
    }
    if let Some(Ok(results)) = deleted {
        for (body, r) in bodies.into_iter().zip(results) {
            // A lease still running when the delete was answered was
            // running when it was made: its receipt works, on whichever
            // leader holds the partition now.
            let lease_end = h.lease_ends[&body];
            assert!(
                r.is_ok() || after >= lease_end,
                "{body}: its receipt was refused ({r:?}) at {after}, within its lease (to {lease_end})"
            );
            if r.is_ok() {
                if c.leader != received_on {
                    h.receipts_moved += 1;
                }
                h.deleted.insert(body);
            }
        }
    }
}

/// A receive that never waits.
fn receive_now(
    owner: &mut Owner,
    options: &ReceiveOptions,
) -> Result<Vec<fila_core::Message>, fila_core::Error> {
    match owner.receive(Address::queue(QUEUE), options, None)? {
        Received::Ready(messages) => Ok(messages),
        Received::Parked(_) => unreachable!("no wait, no parking"),
    }
}

/// The queue's messages on `engine`: body → delivery count (no body may
/// be stored twice).
fn contents(engine: &mut Owner) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    let mut from = 0;
    loop {
        let page = engine.peek(Address::queue(QUEUE), from, 100).unwrap();
        let Some(last) = page.last() else {
            return out;
        };
        from = last.seq + 1;
        for m in page {
            let body = String::from_utf8_lossy(&m.payload).into_owned();
            let twice = out.insert(body.clone(), m.delivery_count);
            assert!(twice.is_none(), "{body} is stored twice");
        }
    }
}

async fn life(seed: u64) -> History {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut c = Cluster::new(seed).await;
    let mut h = History::default();
    // The queue exists before the faults begin.
    create_queue(&mut c, seed).await;
    let mut n = 0;
    let mut down: Vec<NodeId> = Vec::new();
    for _ in 0..120 {
        match rng.below(100) {
            0..=44 => {
                n += 1;
                put(&mut c, &mut h, n).await;
            }
            45..=69 => receive_and_delete(&mut c, &mut h, &mut rng, &mut down).await,
            70..=76 if down.is_empty() => {
                let id = NODES[rng.below(3) as usize];
                if tracing() {
                    eprintln!("crash {id}");
                }
                c.crash(id).await;
                down.push(id);
            }
            77..=83 => {
                for id in down.drain(..) {
                    if tracing() {
                        eprintln!("start {id}");
                    }
                    c.start(id).await;
                }
            }
            84..=89 => {
                let id = NODES[rng.below(3) as usize];
                if tracing() {
                    eprintln!("cut {id}");
                }
                c.net.cut_off(id)
            }
            90..=94 => {
                if tracing() {
                    eprintln!("heal");
                }
                c.net.heal()
            }
            _ => tokio::time::sleep(Duration::from_millis(rng.below(1000))).await,
        }
    }
    let (end, index) = c.settle(seed, &mut down).await;
    let mut images = Vec::new();
    for id in NODES {
        let r = c.replica(id).unwrap();
        r.raft()
            .wait(Some(Duration::from_secs(30)))
            .applied_index_at_least(Some(index), "catch up")
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: node {id} did not catch up: {e}"));
        images.push(normal(r.state().image().unwrap()));
    }
    for (i, w) in images.windows(2).enumerate() {
        if w[0] != w[1] {
            let diff: Vec<String> = w[0]
                .queues
                .iter()
                .zip(&w[1].queues)
                .flat_map(|(a, b)| {
                    let mut d = Vec::new();
                    if (a.id, &a.name, a.next_seq) != (b.id, &b.name, b.next_seq) {
                        d.push(format!("queue {} / {}", a.name, b.name));
                    }
                    if a.dedup != b.dedup {
                        d.push(format!("dedup of {}", a.name));
                    }
                    for m in a.messages.iter().filter(|m| !b.messages.contains(m)) {
                        d.push(format!("node {}: {m:?}", NODES[i]));
                    }
                    for m in b.messages.iter().filter(|m| !a.messages.contains(m)) {
                        d.push(format!("node {}: {m:?}", NODES[i + 1]));
                    }
                    d
                })
                .collect();
            panic!("seed {seed}: the replicas differ: {diff:#?}");
        }
    }
    if tracing() {
        use openraft::RaftLogReader;
        for id in NODES {
            let m = c
                .replica(id)
                .unwrap()
                .raft()
                .metrics()
                .borrow_watched()
                .clone();
            eprintln!(
                "node {id}: term {} last {:?} applied {:?} snapshot {:?} purged {:?} leader {:?}",
                m.current_term,
                m.last_log_index,
                m.last_applied,
                m.snapshot,
                m.purged,
                m.current_leader
            );
            let mut store = c.slots[&id].store.clone().unwrap();
            for e in store.try_get_log_entries(0..1000).await.unwrap() {
                let what = match &e.payload {
                    openraft::EntryPayload::Blank => "blank".to_owned(),
                    openraft::EntryPayload::Membership(_) => "membership".to_owned(),
                    openraft::EntryPayload::Normal(b) => {
                        let mut w = Vec::new();
                        for r in fila_store::codec::batch_records(&b.0) {
                            let (k, body) = r.unwrap();
                            match fila_store::codec::decode(k, body).unwrap() {
                                fila_store::codec::Op::Stored { message, .. } => w.push(format!(
                                    "stored {}={}",
                                    message.seq,
                                    String::from_utf8_lossy(&message.payload)
                                )),
                                op => w.push(format!("{op:?}").chars().take(40).collect()),
                            }
                        }
                        w.join(", ")
                    }
                };
                eprintln!("  {}-{}: {what}", e.log_id.leader_id, e.log_id.index);
            }
        }
    }
    check(seed, &h, &end);
    for id in NODES {
        c.crash(id).await;
    }
    h
}

use openraft::async_runtime::watch::WatchReceiver;

/// Whether to print each step (`FILA_SIM_TRACE`, with `FILA_SIM_SEED` to
/// run one seed): what a failing seed did.
fn tracing() -> bool {
    std::env::var_os("FILA_SIM_TRACE").is_some()
}

fn seeds() -> u64 {
    std::env::var("FILA_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20)
}

#[test]
fn a_replicated_partition_keeps_what_it_acknowledged_through_crashes_and_cuts() {
    let mut totals = History::default();
    let only: Option<u64> = std::env::var("FILA_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok());
    for seed in 1..=seeds() {
        if only.is_some_and(|o| o != seed) {
            continue;
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let h = rt.block_on(life(seed));
        totals
            .acked
            .extend(h.acked.iter().map(|b| format!("{seed}/{b}")));
        totals
            .deleted
            .extend(h.deleted.iter().map(|b| format!("{seed}/{b}")));
        totals
            .attempted
            .extend(h.attempted.iter().map(|b| format!("{seed}/{b}")));
        totals.stale_tried += h.stale_tried;
        totals.leases_checked += h.leases_checked;
        totals.receipts_moved += h.receipts_moved;
    }
    eprintln!(
        "{} seeds: {} puts, {} acknowledged, {} deletes acknowledged ({} on another leader than the receive's), {} old receipts refused, {} redeliveries after a lease",
        seeds(),
        totals.attempted.len(),
        totals.acked.len(),
        totals.deleted.len(),
        totals.receipts_moved,
        totals.stale_tried,
        totals.leases_checked
    );
    if only.is_some() {
        // A replay of one seed checks that seed; what the runs covered is
        // a question for all of them.
        return;
    }
    // The runs did something: a good share of the puts were acknowledged
    // (the faults make many time out), and some deletes.
    assert!(
        totals.acked.len() * 4 > totals.attempted.len(),
        "{} of {} puts acknowledged",
        totals.acked.len(),
        totals.attempted.len()
    );
    assert!(!totals.deleted.is_empty());
    assert!(totals.stale_tried > 0, "no old receipt was tried");
    assert!(totals.leases_checked > 0, "no delivery followed a lease");
    assert!(
        totals.receipts_moved > 0,
        "no receipt was used on another leader"
    );
}
