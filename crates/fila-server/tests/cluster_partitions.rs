//! A cluster of three `fila-server` processes with three partitions
//! (docs/cluster.md): every node runs the metadata group and a replica of
//! each partition; every node's status names the same leader of each; a
//! following client creates queues through any node (placed by the
//! metadata leader, a queue beside its dead-letter target; the partitions'
//! leaderships spread over the three nodes), the cluster's
//! `max_queues` holds across partitions, a deleted queue frees its place;
//! lists and stats on any node gather every partition; a node that does
//! not lead a queue's partition answers `not_leader` naming that
//! partition's leader; the blocking and async clients keep each queue's
//! route (one connection to each node, however they alternate); the node leading the most partitions is killed
//! with SIGKILL and a client given every node's address goes on; every
//! acknowledged put is there at the end. A node added before the map is
//! made holds no replica: the map places each partition where its group
//! was first made.

mod cluster_harness;
mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use cluster_harness::{
    client, joiner, of_all, options, partitioned, payloads, promote, replicated, Dir, Node,
    QUEUES_MAX,
};
use fila_client::{Client, ClusterChange, ClusterStatus, ErrorCode, QueueRef, SettingsPatch};

const PARTS: usize = 3;

/// Waits (at most 30 s) until every live node's status names the same
/// live leader of each partition and of the metadata group, every
/// partition with three voters: answers one of the statuses.
fn agreed(nodes: &[Node]) -> ClusterStatus {
    agreed_on(nodes, PARTS)
}

/// [`agreed`] for a cluster of `parts` partitions.
fn agreed_on(nodes: &[Node], parts: usize) -> ClusterStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = Vec::new();
    while Instant::now() < deadline {
        let views: Vec<ClusterStatus> = nodes
            .iter()
            .filter(|n| n.child.is_some())
            .filter_map(|n| client(&n.client)?.cluster_status().ok())
            .collect();
        let leaders = |s: &ClusterStatus| -> Vec<Option<u64>> {
            std::iter::once(s.leader)
                .chain(s.partitions.iter().map(|p| p.leader))
                .collect()
        };
        let live: HashSet<u64> = nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| n.id)
            .collect();
        let whole = |s: &ClusterStatus| {
            s.partitions.len() == parts
                && leaders(s)
                    .iter()
                    .all(|l| l.is_some_and(|l| live.contains(&l)))
                && s.partitions
                    .iter()
                    .all(|p| p.replicas.iter().filter(|r| r.voter).count() == 3)
        };
        if views.len() == live.len()
            && views.iter().all(whole)
            && views.iter().all(|v| leaders(v) == leaders(&views[0]))
        {
            return views[0].clone();
        }
        last = views;
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the nodes never agreed on the leaders: {last:?}");
}

