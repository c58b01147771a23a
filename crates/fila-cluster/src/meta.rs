//! The metadata group: the cluster's map — its partitions, the nodes that
//! hold a replica of each, each partition's receipt key, and the partition
//! each queue lives in — replicated like a partition, through a Raft group
//! of its own whose state machine holds a [`ClusterMap`] instead of queues.
//!
//! An entry of the metadata group is one [`MapChange`]. Applying one is
//! deterministic and never fails: a change that no longer fits the map (a
//! queue placed twice, a partition that does not exist) changes nothing,
//! so the leader proposes what it decided and reads the outcome back from
//! the map once the entry is applied ([`Metadata::place`]).
//!
//! Encoding (big-endian): a change is a kind byte — 1 init (`u32` count
//! of partitions, each its replicas and its key), 2 place (the queue, a
//! `u32` partition), 3 unplace (the queue), 4 replicas (a `u32` partition
//! and its replicas) — where replicas are a `u32` count and `u64` node
//! ids, a key two `u64`, a queue name a `u8` length and UTF-8. A map's
//! snapshot is [`MAP_MAGIC`], then its partitions and its placements
//! (`u32` count, each a queue and a `u32` partition).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use fila_core::limits::QUEUE_NAME_LEN_MAX;
use fila_wal::Storage;
use openraft::{Config, Raft, RaftNetworkFactory};

use crate::codec::{bad, put_u32, CodecError, Reader};
use crate::replica::{leading, write_error, LeaderId};
use crate::{Batch, NodeId, ReplicaError, StateMachine, TypeConfig};

/// What a map's snapshot starts with.
pub const MAP_MAGIC: &[u8; 8] = b"FILAMAP1";

/// Partitions a cluster may have at most.
pub const PARTITIONS_MAX: usize = 1_024;

/// Replicas a partition may have at most.
pub const REPLICAS_MAX: usize = 7;

/// One partition as the map holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Partition {
    /// The nodes that hold a replica of it.
    pub replicas: BTreeSet<NodeId>,
    /// The key its receipts are signed with (drawn by the metadata
    /// leader that made the map).
    pub key: [u64; 2],
}

/// The cluster's map. Empty until the first [`MapChange::Init`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterMap {
    /// The partitions, by number.
    pub partitions: Vec<Partition>,
    /// The partition each queue lives in.
    pub queues: BTreeMap<String, u32>,
}

/// A change of the map: one entry of the metadata group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapChange {
    /// The partitions, once: a map that has partitions ignores it.
    Init {
        /// Every partition, by number.
        partitions: Vec<Partition>,
    },
    /// A queue's partition, unless the queue is placed already.
    Place {
        /// The queue.
        queue: String,
        /// Its partition.
        partition: u32,
    },
    /// A queue placed nowhere.
    Unplace {
        /// The queue.
        queue: String,
    },
    /// The nodes that hold a replica of a partition.
    Replicas {
        /// The partition.
        partition: u32,
        /// Its replicas.
        replicas: BTreeSet<NodeId>,
    },
}

impl MapChange {
    /// Whether the change can be written: queue names of 1 to
    /// [`QUEUE_NAME_LEN_MAX`] bytes, at most [`PARTITIONS_MAX`] partitions
    /// and [`REPLICAS_MAX`] replicas each — what its decoding accepts.
    pub fn check(&self) -> Result<(), String> {
        let name = |q: &str| {
            if q.is_empty() || q.len() > QUEUE_NAME_LEN_MAX {
                Err(format!(
                    "a queue name of {} bytes (1 to {QUEUE_NAME_LEN_MAX})",
                    q.len()
                ))
            } else {
                Ok(())
            }
        };
        let replicas = |r: &BTreeSet<NodeId>| {
            if r.len() > REPLICAS_MAX {
                Err(format!("{} replicas (at most {REPLICAS_MAX})", r.len()))
            } else {
                Ok(())
            }
        };
        match self {
            MapChange::Init { partitions } => {
                if partitions.len() > PARTITIONS_MAX {
                    return Err(format!(
                        "{} partitions (at most {PARTITIONS_MAX})",
                        partitions.len()
                    ));
                }
                partitions.iter().try_for_each(|p| replicas(&p.replicas))
            }
            MapChange::Place { queue, .. } | MapChange::Unplace { queue } => name(queue),
            MapChange::Replicas { replicas: r, .. } => replicas(r),
        }
    }
}

