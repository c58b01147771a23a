//! The state machine of one group: committed entries applied in order
//! through [`Replay`] — each normal entry a batch of fila-store records,
//! decoded and applied one by one as recovery applies a single node's log —
//! and snapshots of it: the file `state.snap`, replaced whole, holding the
//! last applied log id, the last membership and the engine image in
//! fila-store's snapshot format (the same bytes are what a follower that
//! is too far behind is sent, read back from the file).
//!
//! The state is in memory; after a restart it is the snapshot's, and
//! openraft applies the committed entries after it again (every record is
//! idempotent: applying one whose effect the state already shows changes
//! nothing). A snapshot is written straight from the state (no copy of it
//! is made first) while the state's lock is held, then to its file
//! without the lock (entries are applied meanwhile); only its metadata
//! stays in memory. [`StateMachine::snapshot_due`] says when the entries
//! applied since the last snapshot hold as many bytes as it (and at least
//! [`SNAPSHOT_LOG_MIN`]): a large state is written no more often than the
//! log grows by its size. A partition's state this node no longer needs
//! (a replica it gave up) can be parked ([`StateMachine::park`]): written
//! to its snapshot and dropped from memory, and read back from the
//! snapshot at its next use.
//!
//! Beside the queues it keeps the highest node id that was ever a member
//! (a removed node's id is never taken again: [`StateMachine::highest_id`]).
//! A snapshot's data is [`IDS_MAGIC`], that id, then the engine image (data
//! without the magic, of an earlier version, is an image alone).

use std::io::{self, Cursor};
use std::sync::{Arc, Mutex, MutexGuard};

use fila_core::event::EngineImage;
use fila_store::codec::{batch_records, decode, read_snapshot};
use fila_store::replay::Replay;
use fila_wal::Storage;
use futures_util::{Stream, TryStreamExt};
use openraft::storage::{EntryResponder, RaftStateMachine, Snapshot};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};

use crate::codec::{decode_sm_head, encode_sm_head, CodecError};
use crate::meta::{decode_change, decode_map, encode_map, ClusterMap};
use crate::{Applied, LogId, NodeId, SnapshotMeta, StoredMembership, TypeConfig};

type SnapshotOf = openraft::alias::SnapshotOf<TypeConfig, Cursor<Vec<u8>>>;

/// The state machine's snapshot file.
pub const SNAPSHOT_FILE: &str = "state.snap";

/// What a snapshot's data starts with: the highest member id follows.
pub const IDS_MAGIC: &[u8; 8] = b"FILAIDS1";

/// Bytes of entries applied since the last snapshot before another is
/// due, at least ([`StateMachine::snapshot_due`]).
pub const SNAPSHOT_LOG_MIN: u64 = 16 << 20;

/// What an entry without records counts for in the bytes applied since
/// the last snapshot.
const ENTRY_BYTES_MIN: u64 = 64;

/// The highest member id a snapshot's data holds, and its engine image.
fn split_data(data: &[u8]) -> (NodeId, &[u8]) {
    match data.strip_prefix(IDS_MAGIC.as_slice()) {
        Some(rest) if rest.len() >= 8 => {
            let (id, image) = rest.split_at(8);
            (u64::from_be_bytes(id.try_into().expect("8 bytes")), image)
        }
        _ => (0, data),
    }
}

/// The highest id of a membership's nodes.
fn highest_of(m: &StoredMembership) -> NodeId {
    m.membership().nodes().map(|(id, _)| *id).max().unwrap_or(0)
}

/// The state machine of one group. Cloned, it is the same one (the
/// snapshot builder openraft runs is a clone). Two locks: the state's,
/// and the snapshot file's (taken first when both are), so that writing a
/// snapshot's file holds up no entry's apply.
pub struct StateMachine<S: Storage + 'static> {
    inner: Arc<Mutex<Inner>>,
    disk: Arc<Mutex<Disk<S>>>,
}

impl<S: Storage + 'static> Clone for StateMachine<S> {
    fn clone(&self) -> Self {
        StateMachine {
            inner: self.inner.clone(),
            disk: self.disk.clone(),
        }
    }
}

/// What a group's state machine holds.
enum Content {
    /// A partition: its queues and messages.
    Queues(Replay),
    /// The metadata group: the cluster's map.
    Map(Arc<ClusterMap>),
    /// A partition's queues, parked: written to the snapshot file and
    /// dropped from memory until their next use.
    Parked,
}

impl Content {
    fn is_map(&self) -> bool {
        matches!(self, Content::Map(_))
    }

