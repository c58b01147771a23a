//! Changing a group's members and moving its leadership, on the leader.
//!
//! A node joins as a learner ([`Members::add_learner`]): it takes the log
//! (or the snapshot) and does not vote. Once it has caught up it is made
//! a voter ([`Members::promote`]); a voter or a learner is taken out with
//! [`Members::remove`]. Each change is one membership entry — a change of
//! voters goes through openraft's joint configuration, so the old and the
//! new voters both agree — and is answered once it is committed.
//! [`Members::transfer_leader`] hands the leadership to a voter that has
//! the whole log, for a node about to be stopped. [`Members::move_step`]
//! moves a group's replicas to the nodes wanted, one of these changes at a
//! time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fila_wal::Storage;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::{ChangeMembers, ServerState};

use openraft::Raft;

use crate::{Member, NodeId, Replica, ReplicaError, StateMachine, TypeConfig};

/// How far (in entries) a learner may be behind the leader's log and still
/// be made a voter: a voter that lags far slows every commit it is needed
/// for.
pub const PROMOTE_LAG_MAX: u64 = 1_024;

/// How long a membership change may take to commit.
pub const CHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a membership change waits for another one in progress.
const IN_PROGRESS_POLL: Duration = Duration::from_millis(50);

/// How long a transfer of the leadership may take.
pub const TRANSFER_TIMEOUT: Duration = Duration::from_secs(3);

fn refused(why: String) -> ReplicaError {
    ReplicaError::Refused(why)
}

/// What the leader sees of its group now.
struct View {
    voters: BTreeSet<NodeId>,
    nodes: BTreeMap<NodeId, Member>,
    last_log_index: u64,
    /// The last entry each member holds, as far as the leader knows.
    matched: BTreeMap<NodeId, u64>,
    /// Whether the membership it shows is applied (so committed): a
    /// leader's view may show a change of its own not committed yet, which
    /// a next leader without it would not have made.
    settled: bool,
}

/// This node's member of one group (a partition's replica or the
/// metadata group's member): what changes the group's members, on its
/// leader.
pub struct Members<'a, S: Storage + 'static> {
    raft: &'a Raft<TypeConfig, StateMachine<S>>,
    sm: &'a StateMachine<S>,
    id: NodeId,
    /// Nodes that may be added although they were members before
    /// ([`Members::rejoining`]).
    kept: BTreeSet<NodeId>,
}

