//! A node's Raft log: one [`fila_wal`] log that every group of the node
//! appends to ([`NodeLog`]), and each group's view of it ([`LogStore`],
//! what openraft is given).
//!
//! Every record names its group ([`codec::NodeRecord`]): an entry, which
//! replaces the group's entries from its index on (so a suffix cut by a
//! new leader's entries needs no record of its own); a cut (openraft's
//! `truncate_after`); a purge. A cut is synced before it returns, as the
//! vote is (it is rare: a new leader's override). A purge is not synced
//! in place (one lost in a crash brings back entries the group's
//! snapshot covers: openraft needs only that a group's purged entries are
//! at most its snapshot's). An append
//! writes its entries and returns; openraft is told they are flushed once
//! they are synced — on the file system by the log's sync thread
//! ([`crate::flusher`]: one sync for every append made while the last one
//! ran, whichever groups made them), on a simulated disk before the append
//! returns. A node with three partitions thus makes one `fdatasync` where
//! it made four (docs/benchmarks.md, "A cluster node's syncs").
//!
//! Recovery reads the log once and replays each group's records in order;
//! what is left of a group is its live entries (after its last purge, up
//! to its last entry): for each, its LSN, and the newest ones (at most
//! [`TAIL_BYTES`] a group) in memory, which serve what replication reads.
//! Older ones are read back from the segments, skipping other groups'
//! records.
//!
//! Segments are reclaimed with the log's snapshot: once every group's
//! first live entry is past the oldest segment, the log's snapshot at the
//! LSN before the first of them (its body: each group's last purged log
//! id) removes the segments before it. A group that writes little (the
//! metadata group), or whose node dropped it, would pin the oldest
//! segment for ever: once it has kept [`PIN_SEGMENTS`] segments and at
//! least four times its own live bytes, its live entries are written
//! again at the log's end (a run of copies, which counts only once whole:
//! [`codec::NodeRecord::Copy`]) and synced, and the segments go. On a file
//! system the syncs and the snapshot's file are a thread's of the log's
//! own (`reclaim.rs`), away from the lock every group's appends take. A
//! group's vote is the file
//! `vote-<group, 16 hex digits>`, replaced whole and synced before
//! `save_vote` returns.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex, MutexGuard};

use fila_wal::{Log, LogOptions, Storage};
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{EntryPayload, OptionalSend, RaftLogReader};

use crate::codec::{self, NodeRecord, GROUP_CUT, GROUP_ENTRY, GROUP_PURGE};
use crate::flusher::Flusher;
use crate::{Entry, LogId, TypeConfig, Vote};

mod legacy;
mod reclaim;
mod replay;

use replay::Replaying;

pub use legacy::move_group_log;

/// Bytes of a group's newest entries kept in memory for reads.
pub const TAIL_BYTES: usize = 16 << 20;
/// Bytes of entries one limited read answers at most (at least one entry).
pub const READ_BYTES: usize = 4 << 20;
/// A group's live entries are copied to the log's end once the segments
/// from its first one on are at least this many (and four times its live
/// bytes).
pub const PIN_SEGMENTS: usize = 3;

/// The file that holds `group`'s vote, beside the log's segments.
pub fn vote_file(group: u64) -> String {
    format!("vote-{group:016x}")
}

/// A node's Raft log, shared by its groups. Cloned, it is the same log.
pub struct NodeLog<S: Storage + 'static> {
    inner: Arc<Mutex<Inner<S>>>,
}

impl<S: Storage + 'static> Clone for NodeLog<S> {
    fn clone(&self) -> Self {
        NodeLog {
            inner: self.inner.clone(),
        }
    }
}

/// One group's part of a node's Raft log: what openraft reads and writes.
/// Cloned, it is the same (the reader openraft's replication uses is a
/// clone).
pub struct LogStore<S: Storage + 'static> {
    group: u64,
    inner: Arc<Mutex<Inner<S>>>,
}

impl<S: Storage + 'static> Clone for LogStore<S> {
    fn clone(&self) -> Self {
        LogStore {
            group: self.group,
            inner: self.inner.clone(),
        }
    }
}

