//! What a cluster node does besides answering requests: it makes the
//! cluster (the first membership of every group, then the map), follows
//! the map (routes and keys), publishes its view of the groups (what
//! `ClusterStatus` answers), and hands its leaderships over when it stops.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use fila_cluster::meta::first_replicas;
use fila_cluster::{MapChange, Member, Partition};
use fila_proto::{
    ClusterChange, ClusterMemberStatus, ClusterStatus, PartitionStatus, ReplicaStatus, Request,
    Response,
};
use fila_wal::FsStorage;
use tracing::{info, warn};

use super::forward::Ask;
use super::groups::{Cluster, META};
use crate::config::ClusterConfig;
use crate::dispatch::Answer;

/// How often the view is refreshed and the map looked at.
const VIEW_EVERY: Duration = Duration::from_millis(100);
/// How often the leaders of partitions this node holds no replica of are
/// asked for.
const HINTS_EVERY: Duration = Duration::from_secs(1);

/// What a group's Raft node says of it: its figures and its members
/// (id, addresses, voter, how far it has taken the leader's log).
struct GroupView {
    term: u64,
    last_log_index: Option<u64>,
    committed_index: Option<u64>,
    applied_index: Option<u64>,
    members: Vec<(u64, Member, bool, Option<u64>)>,
}

fn group_view(raft: &fila_cluster::Group<FsStorage>) -> GroupView {
    let v = fila_cluster::view::view(raft);
    GroupView {
        term: v.term,
        last_log_index: v.last_log_index,
        committed_index: v.committed_index,
        applied_index: v.applied_index,
        members: v
            .members
            .into_iter()
            .map(|(id, node)| {
                let voter = v.voters.contains(&id);
                (id, node, voter, v.matched.get(&id).copied())
            })
            .collect(),
    }
}

/// This node's view of the cluster: the metadata group's members, leader
/// and log, and each partition's.
fn status(c: &Cluster) -> ClusterStatus {
    let meta = group_view(c.meta.raft());
    let map = c.meta.map();
    ClusterStatus {
        node_id: c.id,
        leader: c.leader_of(META),
        term: meta.term,
        last_log_index: meta.last_log_index,
        committed_index: meta.committed_index,
        applied_index: meta.applied_index,
        members: meta
            .members
            .into_iter()
            .map(|(id, node, voter, matched_index)| ClusterMemberStatus {
                id,
                peer: node.addr,
                client: node.client,
                voter,
                matched_index,
            })
            .collect(),
        partitions: c
            .parts
            .iter()
            .enumerate()
            .map(|(p, part)| {
                let mut v = group_view(part.raft());
                if !c.holds(p as u32) {
                    // A partition this node holds no replica of: its
                    // replicas as the map places them, its leader as one
                    // of them last said, no term or log (what a replica
                    // it gave up kept is not the partition's).
                    v.term = 0;
                    v.last_log_index = None;
                    v.committed_index = None;
                    v.applied_index = None;
                    v.members = map
                        .partitions
                        .get(p)
                        .map(|p| {
                            p.replicas
                                .iter()
                                .map(|id| (*id, Member::default(), true, None))
                                .collect()
                        })
                        .unwrap_or_default();
                }
                PartitionStatus {
                    partition: p as u32,
                    leader: c.leader_of(p as u32).or_else(|| c.hint(p as u32, false)),
                    term: v.term,
                    last_log_index: v.last_log_index,
                    committed_index: v.committed_index,
                    applied_index: v.applied_index,
                    replicas: v
                        .members
                        .into_iter()
                        .map(|(id, _, voter, matched_index)| ReplicaStatus {
                            id,
                            voter,
                            matched_index,
                        })
                        .collect(),
                }
            })
            .collect(),
    }
}

/// Every [`VIEW_EVERY`]: follows the map (making it first if this node
/// leads the metadata group of a cluster without one), publishes the
/// view, and the totals of the first partition this node leads
/// (`/metrics`); lets go of what it holds in memory for nothing
/// ([`let_go`]).
pub(super) async fn keep_view(c: Arc<Cluster>) {
    loop {
        c.follow_map();
        if c.meta.map().partitions.is_empty() && c.leader_of(META) == Some(c.id) {
            make_map(&c).await;
        }
        let_go(&c).await;
        take_snapshots(&c).await;
        *c.shared
            .published
            .view
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(status(&c));
        let mut totals = None;
        for part in &c.parts {
            totals = part.serving(|owner| owner.totals()).await;
            if totals.is_some() {
                break;
            }
        }
        *c.shared
            .published
            .totals
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = totals;
        tokio::time::sleep(VIEW_EVERY).await;
    }
}

