//! The simulation's pieces: a disk a crash can be applied to while its
//! stores are gone, and an in-process network whose links can be cut and
//! whose messages are delayed, both driven by the seeded test.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fila_cluster::{Member, NodeId, StateMachine, TypeConfig};
use fila_wal::{SimDisk, Storage};
use openraft::errors::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{OptionalSend, Raft, RaftNetworkV2};

/// A simulated disk shared by the stores of one node's lives: a crash
/// (after the node's Raft stopped) raises its generation, and a handle of
/// an older one refuses everything, so nothing of a dead life writes on.
#[derive(Clone)]
pub struct Disk {
    shared: Arc<Mutex<(SimDisk, u64)>>,
    life: u64,
}

impl Disk {
    pub fn new(seed: u64) -> Disk {
        Disk {
            shared: Arc::new(Mutex::new((SimDisk::new(seed), 0))),
            life: 0,
        }
    }

    /// The machine crashes; answers a handle for the next life.
    pub fn crash(&self) -> Disk {
        let mut s = self.shared.lock().unwrap();
        s.0.crash();
        s.1 += 1;
        Disk {
            shared: self.shared.clone(),
            life: s.1,
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut SimDisk) -> io::Result<R>) -> io::Result<R> {
        let mut s = self.shared.lock().unwrap();
        if s.1 != self.life {
            return Err(io::Error::other("a dead life's handle"));
        }
        f(&mut s.0)
    }
}

impl Storage for Disk {
    fn list(&self) -> io::Result<Vec<String>> {
        self.with(|d| d.list())
    }
    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        self.with(|d| d.read(name))
    }
    fn create(&mut self, name: &str) -> io::Result<()> {
        self.with(|d| d.create(name))
    }
    fn append(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        self.with(|d| d.append(name, data))
    }
    fn write_at(&mut self, name: &str, offset: u64, data: &[u8]) -> io::Result<()> {
        self.with(|d| d.write_at(name, offset, data))
    }
    fn zero_fill(&mut self, name: &str, len: u64) -> io::Result<Option<fila_wal::Zeroing>> {
        self.with(|d| d.zero_fill(name, len))
    }
    fn sync(&mut self, name: &str) -> io::Result<()> {
        self.with(|d| d.sync(name))
    }
    fn sync_dir(&mut self) -> io::Result<()> {
        self.with(|d| d.sync_dir())
    }
    fn truncate(&mut self, name: &str, len: u64) -> io::Result<()> {
        self.with(|d| d.truncate(name, len))
    }
    fn remove(&mut self, name: &str) -> io::Result<()> {
        self.with(|d| d.remove(name))
    }
    fn rename(&mut self, from: &str, to: &str) -> io::Result<()> {
        self.with(|d| d.rename(from, to))
    }
    fn describe(&self, name: &str) -> String {
        format!("sim:{name}")
    }
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.with(|d| d.read_at(name, offset, buf))
    }
    fn file_len(&self, name: &str) -> io::Result<u64> {
        self.with(|d| d.file_len(name))
    }
}

pub type Node = Raft<TypeConfig, StateMachine<Disk>>;

/// xorshift64*: deterministic, seeded.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// The in-process network: the nodes now up, the nodes cut off from
/// everyone, and the delays, drawn from the seed.
pub struct Net {
    /// Each node's Raft nodes, by group.
    nodes: Mutex<HashMap<(NodeId, u64), Node>>,
    cut: Mutex<HashSet<NodeId>>,
    rng: Mutex<Rng>,
    /// Delays up to this many milliseconds.
    pub max_delay_ms: u64,
}

impl Net {
    pub fn new(seed: u64, max_delay_ms: u64) -> Arc<Net> {
        Arc::new(Net {
            nodes: Mutex::new(HashMap::new()),
            cut: Mutex::new(HashSet::new()),
            rng: Mutex::new(Rng(seed | 1)),
            max_delay_ms,
        })
    }

    pub fn up(&self, id: NodeId, node: Node) {
        self.up_in(id, 0, node);
    }

    /// Node `id`'s member of group `group` is up.
    pub fn up_in(&self, id: NodeId, group: u64, node: Node) {
        self.nodes.lock().unwrap().insert((id, group), node);
    }

