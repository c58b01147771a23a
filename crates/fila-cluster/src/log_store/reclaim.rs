//! Reclaiming a node's Raft log: the segments before every group's first
//! live entry go with the log's snapshot, and a group that pins the
//! oldest segment while writing little has its live entries written again
//! at the log's end first (see the module above).
//!
//! On a file system the work that waits on the disk is done away from the
//! log's lock, by a thread of the log's own ([`Reclaimer`],
//! `fila-raft-trim`): the copies' sync, the snapshot's file written,
//! synced and named, the directory synced. Under the lock only the copies
//! are written and, once the snapshot is durable, the segments it covers
//! are unlinked; the groups' appends go on meanwhile. One reclaim is in
//! flight at a time. On a simulated disk (one value, no second handle)
//! the reclaim is done in place, as the simulation needs it to be
//! deterministic.

use std::io;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};

use fila_wal::{DetachedSnapshot, Storage, SyncHandle};
use openraft::entry::RaftEntry;

use super::{io_err, lock, Inner, Place, PIN_SEGMENTS, READ_BYTES};
use crate::codec::{self, GROUP_COPY};

impl<S: Storage + 'static> Inner<S> {
    /// After a purge (its record appended): copies the live entries of the
    /// groups that pin the oldest segment and may move (see
    /// [`Inner::movable`]); when that frees a segment, takes the log's
    /// snapshot before the first live record — on the reclaim thread when
    /// the storage has a second handle, else here, after one sync of the
    /// copies. Nothing is synced for the purge itself: a purge lost in a
    /// crash brings back entries the group's own snapshot covers, which
    /// openraft skips.
    pub(super) fn reclaim(&mut self, me: &Arc<Mutex<Inner<S>>>) -> io::Result<()> {
        // After a failed sync nothing written is known to be durable: no
        // copy may stand in for its original.
        if let Some(e) = self.failed() {
            return Err(e);
        }
        let upto = if self.reclaiming {
            None
        } else {
            self.copy_pinning()?
        };
        self.log.write_out().map_err(io_err)?;
        let Some(upto) = upto else {
            return Ok(());
        };
        let body = codec::encode_node_start(
            self.groups
                .iter()
                .map(|(&id, g)| (id, g.purged.as_ref()))
                .collect::<Vec<_>>()
                .into_iter(),
        );
        let away = match self.log.storage().beside() {
            Some(storage) => self
                .log
                .sync_handle()
                .map_err(io_err)?
                .map(|sync| (storage, sync)),
            None => None,
        };
        let Some((storage, sync)) = away else {
            // The copies, before the segments holding their originals go.
            self.log.commit().map_err(io_err)?;
            return self.log.snapshot(upto, &body).map_err(io_err);
        };
        let snap = self.log.snapshot_detached(upto, &body).map_err(io_err)?;
        if self.reclaimer.is_none() {
            self.reclaimer = Some(Reclaimer::start(Arc::downgrade(me))?);
        }
        let job = Job {
            sync,
            snap,
            storage,
        };
        self.reclaiming = self
            .reclaimer
            .as_ref()
            .and_then(|r| r.jobs.as_ref())
            .is_some_and(|jobs| jobs.send(job).is_ok());
        Ok(())
    }

    /// Copies the live entries of the groups whose oldest record is in the
    /// oldest segment, when all of them may move; answers the LSN the
    /// log's snapshot may then be taken at, when that frees a segment.
    fn copy_pinning(&mut self) -> io::Result<Option<u64>> {
        let starts: Vec<u64> = self.log.segment_starts().collect();
        let Some(&second) = starts.get(1) else {
            return Ok(None);
        };
        let pinning: Vec<u64> = self
            .groups
            .iter()
            .filter(|(_, g)| g.oldest().is_some_and(|lsn| lsn < second))
            .map(|(&id, _)| id)
            .collect();
        if !pinning.iter().all(|&id| self.movable(id, &starts)) {
            return Ok(None);
        }
        for id in pinning {
            self.copy_live(id)?;
            self.copy_runs += 1;
        }
        let upto = self
            .groups
            .values()
            .filter_map(|g| g.oldest().map(|lsn| lsn - 1))
            .min()
            .unwrap_or(self.log.next_lsn() - 1);
        Ok((upto + 1 >= second).then_some(upto))
    }

    /// Whether group `id`'s live entries may be copied to the log's end:
    /// the segments from its first one on are at least [`PIN_SEGMENTS`],
    /// and hold at least four times its live bytes (so copying one group
    /// costs the log at most a quarter of what it writes meanwhile).
    fn movable(&self, id: u64, starts: &[u64]) -> bool {
        let Some(g) = self.groups.get(&id) else {
            return false;
        };
        let Some(oldest) = g.oldest() else {
            return true;
        };
        let from = starts.partition_point(|&s| s <= oldest).saturating_sub(1);
        let pinned = starts.len() - from;
        pinned >= PIN_SEGMENTS && pinned as u64 * self.segment_bytes >= 4 * g.live_bytes
    }

    /// Writes group `id`'s live entries again at the log's end (not yet
    /// synced), a read's worth at a time, as one run of copies, which
    /// counts only once whole: a run cut short by a crash or an error
    /// leaves the group's entries where they were.
    fn copy_live(&mut self, id: u64) -> io::Result<()> {
        let Some((first, next)) = self
            .groups
            .get(&id)
            .and_then(|g| Some((g.first, g.next()?)))
        else {
            return Ok(());
        };
        // The copies' places are taken only once the whole run is
        // appended: a run cut short by an error leaves the group reading
        // (and pinning) its originals, as recovery would.
        let mut places = Vec::with_capacity((next - first) as usize);
        let mut at = first;
        while at < next {
            let entries = self.entries(id, at, next, READ_BYTES)?;
            if entries.is_empty() {
                return Err(io::Error::other(format!(
                    "group {id}'s entry {at} is not in the log"
                )));
            }
            for entry in entries {
                self.scratch.clear();
                codec::encode_copy(id, (first, next - 1), &entry, &mut self.scratch);
                let lsn = self.log.append(GROUP_COPY, &self.scratch).map_err(io_err)?;
                places.push(Place {
                    lsn,
                    bytes: self.scratch.len() as u32,
                });
                at = entry.index() + 1;
            }
            self.log.write_out().map_err(io_err)?;
        }
        let g = self.groups.get_mut(&id).expect("copied above");
        for (k, place) in places.into_iter().enumerate() {
            g.places[k] = place;
        }
        Ok(())
    }
}

