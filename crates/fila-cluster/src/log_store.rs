//! The Raft log of one group, kept in a [`fila_wal`] log.
//!
//! An entry is one record of kind [`codec::ENTRY`] whose LSN is the
//! entry's index + 1 (openraft's first entry has index 0). An append
//! writes its entries and returns; openraft is told they are flushed once
//! they are synced — on the file system by the log's sync thread
//! ([`crate::flusher`]: one sync for every append made while the last one
//! ran), on a simulated disk before the append returns. The log's snapshot marks where it
//! starts: its body is the last purged log id, so a purge is a snapshot of
//! the log at that LSN (the segments it covers go), and a purge past the
//! end, or a first entry that does not follow the start, is a reset
//! ([`fila_wal::Log::reset`]). Truncating a suffix is the log's own
//! [`fila_wal::Log::truncate_after`]. The vote is the file `vote`,
//! replaced whole and synced before `save_vote` returns.
//!
//! Reads of the newest entries (what replication asks for) are served from
//! a tail kept in memory, at most [`TAIL_BYTES`]; older ones are read back
//! from the segments.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex, MutexGuard};

use fila_wal::{Log, LogOptions, Storage};
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{EntryPayload, OptionalSend, RaftLogReader};

use crate::codec::{self, ENTRY};
use crate::flusher::Flusher;
use crate::{Entry, LogId, TypeConfig, Vote};

/// Bytes of the newest entries kept in memory for reads.
pub const TAIL_BYTES: usize = 16 << 20;
/// Bytes of entries one limited read answers at most (at least one entry).
pub const READ_BYTES: usize = 4 << 20;
/// The vote's file, beside the log's.
pub const VOTE_FILE: &str = "vote";

/// The Raft log of one group. Cloned, it is the same log (the reader
/// openraft's replication uses is a clone).
pub struct LogStore<S: Storage + 'static> {
    inner: Arc<Mutex<Inner<S>>>,
}

