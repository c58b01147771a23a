//! What fila-cluster writes: a Raft entry as a log record, the vote file,
//! the Raft log's start (the body of the log's snapshot) and the state
//! machine's snapshot file. Integers are big-endian.
//!
//! * log id: `u64` term, `u64` leader node, `u64` index; an optional one is
//!   a `u8` (0 none, 1 some) and then the id;
//! * membership: `u32` count of configurations, each a `u32` count and the
//!   `u64` voter ids; `u32` count of nodes, each its `u64` id, its peer
//!   address and its client address (each a `u32` length, UTF-8);
//! * entry (record kind [`ENTRY`]): `u8` version 1, its log id, `u8` payload
//!   (0 blank, 1 a batch of records — the rest of the body —, 2 a
//!   membership);
//! * vote: `FILAVOTE`, `u8` version 1, `u64` term, `u64` node, `u8`
//!   committed;
//! * a node's shared Raft log: every record begins with its group's `u64`
//!   id; an entry ([`GROUP_ENTRY`]) then holds the entry as above, an
//!   entry copied ([`GROUP_COPY`]) its run's first and last `u64` index
//!   and the entry, a cut
//!   ([`GROUP_CUT`]) the optional last log id kept, a purge
//!   ([`GROUP_PURGE`]) the last log id purged; its start (the body of its
//!   snapshot) is `u8` version 2, a `u32` count and each group's id and
//!   optional last purged log id;
//! * a group's own log (the layout before, read to move it): entries of
//!   record kind [`ENTRY`], its start `u8` version 1 and the optional last
//!   purged log id;
//! * state machine snapshot: `FILASMS\0`, `u8` version 1, the optional last
//!   applied log id, the optional log id of the last membership and the
//!   membership, then the partition's engine image in fila-store's snapshot
//!   format;
//! * the peer protocol's requests and answers ([`PeerRequest`],
//!   [`PeerAnswer`]): a kind byte, then a vote (term, node, committed),
//!   log ids, entries (`u32` count, each a `u32` length and an entry's
//!   body), and for a snapshot its metadata and the image to the end.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use openraft::entry::RaftEntry;
use openraft::EntryPayload;

use crate::{Batch, Entry, LogId, Member, Membership, NodeId, StoredMembership, Vote};

/// The log record kind of a Raft entry in one group's own log (the layout
/// before a node's groups shared one log: read only, to move it).
pub const ENTRY: u8 = 1;
/// The record kinds of a node's shared Raft log ([`NodeRecord`]).
pub const GROUP_ENTRY: u8 = 2;
/// A group's entries after one cut off (see [`NodeRecord::Cut`]).
pub const GROUP_CUT: u8 = 3;
/// A group's entries up to one purged (see [`NodeRecord::Purge`]).
pub const GROUP_PURGE: u8 = 4;
/// A live entry written again at the log's end (see [`NodeRecord::Copy`]).
pub const GROUP_COPY: u8 = 5;
const NODE_START_VERSION: u8 = 2;
const VERSION: u8 = 1;
const VOTE_MAGIC: &[u8; 8] = b"FILAVOTE";
const SM_MAGIC: &[u8; 8] = b"FILASMS\0";

/// What does not parse.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub struct CodecError {
    /// What is wrong.
    pub what: &'static str,
}

pub(crate) fn bad(what: &'static str) -> CodecError {
    CodecError { what }
}

impl From<CodecError> for String {
    fn from(e: CodecError) -> Self {
        e.what.to_owned()
    }
}

impl From<CodecError> for std::io::Error {
    fn from(e: CodecError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

pub(crate) struct Reader<'a> {
    pub(crate) data: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if self.data.len() < n {
            return Err(bad("cut short"));
        }
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        Ok(head)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u32(&mut self) -> Result<u32, CodecError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, CodecError> {
        let mut n = [0u8; 8];
        n.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(n))
    }
    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }
    pub(crate) fn end(&self) -> Result<(), CodecError> {
        if self.data.is_empty() {
            Ok(())
        } else {
            Err(bad("bytes left over"))
        }
    }
}

pub(crate) fn put_u32(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&u32::try_from(n).expect("below 4 Gi").to_be_bytes());
}

