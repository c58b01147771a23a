//! What the Raft log and the state machine keep through a crash: every
//! entry and vote acknowledged (appended and flushed, saved) is back, with
//! its payload, and nothing cut or purged is; committed batches of a real
//! engine's records rebuild its state, and so does a snapshot of them after
//! a restart or installed on another replica.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use fila_cluster::{
    Batch, Entry, LogId, LogStore, Member, Membership, NodeLog, StateMachine, Vote,
};
use fila_core::event::{EngineImage, Event, EventSink};
use fila_core::{Address, Engine, ManualClock, NewMessage, QueueSettings, ReceiveOptions};
use fila_store::codec::batch_push;
use fila_wal::{LogOptions, SimDisk};
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage, RaftStateMachine};
use openraft::{EntryPayload, RaftLogReader, RaftSnapshotBuilder};

fn options() -> LogOptions {
    LogOptions {
        segment_bytes: 2048,
    }
}

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(
        openraft::impls::leader_id_adv::LeaderId { term, node_id: 1 },
        index,
    )
}

fn membership(voters: &[u64]) -> Membership {
    let nodes: BTreeMap<u64, Member> = voters
        .iter()
        .map(|&n| {
            (
                n,
                Member {
                    addr: format!("127.0.0.1:{}", 7800 + n),
                    client: format!("127.0.0.1:{}", 7700 + n),
                },
            )
        })
        .collect();
    Membership::new(vec![voters.iter().copied().collect::<BTreeSet<_>>()], nodes).unwrap()
}

/// Entry `index` of term `term`: a membership at 1, blanks at multiples of
/// 7, batches of bytes otherwise.
fn entry(term: u64, index: u64) -> Entry {
    let payload = match index {
        1 => EntryPayload::Membership(membership(&[1, 2, 3])),
        i if i % 7 == 0 => EntryPayload::Blank,
        i => EntryPayload::Normal(Batch(Bytes::from(
            format!("term {term} entry {i} ").repeat(1 + (i % 13) as usize),
        ))),
    };
    Entry::new(log_id(term, index), payload)
}

async fn append(log: &mut LogStore<SimDisk>, entries: Vec<Entry>) {
    use openraft::type_config::TypeConfigExt;
    let (tx, flushed) = fila_cluster::TypeConfig::oneshot();
    log.append(entries, IOFlushed::signal(tx)).await.unwrap();
    flushed.await.unwrap().unwrap();
}

#[tokio::test]
async fn what_the_raft_log_acknowledged_is_back_after_any_crash() {
    for seed in 1..=20u64 {
        let mut log = NodeLog::open(SimDisk::new(seed), options())
            .and_then(|l| l.group(0))
            .unwrap();
        log.save_vote(&Vote::new(1, 1)).await.unwrap();
        for i in 0..30 {
            append(&mut log, vec![entry(1, i)]).await;
        }
        // A new leader's log overrides 21..: cut, then its own entries.
        log.truncate_after(Some(log_id(1, 20))).await.unwrap();
        log.save_vote(&Vote::new_committed(2, 2)).await.unwrap();
        append(&mut log, (21..=26).map(|i| entry(2, i)).collect()).await;
        log.purge(log_id(1, 10)).await.unwrap();
        let mut disk = log.close().unwrap();
        disk.crash();
        let mut log = NodeLog::open(disk, options())
            .and_then(|l| l.group(0))
            .unwrap();
        let state = log.get_log_state().await.unwrap();
        // A purge is not synced in place: a crash may undo it, and the
        // entries it covered come back.
        let purged = state.last_purged_log_id;
        assert!(
            purged.is_none() || purged == Some(log_id(1, 10)),
            "seed {seed}: {purged:?}"
        );
        assert_eq!(state.last_log_id, Some(log_id(2, 26)), "seed {seed}");
        assert_eq!(
            log.read_vote().await.unwrap(),
            Some(Vote::new_committed(2, 2))
        );
        let got = log.try_get_log_entries(0..100).await.unwrap();
        let want: Vec<Entry> = (purged.map_or(0, |p| p.index + 1)..=20)
            .map(|i| entry(1, i))
            .chain((21..=26).map(|i| entry(2, i)))
            .collect();
        assert_eq!(got, want, "seed {seed}");
        // Past the end: a purge there empties the log, which goes on from it.
        log.purge(log_id(2, 40)).await.unwrap();
        append(&mut log, vec![entry(2, 41)]).await;
        let mut disk = log.close().unwrap();
        disk.crash();
        let mut log = NodeLog::open(disk, options())
            .and_then(|l| l.group(0))
            .unwrap();
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(log_id(2, 40)));
        assert_eq!(state.last_log_id, Some(log_id(2, 41)));
        assert_eq!(
            log.try_get_log_entries(0..100).await.unwrap(),
            [entry(2, 41)]
        );
    }
}

