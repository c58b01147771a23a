//! Several partitions and the metadata group: three nodes, each a member
//! of the metadata group and a replica of every partition. Queues are
//! placed by the metadata group's leader and created in their partition;
//! clients route each request by a node's copy of the map to the
//! partition's leader, among crashes, restarts, cuts and heals. At the end
//! every node holds the same map, each queue lives in the partition its
//! placement named and in no other, the partitions' receipt keys are the
//! map's and differ, and each queue's messages pass the history checks.

use std::collections::{BTreeMap, BTreeSet};

use fila_cluster::{ClusterMap, MapChange, Metadata, Partition};

use super::*;

/// Partitions of the simulated cluster.
const PARTS: u64 = 2;
/// The metadata group's number on the simulated network.
const META: u64 = 100;
const QUEUES: [&str; 5] = ["a", "b", "c", "d", "e"];

struct Node {
    meta_disks: (Disk, Disk),
    part_disks: Vec<(Disk, Disk)>,
    meta: Option<Arc<Metadata<Disk>>>,
    parts: Vec<Arc<Replica<Disk>>>,
}

struct Cells {
    net: Arc<Net>,
    nodes: BTreeMap<NodeId, Node>,
    config: Arc<openraft::Config>,
    clock: Arc<dyn Clock>,
}

/// What clients were told, per queue.
#[derive(Default)]
struct Told {
    /// The partition each placement answered.
    placed: BTreeMap<String, u32>,
    /// Queues created in their partition (the answer said so).
    created: BTreeSet<String>,
    /// Each queue's history.
    queues: BTreeMap<String, History>,
    /// Requests routed by a node's copy of the map.
    routed: usize,
}

