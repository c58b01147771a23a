//! Three replicas of a partition on one machine, their peers reached over
//! real TCP on loopback (the peer protocol with its handshake, inside TLS),
//! their logs and state machines on the file system: the leader is stopped
//! and another takes over, nothing acknowledged is lost, the stopped node
//! comes back and catches up; a hundred puts at once share far fewer
//! entries (the records of operations run while entries wait go into the
//! next one), and an operation run at the engine's home (`try_at_home`) is
//! answered once its entry commits; a caller without the cluster's secret, one
//! that means another node, a frame past the limit, a caller that does not trust the listener's
//! certificate and one that speaks no TLS to a TLS listener are refused (and
//! after a reload of its certificates, callers that trust only the old);
//! forwarded requests reach a node's handler, and only with the secret.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fila_cluster::peer::{serve, Forward, Forwarder, PeerNetwork, PeerTls, FRAME_MAX};
use fila_cluster::{Member, NodeId, NodeLog, Replica, StateMachine};
use fila_core::{NewMessage, QueueSettings, SystemClock};
use fila_wal::{FsStorage, LogOptions};
use openraft::async_runtime::watch::WatchReceiver;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const QUEUE: &str = "orders";

struct Node {
    replica: Arc<Replica<FsStorage>>,
    server: JoinHandle<()>,
}

struct Dir(std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config() -> Arc<openraft::Config> {
    Arc::new(
        openraft::Config {
            heartbeat_interval: 50,
            election_timeout_min: 300,
            election_timeout_max: 600,
            ..Default::default()
        }
        .validate()
        .unwrap(),
    )
}

/// A cluster's TLS: a CA of its own and one certificate (for 127.0.0.1)
/// every node presents.
fn pki() -> PeerTls {
    let (server, client) = pki_parts();
    PeerTls::new(server, client)
}

/// The two sides of [`pki`]'s TLS.
fn pki_parts() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType};
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let issuer = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let mut leaf = CertificateParams::new(Vec::<String>::new()).unwrap();
    leaf.subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(issuer.der().to_vec()))
        .unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(server), Arc::new(client))
}

async fn start(
    dir: &std::path::Path,
    id: NodeId,
    listener: TcpListener,
    secret: &Arc<[u8]>,
    tls: Option<PeerTls>,
    shards: usize,
) -> Node {
    let log = NodeLog::open(
        FsStorage::new(dir.join(format!("node-{id}/log"))).unwrap(),
        LogOptions::default(),
    )
    .and_then(|l| l.group(0))
    .unwrap();
    let sm =
        StateMachine::open(FsStorage::new(dir.join(format!("node-{id}/state"))).unwrap()).unwrap();
    let replica = Replica::start(
        id,
        config(),
        PeerNetwork::new(id, 0, secret.clone(), tls.clone()),
        log,
        sm,
        Arc::new(SystemClock),
        Some([7, 11]),
    )
    .await
    .unwrap();
    if shards > 1 {
        assert!(replica.set_homes(fila_cluster::TaskHome::start_set(shards), shards));
    }
    let raft = replica.raft().clone();
    let server = tokio::spawn(serve(
        listener,
        id,
        secret.clone(),
        tls,
        move |g| (g == 0).then(|| raft.clone()),
        None,
    ));
    Node {
        replica: Arc::new(replica),
        server,
    }
}