impl ClusterMap {
    /// The partition `queue` lives in.
    pub fn partition_of(&self, queue: &str) -> Option<u32> {
        self.queues.get(queue).copied()
    }

    /// Applies `change`; a change that does not fit changes nothing.
    pub fn apply(&mut self, change: MapChange) {
        let count = self.partitions.len();
        match change {
            MapChange::Init { partitions } => {
                if self.partitions.is_empty() {
                    self.partitions = partitions;
                }
            }
            MapChange::Place { queue, partition } => {
                if (partition as usize) < count {
                    self.queues.entry(queue).or_insert(partition);
                }
            }
            MapChange::Unplace { queue } => {
                self.queues.remove(&queue);
            }
            MapChange::Replicas {
                partition,
                replicas,
            } => {
                if let Some(p) = self.partitions.get_mut(partition as usize) {
                    p.replicas = replicas;
                }
            }
        }
    }

    /// Where a new queue goes: beside `near` (its dead-letter queue, or
    /// the queue it is the dead-letter queue of) when that is placed, else
    /// in the partition holding the fewest queues (the lowest such).
    pub fn choose(&self, near: Option<&str>) -> Option<u32> {
        if let Some(p) = near.and_then(|n| self.partition_of(n)) {
            return Some(p);
        }
        let mut counts = vec![0usize; self.partitions.len()];
        for &p in self.queues.values() {
            if let Some(c) = counts.get_mut(p as usize) {
                *c += 1;
            }
        }
        (0..counts.len())
            .min_by_key(|&i| counts[i])
            .map(|i| i as u32)
    }
}

/// The replicas of partition `p` of a new cluster: `factor` of `members`
/// (fewer when there are fewer), taken in id order from the `p`-th on,
/// wrapping — so that the partitions' replicas, and their first leaders
/// (the first of each), are spread over the members.
pub fn first_replicas(members: &BTreeSet<NodeId>, p: usize, factor: usize) -> BTreeSet<NodeId> {
    let ids: Vec<NodeId> = members.iter().copied().collect();
    if ids.is_empty() {
        return BTreeSet::new();
    }
    (0..factor.min(ids.len()))
        .map(|i| ids[(p + i) % ids.len()])
        .collect()
}

impl ClusterMap {
    /// The changes that keep `factor` replicas of every partition on the
    /// cluster's `members` (fewer when there are fewer members): a
    /// replica of a node that is no member any more is dropped — `moving`
    /// (`from`, `to`) gives `to` each replica of `from` (where `to` holds
    /// none) — then a partition short of replicas takes the member
    /// holding the fewest (the lowest id of those). A partition's
    /// replicas are otherwise left where they are: nothing moves to a node
    /// just because it is new.
    pub fn rebalanced(
        &self,
        members: &BTreeSet<NodeId>,
        factor: usize,
        moving: Option<(NodeId, NodeId)>,
    ) -> Vec<MapChange> {
        let mut sets: Vec<BTreeSet<NodeId>> =
            self.partitions.iter().map(|p| p.replicas.clone()).collect();
        for set in &mut sets {
            if let Some((from, to)) = moving {
                if set.remove(&from) {
                    set.insert(to);
                }
            }
            set.retain(|id| members.contains(id));
        }
        let want = factor.min(members.len()).min(REPLICAS_MAX);
        let mut load: BTreeMap<NodeId, usize> = members.iter().map(|&id| (id, 0)).collect();
        for id in sets.iter().flatten() {
            *load.entry(*id).or_default() += 1;
        }
        for set in &mut sets {
            while set.len() < want {
                let Some((&id, _)) = load
                    .iter()
                    .filter(|(id, _)| !set.contains(id))
                    .min_by_key(|(id, n)| (**n, **id))
                else {
                    break;
                };
                set.insert(id);
                *load.entry(id).or_default() += 1;
            }
        }
        sets.into_iter()
            .zip(&self.partitions)
            .enumerate()
            .filter(|(_, (set, p))| *set != p.replicas)
            .map(|(i, (replicas, _))| MapChange::Replicas {
                partition: i as u32,
                replicas,
            })
            .collect()
    }
}

