//! What a server needs of a group's Raft node, without naming openraft:
//! its configuration, a plain view of its state (term, log indexes,
//! members, what each holds), and the waits and the bootstrap the server
//! makes. fila-server reaches a group through these and the
//! [`crate::Metadata`] and [`crate::Replica`] methods only.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use fila_wal::Storage;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::Raft;

use crate::{Member, NodeId, StateMachine, TypeConfig};

/// A group's Raft node.
pub type Group<S> = Raft<TypeConfig, StateMachine<S>>;

/// The Raft configuration every group of a node runs with.
pub type RaftConfig = Arc<openraft::Config>;

/// The configuration of a node's groups: a heartbeat every `heartbeat_ms`,
/// an election after `election_ms` (a random time between the two) without
/// one. Snapshots are taken when the state machine says one is due
/// (`StateMachine::snapshot_due`), never by openraft's count of entries.
pub fn raft_config(heartbeat_ms: u64, election_ms: (u64, u64)) -> Result<RaftConfig, String> {
    let config = openraft::Config {
        cluster_name: "fila".into(),
        heartbeat_interval: heartbeat_ms,
        election_timeout_min: election_ms.0,
        election_timeout_max: election_ms.1,
        snapshot_policy: openraft::SnapshotPolicy::Never,
        ..Default::default()
    };
    config.validate().map(Arc::new).map_err(|e| e.to_string())
}

/// A group's state as its node sees it now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupView {
    /// Its term.
    pub term: u64,
    /// The last entry in its log.
    pub last_log_index: Option<u64>,
    /// The last entry committed (as the leader knows it).
    pub committed_index: Option<u64>,
    /// The last entry its state machine applied.
    pub applied_index: Option<u64>,
    /// Its voters.
    pub voters: BTreeSet<NodeId>,
    /// Every member (voters and learners) and its addresses.
    pub members: BTreeMap<NodeId, Member>,
    /// On its leader: the last entry each member is known to hold.
    pub matched: BTreeMap<NodeId, u64>,
}

/// What `raft`'s node reports of its group now.
pub fn view<S: Storage + 'static>(raft: &Group<S>) -> GroupView {
    let m = raft.metrics();
    let m = m.borrow_watched();
    let membership = m.membership_config.membership();
    GroupView {
        term: m.current_term,
        last_log_index: m.last_log_index,
        committed_index: m.cluster_committed.map(|c| c.index),
        applied_index: m.last_applied.map(|a| a.index),
        voters: membership.voter_ids().collect(),
        members: membership.nodes().map(|(id, n)| (*id, n.clone())).collect(),
        matched: m
            .replication
            .as_ref()
            .map(|r| {
                r.iter()
                    .filter_map(|(id, l)| l.as_ref().map(|l| (*id, l.index)))
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// Whether node `id` is a member (voter or learner) of `raft`'s group as
/// its node sees it (no copy of the membership made: asked per request).
pub fn is_member<S: Storage + 'static>(raft: &Group<S>, id: NodeId) -> bool {
    let m = raft.metrics();
    let m = m.borrow_watched();
    m.membership_config.membership().get_node(&id).is_some()
}

/// Waits up to `within` for `raft`'s node to apply entry `index`; answers
/// whether it did.
pub async fn applied_at_least<S: Storage + 'static>(
    raft: &Group<S>,
    index: u64,
    within: Duration,
    what: &str,
) -> bool {
    raft.wait(Some(within))
        .applied_index_at_least(Some(index), what)
        .await
        .is_ok()
}

/// Makes the group of `members` on `raft`'s node when its log is empty and
/// it knows no voter (a group is made once, by one of its members); answers
/// whether it did.
pub async fn initialize_if_empty<S: Storage + 'static>(
    raft: &Group<S>,
    members: BTreeMap<NodeId, Member>,
) -> Result<bool, String> {
    let v = view(raft);
    if v.last_log_index.is_some() || !v.voters.is_empty() {
        return Ok(false);
    }
    raft.initialize(members)
        .await
        .map(|()| true)
        .map_err(|e| e.to_string())
}
