//! A cluster of two partitions over TLS (clients and peers; openssl checks a peer port's
//! certificate) whose members change while it serves (docs/cluster.md),
//! each change made in every group — the metadata group and both
//! partitions — and checked in each: a fourth
//! node joins as a learner, catches up and is promoted; the leadership is
//! handed to it; a voter is removed and stopped; a node killed and wiped
//! comes back under a new id as a learner and takes everything again (its
//! old id refused); the leader's replica moves to a new node in one
//! command; the certificates are rotated and reloaded with SIGHUP
//! (the peer ports present the new ones); a leader stopped with SIGTERM
//! hands its leadership over first. Changes that
//! cannot be made are refused, saying why. At the end every acknowledged
//! put is there and nothing else.

mod cluster_harness;
mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use cluster_harness::{
    client, joiner, on_leader, options, present, promote, replicated, with_tls, Dir, Node,
};
use fila_client::{Client, ClientError, ClusterChange, ClusterStatus, ErrorCode, SettingsPatch};

/// The cluster's shape: two partitions (every change is made in each,
/// and in the metadata group) of five replicas each — with at most four
/// members, every member holds a replica of each.
const SHAPE: (usize, usize) = (2, 5);

/// A client of `addr` that follows `not_leader`.
fn following(addr: &str) -> Client {
    let mut o = options(addr);
    o.request_timeout = Duration::from_secs(20);
    Client::connect(o).unwrap()
}

