//! This node's groups — its member of the metadata group and its Raft
//! node of every partition (a replica where the map places one) — and
//! what reaches them from anywhere on the node: which group a queue lives
//! in (the routing table, kept from this node's copy of the map), who
//! leads a group (asked of a partition's replicas when this node holds
//! none), and how an ask reaches a leader on another node.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use fila_cluster::peer::Forwarder;
use fila_cluster::{ClusterMap, Metadata, Replica, ReplicaError};
use fila_proto::ErrorCode;
use fila_wal::FsStorage;

use super::forward::{self, Ask, Placing};
use super::{fail, Shared};
use crate::dispatch::{error, Answer};

/// A partition's replica on this node.
pub(super) type Part = Replica<FsStorage>;

/// The metadata group's number on the peer protocol (a partition's is
/// its own number).
pub(super) const META: u32 = u32::MAX;
/// A cluster change's first step, on the metadata leader: the partitions'
/// replicas placed anew in the map (before any partition's members
/// change; its number on the peer protocol).
pub(super) const MAP: u32 = u32::MAX - 1;

/// How long a partition's leader learnt from one of its replicas (by a
/// node that holds none) is taken for it.
const HINT_FOR: Duration = Duration::from_millis(500);

/// How long a request waits for a group's leader to be known before it
/// is answered (an election takes about a second).
pub(super) const LEADER_WAIT: Duration = Duration::from_secs(5);
/// How long a forward to a leader may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a replica may take to name its partition's leader.
const LEADER_ASK_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a forwarded cluster change may take (a move runs until done,
/// within a minute).
const CHANGE_FORWARD_TIMEOUT: Duration = Duration::from_secs(70);

/// This node's groups.
pub(super) struct Cluster {
    pub(super) id: u64,
    pub(super) meta: Metadata<FsStorage>,
    /// The Raft node of each partition, by number (a member of the group
    /// where the map places a replica on this node).
    pub(super) parts: Vec<Arc<Part>>,
    /// The partition of each queue as this node's copy of the map says
    /// (read by every request; rebuilt when the map changes).
    pub(super) routes: DashMap<String, u32>,
    /// The map the routes and the partitions' keys were taken from.
    pub(super) map_seen: std::sync::Mutex<Arc<ClusterMap>>,
    pub(super) fwd: Forwarder,
    pub(super) shared: Arc<Shared>,
    /// The replicas each partition keeps (`cluster.replicas`).
    pub(super) factor: usize,
    /// Each partition's leader as a replica of it last told this node,
    /// and when (for the partitions this node holds no replica of).
    pub(super) hints: std::sync::Mutex<Vec<Option<(u64, Instant)>>>,
    /// Per partition: the receives waiting on its leader here, told of
    /// messages stored or made visible there so they look again at once.
    pub(super) waiters: Vec<super::turns::Waiters>,
}

/// The answer (and wait) a forward to `leader` brought back, or
/// `outcome_unknown` when it failed on its way or its bytes do not read.
fn answered(leader: u64, sent: std::io::Result<Vec<u8>>) -> Result<(Answer, u64), Answer> {
    let bytes = sent.map_err(|e| forward::lost(leader, &e))?;
    forward::decode_answer(&bytes).map_err(|why| {
        let e = std::io::Error::new(std::io::ErrorKind::InvalidData, why);
        forward::lost(leader, &e)
    })
}

/// What became of a held ask ([`Cluster::forward_held_while_leading`]).
pub(super) enum Held {
    /// The leader's answer: messages, the end of the wait, a refusal.
    Done(Answer),
    /// Not sent (every connection kept for held asks is taken), or the
    /// leader, of an earlier version, did not know the ask: the receive
    /// is forwarded once per look instead.
    Poll,
    /// The forward failed on its way (`outcome_unknown`).
    Failed(Answer),
    /// Another node leads the group now.
    Moved,
}

impl Ask {
    /// How long its forward may take.
    fn timeout(&self) -> Duration {
        match self {
            Ask::Run { req, .. } if req.opcode() == fila_proto::Opcode::ChangeCluster => {
                CHANGE_FORWARD_TIMEOUT
            }
            // Asked of each replica in turn: one that does not answer
            // soon is passed over.
            Ask::Leader { .. } => LEADER_ASK_TIMEOUT,
            // Held until its wait (at most the longest) ends.
            Ask::Wait { .. } => {
                FORWARD_TIMEOUT + Duration::from_millis(fila_core::limits::WAIT_MS_MAX)
            }
            _ => FORWARD_TIMEOUT,
        }
    }
}

impl Cluster {
    /// The Raft node of group `g`.
    pub(super) fn raft_of(&self, g: u32) -> Option<&fila_cluster::Group<FsStorage>> {
        if g == META {
            return Some(self.meta.raft());
        }
        self.parts.get(g as usize).map(|p| p.raft())
    }

    /// The leader of group `g` this node knows of: its own replica's
    /// view, or for a partition it holds none of, the last hint.
    pub(super) fn leader_of(&self, g: u32) -> Option<u64> {
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
    pub(super) fn holds(&self, g: u32) -> bool {
        let Some(part) = self.parts.get(g as usize) else {
            return false;
        };
        let member = fila_cluster::view::is_member(part.raft(), self.id);
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
    pub(super) fn hint(&self, g: u32, fresh: bool) -> Option<u64> {
        let hints = self.hints.lock().unwrap_or_else(|p| p.into_inner());
        let (id, at) = hints.get(g as usize).copied().flatten()?;
        (!fresh || at.elapsed() < HINT_FOR).then_some(id)
    }

    /// Partition `g`'s leader, for a node that holds no replica of it:
    /// the fresh hint, else asked of each replica the map places (the
    /// first that knows).
    pub(super) async fn find_leader(&self, g: u32) -> Option<u64> {
        if let Some(id) = self.hint(g, true) {
            return Some(id);
        }
        let replicas = self.meta.map().partitions.get(g as usize)?.replicas.clone();
        for id in replicas {
            let Ok((Answer::Wire(fila_proto::Response::Ok), leader)) =
                self.forward_to(id, &Ask::Leader { group: g }).await
            else {
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
    pub(super) async fn named(&self, g: u32, e: ReplicaError) -> ReplicaError {
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
    pub(super) fn addresses(&self) -> std::collections::BTreeMap<u64, fila_cluster::Member> {
        fila_cluster::view::view(self.meta.raft()).members
    }

    /// Node `id`'s addresses: from the metadata group's members, else
    /// from the groups' where it is one.
    fn member_of(&self, id: u64) -> Option<fila_cluster::Member> {
        let groups = std::iter::once(META).chain(0..self.parts.len() as u32);
        for g in groups {
            let raft = self.raft_of(g)?;
            if let Some(node) = fila_cluster::view::view(raft).members.remove(&id) {
                return Some(node);
            }
        }
        None
    }

    /// Sends `ask` to `leader`: its answer and wait, or the answer of a
    /// forward that failed.
    pub(super) async fn forward_to(&self, leader: u64, ask: &Ask) -> Result<(Answer, u64), Answer> {
        let Some(addr) = self.member_of(leader).map(|m| m.addr) else {
            let lost = ReplicaError::NotLeader { leader: None };
            return Err(self.refusal(ask.group(), &lost));
        };
        let sent = self
            .fwd
            .forward(leader, &addr, ask.encode(), ask.timeout())
            .await;
        answered(leader, sent)
    }

    /// [`Cluster::forward_to`], given up (`None`) as soon as this node
    /// sees another node leading group `g`: a leader that stopped
    /// answering (a paused process, a cut link) is replaced within an
    /// election, and the call goes to the new one rather than waiting out
    /// the forward's time for an answer that would say `outcome_unknown`.
    /// The call may have been done on the old leader before it stopped
    /// (then it is done twice, as when a client sends it again after an
    /// error: a put with a deduplication id is stored once). Which node
    /// leads is this node's own replica's view, or a fresh hint for a
    /// partition it holds no replica of.
    pub(super) async fn forward_while_leading(
        &self,
        g: u32,
        leader: u64,
        ask: &Ask,
    ) -> Option<Result<(Answer, u64), Answer>> {
        let forward = self.forward_to(leader, ask);
        let mut forward = std::pin::pin!(forward);
        loop {
            if let Ok(done) = tokio::time::timeout(super::POLL, &mut forward).await {
                return Some(done);
            }
            if self.leader_of(g).is_some_and(|now| now != leader) {
                return None;
            }
        }
    }

    /// Sends a held ask ([`Ask::Wait`]) to group `g`'s leader `leader` on
    /// a connection kept for those, and waits for its answer, given up as
    /// soon as this node sees another node leading `g` (as
    /// [`Cluster::forward_while_leading`] does).
    pub(super) async fn forward_held_while_leading(&self, g: u32, leader: u64, ask: &Ask) -> Held {
        let Some(addr) = self.member_of(leader).map(|m| m.addr) else {
            return Held::Failed(self.refusal(g, &ReplicaError::NotLeader { leader: None }));
        };
        let call = self
            .fwd
            .forward_held(leader, &addr, ask.encode(), ask.timeout());
        let mut call = std::pin::pin!(call);
        loop {
            match tokio::time::timeout(super::POLL, &mut call).await {
                Ok(None) => return Held::Poll,
                Ok(Some(sent)) => {
                    return match answered(leader, sent) {
                        Ok((answer, _)) if forward::unknown_ask(&answer) => Held::Poll,
                        Ok((answer, _)) => Held::Done(answer),
                        Err(lost) => Held::Failed(lost),
                    };
                }
                Err(_) if self.leader_of(g).is_some_and(|now| now != leader) => return Held::Moved,
                Err(_) => {}
            }
        }
    }

    /// Runs `ask` on group `g`'s leader: here (`here`) when this node
    /// leads it, else forwarded; waits up to [`LEADER_WAIT`] for a leader
    /// to be known.
    pub(super) async fn on_leader<F, Fut>(
        &self,
        g: u32,
        ask: Ask,
        here: F,
    ) -> Result<(Answer, u64), Answer>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<(Answer, u64), ReplicaError>>,
    {
        let started = Instant::now();
        loop {
            let here = match here().await {
                Err(e) => Err(self.named(g, e).await),
                done => done,
            };
            match here {
                Ok(done) => return Ok(done),
                Err(ReplicaError::NotLeader { leader: Some(id) }) if id != self.id => {
                    return self.forward_to(id, &ask).await;
                }
                Err(ReplicaError::NotLeader { .. } | ReplicaError::Unready(_))
                    if started.elapsed() < LEADER_WAIT && !self.stopping() =>
                {
                    tokio::time::sleep(super::POLL).await;
                }
                Err(e) => return Err(self.refusal(g, &e)),
            }
        }
    }

    pub(super) fn stopping(&self) -> bool {
        self.shared
            .stopping
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The answer of `e` on group `g`: `not_leader` naming the group's
    /// leader, `outcome_unknown`, or `internal` — and then the Raft node
    /// failed (its storage): the server stops, saying why, as a single
    /// node does when its log fails.
    pub(super) fn refusal(&self, g: u32, e: &ReplicaError) -> Answer {
        let what = if g == META || g == MAP {
            "the cluster's metadata".to_owned()
        } else {
            format!("partition {g}")
        };
        match e {
            ReplicaError::NotLeader { leader } => {
                let at = leader
                    .and_then(|id| Some(format!("leader {id} at {}", self.member_of(id)?.client)));
                let message = match at {
                    Some(at) => format!("not_leader: this node does not lead {what}; {at}"),
                    None => format!("not_leader: this node does not lead {what}; the leader is not known yet (try another node)"),
                };
                error(ErrorCode::NOT_LEADER, message).into()
            }
            ReplicaError::Unknown { .. } => {
                error(ErrorCode::OUTCOME_UNKNOWN, format!("outcome_unknown: {e}")).into()
            }
            // Retriable, as a leader not known yet is: clients (and SQS
            // SDKs, answered 503) try again.
            ReplicaError::Unready(why) => error(
                ErrorCode::NOT_LEADER,
                format!("not_leader: {why}; try again in a moment"),
            )
            .into(),
            ReplicaError::Full { limit, max } => {
                Answer::failed(&fila_core::Error::ResourceExhausted { limit, max: *max })
            }
            ReplicaError::Refused(why) => error(
                ErrorCode::INVALID_ARGUMENT,
                format!("invalid_argument: {why}"),
            )
            .into(),
            _ => {
                fail(
                    &self.shared,
                    format!("the cluster node failed, nothing more can be acknowledged: {e}"),
                );
                error(ErrorCode::INTERNAL, format!("internal: {e}")).into()
            }
        }
    }

    /// The partition `queue` lives in: to find it, from the routing table,
    /// else from the metadata leader's map; to create or delete it, from
    /// the metadata leader, which places it first or takes its placement
    /// away. `None`: it is placed nowhere.
    pub(super) async fn placement(
        &self,
        queue: &str,
        placing: Placing,
    ) -> Result<Option<u32>, Answer> {
        // A create or a removal asks the metadata leader: the table may
        // still hold a queue deleted elsewhere a moment ago.
        if placing == Placing::Find {
            if let Some(p) = self.routes.get(queue) {
                return Ok(Some(*p));
            }
        }
        let ask = Ask::Place {
            queue: queue.to_owned(),
            placing: placing.clone(),
        };
        let (answer, p) = self
            .on_leader(META, ask, || async {
                let p = self.place_here(queue, placing.clone()).await?;
                Ok((
                    fila_proto::Response::Ok.into(),
                    p.map_or(0, |p| u64::from(p) + 1),
                ))
            })
            .await?;
        match answer {
            Answer::Wire(fila_proto::Response::Ok) => {}
            other => return Err(other),
        }
        let p = p.checked_sub(1).and_then(|p| u32::try_from(p).ok());
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
    /// placement taken away as `placing` says; at most the node's
    /// `max_queues` queues are placed in the cluster.
    pub(super) async fn place_here(
        &self,
        queue: &str,
        placing: Placing,
    ) -> Result<Option<u32>, ReplicaError> {
        match placing {
            Placing::Create(near) => {
                let max = usize::try_from(self.shared.config.max_queues).unwrap_or(usize::MAX);
                self.meta.place(queue, near.as_deref(), max).await.map(Some)
            }
            Placing::Find => Ok(self.meta.confirmed_map().await?.partition_of(queue)),
            Placing::Remove => {
                self.meta.confirmed_map().await?;
                self.meta
                    .propose(&fila_cluster::MapChange::Unplace {
                        queue: queue.to_owned(),
                    })
                    .await?;
                Ok(None)
            }
        }
    }

    /// Keeps the routing table and the partitions' keys the map's, when
    /// this node's copy of it changed.
    pub(super) fn follow_map(&self) {
        let map = self.meta.map();
        {
            let mut seen = self.map_seen.lock().unwrap_or_else(|p| p.into_inner());
            if Arc::ptr_eq(&seen, &map) || *seen == map {
                return;
            }
            *seen = map.clone();
        }
        for (p, part) in map.partitions.iter().zip(&self.parts) {
            part.set_secret(p.key);
        }
        if !map.partitions.is_empty() && map.partitions.len() != self.parts.len() {
            fail(
                &self.shared,
                format!(
                    "the cluster has {} partitions and this node was started with cluster.partitions = {}: every node is given the same",
                    map.partitions.len(),
                    self.parts.len()
                ),
            );
        }
        self.routes
            .retain(|q, p| map.queues.get(q.as_str()) == Some(&*p));
        for (q, p) in &map.queues {
            if self.routes.get(q.as_str()).map(|r| *r) != Some(*p) {
                self.routes.insert(q.clone(), *p);
            }
        }
    }
}
