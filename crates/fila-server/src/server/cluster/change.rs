//! A change of the members or the leadership (the `change cluster`
//! request), run on the partition's leader: a learner added, promoted, a
//! member removed, the leadership handed over, a replica moved.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use fila_cluster::membership::MoveStep;
use fila_cluster::{Member, ReplicaError};
use fila_proto::ClusterChange;
use openraft::async_runtime::watch::WatchReceiver;

use super::Node;

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

/// A change of the members or the leadership, on the leader.
pub(super) async fn change_cluster(
    replica: &Node,
    change: ClusterChange,
) -> Result<(), ReplicaError> {
    match change {
        ClusterChange::AddLearner { id, peer, client } => {
            checked_addrs(id, &peer, &client)?;
            let member = Member { addr: peer, client };
            replica.add_learner(id, member).await
        }
        ClusterChange::Promote { id } => replica.promote(id).await,
        ClusterChange::Remove { id } => replica.remove(id).await,
        ClusterChange::TransferLeader { to } => replica.transfer_leader(to).await.map(drop),
        ClusterChange::Move {
            from,
            to,
            peer,
            client,
        } => {
            checked_addrs(to, &peer, &client)?;
            move_replica(replica, from, to, Member { addr: peer, client }).await
        }
    }
}

/// How long a move may take before it is answered (it goes on when sent
/// again).
const MOVE_TIMEOUT: Duration = Duration::from_secs(60);

/// Moves node `from`'s replica to node `to` (reached at `member`): the
/// replica's moves, one step at a time, until its voters are the ones
/// before less `from` and with `to` (see `Replica::move_step`).
async fn move_replica(
    replica: &Node,
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
