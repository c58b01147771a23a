//! The move tasks' calls of the blocking [`Client`]: redrive, preview,
//! start, list, cancel.

use super::Client;
use crate::call;
use crate::*;

impl Client {
    /// Moves dead letters back: (moved now, scheduled at the rate).
    pub fn redrive(
        &mut self,
        queue: &str,
        max: Option<u64>,
        rate_per_second: Option<u32>,
    ) -> Result<(u64, u64)> {
        self.run(call::redrive(
            queue,
            max,
            rate_per_second,
            &MoveFilter::default(),
        ))
    }

    /// [`Self::redrive`] of only the dead letters `filter` takes (protocol
    /// version 6): `scheduled` counts every visible dead letter left, at
    /// most `max`, matching or not.
    pub fn redrive_where(
        &mut self,
        queue: &str,
        max: Option<u64>,
        rate_per_second: Option<u32>,
        filter: &MoveFilter,
    ) -> Result<(u64, u64)> {
        self.run(call::redrive(queue, max, rate_per_second, filter))
    }

    /// What a redrive (`dlq`) or a move to `to` (`None`: back to each
    /// message's source) with `filter` would take, looking from sequence
    /// number `from_seq` at 10 000 entries at most: go on from `next`
    /// while it is given to count a longer queue. Moves nothing; needs
    /// receive (it shows messages).
    pub fn preview_move(
        &mut self,
        queue: &str,
        dlq: bool,
        to: Option<&str>,
        filter: &MoveFilter,
        from_seq: u64,
    ) -> Result<MovePreview> {
        self.run(call::preview_move(queue, dlq, to, filter, from_seq))
    }

    /// Starts moving a queue's visible messages out (a move task): to
    /// `to`, or each back to the queue it was dead-lettered from.
    pub fn start_move(
        &mut self,
        queue: &str,
        to: Option<&str>,
        max: Option<u64>,
        rate_per_second: Option<u32>,
    ) -> Result<MoveInfo> {
        self.run(call::start_move(
            queue,
            to,
            max,
            rate_per_second,
            &MoveFilter::default(),
        ))
    }

    /// [`Self::start_move`] of only the messages `filter` takes (protocol
    /// version 6).
    pub fn start_move_where(
        &mut self,
        queue: &str,
        to: Option<&str>,
        max: Option<u64>,
        rate_per_second: Option<u32>,
        filter: &MoveFilter,
    ) -> Result<MoveInfo> {
        self.run(call::start_move(queue, to, max, rate_per_second, filter))
    }

    /// A queue's move tasks (redrives included), oldest first.
    pub fn list_moves(&mut self, queue: &str) -> Result<Vec<MoveInfo>> {
        self.run(call::list_moves(queue))
    }

    /// Cancels a running move task; answers it as it now is.
    pub fn cancel_move(&mut self, queue: &str, id: u64) -> Result<MoveInfo> {
        self.run(call::cancel_move(queue, id))
    }
}
