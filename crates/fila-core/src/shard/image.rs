//! A shard's queues and messages as [`QueueImage`]s: exported for a
//! snapshot, restored after a restart.

use super::*;
use crate::event::{ExportCursor, ImagePart, MessageImage, QueueImage};

/// Deduplication keys in one image part (a snapshot frame of about
/// 2 MiB).
const DEDUP_PART_MAX: usize = 65_536;

impl Shard {
    /// Every queue of this shard with its messages. A leased message is
    /// saved visible (leases do not outlive a restart); payloads are
    /// shared, not copied.
    pub fn export(&self) -> Vec<QueueImage> {
        let mut images = Vec::with_capacity(self.names.len());
        for queue in self.queues.iter().flatten().filter(|q| !q.dropping) {
            let slot = self.names[&queue.name];
            let mut messages = Vec::with_capacity(queue.messages as usize);
            for sub in [MAIN, DLQ] {
                let q = self.sub_id(slot, sub == DLQ);
                for (seq, s) in self.sub(q).index.from(0) {
                    if self.live(s, q, seq) {
                        messages.push(self.image_of(s, q, sub == DLQ, seq));
                    }
                }
            }
            images.push(QueueImage {
                id: queue.id,
                name: queue.name.to_string(),
                settings: queue.settings.clone(),
                times: queue.times,
                next_seq: queue.next_seq,
                moves: queue.moves.clone(),
                dedup: self.dedup_image(slot, self.now),
                messages,
            });
        }
        images
    }

    /// The next piece of this shard's state from `cursor` on: queues in
    /// name order, each followed by its messages and its DLQ's in sequence
    /// order, at most `max_messages` messages or `max_bytes` of payloads
    /// and attributes (at least one message when any is left). Moves the
    /// cursor on; at the end of the shard it points at the next shard.
    pub fn export_piece(
        &self,
        cursor: &mut ExportCursor,
        max_messages: usize,
        max_bytes: u64,
        out: &mut Vec<ImagePart>,
    ) {
        use std::ops::Bound;
        let mut messages = 0usize;
        let mut bytes = 0u64;
        let start: Bound<&str> = match &cursor.queue {
            Some(name) => Bound::Included(name.as_str()),
            None => Bound::Unbounded,
        };
        for name in self.sorted_names.range::<str, _>((start, Bound::Unbounded)) {
            let slot = self.names[name];
            let queue = self.queue(slot);
            let resuming = cursor.queue.as_deref() == Some(&**name);
            if !resuming {
                (cursor.dlq, cursor.seq) = (false, 0);
            }
            cursor.queue = Some(name.to_string());
            if queue.dropping {
                continue;
            }
            if !resuming || (!cursor.dlq && cursor.seq == 0) {
                out.push(ImagePart::Queue {
                    id: queue.id,
                    name: name.to_string(),
                    settings: queue.settings.clone(),
                    times: queue.times,
                    next_seq: queue.next_seq,
                    moves: queue.moves.clone(),
                });
                for entries in self.dedup_image(slot, self.now).chunks(DEDUP_PART_MAX) {
                    out.push(ImagePart::Dedup {
                        queue: queue.id,
                        entries: entries.to_vec(),
                    });
                }
            }
            for sub in [MAIN, DLQ] {
                let dlq = sub == DLQ;
                if cursor.dlq && !dlq {
                    continue;
                }
                if dlq && !cursor.dlq {
                    (cursor.dlq, cursor.seq) = (true, 0);
                }
                let q = self.sub_id(slot, dlq);
                for (seq, s) in self.sub(q).index.from(cursor.seq) {
                    if messages >= max_messages.max(1) || (messages > 0 && bytes >= max_bytes) {
                        return;
                    }
                    cursor.seq = seq + 1;
                    if !self.live(s, q, seq) {
                        continue;
                    }
                    let message = self.image_of(s, q, dlq, seq);
                    messages += 1;
                    bytes += self.records[s as usize].budget_bytes();
                    out.push(ImagePart::Message {
                        queue: queue.id,
                        message,
                    });
                }
            }
            // Past this queue: the next one starts afresh.
            (cursor.dlq, cursor.seq) = (true, u64::MAX);
        }
        cursor.shard += 1;
        cursor.queue = None;
        (cursor.dlq, cursor.seq) = (false, 0);
    }