/// What [`NodeLog::shape`] answers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogShape {
    /// Segments the log keeps.
    pub segments: usize,
    /// Live entries of every group.
    pub live_entries: usize,
    /// Runs of copies made since the log was opened (a group's live
    /// entries written again past the segments it pinned).
    pub copy_runs: u64,
    /// A reclaim is in flight on the reclaim thread.
    pub reclaiming: bool,
}

/// Where a live entry is in the log.
#[derive(Clone, Copy, Debug)]
struct Place {
    lsn: u64,
    bytes: u32,
}

/// What the log holds of one group.
#[derive(Default)]
struct Group {
    /// The last purged log id: the group has no entry up to it.
    purged: Option<LogId>,
    /// The last live entry's log id, while there is one.
    last: Option<LogId>,
    /// The index of the first live entry (meaningful while there is one).
    first: u64,
    /// Each live entry's place, in index order from `first`.
    places: VecDeque<Place>,
    /// Their record bytes.
    live_bytes: u64,
    /// The newest live entries, consecutive, ending at `last`.
    tail: VecDeque<Entry>,
    tail_bytes: usize,
    /// The vote, once its file was read (`None` inside: none saved).
    vote: Option<Option<Vote>>,
    committed: Option<LogId>,
}

struct Inner<S: Storage> {
    log: Log<S>,
    segment_bytes: u64,
    groups: BTreeMap<u64, Group>,
    copy_runs: u64,
    scratch: Vec<u8>,
    /// The sync thread, from the first append on a storage that syncs
    /// from another thread.
    flusher: Option<Flusher>,
    /// The reclaim thread, from the first reclaim on a storage with a
    /// second handle (`reclaim.rs`), and whether a reclaim is in flight.
    reclaimer: Option<reclaim::Reclaimer<S>>,
    reclaiming: bool,
    /// Why the log takes nothing more: a sync of the reclaim thread
    /// failed.
    broken: Option<String>,
}

fn weight(e: &Entry) -> usize {
    64 + match &e.payload {
        EntryPayload::Normal(b) => b.0.len(),
        _ => 0,
    }
}

fn io_err(e: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::other(e)
}

/// The first index in `range`, and the one after its last.
fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let start = match range.start_bound() {
        Bound::Included(&a) => a,
        Bound::Excluded(&a) => a.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&b) => b.saturating_add(1),
        Bound::Excluded(&b) => b,
        Bound::Unbounded => u64::MAX,
    };
    (start, end)
}

impl Group {
    /// The index after the last live entry, while there is one.
    fn next(&self) -> Option<u64> {
        (!self.places.is_empty()).then(|| self.first + self.places.len() as u64)
    }

    /// Forgets the live entries from index `from` on.
    fn drop_from(&mut self, from: u64) {
        while self.next().is_some_and(|n| n > from) {
            if let Some(p) = self.places.pop_back() {
                self.live_bytes -= u64::from(p.bytes);
            }
        }
        while self.tail.back().is_some_and(|e| e.index() >= from) {
            self.tail_bytes -= self.tail.pop_back().map_or(0, |e| weight(&e));
        }
    }

    /// Takes `entry`, written at `place`: it replaces the live entries
    /// from its index on. An entry the group's purge covers is skipped;
    /// one that would leave a gap after the live entries is refused.
    fn take(&mut self, place: Place, entry: Entry) -> Result<(), String> {
        let index = entry.index();
        if self.purged.is_some_and(|p| index <= p.index) {
            return Ok(());
        }
        match self.next() {
            Some(next) if index > next => {
                return Err(format!(
                    "entry {index} would leave a gap after {}",
                    next - 1
                ))
            }
            Some(_) if index < self.first => {
                self.drop_from(self.first);
                self.first = index;
            }
            Some(_) => self.drop_from(index),
            None => self.first = index,
        }
        self.places.push_back(place);
        self.live_bytes += u64::from(place.bytes);
        self.last = Some(entry.log_id);
        self.tail_bytes += weight(&entry);
        self.tail.push_back(entry);
        while self.tail_bytes > TAIL_BYTES && self.tail.len() > 1 {
            self.tail_bytes -= self.tail.pop_front().map_or(0, |e| weight(&e));
        }
        Ok(())
    }