    /// The content a snapshot's body (after the highest id) holds: a map
    /// or queues.
    fn read(map: bool, body: &[u8]) -> Result<Content, CodecError> {
        if map {
            return Ok(Content::Map(Arc::new(decode_map(body)?)));
        }
        let mut replay = Replay::default();
        read_snapshot(&mut &body[..], &mut replay).map_err(|e| CodecError { what: e.what })?;
        Ok(Content::Queues(replay))
    }

    /// Its snapshot body, written from the state as it is held.
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Content::Queues(replay) => replay.encode_snapshot(out),
            Content::Map(map) => encode_map(map, out),
            Content::Parked => unreachable!("a parked state is read back before it is written"),
        }
    }

    /// Applies one normal entry's data; answers the records (or changes)
    /// it held.
    fn apply(&mut self, data: &[u8], index: u64) -> io::Result<u32> {
        let wrong = |e: &dyn std::fmt::Display| invalid(format_args!("entry {index}: {e}"));
        match self {
            Content::Queues(replay) => {
                let mut records = 0;
                for record in batch_records(data) {
                    let (kind, body) = record.map_err(|e| wrong(&e))?;
                    let op = decode(kind, body).map_err(|e| wrong(&e))?;
                    replay.apply(op);
                    records += 1;
                }
                Ok(records)
            }
            Content::Map(map) => {
                let change = decode_change(data).map_err(|e| wrong(&e))?;
                Arc::make_mut(map).apply(change);
                Ok(1)
            }
            Content::Parked => unreachable!("a parked state is read back before it is applied"),
        }
    }
}

/// The state, under its lock.
struct Inner {
    content: Content,
    applied: Option<LogId>,
    membership: StoredMembership,
    /// The highest node id that was ever a member.
    highest: NodeId,
    /// Bytes of entries applied since the newest snapshot was taken.
    since_snapshot: u64,
    /// The newest snapshot's size in bytes.
    snapshot_bytes: u64,
}

/// The snapshot file, under its lock.
struct Disk<S> {
    storage: S,
    /// The metadata of the snapshot the file holds.
    snapshot: Option<SnapshotMeta>,
}

