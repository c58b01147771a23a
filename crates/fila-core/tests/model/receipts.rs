//! The model's receipts, redrives and time: delete, change visibility,
//! defer, dead-letter, receive-deferred, peek; redrive; timed events and
//! dead letters delivered to their targets.

use std::sync::Arc;

use fila_core::lease::DELIVERY_COUNT_MAX;
use fila_core::limits::{PEEK_MAX, REDRIVE_BATCH_MAX, VISIBILITY_MS_MAX};
use fila_core::*;

use super::{idx, Delivery, Job, MReceipt, Model, Out, St, M};

/// A dead letter's reason and description within their limits.
fn check_dead_letter_text(reason: &str, description: &str) -> Result<(), Error> {
    for (field, text, max) in [("reason", reason, 256), ("description", description, 4096)] {
        if text.len() > max {
            return Err(Error::InvalidArgument {
                field,
                limit: String::new(),
            });
        }
    }
    Ok(())
}

impl Model {
    // ----- receipts -----------------------------------------------------------

    pub(super) fn leased(&self, name: &str, dlq: bool, r: &MReceipt) -> Result<u64, Error> {
        let q = self.q(name)?;
        if r.queue_id != q.id || r.dlq != dlq {
            return Err(Error::ReceiptStale);
        }
        q.subs[idx(dlq)]
            .msgs
            .values()
            .find(|m| m.st == St::InFlight(r.lease))
            .map(|m| m.seq)
            .ok_or(Error::ReceiptStale)
    }

    pub fn delete(
        &mut self,
        name: &str,
        dlq: bool,
        receipts: &[MReceipt],
    ) -> Result<Vec<Result<(), Error>>, Error> {
        self.q(name)?;
        let mut answers = Vec::new();
        for r in receipts {
            answers.push(self.leased(name, dlq, r).map(|seq| {
                self.q_mut(name).unwrap().stats.deletes += 1;
                self.remove(name, dlq, seq);
            }));
        }
        // A group freed by a delete may give its next message at once.
        self.serve_gained();
        self.flush_outbox();
        Ok(answers)
    }

    pub fn update_visibility(
        &mut self,
        name: &str,
        dlq: bool,
        changes: &[(MReceipt, u64)],
    ) -> Result<Vec<Result<u64, Error>>, Error> {
        self.q(name)?;
        let now = self.now;
        let mut answers = Vec::new();
        for (r, timeout) in changes {
            let answer = (|| {
                if *timeout > VISIBILITY_MS_MAX {
                    return Err(Error::InvalidArgument {
                        field: "timeout_ms",
                        limit: String::new(),
                    });
                }
                let seq = self.leased(name, dlq, r)?;
                let m = self.queues.get_mut(name).unwrap().subs[idx(dlq)]
                    .msgs
                    .get_mut(&seq)
                    .unwrap();
                m.visible_at = now + timeout;
                if *timeout == 0 {
                    let expired = m.expires <= now;
                    self.enter_visible(name, dlq, seq);
                    if expired {
                        self.expire(name, dlq, seq, now);
                    }
                }
                Ok(now + timeout)
            })();
            answers.push(answer);
        }
        self.serve_gained();
        self.flush_outbox();
        Ok(answers)
    }

    /// Leases ended as failed: each message waits its queue's retry
    /// policy's delay from now, as after a lease that expires.
    pub fn release(
        &mut self,
        name: &str,
        dlq: bool,
        receipts: &[MReceipt],
        reason: &str,
        description: &str,
    ) -> Result<Vec<Result<u64, Error>>, Error> {
        check_dead_letter_text(reason, description)?;
        self.q(name)?;
        let now = self.now;
        let mut answers = Vec::new();
        for r in receipts {
            answers.push(self.leased(name, dlq, r).map(|seq| {
                let m = self.queues.get_mut(name).unwrap().subs[idx(dlq)]
                    .msgs
                    .get_mut(&seq)
                    .unwrap();
                m.visible_at = now;
                self.record_attempt(
                    name,
                    dlq,
                    seq,
                    AttemptEnd::Released,
                    reason,
                    description,
                    now,
                );
                let at = self.retry_at(name, dlq, seq).unwrap_or(now).max(now);
                self.lease_ended(name, dlq, seq, now);
                at
            }));
        }
        self.serve_gained();
        self.flush_outbox();
        Ok(answers)
    }