#[tokio::test]
async fn reads_older_than_the_tail_come_back_from_the_segments() {
    // Entries of ~64 KiB: the tail in memory keeps the newest 16 MiB, so
    // the first of 400 are read back from disk.
    let mut log = NodeLog::open(SimDisk::new(3), LogOptions::default())
        .and_then(|l| l.group(0))
        .unwrap();
    let big = |i: u64| {
        Entry::new(
            log_id(1, i),
            EntryPayload::Normal(Batch(Bytes::from(vec![i as u8; 64 << 10]))),
        )
    };
    for i in 0..400 {
        append(&mut log, vec![big(i)]).await;
    }
    let got = log.try_get_log_entries(5..9).await.unwrap();
    assert_eq!(got, (5..9).map(big).collect::<Vec<_>>());
    let limited = log.limited_get_log_entries(0, 400).await.unwrap();
    assert!(
        !limited.is_empty() && limited.len() < 400,
        "{}",
        limited.len()
    );
    assert_eq!(limited[0], big(0));
    let all = log.try_get_log_entries(0..400).await.unwrap();
    assert_eq!(all.len(), 400);
    assert!(all.iter().enumerate().all(|(i, e)| e.index() == i as u64));
    // The tail dropped (a replica given up): every read comes back from
    // the segments, and appends go on.
    assert!(log.drop_tail() > 15 << 20, "the tail held its 16 MiB");
    assert_eq!(log.drop_tail(), 0, "nothing left in memory");
    assert_eq!(log.try_get_log_entries(0..400).await.unwrap(), all);
    append(&mut log, vec![big(400)]).await;
    let got = log.try_get_log_entries(398..401).await.unwrap();
    assert_eq!(got, (398..401).map(big).collect::<Vec<_>>());
}

/// Captures an engine's records, one batch per operation.
struct Capture {
    batches: Arc<Mutex<Vec<Vec<u8>>>>,
    current: Vec<u8>,
}

impl EventSink for Capture {
    fn record(&mut self, event: &Event<'_>) {
        batch_push(event, &mut self.current);
    }
    fn publish(&mut self) {
        if !self.current.is_empty() {
            let batch = std::mem::take(&mut self.current);
            self.batches.lock().unwrap().push(batch);
        }
    }
}

fn normal(mut image: EngineImage) -> EngineImage {
    image.queues.sort_by(|a, b| a.name.cmp(&b.name));
    for q in &mut image.queues {
        q.messages.sort_by_key(|m| (m.dlq, m.seq));
    }
    image
}

/// An engine run through puts, receives, deletes and a purge; answers it
/// and its batches.
fn worked_engine() -> (Engine, Vec<Vec<u8>>) {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let engine = Engine::new(1, clock.clone());
    let batches = Arc::new(Mutex::new(Vec::new()));
    engine.set_journal(
        0,
        Some(Box::new(Capture {
            batches: batches.clone(),
            current: Vec::new(),
        })),
    );
    for q in ["orders", "mail"] {
        engine.create_queue(q, QueueSettings::default()).unwrap();
    }
    for i in 0..40 {
        let q = if i % 3 == 0 { "mail" } else { "orders" };
        engine
            .put(q, vec![NewMessage::new(format!("message {i}"))])
            .unwrap();
    }
    let got = engine
        .receive_now(Address::queue("orders"), &ReceiveOptions::now(10))
        .unwrap();
    let receipts: Vec<_> = got.iter().take(6).filter_map(|m| m.receipt).collect();
    assert_eq!(receipts.len(), 6);
    engine.delete(Address::queue("orders"), &receipts).unwrap();
    engine.purge(Address::queue("mail")).unwrap();
    engine
        .put("mail", vec![NewMessage::new("after the purge")])
        .unwrap();
    clock.advance(60_000);
    let batches = std::mem::take(&mut *batches.lock().unwrap());
    (engine, batches)
}