fn invalid(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Whether a snapshot is due with `since` bytes of entries applied since
/// the last one, of `size` bytes.
fn due(since: u64, size: u64) -> bool {
    since >= size.max(SNAPSHOT_LOG_MIN)
}

/// A snapshot file's bytes: its head, then `data`.
fn file_head(meta: &SnapshotMeta) -> Vec<u8> {
    let mut head = Vec::with_capacity(256);
    encode_sm_head(meta.last_log_id.as_ref(), &meta.last_membership, &mut head);
    head
}

impl<S: Storage + 'static> StateMachine<S> {
    /// Opens the state machine whose snapshot is in `storage` (none: an
    /// empty state).
    pub fn open(storage: S) -> Result<StateMachine<S>, crate::Error> {
        Self::open_as(storage, Content::Queues(Replay::default()))
    }

    /// Opens the metadata group's state machine, the cluster's map, whose
    /// snapshot is in `storage` (none: an empty map).
    pub fn open_map(storage: S) -> Result<StateMachine<S>, crate::Error> {
        Self::open_as(storage, Content::Map(Arc::default()))
    }

    fn open_as(storage: S, empty: Content) -> Result<StateMachine<S>, crate::Error> {
        let data =
            fila_wal::read_file(&storage, SNAPSHOT_FILE).map_err(|source| crate::Error::Io {
                file: storage.describe(SNAPSHOT_FILE),
                source,
            })?;
        let mut inner = Inner {
            content: empty,
            applied: None,
            membership: StoredMembership::default(),
            highest: 0,
            since_snapshot: 0,
            snapshot_bytes: 0,
        };
        let snapshot = match data {
            Some(data) => Some(
                inner
                    .load(&data)
                    .map_err(|e| crate::Error::Snapshot { what: e.what })?,
            ),
            None => None,
        };
        Ok(StateMachine {
            inner: Arc::new(Mutex::new(inner)),
            disk: Arc::new(Mutex::new(Disk { storage, snapshot })),
        })
    }

    fn lock(&self) -> io::Result<MutexGuard<'_, Inner>> {
        self.inner
            .lock()
            .map_err(|_| io::Error::other("the state machine's lock was poisoned"))
    }

    fn lock_disk(&self) -> io::Result<MutexGuard<'_, Disk<S>>> {
        self.disk
            .lock()
            .map_err(|_| io::Error::other("the snapshot file's lock was poisoned"))
    }

    /// The state, read back from its snapshot file first if it is parked.
    fn unparked(&self) -> io::Result<MutexGuard<'_, Inner>> {
        {
            let inner = self.lock()?;
            if !matches!(inner.content, Content::Parked) {
                return Ok(inner);
            }
        }
        // The file's lock first, as everywhere both are taken.
        let disk = self.lock_disk()?;
        let mut inner = self.lock()?;
        disk.unpark(&mut inner)?;
        Ok(inner)
    }

    /// The state as an engine image (a copy).
    pub fn image(&self) -> io::Result<EngineImage> {
        let inner = self.unparked()?;
        match &inner.content {
            Content::Queues(replay) => Ok(replay.image()),
            Content::Map(_) => Err(io::Error::other("the metadata group holds no queues")),
            Content::Parked => unreachable!("read back above"),
        }
    }

    /// Parks a partition's state: writes it to the snapshot file (its
    /// last applied entry and membership with it) and drops it from
    /// memory; the next use reads it back from the file (applying an
    /// entry, an image). For a replica this node gave up, whose state
    /// nothing reads until the map places one here again. Answers whether
    /// it parked anything (not the map, nor a state already parked or that
    /// never applied an entry).
    pub fn park(&self) -> io::Result<bool> {
        let mut disk = self.lock_disk()?;
        let mut inner = self.lock()?;
        if !matches!(inner.content, Content::Queues(_)) || inner.applied.is_none() {
            return Ok(false);
        }
        let (meta, data) = inner.snapshot_data();
        disk.replace(&meta, &data)?;
        disk.snapshot = Some(meta);
        inner.content = Content::Parked;
        Ok(true)
    }

    /// Whether the state is parked ([`StateMachine::park`]).
    pub fn parked(&self) -> bool {
        self.lock()
            .is_ok_and(|inner| matches!(inner.content, Content::Parked))
    }

    /// Whether a snapshot is due: the entries applied since the last one
    /// hold at least as many bytes as it, and at least
    /// [`SNAPSHOT_LOG_MIN`] (a group's log then keeps no more than about
    /// its state's size past the snapshot, and taking snapshots costs, per
    /// byte logged, no more as the state grows). A parked state is never
    /// due.
    pub fn snapshot_due(&self) -> bool {
        self.lock().is_ok_and(|inner| {
            !matches!(inner.content, Content::Parked)
                && due(inner.since_snapshot, inner.snapshot_bytes)
        })
    }

    /// The cluster's map (none: this is a partition's state machine).
    pub fn map(&self) -> Option<Arc<ClusterMap>> {
        match &self.lock().ok()?.content {
            Content::Map(map) => Some(map.clone()),
            Content::Queues(_) | Content::Parked => None,
        }
    }

    /// The last applied log id.
    pub fn applied(&self) -> io::Result<Option<LogId>> {
        Ok(self.lock()?.applied)
    }

    /// The highest node id that was ever a member, as far as this state
    /// has applied (kept across snapshots): a new member takes an id above
    /// it.
    pub fn highest_id(&self) -> io::Result<NodeId> {
        Ok(self.lock()?.highest)
    }

    /// Closes the state machine; answers its storage when no clone is
    /// left (for tests that crash it).
    pub fn close(self) -> Option<S> {
        let disk = Arc::try_unwrap(self.disk).ok()?;
        Some(disk.into_inner().ok()?.storage)
    }
}

impl Inner {
    /// Takes the state from a snapshot file's bytes; answers the
    /// snapshot's metadata.
    fn load(&mut self, file: &[u8]) -> Result<SnapshotMeta, CodecError> {
        let (applied, membership, body) = decode_sm_head(file)?;
        let (highest, image) = split_data(body);
        self.content = Content::read(self.content.is_map(), image)?;
        self.highest = self.highest.max(highest).max(highest_of(&membership));
        let meta = SnapshotMeta {
            last_log_id: applied,
            last_membership: membership.clone(),
        };
        self.applied = applied;
        self.membership = membership;
        self.since_snapshot = 0;
        self.snapshot_bytes = body.len() as u64;
        Ok(meta)
    }

    /// The state's snapshot: its metadata and data, written from the state
    /// as it is held. The bytes applied since the last snapshot count from
    /// here.
    fn snapshot_data(&mut self) -> (SnapshotMeta, Vec<u8>) {
        let mut data = IDS_MAGIC.to_vec();
        data.extend_from_slice(&self.highest.to_be_bytes());
        self.content.write(&mut data);
        self.since_snapshot = 0;
        self.snapshot_bytes = data.len() as u64;
        let meta = SnapshotMeta {
            last_log_id: self.applied,
            last_membership: self.membership.clone(),
        };
        (meta, data)
    }
}