    /// The group's live entries are `first..` at `places` now, the last
    /// one `last` (a whole run of copies, [`NodeRecord::Copy`]).
    fn replace(&mut self, first: u64, places: VecDeque<Place>, last: LogId) {
        self.live_bytes = places.iter().map(|p| u64::from(p.bytes)).sum();
        self.first = first;
        self.places = places;
        self.last = Some(last);
        // The entries in memory are the same ones, if any; else reads go
        // to the copies.
        if self.tail.back().is_some_and(|e| e.log_id != last) {
            self.tail.clear();
            self.tail_bytes = 0;
        }
    }

    /// The LSN of the oldest record holding a live entry (after a copy cut
    /// short by a crash, not always the first entry's).
    fn oldest(&self) -> Option<u64> {
        self.places.iter().map(|p| p.lsn).min()
    }

    /// Keeps the live entries up to `keep` (none: no entry).
    fn cut(&mut self, keep: Option<LogId>) {
        self.drop_from(keep.map_or(0, |k| k.index + 1));
        self.last = if self.places.is_empty() { None } else { keep };
    }

    /// Forgets the entries up to `upto`.
    fn purge(&mut self, upto: LogId) {
        if self.purged.is_some_and(|p| p >= upto) {
            return;
        }
        self.purged = Some(upto);
        while !self.places.is_empty() && self.first <= upto.index {
            if let Some(p) = self.places.pop_front() {
                self.live_bytes -= u64::from(p.bytes);
            }
            self.first += 1;
        }
        if self.places.is_empty() {
            self.last = None;
        }
        while self.tail.front().is_some_and(|e| e.index() <= upto.index) {
            self.tail_bytes -= self.tail.pop_front().map_or(0, |e| weight(&e));
        }
    }
}

impl<S: Storage + 'static> NodeLog<S> {
    /// Opens the node's Raft log in `storage`: each group's start, its
    /// live entries (the newest kept in memory, up to [`TAIL_BYTES`] a
    /// group).
    pub fn open(storage: S, options: LogOptions) -> Result<NodeLog<S>, crate::Error> {
        let replay = RefCell::new(Replaying::default());
        let (log, _) = Log::open_with(
            storage,
            options,
            |file, body| {
                let bytes = start_bytes(file, body)?;
                replay.borrow_mut().start(file.lsn, &bytes)
            },
            |lsn, kind, body| replay.borrow_mut().record(lsn, kind, body),
        )?;
        Ok(NodeLog {
            inner: Arc::new(Mutex::new(Inner {
                log,
                segment_bytes: options.segment_bytes,
                groups: replay.into_inner().finish(),
                copy_runs: 0,
                scratch: Vec::new(),
                flusher: None,
                reclaimer: None,
                reclaiming: false,
                broken: None,
            })),
        })
    }

    /// Group `group`'s part of the log (its vote read from its file).
    pub fn group(&self, group: u64) -> Result<LogStore<S>, crate::Error> {
        let mut inner = lock(&self.inner).map_err(|e| crate::Error::Io {
            file: "the node's Raft log".into(),
            source: e,
        })?;
        let storage = inner.log.storage();
        let name = vote_file(group);
        let vote = fila_wal::read_file(storage, &name)
            .map_err(|source| crate::Error::Io {
                file: storage.describe(&name),
                source,
            })?
            .map(|data| codec::decode_vote(&data))
            .transpose()
            .map_err(|e| crate::Error::Vote { what: e.what })?;
        inner.groups.entry(group).or_default().vote = Some(vote);
        Ok(LogStore {
            group,
            inner: self.inner.clone(),
        })
    }

    /// Closes the log; answers its storage when no clone (and no group's
    /// part) is left (for tests that crash it).
    pub fn close(self) -> Option<S> {
        let inner = Arc::try_unwrap(self.inner).ok()?;
        Some(inner.into_inner().ok()?.log.into_storage())
    }

    /// The segments the log keeps now, the live entries of every group,
    /// and the runs of copies made since it was opened (for tests).
    pub fn shape(&self) -> LogShape {
        lock(&self.inner).map_or(LogShape::default(), |inner| LogShape {
            segments: inner.log.segment_starts().count(),
            live_entries: inner.groups.values().map(|g| g.places.len()).sum(),
            copy_runs: inner.copy_runs,
            reclaiming: inner.reclaiming,
        })
    }
}

