//! What a receipt does: delete, change visibility, defer, dead-letter;
//! and receive-deferred and peek, by sequence number.

use super::*;

impl Shard {
    // ----- receipts ---------------------------------------------------------

    /// The slot a receipt names, if it belongs to sub-queue `q` of this
    /// queue, and the generation of the lease it holds: the receipt's own
    /// (by slot), or — by sequence number — the generation of the live
    /// lease of that message when it is leased with the receipt's
    /// delivery count (any other delivery's receipt is stale).
    pub(super) fn resolve(&self, q: SubId, receipt: &Receipt) -> Result<(u32, u64), Error> {
        self.key.verify(receipt)?;
        let queue = self.queue(q.queue());
        if receipt.queue_id != queue.id {
            return Err(Error::ReceiptStale);
        }
        if let Some((dlq, seq, count)) = receipt.by_sequence() {
            if dlq != q.is_dlq() {
                return Err(Error::ReceiptStale);
            }
            let slot = self.by_seq(q, seq).map_err(|_| Error::ReceiptStale)?;
            let word = self.records[slot as usize].word.load();
            if word.state != MessageState::InFlight || word.delivery_count != count {
                return Err(Error::ReceiptStale);
            }
            return Ok((slot, word.generation));
        }
        match self.records.get(receipt.slot as usize) {
            Some(r) if r.q == q => Ok((receipt.slot, receipt.generation)),
            // The tag proved this engine issued it: a slot given back since
            // (the slab was trimmed) held a lease that has ended.
            Some(_) | None => Err(Error::ReceiptStale),
        }
    }

    pub(super) fn end_lease(
        &mut self,
        q: SubId,
        receipt: &Receipt,
        end: LeaseEnd,
    ) -> Result<u32, Error> {
        let (slot, generation) = self.resolve(q, receipt)?;
        self.records[slot as usize]
            .word
            .end_lease(generation, end)
            .map_err(|refused| match refused {
                Refused::Stale | Refused::WrongState(_) => Error::ReceiptStale,
            })?;
        self.leave_state(slot, MessageState::InFlight);
        Ok(slot)
    }

    /// Deletes leased messages by receipt.
    pub fn delete(
        &mut self,
        addr: Address<'_>,
        receipts: &[Receipt],
        now: u64,
    ) -> Result<Vec<EntryResult<()>>, Error> {
        self.catch_up(now);
        let qslot = self.queue_slot(addr.queue)?;
        let q = self.sub_id(qslot, addr.dlq);
        let answers = receipts
            .iter()
            .map(|receipt| {
                let slot = self.end_lease(q, receipt, LeaseEnd::Delete)?;
                self.queue_mut(qslot).counters.deletes += 1;
                emit!(
                    self,
                    Event::Removed {
                        at: self.spot(slot)
                    }
                );
                self.detach(slot);
                self.free(slot);
                Ok(())
            })
            .collect();
        // A group freed by a delete may give its next message at once.
        self.serve_gained();
        Ok(answers)
    }

    /// Moves leases' next-visible times; 0 releases the message at once.
    /// Answers each entry's new next-visible time.
    pub fn update_visibility(
        &mut self,
        addr: Address<'_>,
        changes: &[VisibilityChange],
        now: u64,
    ) -> Result<Vec<EntryResult<u64>>, Error> {
        self.catch_up(now);
        let qslot = self.queue_slot(addr.queue)?;
        let q = self.sub_id(qslot, addr.dlq);
        let now = self.now;
        let answers = changes
            .iter()
            .map(|change| {
                crate::error::check_range(
                    "timeout_ms",
                    change.timeout_ms,
                    0,
                    crate::limits::VISIBILITY_MS_MAX,
                    " ms",
                )?;
                let visible_at = now + change.timeout_ms;
                if change.timeout_ms == 0 {
                    let slot = self.end_lease(q, &change.receipt, LeaseEnd::Release)?;
                    // Visible at once, whatever the retry policy says.
                    emit!(
                        self,
                        Event::LeaseSet {
                            at: self.spot(slot),
                            until: 0,
                        }
                    );
                    self.records[slot as usize].visible_at = visible_at;
                    if self.records[slot as usize].expires_at <= now {
                        // Its lease outlived its life: it expires as it is released.
                        self.enter_state(slot, MessageState::Visible);
                        self.expire(slot, now);
                    } else {
                        self.enter_visible(slot);
                    }
                } else {
                    let (slot, generation) = self.resolve(q, &change.receipt)?;
                    self.records[slot as usize]
                        .word
                        .hold(generation)
                        .map_err(|_| Error::ReceiptStale)?;
                    self.records[slot as usize].visible_at = visible_at;
                    self.set_timer(slot, visible_at);
                    emit!(
                        self,
                        Event::LeaseSet {
                            at: self.spot(slot),
                            until: visible_at,
                        }
                    );
                }
                Ok(visible_at)
            })
            .collect();
        self.serve_gained();
        Ok(answers)
    }