impl<S: Storage> Disk<S> {
    /// A parked state read back from the file (nothing done to one that
    /// is not parked).
    fn unpark(&self, inner: &mut Inner) -> io::Result<()> {
        if !matches!(inner.content, Content::Parked) {
            return Ok(());
        }
        let file = fila_wal::read_file(&self.storage, SNAPSHOT_FILE)?
            .ok_or_else(|| invalid("a parked state's snapshot file is gone"))?;
        inner.content = Content::Queues(Replay::default());
        inner.load(&file).map_err(|e| invalid(e.what))?;
        Ok(())
    }

    /// Makes the file hold the snapshot `meta` with `data`.
    fn replace(&mut self, meta: &SnapshotMeta, data: &[u8]) -> io::Result<()> {
        let head = file_head(meta);
        fila_wal::replace_file_from(&mut self.storage, SNAPSHOT_FILE, &[&head, data])
    }

    /// Whether the file holds a snapshot at least as far along as `meta`.
    fn holds(&self, meta: &SnapshotMeta) -> bool {
        self.snapshot
            .as_ref()
            .is_some_and(|kept| kept.last_log_id >= meta.last_log_id)
    }
}

impl<S: Storage + 'static> RaftSnapshotBuilder<TypeConfig> for StateMachine<S> {
    type SnapshotData = Cursor<Vec<u8>>;

    async fn build_snapshot(&mut self) -> Result<SnapshotOf, io::Error> {
        // The file's lock first (a parked state is read back under it),
        // then the state's only while the data is written from it.
        let mut disk = self.lock_disk()?;
        let (meta, data) = {
            let mut inner = self.lock()?;
            disk.unpark(&mut inner)?;
            inner.snapshot_data()
        };
        // A snapshot installed meanwhile that is further along stays.
        if !disk.holds(&meta) {
            disk.replace(&meta, &data)?;
            disk.snapshot = Some(meta.clone());
        }
        Ok(Snapshot {
            meta,
            snapshot: Cursor::new(data),
        })
    }
}

