//! Both Rust clients keep putting while a three-node cluster's partition
//! is handed from node to node (docs/cluster.md, docs/clients.md): each
//! follows `not_leader` to the new leader — past the moment when the old
//! leader and its successor name each other — so no put is refused; one
//! whose outcome a lost leadership left unknown is sent again with its
//! deduplication id. At the end every acknowledged put is there once. A
//! receive waiting on the leader (parked in the engine its loop keeps)
//! when the first hand-over comes is answered at once: `not_leader`
//! naming the next leader, which has the message put after it; receives
//! parked on the leader by a connection that then closes end there at
//! once, as on a single node; and one parked on the leader when it is
//! stopped with SIGTERM is ended at once, the leader stopping well within
//! its grace.

mod cluster_harness;
mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster_harness::{client, cluster, of_all, on_leader, options, present, Dir, Node};
use fila_client::{AsyncClient, Client, ClientError, ClusterChange, ErrorCode, SettingsPatch};

/// Leadership hand-overs made while the clients put.
const HANDOVERS: usize = 4;
/// Puts acknowledged after each hand-over before the next.
const PUTS_BETWEEN: usize = 30;

/// The node leading partition 0, as some live node's status says.
fn partition_leader(nodes: &[Node]) -> Option<u64> {
    nodes.iter().find_map(|n| {
        client(&n.client)?
            .cluster_status()
            .ok()?
            .partitions
            .first()?
            .leader
    })
}

/// Puts `<tag>-<n>` with itself as deduplication id through `put` until
/// `stop`, each again while its outcome is unknown; answers what was
/// acknowledged (or the first error).
fn puts(
    tag: &str,
    stop: &AtomicBool,
    acked: &AtomicUsize,
    mut put: impl FnMut(&str) -> Result<(), ClientError>,
) -> Result<Vec<String>, ClientError> {
    let mut done = Vec::new();
    for n in 0.. {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let payload = format!("{tag}-{n}");
        loop {
            match put(&payload) {
                Err(e) if e.code() == Some(ErrorCode::OUTCOME_UNKNOWN) => continue,
                r => {
                    r?;
                    break;
                }
            }
        }
        done.push(payload);
        acked.fetch_add(1, Ordering::AcqRel);
    }
    Ok(done)
}

/// [`puts`] through the blocking client.
fn blocking_puts(
    addrs: String,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
) -> Result<Vec<String>, ClientError> {
    let mut c = Client::connect(options(&addrs))?;
    puts("blocking", &stop, &acked, |p| {
        c.put_idempotent("jobs", p.to_owned(), p).map(drop)
    })
}

/// [`puts`] through the async client.
fn async_puts(
    addrs: String,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
) -> Result<Vec<String>, ClientError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let c = rt.block_on(AsyncClient::connect(options(&addrs)))?;
    puts("async", &stop, &acked, |p| {
        rt.block_on(c.put_idempotent("jobs", p.to_owned(), p))
            .map(drop)
    })
}

