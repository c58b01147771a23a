//! The move tasks' calls of an [`Owner`]: redrive, start, preview, cancel,
//! list.

use super::Owner;
use crate::error::Error;
use crate::types::*;

impl Owner {
    /// Moves dead letters back to their queue (see
    /// [`crate::Engine::redrive`]).
    pub fn redrive(
        &mut self,
        name: &str,
        max: Option<u64>,
        rate_per_second: Option<u32>,
        filter: Option<MoveFilter>,
    ) -> Result<RedriveOutcome, Error> {
        self.on(name, |s, now| {
            s.redrive(name, max, rate_per_second, filter, now)
        })
    }

    /// Starts a move task out of queue `name` (see
    /// [`crate::Engine::start_move`]).
    pub fn start_move(
        &mut self,
        name: &str,
        to: Option<String>,
        max: Option<u64>,
        rate_per_second: Option<u32>,
        filter: Option<MoveFilter>,
    ) -> Result<MoveTask, Error> {
        self.on(name, |s, now| {
            s.start_move(name, to, max, rate_per_second, filter, now)
        })
    }

    /// What a move would take (see [`crate::Engine::preview_move`]).
    pub fn preview_move(
        &mut self,
        name: &str,
        dlq: bool,
        back_to_source: bool,
        filter: &MoveFilter,
        from_seq: u64,
    ) -> Result<MovePreview, Error> {
        self.on(name, |s, now| {
            s.preview_move(name, dlq, back_to_source, filter, from_seq, now)
        })
    }

    /// Cancels a move task (see [`crate::Engine::cancel_move`]).
    pub fn cancel_move(&mut self, name: &str, id: u64) -> Result<MoveTask, Error> {
        self.on(name, |s, now| s.cancel_move(name, id, now))
    }

    /// A queue's move tasks, oldest first.
    pub fn moves(&mut self, name: &str) -> Result<Vec<MoveTask>, Error> {
        self.on(name, |s, _| s.moves(name))
    }
}