/// Runs a put on whichever node leads, for at most `within`; answers the
/// node and how long it took.
async fn put(nodes: &BTreeMap<NodeId, Node>, body: &str, within: Duration) -> (NodeId, Duration) {
    let start = Instant::now();
    while start.elapsed() < within {
        for (id, n) in nodes {
            let body = body.to_owned();
            let r = n
                .replica
                .execute(0, move |e| e.put(QUEUE, vec![NewMessage::new(body)]))
                .await;
            if let Ok(Ok(entries)) = r {
                assert!(entries[0].is_ok());
                return (*id, start.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no node took {body} within {within:?}");
}

/// Every node's messages (by node id) once it applied all the leader
/// `last` committed: a blank entry after the last put — once a replica
/// has applied it, it has applied the put (the metrics' applied index may
/// lag the answer).
async fn caught_up(nodes: &BTreeMap<NodeId, Node>, last: NodeId) -> Vec<Vec<String>> {
    let index = nodes[&last]
        .replica
        .raft()
        .write_blank()
        .await
        .unwrap()
        .log_id
        .index;
    let mut images = Vec::new();
    for (id, n) in nodes {
        n.replica
            .raft()
            .wait(Some(Duration::from_secs(30)))
            .applied_index_at_least(Some(index), "catch up")
            .await
            .unwrap_or_else(|e| panic!("node {id}: {e}"));
        images.push(bodies(&n.replica.state().image().unwrap()));
    }
    images
}

fn bodies(image: &fila_core::event::EngineImage) -> Vec<String> {
    let mut out: Vec<String> = image
        .queues
        .iter()
        .flat_map(|q| &q.messages)
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect();
    out.sort();
    out
}

/// Three nodes on loopback (their folders under `dir`, emptied first),
/// one group of all three made, its queue created: the nodes, their
/// members, and the node the create ran on (the leader then). Each
/// leader's engine has `shards` shards.
async fn three(
    dir: &Dir,
    secret: &Arc<[u8]>,
    tls: Option<&PeerTls>,
    shards: usize,
) -> (BTreeMap<NodeId, Node>, BTreeMap<NodeId, Member>, NodeId) {
    let _ = std::fs::remove_dir_all(&dir.0);
    let mut listeners = BTreeMap::new();
    let mut members = BTreeMap::new();
    for id in 1..=3u64 {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        members.insert(
            id,
            Member {
                addr: l.local_addr().unwrap().to_string(),
                client: format!("client-{id}"),
            },
        );
        listeners.insert(id, l);
    }
    let mut nodes = BTreeMap::new();
    for (id, l) in listeners {
        nodes.insert(id, start(&dir.0, id, l, secret, tls.cloned(), shards).await);
    }
    nodes[&1]
        .replica
        .raft()
        .initialize(members.clone())
        .await
        .unwrap();
    let start_at = Instant::now();
    let created = loop {
        assert!(start_at.elapsed() < Duration::from_secs(30), "no leader");
        let mut done = None;
        for (id, n) in &nodes {
            if let Ok(r) = n
                .replica
                .execute(n.replica.shard_of(QUEUE), |e| {
                    e.create_queue(QUEUE, QueueSettings::default())
                })
                .await
            {
                r.unwrap();
                done = Some(*id);
            }
        }
        if let Some(id) = done {
            break id;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    (nodes, members, created)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_over_tls_survives_its_leader_stopping() {
    let tls = pki();
    let dir = Dir(std::env::temp_dir().join(format!("fila-cluster-tcp-{}", std::process::id())));
    let secret: Arc<[u8]> = Arc::from(&b"the cluster's secret"[..]);
    let (mut nodes, members, created) = three(&dir, &secret, Some(&tls), 1).await;
    let mut acked = Vec::new();
    for i in 0..50 {
        let body = format!("before-{i}");
        put(&nodes, &body, Duration::from_secs(10)).await;
        acked.push(body);
    }
    // The leader stops: its peers stop hearing from it.
    let leader = nodes[&created]
        .replica
        .raft()
        .current_leader()
        .await
        .unwrap();
    let old = nodes.remove(&leader).unwrap();
    old.server.abort();
    old.replica.shutdown().await.unwrap();
    drop(old);
    let (new_leader, failover) = put(&nodes, "after-0", Duration::from_secs(30)).await;
    assert_ne!(new_leader, leader);
    eprintln!("failover: the first put after the leader stopped took {failover:?}");
    acked.push("after-0".to_owned());
    for i in 1..50 {
        let body = format!("after-{i}");
        put(&nodes, &body, Duration::from_secs(10)).await;
        acked.push(body);
    }
    // It comes back on its address and catches up.
    let listener = TcpListener::bind(&members[&leader].addr).await.unwrap();
    nodes.insert(
        leader,
        start(&dir.0, leader, listener, &secret, Some(tls.clone()), 1).await,
    );
    let last = put(&nodes, "last", Duration::from_secs(10)).await.0;
    acked.push("last".to_owned());
    let images = caught_up(&nodes, last).await;
    acked.sort();
    for (i, got) in images.iter().enumerate() {
        assert_eq!(got, &acked, "replica {}", i + 1);
    }
    // The leader's engine says the same.
    let peeked = nodes[&last]
        .replica
        .execute(0, |e| e.stats(QUEUE).unwrap().visible as usize)
        .await
        .unwrap();
    assert_eq!(peeked, acked.len());
    // It hands its leadership over: the engine it served from is a
    // copy of the partition, dropped once it no longer leads.
    let old = &nodes[&last].replica;
    assert!(!old.drop_stale_engine().await, "it still leads");
    let next = old.transfer_leader(None).await.unwrap();
    assert_ne!(next, last);
    assert!(old.drop_stale_engine().await, "a deposed leader's engine");
    assert!(!old.drop_stale_engine().await, "dropped once");
    for n in nodes.values() {
        n.server.abort();
        n.replica.shutdown().await.unwrap();
    }
}

/// Operations run while entries wait for their commit go into one entry
/// together (at most a few entries in flight): a hundred puts at once
/// take far fewer than a hundred entries, each is answered once its
/// entry committed, and every replica holds them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_run_while_entries_wait_share_the_next_entry() {
    let dir =
        Dir(std::env::temp_dir().join(format!("fila-cluster-tcp-gather-{}", std::process::id())));
    let secret: Arc<[u8]> = Arc::from(&b"the cluster's secret"[..]);
    let (nodes, _, leader) = three(&dir, &secret, None, 1).await;
    let replica = nodes[&leader].replica.clone();
    let last_index = |r: &Replica<FsStorage>| {
        r.raft()
            .metrics()
            .borrow_watched()
            .last_log_index
            .unwrap_or(0)
    };
    let before = last_index(&replica);
    const PUTS: usize = 100;
    let mut puts = tokio::task::JoinSet::new();
    for i in 0..PUTS {
        let r = replica.clone();
        puts.spawn(async move {
            r.execute(0, move |e| {
                e.put(QUEUE, vec![NewMessage::new(format!("m-{i:03}"))])
            })
            .await
        });
    }
    while let Some(done) = puts.join_next().await {
        let entries = done.unwrap().expect("committed").unwrap();
        assert!(entries[0].is_ok());
    }
    let entries = last_index(&replica) - before;
    assert!(
        entries <= PUTS as u64 / 2,
        "{PUTS} puts at once took {entries} entries"
    );
    // Run outside any task: a put on the leader's engine, answered once
    // its entry committed; nothing on a follower; a receive that found
    // nothing, dropped when asked.
    let (r, ticket) = replica
        .try_at_home(
            0,
            |e| e.put(QUEUE, vec![NewMessage::new("m-100".to_owned())]),
            |_| true,
        )
        .await
        .expect("the leader runs it");
    assert!(r.unwrap()[0].is_ok());
    let start = Instant::now();
    while ticket.outcome().is_none() {
        assert!(start.elapsed() < Duration::from_secs(10), "never committed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    ticket.outcome().unwrap().expect("committed");
    let follower = nodes.keys().find(|&&id| id != leader).unwrap();
    assert!(nodes[follower]
        .replica
        .try_at_home(0, |e| e.stats(QUEUE).is_ok(), |_| true)
        .await
        .is_none());
    assert!(replica
        .try_at_home(0, |e| e.stats("nowhere").is_ok(), |_| false)
        .await
        .is_none());
    let want: Vec<String> = (0..=PUTS).map(|i| format!("m-{i:03}")).collect();
    for (i, got) in caught_up(&nodes, leader).await.iter().enumerate() {
        assert_eq!(got, &want, "replica {}", i + 1);
    }
    for n in nodes.values() {
        n.server.abort();
        n.replica.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn a_caller_without_the_secret_or_with_a_huge_frame_is_refused() {
    use openraft::network::{RPCOption, RaftNetworkFactory};
    use openraft::RaftNetworkV2;
    let dir =
        Dir(std::env::temp_dir().join(format!("fila-cluster-tcp-refuse-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    let secret: Arc<[u8]> = Arc::from(&b"right"[..]);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let node = start(&dir.0, 1, listener, &secret, None, 1).await;
    let member = Member {
        addr: addr.clone(),
        client: String::new(),
    };
    let vote = openraft::raft::VoteRequest::new(fila_cluster::Vote::new(9, 2), None);
    // The wrong secret: no answer, and the node's vote is untouched.
    let mut wrong = PeerNetwork::new(2, 0, Arc::from(&b"wrong"[..]), None);
    let mut conn = wrong.new_client(1, &member).await;
    let got = conn
        .vote(vote.clone(), RPCOption::new(Duration::from_secs(2)))
        .await;
    assert!(got.is_err(), "{got:?}");
    assert_eq!(
        node.replica.raft().metrics().borrow_watched().current_term,
        0
    );
    // The right secret, meant for another node at this address (node 1's
    // address was node 4's once): refused in the handshake.
    let mut right = PeerNetwork::new(2, 0, secret.clone(), None);
    let mut conn = right.new_client(4, &member).await;
    let got = conn
        .vote(vote.clone(), RPCOption::new(Duration::from_secs(2)))
        .await;
    assert!(got.is_err(), "a request meant for node 4 reached node 1");
    // Meant for it: answered.
    let mut conn = right.new_client(1, &member).await;
    let got = conn
        .vote(vote, RPCOption::new(Duration::from_secs(2)))
        .await
        .unwrap();
    assert_eq!(got.vote.leader_id().term, 9);
    // A frame past the limit, after a good handshake: the connection is
    // closed before anything of it is read.
    let mut raw = TcpStream::connect(&addr).await.unwrap();
    let mut hello = [0u8; 40];
    raw.read_exact(&mut hello).await.unwrap();
    let nonce: [u8; 32] = hello[8..].try_into().unwrap();
    let mut answer = b"FILAPEER".to_vec();
    answer.extend_from_slice(&3u64.to_be_bytes());
    answer.extend_from_slice(&1u64.to_be_bytes());
    answer.extend_from_slice(&fila_cluster::peer::mac(&secret, &nonce, 3, 1));
    raw.write_all(&answer).await.unwrap();
    assert_eq!(raw.read_u8().await.unwrap(), 1);
    raw.write_all(&((FRAME_MAX as u32) + 1).to_be_bytes())
        .await
        .unwrap();
    raw.write_all(&0u64.to_be_bytes()).await.unwrap();
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut rest))
        .await
        .expect("the node closes the connection")
        .unwrap_or(0);
    assert_eq!(n, 0, "nothing is answered to a frame past the limit");
    node.server.abort();
    node.replica.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_tls_listener_refuses_callers_that_do_not_trust_it_or_speak_no_tls() {
    use openraft::network::{RPCOption, RaftNetworkFactory};
    use openraft::RaftNetworkV2;
    let dir =
        Dir(std::env::temp_dir().join(format!("fila-cluster-tls-refuse-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    let secret: Arc<[u8]> = Arc::from(&b"right"[..]);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let tls = pki();
    let node = start(&dir.0, 1, listener, &secret, Some(tls.clone()), 1).await;
    let member = Member {
        addr: addr.clone(),
        client: String::new(),
    };
    let vote = openraft::raft::VoteRequest::new(fila_cluster::Vote::new(9, 2), None);
    let ask = |tls: Option<PeerTls>| {
        let (member, vote, secret) = (member.clone(), vote.clone(), secret.clone());
        async move {
            let mut net = PeerNetwork::new(2, 0, secret, tls);
            let mut conn = net.new_client(1, &member).await;
            conn.vote(vote, RPCOption::new(Duration::from_secs(2)))
                .await
        }
    };
    // A caller that trusts another CA, and one without TLS: no answer, the
    // node's term untouched.
    assert!(ask(Some(pki())).await.is_err());
    assert!(ask(None).await.is_err());
    assert_eq!(
        node.replica.raft().metrics().borrow_watched().current_term,
        0
    );
    // What a plaintext caller reads is no `FILAPEER` greeting: the
    // listener waits for a TLS hello.
    let mut raw = TcpStream::connect(&addr).await.unwrap();
    let mut hello = [0u8; 8];
    let read = tokio::time::timeout(Duration::from_millis(300), raw.read_exact(&mut hello)).await;
    assert!(read.is_err(), "a TLS listener greets no one in clear");
    // A caller that trusts the cluster's CA: answered.
    let got = ask(Some(tls.clone())).await.unwrap();
    assert_eq!(got.vote.leader_id().term, 9);
    // Its certificates reloaded (another CA here): connections made after
    // present the new one — a caller of the new CA is answered, one of the
    // old refused.
    let (server, client) = pki_parts();
    let old = PeerTls::new(tls.server_config(), tls.client_config());
    tls.set(server.clone(), client.clone());
    assert!(ask(Some(old)).await.is_err());
    let got = ask(Some(PeerTls::new(server, client))).await.unwrap();
    assert_eq!(got.vote.leader_id().term, 9);
    node.server.abort();
    node.replica.shutdown().await.unwrap();
}

/// A peer listener of node `id` on a loopback port that only answers
/// forwards, with `handler`: its address and its task.
async fn forward_handler(
    id: u64,
    secret: &Arc<[u8]>,
    handler: Forward,
) -> (String, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(serve::<FsStorage, _>(
        listener,
        id,
        secret.clone(),
        None,
        |_| None,
        Some(handler),
    ));
    (addr, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_requests_reach_the_handler_with_the_secret_only() {
    let dir = Dir(std::env::temp_dir().join(format!("fila-cluster-fwd-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    let secret: Arc<[u8]> = Arc::from(&b"right"[..]);
    // Node 5 answers a forward with its bytes reversed.
    let reverse: Forward = Arc::new(|mut body: Vec<u8>| {
        Box::pin(async move {
            body.reverse();
            body
        })
    });
    let (addr, server) = forward_handler(5, &secret, reverse).await;
    let forwarder = Arc::new(Forwarder::new(PeerNetwork::new(2, 0, secret.clone(), None)));
    // More at once than the forwarder keeps connections: each is answered.
    let mut calls = Vec::new();
    for i in 0..3 * fila_cluster::peer::FORWARD_CONNECTIONS {
        let (forwarder, addr) = (forwarder.clone(), addr.clone());
        calls.push(tokio::spawn(async move {
            let body = format!("call {i}").into_bytes();
            let got = forwarder
                .forward(5, &addr, body.clone(), Duration::from_secs(5))
                .await
                .unwrap();
            assert_eq!(got, body.into_iter().rev().collect::<Vec<u8>>());
        }));
    }
    for c in calls {
        c.await.unwrap();
    }
    // Meant for another node at that address, or without the secret: no
    // answer.
    assert!(forwarder
        .forward(6, &addr, b"x".to_vec(), Duration::from_secs(2))
        .await
        .is_err());
    let wrong = Forwarder::new(PeerNetwork::new(2, 0, Arc::from(&b"wrong"[..]), None));
    assert!(wrong
        .forward(5, &addr, b"x".to_vec(), Duration::from_secs(2))
        .await
        .is_err());
    // A node without a handler refuses forwards (and says so).
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bare_addr = listener.local_addr().unwrap().to_string();
    let bare = start(&dir.0, 1, listener, &secret, None, 1).await;
    let refused = forwarder
        .forward(1, &bare_addr, b"x".to_vec(), Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("no forwarded requests"),
        "{refused}"
    );
    server.abort();
    bare.server.abort();
    bare.replica.shutdown().await.unwrap();
}

/// Forwards held open (a receive waiting on its leader) take connections
/// of their own: while `FORWARDS_HELD` are held, one more is not sent
/// (`None`: its caller polls instead) and other forwards are answered;
/// once they are answered, held forwards are sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_forwards_have_connections_of_their_own_and_a_limit() {
    use fila_cluster::peer::FORWARDS_HELD;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let secret: Arc<[u8]> = Arc::from(&b"right"[..]);
    let arrived = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(tokio::sync::Notify::new());
    // Node 5 answers "hold" once released, anything else at once.
    let handler: Forward = {
        let (arrived, release) = (arrived.clone(), release.clone());
        Arc::new(move |body: Vec<u8>| {
            let (arrived, release) = (arrived.clone(), release.clone());
            Box::pin(async move {
                if body == b"hold" {
                    let released = release.notified();
                    arrived.fetch_add(1, Ordering::AcqRel);
                    released.await;
                }
                body
            })
        })
    };
    let (addr, server) = forward_handler(5, &secret, handler).await;
    let forwarder = Arc::new(Forwarder::new(PeerNetwork::new(2, 0, secret, None)));
    let held: Vec<_> = (0..FORWARDS_HELD)
        .map(|_| {
            let (forwarder, addr) = (forwarder.clone(), addr.clone());
            tokio::spawn(async move {
                forwarder
                    .forward_held(5, &addr, b"hold".to_vec(), Duration::from_secs(20))
                    .await
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while arrived.load(Ordering::Acquire) < FORWARDS_HELD {
        assert!(
            std::time::Instant::now() < deadline,
            "the held forwards never arrived"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // All taken: one more is not sent; a plain forward goes on.
    let more = forwarder
        .forward_held(5, &addr, b"more".to_vec(), Duration::from_secs(5))
        .await;
    assert!(more.is_none(), "a held forward past the limit was sent");
    let plain = forwarder
        .forward(5, &addr, b"plain".to_vec(), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(plain, b"plain");
    // Answered: their connections are free again.
    release.notify_waiters();
    for h in held {
        assert_eq!(h.await.unwrap().unwrap().unwrap(), b"hold");
    }
    let again = forwarder
        .forward_held(5, &addr, b"again".to_vec(), Duration::from_secs(5))
        .await;
    assert_eq!(again.unwrap().unwrap(), b"again");
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_crosses_the_shards_of_a_leaders_engine_as_one_record() {
    use fila_core::{Address, ReceiveOptions, Received, SettingsUpdate};
    let dir =
        Dir(std::env::temp_dir().join(format!("fila-cluster-tcp-shards-{}", std::process::id())));
    let secret: Arc<[u8]> = Arc::from(&b"the cluster's secret"[..]);
    let (nodes, _, leader) = three(&dir, &secret, None, 2).await;
    // The queue and its dead-letter target on the engine's two shards.
    let shard = |name: &str| fila_core::shard_of(name, 2);
    let target = (0..100)
        .map(|i| format!("failed-{i}"))
        .find(|n| shard(n) != shard(QUEUE))
        .unwrap();
    let replica = nodes[&leader].replica.clone();
    assert_eq!(replica.shards(), 2);
    let t = target.clone();
    let made = replica
        .execute(shard(&target), move |e| {
            e.create_queue(&t, QueueSettings::default())
        })
        .await
        .unwrap();
    assert_eq!(made, Ok(true));
    let t = target.clone();
    let leased = replica
        .execute(shard(QUEUE), move |e| {
            let update = SettingsUpdate {
                dead_letter_target: Some(Some(t)),
                ..SettingsUpdate::default()
            };
            e.update_queue(QUEUE, &update)?;
            e.put(QUEUE, vec![NewMessage::new("poison")])?;
            match e.receive(Address::queue(QUEUE), &ReceiveOptions::now(1), None)? {
                Received::Ready(mut ms) => {
                    Ok::<_, fila_core::Error>(ms.pop().expect("the one put"))
                }
                _ => panic!("nothing to receive"),
            }
        })
        .await
        .unwrap()
        .unwrap();
    let receipt = leased.receipt.expect("a leased message's receipt");
    replica
        .execute(shard(QUEUE), move |e| {
            e.dead_letter(QUEUE, &receipt, "bad", "it cannot be read")
        })
        .await
        .unwrap()
        .unwrap();
    // The target's shard takes it (its home is sent the dead letter as a
    // job, which makes the one record that moves it).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let t = target.clone();
        let there = replica
            .execute(shard(&target), move |e| e.stats(&t).map(|s| s.visible))
            .await
            .unwrap()
            .unwrap();
        if there == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the dead letter never arrived");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let left = replica
        .execute(shard(QUEUE), |e| e.stats(QUEUE))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((left.visible, left.in_flight), (0, 0));
    // Every replica's state has it in the target alone.
    caught_up(&nodes, leader).await;
    for (id, n) in &nodes {
        let image = n.replica.state().image().unwrap();
        let held: Vec<(String, usize)> = image
            .queues
            .iter()
            .map(|q| (q.name.clone(), q.messages.len()))
            .collect();
        assert!(
            held.contains(&(target.clone(), 1)) && held.contains(&(QUEUE.to_owned(), 0)),
            "node {id}: {held:?}"
        );
    }
    // And the next leader's engine, rebuilt from it.
    let next = replica.transfer_leader(None).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let t = target.clone();
    let moved = loop {
        let t = t.clone();
        let ran = nodes[&next]
            .replica
            .execute(shard(&target), move |e| {
                e.receive(Address::queue(&t), &ReceiveOptions::now(1), None)
            })
            .await;
        if let Ok(Ok(Received::Ready(ms))) = ran {
            break ms;
        }
        assert!(Instant::now() < deadline, "node {next} never served");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(moved.len(), 1);
    assert_eq!(&moved[0].payload[..], b"poison");
    let why = moved[0].dead_letter.as_ref().expect("dead-letter details");
    assert_eq!(&*why.source_queue, QUEUE);
    for n in nodes.values() {
        n.server.abort();
        n.replica.shutdown().await.unwrap();
    }
}
