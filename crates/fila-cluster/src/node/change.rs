//! A change of the members or the leadership (the `change cluster`
//! request): a learner added, promoted, a member removed, the leadership
//! handed over, a replica moved — in every group of the cluster (the
//! metadata group and each partition: every member holds a replica of
//! each), each group's part run by its leader, here or forwarded to it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fila_proto::{ClusterChange, ErrorCode, Request, Response};
use fila_wal::Storage;
use tokio::time::Instant;

use super::{Led, Node, Refusal, Transport, LOOK};
use crate::forward::{Ask, Reply, MAP, META};
use crate::membership::{Members, MoveStep};
use crate::{Member, ReplicaError};

/// The longest member address.
const ADDR_MAX: usize = 255;

/// Whether `a` is `host:port`, short enough to keep in the membership.
fn host_port(a: &str) -> bool {
    a.len() <= ADDR_MAX
        && a.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0)
        })
}

/// Refuses addresses of node `id` that are not `host:port`.
fn checked_addrs(id: u64, peer: &str, client: &str) -> Result<(), ReplicaError> {
    for (what, a) in [("peer", peer), ("client", client)] {
        if !host_port(a) {
            return Err(ReplicaError::Refused(format!(
                "node {id}: the {what} address {a:?} is not host:port (at most {ADDR_MAX} bytes)"
            )));
        }
    }
    Ok(())
}

/// The change in every group, each by its leader: a node is added to the
/// metadata group first and, removed, taken out of it last (its
/// addresses are the metadata group's); a removal or a move first places
/// the partitions' replicas anew in the map ([`MAP`]), then each
/// partition's leader moves its replicas there. `TransferLeader` without
/// a node hands over every group this node leads (a node about to be
/// stopped).
pub(super) async fn change_everywhere<S: Storage + 'static, T: Transport>(
    c: &Node<S, T>,
    change: ClusterChange,
) -> Result<(), Refusal> {
    if let Err(error) = checked(&change) {
        return Err(Refusal::Here { group: META, error });
    }
    let parts = 0..c.parts.len() as u32;
    let groups: Vec<u32> = match &change {
        ClusterChange::AddLearner { .. } | ClusterChange::Promote { .. } => {
            std::iter::once(META).chain(parts).collect()
        }
        ClusterChange::TransferLeader { to: None } => {
            for g in parts.chain([META]) {
                if c.leader_of(g) == Some(c.id) {
                    if let Err(error) = change_here(c, g, change.clone(), 0).await {
                        return Err(Refusal::Here { group: g, error });
                    }
                }
            }
            return Ok(());
        }
        ClusterChange::TransferLeader { .. } => parts.chain([META]).collect(),
        ClusterChange::Remove { .. } => std::iter::once(MAP).chain(parts).chain([META]).collect(),
        // The new node joins the metadata group before any partition: a
        // partition's leader reads the map (and the new node may come to
        // lead one while its replicas move).
        ClusterChange::Move { .. } => [MAP, META].into_iter().chain(parts).collect(),
    };
    // The metadata log index of the map's change, which each partition's
    // step waits for (travelling as the ask's room).
    let mut index = 0u64;
    for g in groups {
        let deadline = Instant::now() + MOVE_TIMEOUT;
        loop {
            let ask = Ask::Run {
                group: g,
                room: usize::try_from(index).unwrap_or(usize::MAX),
                req: Box::new(Request::ChangeCluster(change.clone())),
            };
            let here = || change_here(c, g, change.clone(), index);
            let refusal = match c.on_leader(g, &ask, here).await {
                Ok(Led::Here(at)) => {
                    index = index.max(at);
                    break;
                }
                Ok(Led::There { leader, reply }) => match Reply::decode(&reply) {
                    Ok(Reply {
                        response: Response::Ok,
                        wait,
                        ..
                    }) => {
                        index = index.max(wait);
                        break;
                    }
                    Ok(reply) => Refusal::Answered(reply.response),
                    Err(why) => Refusal::Lost {
                        leader,
                        error: std::io::Error::new(std::io::ErrorKind::InvalidData, why),
                    },
                },
                Err(refusal) => refusal,
            };
            // A leader that handed its leadership over (moving away) or
            // lost it: the next one goes on.
            let moved = match &refusal {
                Refusal::Here { error, .. } => matches!(
                    error,
                    ReplicaError::NotLeader { .. } | ReplicaError::Unready(_)
                ),
                Refusal::Answered(Response::Error(e)) => e.code == ErrorCode::NOT_LEADER,
                _ => false,
            };
            if !moved || Instant::now() >= deadline {
                return Err(refusal);
            }
            tokio::time::sleep(LOOK).await;
        }
    }
    Ok(())
}

