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
