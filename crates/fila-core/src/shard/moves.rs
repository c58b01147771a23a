//! Messages moving between queues: move tasks (a redrive from the DLQ, a
//! move out of a queue back to the sources or to a named queue), dead
//! letters forwarded to a target queue and bounced back.

use super::*;

/// Checks a redrive's or move's maximum and rate.
fn check_move(max: Option<u64>, rate: Option<u32>) -> Result<(), Error> {
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
    Ok(())
}

/// A filter checked, and kept only when it has a condition.
fn checked(filter: Option<MoveFilter>) -> Result<Option<Box<MoveFilter>>, Error> {
    match filter {
        Some(f) if !f.is_empty() => {
            f.check()?;
            Ok(Some(Box::new(f)))
        }
        _ => Ok(None),
    }
}

/// Index entries one batch of a task looks at, at most, for a batch of
/// `budget` messages (leased messages, gone ones and ones its filter
/// leaves are passed over).
fn look_max(budget: u64) -> u64 {
    budget.saturating_mul(4).max(4_096)
}

impl Shard {
    // ----- redrive and move tasks -------------------------------------------

    /// Moves visible dead letters back to the queue in sequence order: up to
    /// `max` (all when `None`), `rate` now and `rate` a second after
    /// ([`REDRIVE_BATCH_MAX`] when not given, the most a rate may be), so
    /// one call never moves an unbounded DLQ. It is a move task (its
    /// progress listed by [`Shard::moves`]); one running on the queue is
    /// cancelled. With a `filter`, only the dead letters it takes move: a
    /// cursor goes through the DLQ once, in sequence order, and a batch
    /// looks at a bounded number of entries.
    pub fn redrive(
        &mut self,
        name: &str,
        max: Option<u64>,
        rate: Option<u32>,
        filter: Option<MoveFilter>,
        now: u64,
    ) -> Result<RedriveOutcome, Error> {
        check_move(max, rate)?;
        let filter = checked(filter)?;
        let rate = rate.unwrap_or(REDRIVE_BATCH_MAX);
        self.catch_up(now);
        let qslot = self.queue_slot(name)?;
        self.end_running(qslot, MoveStatus::Cancelled, None);
        let now = self.now;
        let left = self.sub(self.sub_id(qslot, true)).counts.visible;
        self.begin_task(
            qslot,
            MoveTask {
                id: 0,
                from_dlq: true,
                to: None,
                rate,
                started_at_ms: now,
                moved: 0,
                to_move: max.map_or(left, |m| m.min(left)),
                max,
                status: MoveStatus::Running,
                failure: None,
                cursor: 0,
                end: u64::MAX,
                filter,
            },
        );
        let first = max.unwrap_or(u64::MAX).min(u64::from(rate));
        let (moved, cut) = self.redrive_batch(qslot, first, now);
        let left = self.sub(self.sub_id(qslot, true)).counts.visible;
        let remaining = max.map(|m| m - moved);
        let mut scheduled = 0;
        if (moved == first && remaining != Some(0) && left > 0) || cut {
            scheduled = remaining.map_or(left, |r| r.min(left));
            let timer = self.wheel.insert(now + 1_000, Timer::Redrive(qslot).into());
            self.queue_mut(qslot).redrive = Some(RedriveJob {
                remaining,
                rate,
                timer,
            });
            self.note_moved(qslot, moved, None);
        } else {
            self.note_moved(qslot, moved, Some(MoveStatus::Completed));
        }
        self.serve_gained();
        Ok(RedriveOutcome { moved, scheduled })
    }

