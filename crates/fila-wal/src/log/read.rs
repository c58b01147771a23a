//! Reading records back while the log is open: what a Raft log needs to
//! send a follower entries it does not have (recovery reads everything
//! once; this reads a range again, from the segments that hold it and from
//! the records still pending).

use super::{segment_name, Log, OwnedRecord, SEGMENT_HEADER};
use crate::record::{self, Decoded};
use crate::storage::Storage;
use crate::Error;

impl<S: Storage> Log<S> {
    /// The records from LSN `from` up to `to` (exclusive) that the log
    /// still holds, in order: durable ones read back from their segments
    /// (each segment that holds some is read whole, once), pending ones
    /// from the buffer. It stops once the bodies reach `max_bytes` (a
    /// first record larger than that is still answered). Records a
    /// snapshot or a reset removed are not there: the answer starts at the
    /// first one there is.
    pub fn read(&self, from: u64, to: u64, max_bytes: usize) -> Result<Vec<OwnedRecord>, Error> {
        self.read_where(from, to, max_bytes, |_| true)
    }

    /// What [`Log::read`] answers, of the records whose LSN `wanted` says
    /// yes to (the others neither answered nor counted in `max_bytes`):
    /// one user's records in a log several users share.
    pub fn read_where(
        &self,
        from: u64,
        to: u64,
        max_bytes: usize,
        wanted: impl Fn(u64) -> bool,
    ) -> Result<Vec<OwnedRecord>, Error> {
        let mut out = Vec::new();
        let mut bytes = 0usize;
        // Keeps a record; answers whether the answer is full.
        let take = |out: &mut Vec<OwnedRecord>, bytes: &mut usize, r: record::Record<'_>| {
            if !wanted(r.lsn) {
                return false;
            }
            *bytes += r.body.len();
            out.push(OwnedRecord {
                lsn: r.lsn,
                kind: r.kind,
                body: r.body.to_vec(),
            });
            *bytes >= max_bytes
        };
        let to = to.min(self.next_lsn);
        for (k, &(number, first)) in self.segments.iter().enumerate() {
            let end = self
                .segments
                .get(k + 1)
                .map_or(self.durable_lsn + 1, |&(_, next)| next);
            if end <= from || first >= to {
                continue;
            }
            let name = segment_name(number);
            let io = |source| Error::Io {
                file: self.storage.describe(&name),
                source,
            };
            // The newest segment up to its last record only: its zeros
            // after (filled ahead) hold nothing.
            let data = match &self.current {
                Some(c) if c.number == number => {
                    let mut data = vec![0; c.len as usize];
                    let n = self.storage.read_at(&name, 0, &mut data).map_err(io)?;
                    data.truncate(n);
                    data
                }
                _ => self.storage.read(&name).map_err(io)?,
            };
            let mut at = SEGMENT_HEADER;
            while at < data.len() {
                let Decoded::Record(r, used) = record::decode(&data[at..]) else {
                    break;
                };
                at += used;
                if r.lsn > self.durable_lsn || r.lsn >= to {
                    break;
                }
                if r.lsn < from || r.lsn <= self.snapshot_lsn {
                    continue;
                }
                if take(&mut out, &mut bytes, r) {
                    return Ok(out);
                }
            }
        }
        for &(lsn, start) in &self.pending_records {
            if lsn < from || lsn <= self.durable_lsn {
                continue;
            }
            if lsn >= to {
                break;
            }
            let Decoded::Record(r, _) = record::decode(&self.pending[start..]) else {
                unreachable!("pending records are encoded by this log");
            };
            if take(&mut out, &mut bytes, r) {
                break;
            }
        }
        Ok(out)
    }
}