    /// A message as saved (a leased one visible now).
    fn image_of(&self, s: u32, q: SubId, dlq: bool, seq: u64) -> MessageImage {
        let r = &self.records[s as usize];
        let word = r.word.load();
        let extra = r.extra.as_deref();
        MessageImage {
            dlq,
            seq,
            id: extra.and_then(|e| e.id),
            payload: r.payload(),
            attributes: extra.and_then(|e| e.attributes.clone()),
            channel: self.sub(q).channels[r.channel as usize].name.clone(),
            inserted_at_ms: r.inserted(),
            visible_at_ms: if word.state == MessageState::InFlight {
                self.now
            } else {
                r.visible_at
            },
            expires_at_ms: r.expires_at,
            delivery_count: word.delivery_count,
            deferred: word.state == MessageState::Deferred,
            dead_letter: extra.and_then(|e| e.dead_letter.clone()),
            group: extra.and_then(|e| e.group.as_ref().map(|g| g.key.clone())),
            priority: r.level(),
            lease_until_ms: if word.state == MessageState::InFlight {
                r.visible_at
            } else {
                0
            },
            attempts: extra
                .and_then(|e| e.attempts.as_deref())
                .cloned()
                .unwrap_or_default(),
        }
    }

    /// Restores a queue and its messages into this (empty of that name)
    /// shard at its time: messages due are visible, the others delayed,
    /// deferred ones deferred, leased ones (a lease still to come) in
    /// flight until it ends; expiries, delays and leases are timers again. The
    /// queue and its bytes count against the engine's limits whatever
    /// they are (nothing restored is refused).
    pub(crate) fn restore_queue(&mut self, image: QueueImage) -> Result<(), Error> {
        if self.names.contains_key(image.name.as_str()) {
            return Err(Error::QueueExists {
                name: image.name,
                field: "name",
            });
        }
        self.budget.shared.force_queue();
        let qslot = self.install_queue(
            image.id,
            &image.name,
            image.settings,
            image.times,
            image.next_seq,
        );
        self.queue_mut(qslot).moves = image.moves;
        let now = self.now;
        let settings = self.queue(qslot).settings.clone();
        self.dedup_restore(qslot, &image.dedup, now);
        let mut messages = image.messages;
        messages.sort_unstable_by_key(|m| (m.dlq, m.seq));
        for m in messages {
            let next = &mut self.queue_mut(qslot).next_seq;
            if !m.dlq {
                *next = (*next).max(m.seq.saturating_add(1));
            }
            let attempts = (!m.attempts.is_empty()).then(|| Arc::new(m.attempts));
            let len = m.payload.len() as u64
                + attributes_bytes(m.attributes.as_ref())
                + dead_letter_bytes(m.dead_letter.as_deref())
                + groups::grouped_bytes(m.group.is_some())
                + attempts_bytes(attempts.as_ref());
            self.budget.force_message(len);
            let extra = if m.attributes.is_none()
                && m.dead_letter.is_none()
                && m.id.is_none()
                && m.group.is_none()
                && attempts.is_none()
            {
                None
            } else {
                Some(Box::new(Extra {
                    attributes: m.attributes,
                    dead_letter: m.dead_letter,
                    id: m.id,
                    group: m.group.map(groups::GroupRef::new),
                    attempts,
                }))
            };
            let leased = m.lease_until_ms > now && !m.deferred;
            // A lease that ended without a delete (`lease_until_ms` is 0
            // after one that ended visible at once): the retry policy's
            // delay from its end, as the engine that saw it end gave it
            // (`Shard::retry_at`).
            let retry = match (leased || m.deferred || m.dlq, m.lease_until_ms) {
                (false, ended) if ended > 0 => settings
                    .retry_delay(m.delivery_count, m.seq)
                    .map(|delay| ended.saturating_add(delay).min(m.expires_at_ms)),
                _ => None,
            };
            let visible_at_ms = retry.map_or(m.visible_at_ms, |at| at.max(m.visible_at_ms));
            let state = if m.deferred && !m.dlq {
                MessageState::Deferred
            } else if leased {
                MessageState::InFlight
            } else if !m.dlq && visible_at_ms > now {
                MessageState::Delayed
            } else {
                MessageState::Visible
            };
            let new = NewRecord {
                payload: m.payload,
                seq: m.seq,
                inserted_at: m.inserted_at_ms,
                expires_at: m.expires_at_ms,
                visible_at: if leased {
                    m.lease_until_ms
                } else {
                    visible_at_ms
                },
                extra,
                state,
                delivery_count: m.delivery_count,
                level: m.priority.clamp(1, crate::limits::PRIORITY_LEVELS_MAX),
            };
            self.store(new, self.sub_id(qslot, m.dlq), m.channel.as_deref());
        }
        self.resume_moves(qslot);
        Ok(())
    }
}