    /// Starts moving the visible messages of queue `name` (that is another
    /// queue's dead-letter target) out: each to `to`, or back to the queue
    /// it was dead-lettered from when `to` is `None` (a message with no
    /// record of one stays); `rate` a second ([`REDRIVE_BATCH_MAX`] when not
    /// given), up to `max`; messages put after the start stay. One running
    /// on the queue is cancelled. With a `filter`, only the messages it
    /// takes move. Answers the task.
    pub fn start_move(
        &mut self,
        name: &str,
        to: Option<String>,
        max: Option<u64>,
        rate: Option<u32>,
        filter: Option<MoveFilter>,
        now: u64,
    ) -> Result<MoveTask, Error> {
        check_move(max, rate)?;
        let filter = checked(filter)?;
        if let Some(t) = &to {
            validate_queue_name("to", t)?;
            if t == name {
                return Err(Error::invalid(
                    "to",
                    "a queue cannot move its messages to itself",
                ));
            }
        }
        let rate = rate.unwrap_or(REDRIVE_BATCH_MAX);
        self.catch_up(now);
        let qslot = self.queue_slot(name)?;
        self.end_running(qslot, MoveStatus::Cancelled, None);
        let now = self.now;
        let main = self.sub(self.sub_id(qslot, false)).counts.visible;
        let end = self.queue(qslot).next_seq;
        self.begin_task(
            qslot,
            MoveTask {
                id: 0,
                from_dlq: false,
                to,
                rate,
                started_at_ms: now,
                moved: 0,
                to_move: max.map_or(main, |m| m.min(main)),
                max,
                status: MoveStatus::Running,
                failure: None,
                cursor: 0,
                end,
                filter,
            },
        );
        self.move_tick(qslot, now);
        Ok(self.running_or_last(qslot))
    }

    /// Cancels task `id` of queue `name` if it runs; answers it as it now
    /// is (`not_found` when the queue keeps no such task).
    pub fn cancel_move(&mut self, name: &str, id: u64, now: u64) -> Result<MoveTask, Error> {
        self.catch_up(now);
        let qslot = self.queue_slot(name)?;
        let task = self.queue(qslot).moves.iter().find(|t| t.id == id).cloned();
        match task {
            None => Err(Error::MoveTaskNotFound(id)),
            Some(t) if t.status == MoveStatus::Running => {
                self.end_running(qslot, MoveStatus::Cancelled, None);
                Ok(self
                    .queue(qslot)
                    .moves
                    .iter()
                    .find(|t| t.id == id)
                    .cloned()
                    .expect("kept"))
            }
            Some(t) => Ok(t),
        }
    }

    /// The move tasks queue `name` keeps, oldest first.
    pub fn moves(&self, name: &str) -> Result<Vec<MoveTask>, Error> {
        Ok(self.queue(self.queue_slot(name)?).moves.clone())
    }

    /// Adds a running task (numbered after the queue's last), forgetting
    /// the oldest ended ones past [`MOVE_TASKS_KEPT`]; logged.
    fn begin_task(&mut self, qslot: u32, mut task: MoveTask) {
        let queue = self.queue_mut(qslot);
        task.id = queue.moves.last().map_or(1, |t| t.id + 1);
        queue.moves.push(task);
        if queue.moves.len() > MOVE_TASKS_KEPT {
            let extra = queue.moves.len() - MOVE_TASKS_KEPT;
            queue.moves.drain(..extra);
        }
        self.log_moves(qslot);
    }

    /// The running task, or the last one.
    fn running_or_last(&self, qslot: u32) -> MoveTask {
        self.queue(qslot)
            .moves
            .last()
            .cloned()
            .expect("a task was begun")
    }

    /// Adds `moved` to the running task and, when `end` is given, ends it
    /// so; logged.
    fn note_moved(&mut self, qslot: u32, moved: u64, end: Option<MoveStatus>) {
        let queue = self.queue_mut(qslot);
        if let Some(t) = queue
            .moves
            .last_mut()
            .filter(|t| t.status == MoveStatus::Running)
        {
            t.moved += moved;
            if let Some(status) = end {
                t.status = status;
            }
        }
        self.log_moves(qslot);
    }

    /// Ends the running task of queue `qslot`, if any, as `status` (with a
    /// failure's reason), its timer cancelled; logged.
    pub(super) fn end_running(&mut self, qslot: u32, status: MoveStatus, failure: Option<String>) {
        if let Some(job) = self.queue_mut(qslot).redrive.take() {
            self.wheel.cancel(job.timer);
        }
        let queue = self.queue_mut(qslot);
        let Some(t) = queue
            .moves
            .last_mut()
            .filter(|t| t.status == MoveStatus::Running)
        else {
            return;
        };
        t.status = status;
        t.failure = failure;
        self.log_moves(qslot);
    }