/// A log's start (its snapshot's body), read whole.
fn start_bytes(
    file: &fila_wal::SnapshotFile,
    body: &mut dyn std::io::Read,
) -> Result<Vec<u8>, fila_wal::Error> {
    let mut bytes = Vec::new();
    body.read_to_end(&mut bytes)
        .map_err(|source| fila_wal::Error::Io {
            file: file.name.clone(),
            source,
        })?;
    Ok(bytes)
}

fn lock<S: Storage>(inner: &Mutex<Inner<S>>) -> io::Result<MutexGuard<'_, Inner<S>>> {
    inner
        .lock()
        .map_err(|_| io::Error::other("the Raft log's lock was poisoned"))
}

impl<S: Storage + 'static> LogStore<S> {
    fn lock(&self) -> io::Result<MutexGuard<'_, Inner<S>>> {
        lock(&self.inner)
    }

    /// The group's last purged log id, live entries and vote, read at once
    /// (for tools and tests that look at a node's log without openraft).
    pub fn contents(&self) -> io::Result<(Option<LogId>, Vec<Entry>, Option<Vote>)> {
        let mut inner = self.lock()?;
        let entries = inner.entries(self.group, 0, u64::MAX, usize::MAX)?;
        let g = inner.group(self.group);
        Ok((g.purged, entries, g.vote.flatten()))
    }

    /// Closes the log; answers its storage when no other group's part
    /// (and no [`NodeLog`]) is left (for tests that crash it).
    pub fn close(self) -> Option<S> {
        NodeLog { inner: self.inner }.close()
    }

    /// Drops the group's tail kept in memory (reads come back from the
    /// segments until appends make a new one): for a replica this node
    /// gave up, which nothing reads. Answers the bytes of entries it held.
    pub fn drop_tail(&self) -> usize {
        let Ok(mut inner) = self.lock() else {
            return 0;
        };
        let Some(g) = inner.groups.get_mut(&self.group) else {
            return 0;
        };
        let held = g.tail_bytes;
        g.tail = VecDeque::new();
        g.tail_bytes = 0;
        held
    }
}

impl<S: Storage> Inner<S> {
    /// Why the log takes nothing more, once a sync failed.
    fn failed(&self) -> Option<io::Error> {
        if let Some(why) = &self.broken {
            return Some(io::Error::other(why.clone()));
        }
        self.flusher.as_ref().and_then(Flusher::failed)
    }

    fn group(&mut self, group: u64) -> &mut Group {
        self.groups.entry(group).or_default()
    }

    fn append_one(&mut self, group: u64, entry: Entry) -> io::Result<()> {
        let g = self.group(group);
        let index = entry.index();
        if let Some(next) = g.next().filter(|&n| index > n) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("entry {index} would leave a gap after {}", next - 1),
            ));
        }
        if g.purged.is_some_and(|p| index <= p.index) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("entry {index} is purged already"),
            ));
        }
        self.scratch.clear();
        codec::encode_group_entry(group, &entry, &mut self.scratch);
        let lsn = self
            .log
            .append(GROUP_ENTRY, &self.scratch)
            .map_err(io_err)?;
        let place = Place {
            lsn,
            bytes: self.scratch.len() as u32,
        };
        self.group(group)
            .take(place, entry)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(())
    }

    /// Group `group`'s entries `start..end`, at most `max_bytes` of them
    /// (at least one when there is one).
    fn entries(
        &self,
        group: u64,
        start: u64,
        end: u64,
        max_bytes: usize,
    ) -> io::Result<Vec<Entry>> {
        let mut out = Vec::new();
        let Some(g) = self.groups.get(&group) else {
            return Ok(out);
        };
        let (Some(next), start) = (g.next(), start.max(g.first)) else {
            return Ok(out);
        };
        let end = end.min(next);
        if start >= end {
            return Ok(out);
        }
        if let Some(first) = g.tail.front().map(|e| e.index()) {
            if start >= first {
                let mut bytes = 0;
                for e in g.tail.iter().skip((start - first) as usize) {
                    if e.index() >= end || (!out.is_empty() && bytes >= max_bytes) {
                        break;
                    }
                    bytes += weight(e);
                    out.push(e.clone());
                }
                return Ok(out);
            }
        }
        // Their records are in index order but for copies a crash cut
        // short (`Group::moved`): read by LSN, then put in index order.
        // Each wanted record's LSN and index, by LSN.
        let mut wanted: Vec<(u64, u64)> = g
            .places
            .range((start - g.first) as usize..(end - g.first) as usize)
            .zip(start..)
            .map(|(p, index)| (p.lsn, index))
            .collect();
        wanted.sort_unstable();
        let at = |lsn: u64| {
            wanted
                .binary_search_by_key(&lsn, |w| w.0)
                .ok()
                .map(|k| wanted[k].1)
        };
        let (Some(&(from, _)), Some(&(to, _))) = (wanted.first(), wanted.last()) else {
            return Ok(out);
        };
        let records = self
            .log
            .read_where(from, to + 1, max_bytes, |lsn| at(lsn).is_some())
            .map_err(io_err)?;
        let mut found = BTreeMap::new();
        for r in records {
            match (codec::decode_node_record(r.kind, &r.body)?, at(r.lsn)) {
                (
                    NodeRecord::Entry(of, entry)
                    | NodeRecord::Copy {
                        group: of, entry, ..
                    },
                    Some(index),
                ) if of == group && entry.index() == index => {
                    found.insert(index, entry);
                }
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "log record {}: not the entry of group {group} expected there",
                            r.lsn
                        ),
                    ))
                }
            }
        }
        // Those read, from `start` on without a gap (a read cut at
        // `max_bytes` may have skipped some).
        for (index, entry) in found {
            if index != start + out.len() as u64 {
                break;
            }
            out.push(entry);
        }
        Ok(out)
    }
}

