//! What a cluster node does besides answering requests: it makes the
//! cluster (the first membership of every group, then the map), follows
//! the map (routes and keys), publishes its view of the groups (what
//! `ClusterStatus` answers), and hands its leaderships over when it stops.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fila_cluster::Member;
use fila_proto::{ClusterMemberStatus, ClusterStatus, PartitionStatus, ReplicaStatus};
use fila_wal::FsStorage;

use super::groups::{Cluster, META};
use crate::config::ClusterConfig;

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
            if let Some(members) = c.make_map(drawn_key).await {
                // Not on the view's loop: the view goes on meanwhile.
                let c = c.clone();
                tokio::spawn(async move { c.spread(&members).await });
            }
        }
        for p in c.let_go().await {
            // Receives waiting on its dropped engine find out who leads now.
            c.waiters[p as usize].wake_all();
        }
        c.take_snapshots().await;
        *c.shared
            .published
            .view
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(status(&c));
        let mut totals = None;
        for part in &c.parts {
            // (Every shard of an engine has its totals.)
            totals = part.serving(0, |owner| owner.totals()).await;
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

/// A partition's receipt key, drawn from the system's randomness.
fn drawn_key() -> Option<[u64; 2]> {
    let mut key = [0u8; 16];
    getrandom::fill(&mut key).ok()?;
    let half = |i: usize| u64::from_be_bytes(key[i..i + 8].try_into().expect("8 bytes"));
    Some([half(0), half(8)])
}

/// Every [`HINTS_EVERY`]: asks the leaders of the partitions this node
/// holds no replica of, for its view (a request asks anew once a hint is
/// old). Not on the view's loop: an ask may wait for a peer that does not
/// answer.
pub(super) async fn keep_hints(c: Arc<Cluster>) {
    loop {
        c.find_missing_leaders().await;
        tokio::time::sleep(HINTS_EVERY).await;
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
    c.bootstrap(&members).await;
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