    fn log_moves(&mut self, qslot: u32) {
        emit!(
            self,
            Event::MovesSet {
                queue: self.queue(qslot).id,
                tasks: &self.queue(qslot).moves,
            }
        );
    }

    pub(super) fn redrive_tick(&mut self, qslot: u32, t: u64) {
        let Some(job) = self.queue_mut(qslot).redrive.take() else {
            return;
        };
        let from_dlq = self
            .queue(qslot)
            .moves
            .last()
            .is_none_or(|task| task.from_dlq);
        if !from_dlq {
            self.move_tick(qslot, t);
            return;
        }
        let batch = job.remaining.unwrap_or(u64::MAX).min(u64::from(job.rate));
        let (moved, cut) = self.redrive_batch(qslot, batch, t);
        let remaining = job.remaining.map(|r| r - moved);
        if (moved == batch
            && remaining != Some(0)
            && self.sub(self.sub_id(qslot, true)).counts.visible > 0)
            || cut
        {
            let timer = self.wheel.insert(t + 1_000, Timer::Redrive(qslot).into());
            self.queue_mut(qslot).redrive = Some(RedriveJob {
                remaining,
                rate: job.rate,
                timer,
            });
            self.note_moved(qslot, moved, None);
        } else {
            self.note_moved(qslot, moved, Some(MoveStatus::Completed));
        }
    }

    /// One batch of the running task that moves messages out of queue
    /// `qslot`: its next visible messages in sequence order (up to its
    /// rate, and the end it had at its start), each on its way to its
    /// destination; the next batch a second later, or the task completed.
    fn move_tick(&mut self, qslot: u32, t: u64) {
        let Some(task) = self.queue(qslot).moves.last().cloned() else {
            return;
        };
        if task.status != MoveStatus::Running {
            return;
        }
        let main = self.sub_id(qslot, false);
        let budget = task
            .max
            .map_or(u64::MAX, |m| m.saturating_sub(task.moved))
            .min(u64::from(task.rate));
        let mut chosen: Vec<(u32, String)> = Vec::new();
        let mut cursor = task.cursor;
        let look_max = look_max(budget);
        let mut reached_end = true;
        for (looked, (seq, slot)) in (0u64..).zip(self.sub(main).index.from(task.cursor)) {
            if seq >= task.end {
                break;
            }
            if chosen.len() as u64 >= budget || looked >= look_max {
                reached_end = false;
                break;
            }
            cursor = seq + 1;
            // The main half's index holds candidates: entries of messages
            // gone (their slot maybe another's now) are skipped.
            if !self.live(slot, main, seq) {
                continue;
            }
            let r = &self.records[slot as usize];
            if r.word.load().state != MessageState::Visible
                || !self.takes(task.filter.as_deref(), slot)
            {
                continue;
            }
            let source = r
                .extra
                .as_ref()
                .and_then(|e| e.dead_letter.as_ref())
                .map(|d| d.source_queue.to_string());
            if let Some(dest) = task.to.clone().or(source) {
                chosen.push((slot, dest));
            }
        }
        let moved = chosen.len() as u64;
        for (slot, target) in chosen {
            let mut message = self.message(slot, State::Visible, None);
            let queue = self.queue(qslot);
            let dead_letter = message.dead_letter.take();
            let source = (queue.id, queue.name.clone());
            let moving = Some(MoveRef {
                task: task.id,
                from_dlq: false,
            });
            self.outbox.push(Outbound::of(
                message,
                target,
                source,
                t,
                dead_letter,
                moving,
            ));
            self.leave_state(slot, MessageState::Visible);
            self.remove_uncounted(slot);
        }
        if let Some(running) = self.queue_mut(qslot).moves.last_mut() {
            running.cursor = cursor;
        }
        let done = reached_end || task.max.is_some_and(|m| task.moved + moved >= m);
        if done {
            self.note_moved(qslot, moved, Some(MoveStatus::Completed));
        } else {
            let timer = self.wheel.insert(t + 1_000, Timer::Redrive(qslot).into());
            self.queue_mut(qslot).redrive = Some(RedriveJob {
                remaining: None,
                rate: task.rate,
                timer,
            });
            self.note_moved(qslot, moved, None);
        }
    }

