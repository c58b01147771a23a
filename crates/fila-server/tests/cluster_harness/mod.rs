//! Shared by the tests that run a cluster of `fila-server` processes.

// Each test file uses its own part of it.
#![allow(dead_code)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fila_client::{Client, ClientOptions, ErrorCode, QueueRef};

use super::common;

pub struct Node {
    pub id: u64,
    pub config: PathBuf,
    pub data: PathBuf,
    pub client: String,
    pub peer: String,
    pub child: Option<std::process::Child>,
}

impl Node {
    pub fn start(&mut self) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fila-server"))
            .arg("--config")
            .arg(&self.config)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("fila-server starts");
        match common::listening(&mut child, 30) {
            Some((_, _, rx)) => {
                // FILA_TEST_LOG=1 shows the nodes' log lines on stderr.
                let (id, show) = (self.id, std::env::var_os("FILA_TEST_LOG").is_some());
                std::thread::spawn(move || {
                    while let Ok(line) = rx.recv() {
                        if show {
                            eprintln!("[node {id}] {line}");
                        }
                    }
                });
            }
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("node {} did not start", self.id);
            }
        }
        self.child = Some(child);
    }

    /// SIGTERM, and waits (at most 30 s, then SIGKILL) for it to end:
    /// answers whether it ended on its own.
    pub fn stop(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return true;
        };
        let pid = c.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
        false
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends a signal to a node's process (`-STOP`, `-CONT`).
pub fn signal(node: &Node, sig: &str) {
    let pid = node.child.as_ref().expect("running").id().to_string();
    let ok = Command::new("kill")
        .args([sig, &pid])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

pub struct Dir(pub PathBuf);

impl Dir {
    /// An empty folder of the system's temporary one, named for `tag` and
    /// this process; removed when dropped.
    pub fn fresh(tag: &str) -> Dir {
        let dir =
            Dir(std::env::temp_dir().join(format!("fila-cluster-{tag}-{}", std::process::id())));
        let _ = std::fs::remove_dir_all(&dir.0);
        std::fs::create_dir_all(&dir.0).unwrap();
        dir
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[path = "../../../../tests/src/ports.rs"]
mod ports;
pub use ports::free_port;

/// Every node's `max_queues`: the partition is held to it.
pub const QUEUES_MAX: u64 = 4;

/// Every node's `max_parked`: waiting receives count against it.
pub const PARKED_MAX: u64 = 2;

/// A `[[cluster.members]]` entry.
fn member(id: u64, client: u16, peer: u16) -> String {
    format!("[[cluster.members]]\nid = {id}\npeer = \"127.0.0.1:{peer}\"\nclient = \"127.0.0.1:{client}\"\n")
}

/// Node `id`'s configuration file (under `dir`), listening on fresh
/// ports; `members` as given, or — a node that joins — itself alone; the
/// cluster's `partitions` and each one's `replicas`.
fn node(
    dir: &Path,
    id: u64,
    ports: (u16, u16),
    members: Option<&str>,
    (partitions, replicas): (usize, usize),
) -> Node {
    let (client, peer) = ports;
    let data = dir.join(format!("node-{id}"));
    let config = dir.join(format!("node-{id}.toml"));
    let (members, join) = match members {
        Some(m) => (m.to_owned(), false),
        None => (member(id, client, peer), true),
    };
    let (tls, peer_tls) = match pki() {
        Some(pki) => (
            format!(
                "tls_cert = \"{0}/server.crt\"\ntls_key = \"{0}/server.key\"\n",
                pki.display()
            ),
            format!("tls_ca = \"{}/ca.crt\"\n", pki.display()),
        ),
        None => (String::new(), String::new()),
    };
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{client}\"\nmetrics_listen = \"off\"\nsqs_listen = \"off\"\nazure_listen = \"off\"\n\
             console_listen = \"off\"\nshards = 3\nevent_loops = 2\nmax_queues = {QUEUES_MAX}\nmax_parked = {PARKED_MAX}\ndata_dir = \"{}\"\n{tls}\
             [cluster]\nnode_id = {id}\nlisten = \"127.0.0.1:{peer}\"\njoin = {join}\npartitions = {partitions}\nreplicas = {replicas}\n{peer_tls}\
             secret = \"a secret the three nodes share\"\n{members}",
            data.display()
        ),
    )
    .unwrap();
    Node {
        id,
        config,
        data,
        client: format!("127.0.0.1:{client}"),
        peer: format!("127.0.0.1:{peer}"),
        child: None,
    }
}

/// The folder of the certificates every node and client of this process
/// uses, once [`with_tls`] made them.
static PKI: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

fn pki() -> Option<PathBuf> {
    PKI.lock().unwrap().clone()
}

/// From now on, in this process, the nodes speak TLS to their clients and
/// to each other: a CA and a certificate for 127.0.0.1 minted with openssl
/// (`scripts/mint-certs.sh`) under `dir/pki`; answers that folder.
pub fn with_tls(dir: &Path) -> PathBuf {
    let pki = dir.join("pki");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/mint-certs.sh");
    let ok = Command::new("bash")
        .arg(script)
        .arg(&pki)
        .status()
        .expect("scripts/mint-certs.sh runs")
        .success();
    assert!(ok, "scripts/mint-certs.sh minted the certificates");
    *PKI.lock().unwrap() = Some(pki.clone());
    pki
}

/// A node's client options: clear text, or TLS trusting the test CA.
pub fn options(addr: &str) -> ClientOptions {
    let o = ClientOptions::new(addr.to_string());
    match pki() {
        Some(pki) => o.tls(fila_client::TlsOptions {
            ca: Some(pki.join("ca.crt")),
            ..Default::default()
        }),
        None => o,
    }
}

/// The configurations of a cluster of `n` voters, ids 1..=n, one
/// partition (not started).
pub fn cluster(dir: &Path, n: u64) -> Vec<Node> {
    partitioned(dir, n, 1)
}

/// The configurations of a cluster of `n` voters, ids 1..=n, with
/// `partitions` partitions of three replicas (not started).
pub fn partitioned(dir: &Path, n: u64, partitions: usize) -> Vec<Node> {
    replicated(dir, n, (partitions, 3))
}

/// The configurations of a cluster of `n` voters, ids 1..=n, with
/// `shape.0` partitions of `shape.1` replicas each (not started).
pub fn replicated(dir: &Path, n: u64, shape: (usize, usize)) -> Vec<Node> {
    let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
    let members: String = ports
        .iter()
        .zip(1..)
        .map(|((client, peer), id)| member(id, *client, *peer))
        .collect();
    ports
        .iter()
        .zip(1..)
        .map(|(p, id)| node(dir, id, *p, Some(&members), shape))
        .collect()
}

/// The configuration of node `id` that joins a running cluster of
/// `shape.0` partitions of `shape.1` replicas (`join = true`; not
/// started).
pub fn joiner(dir: &Path, id: u64, shape: (usize, usize)) -> Node {
    node(dir, id, (free_port(), free_port()), None, shape)
}

/// A client of one node that does not follow `not_leader`.
pub fn client(addr: &str) -> Option<Client> {
    let mut o = options(addr);
    o.request_timeout = Duration::from_secs(10);
    o.follow_leader = false;
    Client::connect(o).ok()
}

/// Runs `op` on whichever live node leads; answers the node's index and
/// the result, within `within`. A `not_leader` answer is followed (its
/// message names the leader's client address).
pub fn on_leader<R>(
    nodes: &[Node],
    within: Duration,
    op: impl FnMut(&mut Client) -> Result<R, fila_client::ClientError>,
) -> (usize, R) {
    on_leader_but(nodes, usize::MAX, within, op)
}

/// [`on_leader`] among the nodes but the one at index `skip` (one paused
/// with SIGSTOP: a request to it would wait for the client's timeout).
pub fn on_leader_but<R>(
    nodes: &[Node],
    skip: usize,
    within: Duration,
    mut op: impl FnMut(&mut Client) -> Result<R, fila_client::ClientError>,
) -> (usize, R) {
    let start = Instant::now();
    while start.elapsed() < within {
        for (i, n) in nodes.iter().enumerate() {
            if n.child.is_none() || i == skip {
                continue;
            }
            let Some(mut c) = client(&n.client) else {
                continue;
            };
            match op(&mut c) {
                Ok(r) => return (i, r),
                Err(e) if e.code() == Some(ErrorCode::NOT_LEADER) => {}
                Err(_) => {}
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no node led within {within:?}");
}

impl Node {
    /// The change that adds this node as a learner.
    pub fn added(&self) -> fila_client::ClusterChange {
        fila_client::ClusterChange::AddLearner {
            id: self.id,
            peer: self.peer.clone(),
            client: self.client.clone(),
        }
    }

    /// The change that moves node `from`'s replicas to this node.
    pub fn moved_from(&self, from: u64) -> fila_client::ClusterChange {
        fila_client::ClusterChange::Move {
            from,
            to: self.id,
            peer: self.peer.clone(),
            client: self.client.clone(),
        }
    }
}

/// Promotes node `id` once it has caught up (a learner that has not
/// answered its leader yet is refused, saying so), within 30 s.
pub fn promote(c: &mut Client, id: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match c.change_cluster(fila_client::ClusterChange::Promote { id }) {
            Ok(()) => return,
            Err(e) if e.to_string().contains("not caught up") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("node {id} was not promoted: {e}"),
        }
    }
}

/// A client of every live node that follows `not_leader`.
pub fn of_all(nodes: &[Node]) -> Client {
    let addrs: Vec<&str> = nodes
        .iter()
        .filter(|n| n.child.is_some())
        .map(|n| n.client.as_str())
        .collect();
    let mut o = options(&addrs.join(","));
    o.request_timeout = Duration::from_secs(10);
    Client::connect(o).unwrap()
}

/// The payloads of the first 100 messages of `queue`.
pub fn payloads(c: &mut Client, queue: &str) -> HashSet<String> {
    c.peek(
        QueueRef {
            name: queue.into(),
            dlq: false,
        },
        0,
        100,
    )
    .unwrap()
    .iter()
    .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
    .collect()
}

pub fn present(c: &mut Client) -> Result<HashSet<String>, fila_client::ClientError> {
    let mut out = HashSet::new();
    let mut from = 0;
    loop {
        let page = c.peek(
            QueueRef {
                name: "jobs".into(),
                dlq: false,
            },
            from,
            100,
        )?;
        let Some(last) = page.last() else {
            return Ok(out);
        };
        from = last.seq + 1;
        out.extend(
            page.iter()
                .map(|m| String::from_utf8_lossy(&m.payload).into_owned()),
        );
    }
}

/// Puts `n` messages to each queue through `c` (a put to a partition
/// without a leader yet is tried again, within 30 s).
pub fn put_all(
    c: &mut Client,
    queues: &[String],
    tag: &str,
    n: usize,
    acked: &mut HashSet<(String, String)>,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for q in queues {
        for i in 0..n {
            let body = format!("{q} {tag} {i}");
            loop {
                match c.put_one(q, body.clone()) {
                    Ok(_) => break,
                    Err(e) => assert!(Instant::now() < deadline, "{q}: {e}"),
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            acked.insert((q.clone(), body));
        }
    }
}
