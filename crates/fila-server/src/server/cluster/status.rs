//! What a cluster node does besides answering requests: it makes the
//! cluster (the first membership of every group, then the map), follows
//! the map (routes and keys), publishes its view of the groups (what
//! `ClusterStatus` answers), and hands its leaderships over when it stops.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fila_cluster::{MapChange, Member, Partition, StateMachine, TypeConfig};
use fila_proto::{ClusterMemberStatus, ClusterStatus, PartitionStatus, ReplicaStatus};
use fila_wal::FsStorage;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::Raft;
use tracing::{info, warn};

use super::groups::{Cluster, META};
use crate::config::ClusterConfig;

/// How often the view is refreshed and the map looked at.
const VIEW_EVERY: Duration = Duration::from_millis(100);

/// What a group's Raft node says of it: its figures and its members
/// (id, addresses, voter, how far it has taken the leader's log).
struct GroupView {
    term: u64,
    last_log_index: Option<u64>,
    committed_index: Option<u64>,
    applied_index: Option<u64>,
    members: Vec<(u64, Member, bool, Option<u64>)>,
}

fn group_view(raft: &Raft<TypeConfig, StateMachine<FsStorage>>) -> GroupView {
    let m = raft.metrics();
    let m = m.borrow_watched();
    let membership = m.membership_config.membership();
    let voters: Vec<u64> = membership.voter_ids().collect();
    let matched = m.replication.as_ref();
    GroupView {
        term: m.current_term,
        last_log_index: m.last_log_index,
        committed_index: m.cluster_committed.map(|c| c.index),
        applied_index: m.last_applied.map(|a| a.index),
        members: membership
            .nodes()
            .map(|(id, node)| {
                let matched = matched
                    .and_then(|r| r.get(id))
                    .and_then(|l| l.as_ref().map(|l| l.index));
                (*id, node.clone(), voters.contains(id), matched)
            })
            .collect(),
    }
}

/// This node's view of the cluster: the metadata group's members, leader
/// and log, and each partition's.
fn status(c: &Cluster) -> ClusterStatus {
    let meta = group_view(c.meta.raft());
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
                let v = group_view(part.raft());
                PartitionStatus {
                    partition: p as u32,
                    leader: part.known_leader(),
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
/// (`/metrics`).
pub(super) async fn keep_view(c: Arc<Cluster>, partitions: usize) {
    loop {
        c.follow_map();
        if c.meta.map().partitions.is_empty() && c.leader_of(META) == Some(c.id) {
            make_map(&c, partitions).await;
        }
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

/// The map of a new cluster, made by the metadata group's leader: the
/// partitions, every member of the metadata group a replica of each, and
/// each partition's receipt key drawn from the system's randomness. Only
/// the first map made stands (a later one changes nothing). Then the
/// partitions' leaderships are spread ([`spread`]).
async fn make_map(c: &Arc<Cluster>, partitions: usize) {
    let replicas: std::collections::BTreeSet<u64> = {
        let m = c.meta.raft().metrics();
        let m = m.borrow_watched();
        m.membership_config
            .membership()
            .nodes()
            .map(|(id, _)| *id)
            .collect()
    };
    let mut made = Vec::with_capacity(partitions);
    for _ in 0..partitions {
        let mut key = [0u8; 16];
        if let Err(e) = getrandom::fill(&mut key) {
            warn!("drawing a partition's key: {e}");
            return;
        }
        let half = |i: usize| u64::from_be_bytes(key[i..i + 8].try_into().expect("8 bytes"));
        made.push(Partition {
            replicas: replicas.clone(),
            key: [half(0), half(8)],
        });
    }
    match c.meta.propose(&MapChange::Init { partitions: made }).await {
        Ok(()) => info!(partitions, "the cluster's map was made"),
        Err(e) => return warn!("making the cluster's map: {e}"),
    }
    // Not on the view's loop: the view goes on meanwhile.
    tokio::spawn(spread(c.clone(), replicas));
}

/// How long a new cluster's partition waits for its first leader before
/// it is left where it is.
const SPREAD_WAIT: Duration = Duration::from_secs(5);

/// Once, when the map is made: the leaderships spread over the voters —
/// partition `p` to the `p`-th voter in id order (wrapping) — so that the
/// node that made the cluster does not lead every partition. Each moves
/// from this node only (which made the groups and leads them, unless an
/// election already moved one); a leadership that changes later stays
/// where it goes.
async fn spread(c: Arc<Cluster>, voters: std::collections::BTreeSet<u64>) {
    let voters: Vec<u64> = voters.iter().copied().collect();
    if voters.len() < 2 {
        return;
    }
    for (p, part) in c.parts.iter().enumerate() {
        let to = voters[p % voters.len()];
        if to == c.id {
            continue;
        }
        let led = part
            .raft()
            .wait(Some(SPREAD_WAIT))
            .metrics(|m| m.current_leader.is_some(), "the partition has a leader")
            .await;
        if led.is_err() || part.known_leader() != Some(c.id) {
            continue;
        }
        match part.members().transfer_leader(Some(to)).await {
            Ok(_) => info!(
                partition = p,
                to, "a new cluster's partition led by another node"
            ),
            Err(e) => warn!(
                partition = p,
                to, "a new cluster's partition stays led here: {e}"
            ),
        }
    }
}

/// The node with the lowest id of a cluster that has never started makes
/// the first membership of every group, every member a voter — unless it
/// joins a running cluster (`join`); the others wait to hear from it.
pub(super) async fn bootstrap(config: &ClusterConfig, c: &Cluster) {
    let lowest = config.members.iter().map(|m| m.id).min();
    if lowest != Some(config.node_id) || config.join {
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
    let rafts = std::iter::once(c.meta.raft()).chain(c.parts.iter().map(|p| p.raft()));
    for raft in rafts {
        let empty = {
            let m = raft.metrics();
            let m = m.borrow_watched();
            m.last_log_index.is_none() && m.membership_config.membership().voter_ids().count() == 0
        };
        if !empty {
            continue;
        }
        match raft.initialize(members.clone()).await {
            Ok(()) => info!(
                members = config.members.len(),
                "a group of the cluster initialized"
            ),
            Err(e) => warn!("initializing a group of the cluster: {e}"),
        }
    }
}

/// How often the metadata leader looks at its voters.
const BALANCE_EVERY: Duration = Duration::from_secs(1);

/// On the metadata leader, every [`BALANCE_EVERY`]: one step towards the
/// metadata group's 3 or 5 voters (`change::balance_meta`).
pub(super) async fn keep_meta_voters(c: Arc<Cluster>) {
    loop {
        tokio::time::sleep(BALANCE_EVERY).await;
        if c.leader_of(META) == Some(c.id) {
            if let Err(e) = super::change::balance_meta(&c).await {
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