    /// Updates a leased message (the Azure Queue API's Update Message):
    /// its payload replaced by `payload` when one is given (within the
    /// queue's `max_message_bytes` and `max_bytes` and the server's
    /// `max_stored_bytes`), and its lease renewed to end `timeout_ms` from
    /// now under a new receipt, the old one stale; a timeout of 0 ends the
    /// lease and the message is visible at once. Its delivery count is
    /// kept. Where receipts name deliveries (a cluster's partitions), the
    /// renewed lease's receipt is the old one's equal.
    pub fn update_message(
        &mut self,
        addr: Address<'_>,
        receipt: &Receipt,
        payload: Option<&[u8]>,
        timeout_ms: u64,
        now: u64,
    ) -> Result<MessageUpdate, Error> {
        self.catch_up(now);
        let qslot = self.queue_slot(addr.queue)?;
        let q = self.sub_id(qslot, addr.dlq);
        let now = self.now;
        crate::error::check_range(
            "timeout_ms",
            timeout_ms,
            0,
            crate::limits::VISIBILITY_MS_MAX,
            " ms",
        )?;
        let (slot, generation) = self.resolve(q, receipt)?;
        self.records[slot as usize]
            .word
            .hold(generation)
            .map_err(|_| Error::ReceiptStale)?;
        if let Some(payload) = payload {
            self.replace_payload(qslot, slot, payload)?;
            let at = self.spot(slot);
            // The message stored again where it is: a restore sees it
            // visible from now (a single node's restart ends leases), a
            // new leader leased by the lease event that follows.
            emit!(self, {
                let mut message = self.view(slot);
                message.visible_at_ms = now;
                Event::Stored {
                    message,
                    from: Some(at),
                    dedup: None,
                }
            });
        }
        if timeout_ms == 0 {
            let change = VisibilityChange {
                receipt: *receipt,
                timeout_ms: 0,
            };
            let mut done = self.update_visibility(addr, &[change], now)?;
            let visible_at_ms = done.pop().expect("one entry")?;
            return Ok(MessageUpdate {
                receipt: None,
                visible_at_ms,
            });
        }
        let word = self.records[slot as usize]
            .word
            .renew(generation)
            .map_err(|_| Error::ReceiptStale)?;
        let visible_at = now + timeout_ms;
        self.records[slot as usize].visible_at = visible_at;
        self.set_timer(slot, visible_at);
        emit!(
            self,
            Event::LeaseSet {
                at: self.spot(slot),
                until: visible_at,
            }
        );
        let renewed = self.key.mint(
            self.queue(qslot).id,
            crate::receipt::Lease {
                slot,
                generation: word.generation,
                dlq: q.is_dlq(),
                seq: self.records[slot as usize].seq,
                count: word.delivery_count,
            },
        );
        Ok(MessageUpdate {
            receipt: Some(renewed),
            visible_at_ms: visible_at,
        })
    }

