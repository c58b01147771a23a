//! A cluster whose partitions keep fewer replicas than it has members
//! (docs/cluster.md, "Replicas"): four `fila-server` processes, four
//! partitions of three replicas each, placed by the map rotated over the
//! members and led one by each node; a node that holds no replica of a
//! queue's partition names that partition's leader (learnt from one of
//! its replicas), lists and counts every partition's queues; one node
//! killed with SIGKILL, every queue served by the replicas left; the dead
//! node removed, its replicas placed on the member holding fewest (one of
//! them a node whose id is below the partition's highest); a fifth node
//! added holds nothing until node 4's replicas move to it. Every
//! acknowledged put is there at the end.

mod cluster_harness;
mod common;

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

use cluster_harness::{client, joiner, of_all, options, payloads, put_all, replicated, Dir, Node};
use fila_client::{Client, ClusterChange, ClusterStatus, ErrorCode, SettingsPatch};

/// Four partitions of three replicas each.
const SHAPE: (usize, usize) = (4, 3);

/// Each partition's voters and leader, as its leader sees them (a node
/// holding no replica of a partition does not know its members).
fn held(nodes: &[Node]) -> Vec<(BTreeSet<u64>, Option<u64>)> {
    let views: Vec<ClusterStatus> = nodes
        .iter()
        .filter(|n| n.child.is_some())
        .filter_map(|n| client(&n.client)?.cluster_status().ok())
        .collect();
    (0..SHAPE.0)
        .map(|p| {
            let led = views
                .iter()
                .find(|v| v.partitions.get(p).and_then(|p| p.leader) == Some(v.node_id));
            match led {
                Some(v) => (
                    v.partitions[p]
                        .replicas
                        .iter()
                        .filter(|r| r.voter)
                        .map(|r| r.id)
                        .collect(),
                    Some(v.node_id),
                ),
                None => (BTreeSet::new(), None),
            }
        })
        .collect()
}