impl<S: Storage + 'static> RaftLogReader<TypeConfig> for LogStore<S> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let (start, end) = bounds(&range);
        self.lock()?.entries(self.group, start, end, usize::MAX)
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, io::Error> {
        self.lock()?.entries(self.group, start, end, READ_BYTES)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(self.lock()?.group(self.group).vote.flatten())
    }
}

impl<S: Storage + 'static> RaftLogStorage<TypeConfig> for LogStore<S> {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let mut inner = self.lock()?;
        let g = inner.group(self.group);
        Ok(LogState {
            last_purged_log_id: g.purged,
            last_log_id: g.last.or(g.purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let mut inner = self.lock()?;
        fila_wal::replace_file(
            inner.log.storage_mut(),
            &vote_file(self.group),
            &codec::encode_vote(vote),
        )?;
        inner.group(self.group).vote = Some(Some(*vote));
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        self.lock()?.group(self.group).committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(self.lock()?.group(self.group).committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut inner = self.lock()?;
        if let Some(e) = inner.failed() {
            return Err(e);
        }
        for entry in entries {
            inner.append_one(self.group, entry)?;
        }
        let handle = match inner.log.write_out().and_then(|_| inner.log.sync_handle()) {
            Ok(handle) => handle,
            Err(e) => {
                callback.io_completed(Err(io_err(e)));
                return Ok(());
            }
        };
        match handle {
            Some(handle) => {
                if inner.flusher.is_none() {
                    inner.flusher = Some(Flusher::start()?);
                }
                inner
                    .flusher
                    .as_ref()
                    .expect("started above")
                    .after_sync(handle, callback);
            }
            // The storage syncs only through the log.
            None => callback.io_completed(inner.log.commit().map(|_| ()).map_err(io_err)),
        }
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let mut inner = self.lock()?;
        let g = inner.group(self.group);
        let keep = last_log_id.as_ref().map_or(0, |l| l.index + 1);
        if g.next().is_none_or(|n| n <= keep) {
            return Ok(());
        }
        g.cut(last_log_id);
        let body = codec::encode_cut(self.group, last_log_id.as_ref());
        inner.log.append(GROUP_CUT, &body).map_err(io_err)?;
        inner.log.commit().map_err(io_err)?;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let mut inner = self.lock()?;
        let g = inner.group(self.group);
        if g.purged.is_some_and(|p| p >= log_id) {
            return Ok(());
        }
        g.purge(log_id);
        let body = codec::encode_purge(self.group, &log_id);
        inner.log.append(GROUP_PURGE, &body).map_err(io_err)?;
        inner.reclaim(&self.inner)
    }
}