fn put_log_id(out: &mut Vec<u8>, id: &LogId) {
    out.extend_from_slice(&id.leader_id.term.to_be_bytes());
    out.extend_from_slice(&id.leader_id.node_id.to_be_bytes());
    out.extend_from_slice(&id.index.to_be_bytes());
}

fn log_id(r: &mut Reader<'_>) -> Result<LogId, CodecError> {
    let term = r.u64()?;
    let node = r.u64()?;
    let index = r.u64()?;
    Ok(LogId::new(
        openraft::impls::leader_id_adv::LeaderId {
            term,
            node_id: node,
        },
        index,
    ))
}

fn put_opt_log_id(out: &mut Vec<u8>, id: Option<&LogId>) {
    match id {
        None => out.push(0),
        Some(id) => {
            out.push(1);
            put_log_id(out, id);
        }
    }
}

fn opt_log_id(r: &mut Reader<'_>) -> Result<Option<LogId>, CodecError> {
    match r.u8()? {
        0 => Ok(None),
        1 => Ok(Some(log_id(r)?)),
        _ => Err(bad("bad optional log id")),
    }
}

fn put_membership(out: &mut Vec<u8>, m: &Membership) {
    let configs = m.get_joint_config();
    put_u32(out, configs.len());
    for c in configs {
        put_u32(out, c.len());
        for id in c {
            out.extend_from_slice(&id.to_be_bytes());
        }
    }
    let nodes: Vec<(&NodeId, &Member)> = m.nodes().collect();
    put_u32(out, nodes.len());
    for (id, node) in nodes {
        out.extend_from_slice(&id.to_be_bytes());
        for addr in [&node.addr, &node.client] {
            put_u32(out, addr.len());
            out.extend_from_slice(addr.as_bytes());
        }
    }
}

/// Counts read from the bytes are checked against what is left, so a
/// damaged count cannot make a huge allocation.
pub(crate) fn count(r: &mut Reader<'_>, each: usize) -> Result<usize, CodecError> {
    let n = r.u32()? as usize;
    if n.saturating_mul(each) > r.data.len() {
        return Err(bad("a count past the end"));
    }
    Ok(n)
}

pub(crate) fn text(r: &mut Reader<'_>) -> Result<String, CodecError> {
    let len = count(r, 1)?;
    let t = std::str::from_utf8(r.take(len)?).map_err(|_| bad("text that is not UTF-8"))?;
    Ok(t.to_owned())
}

fn membership(r: &mut Reader<'_>) -> Result<Membership, CodecError> {
    let mut configs = Vec::new();
    for _ in 0..count(r, 4)? {
        let mut c = BTreeSet::new();
        for _ in 0..count(r, 8)? {
            c.insert(r.u64()?);
        }
        configs.push(c);
    }
    let mut nodes = BTreeMap::new();
    for _ in 0..count(r, 16)? {
        let id = r.u64()?;
        let addr = text(r)?;
        let client = text(r)?;
        nodes.insert(id, Member { addr, client });
    }
    Membership::new(configs, nodes).map_err(|_| bad("a membership with a voter that is no node"))
}

/// The body of the log record that holds `entry`.
pub fn encode_entry(entry: &Entry, out: &mut Vec<u8>) {
    out.push(VERSION);
    put_log_id(out, &entry.log_id);
    match &entry.payload {
        EntryPayload::Blank => out.push(0),
        EntryPayload::Normal(batch) => {
            out.push(1);
            out.extend_from_slice(&batch.0);
        }
        EntryPayload::Membership(m) => {
            out.push(2);
            put_membership(out, m);
        }
    }
}

/// The entry a log record's body holds.
pub fn decode_entry(body: &[u8]) -> Result<Entry, CodecError> {
    let mut r = Reader { data: body };
    if r.u8()? != VERSION {
        return Err(bad("unknown entry version"));
    }
    let id = log_id(&mut r)?;
    let payload = match r.u8()? {
        0 => EntryPayload::Blank,
        1 => EntryPayload::Normal(Batch(Bytes::copy_from_slice(r.rest()))),
        2 => EntryPayload::Membership(membership(&mut r)?),
        _ => return Err(bad("unknown entry payload")),
    };
    r.end()?;
    Ok(Entry::new(id, payload))
}

