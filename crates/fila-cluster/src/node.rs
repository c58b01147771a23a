//! A node's groups and what reaches them from anywhere on the node: its
//! member of the metadata group and its Raft node of every partition; the
//! routing table (which partition a queue lives in, kept from this node's
//! copy of the map, [`Node::follow_map`]); who leads a group (its own
//! replica's view, or for a partition it holds none of, a hint asked of
//! the partition's replicas, [`Node::find_leader`]); placing a queue
//! through the metadata leader ([`Node::placement`]); and an ask sent to
//! a group's leader on another node ([`crate::forward`], through a
//! [`Transport`]: the peer protocol on a server, the network in process
//! in the simulation), given up as soon as another node leads the group.
//!
//! What an ask of a request does on the leader is the server's: this
//! module answers only the asks it makes itself ([`Node::answer_own`]: a
//! placement, a partition's leader). A change of the cluster's members
//! made in every group ([`Node::change_everywhere`]) is in `change.rs`,
//! the node's housekeeping (the cluster's first memberships and map,
//! memory let go, the hand-over at a stop) in `tend.rs`.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dashmap::DashMap;
use fila_proto::{Opcode, Response};
use fila_wal::Storage;
use tokio::time::Instant;

use crate::forward::{Ask, Placing, Reply, MAP, META};
use crate::peer::Forwarder;
use crate::{ClusterMap, Group, MapChange, Member, Metadata, NodeId, Replica, ReplicaError};

mod change;
pub mod course;
mod tend;
pub use change::meta_voters;
pub use course::{Course, HeldTo, Step, FORWARD_RETRY_WITHIN};

/// How long a partition's leader learnt from one of its replicas (by a
/// node that holds none) is taken for it.
pub const HINT_FOR: Duration = Duration::from_millis(500);
/// How long a request waits for a group's leader to be known before it is
/// answered (an election takes about a second).
pub const LEADER_WAIT: Duration = Duration::from_secs(5);
/// How often a wait for a group's leader (or for a forward's answer,
/// while another node may take over the group) looks again.
pub const LOOK: Duration = Duration::from_millis(50);

