//! The record slab's bookkeeping, and the ledger: the only code that
//! changes the kept counts (a sub-queue's state counts and held messages, a
//! channel's held, visible and bytes, a queue's messages and bytes) —
//! allocating and freeing slots, moving a message in and out of states (and
//! so in and out of its channel's ring), attaching it to and detaching it
//! from a sub-queue, putting a popped message back, purging a sub-queue —
//! and the views a message is answered and logged with.
//! `Shard::check_invariants` recomputes what this file keeps.

use super::*;

/// A new message's record: what [`Shard::store`] writes into a slot.
pub(super) struct NewRecord {
    pub(super) payload: Payload,
    pub(super) seq: u64,
    pub(super) inserted_at: u64,
    pub(super) expires_at: u64,
    pub(super) visible_at: u64,
    pub(super) extra: Option<Box<Extra>>,
    pub(super) state: MessageState,
    pub(super) delivery_count: u32,
    /// Its priority level (1 ..= 10).
    pub(super) level: u8,
}

impl Shard {
    /// The one way a message gets a slot (put, a forwarded or bounced dead
    /// letter, a restore): the record written, attached to sub-queue `q`'s
    /// channel, and its state entered — visible with its expiry timer,
    /// delayed with its timer, deferred without one. Logging it is the
    /// caller's (the event differs).
    pub(super) fn store(&mut self, new: NewRecord, q: SubId, channel: Option<&str>) -> u32 {
        let slot = self.alloc();
        let r = &mut self.records[slot as usize];
        let (body, len) = new.payload.into_parts();
        r.body = body;
        r.set_len(len, new.level);
        r.seq = new.seq;
        r.set_inserted(new.inserted_at);
        r.expires_at = new.expires_at;
        r.visible_at = new.visible_at;
        r.extra = new.extra;
        r.word
            .occupy(new.state, new.delivery_count)
            .expect("an allocated slot is free");
        self.attach(slot, q, channel);
        match new.state {
            MessageState::Delayed => {
                self.enter_state(slot, MessageState::Delayed);
                self.set_stream_timer(slot, new.visible_at);
            }
            MessageState::Deferred => self.enter_state(slot, MessageState::Deferred),
            MessageState::InFlight => {
                // A lease kept by a restore: it ends at its visible time.
                self.enter_state(slot, MessageState::InFlight);
                self.set_stream_timer(slot, new.visible_at);
            }
            _ => {
                self.enter_state(slot, MessageState::Visible);
                if !self.cover(slot, q) {
                    self.set_stream_timer(slot, new.expires_at);
                }
            }
        }
        slot
    }

    pub(super) fn alloc(&mut self) -> u32 {
        match self.free_slots.pop() {
            Some(slot) => slot,
            None => {
                let mut record = Record::empty();
                record.word = StateWord::free_at(self.generation_floor);
                self.records.push(record);
                u32::try_from(self.records.len() - 1).expect("fewer than 2^32 messages per shard")
            }
        }
    }

    /// Counts a message out of `state` (the ring entry of a visible message
    /// stays behind and is skipped when popped); a grouped message's group
    /// hears of it ([`Shard::group_leave`]).
    pub(super) fn leave_state(&mut self, slot: u32, state: MessageState) {
        let (q, channel) = {
            let r = &self.records[slot as usize];
            (r.q, r.channel)
        };
        let grouped = self.group_key(slot).is_some();
        let sub = self.sub_mut(q);
        *sub.counts.of(state) -= 1;
        if state == MessageState::Visible {
            sub.channels[channel as usize].visible -= 1;
            if !grouped {
                let level = self.records[slot as usize].level();
                self.unready(q, channel, level);
            }
        }
        if grouped {
            self.group_leave(slot, state);
        }
    }

    /// Counts a message into `state`. A visible one is pushed on its ring,
    /// unless it is grouped: a grouped message joins its group (leased: the
    /// group is busy with it), or quits it when deferred, and its group
    /// decides what is on the ring ([`Shard::group_refresh`]).
    pub(super) fn enter_state(&mut self, slot: u32, state: MessageState) {
        let (q, channel, generation) = {
            let r = &self.records[slot as usize];
            (r.q, r.channel, r.word.load().generation)
        };
        let grouped = self.group_key(slot).is_some();
        let sub = self.sub_mut(q);
        *sub.counts.of(state) += 1;
        if state == MessageState::Visible {
            sub.channels[channel as usize].visible += 1;
            if !grouped {
                let level = self.records[slot as usize].level();
                self.ready(q, channel, level, handle(slot, generation));
            }
        }
        if grouped {
            match state {
                MessageState::Deferred => self.group_quit(slot),
                _ => self.group_join(slot, state),
            }
        }
    }