    /// Replaces the payload of the message in `slot` of queue `qslot`,
    /// its counts kept true (the queue's and its channel's bytes, the
    /// server's stored bytes); refused, changing nothing, past the
    /// queue's or the server's limits.
    fn replace_payload(&mut self, qslot: u32, slot: u32, payload: &[u8]) -> Result<(), Error> {
        let queue = self.queue(qslot);
        let max = queue.settings.max_message_bytes;
        if payload.len() > max as usize {
            return Err(Error::MessageTooLarge {
                size: payload.len(),
                max,
            });
        }
        let new = payload.len() as u64;
        let (old, channel) = {
            let r = &self.records[slot as usize];
            (u64::from(r.len()), r.channel)
        };
        let half = self.records[slot as usize].q.half();
        if new > old {
            let grow = new - old;
            let channel_name = queue.subs[half].channels[channel as usize].name.clone();
            let settings = &queue.settings;
            if queue.bytes + grow > settings.max_bytes {
                return Err(Error::QueueFull {
                    name: queue.name.to_string(),
                    limit: "max_bytes",
                    max: settings.max_bytes,
                });
            }
            if settings.channel_capacity_pct < 100 {
                let (_, bytes) = queue.subs[half].channel_held(channel_name.as_deref());
                let cap =
                    (settings.max_bytes * u64::from(settings.channel_capacity_pct) / 100).max(1);
                if bytes + grow > cap {
                    return Err(Error::QueueFull {
                        name: queue.name.to_string(),
                        limit: "channel share of max_bytes",
                        max: cap,
                    });
                }
            }
            self.budget.reserve(grow)?;
        } else {
            self.budget.release(old - new);
        }
        let stored = self.pool.store(payload);
        let r = &mut self.records[slot as usize];
        let level = r.level();
        let (body, len) = stored.into_parts();
        let old_body = std::mem::replace(&mut r.body, body);
        r.set_len(len, level);
        if let Some(b) = old_body {
            self.pool.give(b);
        }
        let queue = self.queue_mut(qslot);
        queue.bytes = queue.bytes - old + new;
        let c = &mut queue.subs[half].channels[channel as usize];
        c.bytes = c.bytes - old + new;
        Ok(())
    }

    /// Ends leases as failed (a "nack": the consumer could not process
    /// the message), with the consumer's reason and description (`why`,
    /// within a dead letter's limits), kept in each message's attempt
    /// history: each message is visible again after its queue's retry
    /// policy's delay for its delivery count, as after a lease that
    /// expires — at once when the queue has no policy. Answers each
    /// message's next visible time.
    pub fn release(
        &mut self,
        addr: Address<'_>,
        receipts: &[Receipt],
        why: (&str, &str),
        now: u64,
    ) -> Result<Vec<EntryResult<u64>>, Error> {
        Shard::check_dead_letter_text(why.0, why.1)?;
        self.catch_up(now);
        let qslot = self.queue_slot(addr.queue)?;
        let q = self.sub_id(qslot, addr.dlq);
        let now = self.now;
        let answers = receipts
            .iter()
            .map(|receipt| {
                let (slot, generation) = self.resolve(q, receipt)?;
                self.records[slot as usize]
                    .word
                    .hold(generation)
                    .map_err(|_| Error::ReceiptStale)?;
                // Ended (a retry it waits for is a record of its own).
                emit!(
                    self,
                    Event::LeaseSet {
                        at: self.spot(slot),
                        until: 0,
                    }
                );
                self.clear_timer(slot);
                self.record_attempt(
                    slot,
                    AttemptEnd::Released,
                    why.0.to_owned(),
                    why.1.to_owned(),
                    now,
                );
                self.records[slot as usize].visible_at = now;
                let at = self.retry_at(slot).unwrap_or(now).max(now);
                self.lease_ended(slot, now);
                Ok(at)
            })
            .collect();
        self.serve_gained();
        Ok(answers)
    }

