//! Reading a node's Raft log back at open: each group's records replayed
//! in order, and the runs of copies ([`NodeRecord::Copy`]) counted only
//! once whole.

use std::collections::{BTreeMap, VecDeque};

use super::{Group, Place};
use crate::codec::{self, NodeRecord};
use crate::LogId;

/// A run of copies being read.
struct Run {
    group: u64,
    /// Its first and last index.
    span: (u64, u64),
    places: VecDeque<Place>,
    /// The LSN its next copy must have: a run's records are consecutive.
    next_lsn: u64,
}

/// The groups as read so far.
#[derive(Default)]
pub(super) struct Replaying {
    groups: BTreeMap<u64, Group>,
    run: Option<Run>,
}

impl Replaying {
    /// The log's start: each group's last purged log id.
    pub(super) fn start(&mut self, lsn: u64, body: &[u8]) -> Result<(), crate::Error> {
        let starts = codec::decode_node_start(body)
            .map_err(|e| crate::Error::Record { lsn, what: e.what })?;
        for (group, purged) in starts {
            self.groups.entry(group).or_default().purged = purged;
        }
        Ok(())
    }

    /// The next record.
    pub(super) fn record(&mut self, lsn: u64, kind: u8, body: &[u8]) -> Result<(), crate::Error> {
        let bad = |what| crate::Error::Record { lsn, what };
        let place = Place {
            lsn,
            bytes: body.len() as u32,
        };
        let record = codec::decode_node_record(kind, body).map_err(|e| bad(e.what))?;
        // A run some other record interrupts was cut short by a crash.
        let run = self.run.take().filter(|r| r.next_lsn == lsn);
        match record {
            NodeRecord::Entry(group, entry) => {
                self.group(group)
                    .take(place, entry)
                    .map_err(|_| bad("an entry that leaves a gap in its group"))?;
            }
            NodeRecord::Cut(group, keep) => self.group(group).cut(keep),
            NodeRecord::Purge(group, upto) => self.group(group).purge(upto),
            NodeRecord::Copy {
                group,
                run: span,
                entry,
            } => {
                let index = entry.log_id.index;
                let mut run = match run {
                    Some(r) if r.group == group && r.span == span => r,
                    // A run starts at its first index; the rest of one
                    // whose start is gone counts for nothing.
                    _ if index == span.0 => Run {
                        group,
                        span,
                        places: VecDeque::new(),
                        next_lsn: lsn,
                    },
                    _ => return Ok(()),
                };
                if index != span.0 + run.places.len() as u64 {
                    return Ok(());
                }
                run.places.push_back(place);
                run.next_lsn = lsn + 1;
                if index == span.1 {
                    self.whole(run, entry.log_id);
                } else {
                    self.run = Some(run);
                }
            }
        }
        Ok(())
    }

    /// A whole run: the group's live entries are the copies.
    fn whole(&mut self, run: Run, last: LogId) {
        let g = self.group(run.group);
        if g.purged.is_some_and(|p| p.index >= run.span.0) {
            // Purged since the copy was made (the purge's record comes
            // later, but its snapshot may be read first): what the copy
            // holds past the purge still counts.
            let keep = run.span.1.saturating_sub(g.purged.map_or(0, |p| p.index));
            let skip = run.places.len().saturating_sub(keep as usize);
            let places: VecDeque<Place> = run.places.into_iter().skip(skip).collect();
            if !places.is_empty() {
                let first = run.span.1 + 1 - places.len() as u64;
                g.replace(first, places, last);
            }
            return;
        }
        g.replace(run.span.0, run.places, last);
    }

    fn group(&mut self, group: u64) -> &mut Group {
        self.groups.entry(group).or_default()
    }

