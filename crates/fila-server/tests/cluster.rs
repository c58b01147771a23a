//! A cluster of three `fila-server` processes on loopback (docs/cluster.md):
//! the cluster is held to the nodes' `max_queues` and the server's stats
//! are the partition's, on any node; a follower answers `not_leader` naming the leader's client address; every
//! node names the same partition leader in its cluster status; a client of a follower
//! follows to the leader; a client given every node's address goes on
//! through the leader's kill (the call that finds it gone fails, the next
//! reaches the new leader); leases the leader granted hold after it is killed
//! and their receipts delete on the next leader; the
//! leader is killed with SIGKILL, another takes over, the killed node
//! comes back on its data directory, the next leader is paused with
//! SIGSTOP (another takes over; woken, it acknowledges nothing more as a
//! leader), then the leader is killed too
//! and the two left (the one that came back among them) serve; at the end
//! every acknowledged put that was not acknowledged deleted is there, no
//! acknowledged delete came back and nothing is there that was never put;
//! a retry policy's waits hold on the next leader.

mod cluster_harness;
mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use cluster_harness::{
    client, cluster, on_leader, on_leader_but, present, signal, Dir, PARKED_MAX, QUEUES_MAX,
};
use fila_client::{Client, ClientOptions, ErrorCode, SettingsPatch};