    /// When leased message `seq`, whose lease ends at its `visible_at`
    /// without a delete, is visible again by its queue's retry policy, at
    /// most at its expiry (`None`: no policy, or a dead letter). The
    /// delay itself is the engine's function (`QueueSettings::retry_delay`,
    /// tested on its own): what the model checks is when it applies.
    fn retry_at(&self, name: &str, dlq: bool, seq: u64) -> Option<u64> {
        if dlq {
            return None;
        }
        let q = &self.queues[name];
        let m = &q.subs[0].msgs[&seq];
        let delay = q.settings.retry_delay(m.count, seq)?;
        Some((m.visible_at + delay).min(m.expires))
    }

    /// Keeps a failed attempt in the history of message `seq` of the
    /// queue's own half, as many as the queue keeps (the engine's rule,
    /// `remember_attempt`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_attempt(
        &mut self,
        name: &str,
        dlq: bool,
        seq: u64,
        end: AttemptEnd,
        reason: &str,
        description: &str,
        t: u64,
    ) {
        let q = self.queues.get_mut(name).unwrap();
        let keep = q.settings.attempt_history;
        if dlq || keep == 0 {
            return;
        }
        let m = q.subs[0].msgs.get_mut(&seq).unwrap();
        let attempt = Attempt {
            at_ms: t,
            delivery: m.count,
            end,
            reason: reason.to_owned(),
            description: description.to_owned(),
        };
        remember_attempt(&mut m.attempts, attempt, keep);
    }

    /// A lease of `seq` ended at `t` without a delete: the message waits
    /// for its retry, is visible again, or expires (its life ran out).
    pub(super) fn lease_ended(&mut self, name: &str, dlq: bool, seq: u64, t: u64) {
        if self.queues[name].subs[idx(dlq)].msgs[&seq].expires <= t {
            self.expire(name, dlq, seq, t);
            return;
        }
        match self.retry_at(name, dlq, seq) {
            Some(at) if at > t => {
                let q = self.queues.get_mut(name).unwrap();
                q.stats.retries += 1;
                let m = q.subs[0].msgs.get_mut(&seq).unwrap();
                m.st = St::Delayed;
                m.visible_at = at;
                self.refresh_group(name, seq);
            }
            _ => self.enter_visible(name, dlq, seq),
        }
    }

    pub fn defer(&mut self, name: &str, r: &MReceipt) -> Result<(), Error> {
        let seq = self.leased(name, false, r)?;
        self.q_mut(name)?.subs[0].msgs.get_mut(&seq).unwrap().st = St::Deferred;
        self.refresh_group(name, seq);
        self.serve_gained();
        self.flush_outbox();
        Ok(())
    }

    pub fn dead_letter(
        &mut self,
        name: &str,
        r: &MReceipt,
        reason: &str,
        description: &str,
    ) -> Result<(), Error> {
        check_dead_letter_text(reason, description)?;
        let seq = self.leased(name, false, r)?;
        let now = self.now;
        self.record_attempt(
            name,
            false,
            seq,
            AttemptEnd::DeadLettered,
            reason,
            description,
            now,
        );
        self.consumer_dead_letter(name, seq, reason, description)
    }

    /// An operator's delete by sequence number, whatever the state.
    pub fn delete_seq(&mut self, name: &str, dlq: bool, seq: u64) -> Result<(), Error> {
        if !self.q(name)?.subs[idx(dlq)].msgs.contains_key(&seq) {
            return Err(Error::NotFound { seq, what: "held" });
        }
        self.q_mut(name)?.stats.deletes += 1;
        self.remove(name, dlq, seq);
        self.serve_gained();
        self.flush_outbox();
        Ok(())
    }

    /// An operator's dead-letter by sequence number, whatever the state.
    pub fn dead_letter_seq(
        &mut self,
        name: &str,
        seq: u64,
        reason: &str,
        description: &str,
    ) -> Result<(), Error> {
        check_dead_letter_text(reason, description)?;
        if !self.q(name)?.subs[0].msgs.contains_key(&seq) {
            return Err(Error::NotFound { seq, what: "held" });
        }
        self.consumer_dead_letter(name, seq, reason, description)
    }

    /// Dead-letters message `seq` with a consumer's (or an operator's)
    /// reason and description.
    fn consumer_dead_letter(
        &mut self,
        name: &str,
        seq: u64,
        reason: &str,
        description: &str,
    ) -> Result<(), Error> {
        let now = self.now;
        self.dead_letter_msg(
            name,
            seq,
            DeadLetterReason::Consumer {
                reason: reason.to_owned(),
                description: description.to_owned(),
            },
            now,
        );
        self.serve_gained();
        self.flush_outbox();
        Ok(())
    }

    pub(super) fn dead_letter_msg(
        &mut self,
        name: &str,
        seq: u64,
        reason: DeadLetterReason,
        t: u64,
    ) {
        let q = self.queues.get_mut(name).unwrap();
        q.stats.dead_letterings += 1;
        let count = q.subs[0].msgs[&seq].count;
        let forwarded = q.subs[0].msgs[&seq].dead_letter.is_some();
        let info = Arc::new(DeadLetter {
            source_queue: q.name.clone(),
            at_ms: t,
            reason,
            delivery_count: count,
        });
        let target = q
            .settings
            .dead_letter_target
            .clone()
            .filter(|t| t != name && !forwarded);
        let retention = q.settings.retention_ms;
        let source = q.name.clone();
        let mut m = self.remove(name, false, seq);
        m.dead_letter = Some(info);
        if let Some(target) = target {
            self.outbox.push(Out {
                target,
                source,
                source_seq: seq,
                at: t,
                msg: m,
            });
            return;
        }
        m.expires = t + retention;
        m.visible_at = t;
        self.queues.get_mut(name).unwrap().subs[1]
            .msgs
            .insert(seq, m);
        self.enter_visible(name, true, seq);
    }

    pub(super) fn expire(&mut self, name: &str, dlq: bool, seq: u64, t: u64) {
        let q = self.queues.get_mut(name).unwrap();
        q.stats.expiries += 1;
        if !dlq && q.settings.dead_letter_on_expiration {
            self.dead_letter_msg(name, seq, DeadLetterReason::Expired, t);
        } else {
            self.remove(name, dlq, seq);
        }
    }

    pub fn receive_deferred(
        &mut self,
        name: &str,
        seqs: &[u64],
        visibility: Option<u64>,
    ) -> Result<Vec<Result<Delivery, Error>>, Error> {
        if seqs.is_empty() || seqs.len() > 20 {
            return Err(Error::InvalidArgument {
                field: "sequence_numbers",
                limit: String::new(),
            });
        }
        if visibility.is_some_and(|v| v > VISIBILITY_MS_MAX) {
            return Err(Error::InvalidArgument {
                field: "visibility_ms",
                limit: String::new(),
            });
        }
        let q = self.q(name)?;
        if q.settings.receive_paused {
            return Err(Error::QueuePaused {
                name: name.to_owned(),
                what: "receiving",
            });
        }
        let vis = visibility.unwrap_or(q.settings.visibility_timeout_ms);
        let max_deliveries = q.settings.max_deliveries;
        let now = self.now;
        let mut answers = Vec::new();
        for &seq in seqs {
            let answer = (|| {
                let q = self.q(name)?;
                let m = match q.subs[0].msgs.get(&seq) {
                    Some(m) if m.st == St::Deferred => m,
                    _ => {
                        return Err(Error::NotFound {
                            seq,
                            what: "deferred",
                        })
                    }
                };
                if m.expires <= now {
                    self.expire(name, false, seq, now);
                    return Err(Error::Expired { seq });
                }
                let busy = m.group.is_some()
                    && q.subs[0].msgs.values().any(|o| {
                        o.channel == m.channel
                            && o.group == m.group
                            && matches!(o.st, St::InFlight(_))
                    });
                if busy {
                    return Err(Error::GroupBusy { seq });
                }
                if max_deliveries > 0 && m.count >= max_deliveries {
                    self.dead_letter_msg(name, seq, DeadLetterReason::MaxDeliveries, now);
                    return Err(Error::NotFound {
                        seq,
                        what: "deferred",
                    });
                }
                let lease = self.next_lease;
                self.next_lease += 1;
                let q = self.queues.get_mut(name).unwrap();
                q.stats.deliveries += 1;
                let qid = q.id;
                let m = q.subs[0].msgs.get_mut(&seq).unwrap();
                m.count = (m.count + 1).min(DELIVERY_COUNT_MAX);
                m.first.get_or_insert(now);
                m.visible_at = now + vis;
                m.st = if vis == 0 {
                    St::Looking
                } else {
                    St::InFlight(lease)
                };
                let q = &self.queues[name];
                let view = self.view(&q.subs[0].msgs[&seq], false);
                if vis == 0 {
                    self.enter_visible(name, false, seq);
                } else {
                    self.refresh_group(name, seq);
                }
                Ok((
                    view,
                    Some(MReceipt {
                        queue_id: qid,
                        dlq: false,
                        lease,
                    }),
                ))
            })();
            answers.push(answer);
        }
        self.serve_gained();
        self.flush_outbox();
        Ok(answers)
    }

    pub fn peek(&self, name: &str, dlq: bool, from: u64, max: u32) -> Result<Vec<Message>, Error> {
        if max == 0 || max > PEEK_MAX {
            return Err(Error::InvalidArgument {
                field: "max_messages",
                limit: String::new(),
            });
        }
        let q = self.q(name)?;
        Ok(q.subs[idx(dlq)]
            .msgs
            .range(from..)
            .take(max as usize)
            .map(|(_, m)| self.view(m, dlq))
            .collect())
    }

    // ----- redrive ------------------------------------------------------------

    /// What a move with `filter` would take from queue `name`'s half, from
    /// sequence number `from` (a small queue: looked at whole).
    pub fn preview_move(
        &self,
        name: &str,
        dlq: bool,
        back_to_source: bool,
        filter: &MoveFilter,
        from: u64,
    ) -> Result<MovePreview, Error> {
        filter_checked(filter)?;
        let q = self.q(name)?;
        let taken: Vec<&M> = q.subs[idx(dlq)]
            .msgs
            .range(from..)
            .map(|(_, m)| m)
            .filter(|m| m.st == St::Visible)
            .filter(|m| !back_to_source || dlq || m.dead_letter.is_some())
            .filter(|m| takes(filter, m))
            .collect();
        Ok(MovePreview {
            matched: taken.len() as u64,
            first: taken
                .iter()
                .take(PREVIEW_SHOW_MAX)
                .map(|m| self.view(m, dlq))
                .collect(),
            next: None,
        })
    }

    pub fn redrive(
        &mut self,
        name: &str,
        max: Option<u64>,
        rate: Option<u32>,
        filter: Option<MoveFilter>,
    ) -> Result<RedriveOutcome, Error> {
        if max == Some(0) {
            return Err(Error::InvalidArgument {
                field: "max_messages",
                limit: String::new(),
            });
        }
        // A rate is 1..=REDRIVE_BATCH_MAX; without one, that many now and
        // that many a second.
        if rate.is_some_and(|r| r == 0 || r > REDRIVE_BATCH_MAX) {
            return Err(Error::InvalidArgument {
                field: "rate_per_second",
                limit: String::new(),
            });
        }
        let filter = match filter {
            Some(f) if f != MoveFilter::default() => {
                filter_checked(&f)?;
                Some((f, 0))
            }
            _ => None,
        };
        let rate = rate.unwrap_or(REDRIVE_BATCH_MAX);
        self.q_mut(name)?.redrive = None;
        let now = self.now;
        let first = max.unwrap_or(u64::MAX).min(u64::from(rate));
        let mut filter = filter;
        let moved = self.redrive_move(name, first, &mut filter, now);
        let left = self.queues[name].subs[1].visible() as u64;
        let remaining = max.map(|m| m - moved);
        let mut scheduled = 0;
        if moved == first && remaining != Some(0) && left > 0 {
            scheduled = remaining.map_or(left, |r| r.min(left));
            self.q_mut(name)?.redrive = Some(Job {
                remaining,
                rate,
                at: now + 1_000,
                filter,
            });
        }
        self.serve_gained();
        self.flush_outbox();
        Ok(RedriveOutcome { moved, scheduled })
    }

    /// Up to `max` visible dead letters back, the first in sequence order
    /// (with a filter, the first it takes from its cursor on, the cursor
    /// then past the last one taken).
    pub(super) fn redrive_move(
        &mut self,
        name: &str,
        max: u64,
        filter: &mut Option<(MoveFilter, u64)>,
        t: u64,
    ) -> u64 {
        let from = filter.as_ref().map_or(0, |(_, c)| *c);
        let seqs: Vec<u64> = self.queues[name].subs[1]
            .msgs
            .range(from..)
            .map(|(_, m)| m)
            .filter(|m| m.st == St::Visible && filter.as_ref().is_none_or(|(f, _)| takes(f, m)))
            .map(|m| m.seq)
            .take(usize::try_from(max).unwrap_or(usize::MAX))
            .collect();
        if let (Some((_, cursor)), Some(last)) = (filter.as_mut(), seqs.last()) {
            *cursor = last + 1;
        }
        for &old in &seqs {
            let mut m = self.remove(name, true, old);
            m.dead_letter = None;
            m.attempts.clear();
            self.queues.get_mut(name).unwrap().stats.redriven += 1;
            self.arrive(name, m, t);
        }
        seqs.len() as u64
    }

    /// Message `m` joins queue `name` at `t` as a new message: the next
    /// sequence number, its life from `t`, no deliveries, visible.
    fn arrive(&mut self, name: &str, mut m: M, t: u64) {
        let q = self.queues.get_mut(name).unwrap();
        let seq = q.next_seq;
        q.next_seq += 1;
        m.seq = seq;
        m.inserted = t;
        m.expires = t + q.settings.retention_ms;
        m.visible_at = t;
        m.count = 0;
        m.first = None;
        q.subs[0].msgs.insert(seq, m);
        self.enter_visible(name, false, seq);
    }

    // ----- time ---------------------------------------------------------------

    /// Runs every timed event up to `now` in order, then delivers dead
    /// letters bound for other queues.
    pub fn advance(&mut self, now: u64) {
        loop {
            // (time, class, queue, dlq, seq or waiter index)
            let mut next: Option<(u64, u8, String, bool, u64)> = None;
            let mut consider = |e: (u64, u8, String, bool, u64)| {
                if next.as_ref().is_none_or(|n| e < *n) {
                    next = Some(e);
                }
            };
            for (name, q) in &self.queues {
                for dlq in [false, true] {
                    for m in q.subs[idx(dlq)].msgs.values() {
                        let at = match m.st {
                            St::Delayed | St::InFlight(_) => m.visible_at,
                            St::Visible => m.expires,
                            St::Deferred | St::Looking => continue,
                        };
                        consider((at, 0, name.clone(), dlq, m.seq));
                    }
                }
                if let Some(job) = &q.redrive {
                    consider((job.at, 1, name.clone(), false, 0));
                }
            }
            for (i, w) in self.waiters.iter().enumerate() {
                consider((w.deadline, 2, String::new(), false, i as u64));
            }
            let Some((t, class, name, dlq, seq)) = next else {
                break;
            };
            if t > now {
                break;
            }
            self.now = self.now.max(t);
            match class {
                0 => {
                    let m = &self.queues[&name].subs[idx(dlq)].msgs[&seq];
                    let expired = m.expires <= t;
                    match m.st {
                        St::InFlight(_) => {
                            let end = AttemptEnd::Expired;
                            self.record_attempt(&name, dlq, seq, end, "", "", t);
                            self.lease_ended(&name, dlq, seq, t)
                        }
                        St::Delayed if !expired => self.enter_visible(&name, dlq, seq),
                        _ => self.expire(&name, dlq, seq, t),
                    }
                }
                1 => {
                    let mut job = self.queues.get_mut(&name).unwrap().redrive.take().unwrap();
                    let batch = job.remaining.unwrap_or(u64::MAX).min(u64::from(job.rate));
                    let moved = self.redrive_move(&name, batch, &mut job.filter, t);
                    let remaining = job.remaining.map(|r| r - moved);
                    if moved == batch
                        && remaining != Some(0)
                        && self.queues[&name].subs[1].visible() > 0
                    {
                        self.queues.get_mut(&name).unwrap().redrive = Some(Job {
                            remaining,
                            rate: job.rate,
                            at: t + 1_000,
                            filter: job.filter,
                        });
                    }
                }
                _ => {
                    let w = self.waiters.remove(seq as usize);
                    self.completions.push((w.key, Ok(Vec::new())));
                }
            }
            self.serve_gained();
        }
        self.now = self.now.max(now);
        self.flush_outbox();
    }

    pub(super) fn flush_outbox(&mut self) {
        let mut outbox = std::mem::take(&mut self.outbox);
        outbox
            .sort_by(|a, b| (a.at, &a.source, a.source_seq).cmp(&(b.at, &b.source, b.source_seq)));
        let now = self.now;
        for out in outbox {
            let accepted = match self.queues.get(&out.target) {
                Some(q) => self.capacity(q, &out.msg.channel, out.msg.bytes()).is_ok(),
                None => false,
            };
            if accepted {
                self.queues.get_mut(&out.target).unwrap().stats.puts += 1;
                self.arrive(&out.target, out.msg, now);
            } else if let Some(q) = self.queues.get_mut(out.source.as_ref()) {
                let mut m = out.msg;
                m.seq = out.source_seq;
                // Stored afresh: the engine's new record knows no receive.
                m.first = None;
                m.expires = out.at + q.settings.retention_ms;
                m.visible_at = out.at;
                let expired = m.expires <= now;
                q.subs[1].msgs.insert(m.seq, m);
                self.enter_visible(&out.source.clone(), true, out.source_seq);
                if expired {
                    // Its life in the DLQ, counted from when it was
                    // dead-lettered, is already over: the engine's timer is
                    // due, and fires before anything can look at it.
                    self.expire(&out.source.clone(), true, out.source_seq, now);
                }
            }
            self.serve_gained();
        }
    }
}

