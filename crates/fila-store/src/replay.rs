//! Rebuilding the engine's state from a snapshot and the records after it.
//!
//! A snapshot is taken a piece at a time while the engine keeps serving
//! ([`Replay::apply_part`]): its parts are of different moments, all after
//! the snapshot's LSN was taken, each reflecting every record up to that
//! LSN and some later ones. The LSN is a consistent cut (the writer takes
//! every shard's buffer while none changes), so no record up to it comes
//! after one past it in the order the changes were made: a dead letter
//! forwarded across shards is never before the snapshot and its put after. Replaying every record after the LSN over them
//! brings each to the final state: every record sets what it is about
//! (a message stored whole, removed, its count raised to at least, a flag
//! set; a queue set or deleted; a half purged, the later puts replayed
//! after it), so applying one whose effect a part already shows changes
//! nothing in the end. A part can show a change whose record comes after
//! the LSN, so the writer finishes a snapshot only once every such record
//! is durable (none between shards, then a commit).
//!
//! [`Replay`] holds queues by id and their messages by (sub-queue, sequence
//! number), and applies records in log order. Every record is idempotent and
//! a record about something gone does nothing.
//!
//! Each shard's records are in the log in the order they were made, but the
//! writer takes the shards' buffers one after the other, so records of two
//! shards can be in the log in the opposite order to the one they were made
//! in. Only one record reaches into another shard: a dead letter forwarded
//! to a queue of another shard is one `Stored` record in the target's
//! stream that also removes it from its source. Its put may come later in
//! the log, so a message moved out of another queue leaves a tombstone, and
//! a later record storing that very message (same queue id, sub-queue and
//! sequence number, which are never reused) is the put it overtook: it is
//! skipped. For that to hold, a move advances its source queue's next
//! sequence number past the message it moved, whether or not the put that
//! stored it survived a crash (a torn tail can keep the move and lose the
//! put), and whether or not the source queue was made yet in the log: one
//! batch can hold a queue's creation, its puts and their forwards, the
//! target's shard written first; the number waits as the queue's floor
//! until the record that makes the queue comes. After a replay, every
//! queue's next sequence number is above every sequence number a record
//! named in it, moved or not.
//!
//! The other counters a replay rebuilds: message ids are a queue's id and
//! a sequence number (a moved message keeps the id it had), so they follow
//! the two; queue ids are above every id any record names
//! (`next_queue_id`, a forward's source included); a move task's id is one
//! above the last task its queue's `MovesSet` kept; deduplication slots
//! are the keys the surviving puts carry; group tickets are not kept at
//! all (a restore starts them afresh).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use fila_core::event::{DedupImage, EngineImage, ImagePart, MessageImage, QueueImage, Spot};
use fila_core::{MoveTask, QueueSettings, QueueTimes};

use crate::codec::{
    encode_dedup_part, encode_message_part, encode_queue_part, encode_snapshot_end,
    encode_snapshot_start, Op,
};

/// Hashes the state's own keys — queue ids and sequence numbers the
/// engine gave out, never bytes a client chose — with FxHash's step (a
/// rotation, an exclusive or, a multiplication per word) rather than
/// SipHash: no client picks them, so none can make them collide.
#[derive(Clone, Copy, Default)]
struct IdHasher(u64);

impl IdHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.add(u64::from(b));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A map keyed by the state's own ids ([`IdHasher`]).
type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

#[derive(Clone)]
struct Queue {
    name: String,
    settings: QueueSettings,
    times: QueueTimes,
    next_seq: u64,
    moves: Vec<MoveTask>,
    /// Remembered deduplication keys (expired ones are dropped when the
    /// engine restores them).
    dedup: HashMap<u128, DedupImage>,
    messages: IdMap<(bool, u64), MessageImage>,
}

/// The state being rebuilt.
#[derive(Clone)]
pub struct Replay {
    queues: IdMap<u32, Queue>,
    /// Messages moved out of their queue by a record of another queue.
    moved: HashSet<Spot>,
    /// For a queue not seen yet, above every sequence number a record of
    /// another queue named in it (a forward can be in the log before its
    /// source queue's own records, even before the one that made it):
    /// the queue's next sequence number starts there when it is made.
    floors: IdMap<u32, u64>,
    /// Above every queue id seen, deleted ones included.
    next_queue_id: u32,
}

