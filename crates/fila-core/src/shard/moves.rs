//! Messages moving between queues: redrive from the DLQ, dead letters
//! forwarded to a target queue and bounced back.

use super::*;

impl Shard {
    // ----- redrive ----------------------------------------------------------

    /// Moves visible dead letters back to the queue in sequence order: up to
    /// `max` (all when `None`), `rate` now and `rate` a second after
    /// ([`REDRIVE_BATCH_MAX`] when not given, the most a rate may be), so
    /// one call never moves an unbounded DLQ.
    pub fn redrive(
        &mut self,
        name: &str,
        max: Option<u64>,
        rate: Option<u32>,
        now: u64,
    ) -> Result<RedriveOutcome, Error> {
        if max == Some(0) {
            return Err(Error::invalid(
                "max_messages",
                "must be at least 1 when given",
            ));
        }
        if rate.is_some_and(|r| r == 0 || r > REDRIVE_BATCH_MAX) {
            return Err(Error::invalid(
                "rate_per_second",
                format!("must be 1..={REDRIVE_BATCH_MAX} when given"),
            ));
        }
        let rate = rate.unwrap_or(REDRIVE_BATCH_MAX);
        self.catch_up(now);
        let qslot = self.queue_slot(name)?;
        if let Some(job) = self.queue_mut(qslot).redrive.take() {
            self.wheel.cancel(job.timer);
        }
        let now = self.now;
        let first = max.unwrap_or(u64::MAX).min(u64::from(rate));
        let moved = self.redrive_move(qslot, first, now);
        let left = self.sub(self.sub_id(qslot, true)).counts.visible;
        let remaining = max.map(|m| m - moved);
        let mut scheduled = 0;
        if moved == first && remaining != Some(0) && left > 0 {
            scheduled = remaining.map_or(left, |r| r.min(left));
            let timer = self.wheel.insert(now + 1_000, Timer::Redrive(qslot).into());
            self.queue_mut(qslot).redrive = Some(RedriveJob {
                remaining,
                rate,
                timer,
            });
        }
        self.serve_gained();
        Ok(RedriveOutcome { moved, scheduled })
    }

    pub(super) fn redrive_tick(&mut self, qslot: u32, t: u64) {
        let Some(job) = self.queue_mut(qslot).redrive.take() else {
            return;
        };
        let batch = job.remaining.unwrap_or(u64::MAX).min(u64::from(job.rate));
        let moved = self.redrive_move(qslot, batch, t);
        let remaining = job.remaining.map(|r| r - moved);
        if moved == batch
            && remaining != Some(0)
            && self.sub(self.sub_id(qslot, true)).counts.visible > 0
        {
            let timer = self.wheel.insert(t + 1_000, Timer::Redrive(qslot).into());
            self.queue_mut(qslot).redrive = Some(RedriveJob {
                remaining,
                rate: job.rate,
                timer,
            });
        }
    }

    pub(super) fn redrive_move(&mut self, qslot: u32, max: u64, t: u64) -> u64 {
        let dlq = self.sub_id(qslot, true);
        let slots: Vec<u32> = self
            .sub(dlq)
            .index
            .from(0)
            .map(|(_, slot)| slot)
            .filter(|slot| self.records[*slot as usize].word.load().state == MessageState::Visible)
            .take(usize::try_from(max).unwrap_or(usize::MAX))
            .collect();
        for &slot in &slots {
            let channel = self.sub(dlq).channels[self.records[slot as usize].channel as usize]
                .name
                .clone();
            let id = self.message(slot, State::DeadLettered, None).id;
            self.leave_state(slot, MessageState::Visible);
            self.detach(slot);
            let queue = self.queue_mut(qslot);
            let seq = queue.next_seq;
            queue.next_seq += 1;
            queue.counters.redriven += 1;
            let retention = queue.settings.retention_ms;
            let r = &mut self.records[slot as usize];
            let from_seq = r.seq;
            r.seq = seq;
            r.inserted_at = t;
            r.expires_at = t + retention;
            r.visible_at = t;
            let before = r.budget_bytes();
            let extra = r.extra.get_or_insert_with(Box::default);
            extra.dead_letter = None;
            extra.id = Some(id);
            let freed = before.saturating_sub(r.budget_bytes());
            self.budget.release(freed);
            r.word
                .shift(MessageState::Visible, MessageState::Visible)
                .expect("owned");
            r.word.set_delivery_count(0);
            self.attach(slot, self.sub_id(qslot, false), channel.as_deref());
            let from = Spot {
                queue: self.queue(qslot).id,
                dlq: true,
                seq: from_seq,
            };
            self.log_stored(slot, Some(from));
            self.enter_visible(slot);
        }
        slots.len() as u64
    }