impl Cells {
    async fn new(seed: u64) -> Cells {
        let mut c = Cells {
            net: Net::new(seed, 20),
            nodes: BTreeMap::new(),
            config: sim_config(),
            clock: Arc::new(SimClock(tokio::time::Instant::now())),
        };
        for id in NODES {
            let disk = |k: u64| Disk::new(seed * 1_000 + id * 100 + k);
            c.nodes.insert(
                id,
                Node {
                    meta_disks: (disk(98), disk(99)),
                    part_disks: (0..PARTS).map(|p| (disk(2 * p), disk(2 * p + 1))).collect(),
                    meta: None,
                    parts: Vec::new(),
                },
            );
            c.start(id).await;
        }
        let members: BTreeMap<NodeId, Member> =
            NODES.iter().map(|&id| (id, Member::default())).collect();
        let first = &c.nodes[&1];
        let meta = first.meta.as_ref().unwrap();
        meta.raft().initialize(members.clone()).await.unwrap();
        for p in &first.parts {
            p.raft().initialize(members.clone()).await.unwrap();
        }
        // The metadata leader makes the map: the partitions, every node a
        // replica of each, and their keys drawn from the seed.
        let mut rng = Rng(seed | 1);
        let init = MapChange::Init {
            partitions: (0..PARTS)
                .map(|_| Partition {
                    replicas: NODES.into_iter().collect(),
                    key: [rng.next_u64(), rng.next_u64()],
                })
                .collect(),
        };
        for _ in 0..100 {
            let made = c
                .on_meta(|m| {
                    let init = init.clone();
                    async move { m.propose(&init).await }
                })
                .await;
            if made.is_some() {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("seed {seed}: the map was never made")
    }

    async fn start(&mut self, id: NodeId) {
        let node = self.nodes.get_mut(&id).unwrap();
        if node.meta.is_some() {
            return;
        }
        let factory = |group| Factory {
            from: id,
            net: self.net.clone(),
            group,
        };
        let (log, state) = node.meta_disks.clone();
        let meta = Metadata::start(
            id,
            self.config.clone(),
            factory(META),
            LogStore::open(log, options()).unwrap(),
            StateMachine::open_map(state).unwrap(),
        )
        .await
        .unwrap();
        self.net.up_in(id, META, meta.raft().clone());
        node.meta = Some(Arc::new(meta));
        for (p, (log, state)) in node.part_disks.clone().into_iter().enumerate() {
            // The key comes from the map, once this node has it.
            let replica = Replica::start(
                id,
                self.config.clone(),
                factory(p as u64),
                LogStore::open(log, options()).unwrap(),
                StateMachine::open(state).unwrap(),
                self.clock.clone(),
                None,
            )
            .await
            .unwrap();
            self.net.up_in(id, p as u64, replica.raft().clone());
            node.parts.push(Arc::new(replica));
        }
    }

    async fn crash(&mut self, id: NodeId) {
        let node = self.nodes.get_mut(&id).unwrap();
        let Some(meta) = node.meta.take() else {
            return;
        };
        self.net.down(id);
        meta.raft().shutdown().await.unwrap();
        for p in node.parts.drain(..) {
            p.shutdown().await.unwrap();
        }
        drop(meta);
        node.meta_disks = crashed(&node.meta_disks);
        node.part_disks = node.part_disks.iter().map(crashed).collect();
    }

    /// Every node up gives its partitions the keys its copy of the map
    /// holds — what a node does when its map changes.
    fn keys(&self) {
        for node in self.nodes.values() {
            let Some(meta) = &node.meta else { continue };
            let map = meta.map();
            for (p, replica) in node.parts.iter().enumerate() {
                if let Some(part) = map.partitions.get(p) {
                    replica.set_secret(part.key);
                }
            }
        }
    }

    /// Runs `f` on each node's metadata member in turn until one answers
    /// (the leader does; the others refuse).
    async fn on_meta<R, F, Fut>(&self, f: F) -> Option<R>
    where
        F: Fn(Arc<Metadata<Disk>>) -> Fut,
        Fut: std::future::Future<Output = Result<R, ReplicaError>>,
    {
        for node in self.nodes.values() {
            let Some(meta) = node.meta.clone() else {
                continue;
            };
            let done = tokio::time::timeout(Duration::from_secs(6), f(meta.clone())).await;
            if tracing() {
                let m = meta.raft().metrics().borrow_watched().clone();
                eprintln!(
                    "  meta on {}: {:?} (applied {:?}, last log {:?}, vote {}, {:?})",
                    m.id,
                    done.as_ref()
                        .map(|r| r.as_ref().err().map(|e| e.to_string())),
                    m.last_applied,
                    m.last_log_index,
                    m.vote,
                    m.state
                );
            }
            match done {
                Ok(Ok(r)) => return Some(r),
                Ok(Err(ReplicaError::Unknown { .. })) | Err(_) => return None,
                Ok(Err(_)) => {}
            }
        }
        None
    }

    /// Runs `op` on partition `p`'s leader, trying each node.
    async fn on_partition<R: Send + 'static>(
        &self,
        p: u32,
        op: impl Fn(&mut Owner) -> R + Clone + Send + 'static,
    ) -> Option<R> {
        self.keys();
        for node in self.nodes.values() {
            let Some(replica) = node.parts.get(p as usize) else {
                continue;
            };
            let done =
                tokio::time::timeout(Duration::from_secs(3), replica.execute(op.clone())).await;
            match done {
                Ok(Ok(r)) => return Some(r),
                Ok(Err(ReplicaError::Unknown { .. })) | Err(_) => return None,
                Ok(Err(_)) => {}
            }
        }
        None
    }

    /// The partition of `queue` as a node's copy of the map says — its
    /// routing table — from the first node up that knows it.
    fn route(&self, queue: &str) -> Option<u32> {
        self.nodes
            .values()
            .filter_map(|n| n.meta.as_ref())
            .find_map(|m| m.map().partition_of(queue))
    }
}

/// A log's and a state's disks after their machine crashed.
fn crashed((log, state): &(Disk, Disk)) -> (Disk, Disk) {
    (log.crash(), state.crash())
}

/// A queue's messages (body → delivery count), none if it does not exist.
fn messages_of(engine: &mut Owner, queue: &str) -> Option<BTreeMap<String, u32>> {
    let mut out = BTreeMap::new();
    let mut from = 0;
    loop {
        let page = engine.peek(Address::queue(queue), from, 100).ok()?;
        let Some(last) = page.last() else {
            return Some(out);
        };
        from = last.seq + 1;
        for m in page {
            let body = String::from_utf8_lossy(&m.payload).into_owned();
            assert!(
                out.insert(body.clone(), m.delivery_count).is_none(),
                "{body} twice"
            );
        }
    }
}

async fn create(c: &Cells, told: &mut Told, queue: &str) {
    let placed = c
        .on_meta(|m| {
            let queue = queue.to_owned();
            async move { m.place(&queue, None, 100).await }
        })
        .await;
    let Some(p) = placed else { return };
    if let Some(before) = told.placed.insert(queue.to_owned(), p) {
        assert_eq!(before, p, "{queue}: placed in {before}, then in {p}");
    }
    let q = queue.to_owned();
    let made = c
        .on_partition(p, move |e| e.create_queue(&q, QueueSettings::default()))
        .await;
    if tracing() {
        eprintln!("create {queue} in {p} -> {made:?}");
    }
    if let Some(Ok(_)) = made {
        told.created.insert(queue.to_owned());
    }
}

async fn put_to(c: &Cells, told: &mut Told, queue: &str, n: u64) {
    let Some(p) = c.route(queue) else { return };
    told.routed += 1;
    let body = format!("{queue}{n}");
    let h = told.queues.entry(queue.to_owned()).or_default();
    h.attempted.insert(body.clone());
    let (q, b) = (queue.to_owned(), body.clone());
    let answer = c
        .on_partition(p, move |e| e.put(&q, vec![NewMessage::new(b.clone())]))
        .await;
    if let Some(Ok(entries)) = answer {
        if entries.iter().all(|r| r.is_ok()) {
            h.acked.insert(body);
        }
    }
}

async fn take_from(c: &Cells, told: &mut Told, queue: &str) {
    let Some(p) = c.route(queue) else { return };
    told.routed += 1;
    let options = ReceiveOptions::now(3);
    let q = queue.to_owned();
    let got = c
        .on_partition(p, move |e| {
            match e.receive(Address::queue(&q), &options, None) {
                Ok(Received::Ready(ms)) => ms,
                _ => Vec::new(),
            }
        })
        .await;
    let Some(messages) = got else { return };
    let h = told.queues.entry(queue.to_owned()).or_default();
    let mut receipts = Vec::new();
    let mut bodies = Vec::new();
    for m in messages {
        let body = String::from_utf8_lossy(&m.payload).into_owned();
        let seen = h.delivered.entry(body.clone()).or_default();
        assert!(m.delivery_count >= *seen, "{body}: count went backwards");
        *seen = m.delivery_count;
        receipts.push(m.receipt.expect("a receipt"));
        bodies.push(body);
    }
    if receipts.is_empty() {
        return;
    }
    let q = queue.to_owned();
    let deleted = c
        .on_partition(p, move |e| e.delete(Address::queue(&q), &receipts))
        .await;
    if let Some(Ok(results)) = deleted {
        for (body, r) in bodies.into_iter().zip(results) {
            if r.is_ok() {
                h.deleted.insert(body);
            }
        }
    }
}

async fn run_cells(seed: u64) -> Told {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut c = Cells::new(seed).await;
    let mut told = Told::default();
    let mut down: Vec<NodeId> = Vec::new();
    for n in 0..100u64 {
        let queue = QUEUES[rng.below(QUEUES.len() as u64) as usize];
        let draw = rng.below(100);
        if tracing() && !(15..=64).contains(&draw) {
            eprintln!("step {n}: {draw} (down {down:?})");
        }
        match draw {
            0..=14 => create(&c, &mut told, queue).await,
            15..=49 => put_to(&c, &mut told, queue, n).await,
            50..=64 => take_from(&c, &mut told, queue).await,
            65..=70 if down.is_empty() => {
                let id = NODES[rng.below(3) as usize];
                if tracing() {
                    eprintln!("crash {id}");
                }
                c.crash(id).await;
                down.push(id);
            }
            71..=76 => {
                for id in down.drain(..) {
                    c.start(id).await;
                }
            }
            77..=80 => c.net.cut_off(NODES[rng.below(3) as usize]),
            81..=85 => c.net.heal(),
            _ => tokio::time::sleep(Duration::from_millis(rng.below(800))).await,
        }
    }
    // The end: everything up and reachable, the map confirmed on the
    // metadata leader and every node's copy caught up with it.
    c.net.heal();
    for id in down.drain(..) {
        c.start(id).await;
    }
    let mut map: Option<Arc<ClusterMap>> = None;
    for _ in 0..100 {
        map = c.on_meta(|m| async move { m.confirmed_map().await }).await;
        if map.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let map = map.unwrap_or_else(|| panic!("seed {seed}: no metadata leader at the end"));
    for (id, node) in &c.nodes {
        let meta = node.meta.as_ref().unwrap();
        for _ in 0..100 {
            if *meta.map() == *map {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            *meta.map() == *map,
            "seed {seed}: node {id}'s map differs: {:?} (applied {:?}) against {map:?}",
            meta.map(),
            meta.raft().metrics().borrow_watched().last_applied
        );
    }
    let keys: BTreeSet<[u64; 2]> = map.partitions.iter().map(|p| p.key).collect();
    assert_eq!(
        keys.len(),
        PARTS as usize,
        "seed {seed}: partitions share a key"
    );
    for (queue, p) in &told.placed {
        assert_eq!(map.partition_of(queue), Some(*p), "seed {seed}: {queue}");
    }
    // Each partition's queues, read on its leader.
    for p in 0..PARTS as u32 {
        let mut end = None;
        for _ in 0..100 {
            end = c
                .on_partition(p, |e| {
                    QUEUES
                        .iter()
                        .map(|q| (q.to_string(), messages_of(e, q)))
                        .collect::<BTreeMap<_, _>>()
                })
                .await;
            if end.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let end = end.unwrap_or_else(|| panic!("seed {seed}: partition {p} has no leader"));
        for (queue, messages) in end {
            let home = map.partition_of(&queue) == Some(p);
            if !home {
                assert!(
                    messages.is_none(),
                    "seed {seed}: {queue} exists in partition {p}, not its own"
                );
                continue;
            }
            if told.created.contains(&queue) {
                assert!(messages.is_some(), "seed {seed}: {queue} is gone");
            }
            if let (Some(h), Some(messages)) = (told.queues.get(&queue), messages) {
                check(seed, h, &messages);
            }
        }
    }
    for id in NODES {
        c.crash(id).await;
    }
    told
}

#[test]
fn queues_placed_by_the_metadata_group_live_in_one_partition_through_faults() {
    let seeds = (seeds() / 4).max(2);
    let (mut created, mut spread, mut acked, mut routed) = (0, 0, 0, 0);
    for told in each_seed(seeds, run_cells) {
        created += told.created.len();
        let used: BTreeSet<u32> = told.placed.values().copied().collect();
        spread += usize::from(used.len() > 1);
        acked += told.queues.values().map(|h| h.acked.len()).sum::<usize>();
        routed += told.routed;
    }
    eprintln!(
        "{seeds} seeds: {created} queues created, {spread} runs with queues in both partitions, {routed} requests routed, {acked} puts acknowledged"
    );
    if only_seed().is_none() {
        assert!(created > 0 && acked > 0 && routed > 0);
        assert!(spread > 0, "the queues never spread over the partitions");
    }
}