/// Addresses that are not `host:port` refused before any group changes.
fn checked(change: &ClusterChange) -> Result<(), ReplicaError> {
    match change {
        ClusterChange::Move { from, to, .. } if from == to => Err(ReplicaError::Refused(format!(
            "node {from}: a replica moves to another node"
        ))),
        ClusterChange::AddLearner { id, peer, client }
        | ClusterChange::Move {
            to: id,
            peer,
            client,
            ..
        } => checked_addrs(*id, peer, client),
        _ => Ok(()),
    }
}

/// Group `g`'s part of the change, on its leader (else `NotLeader`): the
/// metadata log index a partition's step waits for (a change of the map
/// made here), else 0. A partition's step first waits until this node's
/// copy of the map holds index `after`.
pub(super) async fn change_here<S: Storage + 'static, T: Transport>(
    c: &Node<S, T>,
    g: u32,
    change: ClusterChange,
    after: u64,
) -> Result<u64, ReplicaError> {
    checked(&change)?;
    match g {
        MAP => place_replicas(c, Some(&change)).await,
        META => {
            let added = matches!(change, ClusterChange::AddLearner { .. });
            change_meta(c, change).await?;
            // A new member may take replicas of partitions short of them.
            if added {
                place_replicas(c, None).await
            } else {
                Ok(0)
            }
        }
        p => change_part(c, p, change, after).await.map(|()| 0),
    }
}

/// The metadata group's part of the change.
async fn change_meta<S: Storage + 'static, T: Transport>(
    c: &Node<S, T>,
    change: ClusterChange,
) -> Result<(), ReplicaError> {
    let members = c.meta.members();
    match change {
        ClusterChange::AddLearner { id, peer, client } => {
            map_made(c).await?;
            let member = Member { addr: peer, client };
            members.add_learner(id, member).await
        }
        ClusterChange::Promote { id } => {
            // The metadata group votes with 3 or 5 of its members: past
            // that a node stays its learner.
            let (voters, learners) = members.roles()?;
            if learners.contains(&id) && voters.len() >= meta_voters(voters.len() + learners.len())
            {
                return Ok(());
            }
            members.promote(id).await
        }
        ClusterChange::TransferLeader { to: Some(to) } => {
            // Only a voter of the metadata group may lead it.
            let (voters, _) = members.roles()?;
            if !voters.contains(&to) {
                return Ok(());
            }
            members.transfer_leader(Some(to)).await.map(drop)
        }
        ClusterChange::Move {
            from,
            to,
            peer,
            client,
        } if members.roles()?.1.contains(&from) => {
            // A learner of the metadata group: the new node takes its
            // place as a learner (the voters keep their number by
            // themselves, `balance_meta`).
            let (voters, learners) = members.roles()?;
            if !voters.contains(&to) && !learners.contains(&to) {
                members
                    .add_learner(to, Member { addr: peer, client })
                    .await?;
            }
            members.remove(from).await
        }
        change => change_members(c, &members, change, None).await,
    }
}

/// Waits (at most [`MAP_WAIT`]) for the map of a new cluster, which this
/// node makes as the metadata group's leader (`status::make_map`): the
/// map places the partitions' first replicas on the metadata group's
/// members, as the groups were first made, and a node added before it
/// was made would be placed in a partition whose group it is no member
/// of (and then moved there).
async fn map_made<S: Storage + 'static, T: Transport>(c: &Node<S, T>) -> Result<(), ReplicaError> {
    let deadline = Instant::now() + MAP_WAIT;
    while c.meta.confirmed_map().await?.partitions.is_empty() {
        if Instant::now() >= deadline {
            return Err(ReplicaError::Refused(format!(
                "the cluster's map was not made within {} s (its metadata leader makes it): add the node again",
                MAP_WAIT.as_secs()
            )));
        }
        tokio::time::sleep(LOOK).await;
    }
    Ok(())
}

