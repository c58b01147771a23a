//! A cluster node of the layout before one Raft log per node
//! (docs/cluster.md, "Upgrading a node from separate logs"): three
//! `fila-server` processes of two partitions take puts and stop; each
//! node's shared log is written back as the groups' own logs of the
//! layout before (`raft/meta/log`, `raft/p0/log`, ...: entries at LSN =
//! index + 1, the start, the vote) and removed; started again, every node
//! moves them into one log, and every acknowledged put is there — and
//! still there after one more restart, which removes what is left of a
//! log set aside after its move without moving it again.
#![cfg(not(loom))]

mod cluster_harness;
mod common;

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use cluster_harness::{of_all, partitioned, put_all, Dir, Node};
use fila_client::{QueueRef, SettingsPatch};
use fila_cluster::{codec, NodeLog};
use fila_wal::{FsStorage, Log, LogOptions};

const PARTS: u64 = 2;
/// The metadata group's number in a node's log.
const META: u64 = u32::MAX as u64;

/// Writes `node`'s shared Raft log back as each group's own log, as a
/// node of the version before kept them, and removes the shared one.
fn to_separate_logs(node: &Node) {
    let raft = node.data.join("raft");
    let shared = raft.join("node-log");
    let log = NodeLog::open(FsStorage::existing(&shared), LogOptions::default()).unwrap();
    let groups =
        std::iter::once(("meta".to_owned(), META)).chain((0..PARTS).map(|p| (format!("p{p}"), p)));
    for (name, id) in groups {
        let (purged, entries, vote) = log.group(id).unwrap().contents().unwrap();
        write_old_log(&raft.join(name).join("log"), purged, &entries, vote);
    }
    drop(log);
    std::fs::remove_dir_all(&shared).unwrap();
}

fn write_old_log(
    dir: &Path,
    purged: Option<fila_cluster::LogId>,
    entries: &[fila_cluster::Entry],
    vote: Option<fila_cluster::Vote>,
) {
    let (mut old, _) = Log::open(FsStorage::new(dir).unwrap(), LogOptions::default()).unwrap();
    let first = entries.first().map(|e| e.log_id.index);
    if let Some(p) = purged {
        old.reset(p.index + 1, &codec::encode_start(Some(&p)))
            .unwrap();
    } else if let Some(first) = first.filter(|&f| f > 0) {
        old.reset(first, &codec::encode_start(None)).unwrap();
    }
    let mut body = Vec::new();
    for e in entries {
        body.clear();
        codec::encode_entry(e, &mut body);
        assert_eq!(old.append(codec::ENTRY, &body).unwrap(), e.log_id.index + 1);
    }
    old.commit().unwrap();
    let mut storage = old.into_storage();
    if let Some(v) = vote {
        fila_wal::replace_file(&mut storage, "vote", &codec::encode_vote(&v)).unwrap();
    }
}

/// Waits (at most 30 s) until every acknowledged put is read back.
fn all_there(nodes: &[Node], queues: &[String], acked: &HashSet<(String, String)>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut c = of_all(nodes);
        let mut present = HashSet::new();
        for q in queues {
            let queue = QueueRef {
                name: q.clone(),
                dlq: false,
            };
            if let Ok(page) = c.peek(queue, 0, 100) {
                for m in page {
                    present.insert((q.clone(), String::from_utf8_lossy(&m.payload).into_owned()));
                }
            }
        }
        let missing = acked.difference(&present).count();
        if missing == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} acknowledged puts are not there"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_node_of_separate_group_logs_moves_them_into_one_and_keeps_every_put() {
    let dir = Dir::fresh("upgrade");
    let mut nodes = partitioned(&dir.0, 3, PARTS as usize);
    for n in &mut nodes {
        n.start();
    }
    let mut c = of_all(&nodes);
    let queues: Vec<String> = (0..4).map(|i| format!("u{i}")).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    for q in &queues {
        while let Err(e) = c.create_queue(q, SettingsPatch::default()) {
            assert!(Instant::now() < deadline, "{q} could not be made: {e}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let mut acked = HashSet::new();
    put_all(&mut c, &queues, "before", 20, &mut acked);
    drop(c);
    for n in &mut nodes {
        assert!(n.stop(), "node {} stopped", n.id);
    }
    for n in &nodes {
        to_separate_logs(n);
        assert!(n.data.join("raft/p0/log").exists());
    }
    for n in &mut nodes {
        n.start();
    }
    all_there(&nodes, &queues, &acked);
    for n in &nodes {
        assert!(!n.data.join("raft/p0/log").exists(), "node {}", n.id);
        assert!(!n.data.join("raft/meta/log").exists(), "node {}", n.id);
        assert!(n.data.join("raft/node-log").exists(), "node {}", n.id);
    }
    // Once more, from the shared log alone; what a crash left of a log
    // set aside after its move (here: a damaged segment) is removed, not
    // moved in again.
    for n in &mut nodes {
        assert!(n.stop(), "node {} stopped", n.id);
    }
    for n in &nodes {
        let left = n.data.join("raft/p0/log.moved");
        std::fs::create_dir_all(&left).unwrap();
        std::fs::write(left.join("wal-0000000000000001.seg"), b"half removed").unwrap();
    }
    for n in &mut nodes {
        n.start();
    }
    all_there(&nodes, &queues, &acked);
    for n in &nodes {
        assert!(!n.data.join("raft/p0/log.moved").exists(), "node {}", n.id);
    }
}
