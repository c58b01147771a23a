//! The state machine of one group: committed entries applied in order
//! through [`Replay`] — each normal entry a batch of fila-store records,
//! decoded and applied one by one as recovery applies a single node's log —
//! and snapshots of it: the file `state.snap`, replaced whole, holding the
//! last applied log id, the last membership and the engine image in
//! fila-store's snapshot format (the same bytes are what a follower that
//! is too far behind is sent).
//!
//! The state is in memory; after a restart it is the snapshot's, and
//! openraft applies the committed entries after it again (every record is
//! idempotent: applying one whose effect the state already shows changes
//! nothing).

use std::io::{self, Cursor};
use std::sync::{Arc, Mutex, MutexGuard};

use fila_core::event::EngineImage;
use fila_store::codec::{batch_records, decode, encode_image, read_snapshot};
use fila_store::replay::Replay;
use fila_wal::Storage;
use futures_util::{Stream, TryStreamExt};
use openraft::storage::{EntryResponder, RaftStateMachine, Snapshot};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};

use crate::codec::{decode_sm_head, encode_sm_head};
use crate::{Applied, LogId, SnapshotMeta, StoredMembership, TypeConfig};

type SnapshotOf = openraft::alias::SnapshotOf<TypeConfig, Cursor<Vec<u8>>>;

/// The state machine's snapshot file.
pub const SNAPSHOT_FILE: &str = "state.snap";

/// The state machine of one group. Cloned, it is the same one (the
/// snapshot builder openraft runs is a clone).
pub struct StateMachine<S: Storage + 'static> {
    inner: Arc<Mutex<Inner<S>>>,
}

impl<S: Storage + 'static> Clone for StateMachine<S> {
    fn clone(&self) -> Self {
        StateMachine {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<S> {
    storage: S,
    replay: Replay,
    applied: Option<LogId>,
    membership: StoredMembership,
    /// The newest snapshot: its metadata and its engine image.
    snapshot: Option<(SnapshotMeta, Arc<Vec<u8>>)>,
}

fn invalid(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

impl<S: Storage + 'static> StateMachine<S> {
    /// Opens the state machine whose snapshot is in `storage` (none: an
    /// empty state).
    pub fn open(storage: S) -> Result<StateMachine<S>, crate::Error> {
        let data =
            fila_wal::read_file(&storage, SNAPSHOT_FILE).map_err(|source| crate::Error::Io {
                file: storage.describe(SNAPSHOT_FILE),
                source,
            })?;
        let mut inner = Inner {
            storage,
            replay: Replay::default(),
            applied: None,
            membership: StoredMembership::default(),
            snapshot: None,
        };
        if let Some(data) = data {
            let bad = |what| crate::Error::Snapshot { what };
            let (applied, membership, image) = decode_sm_head(&data).map_err(|e| bad(e.what))?;
            read_snapshot(&mut &image[..], &mut inner.replay).map_err(|e| bad(e.what))?;
            let meta = SnapshotMeta {
                last_log_id: applied,
                last_membership: membership.clone(),
            };
            inner.applied = applied;
            inner.membership = membership;
            inner.snapshot = Some((meta, Arc::new(image.to_vec())));
        }
        Ok(StateMachine {
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    fn lock(&self) -> io::Result<MutexGuard<'_, Inner<S>>> {
        self.inner
            .lock()
            .map_err(|_| io::Error::other("the state machine's lock was poisoned"))
    }

    /// The state as an engine image (a copy).
    pub fn image(&self) -> io::Result<EngineImage> {
        Ok(self.lock()?.replay.clone().into_image())
    }

    /// The last applied log id.
    pub fn applied(&self) -> io::Result<Option<LogId>> {
        Ok(self.lock()?.applied)
    }

    /// Closes the state machine; answers its storage when no clone is
    /// left (for tests that crash it).
    pub fn close(self) -> Option<S> {
        let inner = Arc::try_unwrap(self.inner).ok()?;
        Some(inner.into_inner().ok()?.storage)
    }
}

impl<S: Storage> Inner<S> {
    /// Makes `meta` and `image` the snapshot, on disk first.
    fn keep_snapshot(&mut self, meta: SnapshotMeta, image: Vec<u8>) -> io::Result<()> {
        let mut file = Vec::with_capacity(image.len() + 256);
        encode_sm_head(meta.last_log_id.as_ref(), &meta.last_membership, &mut file);
        file.extend_from_slice(&image);
        fila_wal::replace_file(&mut self.storage, SNAPSHOT_FILE, &file)?;
        self.snapshot = Some((meta, Arc::new(image)));
        Ok(())
    }
}

impl<S: Storage + 'static> RaftSnapshotBuilder<TypeConfig> for StateMachine<S> {
    type SnapshotData = Cursor<Vec<u8>>;

    async fn build_snapshot(&mut self) -> Result<SnapshotOf, io::Error> {
        let mut inner = self.lock()?;
        let mut image = Vec::new();
        encode_image(&inner.replay.clone().into_image(), &mut image);
        let meta = SnapshotMeta {
            last_log_id: inner.applied,
            last_membership: inner.membership.clone(),
        };
        inner.keep_snapshot(meta.clone(), image.clone())?;
        Ok(Snapshot {
            meta,
            snapshot: Cursor::new(image),
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
            let mut inner = self.lock()?;
            let mut records = 0u32;
            match &entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(batch) => {
                    for record in batch_records(&batch.0) {
                        let (kind, body) = record.map_err(|e| {
                            invalid(format_args!("entry {}: {e}", entry.log_id.index))
                        })?;
                        let op = decode(kind, body).map_err(|e| {
                            invalid(format_args!("entry {}: {e}", entry.log_id.index))
                        })?;
                        inner.replay.apply(op);
                        records += 1;
                    }
                }
                EntryPayload::Membership(m) => {
                    inner.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                }
            }
            inner.applied = Some(entry.log_id);
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
        let image = snapshot.into_inner();
        let mut replay = Replay::default();
        read_snapshot(&mut &image[..], &mut replay).map_err(invalid)?;
        let mut inner = self.lock()?;
        inner.keep_snapshot(meta.clone(), image)?;
        inner.replay = replay;
        inner.applied = meta.last_log_id;
        inner.membership = meta.last_membership.clone();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<SnapshotOf>, io::Error> {
        let inner = self.lock()?;
        Ok(inner.snapshot.as_ref().map(|(meta, image)| Snapshot {
            meta: meta.clone(),
            snapshot: Cursor::new(image.to_vec()),
        }))
    }
}