#[test]
fn both_clients_keep_putting_while_the_leadership_moves() {
    let dir = Dir::fresh("handover");
    let mut nodes = cluster(&dir.0, 3);
    for n in &mut nodes {
        n.start();
    }
    let (first, _) = on_leader(&nodes, Duration::from_secs(30), |c| {
        c.create_queue("jobs", SettingsPatch::default())?;
        c.create_queue("gone", SettingsPatch::default())?;
        c.create_queue("waits", SettingsPatch::default())
    });
    let mut admin = of_all(&nodes);
    // A receive that waits on the leader, on an empty queue: parked there
    // before the first hand-over.
    let got = parked_receive(&nodes[first]);

    let addrs: Vec<&str> = nodes.iter().map(|n| n.client.as_str()).collect();
    let addrs = addrs.join(",");
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(std::sync::Mutex::new(None));
    let putters = [blocking_puts, async_puts].map(|puts| {
        let (addrs, stop, acked) = (addrs.clone(), stop.clone(), acked.clone());
        let failed = failed.clone();
        std::thread::spawn(move || {
            let done = puts(addrs, stop, acked);
            if let Err(e) = &done {
                *failed.lock().unwrap() = Some(e.to_string());
            }
            done
        })
    });

    let deadline = Instant::now() + Duration::from_secs(60);
    let wait_for_puts = |from: usize| {
        while acked.load(Ordering::Acquire) < from + PUTS_BETWEEN {
            let e: Option<String> = failed.lock().unwrap().clone();
            if let Some(e) = e {
                panic!("a put failed: {e}");
            }
            assert!(Instant::now() < deadline, "the clients stopped putting");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    wait_for_puts(0);
    // The first hand-over (of the leader the receive waits on) is
    // checked for it; the leadership may come back to that node later.
    let mut handed_over = false;
    for _ in 0..HANDOVERS {
        let leader = loop {
            if let Some(l) = partition_leader(&nodes) {
                break l;
            }
            assert!(Instant::now() < deadline, "no leader");
            std::thread::sleep(Duration::from_millis(10));
        };
        // The leader hands every leadership it holds to another voter.
        let mut on_leader = client(&nodes[leader as usize - 1].client).unwrap();
        on_leader
            .change_cluster(ClusterChange::TransferLeader { to: None })
            .unwrap();
        while partition_leader(&nodes).is_none_or(|l| l == leader) {
            assert!(
                Instant::now() < deadline,
                "node {leader} kept the leadership"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        if leader as usize - 1 == first && !handed_over {
            handed_over = true;
            // The waiting receive does not outlive the leadership it
            // waited on: it runs again and is answered `not_leader`
            // naming the next leader (long before its wait ends), or
            // reaches it and gets what is put there.
            admin.put_one("waits", "after the hand-over").unwrap();
            let answer = got
                .recv_timeout(Duration::from_secs(10))
                .expect("the waiting receive was answered");
            let answer = match answer {
                Ok(ms) => ms,
                Err(e) => {
                    assert_eq!(e.code(), Some(ErrorCode::NOT_LEADER), "{e}");
                    admin.receive("waits", 1, Some(5_000)).unwrap()
                }
            };
            assert_eq!(answer.len(), 1, "{answer:?}");
            assert_eq!(&answer[0].payload[..], b"after the hand-over");
        }
        wait_for_puts(acked.load(Ordering::Acquire));
    }
    assert!(
        handed_over,
        "the waiting receive's leader never handed over"
    );
    stop.store(true, Ordering::Release);

    let mut want = HashSet::new();
    for t in putters {
        let done = t.join().unwrap().expect("no put refused");
        want.extend(done);
    }
    let got = present(&mut admin).unwrap();
    assert_eq!(got, want, "every acknowledged put, and nothing else");
    let stored = admin.stats("jobs").unwrap().visible;
    assert_eq!(stored, want.len() as u64, "none stored twice");

    // Receives parked in the leader's engine by connections that then
    // close are cancelled there at once (long before their wait of 20 s
    // ends): they hold none of the node's room for parked receives (all
    // of it, `max_parked`, here: the receive parked below needs some),
    // and a message put next is leased to nobody.
    let leader = partition_leader(&nodes).expect("a leader") as usize - 1;
    parked_then_closed(&nodes[leader], cluster_harness::PARKED_MAX);
    admin.put_one("gone", "after the close").unwrap();
    let taken = admin.receive("gone", 1, Some(0)).unwrap();
    assert_eq!(taken.len(), 1, "the message went to a closed connection");

    // A leader stopped with SIGTERM while a receive is parked in its
    // engine ends that receive (with no messages) and stops, well before
    // its shutdown grace (10 s) is over.
    let ended = parked_receive(&nodes[leader]);
    let stopping = Instant::now();
    assert!(nodes[leader].stop(), "the leader ended on SIGTERM");
    let took = stopping.elapsed();
    assert!(took < Duration::from_secs(8), "the stop took {took:?}");
    let answer = ended
        .recv_timeout(Duration::from_secs(5))
        .expect("the parked receive was answered");
    if let Ok(ms) = answer {
        assert!(ms.is_empty(), "{ms:?}");
    }
}

/// A receive of up to 20 s on the empty queue `waits`, sent to `node` from
/// a thread of its own and waiting there (the node counts it parked):
/// its answer comes through the channel.
fn parked_receive(
    node: &Node,
) -> std::sync::mpsc::Receiver<Result<Vec<fila_client::Message>, ClientError>> {
    let (tx, answer) = std::sync::mpsc::channel();
    let addr = node.client.clone();
    std::thread::spawn(move || {
        let mut c = client(&addr).unwrap();
        let _ = tx.send(c.receive("waits", 1, Some(20_000)));
    });
    parked_on(node, 1);
    answer
}

/// Parks a receive of up to 20 s on the empty queue `gone` from each of
/// `n` connections to `node`, then closes them: the node must count none
/// parked within 10 s.
fn parked_then_closed(node: &Node, n: u64) {
    use std::io::Write;
    let mut out = bytes::BytesMut::new();
    let hello = fila_proto::Request::Hello {
        client: "closing".into(),
        max_version: None,
    };
    hello.encode(0, &mut out);
    let receive = fila_proto::Request::Receive(fila_proto::Receive {
        queue: fila_proto::QueueRef {
            name: "gone".into(),
            dlq: false,
        },
        max_messages: 1,
        visibility_ms: None,
        wait_ms: Some(20_000),
        channel: None,
        fields: fila_proto::Fields::ALL,
    });
    receive.encode(1, &mut out);
    let conns: Vec<std::net::TcpStream> = (0..n)
        .map(|_| {
            let mut conn = std::net::TcpStream::connect(&node.client).unwrap();
            conn.write_all(&out).unwrap();
            conn
        })
        .collect();
    parked_on(node, n);
    drop(conns);
    parked_on(node, 0);
}

/// Waits (at most 10 s) until `parked` receives wait on `node`.
fn parked_on(node: &Node, parked: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = client(&node.client).unwrap().server_stats().unwrap();
        let now = stats.iter().find(|(k, _)| k == "receives_parked");
        if now.is_some_and(|(_, v)| *v == parked) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the node never counted {parked} receives parked: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