/// How a node's asks reach another node.
pub trait Transport: Send + Sync + 'static {
    /// Sends `body` to node `target` at peer address `addr` and returns
    /// its reply, within `timeout`. An error leaves unknown whether the
    /// peer handled it.
    fn forward(
        &self,
        target: NodeId,
        addr: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> impl Future<Output = io::Result<Vec<u8>>> + Send;

    /// [`Transport::forward`] of an ask the peer may hold until it has an
    /// answer, on a connection kept for those; `None`, sending nothing,
    /// while every such connection is taken.
    fn forward_held(
        &self,
        target: NodeId,
        addr: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> impl Future<Output = Option<io::Result<Vec<u8>>>> + Send;
}

impl Transport for Forwarder {
    fn forward(
        &self,
        target: NodeId,
        addr: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> impl Future<Output = io::Result<Vec<u8>>> + Send {
        Forwarder::forward(self, target, addr, body, timeout)
    }

    fn forward_held(
        &self,
        target: NodeId,
        addr: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> impl Future<Output = Option<io::Result<Vec<u8>>>> + Send {
        Forwarder::forward_held(self, target, addr, body, timeout)
    }
}

/// Why an ask has no answer of its group's leader.
#[derive(Debug)]
pub enum Refusal {
    /// This node's replica of `group` refused it: no leader known, not
    /// this node, an outcome unknown, its storage failed ...
    Here {
        /// The group.
        group: u32,
        /// Why.
        error: ReplicaError,
    },
    /// The forward to `leader` failed on its way, or its reply did not
    /// read: it may or may not have run there.
    Lost {
        /// The leader it was sent to.
        leader: NodeId,
        /// What failed.
        error: io::Error,
    },
    /// The leader answered with this error.
    Answered(Response),
}

/// Where an ask ran ([`Node::on_leader`]).
#[derive(Debug)]
pub enum Led<R> {
    /// Here, this node leading its group.
    Here(R),
    /// On `leader`, which sent back `reply` (a [`Reply`]'s bytes).
    There {
        /// The leader.
        leader: NodeId,
        /// Its reply.
        reply: Vec<u8>,
    },
}

/// What became of a held ask ([`Node::forward_held_while_leading`]).
#[derive(Debug)]
pub enum Held {
    /// The leader's reply (a [`Reply`]'s bytes).
    Done(Vec<u8>),
    /// Not sent: every connection kept for held asks is taken.
    Busy,
    /// The forward failed.
    Failed(Refusal),
    /// Another node leads the group now.
    Moved,
}

/// A node's groups (see the module docs).
pub struct Node<S: Storage + 'static, T> {
    /// This node's id.
    pub id: NodeId,
    /// Its member of the metadata group.
    pub meta: Metadata<S>,
    /// Its Raft node of each partition, by number (a member of the group
    /// where the map places a replica on this node).
    pub parts: Vec<Arc<Replica<S>>>,
    /// The replicas each partition keeps (`cluster.replicas`).
    pub factor: usize,
    /// The partition of each queue as this node's copy of the map says
    /// (read by every request; kept by [`Node::follow_map`] and by
    /// placements).
    routes: DashMap<String, u32>,
    /// The map the routes and the partitions' keys were taken from.
    map_seen: Mutex<Arc<ClusterMap>>,
    /// Each partition's leader as a replica of it last told this node,
    /// and when (for the partitions this node holds no replica of).
    hints: Mutex<Vec<Option<(NodeId, Instant)>>>,
    transport: T,
    /// The node is stopping: no more waits for a leader.
    stopping: Arc<AtomicBool>,
}

/// `reply`'s wait when it is `Ok`.
fn ok_wait(leader: NodeId, reply: &[u8]) -> Result<u64, Refusal> {
    let reply = Reply::decode(reply).map_err(|why| Refusal::Lost {
        leader,
        error: io::Error::new(io::ErrorKind::InvalidData, why),
    })?;
    match reply.response {
        Response::Ok => Ok(reply.wait),
        other => Err(Refusal::Answered(other)),
    }
}

impl<S: Storage + 'static, T: Transport> Node<S, T> {
    /// Node `id` of `meta` and `parts` (each partition kept by `factor`
    /// replicas), reaching the others through `transport`; it stops
    /// waiting for leaders once `stopping` is set.
    pub fn new(
        id: NodeId,
        meta: Metadata<S>,
        parts: Vec<Arc<Replica<S>>>,
        factor: usize,
        transport: T,
        stopping: Arc<AtomicBool>,
    ) -> Node<S, T> {
        let hints = Mutex::new(vec![None; parts.len()]);
        Node {
            id,
            meta,
            parts,
            factor,
            routes: DashMap::new(),
            map_seen: Mutex::new(Arc::default()),
            hints,
            transport,
            stopping,
        }
    }

    /// The partition `queue` lives in, as the routing table says.
    pub fn route(&self, queue: &str) -> Option<u32> {
        self.routes.get(queue).map(|p| *p)
    }

    /// The Raft node of group `g`.
    pub fn raft_of(&self, g: u32) -> Option<&Group<S>> {
        if g == META {
            return Some(self.meta.raft());
        }
        self.parts.get(g as usize).map(|p| p.raft())
    }

    /// The leader of group `g` this node knows of: its own replica's
    /// view, or for a partition it holds none of, the last hint.
    pub fn leader_of(&self, g: u32) -> Option<NodeId> {
        if g == META || g == MAP {
            return self.meta.known_leader();
        }
        if !self.holds(g) {
            return self.hint(g, true);
        }
        self.parts.get(g as usize)?.known_leader()
    }

    /// Whether this node holds a replica of partition `g`: a member
    /// (voter or learner) as its own replica sees the group, and either
    /// one the map places there or one that knows a leader — not a replica
    /// removed while its node was down, which never heard of it.
    pub fn holds(&self, g: u32) -> bool {
        let Some(part) = self.parts.get(g as usize) else {
            return false;
        };
        let member = crate::view::is_member(part.raft(), self.id);
        member
            && (part.known_leader().is_some()
                || self
                    .meta
                    .map()
                    .partitions
                    .get(g as usize)
                    .is_none_or(|p| p.replicas.contains(&self.id)))
    }

    /// The hint of partition `g`'s leader: a fresh one, or (`fresh`
    /// false) the last, however old.
    pub fn hint(&self, g: u32, fresh: bool) -> Option<NodeId> {
        let hints = self.hints.lock().unwrap_or_else(|p| p.into_inner());
        let (id, at) = hints.get(g as usize).copied().flatten()?;
        (!fresh || at.elapsed() < HINT_FOR).then_some(id)
    }

    /// Partition `g`'s leader, for a node that holds no replica of it:
    /// the fresh hint, else asked of each replica the map places (the
    /// first that knows).
    pub async fn find_leader(&self, g: u32) -> Option<NodeId> {
        if let Some(id) = self.hint(g, true) {
            return Some(id);
        }
        let replicas = self.meta.map().partitions.get(g as usize)?.replicas.clone();
        for id in replicas {
            let Ok(reply) = self.forward_to(id, &Ask::Leader { group: g }).await else {
                continue;
            };
            let Ok(leader) = ok_wait(id, &reply) else {
                continue;
            };
            if let Some(leader) = leader.checked_sub(1) {
                let mut hints = self.hints.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(h) = hints.get_mut(g as usize) {
                    *h = Some((leader, Instant::now()));
                }
                return Some(leader);
            }
        }
        None
    }

    /// The leader `e` names for partition `g`, or the one its replicas
    /// name when this node holds none.
    pub async fn named(&self, g: u32, e: ReplicaError) -> ReplicaError {
        match e {
            ReplicaError::NotLeader { .. } if g != META && g != MAP && !self.holds(g) => {
                ReplicaError::NotLeader {
                    leader: self.find_leader(g).await,
                }
            }
            e => e,
        }
    }

    /// The cluster's members (the metadata group's) and their addresses.
    pub fn addresses(&self) -> BTreeMap<NodeId, Member> {
        crate::view::view(self.meta.raft()).members
    }

    /// Node `id`'s addresses: from the metadata group's members, else
    /// from the groups' where it is one.
    pub fn member_of(&self, id: NodeId) -> Option<Member> {
        let groups = std::iter::once(META).chain(0..self.parts.len() as u32);
        for g in groups {
            let raft = self.raft_of(g)?;
            if let Some(node) = crate::view::view(raft).members.remove(&id) {
                return Some(node);
            }
        }
        None
    }

    /// Sends `ask` to `leader`: its reply, or why there is none.
    pub async fn forward_to(&self, leader: NodeId, ask: &Ask) -> Result<Vec<u8>, Refusal> {
        let Some(addr) = self.member_of(leader).map(|m| m.addr) else {
            return Err(Refusal::Here {
                group: ask.group(),
                error: ReplicaError::NotLeader { leader: None },
            });
        };
        self.transport
            .forward(leader, &addr, ask.encode(), ask.timeout())
            .await
            .map_err(|error| Refusal::Lost { leader, error })
    }

    /// [`Node::forward_to`], given up (`None`) as soon as this node sees
    /// another node leading group `g`: a leader that stopped answering (a
    /// paused process, a cut link) is replaced within an election, and the
    /// call goes to the new one rather than waiting out the forward's time
    /// for an answer that would say `outcome_unknown`. The call may have
    /// been done on the old leader before it stopped (then it is done
    /// twice, as when a client sends it again after an error: a put with a
    /// deduplication id is stored once). Which node leads is this node's
    /// own replica's view, or a fresh hint for a partition it holds no
    /// replica of.
    pub async fn forward_while_leading(
        &self,
        g: u32,
        leader: NodeId,
        ask: &Ask,
    ) -> Option<Result<Vec<u8>, Refusal>> {
        let forward = self.forward_to(leader, ask);
        let mut forward = std::pin::pin!(forward);
        loop {
            if let Ok(done) = tokio::time::timeout(LOOK, &mut forward).await {
                return Some(done);
            }
            if self.leader_of(g).is_some_and(|now| now != leader) {
                return None;
            }
        }
    }

    /// Sends a held ask ([`Ask::Wait`]) to group `g`'s leader `leader` on
    /// a connection kept for those, and waits for its reply, given up as
    /// soon as this node sees another node leading `g` (as
    /// [`Node::forward_while_leading`] does).
    pub async fn forward_held_while_leading(&self, g: u32, leader: NodeId, ask: &Ask) -> Held {
        let Some(addr) = self.member_of(leader).map(|m| m.addr) else {
            return Held::Failed(Refusal::Here {
                group: g,
                error: ReplicaError::NotLeader { leader: None },
            });
        };
        let call = self
            .transport
            .forward_held(leader, &addr, ask.encode(), ask.timeout());
        let mut call = std::pin::pin!(call);
        loop {
            match tokio::time::timeout(LOOK, &mut call).await {
                Ok(None) => return Held::Busy,
                Ok(Some(Ok(reply))) => return Held::Done(reply),
                Ok(Some(Err(error))) => return Held::Failed(Refusal::Lost { leader, error }),
                Err(_) if self.leader_of(g).is_some_and(|now| now != leader) => return Held::Moved,
                Err(_) => {}
            }
        }
    }

    /// Whether the node is stopping.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Runs `ask` on group `g`'s leader: here (`here`) when this node
    /// leads it, else forwarded; waits up to [`LEADER_WAIT`] for a leader
    /// to be known.
    pub async fn on_leader<R, F, Fut>(&self, g: u32, ask: &Ask, here: F) -> Result<Led<R>, Refusal>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<R, ReplicaError>>,
    {
        let started = Instant::now();
        loop {
            let here = match here().await {
                Err(e) => Err(self.named(g, e).await),
                done => done,
            };
            match here {
                Ok(done) => return Ok(Led::Here(done)),
                Err(ReplicaError::NotLeader { leader: Some(id) }) if id != self.id => {
                    let reply = self.forward_to(id, ask).await?;
                    return Ok(Led::There { leader: id, reply });
                }
                Err(ReplicaError::NotLeader { .. } | ReplicaError::Unready(_))
                    if started.elapsed() < LEADER_WAIT && !self.stopping() =>
                {
                    tokio::time::sleep(LOOK).await;
                }
                Err(error) => return Err(Refusal::Here { group: g, error }),
            }
        }
    }

    /// The partition `queue` lives in: to find it, from the routing table,
    /// else from the metadata leader's map; to create or delete it, from
    /// the metadata leader, which places it first (at most `max_queues`
    /// queues in the cluster when this node leads the metadata group) or
    /// takes its placement away. `None`: it is placed nowhere.
    pub async fn placement(
        &self,
        queue: &str,
        placing: Placing,
        max_queues: usize,
    ) -> Result<Option<u32>, Refusal> {
        // A create or a removal asks the metadata leader: the table may
        // still hold a queue deleted elsewhere a moment ago.
        if placing == Placing::Find {
            if let Some(p) = self.route(queue) {
                return Ok(Some(p));
            }
        }
        let ask = Ask::Place {
            queue: queue.to_owned(),
            placing: placing.clone(),
        };
        let led = self
            .on_leader(META, &ask, || {
                self.place_here(queue, placing.clone(), max_queues)
            })
            .await?;
        let p = match led {
            Led::Here(p) => p,
            Led::There { leader, reply } => ok_wait(leader, &reply)?
                .checked_sub(1)
                .and_then(|p| u32::try_from(p).ok()),
        };
        match p {
            Some(p) => {
                self.routes.insert(queue.to_owned(), p);
            }
            None => {
                self.routes.remove(queue);
            }
        }
        Ok(p)
    }

    /// On the metadata leader: `queue`'s partition, placed first or its
    /// placement taken away as `placing` says; at most `max_queues`
    /// queues are placed in the cluster.
    pub async fn place_here(
        &self,
        queue: &str,
        placing: Placing,
        max_queues: usize,
    ) -> Result<Option<u32>, ReplicaError> {
        match placing {
            Placing::Create(near) => self
                .meta
                .place(queue, near.as_deref(), max_queues)
                .await
                .map(Some),
            Placing::Find => Ok(self.meta.confirmed_map().await?.partition_of(queue)),
            Placing::Remove => {
                self.meta.confirmed_map().await?;
                self.meta
                    .propose(&MapChange::Unplace {
                        queue: queue.to_owned(),
                    })
                    .await?;
                Ok(None)
            }
        }
    }

    /// The leader's side of the asks this node makes itself: a
    /// placement (`Some(Err)`: refused, with the group and why) and a
    /// partition's leader, answered as [`Reply`]s' bytes; `None` for an
    /// ask of a request, which is the server's to run.
    pub async fn answer_own(
        &self,
        ask: &Ask,
        max_queues: usize,
    ) -> Option<Result<Vec<u8>, (u32, ReplicaError)>> {
        let ok = |wait| Reply::of(&Response::Ok, Opcode::Auth as u8, wait);
        match ask {
            Ask::Leader { group } => {
                // Only a replica's own view: a node holding none does not
                // pass on what it was told.
                let leader = match self.parts.get(*group as usize) {
                    Some(part) if self.holds(*group) => part.known_leader().map_or(0, |id| id + 1),
                    _ => 0,
                };
                Some(Ok(ok(leader)))
            }
            Ask::Place { queue, placing } => Some(
                match self.place_here(queue, placing.clone(), max_queues).await {
                    Ok(p) => Ok(ok(p.map_or(0, |p| u64::from(p) + 1))),
                    Err(e) => Err((META, e)),
                },
            ),
            _ => None,
        }
    }

    /// A change of the members or the leadership (the `change cluster`
    /// request) made in every group it concerns, each group's part by its
    /// leader, here or forwarded to it.
    pub async fn change_everywhere(
        &self,
        change: fila_proto::ClusterChange,
    ) -> Result<(), Refusal> {
        change::change_everywhere(self, change).await
    }

    /// Group `g`'s part of a change, on its leader (else `NotLeader`):
    /// the metadata log index a partition's step waits for (a change of
    /// the map made here), else 0; a partition's step first waits until
    /// this node's copy of the map holds index `after`.
    pub async fn change_here(
        &self,
        g: u32,
        change: fila_proto::ClusterChange,
        after: u64,
    ) -> Result<u64, ReplicaError> {
        change::change_here(self, g, change, after).await
    }

    /// On the metadata leader: one step towards [`meta_voters`] voters.
    pub async fn balance_meta(&self) -> Result<(), ReplicaError> {
        change::balance_meta(self).await
    }

    /// Keeps the routing table and the partitions' keys the map's, when
    /// this node's copy of it changed. An error: the map has another
    /// number of partitions than this node was started with.
    pub fn follow_map(&self) -> Result<(), String> {
        let map = self.meta.map();
        {
            let mut seen = self.map_seen.lock().unwrap_or_else(|p| p.into_inner());
            if Arc::ptr_eq(&seen, &map) || *seen == map {
                return Ok(());
            }
            *seen = map.clone();
        }
        for (p, part) in map.partitions.iter().zip(&self.parts) {
            part.set_secret(p.key);
        }
        self.routes
            .retain(|q, p| map.queues.get(q.as_str()) == Some(&*p));
        for (q, p) in &map.queues {
            if self.route(q) != Some(*p) {
                self.routes.insert(q.clone(), *p);
            }
        }
        if !map.partitions.is_empty() && map.partitions.len() != self.parts.len() {
            return Err(format!(
                "the cluster has {} partitions and this node was started with cluster.partitions = {}: every node is given the same",
                map.partitions.len(),
                self.parts.len()
            ));
        }
        Ok(())
    }
}