    // ----- dead-letter targets ------------------------------------------------

    /// Takes in a dead letter from another queue as a new visible message.
    // The dead letter comes back whole when refused; it is moved, not copied.
    #[allow(clippy::result_large_err)]
    pub(crate) fn accept_forward(&mut self, out: Outbound, now: u64) -> Result<(), Outbound> {
        self.catch_up(now);
        let Ok(qslot) = self.queue_slot(&out.target) else {
            return Err(out);
        };
        let len = out.payload.len() as u64 + attributes_bytes(out.attributes.as_ref());
        let kept = len + dead_letter_bytes(Some(&out.dead_letter));
        if self
            .check_capacity(qslot, out.channel.as_deref(), len)
            .is_err()
            || self.budget.reserve_message(kept).is_err()
        {
            return Err(out);
        }
        let now = self.now;
        let queue = self.queue_mut(qslot);
        let seq = queue.next_seq;
        queue.next_seq += 1;
        queue.counters.puts += 1;
        let retention = queue.settings.retention_ms;
        // It starts afresh in its target: no deliveries there yet (its
        // earlier count stays in its dead-letter record).
        self.take_in(out, self.sub_id(qslot, false), seq, now, now, retention, 0);
        Ok(())
    }

    /// Takes back a dead letter that its target could not take, into the
    /// source queue's own DLQ. Dropped if the source is gone too.
    pub(crate) fn accept_bounce(&mut self, out: Outbound, now: u64) {
        self.catch_up(now);
        let Ok(qslot) = self.queue_slot(&out.source) else {
            return;
        };
        let retention = self.queue(qslot).settings.retention_ms;
        // It was stored before it left: keep it whatever the budget says.
        self.budget.force_message(
            out.payload.len() as u64
                + attributes_bytes(out.attributes.as_ref())
                + dead_letter_bytes(Some(&out.dead_letter)),
        );
        let (seq, inserted_at, at, count) = (
            out.source_seq,
            out.inserted_at,
            out.at_ms,
            out.delivery_count,
        );
        self.take_in(
            out,
            self.sub_id(qslot, true),
            seq,
            inserted_at,
            at,
            retention,
            count,
        );
    }

    /// Stores a dead letter (already counted in the budget) as message
    /// `seq` of sub-queue `q`, visible from `at` and for `retention`, with
    /// `count` deliveries; one event says where it came from.
    #[allow(clippy::too_many_arguments)]
    fn take_in(
        &mut self,
        out: Outbound,
        q: SubId,
        seq: u64,
        inserted_at: u64,
        at: u64,
        retention: u64,
        count: u32,
    ) {
        let new = NewRecord {
            payload: out.payload,
            seq,
            inserted_at,
            expires_at: at + retention,
            visible_at: at,
            extra: Some(Box::new(Extra {
                attributes: out.attributes,
                dead_letter: Some(out.dead_letter),
                id: Some(out.id),
            })),
            state: MessageState::Visible,
            delivery_count: count,
        };
        let slot = self.store(new, q, out.channel.as_deref());
        let from = Spot {
            queue: out.source_queue,
            dlq: false,
            seq: out.source_seq,
        };
        self.log_stored(slot, Some(from));
        self.serve_gained();
    }
}
