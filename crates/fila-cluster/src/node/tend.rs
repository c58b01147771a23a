//! A node's housekeeping, the same on a server and in the simulation: the
//! first membership of every group of a cluster that never ran, its map,
//! the partitions' leaderships spread over the members, the leaders of
//! partitions the node holds no replica of, memory let go, snapshots
//! asked for, and every leadership handed over when the node stops. The
//! server runs these on its timers (`server/cluster/status.rs`).

use std::collections::{BTreeMap, BTreeSet};

use fila_proto::{ClusterChange, Request, Response};
use fila_wal::Storage;
use tracing::{info, warn};

use super::{Led, Node, Transport};
use crate::forward::{Ask, Reply, META};
use crate::meta::first_replicas;
use crate::{MapChange, Member, NodeId, Partition};

impl<S: Storage + 'static, T: Transport> Node<S, T> {
    /// A cluster that has never started, of `members`: the lowest member
    /// of each group makes its first membership, every member a voter —
    /// the metadata group every member, partition `p` the replicas
    /// `first_replicas` gives it (openraft makes a group only on one of
    /// its members); the others wait to hear from it. Answers how many
    /// groups this node made.
    pub async fn bootstrap(&self, members: &BTreeMap<NodeId, Member>) -> usize {
        let ids: BTreeSet<NodeId> = members.keys().copied().collect();
        let mut groups = vec![(self.meta.raft(), members.clone())];
        for (p, part) in self.parts.iter().enumerate() {
            let replicas = first_replicas(&ids, p, self.factor);
            let held = members
                .iter()
                .filter(|(id, _)| replicas.contains(id))
                .map(|(id, m)| (*id, m.clone()))
                .collect();
            groups.push((part.raft(), held));
        }
        let mut made = 0;
        for (raft, members) in groups {
            if members.keys().next() != Some(&self.id) {
                continue;
            }
            let count = members.len();
            match crate::view::initialize_if_empty(raft, members).await {
                Ok(true) => {
                    made += 1;
                    info!(members = count, "a group of the cluster initialized");
                }
                Ok(false) => {}
                Err(e) => warn!("initializing a group of the cluster: {e}"),
            }
        }
        made
    }

    /// The map of a new cluster, made by the metadata group's leader: the
    /// partitions, `factor` of the metadata group's members holding a
    /// replica of each (as the groups were first made, `first_replicas`),
    /// and each partition's receipt key from `key` (`None`: none could be
    /// drawn, no map). Only the first map made stands (a later one changes
    /// nothing). Answers the members it was made with, once made.
    pub async fn make_map(
        &self,
        mut key: impl FnMut() -> Option<[u64; 2]>,
    ) -> Option<BTreeSet<NodeId>> {
        let members: BTreeSet<NodeId> = self.addresses().into_keys().collect();
        let mut made = Vec::with_capacity(self.parts.len());
        for p in 0..self.parts.len() {
            let Some(key) = key() else {
                warn!("drawing a partition's key failed: no map yet");
                return None;
            };
            made.push(Partition {
                replicas: first_replicas(&members, p, self.factor),
                key,
            });
        }
        let partitions = made.len();
        match self
            .meta
            .propose(&MapChange::Init { partitions: made })
            .await
        {
            Ok(()) => {
                info!(partitions, "the cluster's map was made");
                Some(members)
            }
            Err(e) => {
                warn!("making the cluster's map: {e}");
                None
            }
        }
    }

    /// Once, when the map is made: the leaderships spread over `members`
    /// — partition `p` to the `p`-th member in id order (wrapping; the
    /// first of its replicas, `first_replicas`) — so that the node that
    /// made a group does not lead it and the next ones. Each partition's
    /// leader is asked to hand its leadership over (forwarded where it is
    /// another node); a leadership that changes later stays where it
    /// goes. Answers how many partitions were handed over.
    pub async fn spread(&self, members: &BTreeSet<NodeId>) -> usize {
        let members: Vec<NodeId> = members.iter().copied().collect();
        if members.len() < 2 {
            return 0;
        }
        let mut spread = 0;
        for p in 0..self.parts.len() as u32 {
            let to = members[p as usize % members.len()];
            let change = ClusterChange::TransferLeader { to: Some(to) };
            let ask = Ask::Run {
                group: p,
                room: 0,
                req: Box::new(Request::ChangeCluster(change.clone())),
            };
            let here = || self.change_here(p, change.clone(), 0);
            let done = match self.on_leader(p, &ask, here).await {
                Ok(Led::Here(_)) => true,
                Ok(Led::There { reply, .. }) => {
                    Reply::decode(&reply).is_ok_and(|r| r.response == Response::Ok)
                }
                Err(_) => false,
            };
            if done {
                spread += 1;
                info!(
                    partition = p,
                    to, "a new cluster's partition led by node {to}"
                );
            } else {
                warn!(
                    partition = p,
                    to, "a new cluster's partition stays led where it is"
                );
            }
        }
        spread
    }

    /// Asks the leaders of the partitions this node holds no replica of
    /// and knows no leader of (a request asks anew once a hint is old).
    pub async fn find_missing_leaders(&self) {
        for p in 0..self.parts.len() as u32 {
            if !self.holds(p) && self.leader_of(p).is_none() {
                self.find_leader(p).await;
            }
        }
    }

    /// Drops what this node holds in memory for nothing: the engine of a
    /// leadership it lost (each partition's leader serves from a copy of
    /// the partition), and the state of a replica it gave up — one the map
    /// does not place here and whose group it is no member of any more —
    /// which is parked (written to its snapshot file and read back if the
    /// map places a replica here again: `StateMachine::park`), its Raft
    /// log's tail with it (`LogStore::drop_tail`). Answers the partitions
    /// whose engine it dropped.
    pub async fn let_go(&self) -> Vec<u32> {
        let map = self.meta.map();
        let mut dropped = Vec::new();
        for (p, part) in self.parts.iter().enumerate() {
            if part.drop_stale_engine().await {
                info!(partition = p, "the engine of a lost leadership dropped");
                dropped.push(p as u32);
            }
            let placed_elsewhere = map
                .partitions
                .get(p)
                .is_some_and(|placed| !placed.replicas.contains(&self.id));
            let sm = part.state();
            if !placed_elsewhere || sm.parked() || self.holds(p as u32) {
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
        dropped
    }

    /// Asks for a snapshot of each group whose state machine says one is
    /// due (the entries applied since its last one hold as many bytes as
    /// it, and at least 16 MiB: `StateMachine::snapshot_due`); openraft
    /// takes it, and then drops the log it covers.
    pub async fn take_snapshots(&self) {
        if self.meta.snapshot_if_due().await {
            info!("a snapshot of the metadata group asked for");
        }
        for (p, part) in self.parts.iter().enumerate() {
            if part.snapshot_if_due().await {
                info!(partition = p, "a snapshot of the partition asked for");
            }
        }
    }

    /// A node being stopped hands every leadership it holds to the voter
    /// furthest along first, so that the others need not wait for an
    /// election. Answers how many it handed over.
    pub async fn hand_over(&self) -> usize {
        let mut handed = 0;
        for g in (0..self.parts.len() as u32).chain([META]) {
            if self.leader_of(g) != Some(self.id) {
                continue;
            }
            let members = match g {
                META => self.meta.members(),
                p => self.parts[p as usize].members(),
            };
            match members.transfer_leader(None).await {
                Ok(to) => {
                    handed += 1;
                    info!(group = g, to, "stopping: the leadership was handed over")
                }
                Err(e) => warn!(
                    group = g,
                    "stopping: the leadership was not handed over: {e}"
                ),
            }
        }
        handed
    }
}