    /// Restarts the running task of a queue restored from the log: its
    /// next batch in a second.
    pub(super) fn resume_moves(&mut self, qslot: u32) {
        let Some(task) = self.queue(qslot).moves.last().cloned() else {
            return;
        };
        if task.status != MoveStatus::Running {
            return;
        }
        let timer = self
            .wheel
            .insert(self.now + 1_000, Timer::Redrive(qslot).into());
        self.queue_mut(qslot).redrive = Some(RedriveJob {
            remaining: task.max.map(|m| m.saturating_sub(task.moved)),
            rate: task.rate,
            timer,
        });
    }

    /// Whether `filter` (none: every message) takes the message in `slot`.
    fn takes(&self, filter: Option<&MoveFilter>, slot: u32) -> bool {
        let Some(f) = filter else {
            return true;
        };
        let r = &self.records[slot as usize];
        let e = r.extra.as_deref();
        f.matches(
            e.and_then(|e| e.attributes.as_ref()),
            e.and_then(|e| e.dead_letter.as_deref()),
            e.and_then(|e| e.attempts.as_ref()),
            r.inserted(),
        )
    }

    /// One batch of the running redrive of queue `qslot`: up to `budget`
    /// dead letters back. Answers how many, and whether a filtered look
    /// stopped at its bound before the end of the DLQ (more to look at).
    fn redrive_batch(&mut self, qslot: u32, budget: u64, t: u64) -> (u64, bool) {
        let filter = self
            .queue(qslot)
            .moves
            .last()
            .filter(|task| task.status == MoveStatus::Running)
            .and_then(|task| task.filter.clone().map(|f| (f, task.cursor)));
        let Some((filter, from)) = filter else {
            return (self.redrive_move(qslot, budget, t), false);
        };
        let dlq = self.sub_id(qslot, true);
        let mut chosen = Vec::new();
        let mut cursor = from;
        let mut cut = false;
        let look_max = look_max(budget);
        for (looked, (seq, slot)) in (0u64..).zip(self.sub(dlq).index.from(from)) {
            if chosen.len() as u64 >= budget {
                break;
            }
            if looked >= look_max {
                cut = true;
                break;
            }
            cursor = seq + 1;
            if self.live(slot, dlq, seq)
                && self.records[slot as usize].word.load().state == MessageState::Visible
                && self.takes(Some(&filter), slot)
            {
                chosen.push(slot);
            }
        }
        if let Some(running) = self.queue_mut(qslot).moves.last_mut() {
            running.cursor = cursor;
        }
        (self.redrive_slots(qslot, &chosen, t), cut)
    }

