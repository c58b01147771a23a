//! What an operator does to one message by its sequence number (delete it,
//! dead-letter it, whatever its state), and a page of a queue's channels
//! with their backlog: the console's and the CLI's admin requests.

use super::*;

impl Shard {
    /// The live message `seq` of sub-queue `q`, or `not_found`.
    pub(super) fn by_seq(&self, q: SubId, seq: u64) -> Result<u32, Error> {
        self.sub(q)
            .index
            .get(seq)
            .filter(|slot| self.live(*slot, q, seq))
            .ok_or(Error::NotFound { seq, what: "held" })
    }

    /// Deletes message `seq` of the queue or its DLQ whatever its state
    /// (a lease on it ends: its receipt is refused from now on).
    pub fn delete_seq(&mut self, addr: Address<'_>, seq: u64, now: u64) -> Result<(), Error> {
        self.catch_up(now);
        let qslot = self.queue_slot(addr.queue)?;
        let q = self.sub_id(qslot, addr.dlq);
        let slot = self.by_seq(q, seq)?;
        self.queue_mut(qslot).counters.deletes += 1;
        emit!(
            self,
            Event::Removed {
                at: self.spot(slot)
            }
        );
        self.remove(slot);
        // A group freed by the delete may give its next message at once.
        self.serve_gained();
        Ok(())
    }

    /// Dead-letters message `seq` of the queue whatever its state, with the
    /// operator's reason and description (kept as a consumer's are).
    pub fn dead_letter_seq(
        &mut self,
        name: &str,
        seq: u64,
        reason: String,
        description: String,
        now: u64,
    ) -> Result<(), Error> {
        self.dead_letter_found(name, reason, description, now, false, |s, q| {
            s.by_seq(q, seq)
        })
    }

    /// Dead-letters the main-queue message `find` names (after the reason
    /// and description are checked and the shard caught up to `now`), kept
    /// as a consumer's dead letter: a consumer's by receipt, an operator's
    /// by sequence number. A consumer's (`leased`) ends its lease as a
    /// failed attempt, kept in the message's history.
    pub(super) fn dead_letter_found(
        &mut self,
        name: &str,
        reason: String,
        description: String,
        now: u64,
        leased: bool,
        find: impl FnOnce(&Shard, SubId) -> Result<u32, Error>,
    ) -> Result<(), Error> {
        Shard::check_dead_letter_text(&reason, &description)?;
        self.catch_up(now);
        let qslot = self.queue_slot(name)?;
        let slot = find(self, self.sub_id(qslot, false))?;
        self.room_for_dead_letter_text(&reason, &description)?;
        let now = self.now;
        if leased {
            self.record_attempt(
                slot,
                AttemptEnd::DeadLettered,
                reason.clone(),
                description.clone(),
                now,
            );
        }
        self.dead_letter_slot(
            slot,
            DeadLetterReason::Consumer {
                reason,
                description,
            },
            now,
        );
        self.serve_gained();
        Ok(())
    }

    /// A dead letter's reason and description within their limits.
    pub(super) fn check_dead_letter_text(reason: &str, description: &str) -> Result<(), Error> {
        for (field, text, max) in [
            ("reason", reason, crate::limits::DEAD_LETTER_REASON_LEN_MAX),
            (
                "description",
                description,
                crate::limits::DEAD_LETTER_DESCRIPTION_LEN_MAX,
            ),
        ] {
            if text.len() > max {
                return Err(Error::invalid(
                    field,
                    format!("at most {max} bytes (got {})", text.len()),
                ));
            }
        }
        Ok(())
    }

    /// Room in the budget for a dead letter's reason and description:
    /// they are kept with it (counted when it is stored).
    pub(super) fn room_for_dead_letter_text(
        &mut self,
        reason: &str,
        description: &str,
    ) -> Result<(), Error> {
        let kept = DEAD_LETTER_OVERHEAD_BYTES + (reason.len() + description.len()) as u64;
        self.budget.reserve(kept)?;
        self.budget.release(kept);
        Ok(())
    }

    /// The queue's channels with messages ready to be delivered (the
    /// default channel first, whatever it holds; then named channels in
    /// name order after `after`), at most `limit`; and the name to pass as
    /// `after` for the next page when more remain. Each visit costs
    /// O(log channels) to find its start and O(1) a channel.
    pub fn channels(
        &mut self,
        name: &str,
        after: &str,
        limit: usize,
        now: u64,
    ) -> Result<(Vec<ChannelBacklog>, Option<String>), Error> {
        crate::error::check_range(
            "limit",
            limit as u64,
            1,
            crate::limits::CHANNELS_PAGE_MAX as u64,
            "",
        )?;
        self.catch_up(now);
        let qslot = self.queue_slot(name)?;
        let sub = self.sub(self.sub_id(qslot, false));
        let backlog = |c: &sub::Channel| ChannelBacklog {
            name: c.name.as_deref().map(str::to_owned),
            visible: c.visible.into(),
            held: c.held,
        };
        let mut page = Vec::with_capacity(limit.min(64));
        if after.is_empty() {
            page.push(backlog(&sub.channels[0]));
        }
        let mut named = sub
            .round_names
            .range::<str, _>((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded));
        let room = limit - page.len();
        for (_, &id) in named.by_ref().take(room) {
            page.push(backlog(&sub.channels[id as usize]));
        }
        let next = named.next().and(page.last()).and_then(|c| c.name.clone());
        Ok((page, next))
    }
}
