//! Queues (create, settings, list, delete, purge, stats) and puts.

use super::*;

impl Shard {
    // ----- queues -----------------------------------------------------------

    /// Creates a queue (idempotent when the settings match).
    pub fn create_queue(
        &mut self,
        name: &str,
        settings: QueueSettings,
        id: impl FnOnce() -> u32,
    ) -> Result<bool, Error> {
        if let Some(slot) = self.names.get(name) {
            let existing = &self.queue(*slot).settings;
            return match existing.first_difference(&settings) {
                None => Ok(false),
                Some(field) => Err(Error::QueueExists {
                    name: name.to_owned(),
                    field,
                }),
            };
        }
        self.budget.shared.reserve_queue()?;
        let times = QueueTimes {
            created_at_ms: self.now,
            modified_at_ms: self.now,
        };
        let slot = self.install_queue(id(), name, settings, times, 1);
        self.log_queue(slot);
        Ok(true)
    }

    /// Logs queue `slot` as it now is (created, or its settings changed).
    fn log_queue(&mut self, slot: u32) {
        emit!(
            self,
            Event::QueueSet {
                queue: self.queue(slot).id,
                name: &self.queue(slot).name,
                settings: &self.queue(slot).settings,
                times: self.queue(slot).times,
            }
        );
    }

    /// Makes an empty queue (already counted in the budget); answers its
    /// slot.
    pub(super) fn install_queue(
        &mut self,
        id: u32,
        name: &str,
        settings: QueueSettings,
        times: QueueTimes,
        next_seq: u64,
    ) -> u32 {
        let name: Arc<str> = Arc::from(name);
        let queue = Queue {
            id,
            name: name.clone(),
            settings,
            times,
            subs: [SubQueue::new(false), SubQueue::new(true)],
            epochs: [0, 0],
            purged: [None, None],
            next_seq,
            messages: 0,
            bytes: 0,
            counters: Counters::default(),
            redrive: None,
            moves: Vec::new(),
            dropping: false,
            dedup: None,
        };
        let slot = match self.free_queues.pop() {
            Some(slot) => {
                self.queues[slot as usize] = Some(queue);
                slot
            }
            None => {
                self.queues.push(Some(queue));
                (self.queues.len() - 1) as u32
            }
        };
        self.names.insert(name.clone(), slot);
        self.sorted_names.insert(name);
        slot
    }

    /// Whether a queue exists.
    pub fn has_queue(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    /// A queue's settings.
    pub fn settings(&self, name: &str) -> Result<QueueSettings, Error> {
        Ok(self.queue(self.queue_slot(name)?).settings.clone())
    }

    /// Applies `update` to a queue's settings in one step, validating the
    /// result; answers the settings now in force.
    pub fn update_settings(
        &mut self,
        name: &str,
        update: &SettingsUpdate,
    ) -> Result<QueueSettings, Error> {
        let slot = self.queue_slot(name)?;
        let next = update.apply(&self.queue(slot).settings);
        next.validate()?;
        let now = self.now;
        let queue = self.queue_mut(slot);
        queue.settings = next.clone();
        if update.changes_settings() {
            queue.times.modified_at_ms = now;
        }
        self.log_queue(slot);
        Ok(next)
    }

    /// Pauses (`paused`) or resumes the halves of queue `name` that
    /// `halves` names; answers what is paused now. Logged as the queue's
    /// settings are. A resumed receive half serves its parked receives.
    pub fn set_paused(&mut self, name: &str, halves: Pause, paused: bool) -> Result<Pause, Error> {
        let slot = self.queue_slot(name)?;
        let settings = &mut self.queue_mut(slot).settings;
        if halves.receive {
            settings.receive_paused = paused;
        }
        if halves.send {
            settings.send_paused = paused;
        }
        let now = Pause {
            receive: settings.receive_paused,
            send: settings.send_paused,
        };
        self.log_queue(slot);
        if halves.receive && !paused {
            let q = self.sub_id(slot, false);
            if !self.gained.contains(&q) {
                self.gained.push(q);
            }
            self.serve_gained();
        }
        Ok(now)
    }

    /// Up to `limit` names starting with `prefix` and sorting after
    /// `after`, in order: O(log queues + limit).
    pub fn list(&self, prefix: &str, after: &str, limit: usize) -> Vec<String> {
        use std::ops::Bound;
        let start: Bound<&str> = if after >= prefix {
            Bound::Excluded(after)
        } else {
            Bound::Included(prefix)
        };
        self.sorted_names
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|n| n.starts_with(prefix))
            .take(limit)
            .map(|n| n.to_string())
            .collect()
    }