    /// Node `id` is down: every group's member of it.
    pub fn down(&self, id: NodeId) {
        self.nodes.lock().unwrap().retain(|(n, _), _| *n != id);
    }

    pub fn cut_off(&self, id: NodeId) {
        self.cut.lock().unwrap().insert(id);
    }

    pub fn heal(&self) {
        self.cut.lock().unwrap().clear();
    }

    fn reachable(&self, from: NodeId, to: NodeId, group: u64) -> Option<Node> {
        let cut = self.cut.lock().unwrap();
        if cut.contains(&from) || cut.contains(&to) {
            return None;
        }
        self.nodes.lock().unwrap().get(&(to, group)).cloned()
    }

    fn delay(&self) -> Duration {
        Duration::from_millis(self.rng.lock().unwrap().below(self.max_delay_ms + 1))
    }

    /// A forward's way from `from` to `to`, after a delay: an error when
    /// the link is cut before or after it.
    pub async fn link(&self, from: NodeId, to: NodeId) -> io::Result<()> {
        let open = || {
            let cut = self.cut.lock().unwrap();
            !cut.contains(&from) && !cut.contains(&to)
        };
        let unreachable = || io::Error::other(format!("node {to} unreachable from {from}"));
        if !open() {
            return Err(unreachable());
        }
        tokio::time::sleep(self.delay()).await;
        open().then_some(()).ok_or_else(unreachable)
    }

    /// The target after a delay, if the link is up before and after it.
    async fn deliver(&self, from: NodeId, to: NodeId, group: u64) -> Result<Node, io::Error> {
        let unreachable = || io::Error::other(format!("node {to} unreachable from {from}"));
        self.reachable(from, to, group).ok_or_else(unreachable)?;
        tokio::time::sleep(self.delay()).await;
        self.reachable(from, to, group).ok_or_else(unreachable)
    }
}

pub struct Factory {
    pub from: NodeId,
    pub net: Arc<Net>,
    /// The group its connections are of.
    pub group: u64,
}

pub struct Conn {
    from: NodeId,
    to: NodeId,
    group: u64,
    net: Arc<Net>,
}

impl RaftNetworkFactory<TypeConfig> for Factory {
    type Network = Conn;

    async fn new_client(&mut self, target: NodeId, _node: &Member) -> Conn {
        Conn {
            from: self.from,
            to: target,
            group: self.group,
            net: self.net.clone(),
        }
    }
}

fn rpc_err(e: impl std::error::Error + 'static) -> RPCError<TypeConfig> {
    RPCError::Unreachable(Unreachable::new(&e))
}

impl RaftNetworkV2<TypeConfig> for Conn {
    type SnapshotData = std::io::Cursor<Vec<u8>>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let node = self
            .net
            .deliver(self.from, self.to, self.group)
            .await
            .map_err(rpc_err)?;
        let answer = node.append_entries(rpc).await.map_err(rpc_err)?;
        // The answer comes back over the same link.
        self.net
            .deliver(self.to, self.from, self.group)
            .await
            .map_err(rpc_err)?;
        Ok(answer)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let node = self
            .net
            .deliver(self.from, self.to, self.group)
            .await
            .map_err(rpc_err)?;
        let answer = node.vote(rpc).await.map_err(rpc_err)?;
        self.net
            .deliver(self.to, self.from, self.group)
            .await
            .map_err(rpc_err)?;
        Ok(answer)
    }

    async fn full_snapshot(
        &mut self,
        vote: fila_cluster::Vote,
        snapshot: openraft::alias::SnapshotOf<TypeConfig, std::io::Cursor<Vec<u8>>>,
        _cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let unreachable = |e: io::Error| StreamingError::Unreachable(Unreachable::new(&e));
        let node = self
            .net
            .deliver(self.from, self.to, self.group)
            .await
            .map_err(unreachable)?;
        let answer = node
            .install_full_snapshot(vote, snapshot)
            .await
            .map_err(|e| unreachable(io::Error::other(e.to_string())))?;
        self.net
            .deliver(self.to, self.from, self.group)
            .await
            .map_err(unreachable)?;
        Ok(answer)
    }
}