fn put_name(out: &mut Vec<u8>, name: &str) {
    debug_assert!(name.len() <= QUEUE_NAME_LEN_MAX);
    out.push(name.len() as u8);
    out.extend_from_slice(name.as_bytes());
}

fn name(r: &mut Reader<'_>) -> Result<String, CodecError> {
    let len = r.u8()? as usize;
    if len == 0 || len > QUEUE_NAME_LEN_MAX {
        return Err(bad("a queue name of a length out of bounds"));
    }
    String::from_utf8(r.take(len)?.to_vec()).map_err(|_| bad("a queue name not UTF-8"))
}

fn put_replicas(out: &mut Vec<u8>, replicas: &BTreeSet<NodeId>) {
    put_u32(out, replicas.len());
    for id in replicas {
        out.extend_from_slice(&id.to_be_bytes());
    }
}

fn replicas(r: &mut Reader<'_>) -> Result<BTreeSet<NodeId>, CodecError> {
    let n = r.u32()? as usize;
    if n > REPLICAS_MAX {
        return Err(bad("more replicas than a partition may have"));
    }
    (0..n).map(|_| r.u64()).collect()
}

fn put_partitions(out: &mut Vec<u8>, partitions: &[Partition]) {
    put_u32(out, partitions.len());
    for p in partitions {
        put_replicas(out, &p.replicas);
        out.extend_from_slice(&p.key[0].to_be_bytes());
        out.extend_from_slice(&p.key[1].to_be_bytes());
    }
}

fn partitions(r: &mut Reader<'_>) -> Result<Vec<Partition>, CodecError> {
    let n = r.u32()? as usize;
    if n > PARTITIONS_MAX {
        return Err(bad("more partitions than a cluster may have"));
    }
    (0..n)
        .map(|_| {
            Ok(Partition {
                replicas: replicas(r)?,
                key: [r.u64()?, r.u64()?],
            })
        })
        .collect()
}

/// A change's bytes (an entry's data).
pub fn encode_change(change: &MapChange, out: &mut Vec<u8>) {
    match change {
        MapChange::Init { partitions } => {
            out.push(1);
            put_partitions(out, partitions);
        }
        MapChange::Place { queue, partition } => {
            out.push(2);
            put_name(out, queue);
            out.extend_from_slice(&partition.to_be_bytes());
        }
        MapChange::Unplace { queue } => {
            out.push(3);
            put_name(out, queue);
        }
        MapChange::Replicas {
            partition,
            replicas,
        } => {
            out.push(4);
            out.extend_from_slice(&partition.to_be_bytes());
            put_replicas(out, replicas);
        }
    }
}

/// The change `data` holds.
pub fn decode_change(data: &[u8]) -> Result<MapChange, CodecError> {
    let mut r = Reader { data };
    let change = match r.u8()? {
        1 => MapChange::Init {
            partitions: partitions(&mut r)?,
        },
        2 => MapChange::Place {
            queue: name(&mut r)?,
            partition: r.u32()?,
        },
        3 => MapChange::Unplace {
            queue: name(&mut r)?,
        },
        4 => MapChange::Replicas {
            partition: r.u32()?,
            replicas: replicas(&mut r)?,
        },
        _ => return Err(bad("a map change of an unknown kind")),
    };
    r.end()?;
    Ok(change)
}

