//! Reclaiming a node's Raft log: the segments before every group's first
//! live entry go with the log's snapshot, and a group that pins the
//! oldest segment while writing little has its live entries written again
//! at the log's end first (see the module above).

use std::io;

use fila_wal::Storage;
use openraft::entry::RaftEntry;

use super::{io_err, Inner, Place, PIN_SEGMENTS, READ_BYTES};
use crate::codec::{self, GROUP_COPY};

impl<S: Storage> Inner<S> {
    /// After a purge: copies the live entries of the groups that pin the
    /// oldest segment and may move (see [`Inner::movable`]), makes the
    /// purge's record and the copies durable with one sync, then removes
    /// the segments no group needs any more.
    pub(super) fn reclaim(&mut self) -> io::Result<()> {
        let upto = self.copy_pinning()?;
        // The purge's record, and the copies before the segments holding
        // their originals go.
        self.log.commit().map_err(io_err)?;
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
        self.log.snapshot(upto, &body).map_err(io_err)
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