    /// Leases handed out in an answer that could not be delivered (its
    /// connection closed first): each lease still live ends as a release
    /// does (visible again at once) and its delivery is not counted. A
    /// receipt that no longer names a live lease is passed over.
    pub fn abandon(&mut self, receipts: &[Receipt], now: u64) {
        self.catch_up(now);
        let now = self.now;
        for receipt in receipts {
            if self.key.verify(receipt).is_err() {
                continue;
            }
            // The sub-queue: the slot's (by slot), or the receipt's (by
            // sequence: its queue by id, the DLQ by its bit).
            let q = match receipt.by_sequence() {
                Some((dlq, _, _)) => {
                    let Some(qslot) = self.queues.iter().position(|queue| {
                        queue
                            .as_ref()
                            .is_some_and(|queue| queue.id == receipt.queue_id)
                    }) else {
                        continue;
                    };
                    self.sub_id(qslot as u32, dlq)
                }
                None => {
                    let Some(r) = self.records.get(receipt.slot as usize) else {
                        continue;
                    };
                    let word = r.word.load();
                    if word.state != MessageState::InFlight || word.generation != receipt.generation
                    {
                        continue;
                    }
                    r.q
                }
            };
            let live_queue = self.queues.get(q.queue() as usize).is_some_and(|queue| {
                queue
                    .as_ref()
                    .is_some_and(|queue| !queue.dropping && queue.id == receipt.queue_id)
            });
            if !live_queue || self.is_purged(q) {
                continue;
            }
            let Ok(slot) = self.end_lease(q, receipt, LeaseEnd::Release) else {
                continue;
            };
            emit!(
                self,
                Event::LeaseSet {
                    at: self.spot(slot),
                    until: 0,
                }
            );
            let r = &mut self.records[slot as usize];
            let count = r.word.load().delivery_count;
            r.word.set_delivery_count(count.saturating_sub(1));
            r.visible_at = now;
            if r.expires_at <= now {
                self.enter_state(slot, MessageState::Visible);
                self.expire(slot, now);
            } else {
                self.enter_visible(slot);
            }
        }
        self.serve_gained();
    }

    /// Defers a leased message: only receive-deferred can take it again.
    pub fn defer(&mut self, name: &str, receipt: &Receipt, now: u64) -> Result<(), Error> {
        self.catch_up(now);
        let qslot = self.queue_slot(name)?;
        let slot = self.end_lease(self.sub_id(qslot, false), receipt, LeaseEnd::Defer)?;
        self.clear_timer(slot);
        self.enter_state(slot, MessageState::Deferred);
        emit!(
            self,
            Event::Deferred {
                at: self.spot(slot),
                deferred: true,
            }
        );
        self.serve_gained();
        Ok(())
    }

    /// Dead-letters a leased message with the consumer's reason.
    pub fn dead_letter(
        &mut self,
        name: &str,
        receipt: &Receipt,
        reason: String,
        description: String,
        now: u64,
    ) -> Result<(), Error> {
        self.dead_letter_found(name, reason, description, now, true, |s, q| {
            let (slot, generation) = s.resolve(q, receipt)?;
            s.records[slot as usize]
                .word
                .hold(generation)
                .map_err(|_| Error::ReceiptStale)?;
            Ok(slot)
        })
    }

    /// Moves a main-queue message (in any state) to the DLQ or the target.
    pub(super) fn dead_letter_slot(&mut self, slot: u32, reason: DeadLetterReason, t: u64) {
        let state = self.records[slot as usize].word.load().state;
        self.leave_state(slot, state);
        self.dead_letter_uncounted(slot, reason, t);
    }

    /// [`Shard::dead_letter_slot`] for a message already counted out of its
    /// state (popped from its ring by a receive).
    pub(super) fn dead_letter_uncounted(&mut self, slot: u32, reason: DeadLetterReason, t: u64) {
        let q = self.records[slot as usize].q;
        debug_assert!(!q.is_dlq());
        let qslot = q.queue();
        let queue = self.queue_mut(qslot);
        queue.counters.dead_letterings += 1;
        let source = queue.name.clone();
        let target = queue.settings.dead_letter_target.clone();
        let retention = queue.settings.retention_ms;
        let info = Arc::new(DeadLetter {
            source_queue: source.clone(),
            at_ms: t,
            reason,
            delivery_count: self.records[slot as usize].word.load().delivery_count,
        });
        // A dead letter forwarded here from another queue that dies again
        // stays in this queue's own DLQ: a message is forwarded at most once,
        // so two queues targeting each other cannot pass it back and forth.
        let forwarded = self.records[slot as usize]
            .extra
            .as_ref()
            .is_some_and(|e| e.dead_letter.is_some());
        let state = self.records[slot as usize].word.load().state;
        if let Some(target) = target.filter(|t| **t != *source && !forwarded) {
            let message = self.message(slot, State::DeadLettered, None);
            let source = (self.queue(qslot).id, source);
            self.outbox
                .push(Outbound::of(message, target, source, t, Some(info), None));
            self.remove_uncounted(slot);
            return;
        }
        let channel = self.sub(q).channels[self.records[slot as usize].channel as usize]
            .name
            .clone();
        let from = self.spot(slot);
        self.detach(slot);
        let r = &mut self.records[slot as usize];
        r.word.shift(state, MessageState::Visible).expect("owned");
        r.expires_at = t + retention;
        r.visible_at = t;
        let before = r.budget_bytes();
        r.extra.get_or_insert_with(Box::default).dead_letter = Some(info);
        // Its dead-letter record is kept as long as it is: counted (a
        // consumer's dead-letter checked there was room); one it had (a
        // forwarded dead letter that died again) is given back.
        let after = r.budget_bytes();
        if after >= before {
            self.budget.force(after - before);
        } else {
            self.budget.release(before - after);
        }
        self.attach(slot, self.sub_id(qslot, true), channel.as_deref());
        self.log_stored(slot, Some(from));
        self.enter_visible(slot);
    }