/// The vote file's bytes.
pub fn encode_vote(vote: &Vote) -> Vec<u8> {
    let mut out = VOTE_MAGIC.to_vec();
    out.push(VERSION);
    put_vote(&mut out, vote);
    out
}

/// The vote a vote file holds.
pub fn decode_vote(data: &[u8]) -> Result<Vote, CodecError> {
    let mut r = Reader { data };
    if r.take(8)? != VOTE_MAGIC || r.u8()? != VERSION {
        return Err(bad("not a fila vote file"));
    }
    let v = vote(&mut r)?;
    r.end()?;
    Ok(v)
}

/// The log start's bytes: the last purged log id.
pub fn encode_start(purged: Option<&LogId>) -> Vec<u8> {
    let mut out = vec![VERSION];
    put_opt_log_id(&mut out, purged);
    out
}

/// The last purged log id a log start holds.
pub fn decode_start(data: &[u8]) -> Result<Option<LogId>, CodecError> {
    let mut r = Reader { data };
    if r.u8()? != VERSION {
        return Err(bad("unknown log start version"));
    }
    let id = opt_log_id(&mut r)?;
    r.end()?;
    Ok(id)
}

/// A record of a node's shared Raft log: every one names its group first.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeRecord {
    /// An entry of the group; it replaces the group's entries from its
    /// index on.
    Entry(u64, Entry),
    /// The group's entries after this one (none: all) are gone.
    Cut(u64, Option<LogId>),
    /// The group's entries up to this one are gone.
    Purge(u64, LogId),
    /// A live entry of the group written again, to free the segment that
    /// held it: one of a run that copies all the group's live entries,
    /// from the first index to the last given here, in consecutive
    /// records. Only a whole run counts: it then replaces the group's
    /// entries (a run a crash cut short is ignored; the originals are
    /// still there).
    Copy {
        /// The group.
        group: u64,
        /// The run's first and last index.
        run: (u64, u64),
        /// The entry.
        entry: Entry,
    },
}

/// The body of the shared log's record of kind [`GROUP_ENTRY`].
pub fn encode_group_entry(group: u64, entry: &Entry, out: &mut Vec<u8>) {
    out.extend_from_slice(&group.to_be_bytes());
    encode_entry(entry, out);
}

/// The body of a [`GROUP_COPY`] record: the group, its run's first and
/// last index, the entry.
pub fn encode_copy(group: u64, run: (u64, u64), entry: &Entry, out: &mut Vec<u8>) {
    out.extend_from_slice(&group.to_be_bytes());
    out.extend_from_slice(&run.0.to_be_bytes());
    out.extend_from_slice(&run.1.to_be_bytes());
    encode_entry(entry, out);
}

/// The body of a [`GROUP_CUT`] record: the group, the last entry kept.
pub fn encode_cut(group: u64, keep: Option<&LogId>) -> Vec<u8> {
    let mut out = group.to_be_bytes().to_vec();
    put_opt_log_id(&mut out, keep);
    out
}

/// The body of a [`GROUP_PURGE`] record: the group, the last entry purged.
pub fn encode_purge(group: u64, upto: &LogId) -> Vec<u8> {
    let mut out = group.to_be_bytes().to_vec();
    put_log_id(&mut out, upto);
    out
}

/// A record of the shared log.
pub fn decode_node_record(kind: u8, body: &[u8]) -> Result<NodeRecord, CodecError> {
    let mut r = Reader { data: body };
    let group = r.u64()?;
    let record = match kind {
        GROUP_ENTRY => return Ok(NodeRecord::Entry(group, decode_entry(r.rest())?)),
        GROUP_COPY => {
            let run = (r.u64()?, r.u64()?);
            let entry = decode_entry(r.rest())?;
            if !(run.0..=run.1).contains(&entry.log_id.index) {
                return Err(bad("a copied entry outside its run"));
            }
            return Ok(NodeRecord::Copy { group, run, entry });
        }
        GROUP_CUT => NodeRecord::Cut(group, opt_log_id(&mut r)?),
        GROUP_PURGE => NodeRecord::Purge(group, log_id(&mut r)?),
        ENTRY => {
            return Err(bad(
                "an entry of a group's own log, not of a node's shared log",
            ))
        }
        _ => return Err(bad("not a record of a node's Raft log")),
    };
    r.end()?;
    Ok(record)
}

