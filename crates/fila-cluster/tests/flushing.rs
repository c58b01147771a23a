//! The Raft log's syncs off openraft's path: on a storage that syncs from
//! another thread (the file system's), an append returns once its entries
//! are written, and openraft hears they are flushed once a sync made after
//! the write is done — in the order of the appends; a sync that fails
//! fails every append waiting for it and refuses every later one. And on
//! the file system, entries older than the tail kept in memory are read
//! back from the segments, as replication reads them for a follower far
//! behind, and the segments no group needs go by the reclaim thread while
//! the groups go on appending.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use fila_cluster::{Batch, Entry, LogId, LogStore, NodeLog, TypeConfig};
use fila_wal::{LogOptions, SimDisk, Storage, SyncHandle};
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::type_config::TypeConfigExt;
use openraft::{EntryPayload, RaftLogReader};

/// A simulated disk offering a sync handle: it counts the handle's syncs
/// and fails them when told to (the bytes themselves are the disk's).
struct Handled {
    disk: SimDisk,
    syncs: Arc<AtomicU32>,
    fail: Arc<AtomicBool>,
}

impl Storage for Handled {
    fn list(&self) -> io::Result<Vec<String>> {
        self.disk.list()
    }
    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        self.disk.read(name)
    }
    fn create(&mut self, name: &str) -> io::Result<()> {
        self.disk.create(name)
    }
    fn append(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        self.disk.append(name, data)
    }
    fn sync(&mut self, name: &str) -> io::Result<()> {
        self.disk.sync(name)
    }
    fn sync_dir(&mut self) -> io::Result<()> {
        self.disk.sync_dir()
    }
    fn truncate(&mut self, name: &str, len: u64) -> io::Result<()> {
        self.disk.truncate(name, len)
    }
    fn remove(&mut self, name: &str) -> io::Result<()> {
        self.disk.remove(name)
    }
    fn rename(&mut self, from: &str, to: &str) -> io::Result<()> {
        self.disk.rename(from, to)
    }
    fn describe(&self, name: &str) -> String {
        self.disk.describe(name)
    }
    fn sync_handle(&mut self, _name: &str) -> io::Result<Option<SyncHandle>> {
        let (syncs, fail) = (self.syncs.clone(), self.fail.clone());
        Ok(Some(Arc::new(move || {
            syncs.fetch_add(1, Ordering::SeqCst);
            if fail.load(Ordering::SeqCst) {
                Err(io::Error::other("the disk failed"))
            } else {
                Ok(())
            }
        })))
    }
}

fn entry(index: u64) -> Entry {
    let id = LogId::new(
        openraft::impls::leader_id_adv::LeaderId {
            term: 1,
            node_id: 1,
        },
        index,
    );
    Entry::new(
        id,
        EntryPayload::Normal(Batch(Bytes::from(format!("entry {index} ").repeat(9)))),
    )
}

/// Appends entry `index`; answers what its callback will say.
async fn append(
    log: &mut LogStore<Handled>,
    index: u64,
) -> io::Result<std::pin::Pin<Box<dyn std::future::Future<Output = io::Result<()>> + Send>>> {
    let (tx, rx) = TypeConfig::oneshot();
    log.append([entry(index)], IOFlushed::signal(tx)).await?;
    Ok(Box::pin(async move {
        rx.await.expect("the callback was called")
    }))
}

#[tokio::test]
async fn appends_are_flushed_in_order_by_syncs_made_after_them_and_a_failed_sync_fails_the_log() {
    let syncs = Arc::new(AtomicU32::new(0));
    let fail = Arc::new(AtomicBool::new(false));
    let storage = Handled {
        disk: SimDisk::new(7),
        syncs: syncs.clone(),
        fail: fail.clone(),
    };
    let options = LogOptions {
        segment_bytes: 2048,
    };
    let mut log = NodeLog::open(storage, options)
        .and_then(|l| l.group(0))
        .unwrap();
    // Forty appends without waiting: each readable at once, each flushed
    // in turn.
    let mut flushed = Vec::new();
    for index in 1..=40 {
        flushed.push(append(&mut log, index).await.unwrap());
        let back = log.try_get_log_entries(index..index + 1).await.unwrap();
        assert_eq!(back.len(), 1, "entry {index} readable once appended");
    }
    // Once the last is flushed, every one before it is: they complete in
    // the order of the appends.
    let last = flushed.pop().unwrap();
    last.await.unwrap();
    for (i, f) in flushed.into_iter().enumerate() {
        let done = futures_util::FutureExt::now_or_never(f);
        assert!(matches!(done, Some(Ok(()))), "append {} not flushed", i + 1);
    }
    let made = syncs.load(Ordering::SeqCst);
    assert!((1..=40).contains(&made), "{made} syncs for 40 appends");
    // The sync fails: the append waiting for it hears so, later ones are
    // refused, and what was appended before stays readable.
    fail.store(true, Ordering::SeqCst);
    let failed = append(&mut log, 41).await.unwrap().await;
    assert!(failed.is_err());
    fail.store(false, Ordering::SeqCst);
    let refused = append(&mut log, 42).await;
    let refused = match refused {
        Err(e) => e,
        Ok(callback) => callback.await.expect_err("a later append fails too"),
    };
    assert!(refused.to_string().contains("the disk failed"), "{refused}");
    assert_eq!(log.try_get_log_entries(1..41).await.unwrap().len(), 40);
}

