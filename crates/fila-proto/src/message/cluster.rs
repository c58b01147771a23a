//! What a cluster node says of its cluster (the cluster status answer)
//! and the changes of its members a request asks for (docs/cluster.md).

/// A cluster node's view of its cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterStatus {
    /// The node answering.
    pub node_id: u64,
    /// The leader it knows of.
    pub leader: Option<u64>,
    /// Its Raft term.
    pub term: u64,
    /// The index of the last entry in its log.
    pub last_log_index: Option<u64>,
    /// The index of the last entry committed.
    pub committed_index: Option<u64>,
    /// The index of the last entry its state machine applied.
    pub applied_index: Option<u64>,
    /// The members (voters and learners) of the metadata group: the
    /// cluster's nodes.
    pub members: Vec<ClusterMemberStatus>,
    /// Each partition as this node sees it.
    pub partitions: Vec<PartitionStatus>,
}

/// A partition's group as a cluster node sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionStatus {
    /// Its number.
    pub partition: u32,
    /// The leader this node knows of.
    pub leader: Option<u64>,
    /// This node's Raft term in it.
    pub term: u64,
    /// The index of the last entry in this node's log of it.
    pub last_log_index: Option<u64>,
    /// The index of the last entry committed.
    pub committed_index: Option<u64>,
    /// The index of the last entry this node applied.
    pub applied_index: Option<u64>,
    /// Its replicas: each a node id, whether it votes, and (on the
    /// leader) the index of the last entry it holds.
    pub replicas: Vec<ReplicaStatus>,
}

/// A replica of a partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicaStatus {
    /// The node holding it.
    pub id: u64,
    /// A voter (else a learner).
    pub voter: bool,
    /// On the leader: the last entry it holds.
    pub matched_index: Option<u64>,
}

/// A member as a cluster node sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterMemberStatus {
    /// Its node id.
    pub id: u64,
    /// Its peer address.
    pub peer: String,
    /// Its client address.
    pub client: String,
    /// A voter (else a learner).
    pub voter: bool,
    /// On the leader: the index of the last entry it holds (its lag is the
    /// leader's last index less this); `None` elsewhere, or not known yet.
    pub matched_index: Option<u64>,
}

/// A change of a cluster's membership or leadership (docs/cluster.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterChange {
    /// Add a node as a learner (it takes the log, it does not vote) and
    /// answer once it has caught up.
    AddLearner {
        /// Its node id.
        id: u64,
        /// Its peer address (`host:port`).
        peer: String,
        /// Its client address (`host:port`).
        client: String,
    },
    /// Make a learner a voter.
    Promote {
        /// Its node id.
        id: u64,
    },
    /// Remove a node, voter or learner.
    Remove {
        /// Its node id.
        id: u64,
    },
    /// Hand the leadership to another voter: `to`, or the one whose log is
    /// furthest along.
    TransferLeader {
        /// The voter to lead (`None`: the leader picks).
        to: Option<u64>,
    },
    /// Move the replica of node `from` to node `to`: `to` added as a
    /// learner (reached at `peer`, its clients at `client`), made a voter
    /// once it has caught up, then `from` removed — the leader handing its
    /// leadership over first when it is `from`. Answered once done; sent
    /// again after a `not_leader` or a time-out it goes on from where it
    /// stands.
    Move {
        /// The node whose replica moves away.
        from: u64,
        /// The node it moves to.
        to: u64,
        /// `to`'s peer address (`host:port`).
        peer: String,
        /// `to`'s client address (`host:port`).
        client: String,
    },
}