    /// Makes a message that is now visible findable, with its expiry timer.
    pub(super) fn enter_visible(&mut self, slot: u32) {
        self.enter_state(slot, MessageState::Visible);
        let expires_at = self.records[slot as usize].expires_at;
        self.set_timer(slot, expires_at);
    }

    /// Adds a message to sub-queue `q`'s channel, totals and index.
    pub(super) fn attach(&mut self, slot: u32, q: SubId, channel: Option<&str>) {
        debug_assert!(!self.is_purged(q), "messages join a current epoch only");
        let (seq, len, level) = {
            let r = &self.records[slot as usize];
            (r.seq, r.bytes(), r.level())
        };
        let queue = self.queue_mut(q.queue());
        queue.messages += 1;
        queue.bytes += len;
        let sub = &mut queue.subs[q.half()];
        let channels = sub.channel_ids.len();
        let id = sub.channel_id(channel);
        let made = sub.channel_ids.len() > channels;
        let c = &mut sub.channels[id as usize];
        c.held += 1;
        c.bytes += len;
        sub.leveled |= level > 1;
        sub.held += 1;
        sub.index.insert(seq, slot);
        if made {
            // A new channel holds memory while it has messages: counted
            // (a put checked there was room; other arrivals must be kept).
            self.budget
                .force(channel_bytes(channel.unwrap_or_default()));
        }
        let r = &mut self.records[slot as usize];
        r.q = q;
        r.channel = id;
    }

    /// Takes a message out of its sub-queue's channel, totals and index
    /// (its state count is [`Shard::leave_state`]'s business).
    pub(super) fn detach(&mut self, slot: u32) {
        debug_assert!(
            !self.is_purged(self.records[slot as usize].q),
            "a purged epoch's records are only freed"
        );
        self.group_quit(slot);
        let (q, channel, seq, len) = {
            let r = &self.records[slot as usize];
            (r.q, r.channel, r.seq, r.bytes())
        };
        let queue = self.queue_mut(q.queue());
        queue.messages -= 1;
        queue.bytes -= len;
        let sub = &mut queue.subs[q.half()];
        sub.held -= 1;
        sub.index.remove(seq);
        let c = &mut sub.channels[channel as usize];
        c.held -= 1;
        c.bytes -= len;
        if c.held == 0 && channel != 0 {
            debug_assert_eq!(c.visible, 0);
            let levels = if c.levels.is_some() {
                sub::LEVELS_BYTES
            } else {
                0
            };
            let name = c.vacate().expect("named channel");
            sub.channel_ids.remove(&name);
            sub.free_channels.push(channel);
            self.budget.release(channel_bytes(&name) + levels);
        }
        self.maybe_compact(q, seq);
    }

    /// Drops dead entries of a queue's sequence log once they outnumber the
    /// live ones, so deletions in any order keep the log proportional.
    pub(super) fn maybe_compact(&mut self, q: SubId, seq: u64) {
        if q.is_dlq() {
            return;
        }
        let records = &self.records;
        let queue = self.queues[q.queue() as usize].as_mut().expect("live");
        let held = queue.subs[MAIN as usize].held;
        let SeqIndex::Log { seqs, slots } = &mut queue.subs[MAIN as usize].index else {
            return;
        };
        let live = |s: u64, slot: u32| {
            records.get(slot as usize).is_some_and(|r| {
                r.q == q && r.seq == s && r.word.load().state != MessageState::Free
            })
        };
        if seqs.front() == Some(&seq) {
            // First in, first out: the message leaving is the oldest. Drop its
            // entry and any dead ones behind it.
            seqs.pop_front();
            slots.pop_front();
            while let (Some(s), Some(slot)) = (seqs.front(), slots.front()) {
                if live(*s, *slot) {
                    break;
                }
                seqs.pop_front();
                slots.pop_front();
            }
        } else if seqs.len() as u64 > 2 * held + 32 {
            // Out of order: compact once dead entries outnumber live ones, so
            // the cost stays amortized O(1) per message.
            let mut kept = 0;
            for i in 0..seqs.len() {
                if live(seqs[i], slots[i]) {
                    seqs[kept] = seqs[i];
                    slots[kept] = slots[i];
                    kept += 1;
                }
            }
            seqs.truncate(kept);
            slots.truncate(kept);
            seqs.shrink_to(kept * 2);
            slots.shrink_to(kept * 2);
        }
    }

    /// Removes a message for good: counts, channel, index, timer, slot.
    pub(super) fn remove(&mut self, slot: u32) {
        let state = self.records[slot as usize].word.load().state;
        self.leave_state(slot, state);
        self.remove_uncounted(slot);
    }

    /// [`Shard::remove`] for a message already counted out of its state.
    pub(super) fn remove_uncounted(&mut self, slot: u32) {
        self.detach(slot);
        self.free(slot);
    }