/// A one-voter membership at 0, then the batches as entries 1, 2, ...
fn entries_of(batches: Vec<Vec<u8>>) -> Vec<Entry> {
    let mut entries = vec![Entry::new(
        log_id(1, 0),
        EntryPayload::Membership(membership(&[1])),
    )];
    for (i, b) in batches.into_iter().enumerate() {
        entries.push(Entry::new(
            log_id(1, i as u64 + 1),
            EntryPayload::Normal(Batch(Bytes::from(b))),
        ));
    }
    entries
}

/// A state machine of another replica, the snapshot `meta`, `data`
/// installed.
async fn installed(meta: &fila_cluster::SnapshotMeta, data: Vec<u8>) -> StateMachine<SimDisk> {
    let mut other = StateMachine::open(SimDisk::new(2)).unwrap();
    other
        .install_snapshot(meta, Cursor::new(data))
        .await
        .unwrap();
    other
}

async fn apply(sm: &mut StateMachine<SimDisk>, entries: Vec<Entry>) {
    let items = entries.into_iter().map(|e| Ok((e, None)));
    sm.apply(futures_util::stream::iter(items)).await.unwrap();
}

#[tokio::test]
async fn committed_batches_rebuild_the_engine_and_so_does_a_snapshot() {
    let (engine, batches) = worked_engine();
    assert!(batches.len() > 40, "{} batches", batches.len());
    let want = normal(engine.export(|| {}).unwrap());
    let mut sm = StateMachine::open(SimDisk::new(1)).unwrap();
    let entries = entries_of(batches);
    let last = entries.last().unwrap().log_id;
    apply(&mut sm, entries).await;
    assert_eq!(sm.applied().unwrap(), Some(last));
    assert_eq!(normal(sm.image().unwrap()), want);
    // A snapshot, kept through a crash.
    let snap = sm.build_snapshot().await.unwrap();
    assert_eq!(snap.meta.last_log_id, Some(last));
    let mut disk = sm.close().unwrap();
    disk.crash();
    let mut sm = StateMachine::open(disk).unwrap();
    assert_eq!(normal(sm.image().unwrap()), want);
    let (applied, m) = sm.applied_state().await.unwrap();
    assert_eq!(
        (applied, m.membership().clone()),
        (Some(last), membership(&[1]))
    );
    // Installed on another replica.
    let mut other = installed(&snap.meta, snap.snapshot.into_inner()).await;
    assert_eq!(normal(other.image().unwrap()), want);
    assert_eq!(
        other.get_current_snapshot().await.unwrap().unwrap().meta,
        snap.meta
    );
}

#[tokio::test]
async fn a_batch_that_does_not_parse_is_refused() {
    let mut sm = StateMachine::open(SimDisk::new(1)).unwrap();
    let bad = Entry::new(
        log_id(1, 0),
        EntryPayload::Normal(Batch(Bytes::from_static(&[9, 0, 0, 0, 50, 1, 2]))),
    );
    let items = vec![Ok((bad, None))];
    let err = sm
        .apply(futures_util::stream::iter(items))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("entry 0"), "{err}");
    assert_eq!(sm.applied().unwrap(), None);
}

#[tokio::test]
async fn a_parked_state_is_read_back_at_its_next_use() {
    let (engine, batches) = worked_engine();
    let want = normal(engine.export(|| {}).unwrap());
    let mut entries = entries_of(batches);
    let last = entries.last().unwrap().log_id;
    let later = entries.split_off(entries.len() / 2);
    let mut sm = StateMachine::open(SimDisk::new(1)).unwrap();
    assert!(!sm.park().unwrap(), "nothing applied: nothing to park");
    apply(&mut sm, entries).await;
    let half = normal(sm.image().unwrap());

    // Parked: dropped from memory, and an image reads it back.
    assert!(sm.park().unwrap());
    assert!(sm.parked() && !sm.park().unwrap(), "parked once");
    assert_eq!(normal(sm.image().unwrap()), half);
    assert!(!sm.parked(), "read back");

    // Parked again, entries applied after it: the state goes on from it.
    assert!(sm.park().unwrap());
    apply(&mut sm, later).await;
    assert_eq!(sm.applied().unwrap(), Some(last));
    assert_eq!(normal(sm.image().unwrap()), want);

    // Parked again: the snapshot a lagging replica is sent is read from
    // the file (the state stays parked), and so is the state after a
    // crash.
    assert!(sm.park().unwrap());
    let snap = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(snap.meta.last_log_id, Some(last));
    assert!(
        sm.parked(),
        "sending its snapshot does not read the state back"
    );
    // Building one reads it back first.
    let built = sm.build_snapshot().await.unwrap();
    assert_eq!(built.meta.last_log_id, Some(last));
    assert!(!sm.parked());
    assert!(sm.park().unwrap());
    let other = installed(&snap.meta, snap.snapshot.into_inner()).await;
    assert_eq!(normal(other.image().unwrap()), want);
    let mut disk = sm.close().unwrap();
    disk.crash();
    let sm = StateMachine::open(disk).unwrap();
    assert_eq!(normal(sm.image().unwrap()), want);
    assert_eq!(sm.applied().unwrap(), Some(last));

    // The map is never parked.
    let map = StateMachine::open_map(SimDisk::new(3)).unwrap();
    assert!(!map.park().unwrap());
}