/// A map's snapshot bytes.
pub fn encode_map(map: &ClusterMap, out: &mut Vec<u8>) {
    out.extend_from_slice(MAP_MAGIC);
    put_partitions(out, &map.partitions);
    put_u32(out, map.queues.len());
    for (queue, p) in &map.queues {
        put_name(out, queue);
        out.extend_from_slice(&p.to_be_bytes());
    }
}

/// The map a snapshot's bytes hold.
pub fn decode_map(data: &[u8]) -> Result<ClusterMap, CodecError> {
    let rest = data
        .strip_prefix(MAP_MAGIC.as_slice())
        .ok_or_else(|| bad("not a cluster map"))?;
    let mut r = Reader { data: rest };
    let partitions = partitions(&mut r)?;
    let n = r.u32()? as usize;
    let mut queues = BTreeMap::new();
    for _ in 0..n {
        let queue = name(&mut r)?;
        let p = r.u32()?;
        if p as usize >= partitions.len() {
            return Err(bad("a queue placed in a partition that does not exist"));
        }
        queues.insert(queue, p);
    }
    r.end()?;
    Ok(ClusterMap { partitions, queues })
}

/// How long a change waits for its commit.
pub const CHANGE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// This node's member of the metadata group.
pub struct Metadata<S: Storage + 'static> {
    id: NodeId,
    raft: Raft<TypeConfig, StateMachine<S>>,
    sm: StateMachine<S>,
    /// The leadership whose own first entry this node has applied.
    caught_up: tokio::sync::Mutex<Option<LeaderId>>,
}