impl Default for Replay {
    /// Nothing yet: queue ids start at 1, as an engine's do.
    fn default() -> Self {
        Replay {
            queues: IdMap::default(),
            moved: HashSet::new(),
            floors: IdMap::default(),
            next_queue_id: 1,
        }
    }
}

impl Replay {
    /// Starts from a snapshot.
    pub fn from_image(image: EngineImage) -> Replay {
        let mut queues = IdMap::with_capacity_and_hasher(image.queues.len(), Default::default());
        let mut next_queue_id = image.next_queue_id;
        for q in image.queues {
            next_queue_id = next_queue_id.max(q.id.saturating_add(1));
            queues.insert(
                q.id,
                Queue {
                    name: q.name,
                    settings: q.settings,
                    times: q.times,
                    next_seq: q.next_seq,
                    moves: q.moves,
                    dedup: q.dedup.into_iter().map(|e| (e.key, e)).collect(),
                    messages: q
                        .messages
                        .into_iter()
                        .map(|m| ((m.dlq, m.seq), m))
                        .collect(),
                },
            );
        }
        Replay {
            queues,
            moved: HashSet::new(),
            floors: IdMap::default(),
            next_queue_id,
        }
    }

    fn saw_queue(&mut self, id: u32) {
        self.next_queue_id = self.next_queue_id.max(id.saturating_add(1));
    }

    /// Notes the id the next queue gets, from a snapshot.
    pub fn saw_next_queue_id(&mut self, next: u32) {
        self.next_queue_id = self.next_queue_id.max(next);
    }

    /// Applies one part of a snapshot taken a piece at a time (a queue as
    /// it was, or a message as it was): the records after the snapshot's
    /// LSN, applied next, bring every part to the same moment.
    pub fn apply_part(&mut self, part: ImagePart) {
        match part {
            ImagePart::Queue {
                id,
                name,
                settings,
                times,
                next_seq,
                moves,
            } => {
                self.saw_queue(id);
                let floor = self.floors.remove(&id).unwrap_or(0);
                let q = self.queues.entry(id).or_insert_with(|| Queue {
                    name: name.clone(),
                    settings: settings.clone(),
                    times,
                    next_seq: next_seq.max(floor),
                    moves: Vec::new(),
                    dedup: HashMap::new(),
                    messages: IdMap::default(),
                });
                q.name = name;
                q.settings = settings;
                q.times = times;
                q.moves = moves;
                q.next_seq = q.next_seq.max(next_seq);
            }
            ImagePart::Dedup { queue, entries } => {
                if let Some(q) = self.queues.get_mut(&queue) {
                    q.dedup.extend(entries.into_iter().map(|e| (e.key, e)));
                }
            }
            ImagePart::Message { queue, message } => {
                if let Some(q) = self.queues.get_mut(&queue) {
                    if !message.dlq {
                        q.next_seq = q.next_seq.max(message.seq.saturating_add(1));
                    }
                    q.messages.insert((message.dlq, message.seq), message);
                }
            }
        }
    }

    fn message(&mut self, at: &Spot) -> Option<&mut MessageImage> {
        self.queues
            .get_mut(&at.queue)?
            .messages
            .get_mut(&(at.dlq, at.seq))
    }