    /// Takes deferred messages by sequence number, leasing each like a
    /// receive. Expired ones are expired now and answer `expired`.
    pub fn receive_deferred(
        &mut self,
        name: &str,
        seqs: &[u64],
        visibility_ms: Option<u64>,
        now: u64,
    ) -> Result<Vec<EntryResult<Message>>, Error> {
        if let Some(v) = visibility_ms {
            crate::error::check_range(
                "visibility_ms",
                v,
                0,
                crate::limits::VISIBILITY_MS_MAX,
                " ms",
            )?;
        }
        self.catch_up(now);
        let qslot = self.queue_slot(name)?;
        let q = self.sub_id(qslot, false);
        let settings = &self.queue(qslot).settings;
        if settings.receive_paused {
            return Err(Error::QueuePaused {
                name: name.to_owned(),
                what: "receiving",
            });
        }
        let visibility_ms = visibility_ms.unwrap_or(settings.visibility_timeout_ms);
        let max_deliveries = settings.max_deliveries;
        let now = self.now;
        let answers = seqs
            .iter()
            .map(|&seq| {
                let slot = self
                    .sub(q)
                    .index
                    .get(seq)
                    .filter(|slot| self.live(*slot, q, seq))
                    .filter(|slot| {
                        self.records[*slot as usize].word.load().state == MessageState::Deferred
                    })
                    .ok_or(Error::NotFound {
                        seq,
                        what: "deferred",
                    })?;
                let r = &self.records[slot as usize];
                if r.expires_at <= now {
                    self.expire(slot, now);
                    return Err(Error::Expired { seq });
                }
                if self.group_busy(slot) {
                    return Err(Error::GroupBusy { seq });
                }
                if max_deliveries > 0 && r.word.load().delivery_count >= max_deliveries {
                    self.dead_letter_slot(slot, DeadLetterReason::MaxDeliveries, now);
                    return Err(Error::NotFound {
                        seq,
                        what: "deliverable deferred (max_deliveries reached: dead-lettered)",
                    });
                }
                self.leave_state(slot, MessageState::Deferred);
                emit!(
                    self,
                    Event::Deferred {
                        at: self.spot(slot),
                        deferred: false,
                    }
                );
                let message = self.deliver(slot, MessageState::Deferred, visibility_ms);
                if visibility_ms == 0 {
                    self.enter_visible(slot);
                }
                Ok(message)
            })
            .collect();
        self.serve_gained();
        Ok(answers)
    }

    /// Messages in sequence order from `from`, in every state, unchanged.
    pub fn peek(
        &mut self,
        addr: Address<'_>,
        from: u64,
        max: u32,
        now: u64,
    ) -> Result<Vec<Message>, Error> {
        crate::error::check_range("max_messages", max.into(), 1, PEEK_MAX.into(), "")?;
        self.catch_up(now);
        let qslot = self.queue_slot(addr.queue)?;
        let q = self.sub_id(qslot, addr.dlq);
        let slots: Vec<u32> = self
            .sub(q)
            .index
            .from(from)
            .filter(|(seq, slot)| self.live(*slot, q, *seq))
            .map(|(_, slot)| slot)
            .take(max as usize)
            .collect();
        Ok(slots
            .into_iter()
            .map(|slot| self.message(slot, self.public_state(slot), None))
            .collect())
    }
}