    /// Up to `max` visible dead letters of queue `qslot` back, the first
    /// in sequence order.
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
        self.redrive_slots(qslot, &slots, t)
    }

    /// The dead letters in `slots` back to queue `qslot`, each a new
    /// message at its end.
    fn redrive_slots(&mut self, qslot: u32, slots: &[u32], t: u64) -> u64 {
        let dlq = self.sub_id(qslot, true);
        for &slot in slots {
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
            r.set_inserted(t);
            r.expires_at = t + retention;
            r.visible_at = t;
            let before = r.budget_bytes();
            let extra = r.extra.get_or_insert_with(Box::default);
            extra.dead_letter = None;
            // A redriven message starts afresh: no record of its failures.
            extra.attempts = None;
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

    /// Counts the visible messages of queue `name` (its DLQ with `dlq`)
    /// that a move with `filter` would take, from sequence number `from`,
    /// looking at [`PREVIEW_LOOK_MAX`] index entries at most; with
    /// `back_to_source` (a move with no destination), only messages that
    /// record a queue they were dead-lettered from. Shows the first
    /// [`PREVIEW_SHOW_MAX`]. Moves nothing.
    pub fn preview_move(
        &mut self,
        name: &str,
        dlq: bool,
        back_to_source: bool,
        filter: &MoveFilter,
        from: u64,
        now: u64,
    ) -> Result<MovePreview, Error> {
        filter.check()?;
        self.catch_up(now);
        let qslot = self.queue_slot(name)?;
        let q = self.sub_id(qslot, dlq);
        let filter = Some(filter).filter(|f| !f.is_empty());
        let mut preview = MovePreview::default();
        let mut shown = Vec::new();
        for (looked, (seq, slot)) in (0u64..).zip(self.sub(q).index.from(from)) {
            if looked >= PREVIEW_LOOK_MAX {
                preview.next = Some(seq);
                break;
            }
            if !self.live(slot, q, seq) {
                continue;
            }
            let r = &self.records[slot as usize];
            let sourced = r.extra.as_ref().is_some_and(|e| e.dead_letter.is_some());
            if r.word.load().state != MessageState::Visible
                || (back_to_source && !dlq && !sourced)
                || !self.takes(filter, slot)
            {
                continue;
            }
            preview.matched += 1;
            if shown.len() < PREVIEW_SHOW_MAX {
                shown.push(slot);
            }
        }
        preview.first = shown
            .into_iter()
            .map(|slot| self.message(slot, self.public_state(slot), None))
            .collect();
        Ok(preview)
    }

    // ----- dead-letter targets ------------------------------------------------

    /// Takes in a dead letter from another queue as a new visible message
    /// (a move task's message: without its dead-letter record, as a
    /// redriven one).
    // The dead letter comes back whole when refused; it is moved, not copied.
    #[allow(clippy::result_large_err)]
    pub(crate) fn accept_forward(&mut self, mut out: Outbound, now: u64) -> Result<(), Outbound> {
        self.catch_up(now);
        let Ok(qslot) = self.queue_slot(&out.target) else {
            return Err(out);
        };
        let len = out.payload.len() as u64 + attributes_bytes(out.attributes.as_ref());
        if out.moving.is_some() {
            // A moved message starts afresh: no record of its failures.
            out.attempts = None;
        }
        let record = if out.moving.is_some() {
            0
        } else {
            dead_letter_bytes(out.dead_letter.as_deref()) + attempts_bytes(out.attempts.as_ref())
        };
        let kept = len + record + groups::grouped_bytes(out.group.is_some());
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
        if out.moving.is_some() {
            queue.counters.redriven += 1;
            out.dead_letter = None;
        }
        // It starts afresh in its target: no deliveries there yet (its
        // earlier count stays in its dead-letter record).
        self.take_in(out, self.sub_id(qslot, false), seq, now, now, retention, 0);
        Ok(())
    }

    /// Takes back a dead letter that its target could not take, into the
    /// source queue's own DLQ; a move task's message back where it was (at
    /// the end of its queue), its task failed. Dropped if the source is
    /// gone too.
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
                + dead_letter_bytes(out.dead_letter.as_deref())
                + groups::grouped_bytes(out.group.is_some())
                + attempts_bytes(out.attempts.as_ref()),
        );
        if let Some(m) = out.moving {
            let queue = self.queue_mut(qslot);
            let seq = queue.next_seq;
            queue.next_seq += 1;
            if let Some(task) = queue.moves.iter_mut().find(|t| t.id == m.task) {
                task.moved = task.moved.saturating_sub(1);
            }
            let running = queue
                .moves
                .last()
                .is_some_and(|t| t.id == m.task && t.status == MoveStatus::Running);
            let failure = format!(
                "the queue {} refused a message (it does not exist, or is full)",
                out.target
            );
            let (inserted_at, count) = (out.inserted_at, out.delivery_count);
            self.take_in(
                out,
                self.sub_id(qslot, m.from_dlq),
                seq,
                inserted_at,
                self.now,
                retention,
                count,
            );
            if running {
                self.end_running(qslot, MoveStatus::Failed, Some(failure));
            } else {
                self.log_moves(qslot);
            }
            return;
        }
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
                dead_letter: out.dead_letter,
                id: Some(out.id),
                group: out.group.map(groups::GroupRef::new),
                attempts: out.attempts,
            })),
            state: MessageState::Visible,
            delivery_count: count,
            level: out.priority,
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