/// The shared log's start (the body of its snapshot): `u8` version 2,
/// `u32` count, each group's id and its optional last purged log id.
pub fn encode_node_start<'a>(
    groups: impl ExactSizeIterator<Item = (u64, Option<&'a LogId>)>,
) -> Vec<u8> {
    let mut out = vec![NODE_START_VERSION];
    put_u32(&mut out, groups.len());
    for (group, purged) in groups {
        out.extend_from_slice(&group.to_be_bytes());
        put_opt_log_id(&mut out, purged);
    }
    out
}

/// Each group's last purged log id that the shared log's start holds.
pub fn decode_node_start(data: &[u8]) -> Result<Vec<(u64, Option<LogId>)>, CodecError> {
    let mut r = Reader { data };
    if r.u8()? != NODE_START_VERSION {
        return Err(bad("not the start of a node's Raft log"));
    }
    let mut out = Vec::new();
    for _ in 0..count(&mut r, 9)? {
        let group = r.u64()?;
        out.push((group, opt_log_id(&mut r)?));
    }
    r.end()?;
    Ok(out)
}

/// The head of a state machine snapshot file (the engine image follows).
pub fn encode_sm_head(applied: Option<&LogId>, membership: &StoredMembership, out: &mut Vec<u8>) {
    out.extend_from_slice(SM_MAGIC);
    out.push(VERSION);
    put_opt_log_id(out, applied);
    put_opt_log_id(out, membership.log_id().as_ref());
    put_membership(out, membership.membership());
}

/// A state machine snapshot file's head, and the engine image after it.
pub fn decode_sm_head(data: &[u8]) -> Result<(Option<LogId>, StoredMembership, &[u8]), CodecError> {
    let mut r = Reader { data };
    if r.take(8)? != SM_MAGIC || r.u8()? != VERSION {
        return Err(bad("not a fila state machine snapshot"));
    }
    let applied = opt_log_id(&mut r)?;
    let at = opt_log_id(&mut r)?;
    let m = membership(&mut r)?;
    Ok((applied, StoredMembership::new(at, m), r.rest()))
}

// ----- the peer protocol's messages ------------------------------------------

fn put_vote(out: &mut Vec<u8>, vote: &Vote) {
    let leader = vote.leader_id();
    out.extend_from_slice(&leader.term.to_be_bytes());
    out.extend_from_slice(&leader.node_id.to_be_bytes());
    out.push(u8::from(vote.is_committed()));
}

fn vote(r: &mut Reader<'_>) -> Result<Vote, CodecError> {
    let term = r.u64()?;
    let node = r.u64()?;
    Ok(match r.u8()? {
        0 => Vote::new(term, node),
        1 => Vote::new_committed(term, node),
        _ => return Err(bad("bad committed flag")),
    })
}

fn put_entries(out: &mut Vec<u8>, entries: &[Entry]) {
    put_u32(out, entries.len());
    for e in entries {
        // Its length, once it is encoded after it.
        let at = out.len();
        put_u32(out, 0);
        encode_entry(e, out);
        let len = out.len() - at - 4;
        out[at..at + 4].copy_from_slice(&u32::try_from(len).expect("below 4 Gi").to_be_bytes());
    }
}

fn entries(r: &mut Reader<'_>) -> Result<Vec<Entry>, CodecError> {
    // An entry takes at least 30 bytes with its length.
    let n = count(r, 30)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let len = count(r, 1)?;
        out.push(decode_entry(r.take(len)?)?);
    }
    Ok(out)
}

/// A request of the peer protocol: an append, a vote, a whole snapshot, a
/// transfer of the leadership.
#[derive(Debug)]
pub enum PeerRequest {
    /// `AppendEntries`.
    Append(openraft::raft::AppendEntriesRequest<crate::TypeConfig>),
    /// `RequestVote`.
    Vote(openraft::raft::VoteRequest<crate::TypeConfig>),
    /// A whole snapshot: the leader's vote, its metadata, the image.
    Snapshot(Vote, crate::SnapshotMeta, Vec<u8>),
    /// The leader hands its leadership to a node.
    TransferLeader(openraft::raft::TransferLeaderRequest<crate::TypeConfig>),
    /// A request a follower forwards to its leader, opaque here: the
    /// server's (see [`crate::peer::Forward`]).
    Forward(Vec<u8>),
}