/// A change any group makes the same way: a voter promoted, a member
/// removed (the leader itself after handing its leadership over), the
/// leadership handed over, a replica moved (towards `want` when given,
/// else node `from`'s replaced by node `to`).
async fn change_members<S: Storage + 'static, T: Transport>(
    c: &Node<S, T>,
    members: &Members<'_, S>,
    change: ClusterChange,
    want: Option<BTreeSet<u64>>,
) -> Result<(), ReplicaError> {
    match change {
        ClusterChange::AddLearner { id, peer, client } => {
            members.add_learner(id, Member { addr: peer, client }).await
        }
        ClusterChange::Promote { id } => members.promote(id).await,
        ClusterChange::Remove { id } if id == c.id => {
            // The leader removing itself hands its leadership over first;
            // the next leader removes it (answered `not_leader` naming
            // it: the change goes on there).
            let to = members.transfer_leader(None).await?;
            Err(ReplicaError::NotLeader { leader: Some(to) })
        }
        ClusterChange::Remove { id } => members.remove(id).await,
        ClusterChange::TransferLeader { to } => members.transfer_leader(to).await.map(drop),
        ClusterChange::Move {
            from,
            to,
            peer,
            client,
        } => {
            let toward = match want {
                Some(want) => Toward::Map(want),
                None => Toward::Swap { from, to },
            };
            let mut addresses = c.addresses();
            addresses.insert(to, Member { addr: peer, client });
            move_replica(members, &toward, &addresses).await
        }
    }
}

/// On the metadata leader: the partitions' replicas placed anew for the
/// change (a removed node's, a moved node's), and for a partition short
/// of them, `cluster.replicas` of each; answers the metadata log index
/// that holds the map changed (the index applied here once it is).
async fn place_replicas<S: Storage + 'static, T: Transport>(
    c: &Node<S, T>,
    change: Option<&ClusterChange>,
) -> Result<u64, ReplicaError> {
    let map = c.meta.confirmed_map().await?;
    let mut members: BTreeSet<u64> = c.addresses().into_keys().collect();
    let moving = match change {
        Some(ClusterChange::Remove { id }) => {
            members.remove(id);
            None
        }
        Some(ClusterChange::Move { from, to, .. }) => {
            if !members.contains(from) {
                return Err(ReplicaError::Refused(format!(
                    "node {from} holds no replica (a voter) to move: it is no member of the cluster"
                )));
            }
            members.remove(from);
            members.insert(*to);
            Some((*from, *to))
        }
        _ => None,
    };
    for placed in map.rebalanced(&members, c.factor, moving) {
        tracing::info!(?placed, "a partition's replicas placed anew");
        c.meta.propose(&placed).await?;
    }
    Ok(crate::view::view(c.meta.raft()).applied_index.unwrap_or(0))
}

/// How long a partition's step waits for this node's copy of the map.
const MAP_WAIT: Duration = Duration::from_secs(5);

/// Partition `p`'s part of the change, on its leader, once this node's
/// copy of the map holds index `after`: only the map's replicas of the
/// partition are added or promoted there, a removal or a move moves its
/// replicas to the map's, and the leadership goes only to a replica.
async fn change_part<S: Storage + 'static, T: Transport>(
    c: &Node<S, T>,
    p: u32,
    change: ClusterChange,
    after: u64,
) -> Result<(), ReplicaError> {
    let part = c
        .parts
        .get(p as usize)
        .ok_or_else(|| ReplicaError::Refused(format!("no partition {p}")))?;
    if let ClusterChange::Move { from, .. } = &change {
        // The node moving away left the metadata group in the move's step
        // there, and may never hear of the map's change (an entry whose
        // commit it had not heard of when it was taken out): while
        // another voter can lead, it hands its leadership over, and that
        // leader, which holds the map, moves the replicas.
        let members = part.members();
        if *from == c.id && members.roles()?.0.iter().any(|&v| v != c.id) {
            let to = members.transfer_leader(None).await?;
            return Err(ReplicaError::NotLeader { leader: Some(to) });
        }
    }
    if after > 0
        && !crate::view::applied_at_least(
            c.meta.raft(),
            after,
            MAP_WAIT,
            "the map's change reaches this node",
        )
        .await
    {
        return Err(ReplicaError::Refused(format!(
            "partition {p}'s leader (node {}) did not hear of the map's change within {} s: send the change again",
            c.id,
            MAP_WAIT.as_secs()
        )));
    }
    let want = c
        .meta
        .map()
        .partitions
        .get(p as usize)
        .map(|p| p.replicas.clone())
        .unwrap_or_default();
    // A node of the cluster that held a replica of the partition before
    // kept its log and vote: it may hold one again.
    let members = part
        .members()
        .rejoining(c.addresses().into_keys().collect());
    match change {
        ClusterChange::AddLearner { id, .. }
        | ClusterChange::Promote { id }
        | ClusterChange::TransferLeader { to: Some(id) }
            if !want.contains(&id) =>
        {
            Ok(())
        }
        ClusterChange::Promote { id } => {
            // A node added before the map placed a replica here is added
            // now.
            let (voters, learners) = members.roles()?;
            if !voters.contains(&id) && !learners.contains(&id) {
                let member = c.addresses().remove(&id).ok_or_else(|| {
                    ReplicaError::Refused(format!("node {id} is not a member: add it first"))
                })?;
                members.add_learner(id, member).await?;
            }
            members.promote(id).await
        }
        ClusterChange::Remove { .. } => {
            move_replica(&members, &Toward::Map(want), &c.addresses()).await
        }
        change @ ClusterChange::Move { .. } => {
            change_members(c, &members, change, Some(want)).await
        }
        change => change_members(c, &members, change, None).await,
    }
}