/// The model's own reading of a filter's limits (docs/engine.md): the
/// field of the first one broken.
fn filter_checked(f: &MoveFilter) -> Result<(), Error> {
    use fila_core::limits::{
        ATTRIBUTES_BYTES_MAX, ATTRIBUTES_MAX, ATTRIBUTE_KEY_LEN_MAX,
        DEAD_LETTER_DESCRIPTION_LEN_MAX, DEAD_LETTER_REASON_LEN_MAX,
    };
    let bytes: usize = f.attributes.iter().map(|(k, v)| k.len() + v.len()).sum();
    let field = if f.attributes.len() > ATTRIBUTES_MAX
        || f.attributes
            .iter()
            .any(|(k, _)| k.is_empty() || k.len() > ATTRIBUTE_KEY_LEN_MAX)
        || bytes > ATTRIBUTES_BYTES_MAX
    {
        "filter.attributes"
    } else if f
        .reason
        .as_ref()
        .is_some_and(|r| r.is_empty() || r.len() > DEAD_LETTER_REASON_LEN_MAX)
    {
        "filter.reason"
    } else if f
        .text
        .as_ref()
        .is_some_and(|t| t.is_empty() || t.len() > DEAD_LETTER_DESCRIPTION_LEN_MAX)
    {
        "filter.text"
    } else if matches!((f.since_ms, f.until_ms), (Some(s), Some(u)) if s >= u) {
        "filter.until_ms"
    } else {
        return Ok(());
    };
    Err(Error::InvalidArgument {
        field,
        limit: String::new(),
    })
}