/// An answer of the peer protocol.
#[derive(Debug)]
pub enum PeerAnswer {
    /// To an append.
    Append(openraft::raft::AppendEntriesResponse<crate::TypeConfig>),
    /// To a vote.
    Vote(openraft::raft::VoteResponse<crate::TypeConfig>),
    /// To a snapshot: the receiver's vote.
    Snapshot(Vote),
    /// To a transfer of the leadership.
    TransferLeader(openraft::raft::TransferLeaderResponse<crate::TypeConfig>),
    /// To a forwarded request: its answer, opaque here.
    Forwarded(Vec<u8>),
    /// The request was not handled (why).
    Refused(String),
}

const REQ_APPEND: u8 = 1;
const REQ_VOTE: u8 = 2;
const REQ_SNAPSHOT: u8 = 3;
const REQ_TRANSFER: u8 = 4;
const REQ_FORWARD: u8 = 5;
const ANS_APPEND: u8 = 0x81;
const ANS_VOTE: u8 = 0x82;
const ANS_SNAPSHOT: u8 = 0x83;
const ANS_TRANSFER: u8 = 0x84;
const ANS_FORWARDED: u8 = 0x85;
const ANS_REFUSED: u8 = 0xff;

/// A request's bytes: its kind, then its body.
pub fn encode_request(req: &PeerRequest, out: &mut Vec<u8>) {
    match req {
        PeerRequest::Append(a) => {
            out.push(REQ_APPEND);
            put_vote(out, &a.vote);
            put_opt_log_id(out, a.prev_log_id.as_ref());
            put_opt_log_id(out, a.leader_commit.as_ref());
            put_entries(out, &a.entries);
        }
        PeerRequest::Vote(v) => {
            out.push(REQ_VOTE);
            put_vote(out, &v.vote);
            put_opt_log_id(out, v.last_log_id.as_ref());
        }
        PeerRequest::Snapshot(v, meta, data) => {
            out.push(REQ_SNAPSHOT);
            put_vote(out, v);
            put_opt_log_id(out, meta.last_log_id.as_ref());
            put_opt_log_id(out, meta.last_membership.log_id().as_ref());
            put_membership(out, meta.last_membership.membership());
            out.extend_from_slice(data);
        }
        PeerRequest::TransferLeader(t) => {
            out.push(REQ_TRANSFER);
            put_vote(out, t.from_leader());
            out.extend_from_slice(&t.to_node_id().to_be_bytes());
            put_opt_log_id(out, t.last_log_id());
        }
        PeerRequest::Forward(body) => {
            out.push(REQ_FORWARD);
            out.extend_from_slice(body);
        }
    }
}

/// The request `data` holds.
pub fn decode_request(data: &[u8]) -> Result<PeerRequest, CodecError> {
    let mut r = Reader { data };
    let req = match r.u8()? {
        REQ_APPEND => {
            let v = vote(&mut r)?;
            let prev_log_id = opt_log_id(&mut r)?;
            let leader_commit = opt_log_id(&mut r)?;
            let entries = entries(&mut r)?;
            PeerRequest::Append(openraft::raft::AppendEntriesRequest {
                vote: v,
                prev_log_id,
                entries,
                leader_commit,
            })
        }
        REQ_VOTE => {
            let v = vote(&mut r)?;
            let last = opt_log_id(&mut r)?;
            PeerRequest::Vote(openraft::raft::VoteRequest::new(v, last))
        }
        REQ_SNAPSHOT => {
            let v = vote(&mut r)?;
            let last_log_id = opt_log_id(&mut r)?;
            let at = opt_log_id(&mut r)?;
            let m = membership(&mut r)?;
            let meta = crate::SnapshotMeta {
                last_log_id,
                last_membership: StoredMembership::new(at, m),
            };
            return Ok(PeerRequest::Snapshot(v, meta, r.rest().to_vec()));
        }
        REQ_TRANSFER => {
            let from = vote(&mut r)?;
            let to = r.u64()?;
            let last = opt_log_id(&mut r)?;
            PeerRequest::TransferLeader(openraft::raft::TransferLeaderRequest::new(from, to, last))
        }
        REQ_FORWARD => return Ok(PeerRequest::Forward(r.rest().to_vec())),
        _ => return Err(bad("unknown peer request")),
    };
    r.end()?;
    Ok(req)
}

