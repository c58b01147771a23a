//! A change of the members or the leadership (the `change cluster`
//! request): a learner added, promoted, a member removed, the leadership
//! handed over, a replica moved — in every group of the cluster (the
//! metadata group and each partition: every member holds a replica of
//! each), each group's part run by its leader, here or forwarded to it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use fila_cluster::membership::{Members, MoveStep};
use fila_cluster::{Member, ReplicaError};
use fila_proto::{ClusterChange, ErrorCode, Request, Response};
use fila_wal::FsStorage;
use openraft::async_runtime::watch::WatchReceiver;

use super::forward::Ask;
use super::groups::{Cluster, META};
use crate::dispatch::Answer;

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
/// metadata group first and taken out of it last (its addresses are the
/// metadata group's). `TransferLeader` without a node hands over every
/// group this node leads (a node about to be stopped).
pub(super) async fn change_everywhere(c: &Cluster, change: ClusterChange) -> Answer {
    if let Err(e) = checked(&change) {
        return c.refusal(META, &e);
    }
    let parts = 0..c.parts.len() as u32;
    let groups: Vec<u32> = match &change {
        ClusterChange::AddLearner { .. } | ClusterChange::Promote { .. } => {
            std::iter::once(META).chain(parts).collect()
        }
        ClusterChange::TransferLeader { to: None } => {
            for g in parts.chain([META]) {
                if c.leader_of(g) == Some(c.id) {
                    if let Err(e) = change_here(c, g, change.clone()).await {
                        return c.refusal(g, &e);
                    }
                }
            }
            return Response::Ok.into();
        }
        _ => parts.chain([META]).collect(),
    };
    for g in groups {
        let deadline = Instant::now() + MOVE_TIMEOUT;
        loop {
            let ask = Ask::Run {
                group: g,
                room: 0,
                req: Box::new(Request::ChangeCluster(change.clone())),
            };
            let here = || async {
                change_here(c, g, change.clone())
                    .await
                    .map(|()| (Response::Ok.into(), 0))
            };
            let answer = match c.on_leader(g, ask, here).await {
                Ok((answer, _)) | Err(answer) => answer,
            };
            match answer {
                Answer::Wire(Response::Ok) => break,
                // A leader that handed its leadership over (moving away)
                // or lost it: the next one goes on.
                Answer::Wire(Response::Error(e))
                    if e.code == ErrorCode::NOT_LEADER && Instant::now() < deadline =>
                {
                    tokio::time::sleep(super::POLL).await;
                }
                answer => return answer,
            }
        }
    }
    Response::Ok.into()
}

/// Addresses that are not `host:port` refused before any group changes.
fn checked(change: &ClusterChange) -> Result<(), ReplicaError> {
    match change {
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

/// Group `g`'s part of the change, on its leader (else `NotLeader`).
pub(super) async fn change_here(
    c: &Cluster,
    g: u32,
    change: ClusterChange,
) -> Result<(), ReplicaError> {
    checked(&change)?;
    let members = match g {
        META => c.meta.members(),
        p => c
            .parts
            .get(p as usize)
            .ok_or_else(|| ReplicaError::Refused(format!("no partition {p}")))?
            .members(),
    };
    match change {
        ClusterChange::AddLearner { id, peer, client } => {
            let member = Member { addr: peer, client };
            members.add_learner(id, member).await
        }
        ClusterChange::Promote { id } if g == META => {
            // The metadata group votes with 3 or 5 of its members: past
            // that a node stays its learner.
            let (voters, learners) = members.roles()?;
            if learners.contains(&id) && voters.len() >= meta_voters(voters.len() + learners.len())
            {
                return Ok(());
            }
            members.promote(id).await
        }
        ClusterChange::TransferLeader { to: Some(to) } if g == META => {
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
        } if g == META && members.roles()?.1.contains(&from) => {
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
        } => move_replica(&members, from, to, Member { addr: peer, client }).await,
    }
}

/// The voters the metadata group keeps among `members` members: all of
/// one or two, 3 of three or four, 5 of five or more; the others are its
/// learners (they hold the map and do not vote).
pub(super) fn meta_voters(members: usize) -> usize {
    match members {
        0..=2 => members,
        3 | 4 => 3,
        _ => 5,
    }
}

/// On the metadata leader: one step towards [`meta_voters`] voters — a
/// voter demoted (the highest id but this node's) when there are more, a
/// learner promoted (once caught up) when there are fewer.
pub(super) async fn balance_meta(c: &Cluster) -> Result<(), ReplicaError> {
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

/// Moves node `from`'s replica to node `to` (reached at `member`): the
/// replica's moves, one step at a time, until its voters are the ones
/// before less `from` and with `to` (see `Replica::move_step`).
async fn move_replica(
    replica: &Members<'_, FsStorage>,
    from: u64,
    to: u64,
    member: Member,
) -> Result<(), ReplicaError> {
    if from == to {
        return Err(ReplicaError::Refused(format!(
            "node {from}: a replica moves to another node"
        )));
    }
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
        let (mut want, mut members) = {
            let m = replica.raft().metrics();
            let m = m.borrow_watched();
            let membership = m.membership_config.membership();
            let want: BTreeSet<u64> = membership.voter_ids().collect();
            let members: BTreeMap<u64, Member> =
                membership.nodes().map(|(id, n)| (*id, n.clone())).collect();
            (want, members)
        };
        if !want.contains(&from) && !want.contains(&to) {
            return Err(ReplicaError::Refused(format!(
                "node {from} holds no replica (a voter) to move"
            )));
        }
        want.remove(&from);
        want.insert(to);
        members.entry(to).or_insert_with(|| member.clone());
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