impl<S: Storage + 'static> Metadata<S> {
    /// Starts node `id`'s member of the metadata group on its log and its
    /// map's state machine ([`StateMachine::open_map`]).
    pub async fn start<N>(
        id: NodeId,
        config: Arc<Config>,
        network: N,
        log: crate::LogStore<S>,
        sm: StateMachine<S>,
    ) -> Result<Metadata<S>, ReplicaError>
    where
        N: RaftNetworkFactory<TypeConfig>,
        N::Network:
            openraft::network::NetSnapshot<TypeConfig, SnapshotData = std::io::Cursor<Vec<u8>>>,
    {
        let raft = Raft::new(id, config, network, log, sm.clone())
            .await
            .map_err(|e| ReplicaError::Raft(e.to_string()))?;
        Ok(Metadata {
            id,
            raft,
            sm,
            caught_up: tokio::sync::Mutex::new(None),
        })
    }

    /// The Raft node.
    pub fn raft(&self) -> &Raft<TypeConfig, StateMachine<S>> {
        &self.raft
    }

    /// This node's member of the metadata group (its membership changes).
    pub fn members(&self) -> crate::membership::Members<'_, S> {
        crate::membership::Members::new(&self.raft, &self.sm, self.id)
    }

    /// The leader this node knows of.
    pub fn known_leader(&self) -> Option<NodeId> {
        crate::replica::known_leader(&self.raft)
    }

    /// See [`crate::Replica::snapshot_if_due`].
    pub async fn snapshot_if_due(&self) -> bool {
        crate::replica::snapshot_if_due(&self.raft, &self.sm).await
    }

    /// The map as this node has applied it (a follower's may lag).
    pub fn map(&self) -> Arc<ClusterMap> {
        self.sm.map().unwrap_or_default()
    }

    /// Proposes `change` on the leader and answers once it is applied
    /// there.
    /// A change that cannot be written ([`MapChange::check`]) is refused.
    pub async fn propose(&self, change: &MapChange) -> Result<(), ReplicaError> {
        change.check().map_err(ReplicaError::Refused)?;
        let mut data = Vec::new();
        encode_change(change, &mut data);
        let written =
            tokio::time::timeout(CHANGE_TIMEOUT, self.raft.client_write(Batch(data.into()))).await;
        match written {
            Ok(Ok(_)) => Ok(()),
            Err(_) => Err(ReplicaError::Unknown { leader: None }),
            Ok(Err(e)) => Err(write_error(e)),
        }
    }

    /// The map as the leader holds it once a quorum confirmed it still
    /// leads: everything committed before is in it.
    ///
    /// A leadership first commits an entry of its own and applies it:
    /// openraft's read index alone does not cover a leader restarted into
    /// its old term, whose state machine restarts from its snapshot and
    /// whose commit index is not kept across the restart.
    pub async fn confirmed_map(&self) -> Result<Arc<ClusterMap>, ReplicaError> {
        crate::replica::confirm(&self.raft).await?;
        let leader = leading(&self.raft).map_err(|leader| ReplicaError::NotLeader { leader })?;
        let mut caught_up = self.caught_up.lock().await;
        if *caught_up != Some(leader) {
            let written = tokio::time::timeout(CHANGE_TIMEOUT, self.raft.write_blank())
                .await
                .map_err(|_| ReplicaError::Unknown { leader: None })?
                .map_err(write_error)?;
            self.raft
                .wait(Some(CHANGE_TIMEOUT))
                .applied_index_at_least(Some(written.log_id.index), "the map catches up")
                .await
                .map_err(|_| ReplicaError::Unknown { leader: None })?;
            *caught_up = Some(leader);
        }
        Ok(self.map())
    }

    /// The partition `queue` lives in, placing it first if it is not
    /// placed (beside `near` if that is, see [`ClusterMap::choose`]).
    /// At most `max` queues are placed: a new one past that is refused.
    pub async fn place(
        &self,
        queue: &str,
        near: Option<&str>,
        max: usize,
    ) -> Result<u32, ReplicaError> {
        let map = self.confirmed_map().await?;
        if let Some(p) = map.partition_of(queue) {
            return Ok(p);
        }
        if map.queues.len() >= max {
            return Err(ReplicaError::Full {
                limit: "max_queues",
                max: max as u64,
            });
        }
        let partition = map.choose(near).ok_or(ReplicaError::Unready(
            "the cluster's partitions are still being made",
        ))?;
        self.propose(&MapChange::Place {
            queue: queue.to_owned(),
            partition,
        })
        .await?;
        // Another placement of it may have been committed first: the map
        // says which stands.
        self.map()
            .partition_of(queue)
            .ok_or(ReplicaError::Unknown { leader: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ClusterMap {
        let mut map = ClusterMap::default();
        map.apply(MapChange::Init {
            partitions: (0..3)
                .map(|i| Partition {
                    replicas: BTreeSet::from([1, 2, 3]),
                    key: [i, i + 100],
                })
                .collect(),
        });
        map
    }

    #[test]
    fn placements_stand_once_made_and_spread_over_the_partitions() {
        let mut map = sample();
        for q in ["a", "b", "c", "d"] {
            let p = map.choose(None).unwrap();
            map.apply(MapChange::Place {
                queue: q.into(),
                partition: p,
            });
        }
        assert_eq!(map.partition_of("a"), Some(0));
        assert_eq!(map.partition_of("b"), Some(1));
        assert_eq!(map.partition_of("c"), Some(2));
        assert_eq!(map.partition_of("d"), Some(0));
        // A second placement of a placed queue changes nothing; one in a
        // partition that does not exist neither.
        map.apply(MapChange::Place {
            queue: "a".into(),
            partition: 2,
        });
        map.apply(MapChange::Place {
            queue: "e".into(),
            partition: 3,
        });
        assert_eq!(map.partition_of("a"), Some(0));
        assert_eq!(map.partition_of("e"), None);
        // Beside its dead-letter queue, wherever that is.
        assert_eq!(map.choose(Some("c")), Some(2));
        assert_eq!(map.choose(Some("nowhere")), Some(1));
        // A second init changes nothing.
        let before = map.clone();
        map.apply(MapChange::Init { partitions: vec![] });
        assert_eq!(map, before);
        map.apply(MapChange::Unplace { queue: "a".into() });
        assert_eq!(map.partition_of("a"), None);
    }

    fn ids(i: &[u64]) -> BTreeSet<NodeId> {
        i.iter().copied().collect()
    }

    fn with(sets: &[&[u64]]) -> ClusterMap {
        let mut map = ClusterMap::default();
        map.apply(MapChange::Init {
            partitions: sets
                .iter()
                .map(|s| Partition {
                    replicas: ids(s),
                    key: [0, 0],
                })
                .collect(),
        });
        map
    }

    fn after(mut map: ClusterMap, changes: Vec<MapChange>) -> Vec<BTreeSet<NodeId>> {
        for c in changes {
            map.apply(c);
        }
        map.partitions.into_iter().map(|p| p.replicas).collect()
    }

    #[test]
    fn a_new_clusters_replicas_rotate_over_its_members() {
        let five = ids(&[1, 2, 3, 4, 5]);
        let got: Vec<_> = (0..5).map(|p| first_replicas(&five, p, 3)).collect();
        assert_eq!(
            got,
            [
                ids(&[1, 2, 3]),
                ids(&[2, 3, 4]),
                ids(&[3, 4, 5]),
                ids(&[4, 5, 1]),
                ids(&[5, 1, 2])
            ]
        );
        // Every member holds as many: 3 of the 5 partitions.
        for id in 1..=5 {
            assert_eq!(got.iter().filter(|s| s.contains(&id)).count(), 3);
        }
        assert_eq!(first_replicas(&five, 7, 1), ids(&[3]));
        // Fewer members than the factor: each holds every partition.
        assert_eq!(first_replicas(&ids(&[4, 9]), 1, 3), ids(&[4, 9]));
        assert_eq!(first_replicas(&BTreeSet::new(), 0, 3), BTreeSet::new());
    }

    #[test]
    fn a_partition_short_of_replicas_takes_the_member_holding_fewest() {
        // Node 2 removed from four members, three replicas each: its
        // replicas go to the node holding fewest (4, which held one).
        let map = with(&[&[1, 2, 3], &[2, 3, 4], &[1, 3, 4], &[1, 2, 4]]);
        let got = after(map.clone(), map.rebalanced(&ids(&[1, 3, 4]), 3, None));
        assert_eq!(got, vec![ids(&[1, 3, 4]); 4]);
        // A new member is given nothing while every partition is full.
        assert!(map.rebalanced(&ids(&[1, 2, 3, 4, 5]), 3, None).is_empty());
        // A move gives `to` the replicas of `from`, where it holds none.
        let moved = map.rebalanced(&ids(&[1, 3, 4, 5]), 3, Some((2, 5)));
        assert_eq!(
            after(map.clone(), moved),
            [
                ids(&[1, 3, 5]),
                ids(&[3, 4, 5]),
                ids(&[1, 3, 4]),
                ids(&[1, 4, 5])
            ]
        );
        // ... and where it holds one already, another member fills in.
        let moved = map.rebalanced(&ids(&[2, 3, 4]), 3, Some((1, 4)));
        let got = after(map.clone(), moved);
        assert_eq!(got[0], ids(&[2, 3, 4]));
        assert_eq!(got[2], ids(&[2, 3, 4]));
        // Fewer members than the factor: each partition holds them all;
        // a new one then fills every partition up to the factor.
        let two = with(&[&[1, 2], &[1, 2]]);
        assert!(two.rebalanced(&ids(&[1, 2]), 3, None).is_empty());
        assert_eq!(
            after(two.clone(), two.rebalanced(&ids(&[1, 2, 7]), 3, None)),
            [ids(&[1, 2, 7]), ids(&[1, 2, 7])]
        );
        // One replica each, its node removed: the least loaded takes it.
        let one = with(&[&[1], &[2], &[3]]);
        assert_eq!(
            after(one.clone(), one.rebalanced(&ids(&[1, 3]), 1, None)),
            [ids(&[1]), ids(&[1]), ids(&[3])]
        );
    }

    #[test]
    fn changes_and_maps_round_trip_and_every_cut_is_refused() {
        let changes = [
            MapChange::Init {
                partitions: sample().partitions,
            },
            MapChange::Place {
                queue: "jobs".into(),
                partition: 7,
            },
            MapChange::Unplace {
                queue: "jobs".into(),
            },
            MapChange::Replicas {
                partition: 1,
                replicas: BTreeSet::from([2, 4, 9]),
            },
        ];
        for change in changes {
            let mut bytes = Vec::new();
            encode_change(&change, &mut bytes);
            assert_eq!(decode_change(&bytes).unwrap(), change);
            for cut in 0..bytes.len() {
                assert!(
                    decode_change(&bytes[..cut]).is_err(),
                    "{change:?} cut at {cut}"
                );
            }
            bytes.push(0);
            assert!(decode_change(&bytes).is_err());
        }
        let mut map = sample();
        map.apply(MapChange::Place {
            queue: "jobs".into(),
            partition: 2,
        });
        let mut bytes = Vec::new();
        encode_map(&map, &mut bytes);
        assert_eq!(decode_map(&bytes).unwrap(), map);
        for cut in 0..bytes.len() {
            assert!(decode_map(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn a_change_that_could_not_be_read_back_is_refused_before_it_is_written() {
        let place = |queue: String| MapChange::Place {
            queue,
            partition: 0,
        };
        assert!(place("q".repeat(QUEUE_NAME_LEN_MAX)).check().is_ok());
        for bad in [
            place(String::new()),
            place("q".repeat(QUEUE_NAME_LEN_MAX + 1)),
            MapChange::Unplace {
                queue: "q".repeat(300),
            },
            MapChange::Replicas {
                partition: 0,
                replicas: (0..=REPLICAS_MAX as u64).collect(),
            },
            MapChange::Init {
                partitions: vec![Partition::default(); PARTITIONS_MAX + 1],
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
        // What check accepts decodes back.
        let ok = MapChange::Init {
            partitions: vec![
                Partition {
                    replicas: (1..=REPLICAS_MAX as u64).collect(),
                    key: [1, 2],
                };
                PARTITIONS_MAX
            ],
        };
        assert!(ok.check().is_ok());
        let mut bytes = Vec::new();
        encode_change(&ok, &mut bytes);
        assert_eq!(decode_change(&bytes).unwrap(), ok);
    }

    #[test]
    fn hostile_counts_and_names_are_refused() {
        let mut bytes = vec![1];
        bytes.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(decode_change(&bytes).is_err());
        let mut bytes = vec![2, 0];
        bytes.extend_from_slice(&0u32.to_be_bytes());
        assert!(decode_change(&bytes).is_err(), "an empty name");
        let mut bytes = vec![2, 2, 0xff, 0xfe];
        bytes.extend_from_slice(&0u32.to_be_bytes());
        assert!(decode_change(&bytes).is_err(), "a name not UTF-8");
        let mut bytes = vec![4, 0, 0, 0, 0];
        bytes.extend_from_slice(&(REPLICAS_MAX as u32 + 1).to_be_bytes());
        assert!(decode_change(&bytes).is_err());
        // A snapshot placing a queue in a partition it does not have.
        let mut map = sample();
        map.queues.insert("x".into(), 9);
        let mut bytes = Vec::new();
        encode_map(&map, &mut bytes);
        assert!(decode_map(&bytes).is_err());
    }
}