    /// Applies one record.
    pub fn apply(&mut self, op: Op) {
        match op {
            Op::QueueSet {
                queue,
                name,
                settings,
                times,
            } => {
                self.saw_queue(queue);
                let floor = self.floors.remove(&queue).unwrap_or(0);
                let q = self.queues.entry(queue).or_insert_with(|| Queue {
                    name: name.clone(),
                    settings: settings.clone(),
                    times,
                    next_seq: floor.max(1),
                    moves: Vec::new(),
                    dedup: HashMap::new(),
                    messages: IdMap::default(),
                });
                q.name = name;
                q.settings = settings;
                q.times = times;
            }
            Op::MovesSet { queue, tasks } => {
                if let Some(q) = self.queues.get_mut(&queue) {
                    q.moves = tasks;
                }
            }
            Op::QueueDeleted { queue } => {
                self.saw_queue(queue);
                self.queues.remove(&queue);
                self.floors.remove(&queue);
            }
            Op::Purged { queue, dlq } => {
                if let Some(q) = self.queues.get_mut(&queue) {
                    q.messages.retain(|(d, _), _| *d != dlq);
                }
            }
            Op::Stored {
                queue,
                message,
                from,
                dedup,
            } => {
                if let (Some(d), Some(q)) = (dedup, self.queues.get_mut(&queue)) {
                    q.dedup.insert(
                        d.key,
                        DedupImage {
                            key: d.key,
                            seq: message.seq,
                            expires_at_ms: d.expires_at_ms,
                        },
                    );
                }
                if let Some(from) = from {
                    self.saw_queue(from.queue);
                    // The move says the source used this sequence number,
                    // even when the put that used it was torn off the log:
                    // it is never given out again (a later put of it would
                    // be skipped as the put the move overtook). That holds
                    // when the source's records, the one that made it
                    // included, come later in the log than the move: the
                    // floor waits for it.
                    if let Some(q) = self.queues.get_mut(&from.queue) {
                        q.messages.remove(&(from.dlq, from.seq));
                        q.next_seq = q.next_seq.max(from.seq.saturating_add(1));
                    } else {
                        let floor = self.floors.entry(from.queue).or_insert(0);
                        *floor = (*floor).max(from.seq.saturating_add(1));
                    }
                    if from.queue != queue {
                        self.moved.insert(from);
                    }
                }
                let at = Spot {
                    queue,
                    dlq: message.dlq,
                    seq: message.seq,
                };
                if let Some(q) = self.queues.get_mut(&queue) {
                    if !message.dlq {
                        q.next_seq = q.next_seq.max(message.seq.saturating_add(1));
                    }
                    // (Most often no move overtook a put: nothing to look up.)
                    if self.moved.is_empty() || !self.moved.remove(&at) {
                        q.messages.insert((message.dlq, message.seq), message);
                    }
                }
            }
            Op::Removed { at } => {
                if let Some(q) = self.queues.get_mut(&at.queue) {
                    q.messages.remove(&(at.dlq, at.seq));
                }
            }
            Op::Deferred { at, deferred } => {
                if let Some(m) = self.message(&at) {
                    m.deferred = deferred;
                    if deferred {
                        // Deferring ends its lease.
                        m.lease_until_ms = 0;
                    }
                    if !deferred {
                        // Taken back by receive-deferred: leased, so
                        // visible at once after a restart (not at the time
                        // its last lease would have ended).
                        m.visible_at_ms = 0;
                    }
                }
            }
            Op::Delivered { at, count, until } => {
                if let Some(m) = self.message(&at) {
                    if count >= m.delivery_count {
                        m.lease_until_ms = until;
                    }
                    m.delivery_count = m.delivery_count.max(count);
                }
            }
            Op::LeaseSet { at, until } => {
                if let Some(m) = self.message(&at) {
                    m.lease_until_ms = until;
                }
            }
            Op::Retry { at, visible_at } => {
                if let Some(m) = self.message(&at) {
                    m.lease_until_ms = 0;
                    m.visible_at_ms = visible_at;
                }
            }
            Op::Attempt { at, attempt } => {
                // Kept as the engine keeps it, by the queue's number then.
                let keep = self
                    .queues
                    .get(&at.queue)
                    .map_or(0, |q| q.settings.attempt_history);
                // Applied once: a snapshot's piece of the message may
                // already hold it (the records after its start are
                // replayed over it). Replayed in order, the ones a piece
                // had dropped as old come back and go again, so the
                // history ends as the engine's.
                if let Some(m) = self.message(&at) {
                    if !m.attempts.contains(&attempt) {
                        fila_core::remember_attempt(&mut m.attempts, attempt, keep);
                    }
                }
            }
        }
    }

    /// Queues now held.
    pub fn queue_count(&self) -> usize {
        self.queues.len()
    }

    /// Messages now held.
    pub fn message_count(&self) -> usize {
        self.queues.values().map(|q| q.messages.len()).sum()
    }