/// An answer's bytes: its kind, then its body.
pub fn encode_answer(answer: &PeerAnswer, out: &mut Vec<u8>) {
    use openraft::raft::AppendEntriesResponse as A;
    match answer {
        PeerAnswer::Append(a) => {
            out.push(ANS_APPEND);
            match a {
                A::Success => out.push(0),
                A::PartialSuccess(id) => {
                    out.push(1);
                    put_opt_log_id(out, id.as_ref());
                }
                A::Conflict => out.push(2),
                A::HigherVote(v) => {
                    out.push(3);
                    put_vote(out, v);
                }
            }
        }
        PeerAnswer::Vote(v) => {
            out.push(ANS_VOTE);
            put_vote(out, &v.vote);
            out.push(u8::from(v.vote_granted));
            put_opt_log_id(out, v.last_log_id.as_ref());
        }
        PeerAnswer::Snapshot(v) => {
            out.push(ANS_SNAPSHOT);
            put_vote(out, v);
        }
        PeerAnswer::TransferLeader(t) => {
            use openraft::raft::TransferLeaderError as T;
            out.push(ANS_TRANSFER);
            match t {
                Ok(()) => out.push(0),
                Err(T::VoteChanged { expected, actual }) => {
                    out.push(1);
                    put_vote(out, expected);
                    put_vote(out, actual);
                }
                Err(T::LogNotFlushed { expected, actual }) => {
                    out.push(2);
                    put_opt_log_id(out, expected.as_ref());
                    put_opt_log_id(out, actual.as_ref());
                }
            }
        }
        PeerAnswer::Forwarded(body) => {
            out.push(ANS_FORWARDED);
            out.extend_from_slice(body);
        }
        PeerAnswer::Refused(why) => {
            out.push(ANS_REFUSED);
            out.extend_from_slice(why.as_bytes());
        }
    }
}

/// The answer `data` holds.
pub fn decode_answer(data: &[u8]) -> Result<PeerAnswer, CodecError> {
    use openraft::raft::AppendEntriesResponse as A;
    let mut r = Reader { data };
    let answer = match r.u8()? {
        ANS_APPEND => PeerAnswer::Append(match r.u8()? {
            0 => A::Success,
            1 => A::PartialSuccess(opt_log_id(&mut r)?),
            2 => A::Conflict,
            3 => A::HigherVote(vote(&mut r)?),
            _ => return Err(bad("unknown append answer")),
        }),
        ANS_VOTE => {
            let v = vote(&mut r)?;
            let granted = match r.u8()? {
                0 => false,
                1 => true,
                _ => return Err(bad("bad granted flag")),
            };
            let last = opt_log_id(&mut r)?;
            PeerAnswer::Vote(openraft::raft::VoteResponse::new(v, last, granted))
        }
        ANS_SNAPSHOT => PeerAnswer::Snapshot(vote(&mut r)?),
        ANS_TRANSFER => {
            use openraft::raft::TransferLeaderError as T;
            PeerAnswer::TransferLeader(match r.u8()? {
                0 => Ok(()),
                1 => Err(T::VoteChanged {
                    expected: vote(&mut r)?,
                    actual: vote(&mut r)?,
                }),
                2 => Err(T::LogNotFlushed {
                    expected: opt_log_id(&mut r)?,
                    actual: opt_log_id(&mut r)?,
                }),
                _ => return Err(bad("unknown transfer answer")),
            })
        }
        ANS_FORWARDED => return Ok(PeerAnswer::Forwarded(r.rest().to_vec())),
        ANS_REFUSED => {
            let why = String::from_utf8_lossy(r.rest()).into_owned();
            return Ok(PeerAnswer::Refused(why));
        }
        _ => return Err(bad("unknown peer answer")),
    };
    r.end()?;
    Ok(answer)
}