/// Drops what this node holds in memory for nothing: the engine of a
/// leadership it lost (each partition's leader serves from a copy of the
/// partition), and the state of a replica it gave up — one the map does
/// not place here and whose group it is no member of any more — which is
/// parked (written to its snapshot file and read back if the map places a
/// replica here again: `StateMachine::park`), its Raft log's tail with it
/// (`LogStore::drop_tail`).
async fn let_go(c: &Cluster) {
    let map = c.meta.map();
    for (p, part) in c.parts.iter().enumerate() {
        if part.drop_stale_engine().await {
            info!(partition = p, "the engine of a lost leadership dropped");
            // Receives waiting on it find out who leads now.
            c.waiters[p].wake_all();
        }
        let placed_elsewhere = map
            .partitions
            .get(p)
            .is_some_and(|placed| !placed.replicas.contains(&c.id));
        let sm = part.state();
        if !placed_elsewhere || sm.parked() || c.holds(p as u32) {
            continue;
        }
        let sm = sm.clone();
        match tokio::task::spawn_blocking(move || sm.park()).await {
            Ok(Ok(true)) => {
                let tail = part.drop_log_tail();
                info!(
                    partition = p,
                    tail, "the state of a replica given up parked, its log's tail dropped"
                )
            }
            Ok(Ok(false)) => {}
            Ok(Err(e)) => warn!(
                partition = p,
                "parking the state of a replica given up: {e}"
            ),
            Err(e) => warn!(
                partition = p,
                "parking the state of a replica given up: {e}"
            ),
        }
    }
}

/// Asks for a snapshot of each group whose state machine says one is due
/// (the entries applied since its last one hold as many bytes as it, and
/// at least 16 MiB: `StateMachine::snapshot_due`); openraft takes it,
/// and then drops the log it covers.
async fn take_snapshots(c: &Cluster) {
    if c.meta.snapshot_if_due().await {
        info!("a snapshot of the metadata group asked for");
    }
    for (p, part) in c.parts.iter().enumerate() {
        if part.snapshot_if_due().await {
            info!(partition = p, "a snapshot of the partition asked for");
        }
    }
}

/// Every [`HINTS_EVERY`]: asks the leaders of the partitions this node
/// holds no replica of, for its view (a request asks anew once a hint is
/// old). Not on the view's loop: an ask may wait for a peer that does not
/// answer.
pub(super) async fn keep_hints(c: Arc<Cluster>) {
    loop {
        for p in 0..c.parts.len() as u32 {
            if !c.holds(p) && c.leader_of(p).is_none() {
                c.find_leader(p).await;
            }
        }
        tokio::time::sleep(HINTS_EVERY).await;
    }
}

/// The map of a new cluster, made by the metadata group's leader: the
/// partitions, `cluster.replicas` of the metadata group's members holding
/// a replica of each (as the groups were first made, `first_replicas`),
/// and each partition's receipt key drawn from the system's randomness.
/// Only the first map made stands (a later one changes nothing). Then the
/// partitions' leaderships are spread ([`spread`]).
async fn make_map(c: &Arc<Cluster>) {
    let partitions = c.parts.len();
    let members: BTreeSet<u64> = c.addresses().into_keys().collect();
    let mut made = Vec::with_capacity(partitions);
    for p in 0..partitions {
        let mut key = [0u8; 16];
        if let Err(e) = getrandom::fill(&mut key) {
            warn!("drawing a partition's key: {e}");
            return;
        }
        let half = |i: usize| u64::from_be_bytes(key[i..i + 8].try_into().expect("8 bytes"));
        made.push(Partition {
            replicas: first_replicas(&members, p, c.factor),
            key: [half(0), half(8)],
        });
    }
    match c.meta.propose(&MapChange::Init { partitions: made }).await {
        Ok(()) => info!(partitions, "the cluster's map was made"),
        Err(e) => return warn!("making the cluster's map: {e}"),
    }
    // Not on the view's loop: the view goes on meanwhile.
    tokio::spawn(spread(c.clone(), members));
}

