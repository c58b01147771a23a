//! Suffix truncation: the records after an LSN removed (what a Raft log
//! needs when a new leader's log overrides an uncommitted suffix).
//!
//! Pending records after it are dropped. Durable ones are cut off the
//! disk: the segments that start after it are removed, newest first, the
//! directory synced after each; then the segment that holds it is cut at
//! the first record after it and synced. A crash part way leaves a log that is
//! a prefix of the one before (it ends at a record boundary, and every
//! record kept is whole and in order), so recovery reads it as any other.
//! The next record appended gets the LSN after it.
//!
//! A reset ([`Log::reset`]) empties the log and starts it again after any
//! LSN, before or past its end.

use super::snapshot::snapshot_lsn;
use super::{segment_name, Current, Log, SEGMENT_HEADER};
use crate::record::{self, Decoded};
use crate::storage::Storage;
use crate::Error;

impl<S: Storage> Log<S> {
    /// Removes every record after `lsn` (pending and durable), so the next
    /// one appended gets `lsn + 1`. Refused (`Error::Truncate`) below the
    /// newest snapshot's LSN: those records are no longer in the log. A
    /// write or sync that fails fails the log, as in a commit.
    pub fn truncate_after(&mut self, lsn: u64) -> Result<(), Error> {
        if self.failed {
            return Err(Error::Failed);
        }
        if lsn >= self.next_lsn.saturating_sub(1) {
            return Ok(());
        }
        if lsn < self.snapshot_lsn {
            return Err(Error::Truncate {
                lsn,
                start: self.snapshot_lsn,
            });
        }
        // Pending records after it: dropped.
        if let Some(k) = self.pending_records.iter().position(|r| r.0 > lsn) {
            let cut = self.pending_records[k].1;
            self.pending.truncate(cut);
            self.pending_records.truncate(k);
        }
        if lsn < self.durable_lsn {
            let result = self.cut_durable(lsn);
            if result.is_err() {
                self.failed = true;
            }
            result?;
            self.durable_lsn = lsn;
        }
        self.next_lsn = lsn + 1;
        Ok(())
    }

    /// Cuts the durable records after `lsn` off the disk.
    fn cut_durable(&mut self, lsn: u64) -> Result<(), Error> {
        let io = |storage: &S, name: &str| {
            let file = storage.describe(name);
            move |source| Error::Io { file, source }
        };
        // The segment that keeps `lsn` (or, when `lsn` is the snapshot's,
        // the one starting right after it, emptied): the last starting at
        // or before `lsn + 1`.
        let keep = self
            .segments
            .iter()
            .rposition(|&(_, first)| first <= lsn + 1);
        self.remove_segments_from(keep.map_or(0, |k| k + 1))?;
        let Some(k) = keep else {
            self.current = None;
            return Ok(());
        };
        let (number, _) = self.segments[k];
        let name = segment_name(number);
        let data = self.storage.read(&name).map_err(io(&self.storage, &name))?;
        let mut at = SEGMENT_HEADER;
        while at < data.len() {
            match record::decode(&data[at..]) {
                Decoded::Record(r, used) if r.lsn <= lsn => at += used,
                _ => break,
            }
        }
        self.storage
            .truncate(&name, at as u64)
            .map_err(io(&self.storage, &name))?;
        self.storage
            .sync(&name)
            .map_err(|source| Error::SyncFailed {
                file: self.storage.describe(&name),
                source,
            })?;
        self.current = Some(Current::new(name, number, at as u64));
        Ok(())
    }

    /// Empties the log and starts it again after `lsn`, before or past its
    /// end: every record (pending and durable) and every snapshot goes, and
    /// a snapshot at `lsn` holding `body` takes their place; the next record
    /// appended gets `lsn + 1`. What a Raft log needs when a snapshot
    /// installed from its leader reaches past its end, or its first entry
    /// is not the one after its start. Segments go first, newest first
    /// with a directory sync after each, then the snapshots past `lsn`,
    /// then the new snapshot is written: a crash part way leaves a prefix
    /// of the log before (records newest first, then snapshots, gone) or
    /// the new one. A failure fails the log.
    pub fn reset(&mut self, lsn: u64, body: &[u8]) -> Result<(), Error> {
        if self.failed {
            return Err(Error::Failed);
        }
        self.snapshot_abandon();
        self.pending.clear();
        self.pending_records.clear();
        let result = self.reset_files(lsn, body);
        if result.is_err() {
            self.failed = true;
        }
        result
    }

    fn reset_files(&mut self, lsn: u64, body: &[u8]) -> Result<(), Error> {
        let io = |storage: &S, name: &str| {
            let file = storage.describe(name);
            move |source| Error::Io { file, source }
        };
        self.remove_segments_from(0)?;
        self.current = None;
        let names = self.storage.list().map_err(io(&self.storage, "."))?;
        let mut removed = false;
        for name in names {
            if snapshot_lsn(&name).is_some_and(|l| l > lsn) {
                self.storage
                    .remove(&name)
                    .map_err(io(&self.storage, &name))?;
                removed = true;
            }
        }
        if removed {
            self.storage.sync_dir().map_err(io(&self.storage, "."))?;
        }
        self.durable_lsn = lsn;
        self.next_lsn = lsn + 1;
        self.snapshot_lsn = 0;
        self.snapshot(lsn, body)?;
        self.snapshot_lsn = lsn;
        Ok(())
    }

    /// Removes the segments from the `first`-th on, newest first, each
    /// removal made durable before the next: a crash may lose a removal
    /// not yet synced, and a segment kept after a removed one would leave a
    /// gap.
    fn remove_segments_from(&mut self, first: usize) -> Result<(), Error> {
        while self.segments.len() > first {
            let (number, _) = self.segments[self.segments.len() - 1];
            let name = segment_name(number);
            if let Err(source) = self.storage.remove(&name) {
                let file = self.storage.describe(&name);
                return Err(Error::Io { file, source });
            }
            if let Err(source) = self.storage.sync_dir() {
                let file = self.storage.describe(".");
                return Err(Error::Io { file, source });
            }
            self.segments.pop();
        }
        Ok(())
    }
}