    /// The groups, once every record was read.
    pub(super) fn finish(self) -> BTreeMap<u64, Group> {
        self.groups
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use openraft::entry::RaftEntry;
    use openraft::EntryPayload;

    use super::*;
    use crate::codec::{GROUP_COPY, GROUP_ENTRY, GROUP_PURGE};
    use crate::{Batch, Entry};

    use crate::test_log_id as id;

    fn entry(index: u64) -> Entry {
        Entry::new(
            id(index),
            EntryPayload::Normal(Batch(Bytes::from(format!("entry {index}")))),
        )
    }

    /// Replays `records` (kind and body each, LSNs from `first_lsn`)
    /// after a start holding `purged` for group 1; answers group 1's live
    /// entries as (index, LSN).
    fn replayed(purged: Option<u64>, first_lsn: u64, records: &[(u8, Vec<u8>)]) -> Vec<(u64, u64)> {
        let mut r = Replaying::default();
        let ids = purged.map(id);
        r.start(
            first_lsn - 1,
            &codec::encode_node_start([(1, ids.as_ref())].into_iter()),
        )
        .unwrap();
        for (k, (kind, body)) in records.iter().enumerate() {
            r.record(first_lsn + k as u64, *kind, body).unwrap();
        }
        let groups = r.finish();
        let g = &groups[&1];
        g.places
            .iter()
            .enumerate()
            .map(|(k, p)| (g.first + k as u64, p.lsn))
            .collect()
    }

    fn put(group: u64, index: u64) -> (u8, Vec<u8>) {
        let mut body = Vec::new();
        codec::encode_group_entry(group, &entry(index), &mut body);
        (GROUP_ENTRY, body)
    }

    fn copy(run: (u64, u64), index: u64) -> (u8, Vec<u8>) {
        let mut body = Vec::new();
        codec::encode_copy(1, run, &entry(index), &mut body);
        (GROUP_COPY, body)
    }

    #[test]
    fn a_whole_run_of_copies_moves_the_entries_and_a_cut_one_moves_none() {
        let originals = [put(1, 1), put(1, 2), put(1, 3)];
        // Whole: each entry at its copy (LSNs 4, 5, 6).
        let mut whole = originals.to_vec();
        whole.extend([copy((1, 3), 1), copy((1, 3), 2), copy((1, 3), 3)]);
        assert_eq!(replayed(None, 1, &whole), [(1, 4), (2, 5), (3, 6)]);
        // Cut short by a crash: the originals stand.
        let mut cut = originals.to_vec();
        cut.extend([copy((1, 3), 1), copy((1, 3), 2)]);
        assert_eq!(replayed(None, 1, &cut), [(1, 1), (2, 2), (3, 3)]);
        // Interrupted by another record (written after a restart): the
        // originals stand, and so does a later whole run.
        let mut broken = cut.clone();
        broken.push(put(2, 1));
        broken.push(copy((1, 3), 3));
        assert_eq!(replayed(None, 1, &broken), [(1, 1), (2, 2), (3, 3)]);
        broken.extend([copy((1, 3), 1), copy((1, 3), 2), copy((1, 3), 3)]);
        assert_eq!(replayed(None, 1, &broken), [(1, 8), (2, 9), (3, 10)]);
    }

    #[test]
    fn a_run_whose_originals_the_start_dropped_still_counts() {
        // The log's snapshot went past the originals (LSNs 1..=3): only
        // the copies are read, and the start's purge of entry 1 trims them.
        let copies = [copy((1, 3), 1), copy((1, 3), 2), copy((1, 3), 3)];
        assert_eq!(replayed(None, 4, &copies), [(1, 4), (2, 5), (3, 6)]);
        assert_eq!(replayed(Some(1), 4, &copies), [(2, 5), (3, 6)]);
        assert_eq!(replayed(Some(3), 4, &copies), []);
        // A purge after the run.
        let mut purged = copies.to_vec();
        purged.push((GROUP_PURGE, codec::encode_purge(1, &id(2))));
        assert_eq!(replayed(None, 4, &purged), [(3, 6)]);
    }

    #[test]
    fn an_entry_replaces_its_index_on_and_a_purged_one_is_skipped() {
        let records = [put(1, 1), put(1, 2), put(1, 3), put(1, 2)];
        assert_eq!(replayed(None, 1, &records), [(1, 1), (2, 4)]);
        assert_eq!(replayed(Some(2), 1, &records), [(3, 3)]);
    }
}