    /// Writes the state as a snapshot body of frames (what
    /// [`crate::codec::read_snapshot`] reads back) straight from where it
    /// is held: nothing of it is copied first. Queues by id, each one's
    /// deduplication keys by expiry, its messages in any order.
    pub fn encode_snapshot(&self, out: &mut Vec<u8>) {
        encode_snapshot_start(out);
        let mut ids: Vec<u32> = self.queues.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let q = &self.queues[&id];
            encode_queue_part(id, &q.name, &q.settings, q.times, q.next_seq, &q.moves, out);
            let mut dedup: Vec<&DedupImage> = q.dedup.values().collect();
            dedup.sort_unstable_by_key(|e| (e.expires_at_ms, e.key));
            encode_dedup_part(id, dedup, out);
            for m in q.messages.values() {
                encode_message_part(id, m, out);
            }
        }
        encode_snapshot_end(self.next_queue_id, out);
    }

    /// The state as an image (a copy of each queue and message, not of
    /// the maps they are held in), as [`Replay::into_image`] makes it.
    pub fn image(&self) -> EngineImage {
        let mut images: Vec<QueueImage> = self
            .queues
            .iter()
            .map(|(&id, q)| QueueImage {
                id,
                name: q.name.clone(),
                settings: q.settings.clone(),
                times: q.times,
                next_seq: q.next_seq,
                moves: q.moves.clone(),
                dedup: {
                    let mut d: Vec<DedupImage> = q.dedup.values().cloned().collect();
                    d.sort_unstable_by_key(|e| (e.expires_at_ms, e.key));
                    d
                },
                messages: q.messages.values().cloned().collect(),
            })
            .collect();
        images.sort_unstable_by_key(|q| q.id);
        EngineImage {
            next_queue_id: self.next_queue_id,
            queues: images,
        }
    }

    /// The state as an image, queues by id, messages in any order
    /// ([`fila_core::Engine::restore`] orders them).
    pub fn into_image(self) -> EngineImage {
        let mut images: Vec<QueueImage> = self
            .queues
            .into_iter()
            .map(|(id, q)| QueueImage {
                id,
                name: q.name,
                settings: q.settings,
                times: q.times,
                next_seq: q.next_seq,
                moves: q.moves,
                dedup: {
                    let mut d: Vec<DedupImage> = q.dedup.into_values().collect();
                    d.sort_unstable_by_key(|e| (e.expires_at_ms, e.key));
                    d
                },
                messages: q.messages.into_values().collect(),
            })
            .collect();
        images.sort_unstable_by_key(|q| q.id);
        EngineImage {
            next_queue_id: self.next_queue_id,
            queues: images,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(queue: u32, seq: u64, from: Option<Spot>) -> Op {
        Op::Stored {
            queue,
            message: MessageImage {
                dlq: false,
                seq,
                id: None,
                payload: "m".into(),
                attributes: None,
                channel: None,
                inserted_at_ms: 0,
                visible_at_ms: 0,
                expires_at_ms: u64::MAX,
                delivery_count: 0,
                deferred: false,
                dead_letter: None,
                group: None,
                priority: 1,
                lease_until_ms: 0,
                attempts: Vec::new(),
            },
            from,
            dedup: None,
        }
    }

    fn made(queue: u32, name: &str) -> Op {
        Op::QueueSet {
            queue,
            name: name.into(),
            settings: QueueSettings::default(),
            times: QueueTimes::default(),
        }
    }

    /// A forward read before the record that made its source queue (one
    /// batch, the target's shard first): the source's next sequence number
    /// starts above it once the queue is made; and a sequence number at
    /// the end of its range (a damaged log, a fuzzer) saturates rather than
    /// overflowing.
    #[test]
    fn a_forward_before_its_source_is_made_raises_its_floor() {
        let mut r = Replay::default();
        r.apply(made(1, "target"));
        let from = |seq| {
            Some(Spot {
                queue: 2,
                dlq: false,
                seq,
            })
        };
        r.apply(stored(1, 1, from(159)));
        r.apply(stored(1, 2, from(140)));
        r.apply(made(2, "source"));
        r.apply(stored(2, 129, None));
        let image = r.into_image();
        let source = image.queues.iter().find(|q| q.id == 2).unwrap();
        assert_eq!(source.next_seq, 160);

        let mut r = Replay::default();
        r.apply(made(1, "target"));
        r.apply(stored(1, u64::MAX, from(u64::MAX)));
        r.apply(made(2, "source"));
        let image = r.into_image();
        assert!(image.queues.iter().all(|q| q.next_seq == u64::MAX));
    }
}