impl<'a, S: Storage + 'static> Members<'a, S> {
    /// The member `id` of the group `raft` runs, on state machine `sm`.
    pub(crate) fn new(
        raft: &'a Raft<TypeConfig, StateMachine<S>>,
        sm: &'a StateMachine<S>,
        id: NodeId,
    ) -> Members<'a, S> {
        Members {
            raft,
            sm,
            id,
            kept: BTreeSet::new(),
        }
    }

    /// These members, letting `kept` be added again although they were
    /// members of the group before: nodes known to have kept their
    /// replica's log and vote (a partition's replica moved away from a
    /// node that is still a member of the cluster, whose metadata group
    /// holds "ids only grow" for the node as a whole).
    pub fn rejoining(mut self, kept: BTreeSet<NodeId>) -> Self {
        self.kept = kept;
        self
    }

    /// The group's Raft node.
    pub fn raft(&self) -> &Raft<TypeConfig, StateMachine<S>> {
        self.raft
    }

    fn state(&self) -> &StateMachine<S> {
        self.sm
    }

    fn id(&self) -> NodeId {
        self.id
    }

    /// The group as its leader sees it, or `NotLeader`.
    fn leader_view(&self) -> Result<View, ReplicaError> {
        let m = self.raft().metrics();
        let m = m.borrow_watched();
        if m.state != ServerState::Leader {
            drop(m);
            return Err(ReplicaError::NotLeader {
                leader: crate::replica::known_leader(self.raft),
            });
        }
        let membership = m.membership_config.membership();
        let settled = m.membership_config.log_id().map(|l| l.index)
            <= m.last_applied.as_ref().map(|l| l.index);
        Ok(View {
            settled,
            voters: membership.voter_ids().collect(),
            nodes: membership.nodes().map(|(id, n)| (*id, n.clone())).collect(),
            last_log_index: m.last_log_index.unwrap_or(0),
            matched: m
                .replication
                .as_ref()
                .map(|r| {
                    r.iter()
                        .filter_map(|(id, l)| Some((*id, l.as_ref()?.index)))
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// Proposes `change` and waits (at most [`CHANGE_TIMEOUT`]) for it to
    /// commit; while another change of the group's members is in progress
    /// (the metadata leader keeping its voters' number, a move's step), it
    /// is proposed again once that one is done, within the same time.
    async fn change(
        &self,
        change: ChangeMembers<NodeId, Member>,
        retain: bool,
    ) -> Result<(), ReplicaError> {
        use openraft::errors::{ChangeMembershipError as C, ClientWriteError as W, RaftError as R};
        let deadline = tokio::time::Instant::now() + CHANGE_TIMEOUT;
        loop {
            let done = tokio::time::timeout_at(
                deadline,
                self.raft().change_membership(change.clone(), retain),
            )
            .await;
            return match done {
                Ok(Ok(_)) => Ok(()),
                Err(_) => Err(ReplicaError::Unknown { leader: None }),
                Ok(Err(R::Fatal(f))) => Err(ReplicaError::Raft(f.to_string())),
                Ok(Err(R::APIError(W::ForwardToLeader(f)))) => Err(ReplicaError::NotLeader {
                    leader: f.leader_id,
                }),
                Ok(Err(R::APIError(W::ChangeMembershipError(C::InProgress(_)))))
                    if tokio::time::Instant::now() + IN_PROGRESS_POLL < deadline =>
                {
                    tokio::time::sleep(IN_PROGRESS_POLL).await;
                    continue;
                }
                Ok(Err(R::APIError(W::ChangeMembershipError(e)))) => Err(refused(e.to_string())),
                Ok(Err(R::APIError(_))) => Err(ReplicaError::Unknown { leader: None }),
            };
        }
    }

    /// Adds node `id`, reached at `member`, as a learner; answers once the
    /// membership that holds it is committed (it then takes the log from
    /// the leader; [`Members::promote`] makes it a voter once it has
    /// caught up). Adding a learner already there with the same addresses
    /// changes nothing; an id at or below the highest that was ever a
    /// member is refused (ids only grow: a removed node comes back under a
    /// new one) unless [`Members::rejoining`] lets it.
    pub async fn add_learner(&self, id: NodeId, member: Member) -> Result<(), ReplicaError> {
        let view = self.leader_view()?;
        if id == 0 {
            return Err(refused("node ids start at 1".to_owned()));
        }
        if let Some(known) = view.nodes.get(&id) {
            if *known == member && !view.voters.contains(&id) {
                return Ok(());
            }
            let what = if view.voters.contains(&id) {
                "a voter"
            } else {
                "a learner"
            };
            return Err(refused(format!(
                "node {id} is already {what} (peer {}, client {}): remove it first",
                known.addr, known.client
            )));
        }
        // A removed node's id is never taken again: a node that comes back
        // (wiped, or not) joins under a new one. Raft's safety rests on a
        // member's vote and log, which a wiped node lost.
        let highest = self
            .state()
            .highest_id()
            .map_err(|e| ReplicaError::Raft(e.to_string()))?
            .max(view.nodes.keys().copied().max().unwrap_or(0));
        if id <= highest && !self.kept.contains(&id) {
            return Err(refused(format!(
                "node {id}: ids only grow — every id up to {highest} is or was a member; a node that was removed comes back under a new id above {highest}"
            )));
        }
        if let Some((other, _)) = view
            .nodes
            .iter()
            .find(|(_, n)| n.addr == member.addr || n.client == member.client)
        {
            return Err(refused(format!(
                "node {other} already has peer address {} or client address {}",
                member.addr, member.client
            )));
        }
        self.change(
            ChangeMembers::AddNodes(BTreeMap::from([(id, member)])),
            true,
        )
        .await
    }

    /// Makes learner `id` a voter, once it is at most [`PROMOTE_LAG_MAX`]
    /// entries behind the leader. Promoting a voter changes nothing.
    pub async fn promote(&self, id: NodeId) -> Result<(), ReplicaError> {
        let view = self.leader_view()?;
        if view.voters.contains(&id) {
            return Ok(());
        }
        let behind = lag(&view, id)?;
        if behind > PROMOTE_LAG_MAX {
            let how = if behind == u64::MAX {
                "it has not answered the leader yet (is it running, with join = true?)".to_owned()
            } else {
                format!("it is {behind} entries behind the leader (at most {PROMOTE_LAG_MAX})")
            };
            return Err(refused(format!(
                "node {id} has not caught up: {how}; wait and promote it again (fila cluster status shows its lag)"
            )));
        }
        self.change(ChangeMembers::AddVoterIds(BTreeSet::from([id])), true)
            .await
    }

    /// On the leader: the group's voters and its learners.
    pub fn roles(&self) -> Result<(BTreeSet<NodeId>, BTreeSet<NodeId>), ReplicaError> {
        let view = self.leader_view()?;
        let learners = view
            .nodes
            .keys()
            .filter(|id| !view.voters.contains(id))
            .copied()
            .collect();
        Ok((view.voters, learners))
    }

    /// Makes voter `id` a learner: it keeps taking the log and no longer
    /// votes. A learner or a node not in the group changes nothing; the
    /// last voter cannot be.
    pub async fn demote(&self, id: NodeId) -> Result<(), ReplicaError> {
        let view = self.leader_view()?;
        if !view.voters.contains(&id) {
            return Ok(());
        }
        if view.voters.len() == 1 {
            return Err(refused(format!("node {id} is the only voter")));
        }
        self.change(ChangeMembers::RemoveVoters(BTreeSet::from([id])), true)
            .await
    }

    /// Takes node `id` out of the group, voter or learner. The last voter
    /// cannot be removed. A node not in the group changes nothing.
    pub async fn remove(&self, id: NodeId) -> Result<(), ReplicaError> {
        let view = self.leader_view()?;
        if !view.nodes.contains_key(&id) {
            return Ok(());
        }
        if view.voters.contains(&id) {
            if view.voters.len() == 1 {
                return Err(refused(format!(
                    "node {id} is the only voter: add and promote another first"
                )));
            }
            self.change(ChangeMembers::RemoveVoters(BTreeSet::from([id])), false)
                .await
        } else {
            self.change(ChangeMembers::RemoveNodes(BTreeSet::from([id])), false)
                .await
        }
    }

    /// Hands the leadership to voter `to`, or to the voter whose log is
    /// furthest along; answers the new leader once it has taken over
    /// (within [`TRANSFER_TIMEOUT`]).
    pub async fn transfer_leader(&self, to: Option<NodeId>) -> Result<NodeId, ReplicaError> {
        let view = self.leader_view()?;
        let me = self.id();
        let to = match to {
            Some(to) if to == me => return Ok(me),
            Some(to) if !view.voters.contains(&to) => {
                return Err(refused(format!("node {to} is not a voter")))
            }
            Some(to) => to,
            None => view
                .voters
                .iter()
                .filter(|v| **v != me)
                .max_by_key(|v| view.matched.get(v).copied())
                .copied()
                .ok_or_else(|| refused("there is no other voter to lead".to_owned()))?,
        };
        self.raft()
            .trigger()
            .transfer_leader(to)
            .await
            .map_err(|e| ReplicaError::Raft(e.to_string()))?;
        let moved = self
            .raft()
            .wait(Some(TRANSFER_TIMEOUT))
            .metrics(
                |m| m.current_leader.is_some_and(|l| l != me),
                "the leadership moves",
            )
            .await;
        match moved {
            Ok(m) => Ok(m.current_leader.unwrap_or(to)),
            Err(_) => Err(refused(format!(
                "node {to} did not take the leadership within {} s (is it running and caught up?)",
                TRANSFER_TIMEOUT.as_secs()
            ))),
        }
    }
}

/// What one step of moving a group's replicas did
/// ([`Members::move_step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoveStep {
    /// The node was added as a learner.
    Added(NodeId),
    /// The learner is still catching up: nothing done.
    CatchingUp(NodeId),
    /// The learner was made a voter.
    Promoted(NodeId),
    /// The member was taken out.
    Removed(NodeId),
    /// This leader is not wanted: it handed the leadership to this voter,
    /// which goes on.
    HandedOver(NodeId),
    /// The group's last membership change is not committed yet: nothing
    /// done (the next step starts from what commits).
    Settling,
    /// The group's members are the ones wanted, every one a voter.
    Done,
}

impl<S: Storage + 'static> Members<'_, S> {
    /// One step of moving the group's replicas to `want` (the nodes that
    /// should hold it, as the cluster's map says; `members` their
    /// addresses), on the leader: a node missing is added as a learner;
    /// a wanted learner is promoted once caught up; only then is a member
    /// not wanted removed — the leader itself last, after it hands the
    /// leadership over. So the group never has fewer voters than it had
    /// or is to have, and a replica moves learner → voter → the old one
    /// removed. Called again until it answers [`MoveStep::Done`].
    pub async fn move_step(
        &self,
        want: &BTreeSet<NodeId>,
        members: &BTreeMap<NodeId, Member>,
    ) -> Result<MoveStep, ReplicaError> {
        if want.is_empty() {
            return Err(refused("a group needs at least one replica".to_owned()));
        }
        let view = self.leader_view()?;
        if !view.settled {
            return Ok(MoveStep::Settling);
        }
        if let Some(&id) = want.iter().find(|id| !view.nodes.contains_key(id)) {
            let member = members
                .get(&id)
                .cloned()
                .ok_or_else(|| refused(format!("node {id}: its addresses are not known")))?;
            self.add_learner(id, member).await?;
            return Ok(MoveStep::Added(id));
        }
        if let Some(&id) = want.iter().find(|id| !view.voters.contains(id)) {
            if lag(&view, id)? > PROMOTE_LAG_MAX {
                return Ok(MoveStep::CatchingUp(id));
            }
            self.promote(id).await?;
            return Ok(MoveStep::Promoted(id));
        }
        let me = self.id();
        if let Some(&id) = view
            .nodes
            .keys()
            .find(|&&id| !want.contains(&id) && id != me)
        {
            self.remove(id).await?;
            return Ok(MoveStep::Removed(id));
        }
        if !want.contains(&me) {
            // Every other member is wanted now: the voter furthest along
            // takes over and removes this one.
            return Ok(MoveStep::HandedOver(self.transfer_leader(None).await?));
        }
        Ok(MoveStep::Done)
    }
}

impl<S: Storage + 'static> Replica<S> {
    /// This replica's member of its group.
    pub fn members(&self) -> Members<'_, S> {
        Members::new(self.raft(), self.state(), self.id())
    }

    /// See [`Members::add_learner`].
    pub async fn add_learner(&self, id: NodeId, member: Member) -> Result<(), ReplicaError> {
        self.members().add_learner(id, member).await
    }

    /// See [`Members::promote`].
    pub async fn promote(&self, id: NodeId) -> Result<(), ReplicaError> {
        self.members().promote(id).await
    }

    /// See [`Members::remove`].
    pub async fn remove(&self, id: NodeId) -> Result<(), ReplicaError> {
        self.members().remove(id).await
    }

    /// See [`Members::transfer_leader`].
    pub async fn transfer_leader(&self, to: Option<NodeId>) -> Result<NodeId, ReplicaError> {
        self.members().transfer_leader(to).await
    }

    /// See [`Members::move_step`].
    pub async fn move_step(
        &self,
        want: &BTreeSet<NodeId>,
        members: &BTreeMap<NodeId, Member>,
    ) -> Result<MoveStep, ReplicaError> {
        self.members().move_step(want, members).await
    }
}

fn lag(view: &View, id: NodeId) -> Result<u64, ReplicaError> {
    if !view.nodes.contains_key(&id) {
        return Err(refused(format!("node {id} is not a member: add it first")));
    }
    if view.voters.contains(&id) {
        return Err(refused(format!("node {id} is a voter, not a learner")));
    }
    // A learner that has not answered the leader yet is not caught up,
    // however short the log.
    Ok(match view.matched.get(&id).copied() {
        Some(matched) => view.last_log_index.saturating_sub(matched),
        None => u64::MAX,
    })
}