/// Once, when the map is made: the leaderships spread over the members —
/// partition `p` to the `p`-th member in id order (wrapping; the first of
/// its replicas, `first_replicas`) — so that the node that made a group
/// does not lead it and the next ones. Each partition's leader is asked to
/// hand its leadership over (forwarded where it is another node); a
/// leadership that changes later stays where it goes.
async fn spread(c: Arc<Cluster>, members: BTreeSet<u64>) {
    let members: Vec<u64> = members.iter().copied().collect();
    if members.len() < 2 {
        return;
    }
    for p in 0..c.parts.len() as u32 {
        let to = members[p as usize % members.len()];
        let change = ClusterChange::TransferLeader { to: Some(to) };
        let ask = Ask::Run {
            group: p,
            room: 0,
            req: Box::new(Request::ChangeCluster(change.clone())),
        };
        let here = || async {
            c.change_here(p, change.clone(), 0)
                .await
                .map(|_| (Response::Ok.into(), 0))
        };
        match c.on_leader(p, ask, here).await {
            Ok((Answer::Wire(Response::Ok), _)) => {
                info!(
                    partition = p,
                    to, "a new cluster's partition led by node {to}"
                )
            }
            _ => warn!(
                partition = p,
                to, "a new cluster's partition stays led where it is"
            ),
        }
    }
}

/// A cluster that has never started: the lowest node of each group makes
/// its first membership, every member a voter — unless it joins a running
/// cluster (`join`); the others wait to hear from it.
pub(super) async fn bootstrap(config: &ClusterConfig, c: &Cluster) {
    if config.join {
        return;
    }
    let members: BTreeMap<u64, Member> = config
        .members
        .iter()
        .map(|m| {
            (
                m.id,
                Member {
                    addr: m.peer.clone(),
                    client: m.client.clone(),
                },
            )
        })
        .collect();
    // The metadata group holds every member; partition `p` the replicas
    // the map gives it, each group made by the lowest of its members
    // (openraft makes a group only on one of its members).
    let ids: BTreeSet<u64> = members.keys().copied().collect();
    let mut groups = vec![(c.meta.raft(), members.clone())];
    for (p, part) in c.parts.iter().enumerate() {
        let replicas = first_replicas(&ids, p, c.factor);
        let held = members
            .iter()
            .filter(|(id, _)| replicas.contains(id))
            .map(|(id, m)| (*id, m.clone()))
            .collect();
        groups.push((part.raft(), held));
    }
    for (raft, members) in groups {
        if members.keys().next() != Some(&config.node_id) {
            continue;
        }
        let count = members.len();
        match fila_cluster::view::initialize_if_empty(raft, members).await {
            Ok(true) => info!(members = count, "a group of the cluster initialized"),
            Ok(false) => {}
            Err(e) => warn!("initializing a group of the cluster: {e}"),
        }
    }
}

/// How often the metadata leader looks at its voters.
const BALANCE_EVERY: Duration = Duration::from_secs(1);

/// On the metadata leader, every [`BALANCE_EVERY`]: one step towards the
/// metadata group's 3 or 5 voters (`Node::balance_meta`).
pub(super) async fn keep_meta_voters(c: Arc<Cluster>) {
    loop {
        tokio::time::sleep(BALANCE_EVERY).await;
        if c.leader_of(META) == Some(c.id) {
            if let Err(e) = c.balance_meta().await {
                tracing::debug!("the metadata group's voters: {e}");
            }
        }
    }
}

/// A node being stopped hands every leadership it holds to the voter
/// furthest along first, so that the others need not wait for an
/// election.
pub(super) async fn hand_over(c: &Cluster) {
    for g in (0..c.parts.len() as u32).chain([META]) {
        if c.leader_of(g) != Some(c.id) {
            continue;
        }
        let members = match g {
            META => c.meta.members(),
            p => c.parts[p as usize].members(),
        };
        match members.transfer_leader(None).await {
            Ok(to) => info!(group = g, to, "stopping: the leadership was handed over"),
            Err(e) => warn!(
                group = g,
                "stopping: the leadership was not handed over: {e}"
            ),
        }
    }
}