#[tokio::test]
async fn a_snapshot_is_due_once_the_log_holds_its_size_and_is_sent_from_its_file() {
    use fila_cluster::SNAPSHOT_LOG_MIN;
    use fila_core::event::Spot;
    let (engine, batches) = worked_engine();
    let want = normal(engine.export(|| {}).unwrap());
    let mut entries = entries_of(batches);
    let mut sm = StateMachine::open(SimDisk::new(1)).unwrap();
    apply(&mut sm, std::mem::take(&mut entries)).await;
    assert!(!sm.snapshot_due(), "a few entries: no snapshot due");
    // Entries of records about messages there are not (each changes
    // nothing), 1 MiB each, until the log since holds SNAPSHOT_LOG_MIN.
    let mut next = sm.applied().unwrap().unwrap().index + 1;
    let mut logged = 0u64;
    while logged < SNAPSHOT_LOG_MIN {
        assert!(!sm.snapshot_due(), "due after {logged} bytes");
        let mut b = Vec::new();
        let mut seq = next << 20;
        while b.len() < 1 << 20 {
            let at = Spot {
                queue: 999,
                dlq: false,
                seq,
            };
            batch_push(&Event::Removed { at }, &mut b);
            seq += 1;
        }
        logged += b.len() as u64;
        let e = Entry::new(log_id(1, next), EntryPayload::Normal(Batch(Bytes::from(b))));
        apply(&mut sm, vec![e]).await;
        next += 1;
    }
    assert!(sm.snapshot_due());
    let built = sm.build_snapshot().await.unwrap();
    assert!(!sm.snapshot_due(), "the log since counts from the snapshot");
    // What a lagging follower is sent is read back from the file: the
    // data built, byte for byte, which installs the same state.
    let sent = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(sent.meta, built.meta);
    let data = built.snapshot.into_inner();
    assert_eq!(sent.snapshot.into_inner(), data);
    let mut other = installed(&built.meta, data).await;
    assert_eq!(normal(other.image().unwrap()), want);
    assert!(!other.snapshot_due());
    assert_eq!(
        other.get_current_snapshot().await.unwrap().unwrap().meta,
        built.meta
    );
}

/// What a group's log should hold: its start and its entries (equal when
/// these are); and, to tell a purge a crash undid, its entries as if it
/// never purged, and the purges it made.
#[derive(Clone, Debug, Default)]
struct Model {
    purged: Option<LogId>,
    entries: BTreeMap<u64, Entry>,
    unpurged: BTreeMap<u64, Entry>,
    purges: Vec<LogId>,
}

impl PartialEq for Model {
    fn eq(&self, other: &Model) -> bool {
        (self.purged, &self.entries) == (other.purged, &other.entries)
    }
}

impl Model {
    fn append(&mut self, e: Entry) {
        for entries in [&mut self.entries, &mut self.unpurged] {
            entries.split_off(&e.index());
            entries.insert(e.index(), e.clone());
        }
    }
    fn cut(&mut self, keep: u64) {
        self.entries.split_off(&(keep + 1));
        self.unpurged.split_off(&(keep + 1));
    }
    fn purge(&mut self, upto: LogId) {
        self.purged = Some(upto);
        self.purges.push(upto);
        self.entries = self.entries.split_off(&(upto.index + 1));
    }
    /// Whether a log that holds `got` keeps what this model says, but for
    /// purges a crash undid: a purge is not synced in place, so after a
    /// crash the group may start at an earlier purge of its own, with the
    /// entries after it (which its snapshot covers) back as they were.
    fn kept_by(&self, got: &Model) -> bool {
        let from = got.purged.map_or(0, |p| p.index + 1);
        got.purged <= self.purged
            && got.purged.is_none_or(|p| self.purges.contains(&p))
            && got.entries.iter().eq(self.unpurged.range(from..))
    }
}