impl<S: Storage + 'static> Clone for LogStore<S> {
    fn clone(&self) -> Self {
        LogStore {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<S: Storage> {
    log: Log<S>,
    /// The last purged log id: the log holds nothing up to it.
    purged: Option<LogId>,
    /// The last entry's log id, while the log holds one.
    last: Option<LogId>,
    vote: Option<Vote>,
    committed: Option<LogId>,
    /// The newest entries, consecutive, ending at `last`.
    tail: VecDeque<Entry>,
    tail_bytes: usize,
    scratch: Vec<u8>,
    /// The sync thread, from the first append on a storage that syncs
    /// from another thread.
    flusher: Option<Flusher>,
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

impl<S: Storage + 'static> LogStore<S> {
    /// Opens the Raft log in `storage`: its start, its entries (the newest
    /// kept in memory, up to [`TAIL_BYTES`]) and its vote.
    pub fn open(storage: S, options: LogOptions) -> Result<LogStore<S>, crate::Error> {
        let mut purged = None;
        let mut last: Option<LogId> = None;
        let mut tail = VecDeque::new();
        let mut tail_bytes = 0;
        let (log, _) = Log::open_with(
            storage,
            options,
            |file, body| {
                let mut bytes = Vec::new();
                body.read_to_end(&mut bytes)
                    .map_err(|source| fila_wal::Error::Io {
                        file: file.name.clone(),
                        source,
                    })?;
                purged = codec::decode_start(&bytes).map_err(|e| crate::Error::Record {
                    lsn: file.lsn,
                    what: e.what,
                })?;
                Ok::<(), crate::Error>(())
            },
            |lsn, kind, body| {
                let bad = |what| crate::Error::Record { lsn, what };
                if kind != ENTRY {
                    return Err(bad("not a Raft entry"));
                }
                let entry = codec::decode_entry(body).map_err(|e| bad(e.what))?;
                if entry.index() + 1 != lsn {
                    return Err(bad("an entry whose index is not its place in the log"));
                }
                last = Some(entry.log_id);
                tail_bytes += weight(&entry);
                tail.push_back(entry);
                while tail_bytes > TAIL_BYTES && tail.len() > 1 {
                    tail_bytes -= tail.pop_front().map_or(0, |e| weight(&e));
                }
                Ok(())
            },
        )?;
        let vote = fila_wal::read_file(log.storage(), VOTE_FILE)
            .map_err(|source| crate::Error::Io {
                file: log.storage().describe(VOTE_FILE),
                source,
            })?
            .map(|data| codec::decode_vote(&data))
            .transpose()
            .map_err(|e| crate::Error::Vote { what: e.what })?;
        Ok(LogStore {
            inner: Arc::new(Mutex::new(Inner {
                log,
                purged,
                last,
                vote,
                committed: None,
                tail,
                tail_bytes,
                scratch: Vec::new(),
                flusher: None,
            })),
        })
    }

    fn lock(&self) -> io::Result<MutexGuard<'_, Inner<S>>> {
        self.inner
            .lock()
            .map_err(|_| io::Error::other("the Raft log's lock was poisoned"))
    }

    /// Drops the tail kept in memory (reads come back from the segments
    /// until appends make a new one): for the log of a replica this node
    /// gave up, which nothing reads. Answers the bytes of entries it held.
    pub fn drop_tail(&self) -> usize {
        let Ok(mut inner) = self.lock() else {
            return 0;
        };
        let held = inner.tail_bytes;
        inner.tail = VecDeque::new();
        inner.tail_bytes = 0;
        inner.scratch = Vec::new();
        held
    }

    /// Closes the log; answers its storage when no clone is left (for
    /// tests that crash it).
    pub fn close(self) -> Option<S> {
        let inner = Arc::try_unwrap(self.inner).ok()?;
        Some(inner.into_inner().ok()?.log.into_storage())
    }
}

impl<S: Storage> Inner<S> {
    /// The log's first LSN is after this one.
    fn start(&self) -> u64 {
        self.log.snapshot_lsn()
    }

    /// Removes every entry after the one at `keep` (an LSN; 0: all).
    fn cut_after(&mut self, keep: u64) -> io::Result<()> {
        if keep >= self.start() {
            self.log.truncate_after(keep).map_err(io_err)?;
        } else {
            let body = codec::encode_start(self.purged.as_ref());
            self.log.reset(keep, &body).map_err(io_err)?;
        }
        while self.tail.back().is_some_and(|e| e.index() + 1 > keep) {
            self.tail_bytes -= self.tail.pop_back().map_or(0, |e| weight(&e));
        }
        Ok(())
    }

    fn append_one(&mut self, entry: Entry) -> io::Result<()> {
        let lsn = entry.index() + 1;
        let next = self.log.next_lsn();
        if lsn < next {
            self.cut_after(lsn - 1)?;
        } else if lsn > next {
            if self.last.is_some() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "entry {} would leave a gap after {}",
                        entry.index(),
                        next - 1
                    ),
                ));
            }
            let body = codec::encode_start(self.purged.as_ref());
            self.log.reset(lsn - 1, &body).map_err(io_err)?;
        }
        self.scratch.clear();
        codec::encode_entry(&entry, &mut self.scratch);
        self.log.append(ENTRY, &self.scratch).map_err(io_err)?;
        self.last = Some(entry.log_id);
        self.tail_bytes += weight(&entry);
        self.tail.push_back(entry);
        while self.tail_bytes > TAIL_BYTES && self.tail.len() > 1 {
            self.tail_bytes -= self.tail.pop_front().map_or(0, |e| weight(&e));
        }
        Ok(())
    }

    /// Entries `start..end` the log holds, at most `max_bytes` of them (at
    /// least one when there is one).
    fn entries(&self, start: u64, end: u64, max_bytes: usize) -> io::Result<Vec<Entry>> {
        let start = start.max(self.purged.as_ref().map_or(0, |p| p.index + 1));
        let mut out = Vec::new();
        if start >= end {
            return Ok(out);
        }
        if let Some(first) = self.tail.front().map(|e| e.index()) {
            if start >= first {
                let mut bytes = 0;
                for e in self.tail.iter().skip((start - first) as usize) {
                    if e.index() >= end || (!out.is_empty() && bytes >= max_bytes) {
                        break;
                    }
                    bytes += weight(e);
                    out.push(e.clone());
                }
                return Ok(out);
            }
        }
        let records = self
            .log
            .read(start + 1, end.saturating_add(1), max_bytes)
            .map_err(io_err)?;
        for r in records {
            let entry = codec::decode_entry(&r.body)?;
            if entry.index() + 1 != r.lsn {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("log record {}: an entry of index {}", r.lsn, entry.index()),
                ));
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
        self.lock()?.entries(start, end, usize::MAX)
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, io::Error> {
        self.lock()?.entries(start, end, READ_BYTES)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(self.lock()?.vote)
    }
}

impl<S: Storage + 'static> RaftLogStorage<TypeConfig> for LogStore<S> {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let inner = self.lock()?;
        Ok(LogState {
            last_purged_log_id: inner.purged,
            last_log_id: inner.last.or_else(|| inner.purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let mut inner = self.lock()?;
        fila_wal::replace_file(
            inner.log.storage_mut(),
            VOTE_FILE,
            &codec::encode_vote(vote),
        )?;
        inner.vote = Some(*vote);
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        self.lock()?.committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(self.lock()?.committed)
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
        if let Some(e) = inner.flusher.as_ref().and_then(Flusher::failed) {
            return Err(e);
        }
        for entry in entries {
            inner.append_one(entry)?;
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
        let keep = last_log_id.as_ref().map_or(0, |l| l.index + 1);
        if inner.last.as_ref().is_none_or(|l| l.index < keep) {
            return Ok(());
        }
        inner.cut_after(keep)?;
        inner.last = match last_log_id {
            Some(id) if id.index + 1 > inner.start() => Some(id),
            _ => None,
        };
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let mut inner = self.lock()?;
        if inner.purged.as_ref().is_some_and(|p| *p >= log_id) {
            return Ok(());
        }
        let lsn = log_id.index + 1;
        let body = codec::encode_start(Some(&log_id));
        inner.purged = Some(log_id);
        if inner.last.as_ref().is_some_and(|l| l.index > log_id.index) {
            inner.log.snapshot(lsn, &body).map_err(io_err)?;
        } else {
            inner.log.reset(lsn, &body).map_err(io_err)?;
            inner.last = None;
        }
        while inner
            .tail
            .front()
            .is_some_and(|e| e.index() <= log_id.index)
        {
            let w = inner.tail.pop_front().map_or(0, |e| weight(&e));
            inner.tail_bytes -= w;
        }
        Ok(())
    }
}