#[test]
fn three_processes_keep_what_they_acknowledged_through_the_leaders_kill() {
    let dir = Dir::fresh("procs");
    let mut nodes = cluster(&dir.0, 3);
    for n in &mut nodes {
        n.start();
    }
    let (leader, _) = on_leader(&nodes, Duration::from_secs(30), |c| {
        c.create_queue("jobs", SettingsPatch::default())
    });
    // The partition is held to the nodes' configured limits: past
    // `max_queues`, a create is refused.
    let mut on = client(&nodes[leader].client).unwrap();
    for i in 1..QUEUES_MAX {
        on.create_queue(&format!("more-{i}"), SettingsPatch::default())
            .unwrap();
    }
    let err = on
        .create_queue("one-too-many", SettingsPatch::default())
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::RESOURCE_EXHAUSTED), "{err}");
    // The server's stats are the partition's, from its leader.
    let stats = on.server_stats().unwrap();
    let stat = |name: &str| stats.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
    assert_eq!(stat("queues"), Some(QUEUES_MAX), "{stats:?}");
    assert_eq!(stat("max_queues"), Some(QUEUES_MAX), "{stats:?}");
    waiting_receives_count_against_max_parked(&nodes[leader].client);
    a_long_poll_holds_up_nothing_sent_after_it(&nodes[leader].client);
    // A follower answers the same stats (gathered from the leader), and
    // names the leader to a put.
    let follower = (leader + 1) % 3;
    let stats = client(&nodes[follower].client)
        .unwrap()
        .server_stats()
        .unwrap();
    let stat = |name: &str| stats.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
    assert_eq!(stat("queues"), Some(QUEUES_MAX), "{stats:?}");
    let err = client(&nodes[follower].client)
        .unwrap()
        .put_one("jobs", "to a follower")
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::NOT_LEADER), "{err}");
    assert!(
        err.to_string().contains(&nodes[leader].client),
        "{err} names {}",
        nodes[leader].client
    );
    // Every node names the same leader; the leader knows how far each
    // member has taken the log.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let views: Vec<_> = nodes
            .iter()
            .map(|n| client(&n.client).unwrap().cluster_status().unwrap())
            .collect();
        let agreed = views
            .iter()
            .all(|v| v.partitions.len() == 1 && v.partitions[0].leader == Some(nodes[leader].id));
        let caught_up = views[leader].members.len() == 3
            && views[leader].partitions.first().is_some_and(|p| {
                p.replicas.len() == 3
                    && p.replicas
                        .iter()
                        .all(|r| r.voter && r.matched_index.is_some())
            });
        if agreed && caught_up {
            // A cluster node runs only threads ARCHITECTURE.md names,
            // the cluster's among them.
            let pid = nodes[leader].child.as_ref().expect("running").id();
            let threads = common::assert_threads_documented(pid);
            for name in [
                "fila-loop-0",
                "fila-cluster",
                "fila-cluster-rt",
                "fila-raft-sync",
            ] {
                assert!(threads.iter().any(|t| t == name), "{threads:?}");
            }
            // The node's groups (the metadata group, the partition) share
            // one Raft log, synced by one thread.
            let syncs = threads.iter().filter(|t| *t == "fila-raft-sync").count();
            assert_eq!(syncs, 1, "{threads:?}");
            assert_eq!(views[follower].node_id, nodes[follower].id);
            assert!(views[leader]
                .members
                .iter()
                .any(|m| m.client == nodes[follower].client));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the views never agreed: {views:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut attempted = HashSet::new();
    let mut acked = HashSet::new();
    let mut deleted = HashSet::new();
    // A client that follows: connected to the follower, its puts (one, and
    // a batch) go to the leader, and so does it.
    let mut follows = Client::connect(ClientOptions::new(nodes[follower].client.clone())).unwrap();
    follows.put_one("jobs", "followed").unwrap();
    assert_eq!(follows.addr(), nodes[leader].client);
    let mut follows = Client::connect(ClientOptions::new(nodes[follower].client.clone())).unwrap();
    let batch: Vec<String> = (0..30).map(|i| format!("batch-{i}")).collect();
    let payloads: Vec<bytes::Bytes> = batch.iter().map(|b| b.clone().into()).collect();
    for r in follows.put_payloads("jobs", &payloads).unwrap() {
        r.unwrap();
    }
    assert_eq!(follows.addr(), nodes[leader].client);
    for body in batch.into_iter().chain(["followed".to_owned()]) {
        attempted.insert(body.clone());
        acked.insert(body);
    }
    // The async client follows too.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let follower_addr = nodes[follower].client.clone();
    let (async_addr, async_bodies) = rt.block_on(async move {
        let c = fila_client::AsyncClient::connect(ClientOptions::new(follower_addr))
            .await
            .unwrap();
        c.put_one("jobs", "async-followed").await.unwrap();
        let bodies: Vec<String> = (0..25).map(|i| format!("async-batch-{i}")).collect();
        let payloads: Vec<bytes::Bytes> = bodies.iter().map(|b| b.clone().into()).collect();
        for r in c.put_payloads("jobs", &payloads).await.unwrap() {
            r.unwrap();
        }
        (c.addr(), bodies)
    });
    assert_eq!(async_addr, nodes[leader].client);
    for body in async_bodies
        .into_iter()
        .chain(["async-followed".to_owned()])
    {
        attempted.insert(body.clone());
        acked.insert(body);
    }
    let mut c = client(&nodes[leader].client).unwrap();
    for i in 0..100 {
        let body = format!("m{i}");
        attempted.insert(body.clone());
        if c.put_one("jobs", body.clone()).is_ok() {
            acked.insert(body);
        }
    }
    let got = c.receive("jobs", 10, Some(0)).unwrap();
    let receipts: Vec<_> = got.iter().filter_map(|m| m.receipt).collect();
    for (m, r) in got.iter().zip(c.delete("jobs", &receipts).unwrap()) {
        if r.is_ok() {
            deleted.insert(String::from_utf8_lossy(&m.payload).into_owned());
        }
    }
    assert_eq!(deleted.len(), 10);
    // Five more leased (for the queue's 30 s) and not deleted yet when the
    // leader dies.
    let held = c.receive("jobs", 5, Some(0)).unwrap();
    assert_eq!(held.len(), 5);
    // A client given every node, talking to the leader.
    let list: Vec<&str> = nodes.iter().map(|n| n.client.as_str()).collect();
    let mut every = Client::connect(ClientOptions::new(list.join(","))).unwrap();
    every.put_one("jobs", "via the list").unwrap();
    assert_eq!(every.addr(), nodes[leader].client);
    attempted.insert("via the list".to_owned());
    acked.insert("via the list".to_owned());
    retries_before_the_kill(&mut c);
    // The leader dies.
    nodes[leader].kill();
    let killed_at = Instant::now();
    let (new_leader, _) = on_leader(&nodes, Duration::from_secs(30), |c| {
        c.put_one("jobs", "after the kill")
    });
    eprintln!(
        "failover: node {} leads; the first put after the kill was acknowledged {:?} after it",
        nodes[new_leader].id,
        killed_at.elapsed()
    );
    attempted.insert("after the kill".into());
    acked.insert("after the kill".into());
    // The client given every node finds its node gone (that call fails:
    // nothing is resent), reconnects to another and follows it to the new
    // leader.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut lost = false;
    loop {
        attempted.insert("after the kill, via the list".into());
        match every.put_one("jobs", "after the kill, via the list") {
            Ok(_) => break,
            Err(fila_client::ClientError::ConnectionLost(_)) => lost = true,
            Err(e) => assert!(Instant::now() < deadline, "{e}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(lost, "the call that found the node gone failed");
    assert_eq!(every.addr(), nodes[new_leader].client);
    acked.insert("after the kill, via the list".into());
    let mut c = client(&nodes[new_leader].client).unwrap();
    retries_after_the_kill(&mut c);
    // The leases the dead leader granted hold on the new one: none of those
    // messages is given again, and their receipts delete them there.
    let held_bodies: HashSet<String> = held
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect();
    let others = c.receive("jobs", 20, Some(0)).unwrap();
    assert!(
        others
            .iter()
            .all(|m| !held_bodies.contains(&*String::from_utf8_lossy(&m.payload))),
        "a message leased by the old leader was given again within its lease"
    );
    let receipts: Vec<_> = held.iter().filter_map(|m| m.receipt).collect();
    for (m, r) in held.iter().zip(c.delete("jobs", &receipts).unwrap()) {
        r.unwrap_or_else(|e| panic!("the old leader's receipt was refused: {e}"));
        deleted.insert(String::from_utf8_lossy(&m.payload).into_owned());
    }

    for i in 100..150 {
        let body = format!("m{i}");
        attempted.insert(body.clone());
        if c.put_one("jobs", body.clone()).is_ok() {
            acked.insert(body);
        }
    }
    // It comes back on its data directory; then the node that leads now
    // dies too: the two left (the one that came back among them) are a
    // quorum and serve everything.
    nodes[leader].start();
    let (now_leading, _) = on_leader(&nodes, Duration::from_secs(30), |c| {
        c.put_one("jobs", "after the return")
    });
    attempted.insert("after the return".into());
    acked.insert("after the return".into());
    // The leader is paused (SIGSTOP): another takes over while it sleeps;
    // woken (SIGCONT), it takes nothing more as a leader — its client is
    // answered not_leader once it hears of the new term — and loses
    // nothing.
    let mut paused = client(&nodes[now_leading].client).unwrap();
    signal(&nodes[now_leading], "-STOP");
    let stopped_at = Instant::now();
    // (Asked of the two others: one asked of the sleeping node waits for
    // the client's timeout.)
    let (during, _) = on_leader_but(&nodes, now_leading, Duration::from_secs(30), |c| {
        c.put_one("jobs", "while it slept")
    });
    eprintln!(
        "failover: node {} leads; the first put after the SIGSTOP was acknowledged {:?} after it",
        nodes[during].id,
        stopped_at.elapsed()
    );
    assert_ne!(during, now_leading);
    attempted.insert("while it slept".into());
    acked.insert("while it slept".into());
    signal(&nodes[now_leading], "-CONT");
    let woke = Instant::now();
    loop {
        attempted.insert("to the woken one".into());
        match paused.put_one("jobs", "to the woken one") {
            Err(e) if e.code() == Some(ErrorCode::NOT_LEADER) => break,
            // Made before it heard (it cannot be: the new leader's term
            // refuses its entries) or unknown: either way not acknowledged
            // here, unless it was.
            Ok(_) => panic!("a deposed leader acknowledged a put"),
            Err(_) => {}
        }
        assert!(
            woke.elapsed() < Duration::from_secs(30),
            "the woken leader never stepped down"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let now_leading = during;
    nodes[now_leading].kill();
    let (last, end) = on_leader(&nodes, Duration::from_secs(30), present);
    assert_ne!(last, now_leading);
    for body in &acked {
        assert!(
            end.contains(body) || deleted.contains(body),
            "acknowledged {body} is gone"
        );
    }
    for body in &deleted {
        assert!(!end.contains(body), "deleted {body} came back");
    }
    for body in &end {
        assert!(attempted.contains(body), "{body} was never put");
    }
    assert_eq!(acked.len(), 212, "every put was acknowledged");
}

/// On the leader before it is killed: queue `more-1` gets a retry policy
/// whose waits are an hour; of its two messages one is released as failed
/// (its wait a replicated record), the other leased for 2 s (a lease whose
/// end no record tells: it runs out on the next leader).
fn retries_before_the_kill(c: &mut Client) {
    let policy = SettingsPatch {
        retry_initial_ms: Some(3_600_000),
        retry_max_ms: Some(3_600_000),
        ..SettingsPatch::default()
    };
    c.update_queue("more-1", policy).unwrap();
    c.put_one("more-1", "failed").unwrap();
    c.put_one("more-1", "runs out").unwrap();
    let got = c
        .receive_with(fila_client::ReceiveRef {
            queue: "more-1",
            dlq: false,
            max_messages: 2,
            visibility_ms: Some(2_000),
            wait_ms: Some(0),
            channel: None,
            fields: fila_client::Fields::ALL,
        })
        .unwrap();
    assert_eq!(got.len(), 2);
    let failed = got.iter().find(|m| m.payload == "failed").unwrap();
    let queue = fila_client::QueueRef {
        name: "more-1".into(),
        dlq: false,
    };
    c.release(&queue, &[failed.receipt.unwrap()]).unwrap()[0]
        .as_ref()
        .unwrap();
}

/// On the next leader: both messages of `more-1` wait for their retry —
/// the released one by the record the dead leader replicated, the other
/// once the lease the dead leader granted runs out here — and neither is
/// given.
fn retries_after_the_kill(c: &mut Client) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // (The queue's third message, "wake", is leased for 30 s.)
        let st = c.stats("more-1").unwrap();
        assert_eq!(
            st.visible, 0,
            "a message came back before its retry: {st:?}"
        );
        if st.delayed == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "{st:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let given = c.receive("more-1", 10, Some(0)).unwrap();
    assert!(
        given.iter().all(|m| m.payload == "wake"),
        "given before its retry: {given:?}"
    );
}

/// Long polls on one connection hold up none of the requests sent after
/// them on it: each holds only the room its answer could need (as a
/// receive parked on a single node does), not the connection's whole
/// output room until it is answered.
fn a_long_poll_holds_up_nothing_sent_after_it(leader: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let addr = leader.to_owned();
    rt.block_on(async move {
        let connect = || fila_client::AsyncClient::connect(ClientOptions::new(addr.clone()));
        let c = std::sync::Arc::new(connect().await.unwrap());
        let stats = connect().await.unwrap();
        // Two long polls (the nodes' `max_parked`) on the one connection,
        // each on a queue that stays empty.
        let polls: Vec<_> = (1..=2)
            .map(|i| {
                let c = c.clone();
                tokio::spawn(async move { c.receive(&format!("more-{i}"), 1, Some(3_000)).await })
            })
            .collect();
        // Both reached the leader and wait there.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let s = stats.server_stats().await.unwrap();
            let parked = s
                .iter()
                .find(|(k, _)| k == "receives_parked")
                .map(|(_, v)| *v);
            if parked == Some(PARKED_MAX) {
                break;
            }
            assert!(Instant::now() < deadline, "{parked:?} waiting");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Sent after them on the same connection: answered while they wait.
        for i in 0..10 {
            c.put_one("more-3", format!("behind-the-polls-{i}"))
                .await
                .unwrap();
        }
        let got = c.receive("more-3", 1, Some(0)).await.unwrap();
        assert_eq!(got.len(), 1, "a receive behind the polls is answered");
        for p in &polls {
            assert!(!p.is_finished(), "a long poll ended before its wait");
        }
        for p in polls {
            assert!(p.await.unwrap().unwrap().is_empty());
        }
    });
}

/// Receives waiting for messages on a cluster node count against its
/// `max_parked`, as parked receives do on a single node: past it one is
/// refused `resource_exhausted`, and a put is answered meanwhile and
/// wakes a waiting one.
fn waiting_receives_count_against_max_parked(leader: &str) {
    let mut on = client(leader).unwrap();
    let parked = |c: &mut Client| {
        let stats = c.server_stats().unwrap();
        stats
            .iter()
            .find(|(k, _)| k == "receives_parked")
            .map(|(_, v)| *v)
    };
    let waiters: Vec<_> = (0..PARKED_MAX)
        .map(|_| {
            let addr = leader.to_owned();
            std::thread::spawn(move || {
                let mut c = client(&addr).unwrap();
                c.receive("more-1", 1, Some(4_000)).unwrap()
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    while parked(&mut on) != Some(PARKED_MAX) {
        assert!(Instant::now() < deadline, "{:?} waiting", parked(&mut on));
        std::thread::sleep(Duration::from_millis(20));
    }
    let err = on.receive("more-1", 1, Some(4_000)).unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::RESOURCE_EXHAUSTED), "{err}");
    assert!(err.to_string().contains("max_parked"), "{err}");
    // A receive that does not wait is not counted.
    assert!(on.receive("more-1", 1, Some(0)).unwrap().is_empty());
    on.put_one("more-1", "wake").unwrap();
    let mut woken = 0;
    for w in waiters {
        let got = w.join().unwrap();
        woken += got.len();
    }
    assert_eq!(woken, 1, "one waiting receive took the put");
    assert_eq!(parked(&mut on), Some(0));
}