/// One step of two groups sharing a log.
enum Step {
    Append(u64, Entry),
    Cut(u64, LogId),
    Purge(u64, LogId),
}

/// Group 7 writes three entries and stays quiet; group 3 writes 120, a
/// new leader overrides its entries from 56 on, and it purges all but the
/// newest five every twenty: the quiet group's entries sit in the oldest
/// segment until they are copied past it.
fn two_groups() -> Vec<Step> {
    let mut steps: Vec<Step> = (1..=3).map(|i| Step::Append(7, entry(1, i))).collect();
    for i in 1..=120 {
        if i == 61 {
            steps.push(Step::Cut(3, log_id(1, 55)));
            steps.extend((56..=60).map(|j| Step::Append(3, entry(2, j))));
        }
        let term = if i < 61 { 1 } else { 2 };
        steps.push(Step::Append(3, entry(term, i)));
        if i % 20 == 0 {
            steps.push(Step::Purge(3, log_id(term, i - 5)));
        }
    }
    steps
}

/// Runs `steps` until one fails; answers the models of what was
/// acknowledged, and the models the failed step would have made.
async fn run_steps(
    log: &NodeLog<SimDisk>,
    steps: &[Step],
) -> (BTreeMap<u64, Model>, BTreeMap<u64, Model>) {
    let mut acked: BTreeMap<u64, Model> = BTreeMap::new();
    for step in steps {
        let mut after = acked.clone();
        let ok = match step {
            Step::Append(g, e) => {
                after.entry(*g).or_default().append(e.clone());
                let Ok(mut store) = log.group(*g) else {
                    return (acked.clone(), after);
                };
                use openraft::type_config::TypeConfigExt;
                let (tx, flushed) = fila_cluster::TypeConfig::oneshot();
                store
                    .append(vec![e.clone()], IOFlushed::signal(tx))
                    .await
                    .is_ok()
                    && matches!(flushed.await, Ok(Ok(())))
            }
            Step::Cut(g, keep) => {
                after.entry(*g).or_default().cut(keep.index);
                let Ok(mut store) = log.group(*g) else {
                    return (acked.clone(), after);
                };
                store.truncate_after(Some(*keep)).await.is_ok()
            }
            Step::Purge(g, upto) => {
                after.entry(*g).or_default().purge(*upto);
                let Ok(mut store) = log.group(*g) else {
                    return (acked.clone(), after);
                };
                store.purge(*upto).await.is_ok()
            }
        };
        if !ok {
            return (acked, after);
        }
        acked = after;
    }
    (acked.clone(), acked)
}

/// What group `g` of `log` holds.
async fn held(log: &NodeLog<SimDisk>, g: u64) -> Model {
    let mut store = log.group(g).unwrap();
    let state = store.get_log_state().await.unwrap();
    let entries = store.try_get_log_entries(0..1000).await.unwrap();
    assert_eq!(
        state.last_log_id,
        entries
            .last()
            .map(|e| e.log_id)
            .or(state.last_purged_log_id),
        "group {g}'s last entry is the last one read"
    );
    Model {
        purged: state.last_purged_log_id,
        entries: entries.into_iter().map(|e| (e.index(), e)).collect(),
        ..Model::default()
    }
}