#[test]
fn three_partitions_place_route_and_serve_through_a_nodes_kill() {
    let dir = Dir::fresh("parts");
    let mut nodes = partitioned(&dir.0, 3, PARTS);
    for n in &mut nodes {
        n.start();
    }
    // A new cluster's partitions are led by different nodes (spread once
    // the map is made): one each here.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        let status = agreed(&nodes);
        let mut leaders: Vec<u64> = status.partitions.iter().filter_map(|p| p.leader).collect();
        leaders.sort_unstable();
        if leaders == [1, 2, 3] {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the leaderships never spread: {status:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut c = of_all(&nodes);
    // A queue and the one it dead-letters to land in one partition: the
    // create names a target the partition holds — on another loop (with
    // three shards over two loops, "orders" is on shard 1, loop 1, and
    // "rejects" on shard 2, loop 0, beside shard 0: the create checks the
    // target there, and the dead letter crosses to it). (The first waits for the map: a partition serves
    // once its node knows its key.)
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = c.create_queue("rejects", SettingsPatch::default()) {
        assert_eq!(e.code(), Some(ErrorCode::NOT_LEADER), "{e}");
        assert!(Instant::now() < deadline, "no queue could be made: {e}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let with_target = SettingsPatch {
        dead_letter_target: Some(Some("rejects".into())),
        ..Default::default()
    };
    c.create_queue("orders", with_target).unwrap();
    for q in ["alpha", "beta"] {
        c.create_queue(q, SettingsPatch::default()).unwrap();
    }
    // The cluster holds `max_queues`, whichever partition would take more.
    let err = c
        .create_queue("one-too-many", SettingsPatch::default())
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::RESOURCE_EXHAUSTED), "{err}");
    // A deleted queue frees its place; deleting a queue that is not
    // there is no error when asked so.
    c.delete_queue("beta").unwrap();
    c.delete_queue_if_exists("beta").unwrap();
    let err = c.delete_queue("beta").unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::QUEUE_NOT_FOUND), "{err}");
    c.create_queue("gamma", SettingsPatch::default()).unwrap();
    let queues = ["rejects", "orders", "alpha", "gamma"];
    assert_eq!(queues.len() as u64, QUEUES_MAX);
    // Every node lists every partition's queues and counts them.
    for n in &nodes {
        let mut on = client(&n.client).unwrap();
        let mut names = on.list_queues("").unwrap();
        names.sort();
        let mut want: Vec<String> = queues.iter().map(|q| q.to_string()).collect();
        want.sort();
        assert_eq!(names, want, "node {}", n.id);
        let page = on.list_queues_page("", "", 2).unwrap();
        assert_eq!(page.0.len(), 2);
        assert_eq!(page.1.as_deref(), Some(page.0[1].as_str()));
        let stats = on.server_stats().unwrap();
        let stat = |name: &str| stats.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
        assert_eq!(stat("queues"), Some(QUEUES_MAX), "node {}: {stats:?}", n.id);
    }
    // Dead letters of "orders" reach "rejects" (in its partition).
    c.put_one("orders", "doomed").unwrap();
    let got = c.receive("orders", 1, Some(5_000)).unwrap();
    let receipt = got[0].receipt.expect("a lease");
    c.dead_letter("orders", receipt, "bad", "never works")
        .unwrap();
    let peeked = c
        .peek(
            QueueRef {
                name: "rejects".into(),
                dlq: false,
            },
            0,
            10,
        )
        .unwrap();
    assert_eq!(peeked.len(), 1, "{peeked:?}");
    assert_eq!(&peeked[0].payload[..], b"doomed");
    // A move task out of "rejects" at one message a second moves the
    // first at once and the others on its timers, which run on
    // "rejects"'s loop with nothing else run there: receives on "orders",
    // on the other loop, get them all (the loops run their shards' due
    // timers, as a single node's do, not only those of shards with a
    // receive parked).
    let doomed = c.receive("rejects", 1, Some(5_000)).unwrap();
    let receipt = doomed[0].receipt.expect("a lease");
    c.delete("rejects", &[receipt]).unwrap();
    for body in ["back-1", "back-2", "back-3"] {
        c.put_one("rejects", body).unwrap();
    }
    c.start_move("rejects", Some("orders"), None, Some(1))
        .unwrap();
    let mut back = Vec::new();
    while back.len() < 3 {
        let got = c.receive("orders", 3, Some(10_000)).unwrap();
        assert!(!got.is_empty(), "the move task stopped after {back:?}");
        for m in got {
            back.push(String::from_utf8_lossy(&m.payload).into_owned());
            c.delete("orders", &[m.receipt.expect("a lease")]).unwrap();
        }
    }
    back.sort();
    assert_eq!(back, ["back-1", "back-2", "back-3"]);
    // A node that does not lead a queue's partition names that
    // partition's leader; the partitions are led from more than one
    // node or not, a put goes where its queue's partition is led.
    let mut acked: HashSet<(String, String)> = HashSet::new();
    // Message ids are unique across the cluster: queues of different
    // partitions are numbered by each partition alone, so without the
    // partition's id space "gamma"'s second message had the id of
    // "orders"'s second (both queue 2 of their partition).
    let mut ids: std::collections::HashMap<u128, String> = Default::default();
    let mut unique = |id: u128, what: String| {
        if let Some(was) = ids.insert(id, what.clone()) {
            panic!("{what} has the id {id:032x} of {was}");
        }
    };
    let mut named = 0;
    for q in ["alpha", "gamma", "orders"] {
        for n in &nodes {
            let mut on = client(&n.client).unwrap();
            match on.put_one(q, format!("{q} via {}", n.id)) {
                Ok(ack) => {
                    unique(ack.id, format!("{q} via {}", n.id));
                    acked.insert((q.to_owned(), format!("{q} via {}", n.id)));
                }
                Err(e) => {
                    assert_eq!(e.code(), Some(ErrorCode::NOT_LEADER), "{e}");
                    assert!(e.to_string().contains("partition"), "{e}");
                    named += 1;
                }
            }
        }
    }
    assert!(
        named >= 6,
        "two of three nodes do not lead each queue's partition"
    );
    // Clients keep each queue's route: alternating between queues of
    // partitions led by three nodes, the blocking and the async client
    // each go straight to each queue's leader once they learnt it, on a
    // connection to each node opened once (without routes, each switch
    // would cost a `not_leader` round trip).
    let counted = |nodes: &[Node]| -> (u64, u64) {
        nodes
            .iter()
            .map(|n| {
                let stats = client(&n.client).unwrap().server_stats().unwrap();
                let stat = |name: &str| stats.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
                (
                    stat("connections_accepted").unwrap(),
                    stat("requests").unwrap(),
                )
            })
            .fold((0, 0), |(c, r), (dc, dr)| (c + dc, r + dr))
    };
    let before = counted(&nodes);
    let mut routed = Client::connect(options(&nodes[0].client)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let routed_async = rt
        .block_on(fila_client::AsyncClient::connect(options(&nodes[1].client)))
        .unwrap();
    for i in 0..10 {
        for q in ["alpha", "gamma", "orders"] {
            let body = format!("{q} routed {i}");
            unique(routed.put_one(q, body.clone()).unwrap().id, body.clone());
            acked.insert((q.to_owned(), body));
            let body = format!("{q} routed async {i}");
            let ack = rt.block_on(routed_async.put_one(q, body.clone())).unwrap();
            unique(ack.id, body.clone());
            acked.insert((q.to_owned(), body));
        }
    }
    let after = counted(&nodes);
    let (opened, asked) = (after.0 - before.0, after.1 - before.1);
    eprintln!("60 puts alternating over three leaders: {opened} connections, {asked} requests");
    // Three connections for the stats themselves, two for the clients'
    // first, and one to each other node for each client.
    assert!(opened <= 3 + 2 + 2 * 2, "{opened} connections for 60 puts");
    // The puts, the stats of both rounds, and a refusal for each queue's
    // first put from each client at most (without routes: about 120).
    assert!(asked <= 60 + 6 + 2 * 3, "{asked} requests for 60 puts");
    drop(routed_async);
    drop(rt);

    // The node leading the most partitions is killed.
    let leads = |id: u64| {
        status
            .partitions
            .iter()
            .filter(|p| p.leader == Some(id))
            .count()
    };
    let victim = (0..nodes.len())
        .max_by_key(|&i| leads(nodes[i].id))
        .unwrap();
    nodes[victim].kill();
    let killed = Instant::now();
    // Each queue takes three more puts (a put to a partition without a
    // leader yet fails, and is tried again).
    let mut after = vec![0; queues.len()];
    let deadline = Instant::now() + Duration::from_secs(30);
    while after.iter().any(|&n| n < 3) && Instant::now() < deadline {
        for (i, q) in queues.iter().enumerate() {
            let body = format!("{q} after {}", after[i]);
            if after[i] >= 3 {
                continue;
            }
            if let Ok(ack) = c.put_one(q, body.clone()) {
                unique(ack.id, body.clone());
                acked.insert((q.to_string(), body));
                after[i] += 1;
            }
        }
    }
    eprintln!(
        "every queue took 3 puts {:?} after node {} (leading {} partitions) was killed",
        killed.elapsed(),
        nodes[victim].id,
        leads(nodes[victim].id)
    );
    assert!(
        after.iter().all(|&n| n == 3),
        "the two left served: {after:?}"
    );
    agreed(&nodes);
    // Every acknowledged put is there.
    for q in queues {
        let present = payloads(&mut c, q);
        for (_, body) in acked.iter().filter(|(aq, _)| aq == q) {
            assert!(present.contains(body), "{q}: {body} was lost");
        }
    }
}

