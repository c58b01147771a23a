//! A node's place in a cluster (docs/cluster.md): the `[cluster]` table of
//! the configuration file and what it must satisfy.

use std::net::SocketAddr;

use serde::Deserialize;

use super::{addr, Config, ConfigError, Sync};

/// This node's place in a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    /// This node's id (one of `members`).
    pub node_id: u64,
    /// Where this node's peers reach it (the peer protocol).
    pub listen: SocketAddr,
    /// The secret every node of the cluster holds: a peer proves it before
    /// anything else (at least 16 bytes).
    pub secret: String,
    /// The voters the cluster starts with, this node among them.
    pub members: Vec<ClusterMember>,
    /// This node joins a running cluster (a new node, or one brought back
    /// with an empty data directory): it never makes the first membership
    /// and waits for the leader to add it (`fila cluster add`).
    pub join: bool,
    /// With TLS on (`tls_cert`, `tls_key`): the CA every node's
    /// certificate chains to; the nodes then speak TLS to each other.
    pub tls_ca: Option<std::path::PathBuf>,
    /// The cluster's partitions (fixed when the cluster is made; every
    /// node is given the same number).
    pub partitions: usize,
    /// The replicas each partition keeps (1, 3 or 5; fewer while the
    /// cluster has fewer members). Read by the metadata leader when it
    /// places them: every node is given the same.
    pub replicas: usize,
}

/// A voter the cluster starts with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterMember {
    /// Its node id.
    pub id: u64,
    /// Its peer address (`host:port`).
    pub peer: String,
    /// Its client address (`host:port`): where `not_leader` sends clients.
    pub client: String,
}

/// The most voters a cluster starts with.
pub const MEMBERS_MAX: usize = 7;
/// The shortest cluster secret.
pub const SECRET_MIN: usize = 16;
/// The most partitions a cluster may have.
pub const PARTITIONS_MAX: usize = 64;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileCluster {
    node_id: u64,
    listen: String,
    secret: String,
    members: Vec<FileMember>,
    #[serde(default)]
    join: bool,
    tls_ca: Option<std::path::PathBuf>,
    #[serde(default = "one")]
    partitions: usize,
    #[serde(default = "three")]
    replicas: usize,
}

fn one() -> usize {
    1
}

fn three() -> usize {
    3
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMember {
    id: u64,
    peer: String,
    client: String,
}

impl FileCluster {
    pub(super) fn into_config(self) -> Result<ClusterConfig, ConfigError> {
        let listen = addr("cluster.listen", &self.listen)?.ok_or_else(|| {
            ConfigError::Invalid("cluster.listen: a cluster node needs an address".into())
        })?;
        Ok(ClusterConfig {
            node_id: self.node_id,
            listen,
            secret: self.secret,
            members: self
                .members
                .into_iter()
                .map(|m| ClusterMember {
                    id: m.id,
                    peer: m.peer,
                    client: m.client,
                })
                .collect(),
            join: self.join,
            tls_ca: self.tls_ca,
            partitions: self.partitions,
            replicas: self.replicas,
        })
    }
}

impl Config {
    /// The cluster's rules: a node among its members, distinct ids, a long
    /// enough secret, durable (`sync = "always"`, a data directory), a CA
    /// for the peers exactly when TLS is on (the SQS API and the console
    /// serve a cluster: a follower forwards their calls to the leader).
    pub(super) fn validate_cluster(&self) -> Result<(), ConfigError> {
        let Some(c) = &self.cluster else {
            return Ok(());
        };
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if c.members.is_empty() || c.members.len() > MEMBERS_MAX {
            return bad(format!(
                "cluster.members: 1..={MEMBERS_MAX} members (got {})",
                c.members.len()
            ));
        }
        let mut ids: Vec<u64> = c.members.iter().map(|m| m.id).collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() != c.members.len() || ids.contains(&0) {
            return bad("cluster.members: every id at least 1, and each once".into());
        }
        if !ids.contains(&c.node_id) {
            return bad(format!(
                "cluster.node_id {} is not one of cluster.members",
                c.node_id
            ));
        }
        for m in &c.members {
            if m.peer.is_empty() || m.client.is_empty() {
                return bad(format!(
                    "cluster.members: node {} needs a peer and a client address",
                    m.id
                ));
            }
        }
        if c.partitions == 0 || c.partitions > PARTITIONS_MAX {
            return bad(format!(
                "cluster.partitions: 1..={PARTITIONS_MAX} (got {})",
                c.partitions
            ));
        }
        if ![1, 3, 5].contains(&c.replicas) {
            return bad(format!(
                "cluster.replicas: 1, 3 or 5 replicas of each partition (got {})",
                c.replicas
            ));
        }
        if c.secret.len() < SECRET_MIN {
            return bad(format!(
                "cluster.secret: at least {SECRET_MIN} bytes (every node holds the same)"
            ));
        }
        if self.sync != Sync::Always || self.data_dir.as_os_str().is_empty() {
            return bad(
                "cluster: a cluster node is durable (sync = \"always\" and a data_dir)".into(),
            );
        }
        match (&self.tls_cert, &c.tls_ca) {
            (Some(_), None) => {
                return bad(
                    "cluster.tls_ca: with TLS on, the nodes speak TLS to each other: name the CA their certificates chain to".into(),
                )
            }
            (None, Some(_)) => {
                return bad("cluster.tls_ca needs TLS: set tls_cert and tls_key too".into())
            }
            _ => {}
        }
        if c.tls_ca.is_none() && !c.listen.ip().is_loopback() && !self.allow_plaintext {
            return bad(format!(
                "cluster.listen {}: peers off loopback need TLS (tls_cert, tls_key, cluster.tls_ca) or allow_plaintext (the peer protocol is authenticated, not encrypted)",
                c.listen
            ));
        }
        Ok(())
    }
}