/// Whether `f` takes message `m`: each attribute named, with its value;
/// the reason among its dead-letter kind, its consumer's reason and its
/// attempts' reasons; the text in one of their reasons or descriptions;
/// its time (dead-lettered, else put) in the range.
fn takes(f: &MoveFilter, m: &M) -> bool {
    let attrs: &[(Box<str>, Box<str>)] = m.attributes.as_deref().unwrap_or(&[]);
    let mut reasons: Vec<String> = Vec::new();
    let mut said: Vec<String> = Vec::new();
    if let Some(d) = &m.dead_letter {
        reasons.push(d.reason.as_str().to_owned());
        if let DeadLetterReason::Consumer {
            reason,
            description,
        } = &d.reason
        {
            reasons.push(reason.clone());
            said.extend([reason.clone(), description.clone()]);
        }
    }
    for a in &m.attempts {
        reasons.push(a.reason.clone());
        said.extend([a.reason.clone(), a.description.clone()]);
    }
    let time = m.dead_letter.as_ref().map_or(m.inserted, |d| d.at_ms);
    f.attributes
        .iter()
        .all(|(k, v)| attrs.iter().any(|(ak, av)| **ak == **k && **av == **v))
        && f.reason.as_ref().is_none_or(|r| reasons.contains(r))
        && f.text
            .as_ref()
            .is_none_or(|t| said.iter().any(|s| s.contains(t.as_str())))
        && f.since_ms.is_none_or(|s| time >= s)
        && f.until_ms.is_none_or(|u| time < u)
}
