//! Receiving: channels taken in turn, leases, parked receives and their
//! deadlines.

use super::*;

impl Shard {
    // ----- receive ----------------------------------------------------------

    /// Takes up to `take.max` visible messages of sub-queue `q`, fairly across
    /// channels, leasing each (or only counting it, with visibility 0).
    pub(super) fn take_visible(&mut self, q: SubId, take: &Take<'_>, out: &mut Vec<Message>) {
        if self.receive_paused(q) {
            return;
        }
        let now = self.now;
        let mut quick_looks: Vec<u32> = Vec::new();
        let mut used = 0u64;
        while (out.len() as u32) < take.max {
            let Some(channel) = self.pick_channel(q, take.filter) else {
                break;
            };
            let Some(slot) = self.pop_visible(q, channel) else {
                continue;
            };
            if take.budget != u64::MAX {
                let size = self.answer_size(slot);
                if used + size > take.budget {
                    // Too big for what is left of this answer: it stays the
                    // channel's next message.
                    self.put_back(slot);
                    break;
                }
                used += size;
            }
            if let Some(ChannelFilter::Prefix(p)) = take.filter {
                if !p.is_empty() {
                    let sub = self.sub_mut(q);
                    sub.prefix_cursor = sub.channels[channel as usize].name.clone();
                }
            }
            let qslot = q.queue();
            let max_deliveries = self.queue(qslot).settings.max_deliveries;
            let r = &self.records[slot as usize];
            let count = r.word.load().delivery_count;
            if !q.is_dlq() && max_deliveries > 0 && count >= max_deliveries {
                self.sub_mut(q).rotate(channel);
                self.dead_letter_uncounted(slot, DeadLetterReason::MaxDeliveries, now);
                continue;
            }
            self.sub_mut(q).rotate(channel);
            let message = self.deliver(slot, MessageState::Visible, take.visibility_ms);
            if take.visibility_ms == 0 {
                quick_looks.push(slot);
            }
            out.push(message);
        }
        for slot in quick_looks {
            self.enter_state(slot, MessageState::Visible);
        }
    }

    /// Whether receives from sub-queue `q` are paused (a queue's own half;
    /// its DLQ is never paused).
    pub(super) fn receive_paused(&self, q: SubId) -> bool {
        !q.is_dlq() && self.queue(q.queue()).settings.receive_paused
    }

    /// [`answer_bytes`] of the message in `slot`.
    pub(super) fn answer_size(&self, slot: u32) -> u64 {
        let r = &self.records[slot as usize];
        let extra = r.extra.as_deref();
        answer_bytes(
            r.len() as usize,
            extra.and_then(|e| e.attributes.as_ref()),
            self.sub(r.q).channels[r.channel as usize].name.as_deref(),
            extra.and_then(|e| e.dead_letter.as_deref()),
        )
    }

    /// The channel the next message comes from: without a filter (or with
    /// `*`, which passes everything) the round's head; an exact filter's
    /// channel; for a prefix, the next matching channel in name order after
    /// the last one a prefix receive was served from. O(log channels) at
    /// most.
    pub(super) fn pick_channel(&self, q: SubId, filter: Option<&ChannelFilter>) -> Option<u32> {
        let sub = self.sub(q);
        let head = (sub.round.head != NIL).then_some(sub.round.head);
        match filter {
            None => head,
            Some(ChannelFilter::Prefix(p)) if p.is_empty() => head,
            Some(ChannelFilter::Exact(name)) => sub
                .channel_ids
                .get(name.as_str())
                .copied()
                .filter(|c| sub.channels[*c as usize].ready > 0),
            Some(ChannelFilter::Prefix(p)) => sub.next_with_prefix(p),
        }
    }

    /// Pops the next live handle of a channel with visible messages and
    /// counts it out of the visible state.
    pub(super) fn pop_visible(&mut self, q: SubId, channel: u32) -> Option<u32> {
        let fairness = self.queue(q.queue()).settings.priority_fairness;
        // A message put back comes first; else the priority rule picks the
        // level once, and its ring is popped past entries left behind.
        let mut front = self.sub_mut(q).channels[channel as usize].front.take();
        let mut level = 0;
        loop {
            let c = &mut self.sub_mut(q).channels[channel as usize];
            let h = match front.take() {
                Some(h) => h,
                None => {
                    if level == 0 {
                        level = c.pick(fairness);
                    }
                    c.pop_at(level)?
                }
            };
            let Some(slot) = self.slot_of_handle(q, h) else {
                continue; // left behind by a group's earlier queuing
            };
            let Some(r) = self.records.get(slot as usize) else {
                continue; // left behind by a message whose slot was trimmed
            };
            let w = r.word.load();
            // A group's entry was checked by its ticket; a message's by
            // its generation.
            let current = h >> 63 == 1 || (w.generation & 0xFFFF_FFFF) == (h & 0xFFFF_FFFF);
            if r.q == q && w.state == MessageState::Visible && current {
                self.leave_state(slot, MessageState::Visible);
                return Some(slot);
            }
        }
    }