impl<S: Storage + 'static> RaftStateMachine<TypeConfig> for StateMachine<S> {
    type SnapshotData = Cursor<Vec<u8>>;
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let inner = self.lock()?;
        Ok((inner.applied, inner.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let mut inner = self.unparked()?;
            let mut records = 0u32;
            let mut bytes = ENTRY_BYTES_MIN;
            match &entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(batch) => {
                    records = inner.content.apply(&batch.0, entry.log_id.index)?;
                    bytes = bytes.max(batch.0.len() as u64);
                }
                EntryPayload::Membership(m) => {
                    inner.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                    inner.highest = inner.highest.max(highest_of(&inner.membership));
                }
            }
            inner.applied = Some(entry.log_id);
            inner.since_snapshot = inner.since_snapshot.saturating_add(bytes);
            drop(inner);
            if let Some(responder) = responder {
                responder.send(Applied { records });
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Cursor<Vec<u8>>,
    ) -> Result<(), io::Error> {
        let data = snapshot.into_inner();
        let (highest, image) = split_data(&data);
        // Decoded without the locks: reads of the state go on meanwhile (a
        // parked state is a partition's, and is replaced whole).
        let map = self.lock()?.content.is_map();
        let content = Content::read(map, image).map_err(|e| invalid(e.what))?;
        let mut disk = self.lock_disk()?;
        disk.replace(meta, &data)?;
        disk.snapshot = Some(meta.clone());
        let mut inner = self.lock()?;
        inner.content = content;
        inner.applied = meta.last_log_id;
        inner.membership = meta.last_membership.clone();
        inner.highest = inner
            .highest
            .max(highest)
            .max(highest_of(&meta.last_membership));
        inner.since_snapshot = 0;
        inner.snapshot_bytes = data.len() as u64;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<SnapshotOf>, io::Error> {
        // Read back from its file: only its metadata is kept in memory.
        let disk = self.lock_disk()?;
        let Some(meta) = disk.snapshot.clone() else {
            return Ok(None);
        };
        let mut file = fila_wal::read_file(&disk.storage, SNAPSHOT_FILE)?
            .ok_or_else(|| invalid("the snapshot file is gone"))?;
        drop(disk);
        let (applied, _, body) = decode_sm_head(&file).map_err(|e| invalid(e.what))?;
        if applied != meta.last_log_id {
            return Err(invalid("the snapshot file is not the snapshot kept"));
        }
        let head = file.len() - body.len();
        file.drain(..head);
        Ok(Some(Snapshot {
            meta,
            snapshot: Cursor::new(file),
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use fila_store::codec::encode_image;
    use fila_wal::SimDisk;

    use super::*;
    use crate::{Member, Membership};

    use crate::test_log_id as log_id;

    fn members(ids: &[u64]) -> StoredMembership {
        let nodes: BTreeMap<u64, Member> = ids.iter().map(|n| (*n, Member::default())).collect();
        let voters: BTreeSet<u64> = ids.iter().copied().collect();
        StoredMembership::new(
            Some(log_id(1)),
            Membership::new(vec![voters], nodes).unwrap(),
        )
    }

    fn data(highest: Option<u64>) -> Vec<u8> {
        let mut out = Vec::new();
        if let Some(h) = highest {
            out.extend_from_slice(IDS_MAGIC);
            out.extend_from_slice(&h.to_be_bytes());
        }
        encode_image(&EngineImage::default(), &mut out);
        out
    }

    #[tokio::test]
    async fn the_highest_member_id_survives_snapshots_and_restarts() {
        // Node 7 was a member once; the membership now is {1, 2}.
        let meta = SnapshotMeta {
            last_log_id: Some(log_id(10)),
            last_membership: members(&[1, 2]),
        };
        let mut sm = StateMachine::open(SimDisk::new(1)).unwrap();
        sm.install_snapshot(&meta, Cursor::new(data(Some(7))))
            .await
            .unwrap();
        assert_eq!(sm.highest_id().unwrap(), 7);
        // Its own snapshot carries it to another node, and a restart reads
        // it back.
        let built = sm.build_snapshot().await.unwrap();
        let mut other = StateMachine::open(SimDisk::new(2)).unwrap();
        other
            .install_snapshot(&built.meta, built.snapshot)
            .await
            .unwrap();
        assert_eq!(other.highest_id().unwrap(), 7);
        let disk = other.close().unwrap();
        assert_eq!(StateMachine::open(disk).unwrap().highest_id().unwrap(), 7);
        // An earlier version's data (an image alone): the membership's.
        let mut old = StateMachine::open(SimDisk::new(3)).unwrap();
        old.install_snapshot(&meta, Cursor::new(data(None)))
            .await
            .unwrap();
        assert_eq!(old.highest_id().unwrap(), 2);
    }

    #[tokio::test]
    async fn the_map_survives_snapshots_and_restarts_and_a_partition_holds_none() {
        use crate::meta::{encode_map, MapChange, Partition};
        let mut map = ClusterMap::default();
        map.apply(MapChange::Init {
            partitions: vec![Partition {
                replicas: BTreeSet::from([1, 2]),
                key: [3, 4],
            }],
        });
        map.apply(MapChange::Place {
            queue: "jobs".into(),
            partition: 0,
        });
        let mut data = IDS_MAGIC.to_vec();
        data.extend_from_slice(&2u64.to_be_bytes());
        encode_map(&map, &mut data);
        let meta = SnapshotMeta {
            last_log_id: Some(log_id(10)),
            last_membership: members(&[1, 2]),
        };
        let mut sm = StateMachine::open_map(SimDisk::new(1)).unwrap();
        sm.install_snapshot(&meta, Cursor::new(data)).await.unwrap();
        assert_eq!(*sm.map().unwrap(), map);
        assert!(sm.image().is_err(), "the metadata group holds no queues");
        let built = sm.build_snapshot().await.unwrap();
        let mut other = StateMachine::open_map(SimDisk::new(2)).unwrap();
        other
            .install_snapshot(&built.meta, built.snapshot)
            .await
            .unwrap();
        let disk = other.close().unwrap();
        let reopened = StateMachine::open_map(disk).unwrap();
        assert_eq!(*reopened.map().unwrap(), map);
        // A partition's snapshot is no map, and a map is no partition's.
        let partition = StateMachine::open(SimDisk::new(3)).unwrap();
        assert!(partition.map().is_none());
        let mut wrong = StateMachine::open(SimDisk::new(4)).unwrap();
        let built = reopened.clone().build_snapshot().await.unwrap();
        assert!(wrong
            .install_snapshot(&built.meta, built.snapshot)
            .await
            .is_err());
    }

    #[test]
    fn a_snapshot_is_due_once_the_log_since_holds_its_size_and_the_least() {
        let min = SNAPSHOT_LOG_MIN;
        assert!(!due(0, 0));
        assert!(!due(min - 1, 0));
        assert!(due(min, 0));
        assert!(due(min, min / 2));
        // A state larger than the least: its size.
        assert!(!due(min, 3 * min));
        assert!(!due(3 * min - 1, 3 * min));
        assert!(due(3 * min, 3 * min));
    }
}