/// Waits (at most 30 s) until the leader's status satisfies `ok`.
fn leader_sees(nodes: &[Node], what: &str, ok: impl Fn(&ClusterStatus) -> bool) -> ClusterStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = None;
    while Instant::now() < deadline {
        for n in nodes.iter().filter(|n| n.child.is_some()) {
            let Some(s) = client(&n.client).and_then(|mut c| c.cluster_status().ok()) else {
                continue;
            };
            if s.leader == Some(s.node_id) {
                if ok(&s) {
                    return s;
                }
                last = Some(s);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the leader never saw {what}: {last:?}");
}

/// Waits (at most 10 s: a node's view is refreshed every 100 ms) until
/// `node` says `id` leads every partition.
fn leads(node: &Node, id: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut c = client(&node.client).unwrap();
    loop {
        let s = c.cluster_status().unwrap();
        if s.partitions.iter().all(|p| p.leader == Some(id)) {
            return;
        }
        assert!(Instant::now() < deadline, "node {id} never led: {s:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether member `id` is a voter holding the leader's whole log.
fn caught_up(s: &ClusterStatus, id: u64) -> bool {
    s.members
        .iter()
        .any(|m| m.id == id && m.matched_index.is_some() && m.matched_index >= s.committed_index)
}

/// Member `id`'s role in the partitions — `Some(true)` a voter,
/// `Some(false)` a learner, `None` no member — once every partition agrees
/// on it and the metadata group holds it exactly when they do (as a voter
/// or a learner: it votes with 3 or 5); `Err` while they differ.
fn is_voter(s: &ClusterStatus, id: u64) -> Result<Option<bool>, ()> {
    let meta = s.members.iter().any(|m| m.id == id);
    let role =
        |p: &fila_client::PartitionStatus| p.replicas.iter().find(|r| r.id == id).map(|r| r.voter);
    let first = s.partitions.first().and_then(role);
    let agree = s.partitions.len() == SHAPE.0
        && s.partitions.iter().all(|p| role(p) == first)
        && meta == first.is_some();
    if agree {
        Ok(first)
    } else {
        Err(())
    }
}

/// The partitions' voters, once every partition has as many.
fn voters(s: &ClusterStatus) -> usize {
    let count = |p: &fila_client::PartitionStatus| p.replicas.iter().filter(|r| r.voter).count();
    let first = s.partitions.first().map_or(0, count);
    if s.partitions.iter().all(|p| count(p) == first) {
        first
    } else {
        0
    }
}

/// The metadata group's voters.
fn meta_voters(s: &ClusterStatus) -> Vec<u64> {
    s.members.iter().filter(|m| m.voter).map(|m| m.id).collect()
}

fn refused(r: Result<(), ClientError>, says: &str) {
    let e = r.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::INVALID_ARGUMENT), "{e}");
    assert!(e.to_string().contains(says), "{e} says {says:?}");
}

/// Puts `n` messages named `tag-i` through a following client; records
/// the acknowledged ones.
fn put(c: &mut Client, tag: &str, n: usize, acked: &mut HashSet<String>) {
    for i in 0..n {
        let body = format!("{tag}-{i}");
        c.put_one("jobs", body.clone()).unwrap();
        acked.insert(body);
    }
}

/// openssl, as a peer would, gets the node's certificate on its peer port
/// and checks it against the cluster's CA; a caller in clear text is not
/// greeted.
fn peers_speak_tls(node: &Node, pki: &std::path::Path) {
    if let Err(text) = peer_verifies(node, pki) {
        panic!("openssl s_client to the peer port: {text}");
    }
    use std::io::Read;
    let mut raw = std::net::TcpStream::connect(&node.peer).unwrap();
    raw.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut greeting = [0u8; 8];
    assert!(
        raw.read_exact(&mut greeting).is_err(),
        "a TLS peer listener greets no one in clear"
    );
}

/// openssl, as a peer would, checks the certificate the node's peer port
/// presents against the CA in `pki`; what it said when it fails.
fn peer_verifies(node: &Node, pki: &std::path::Path) -> Result<(), String> {
    let out = std::process::Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &node.peer,
            "-verify_return_error",
            "-CAfile",
        ])
        .arg(pki.join("ca.crt"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl runs");
    let text = String::from_utf8_lossy(&out.stdout);
    if out.status.success() && text.contains("Verify return code: 0 (ok)") {
        Ok(())
    } else {
        Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// The certificates rotated — a new CA, minted with openssl, copied over
/// the files every node was started with — and every running node sent
/// SIGHUP: each peer port comes to present a certificate of the new CA
/// (a reload acts on its own time, so this looks again, for at most 30 s).
fn rotate_certificates(nodes: &[Node], dir: &std::path::Path, pki: &std::path::Path) {
    let fresh = dir.join("pki-rotated");
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/mint-certs.sh");
    let ok = std::process::Command::new("bash")
        .arg(script)
        .arg(&fresh)
        .status()
        .expect("scripts/mint-certs.sh runs")
        .success();
    assert!(ok, "scripts/mint-certs.sh minted the new certificates");
    for f in ["ca.crt", "server.crt", "server.key"] {
        std::fs::copy(fresh.join(f), pki.join(f)).unwrap();
    }
    let running: Vec<&Node> = nodes.iter().filter(|n| n.child.is_some()).collect();
    for n in &running {
        cluster_harness::signal(n, "-HUP");
    }
    for n in running {
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Err(text) = peer_verifies(n, pki) {
            assert!(
                Instant::now() < deadline,
                "node {}'s peer port never presented the new certificate: {text}",
                n.id
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn members_join_leave_and_come_back_wiped_while_nothing_acknowledged_is_lost() {
    let dir = Dir::fresh("members");
    // Over TLS: clients to nodes, and nodes to each other.
    let pki = with_tls(&dir.0);
    let mut nodes = replicated(&dir.0, 3, SHAPE);
    for n in &mut nodes {
        n.start();
    }
    peers_speak_tls(&nodes[0], &pki);
    on_leader(&nodes, Duration::from_secs(30), |c| {
        c.create_queue("jobs", SettingsPatch::default())
    });
    let mut acked = HashSet::new();
    let mut c = following(&nodes[0].client);
    put(&mut c, "three", 50, &mut acked);

    // Node 4 joins: started with `join`, added as a learner, caught up,
    // promoted.
    nodes.push(joiner(&dir.0, 4, SHAPE));
    nodes[3].start();
    let (peer, client4) = (nodes[3].peer.clone(), nodes[3].client.clone());
    // Refused: a second node at an address in use, a bad address, an
    // unknown node's promotion, a transfer to a learner.
    refused(
        c.change_cluster(ClusterChange::AddLearner {
            id: 9,
            peer: nodes[1].peer.clone(),
            client: "127.0.0.1:1".into(),
        }),
        "already has",
    );
    refused(
        c.change_cluster(ClusterChange::AddLearner {
            id: 9,
            peer: "no port".into(),
            client: "127.0.0.1:1".into(),
        }),
        "host:port",
    );
    refused(
        c.change_cluster(ClusterChange::Promote { id: 9 }),
        "not a member",
    );
    c.change_cluster(ClusterChange::AddLearner {
        id: 4,
        peer: peer.clone(),
        client: client4.clone(),
    })
    .unwrap();
    // Adding it again with the same addresses changes nothing.
    c.change_cluster(ClusterChange::AddLearner {
        id: 4,
        peer,
        client: client4,
    })
    .unwrap();
    refused(
        c.change_cluster(ClusterChange::TransferLeader { to: Some(4) }),
        "not a voter",
    );
    leader_sees(&nodes, "node 4 caught up", |s| {
        is_voter(s, 4) == Ok(Some(false)) && caught_up(s, 4)
    });
    promote(&mut c, 4);
    leader_sees(&nodes, "four voters", |s| voters(s) == 4);
    // The metadata group votes with three of its four members: node 4 is
    // its learner.
    let s = leader_sees(&nodes, "four members", |s| s.members.len() == 4);
    assert_eq!(meta_voters(&s), [1, 2, 3], "{s:?}");
    put(&mut c, "four", 20, &mut acked);

    // The leadership goes to node 4; it serves.
    c.change_cluster(ClusterChange::TransferLeader { to: Some(4) })
        .unwrap();
    leads(&nodes[3], 4);
    let mut on4 = client(&nodes[3].client).unwrap();
    on4.put_one("jobs", "on node 4").unwrap();
    acked.insert("on node 4".into());

    // Node 1 is removed, then stopped; the three left serve, and still do
    // with one of them (node 2) killed.
    c.change_cluster(ClusterChange::Remove { id: 1 }).unwrap();
    leader_sees(&nodes, "node 1 gone", |s| is_voter(s, 1) == Ok(None));
    // Three members left: node 4 now votes in the metadata group too.
    leader_sees(&nodes, "node 4 a voter of the metadata group", |s| {
        meta_voters(s) == [2, 3, 4]
    });
    assert!(nodes[0].stop());
    nodes[1].kill();
    let mut c = following(&nodes[2].client);
    put(&mut c, "without-1-and-2", 20, &mut acked);

    // Node 2's machine comes back wiped: node 2 is removed, and the machine
    // started empty with `join` under a new id, 5, added as a learner (it
    // takes the whole log or a snapshot) and promoted.
    c.change_cluster(ClusterChange::Remove { id: 2 }).unwrap();
    std::fs::remove_dir_all(&nodes[1].data).unwrap();
    let mut wiped = joiner(&dir.0, 5, SHAPE);
    wiped.start();
    // Under its old id it is refused: a removed id is never taken again.
    let err = c
        .change_cluster(ClusterChange::AddLearner {
            id: 2,
            peer: wiped.peer.clone(),
            client: wiped.client.clone(),
        })
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::INVALID_ARGUMENT), "{err}");
    assert!(err.to_string().contains("ids only grow"), "{err}");
    let back = Instant::now();
    c.change_cluster(ClusterChange::AddLearner {
        id: 5,
        peer: wiped.peer.clone(),
        client: wiped.client.clone(),
    })
    .unwrap();
    nodes[1] = wiped;
    leader_sees(&nodes, "node 5 caught up", |s| caught_up(s, 5));
    eprintln!(
        "a wiped node took the log again in {:?} after it was added",
        back.elapsed()
    );
    promote(&mut c, 5);
    put(&mut c, "wiped-back", 20, &mut acked);

    // Node 5, the wiped machine, holds everything: it answers from its own
    // copy once it leads.
    leader_sees(&nodes, "three voters", |s| {
        voters(s) == 3 && caught_up(s, 5)
    });
    c.change_cluster(ClusterChange::TransferLeader { to: Some(5) })
        .unwrap();
    leads(&nodes[1], 5);
    let mut on5 = client(&nodes[1].client).unwrap();
    assert_eq!(
        present(&mut on5).unwrap(),
        acked,
        "the wiped node's copy: every acknowledged put, and nothing else"
    );

    // The leader's replica (node 5's) moves to a new node, 6, in one
    // command: node 6 added as a learner, promoted once it has caught up,
    // then node 5 hands its leadership over and the next leader — the
    // client following it with the same command — removes node 5.
    let mut six = joiner(&dir.0, 6, SHAPE);
    six.start();
    let moved = Instant::now();
    following(&nodes[1].client)
        .change_cluster(ClusterChange::Move {
            from: 5,
            to: 6,
            peer: six.peer.clone(),
            client: six.client.clone(),
        })
        .unwrap();
    eprintln!("the leader's replica moved in {:?}", moved.elapsed());
    assert!(nodes[1].stop());
    nodes[1] = six;
    let s = leader_sees(&nodes, "node 5's replica on node 6", |s| {
        is_voter(s, 6) == Ok(Some(true)) && is_voter(s, 5) == Ok(None)
    });
    assert_eq!(voters(&s), 3, "{s:?}");
    let mut c = following(&nodes[2].client);
    put(&mut c, "after-the-move", 10, &mut acked);
    // A move of a node that holds no replica is refused, saying why.
    refused(
        c.change_cluster(ClusterChange::Move {
            from: 5,
            to: 7,
            peer: "127.0.0.1:1".into(),
            client: "127.0.0.1:2".into(),
        }),
        "holds no replica",
    );
    c.change_cluster(ClusterChange::TransferLeader { to: Some(6) })
        .unwrap();
    leads(&nodes[1], 6);

    // New certificates, reloaded with SIGHUP: the peer ports present them,
    // and the cluster serves clients that trust only the new CA.
    rotate_certificates(&nodes, &dir.0, &pki);
    let (_, _) = on_leader(&nodes, Duration::from_secs(30), |c| {
        c.put_one("jobs", "after the rotation")
    });
    acked.insert("after the rotation".into());

    // The leader stopped with SIGTERM hands its leadership over on its way
    // out; the others serve.
    let stopped = Instant::now();
    assert!(nodes[1].stop(), "the leader ended on SIGTERM");
    on_leader(&nodes, Duration::from_secs(30), |c| {
        c.put_one("jobs", "after the stop")
    });
    eprintln!(
        "the leader stopped with SIGTERM: the next put was acknowledged {:?} after",
        stopped.elapsed()
    );
    acked.insert("after the stop".into());
    let (_, end) = on_leader(&nodes, Duration::from_secs(30), present);
    assert_eq!(end, acked, "every acknowledged put, and nothing else");
}