/// Waits (at most 60 s) until each partition's voters are `want`'s.
fn held_by(nodes: &[Node], what: &str, want: &[&[u64]]) -> Vec<(BTreeSet<u64>, Option<u64>)> {
    let want: Vec<BTreeSet<u64>> = want.iter().map(|w| w.iter().copied().collect()).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = held(nodes);
        if got.iter().map(|(v, _)| v).eq(want.iter()) {
            return got;
        }
        assert!(Instant::now() < deadline, "never saw {what}: {got:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every acknowledged put is in its queue, and nothing else.
fn all_there(c: &mut Client, queues: &[String], acked: &HashSet<(String, String)>) {
    for q in queues {
        let present = payloads(c, q);
        let want: HashSet<String> = acked
            .iter()
            .filter(|(aq, _)| aq == q)
            .map(|(_, b)| b.clone())
            .collect();
        assert_eq!(present, want, "{q}");
    }
}

#[test]
fn partitions_of_three_replicas_over_four_nodes_serve_lose_a_node_and_move() {
    let dir = Dir::fresh("rf");
    let mut nodes = replicated(&dir.0, 4, SHAPE);
    for n in &mut nodes {
        n.start();
    }
    // Partition p on three members from the p-th on, led by the first.
    let first = held_by(
        &nodes,
        "the first replicas",
        &[&[1, 2, 3], &[2, 3, 4], &[1, 3, 4], &[1, 2, 4]],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while held(&nodes)
        .iter()
        .map(|(_, l)| *l)
        .ne([1, 2, 3, 4].map(Some))
    {
        assert!(
            Instant::now() < deadline,
            "the leaderships never spread: {first:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // One queue in each partition (the one holding fewest takes the next).
    let mut c = of_all(&nodes);
    let queues: Vec<String> = (0..4).map(|i| format!("q{i}")).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = c.create_queue(&queues[0], SettingsPatch::default()) {
        assert!(Instant::now() < deadline, "no queue could be made: {e}");
        std::thread::sleep(Duration::from_millis(100));
    }
    for q in &queues[1..] {
        c.create_queue(q, SettingsPatch::default()).unwrap();
    }
    // A node that does not lead a queue's partition names its leader —
    // also a node holding no replica of it (node 4 of partition 0, node 1
    // of 1, node 2 of 2, node 3 of 3), which asks one of its replicas.
    let mut acked = HashSet::new();
    for (p, q) in queues.iter().enumerate() {
        for n in &nodes {
            let mut on = client(&n.client).unwrap();
            let body = format!("{q} via {}", n.id);
            match on.put_one(q, body.clone()) {
                Ok(_) => {
                    assert_eq!(n.id, p as u64 + 1, "{q} put on node {}", n.id);
                    acked.insert((q.clone(), body));
                }
                Err(e) => {
                    assert_eq!(e.code(), Some(ErrorCode::NOT_LEADER), "{e}");
                    assert!(
                        e.to_string().contains(&nodes[p].client),
                        "node {}: {e}",
                        n.id
                    );
                }
            }
        }
    }
    assert_eq!(acked.len(), 4, "each queue's leader took its put");
    // Every node lists and counts every partition's queues, those of the
    // partition it holds no replica of too.
    for n in &nodes {
        let mut on = client(&n.client).unwrap();
        let mut names = on.list_queues("").unwrap();
        names.sort();
        assert_eq!(names, queues, "node {}", n.id);
        let stats = on.server_stats().unwrap();
        let stat = |name: &str| stats.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
        assert_eq!(stat("queues"), Some(4), "node {}: {stats:?}", n.id);
        // Each node's status names every partition's leader (of one it
        // holds no replica of, asked of those once a second).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let s = on.cluster_status().unwrap();
            let leaders: Vec<Option<u64>> = s.partitions.iter().map(|p| p.leader).collect();
            if leaders == [1, 2, 3, 4].map(Some) {
                break;
            }
            assert!(Instant::now() < deadline, "node {}: {s:?}", n.id);
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // Through a following client given one node, every queue is served.
    for n in &nodes {
        let mut following = Client::connect(options(&n.client)).unwrap();
        put_all(
            &mut following,
            &queues,
            &format!("following {}", n.id),
            2,
            &mut acked,
        );
    }

    // Node 2 is killed: partitions 0, 1 and 3 lose a replica (and 1 its
    // leader); the two replicas left of each serve.
    nodes[1].kill();
    let killed = Instant::now();
    let mut c = of_all(&nodes);
    put_all(&mut c, &queues, "after the kill", 3, &mut acked);
    eprintln!(
        "every queue served {:?} after node 2 was killed",
        killed.elapsed()
    );
    all_there(&mut c, &queues, &acked);

    // Node 2 removed for good: each of its replicas goes to the member
    // holding fewest — node 1 takes partition 1's (whose members were 2,
    // 3 and 4: an id below theirs, holding its own log and vote).
    c.change_cluster(ClusterChange::Remove { id: 2 }).unwrap();
    held_by(
        &nodes,
        "node 2's replicas placed anew",
        &[&[1u64, 3, 4] as &[u64]; 4],
    );
    put_all(&mut c, &queues, "after the removal", 2, &mut acked);
    all_there(&mut c, &queues, &acked);

    // A fifth node joins: every partition has its three replicas, so it
    // holds none (a member of the metadata group only) ...
    nodes.push(joiner(&dir.0, 5, SHAPE));
    nodes[4].start();
    c.change_cluster(nodes[4].added()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = client(&nodes[4].client).and_then(|mut c| c.cluster_status().ok());
        if s.as_ref()
            .is_some_and(|s| s.members.iter().any(|m| m.id == 5))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 5 never saw itself a member: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    held_by(
        &nodes,
        "nothing placed on node 5",
        &[&[1u64, 3, 4] as &[u64]; 4],
    );
    // ... and it serves every queue through the partitions' leaders.
    let mut on5 = Client::connect(options(&nodes[4].client)).unwrap();
    put_all(&mut on5, &queues, "through node 5", 1, &mut acked);
    // Node 4's replicas move to it, in one command.
    let moved = Instant::now();
    c.change_cluster(nodes[4].moved_from(4)).unwrap();
    eprintln!("node 4's four replicas moved in {:?}", moved.elapsed());
    held_by(
        &nodes,
        "node 4's replicas on node 5",
        &[&[1u64, 3, 5] as &[u64]; 4],
    );
    assert!(nodes[3].stop());
    let mut c = of_all(&nodes);
    put_all(&mut c, &queues, "after the move", 2, &mut acked);
    all_there(&mut c, &queues, &acked);
}