#[tokio::test]
async fn groups_sharing_a_log_keep_what_each_acknowledged_at_every_cut_point() {
    let steps = two_groups();
    // Without a crash: the quiet group's entries were copied, so the log
    // keeps few segments.
    let log = NodeLog::open(SimDisk::new(1), options()).unwrap();
    let (done, all) = run_steps(&log, &steps).await;
    assert_eq!(done, all, "every step succeeds without a crash");
    let kept: Vec<u64> = done[&3].entries.keys().copied().collect();
    assert_eq!(kept, (116..=120).collect::<Vec<_>>());
    let shape = log.shape();
    assert!(shape.segments <= 5, "{shape:?}");
    assert!(shape.copy_runs > 0, "{shape:?}");
    for g in [3, 7] {
        assert_eq!(held(&log, g).await, done[&g], "group {g}");
    }
    // Read back from the segments (the other group's records between,
    // the quiet group's entries from their copies), not from memory.
    for g in [3, 7] {
        assert!(log.group(g).unwrap().drop_tail() > 0, "group {g}");
        assert_eq!(held(&log, g).await, done[&g], "group {g}, from disk");
    }
    // Dying after each mutating operation in turn, then crashing: each
    // group holds what it acknowledged, or that and the step that failed.
    let mut cut_points = 0;
    for n in 0u32.. {
        let mut disk = SimDisk::new(u64::from(n) + 2);
        disk.die_after(n);
        let Ok(log) = NodeLog::open(disk, options()) else {
            continue;
        };
        let (acked, failed) = run_steps(&log, &steps).await;
        if acked == failed {
            break;
        }
        cut_points += 1;
        let mut disk = log.close().expect("no group's part is left");
        disk.crash();
        let log = NodeLog::open(disk, options()).unwrap_or_else(|e| panic!("cut {n}: {e}"));
        for g in [3, 7] {
            let got = held(&log, g).await;
            let before = acked.get(&g).cloned().unwrap_or_default();
            let after = failed.get(&g).cloned().unwrap_or_default();
            assert!(
                before.kept_by(&got) || after.kept_by(&got),
                "cut {n}, group {g}: {got:?}\nacknowledged {before:?}"
            );
        }
    }
    assert!(cut_points > 300, "{cut_points} cut points");
}

#[tokio::test]
async fn a_groups_own_log_moves_into_the_nodes_and_moving_it_twice_changes_nothing() {
    // The layout before: entries 11..=30 (LSN = index + 1) after a purge
    // of 10, and the vote in the file `vote`.
    let (mut old, _) = fila_wal::Log::open(SimDisk::new(5), options()).unwrap();
    let start = fila_cluster::codec::encode_start(Some(&log_id(1, 10)));
    old.reset(11, &start).unwrap();
    let mut body = Vec::new();
    for i in 11..=30 {
        body.clear();
        fila_cluster::codec::encode_entry(&entry(1, i), &mut body);
        old.append(fila_cluster::codec::ENTRY, &body).unwrap();
    }
    old.commit().unwrap();
    let mut old = old.into_storage();
    fila_wal::replace_file(
        &mut old,
        "vote",
        &fila_cluster::codec::encode_vote(&Vote::new_committed(3, 2)),
    )
    .unwrap();
    let want = Model {
        purged: Some(log_id(1, 10)),
        entries: (11..=30).map(|i| (i, entry(1, i))).collect(),
        ..Model::default()
    };
    let node = NodeLog::open(SimDisk::new(6), options()).unwrap();
    append(&mut node.group(1).unwrap(), vec![entry(1, 1)]).await;
    let moved = fila_cluster::move_group_log(&node, 4, old.clone(), options()).unwrap();
    assert_eq!(moved, 20);
    assert_eq!(held(&node, 4).await, want);
    // A crash before the old log was removed: it is moved again.
    let mut disk = node.close().unwrap();
    disk.crash();
    let node = NodeLog::open(disk, options()).unwrap();
    assert_eq!(held(&node, 4).await, want);
    fila_cluster::move_group_log(&node, 4, old, options()).unwrap();
    let mut disk = node.close().unwrap();
    disk.crash();
    let node = NodeLog::open(disk, options()).unwrap();
    assert_eq!(held(&node, 4).await, want);
    assert_eq!(
        node.group(4).unwrap().read_vote().await.unwrap(),
        Some(Vote::new_committed(3, 2))
    );
    assert_eq!(held(&node, 1).await.entries.len(), 1, "the other group");
}

#[tokio::test]
async fn a_groups_entries_read_back_from_segments_skip_the_other_groups() {
    // Two groups appending in turn: each one's records have the other's
    // between them. Read from the segments (tails dropped), in full and
    // limited.
    let log = NodeLog::open(SimDisk::new(9), options()).unwrap();
    let mut want: BTreeMap<u64, Vec<Entry>> = BTreeMap::new();
    for i in 1..=40 {
        for g in [1, 2] {
            let e = entry(g, i);
            append(&mut log.group(g).unwrap(), vec![e.clone()]).await;
            want.entry(g).or_default().push(e);
        }
    }
    for g in [1, 2] {
        let mut store = log.group(g).unwrap();
        assert!(store.drop_tail() > 0);
        let all = store.try_get_log_entries(0..100).await.unwrap();
        assert_eq!(all, want[&g], "group {g}");
        let some = store.try_get_log_entries(10..20).await.unwrap();
        assert_eq!(some, want[&g][9..19], "group {g}");
    }
}