    /// Deletes a queue, its DLQ and every message; parked receives on it get
    /// `queue_deleted`.
    pub fn delete_queue(&mut self, name: &str) -> Result<(), Error> {
        let slot = self.queue_slot(name)?;
        let id = self.queue(slot).id;
        for dlq in [MAIN, DLQ] {
            while let Some(w) = self.first_waiter(self.sub_id(slot, dlq == DLQ)) {
                if let Some(waiter) = self.take_waiter(w) {
                    self.complete(waiter, Err(Error::QueueDeleted(name.to_owned())));
                }
            }
        }
        if let Some(job) = self.queue_mut(slot).redrive.take() {
            self.wheel.cancel(job.timer);
        }
        self.dedup_drop(slot);
        self.stop_cursor(slot);
        self.names.remove(name);
        self.sorted_names.remove(name);
        self.gained.retain(|q| q.queue() != slot);
        self.budget.shared.release_queue();
        emit!(self, Event::QueueDeleted { queue: id });
        // Its name is free now; its messages go a budget at a time (all of
        // them now in the in-process engine, whose budget is unlimited).
        self.queue_mut(slot).dropping = true;
        self.dropping.push((slot, [0, 0]));
        self.sweep(self.timer_budget);
        Ok(())
    }

    /// Removes every message of the queue or of its DLQ, in every state.
    pub fn purge(&mut self, addr: Address<'_>) -> Result<(), Error> {
        let slot = self.queue_slot(addr.queue)?;
        let half = usize::from(addr.dlq);
        if self.queue(slot).purged[half].is_some() {
            return Err(Error::ResourceExhausted {
                limit: "purges of one queue at a time (the last purge's messages are still being removed: try again)",
                max: 1,
            });
        }
        let old = self.sub_id(slot, addr.dlq);
        let new = SubId::new(slot, 1 - old.epoch(), addr.dlq);
        if !addr.dlq {
            self.stop_cursor(slot);
        }
        // The half starts a new epoch, empty but for its parked receives;
        // the old one's records are gone for everything but the sweep.
        let queue = self.queue_mut(slot);
        let mut fresh = SubQueue::new(addr.dlq);
        fresh.waiters = std::mem::replace(&mut queue.subs[half].waiters, Links::EMPTY);
        let gone = std::mem::replace(&mut queue.subs[half], fresh);
        queue.epochs[half] = new.epoch();
        queue.messages -= gone.held;
        queue.bytes -= gone.channels.iter().map(|c| c.bytes).sum::<u64>();
        queue.purged[half] = Some(Box::new(gone));
        let mut w = self.sub(new).waiters.head;
        while w != NIL {
            let slot = &mut self.waiters[w as usize];
            if let Some(waiter) = slot.waiter.as_mut() {
                waiter.q = new;
            }
            w = slot.next;
        }
        self.gained.retain(|g| *g != old);
        self.purging.push((old, 0));
        // A move task running out of the half purged has nothing left to
        // move: it ends.
        let moving_here = self
            .queue(slot)
            .moves
            .last()
            .is_some_and(|t| t.status == MoveStatus::Running && t.from_dlq == addr.dlq);
        if moving_here {
            self.end_running(
                slot,
                MoveStatus::Cancelled,
                Some("the queue was purged".into()),
            );
        }
        self.sweep(self.timer_budget);
        emit!(
            self,
            Event::Purged {
                queue: self.queue(slot).id,
                dlq: addr.dlq,
            }
        );
        Ok(())
    }

    /// A queue's stats.
    pub fn stats(&mut self, name: &str) -> Result<QueueStats, Error> {
        let slot = self.queue_slot(name)?;
        let q = self.sub_id(slot, false);
        let oldest = self
            .sub(q)
            .index
            .from(0)
            .find(|(seq, s)| self.live(*s, q, *seq))
            .map(|(_, s)| self.records[s as usize].inserted());
        let (groups, groups_in_flight) = self.group_counts(q);
        let queue = self.queue(slot);
        let main = &queue.subs[MAIN as usize];
        let dlq = &queue.subs[DLQ as usize];
        Ok(QueueStats {
            visible: main.counts.visible,
            in_flight: main.counts.in_flight,
            delayed: main.counts.delayed,
            deferred: main.counts.deferred,
            dead_lettered: dlq.held,
            bytes: queue.bytes,
            oldest_age_ms: oldest.map_or(0, |t| self.now.saturating_sub(t)),
            puts: queue.counters.puts,
            deliveries: queue.counters.deliveries,
            deletes: queue.counters.deletes,
            expiries: queue.counters.expiries,
            dead_letterings: queue.counters.dead_letterings,
            redriven: queue.counters.redriven,
            retries: queue.counters.retries,
            paused: Pause {
                receive: queue.settings.receive_paused,
                send: queue.settings.send_paused,
            },
            times: queue.times,
            dedup_entries: self.dedup_len(slot),
            groups,
            groups_in_flight,
        })
    }

    // ----- put --------------------------------------------------------------