#[tokio::test]
async fn on_the_file_system_entries_older_than_the_tail_are_read_back_from_the_segments() {
    let dir = std::env::temp_dir().join(format!("fila-flushing-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let storage = fila_wal::FsStorage::new(&dir).unwrap();
    let options = LogOptions {
        segment_bytes: 8 << 20,
    };
    let mut log = NodeLog::open(storage, options)
        .and_then(|l| l.group(0))
        .unwrap();
    // Entries of 1 MiB, 24 more than the tail keeps in memory, over
    // segments of 8 MiB.
    let big = |index: u64| {
        let id = LogId::new(
            openraft::impls::leader_id_adv::LeaderId {
                term: 1,
                node_id: 1,
            },
            index,
        );
        let body = vec![(index % 251) as u8; 1 << 20];
        Entry::new(id, EntryPayload::Normal(Batch(Bytes::from(body))))
    };
    let count = (fila_cluster::TAIL_BYTES >> 20) as u64 + 24;
    let mut flushed = Vec::new();
    for index in 1..=count {
        let (tx, rx) = TypeConfig::oneshot();
        log.append([big(index)], IOFlushed::signal(tx))
            .await
            .unwrap();
        flushed.push(rx);
    }
    for rx in flushed {
        rx.await.unwrap().unwrap();
    }
    // Read as replication reads: a limited range at a time, from the
    // first entry on.
    let mut next = 1;
    while next <= count {
        let got = log.limited_get_log_entries(next, count + 1).await.unwrap();
        assert!(!got.is_empty(), "nothing from {next}");
        for e in got {
            assert_eq!(e.log_id.index, next);
            let EntryPayload::Normal(Batch(body)) = &e.payload else {
                panic!("entry {next} is not a batch");
            };
            assert_eq!((body.len(), body[0]), (1 << 20, (next % 251) as u8));
            next += 1;
        }
    }
    drop(log);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn on_the_file_system_the_reclaim_thread_removes_segments_while_the_groups_go_on() {
    let dir = std::env::temp_dir().join(format!("fila-reclaim-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let options = LogOptions {
        segment_bytes: 4096,
    };
    let node = NodeLog::open(fila_wal::FsStorage::new(&dir).unwrap(), options).unwrap();
    let (mut quiet, mut busy) = (node.group(7).unwrap(), node.group(3).unwrap());
    let append = |log: &mut LogStore<fila_wal::FsStorage>, index: u64| {
        let (tx, rx) = TypeConfig::oneshot();
        let mut log = log.clone();
        async move {
            log.append([entry(index)], IOFlushed::signal(tx)).await?;
            rx.await.expect("the callback was called")
        }
    };
    for index in 1..=3 {
        append(&mut quiet, index).await.unwrap();
    }
    // 600 entries of about 100 bytes over 4 KiB segments, all but the
    // newest five purged every twenty: the quiet group pins the oldest
    // segment until its entries are copied past it.
    let mut most = 0;
    for index in 1..=600 {
        append(&mut busy, index).await.unwrap();
        if index % 20 == 0 {
            busy.purge(entry(index - 5).log_id).await.unwrap();
        }
        most = most.max(node.shape().segments);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while node.shape().reclaiming {
        assert!(
            std::time::Instant::now() < deadline,
            "the reclaim never ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let shape = node.shape();
    assert!(shape.copy_runs > 0, "{shape:?}");
    // The reclaims were the thread's, not done in place.
    let threads: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .collect();
    assert!(threads.iter().any(|t| t == "fila-raft-trim"), "{threads:?}");
    assert!(
        most <= 12 && shape.segments <= 8,
        "{most} segments at most, {shape:?}"
    );
    // Reopened: every live entry of both groups is there.
    drop((quiet, busy, node));
    let node = NodeLog::open(fila_wal::FsStorage::new(&dir).unwrap(), options).unwrap();
    for (group, from, to) in [(7, 1, 3), (3, 596, 600)] {
        let mut log = node.group(group).unwrap();
        let got = log.try_get_log_entries(0..1000).await.unwrap();
        let want: Vec<Entry> = (from..=to).map(entry).collect();
        assert_eq!(got, want, "group {group}");
    }
    let snaps = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".snap")
        })
        .count();
    assert_eq!(snaps, 1);
    drop(node);
    std::fs::remove_dir_all(&dir).unwrap();
}