    pub(super) fn free(&mut self, slot: u32) {
        self.clear_timer(slot);
        self.budget
            .release_message(self.records[slot as usize].budget_bytes());
        let r = &mut self.records[slot as usize];
        if r.word.load().state != MessageState::Free {
            r.word.free();
        }
        r.len = 0;
        r.extra = None;
        if let Some(body) = r.body.take() {
            self.pool.give(body);
        }
        r.q = SubId::NONE;
        self.free_slots.push(slot);
    }

    pub(super) fn message(&self, slot: u32, state: State, receipt: Option<Receipt>) -> Message {
        let r = &self.records[slot as usize];
        let queue = self.queue(r.q.queue());
        let extra = r.extra.as_deref();
        Message {
            id: extra
                .and_then(|e| e.id)
                .unwrap_or_else(|| self.id_of(queue.id, r.seq)),
            seq: r.seq,
            payload: r.payload(),
            attributes: extra.and_then(|e| e.attributes.clone()),
            channel: queue.subs[r.q.half()].channels[r.channel as usize]
                .name
                .clone(),
            inserted_at_ms: r.inserted(),
            expires_at_ms: r.expires_at,
            next_visible_at_ms: r.visible_at,
            delivery_count: r.word.load().delivery_count,
            first_received_at_ms: r.first_received(),
            state,
            receipt,
            dead_letter: extra.and_then(|e| e.dead_letter.clone()),
            group: extra.and_then(|e| e.group.as_ref().map(|g| g.key.clone())),
            priority: r.level(),
            attempts: extra.and_then(|e| e.attempts.clone()),
        }
    }

    /// Where the message in `slot` is.
    pub(super) fn spot(&self, slot: u32) -> Spot {
        let r = &self.records[slot as usize];
        Spot {
            queue: self.queue(r.q.queue()).id,
            dlq: r.q.is_dlq(),
            seq: r.seq,
        }
    }

    /// The message in `slot` as an event shows it.
    pub(super) fn view(&self, slot: u32) -> MessageView<'_> {
        let r = &self.records[slot as usize];
        let extra = r.extra.as_deref();
        MessageView {
            at: self.spot(slot),
            id: extra.and_then(|e| e.id),
            payload: &r.body.as_deref().unwrap_or_default()[..r.len() as usize],
            attributes: extra.and_then(|e| e.attributes.as_ref()),
            channel: self.sub(r.q).channels[r.channel as usize].name.as_deref(),
            inserted_at_ms: r.inserted(),
            visible_at_ms: r.visible_at,
            expires_at_ms: r.expires_at,
            delivery_count: r.word.load().delivery_count,
            dead_letter: extra.and_then(|e| e.dead_letter.as_deref()),
            group: extra.and_then(|e| e.group.as_ref().map(|g| &*g.key)),
            priority: r.level(),
            attempts: extra
                .and_then(|e| e.attempts.as_deref())
                .map_or(&[], Vec::as_slice),
        }
    }

    /// Logs the message now in `slot` as stored (moved from `from`).
    pub(super) fn log_stored(&mut self, slot: u32, from: Option<Spot>) {
        self.log_stored_with(slot, from, None);
    }

    /// [`Shard::log_stored`] for a put that remembers a deduplication key.
    pub(super) fn log_stored_with(
        &mut self,
        slot: u32,
        from: Option<Spot>,
        dedup: Option<crate::event::DedupMark>,
    ) {
        emit!(
            self,
            Event::Stored {
                message: self.view(slot),
                from,
                dedup,
            }
        );
    }

    pub(super) fn public_state(&self, slot: u32) -> State {
        let r = &self.records[slot as usize];
        match r.word.load().state {
            MessageState::Visible if r.q.is_dlq() => State::DeadLettered,
            MessageState::Visible => State::Visible,
            MessageState::InFlight => State::InFlight,
            MessageState::Delayed => State::Delayed,
            MessageState::Deferred => State::Deferred,
            MessageState::Free => unreachable!("peek shows live messages"),
        }
    }

    /// Undoes [`Shard::pop_visible`]: the message is visible again, first
    /// in its channel (a grouped one its group's queued head again).
    pub(super) fn put_back(&mut self, slot: u32) {
        let (q, channel, generation) = {
            let r = &self.records[slot as usize];
            (r.q, r.channel, r.word.load().generation)
        };
        let h = self
            .group_requeue(q, slot)
            .unwrap_or_else(|| handle(slot, generation));
        let level = self.records[slot as usize].level();
        let sub = self.sub_mut(q);
        sub.counts.visible += 1;
        let c = &mut sub.channels[channel as usize];
        c.put_front(level, h);
        c.visible += 1;
        if c.ready == 1 {
            sub.enter_round(channel, true);
        }
    }
}