    /// Delivers a message (already counted out of `from`): the state word
    /// decides, the lease timer is set, the answer is built.
    pub(super) fn deliver(&mut self, slot: u32, from: MessageState, visibility_ms: u64) -> Message {
        let now = self.now;
        let quick_look = visibility_ms == 0;
        let word = self.records[slot as usize]
            .word
            .deliver(from, quick_look)
            .expect("the shard owns the message");
        let r = &mut self.records[slot as usize];
        r.visible_at = now + visibility_ms;
        r.note_received(now);
        let q = r.q;
        let queue = self.queue_mut(q.queue());
        queue.counters.deliveries += 1;
        let queue_id = queue.id;
        let receipt = self.key.mint(
            queue_id,
            crate::receipt::Lease {
                slot,
                generation: word.generation,
                dlq: q.is_dlq(),
                seq: self.records[slot as usize].seq,
                count: word.delivery_count,
            },
        );
        emit!(
            self,
            Event::Delivered {
                at: self.spot(slot),
                count: word.delivery_count,
                until: now + visibility_ms,
            }
        );
        let state = if quick_look {
            if q.is_dlq() {
                State::DeadLettered
            } else {
                State::Visible
            }
        } else {
            self.enter_state(slot, MessageState::InFlight);
            self.set_stream_timer(slot, now + visibility_ms);
            State::InFlight
        };
        self.message(slot, state, Some(receipt))
    }

    /// Receives from the queue or its DLQ. With nothing to give and a wait,
    /// the receive is parked and completed later as `wake` says; without
    /// `wake` it never parks (and `wake` is dropped unused when it does
    /// not).
    pub fn receive(
        &mut self,
        addr: Address<'_>,
        opts: &ReceiveOptions,
        wake: Option<Wake>,
        now: u64,
    ) -> Result<Received, Error> {
        opts.validate()?;
        self.catch_up(now);
        let qslot = self.queue_slot(addr.queue)?;
        let q = self.sub_id(qslot, addr.dlq);
        let settings = &self.queue(qslot).settings;
        let visibility_ms = opts.visibility_ms.unwrap_or(settings.visibility_timeout_ms);
        let wait_ms = opts.wait_ms.unwrap_or(settings.receive_wait_default_ms);
        let mut out = Vec::with_capacity(opts.max_messages as usize);
        let budget = opts.max_answer_bytes.unwrap_or(u64::MAX);
        self.take_visible(
            q,
            &Take {
                max: opts.max_messages,
                budget,
                visibility_ms,
                filter: opts.channel.as_ref(),
            },
            &mut out,
        );
        let parked = if out.is_empty() && wait_ms > 0 {
            // A parked receive with a budget holds only the room its answer
            // could need; one without stays without.
            let largest = answer_bytes_max(self.queue(qslot).settings.max_message_bytes);
            let budget = if budget == u64::MAX {
                budget
            } else {
                budget.min(largest.saturating_mul(u64::from(opts.max_messages)))
            };
            wake.map(|wake| self.park(q, opts, visibility_ms, wait_ms, budget, wake))
        } else {
            None
        };
        self.serve_gained();
        Ok(match parked {
            Some(id) => Received::Parked(id),
            None => Received::Ready(out),
        })
    }

    pub(super) fn park(
        &mut self,
        q: SubId,
        opts: &ReceiveOptions,
        visibility_ms: u64,
        wait_ms: u64,
        budget: u64,
        wake: Wake,
    ) -> WaitId {
        let slot = match self.free_waiters.pop() {
            Some(slot) => slot,
            None => {
                self.waiters.push(WaiterSlot {
                    stamp: 0,
                    waiter: None,
                    prev: NIL,
                    next: NIL,
                });
                (self.waiters.len() - 1) as u32
            }
        };
        // Consumers long-poll with one wait again and again: its lane.
        let timer =
            self.wheel
                .insert_in_lane(self.now + wait_ms, wait_ms, Timer::Waiter(slot).into());
        self.waiter_order += 1;
        let w = &mut self.waiters[slot as usize];
        let id = WaitId {
            shard: self.id,
            slot,
            stamp: w.stamp,
            reserved: if budget == u64::MAX { 0 } else { budget },
        };
        w.waiter = Some(Waiter {
            q,
            max: opts.max_messages,
            budget,
            visibility_ms,
            filter: opts.channel.clone(),
            id,
            wake,
            timer: Some(timer),
            order: self.waiter_order,
        });
        self.link_waiter(q, slot);
        id
    }

