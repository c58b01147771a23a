//! # fila-cluster: partitions replicated with openraft
//!
//! fila-cluster owns what makes a fila partition a Raft group: the type
//! configuration openraft runs with ([`TypeConfig`]), the Raft log: one
//! [`fila_wal`] log a node's groups share ([`NodeLog`]; a group's part of
//! it, [`LogStore`], is what openraft is given: an entry is one record
//! naming its group; appends synced by the log's thread, one sync for
//! every append any group made meanwhile; the vote in a file per group
//! replaced whole and synced before it is used; cuts and purges as
//! records, segments reclaimed once no group needs them), and the state machine ([`StateMachine`]) that applies
//! committed entries — batches of fila-store's records, the same records a
//! single node's log holds — through [`fila_store::replay::Replay`], with
//! its snapshot the partition's engine image in fila-store's snapshot
//! format; and a replica ([`Replica`]) whose leader executes each
//! operation on its engine and answers once the records it made are
//! committed (several operations' records gathered into one entry while
//! a few entries wait for their commit), its engine kept by one thread,
//! its [`Home`] (a server's event loop, or a task of its own), which runs
//! every operation on it — no lock — and answers one it ran for a request
//! of its own through a [`Ticket`]; the replica's members change through its leader
//! ([`membership`]). The metadata group ([`meta`]) is a Raft group of the
//! same kind whose state machine holds the cluster's map — partitions,
//! their replicas and receipt keys, and the partition each queue lives
//! in — instead of queues.
//!
//! A node's groups together are a [`node::Node`]: the routing table kept
//! from the node's copy of the map, who leads each group, placements
//! through the metadata leader, asks forwarded to a leader on another
//! node ([`forward`]: their bytes) through a [`node::Transport`] (the peer
//! protocol, [`peer`], on a server; the network in process in the
//! simulation), and a change of the cluster's members made in every
//! group. The server wraps one and answers in the binary protocol's
//! shape; the simulation runs the same code.
//!
//! What an entry, a vote and a snapshot look like on disk is [`codec`].
//! It knows nothing of event loops: how a node's loops reach a group (and
//! keep a partition's engine, [`Home`]) is the server's.
#![forbid(unsafe_code)]

pub mod codec;
mod flusher;
pub mod forward;
pub mod home;
mod log_store;
pub mod membership;
pub mod meta;
pub mod node;
pub mod peer;
mod replica;
mod serving;
mod state;
pub mod view;

pub use fila_core::commits::Ticket;
pub use home::{Home, Job, Slot, TaskHome, Woken};
pub use log_store::{
    move_group_log, vote_file, LogShape, LogStore, NodeLog, PIN_SEGMENTS, READ_BYTES, TAIL_BYTES,
};
pub use meta::{ClusterMap, MapChange, Metadata, Partition};
pub use replica::{Replica, ReplicaError};
pub use serving::OnCommit;
pub use state::{StateMachine, SNAPSHOT_LOG_MIN};
pub use view::{Group, GroupView, RaftConfig};

use std::fmt;

use bytes::Bytes;

/// A node's id in the cluster.
pub type NodeId = u64;

/// What a Raft group knows of a member: where its peers reach it, and
/// where clients do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Member {
    /// Its peer address (`host:port`).
    pub addr: String,
    /// Its client address (`host:port`): where a `not_leader` answer sends
    /// clients.
    pub client: String,
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.addr)
    }
}

/// An entry's data: a batch of fila-store records
/// ([`fila_store::codec::batch_records`]), made by the leader's engine for
/// one operation or a run of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch(pub Bytes);

impl fmt::Display for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "batch of {} bytes", self.0.len())
    }
}

/// What applying an entry answers: how many records it applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Records applied.
    pub records: u32,
}

openraft::declare_raft_types!(
    /// The types a fila Raft group runs with: ids are `u64`, a member is its
    /// address, an entry's data a [`Batch`].
    pub TypeConfig:
        D = Batch,
        R = Applied,
        NodeId = NodeId,
        Node = Member,
);

/// A log id of this configuration.
pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
/// A vote of this configuration.
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
/// An entry of this configuration.
pub type Entry = openraft::alias::EntryOf<TypeConfig>;
/// A membership of this configuration.
pub type Membership = openraft::Membership<NodeId, Member>;
/// A membership and the log id it was recorded at.
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
/// A snapshot's metadata.
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;

/// Log id `index` of term 1, leader 1 (for the crate's unit tests).
#[cfg(test)]
pub(crate) fn test_log_id(index: u64) -> LogId {
    LogId::new(
        openraft::impls::leader_id_adv::LeaderId {
            term: 1,
            node_id: 1,
        },
        index,
    )
}

/// What can go wrong opening a group's storage, in one line each.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The log failed or is corrupt.
    #[error(transparent)]
    Wal(#[from] fila_wal::Error),
    /// A record of the log passed its checksum but does not parse.
    #[error("Raft log record {lsn}: {what}")]
    Record {
        /// Its LSN.
        lsn: u64,
        /// What is wrong.
        what: &'static str,
    },
    /// The vote file does not parse.
    #[error("the Raft vote file: {what}")]
    Vote {
        /// What is wrong.
        what: &'static str,
    },
    /// The state machine's snapshot does not parse.
    #[error("the state machine snapshot: {what}")]
    Snapshot {
        /// What is wrong.
        what: &'static str,
    },
    /// Reading a file failed.
    #[error("{file}: {source}")]
    Io {
        /// The file.
        file: String,
        /// Why.
        source: std::io::Error,
    },
}