    pub(super) fn check_capacity(
        &self,
        slot: u32,
        channel: Option<&str>,
        len: u64,
    ) -> Result<(), Error> {
        let queue = self.queue(slot);
        let s = &queue.settings;
        let full = |limit: &'static str, max: u64| Error::QueueFull {
            name: queue.name.to_string(),
            limit,
            max,
        };
        if queue.messages + 1 > s.max_messages {
            return Err(full("max_messages", s.max_messages));
        }
        if queue.bytes + len > s.max_bytes {
            return Err(full("max_bytes", s.max_bytes));
        }
        if s.channel_capacity_pct < 100 {
            let pct = u64::from(s.channel_capacity_pct);
            let (held, bytes) = queue.subs[MAIN as usize].channel_held(channel);
            let max_messages = (s.max_messages * pct / 100).max(1);
            let max_bytes = (s.max_bytes * pct / 100).max(1);
            if held + 1 > max_messages {
                return Err(full("channel share of max_messages", max_messages));
            }
            if bytes + len > max_bytes {
                return Err(full("channel share of max_bytes", max_bytes));
            }
        }
        Ok(())
    }

    /// Puts a batch (already checked for length); each entry answers alone.
    pub fn put(
        &mut self,
        name: &str,
        batch: Vec<NewMessage>,
        now: u64,
    ) -> Result<Vec<EntryResult<PutReceipt>>, Error> {
        self.catch_up(now);
        let qslot = self.queue_slot(name)?;
        if self.queue(qslot).settings.send_paused {
            return Err(Error::QueuePaused {
                name: name.to_owned(),
                what: "sending",
            });
        }
        let disk = self.budget.shared.disk();
        if disk != crate::budget::DiskState::Ok {
            return Err(Error::Disk(disk));
        }
        let now = self.now;
        let answers = batch
            .into_iter()
            .map(|m| self.put_one(qslot, m, now))
            .collect();
        self.serve_gained();
        Ok(answers)
    }

    pub(super) fn put_one(
        &mut self,
        qslot: u32,
        m: NewMessage,
        now: u64,
    ) -> EntryResult<PutReceipt> {
        let queue = self.queue(qslot);
        m.validate(&queue.settings, now)?;
        // A resend within the window: the first put's answer, nothing stored.
        let dedup = self.dedup_key_of(qslot, &m);
        if let Some(seq) = dedup.and_then(|key| self.dedup_hit(qslot, key, now)) {
            return Ok(PutReceipt {
                id: self.id_of(self.queue(qslot).id, seq),
                seq,
            });
        }
        let queue = self.queue(qslot);
        let attributes_len: usize = m.attributes.iter().map(|(k, v)| k.len() + v.len()).sum();
        self.check_capacity(
            qslot,
            m.channel.as_deref(),
            (m.payload.len() + attributes_len) as u64,
        )?;
        let lifetime = m.ttl_ms.unwrap_or(queue.settings.retention_ms);
        let queue_delay = queue.settings.delay_ms;
        // A new channel is counted when it is made (`attach`); it must
        // fit with the message.
        let new_channel = match m.channel.as_deref() {
            Some(c) if !queue.subs[MAIN as usize].channel_ids.contains_key(c) => channel_bytes(c),
            _ => 0,
        };
        // So must a new group.
        let joins = m
            .group
            .as_deref()
            .and_then(|g| self.group_of_put(self.sub_id(qslot, false), m.channel.as_deref(), g));
        let new_group = match (&m.group, &joins) {
            (Some(g), None) => groups::group_bytes(g),
            _ => 0,
        };
        let kept =
            (m.payload.len() + attributes_len) as u64 + groups::grouped_bytes(m.group.is_some());
        self.budget
            .reserve_message(kept + new_channel + new_group)?;
        if new_channel + new_group > 0 {
            self.budget.release(new_channel + new_group);
        }
        if dedup.is_some() {
            if let Err(e) = self.dedup_reserve(qslot) {
                self.budget.release_message(kept);
                return Err(e);
            }
        }
        let visible_at = match m.availability {
            // A put that names no delay takes the queue's.
            Availability::Now => now + queue_delay,
            Availability::DelayMs(d) => now + d,
            Availability::At(at) => at.max(now),
        };
        let extra = if m.attributes.is_empty() && m.group.is_none() {
            None
        } else {
            let attributes: Option<Attributes> = (!m.attributes.is_empty()).then(|| {
                m.attributes
                    .into_iter()
                    .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
                    .collect()
            });
            Some(Box::new(Extra {
                attributes,
                group: joins.or_else(|| m.group.map(|g| groups::GroupRef::new(Arc::from(g)))),
                ..Extra::default()
            }))
        };
        let queue = self.queue_mut(qslot);
        let seq = queue.next_seq;
        queue.next_seq += 1;
        queue.counters.puts += 1;
        let queue_id = queue.id;
        // The payload may be a slice of a larger buffer (a connection's read
        // buffer): keep a copy of its own bytes only (in a recycled buffer
        // of its size class), so a stored message never pins more memory
        // than it is counted for.
        let payload = self.pool.store(&m.payload);
        let state = if visible_at > now {
            MessageState::Delayed
        } else {
            MessageState::Visible
        };
        let new = NewRecord {
            payload,
            seq,
            inserted_at: now,
            expires_at: now + lifetime,
            visible_at,
            extra,
            state,
            delivery_count: 0,
            level: m.priority.unwrap_or(1),
        };
        let slot = self.store(new, self.sub_id(qslot, false), m.channel.as_deref());
        let mark = dedup.map(|key| {
            let expires_at_ms = now + self.queue(qslot).settings.dedup_window_ms;
            self.dedup_remember(qslot, key, seq, expires_at_ms);
            crate::event::DedupMark { key, expires_at_ms }
        });
        self.log_stored_with(slot, None, mark);
        Ok(PutReceipt {
            id: self.id_of(queue_id, seq),
            seq,
        })
    }

    /// Cancels a delayed or scheduled message before it becomes visible.
    pub fn cancel_scheduled(&mut self, name: &str, seq: u64, now: u64) -> Result<(), Error> {
        self.catch_up(now);
        let qslot = self.queue_slot(name)?;
        let q = self.sub_id(qslot, false);
        let slot = self
            .sub(q)
            .index
            .get(seq)
            .filter(|slot| self.live(*slot, q, seq))
            .filter(|slot| self.records[*slot as usize].word.load().state == MessageState::Delayed)
            .ok_or(Error::NotFound {
                seq,
                what: "scheduled",
            })?;
        emit!(
            self,
            Event::Removed {
                at: self.spot(slot)
            }
        );
        self.remove(slot);
        // A delayed head cancelled may let its group's next one go.
        self.serve_gained();
        Ok(())
    }

    /// Removes up to `budget` messages of deleted queues (stale index
    /// entries count too); frees a deleted queue's slot once it is empty.
    /// Answers whether nothing is left to sweep.
    pub(crate) fn sweep(&mut self, budget: usize) -> bool {
        let mut left = budget;
        // Purged epochs first: a deleted queue's slot is freed only once
        // they are gone too.
        while let Some(&(q, mut from)) = self.purging.last() {
            let done = self.sweep_sub(q, &mut from, &mut left);
            if !done {
                if let Some(p) = self.purging.last_mut() {
                    p.1 = from;
                }
                return false;
            }
            self.purging.pop();
            if let Some(gone) = self.queue_mut(q.queue()).purged[q.half()].take() {
                // Its channels go with it.
                let channels: u64 = gone.channel_ids.keys().map(|n| channel_bytes(n)).sum();
                let groups = gone.groups.as_deref().map_or(0, groups::Groups::bytes);
                self.budget.release(channels + groups + gone.levels_bytes());
            }
            self.trim();
        }
        while let Some(&(slot, mut from)) = self.dropping.last() {
            for half in 0..2 {
                let q = self.sub_id(slot, half == 1);
                if !self.sweep_sub(q, &mut from[half], &mut left) {
                    if let Some(d) = self.dropping.last_mut() {
                        d.1 = from;
                    }
                    return false;
                }
            }
            debug_assert_eq!(self.queue(slot).messages, 0, "every message swept");
            // Its channels are gone (the named ones with their messages):
            // what the unnamed ones' priority rings held goes too.
            let levels: u64 = self
                .queue(slot)
                .subs
                .iter()
                .map(SubQueue::levels_bytes)
                .sum();
            self.budget.release(levels);
            self.dropping.pop();
            self.queues[slot as usize] = None;
            self.free_queues.push(slot);
            self.trim();
        }
        true
    }

    /// Removes the messages of sub-queue `q` from sequence number `*from`
    /// on, at most `*left` index entries (stale ones count too); answers
    /// whether it reached the end. A purged epoch's records are only freed
    /// (its counts go with it); a deleted queue's go through the ledger.
    fn sweep_sub(&mut self, q: SubId, from: &mut u64, left: &mut usize) -> bool {
        let purged = self.is_purged(q);
        loop {
            if *left == 0 {
                return false;
            }
            let mut batch = std::mem::take(&mut self.sweep_batch);
            batch.clear();
            batch.extend(self.sub(q).index.from(*from).take((*left).min(256)));
            if batch.is_empty() {
                self.sweep_batch = batch;
                return true;
            }
            for &(seq, s) in &batch {
                *from = seq + 1;
                *left -= 1;
                if self.live(s, q, seq) {
                    if purged {
                        self.free(s);
                    } else {
                        self.remove(s);
                    }
                }
            }
            self.sweep_batch = batch;
        }
    }
}