    /// Completes a parked receive (taken out already) with `result`.
    pub(super) fn complete(&mut self, waiter: Waiter, result: Result<Vec<Message>, Error>) {
        self.completions.push(Completion {
            wait: waiter.id,
            wake: waiter.wake,
            result,
        });
    }

    pub(super) fn first_waiter(&self, q: SubId) -> Option<u32> {
        let head = self.sub(q).waiters.head;
        (head != NIL).then_some(head)
    }

    /// Appends a parked receive to sub-queue `q`'s list.
    pub(super) fn link_waiter(&mut self, q: SubId, slot: u32) {
        let tail = self.sub(q).waiters.tail;
        {
            let w = &mut self.waiters[slot as usize];
            w.prev = tail;
            w.next = NIL;
        }
        if tail == NIL {
            self.sub_mut(q).waiters.head = slot;
        } else {
            self.waiters[tail as usize].next = slot;
        }
        self.sub_mut(q).waiters.tail = slot;
    }

    /// Takes a parked receive out of sub-queue `q`'s list, in O(1).
    pub(super) fn unlink_waiter(&mut self, q: SubId, slot: u32) {
        let (prev, next) = {
            let w = &mut self.waiters[slot as usize];
            let links = (w.prev, w.next);
            w.prev = NIL;
            w.next = NIL;
            links
        };
        if prev == NIL {
            self.sub_mut(q).waiters.head = next;
        } else {
            self.waiters[prev as usize].next = next;
        }
        if next == NIL {
            self.sub_mut(q).waiters.tail = prev;
        } else {
            self.waiters[next as usize].prev = prev;
        }
    }

    /// Unlinks and frees a parked receive; completing it is the caller's.
    pub(super) fn take_waiter(&mut self, slot: u32) -> Option<Waiter> {
        let q = self.waiters[slot as usize].waiter.as_ref()?.q;
        if self
            .queues
            .get(q.queue() as usize)
            .is_some_and(|x| x.is_some())
        {
            self.unlink_waiter(q, slot);
        }
        let w = &mut self.waiters[slot as usize];
        let waiter = w.waiter.take()?;
        w.stamp = w.stamp.wrapping_add(1);
        self.free_waiters.push(slot);
        if let Some(timer) = waiter.timer {
            self.wheel.cancel(timer);
        }
        Some(waiter)
    }

    /// Forgets a parked receive (its connection went away). It is never
    /// completed (a `Notify` is dropped uncalled). Returns whether it was still parked.
    pub fn cancel_wait(&mut self, id: WaitId) -> bool {
        let Some(w) = self.waiters.get(id.slot as usize) else {
            return false;
        };
        if w.stamp != id.stamp || w.waiter.is_none() {
            return false;
        }
        self.take_waiter(id.slot).expect("checked above");
        true
    }

    pub(super) fn waiter_deadline(&mut self, slot: u32) {
        // The deadline fired: the wheel already let go of the timer.
        let Some(waiter) = self.take_waiter(slot) else {
            return;
        };
        self.complete(waiter, Ok(Vec::new()));
    }

    /// Serves parked receives of every sub-queue that gained visible
    /// messages, first come first served.
    pub(super) fn serve_gained(&mut self) {
        while !self.gained.is_empty() {
            let q = self.gained.remove(0);
            // A queue deleted since (its slot maybe made again), or an
            // epoch purged since, has no waiters to serve.
            let gone = self
                .queues
                .get(q.queue() as usize)
                .and_then(Option::as_ref)
                .is_none_or(|queue| queue.dropping || queue.epochs[q.half()] != q.epoch());
            if gone || self.receive_paused(q) {
                continue;
            }
            let mut next = self.sub(q).waiters.head;
            while next != NIL && self.sub(q).counts.visible > 0 {
                let slot = next;
                next = self.waiters[slot as usize].next;
                let waiter = self.waiters[slot as usize].waiter.as_ref().expect("parked");
                let (max, budget, visibility_ms, filter) = (
                    waiter.max,
                    waiter.budget,
                    waiter.visibility_ms,
                    waiter.filter.clone(),
                );
                let mut out = Vec::new();
                self.take_visible(
                    q,
                    &Take {
                        max,
                        budget,
                        visibility_ms,
                        filter: filter.as_ref(),
                    },
                    &mut out,
                );
                if out.is_empty() {
                    continue;
                }
                let waiter = self.take_waiter(slot).expect("parked");
                self.complete(waiter, Ok(out));
            }
        }
    }
}