/// One reclaim's work away from the lock.
struct Job<S> {
    /// Syncs the segment the copies (and every record before the
    /// snapshot's LSN) were written to.
    sync: SyncHandle,
    snap: DetachedSnapshot,
    /// A second handle on the log's directory.
    storage: S,
}

/// The reclaim thread of one log: started at its first reclaim, stopped
/// (after the job it is doing) when the log is dropped.
pub(super) struct Reclaimer<S> {
    /// Taken when the log is dropped: the thread ends after its job.
    jobs: Option<mpsc::Sender<Job<S>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<S: Storage + 'static> Reclaimer<S> {
    fn start(log: Weak<Mutex<Inner<S>>>) -> io::Result<Reclaimer<S>> {
        let (jobs, rx) = mpsc::channel::<Job<S>>();
        let thread = std::thread::Builder::new()
            .name("fila-raft-trim".into())
            .spawn(move || {
                for job in rx {
                    run(job, &log);
                }
            })?;
        Ok(Reclaimer {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }
}

impl<S> Drop for Reclaimer<S> {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            // The thread itself may hold the log's last reference.
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

/// Syncs the copies, writes the snapshot, then (under the lock) makes it
/// the log's: a failed sync fails the log (what was written is not known
/// to be durable); a snapshot not written is only not taken (a later purge
/// tries again).
fn run<S: Storage + 'static>(mut job: Job<S>, log: &Weak<Mutex<Inner<S>>>) {
    let synced = (job.sync)().map_err(|e| format!("syncing the Raft log: {e}"));
    let written = synced.clone().and_then(|()| {
        job.snap
            .write(&mut job.storage)
            .map_err(|e| format!("taking the Raft log's snapshot: {e}"))
    });
    let Some(log) = log.upgrade() else {
        return;
    };
    let Ok(mut inner) = lock(&log) else {
        return;
    };
    inner.reclaiming = false;
    match (synced, written) {
        (Err(why), _) => {
            tracing::error!("{why}");
            if let Some(flusher) = &inner.flusher {
                flusher.fail(why.clone());
            }
            inner.broken.get_or_insert(why);
        }
        (Ok(()), Err(why)) => tracing::warn!("{why}"),
        (Ok(()), Ok(())) => inner.log.snapshot_adopt(job.snap.lsn()),
    }
    drop(inner);
    let _ = job.storage.sync_dir();
}
