//! A group's own Raft log, the layout before a node's groups shared one:
//! read once, to move it into the node's log.
//!
//! That log held the group's entries as records of kind [`codec::ENTRY`]
//! whose LSN is the entry's index + 1, its snapshot's body the last purged
//! log id ([`codec::decode_start`]), and its vote in the file `vote`.

use fila_wal::{Log, LogOptions, Storage};

use super::{lock, start_bytes, vote_file, NodeLog};
use crate::codec::{self, ENTRY, GROUP_PURGE};

/// The vote's file in a group's own log.
const OLD_VOTE: &str = "vote";
/// Bytes appended before they are written out while moving.
const MOVE_BATCH: usize = 4 << 20;

/// Moves a group's own Raft log, in `old`, into `node`'s log as group
/// `group`: its start, its entries and its vote, synced before this
/// returns (the caller then removes the old log). Moving the same log
/// again (after a crash before it was removed) leaves the group as one
/// move does: each entry replaces the group's entries from its index on.
/// Answers how many entries moved.
pub fn move_group_log<S: Storage + 'static, T: Storage>(
    node: &NodeLog<S>,
    group: u64,
    old: T,
    options: LogOptions,
) -> Result<usize, crate::Error> {
    let mut inner = lock(&node.inner).map_err(|source| crate::Error::Io {
        file: "the node's Raft log".into(),
        source,
    })?;
    let inner = std::cell::RefCell::new(&mut *inner);
    let fail = |what: &'static str| {
        move |e: std::io::Error| crate::Error::Io {
            file: what.into(),
            source: e,
        }
    };
    let mut moved = 0;
    let (old, _) = Log::open_with(
        old,
        options,
        |file, body| {
            let bytes = start_bytes(file, body)?;
            let purged = codec::decode_start(&bytes).map_err(|e| crate::Error::Record {
                lsn: file.lsn,
                what: e.what,
            })?;
            if let Some(upto) = purged {
                let mut inner = inner.borrow_mut();
                inner.group(group).purge(upto);
                inner
                    .log
                    .append(GROUP_PURGE, &codec::encode_purge(group, &upto))?;
            }
            Ok::<(), crate::Error>(())
        },
        |lsn, kind, body| {
            let bad = |what| crate::Error::Record { lsn, what };
            if kind != ENTRY {
                return Err(bad("not a Raft entry"));
            }
            let entry = codec::decode_entry(body).map_err(|e| bad(e.what))?;
            if entry.log_id.index + 1 != lsn {
                return Err(bad("an entry whose index is not its place in the log"));
            }
            let mut inner = inner.borrow_mut();
            inner
                .append_one(group, entry)
                .map_err(fail("the node's Raft log"))?;
            moved += 1;
            if inner.log.pending_bytes() >= MOVE_BATCH {
                inner.log.write_out()?;
            }
            Ok(())
        },
    )?;
    let vote = fila_wal::read_file(old.storage(), OLD_VOTE).map_err(|source| crate::Error::Io {
        file: old.storage().describe(OLD_VOTE),
        source,
    })?;
    let inner = inner.into_inner();
    inner.log.commit()?;
    if let Some(vote) = vote {
        let parsed = codec::decode_vote(&vote).map_err(|e| crate::Error::Vote { what: e.what })?;
        let name = vote_file(group);
        fila_wal::replace_file(inner.log.storage_mut(), &name, &vote)
            .map_err(fail("the group's vote"))?;
        inner.group(group).vote = Some(Some(parsed));
    }
    Ok(moved)
}