/// The voters the metadata group keeps among `members` members: all of
/// one or two, 3 of three or four, 5 of five or more; the others are its
/// learners (they hold the map and do not vote).
pub fn meta_voters(members: usize) -> usize {
    match members {
        0..=2 => members,
        3 | 4 => 3,
        _ => 5,
    }
}

/// On the metadata leader: one step towards [`meta_voters`] voters — a
/// voter demoted (the highest id but this node's) when there are more, a
/// learner promoted (once caught up) when there are fewer.
pub(super) async fn balance_meta<S: Storage + 'static, T: Transport>(
    c: &Node<S, T>,
) -> Result<(), ReplicaError> {
    let members = c.meta.members();
    let (voters, learners) = members.roles()?;
    let want = meta_voters(voters.len() + learners.len());
    if voters.len() > want {
        if let Some(&id) = voters.iter().rev().find(|&&id| id != c.id) {
            return members.demote(id).await;
        }
    } else if voters.len() < want {
        if let Some(&id) = learners.iter().next() {
            return members.promote(id).await;
        }
    }
    Ok(())
}

/// How long a move may take before it is answered (it goes on when sent
/// again).
const MOVE_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a group's replicas move.
enum Toward {
    /// Node `from`'s replica to node `to`: the voters before, less `from`
    /// and with `to`.
    Swap { from: u64, to: u64 },
    /// The replicas the map places.
    Map(BTreeSet<u64>),
}

/// Moves the group's replicas `toward` the ones wanted, one step at a
/// time (see `Replica::move_step`) until its voters are those; a node new
/// to the group is reached at its address in `addresses`.
async fn move_replica<S: Storage + 'static>(
    replica: &Members<'_, S>,
    toward: &Toward,
    addresses: &BTreeMap<u64, Member>,
) -> Result<(), ReplicaError> {
    let deadline = Instant::now() + MOVE_TIMEOUT;
    let mut catching_up = None;
    loop {
        if Instant::now() >= deadline {
            let why = match catching_up {
                Some(id) => format!("node {id} is still catching up"),
                None => "the move is not done".to_owned(),
            };
            return Err(ReplicaError::Refused(format!(
                "{why} after {} s: send the move again to go on",
                MOVE_TIMEOUT.as_secs()
            )));
        }
        let crate::GroupView {
            voters,
            mut members,
            ..
        } = crate::view::view(replica.raft());
        let want = match toward {
            Toward::Swap { from, to } => {
                if !voters.contains(from) && !voters.contains(to) {
                    return Err(ReplicaError::Refused(format!(
                        "node {from} holds no replica (a voter) to move"
                    )));
                }
                let mut want = voters;
                want.remove(from);
                want.insert(*to);
                want
            }
            Toward::Map(want) => want.clone(),
        };
        for (id, member) in addresses {
            members.entry(*id).or_insert_with(|| member.clone());
        }
        match replica.move_step(&want, &members).await? {
            MoveStep::Done => return Ok(()),
            MoveStep::HandedOver(leader) => {
                // The next leader goes on when the move is sent again.
                return Err(ReplicaError::NotLeader {
                    leader: Some(leader),
                });
            }
            MoveStep::Settling => tokio::time::sleep(Duration::from_millis(50)).await,
            MoveStep::CatchingUp(id) => {
                catching_up = Some(id);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            MoveStep::Added(_) | MoveStep::Promoted(_) | MoveStep::Removed(_) => {
                catching_up = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_group_votes_with_one_three_or_five() {
        let got: Vec<usize> = (0..=8).map(meta_voters).collect();
        assert_eq!(got, [0, 1, 2, 3, 3, 5, 5, 5, 5]);
        // Never more voters than members, and an odd number from three on.
        for n in 3..=8 {
            assert!(meta_voters(n) <= n && meta_voters(n) % 2 == 1);
        }
    }
}