#[test]
fn a_data_directory_of_the_earlier_layout_is_refused_saying_so() {
    let dir = Dir::fresh("layout");
    let nodes = partitioned(&dir.0, 1, 1);
    std::fs::create_dir_all(nodes[0].data.join("raft").join("log")).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_fila-server"))
        .arg("--config")
        .arg(&nodes[0].config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a node on an earlier layout's data directory started");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut said = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut said).unwrap();
    assert!(!status.success());
    assert!(said.contains("earlier layout"), "{said}");
}

/// Waits (at most 30 s) until some live node's status satisfies `ok`.
fn seen(nodes: &[Node], what: &str, ok: impl Fn(&ClusterStatus) -> bool) -> ClusterStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = None;
    while Instant::now() < deadline {
        for n in nodes.iter().filter(|n| n.child.is_some()) {
            if let Some(s) = client(&n.client).and_then(|mut c| c.cluster_status().ok()) {
                if s.leader == Some(s.node_id) && ok(&s) {
                    return s;
                }
                last = Some(s);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("never saw {what}: {last:?}");
}

fn meta_voters(s: &ClusterStatus) -> Vec<u64> {
    s.members.iter().filter(|m| m.voter).map(|m| m.id).collect()
}

#[test]
fn the_metadata_group_votes_with_three_and_its_learner_moves() {
    let dir = Dir::fresh("meta");
    // Five replicas of each partition: every member holds one.
    let mut nodes = replicated(&dir.0, 3, (2, 5));
    for n in &mut nodes {
        n.start();
    }
    agreed_on(&nodes, 2);
    let mut c = of_all(&nodes);
    // A fourth node: a voter of each partition, a learner of the metadata
    // group (it votes with three of four).
    nodes.push(joiner(&dir.0, 4, (2, 5)));
    nodes[3].start();
    c.change_cluster(nodes[3].added()).unwrap();
    promote(&mut c, 4);
    let s = seen(&nodes, "four voters of each partition", |s| {
        s.members.len() == 4
            && s.partitions
                .iter()
                .all(|p| p.replicas.iter().filter(|r| r.voter).count() == 4)
    });
    assert_eq!(meta_voters(&s), [1, 2, 3], "{s:?}");
    // Its replicas move to a fifth node: a learner of the metadata group
    // in its place, a voter of each partition.
    nodes.push(joiner(&dir.0, 5, (2, 5)));
    nodes[4].start();
    c.change_cluster(nodes[4].moved_from(4)).unwrap();
    let s = seen(&nodes, "node 4's place taken by node 5", |s| {
        let voters = |p: &fila_client::PartitionStatus| {
            let mut ids: Vec<u64> = p
                .replicas
                .iter()
                .filter(|r| r.voter)
                .map(|r| r.id)
                .collect();
            ids.sort_unstable();
            ids
        };
        s.members.iter().map(|m| m.id).collect::<Vec<_>>() == [1, 2, 3, 5]
            && s.partitions.iter().all(|p| voters(p) == [1, 2, 3, 5])
    });
    assert_eq!(meta_voters(&s), [1, 2, 3], "{s:?}");
    // A voter of the metadata group removed: its learner is promoted.
    c.change_cluster(ClusterChange::Remove { id: 1 }).unwrap();
    seen(&nodes, "node 5 a voter of the metadata group", |s| {
        meta_voters(s) == [2, 3, 5]
    });
    // Node 1 led a partition and the metadata group: it handed them over
    // before it was removed, and is still running (a leader removing
    // itself tripped one of openraft's checks while the change was made,
    // and its process stopped).
    let exited = nodes[0].child.as_mut().unwrap().try_wait().unwrap();
    assert!(exited.is_none(), "the removed node stopped: {exited:?}");
    // It gave up its replica of each partition: their states are parked
    // (written to their snapshot files, none before: too few entries for
    // openraft's own snapshots, and dropped from its memory).
    let deadline = Instant::now() + Duration::from_secs(10);
    for p in ["p0", "p1"] {
        let snap = nodes[0].data.join("raft").join(p).join("state/state.snap");
        while !snap.exists() {
            assert!(Instant::now() < deadline, "{} never parked", snap.display());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    nodes[0].kill();
    let mut c = of_all(&nodes[1..]);
    c.create_queue("after", SettingsPatch::default()).unwrap();
    c.put_one("after", "still served").unwrap();
}

#[test]
fn a_node_added_before_the_map_is_made_holds_no_replica() {
    let dir = Dir::fresh("early");
    // Two partitions of three replicas over three nodes: each group made
    // on nodes 1, 2 and 3 as they start. A fourth node, started first, is
    // added as soon as they answer, before the metadata group's leader
    // made the map (it does at its first look, within 100 ms of its
    // election): the map still places each partition where its group was
    // made, and the fourth node holds no replica. (A map made with it
    // placed partition 1 on nodes 2, 3 and 4, and added node 4 to that
    // group as a learner.)
    let mut nodes = partitioned(&dir.0, 3, 2);
    nodes.push(joiner(&dir.0, 4, (2, 3)));
    nodes[3].start();
    for n in &mut nodes[..3] {
        n.start();
    }
    let mut c = of_all(&nodes[..3]);
    c.change_cluster(nodes[3].added()).unwrap();
    agreed_on(&nodes, 2);
    let s = seen(&nodes, "node 4 a member", |s| {
        s.members.iter().any(|m| m.id == 4) && s.partitions.len() == 2
    });
    let ids = |p: &fila_client::PartitionStatus| {
        let mut ids: Vec<u64> = p.replicas.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        ids
    };
    for p in &s.partitions {
        assert_eq!(ids(p), [1, 2, 3], "{s:?}");
    }
    // Node 4's status shows the map's replicas of each partition (it
    // holds none): the same, once its copy of the map is made.
    let deadline = Instant::now() + Duration::from_secs(30);
    let four = loop {
        let s = client(&nodes[3].client).and_then(|mut c| c.cluster_status().ok());
        if let Some(s) = s.filter(|s| s.partitions.iter().all(|p| !p.replicas.is_empty())) {
            break s;
        }
        assert!(Instant::now() < deadline, "node 4 never heard of the map");
        std::thread::sleep(Duration::from_millis(20));
    };
    for p in &four.partitions {
        assert_eq!(ids(p), [1, 2, 3], "{four:?}");
    }
}

#[test]
fn each_replica_takes_a_snapshot_once_its_log_holds_16_mib() {
    let dir = Dir::fresh("snap");
    let mut nodes = partitioned(&dir.0, 3, 1);
    for n in &mut nodes {
        n.start();
    }
    agreed_on(&nodes, 1);
    let snaps: Vec<_> = nodes
        .iter()
        .map(|n| n.data.join("raft/p0/state/state.snap"))
        .collect();
    let mut c = of_all(&nodes);
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = c.create_queue("big", SettingsPatch::default()) {
        assert!(Instant::now() < deadline, "no queue could be made: {e}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // 17 MiB of messages: more than the least a snapshot waits for
    // (fila_cluster::SNAPSHOT_LOG_MIN), none while the log holds less
    // (60 of them: 14.6 MiB).
    let body = vec![b'x'; 250 << 10];
    for i in 0..70 {
        if i <= 60 {
            assert!(
                snaps.iter().all(|s| !s.exists()),
                "a snapshot after {i} puts"
            );
        }
        c.put_one("big", body.clone()).unwrap();
    }
    // Each replica takes its own, within the view's next looks.
    let deadline = Instant::now() + Duration::from_secs(30);
    for s in &snaps {
        while !s.exists() {
            assert!(Instant::now() < deadline, "{} never made", s.display());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // It holds the messages put before it: 15 MiB and more.
    for s in &snaps {
        let len = std::fs::metadata(s).unwrap().len();
        assert!(len > 15 << 20, "{}: {len} bytes", s.display());
    }
}
