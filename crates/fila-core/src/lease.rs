//! The per-message state word: state, lease generation and delivery count in
//! one `u64`, changed only by the transitions below (pure functions of the
//! word).
//!
//! ```text
//!  63                              24 23                  4 3      0
//! +----------------------------------+---------------------+--------+
//! |        generation (40 bits)      | delivery count (20) | state  |
//! +----------------------------------+---------------------+--------+
//! ```
//!
//! A lease is named by the generation that the delivery produced. Every
//! transition that ends a lease (delete, expiry, release, defer, dead-letter)
//! bumps the generation, so a receipt that carries an older generation can
//! never be honoured again: of two operations on the same delivery, the
//! first one the shard runs wins and the other learns `Stale`. The
//! generation of a slot survives the slot being freed and reused, so a
//! receipt of a deleted message can never name the message that reuses its
//! slot.
//!
//! Plain data (a `Cell`): a shard is touched by one thread at a time (its
//! owning event loop in a server, its mutex in the in-process engine), so
//! the word needs no atomics; it was an `AtomicU64` changed by
//! compare-and-swap while several threads could reach a shard.
//! `tests/races.rs` still races operations on the same leases from real
//! threads through the in-process engine.

use std::cell::Cell;

const STATE_BITS: u32 = 4;
const COUNT_BITS: u32 = 20;
const STATE_MASK: u64 = (1 << STATE_BITS) - 1;
const COUNT_SHIFT: u32 = STATE_BITS;
const COUNT_MASK: u64 = ((1 << COUNT_BITS) - 1) << COUNT_SHIFT;
const GEN_SHIFT: u32 = STATE_BITS + COUNT_BITS;

/// The largest delivery count the word can hold; further deliveries saturate.
pub const DELIVERY_COUNT_MAX: u32 = (1 << COUNT_BITS) - 1;
/// Generations wrap after this many lease transitions of one slot.
pub const GENERATION_MASK: u64 = (1 << (64 - GEN_SHIFT)) - 1;

/// Where a message is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MessageState {
    /// The slot holds no message.
    Free = 0,
    /// In a ready ring, waiting for a receive.
    Visible = 1,
    /// Leased to a consumer until its next-visible time.
    InFlight = 2,
    /// Delayed or scheduled: becomes visible at its next-visible time.
    Delayed = 3,
    /// Deferred: only a receive-deferred by sequence number can take it.
    Deferred = 4,
}

impl MessageState {
    fn from_bits(bits: u64) -> MessageState {
        match bits {
            1 => MessageState::Visible,
            2 => MessageState::InFlight,
            3 => MessageState::Delayed,
            4 => MessageState::Deferred,
            _ => MessageState::Free,
        }
    }
}

/// A decoded copy of a state word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Word {
    /// The message's state.
    pub state: MessageState,
    /// Deliveries so far (saturating at [`DELIVERY_COUNT_MAX`]).
    pub delivery_count: u32,
    /// The lease generation (40 bits).
    pub generation: u64,
}

impl Word {
    fn pack(self) -> u64 {
        (self.state as u64)
            | ((self.delivery_count as u64) << COUNT_SHIFT)
            | ((self.generation & GENERATION_MASK) << GEN_SHIFT)
    }

    fn unpack(raw: u64) -> Word {
        Word {
            state: MessageState::from_bits(raw & STATE_MASK),
            delivery_count: ((raw & COUNT_MASK) >> COUNT_SHIFT) as u32,
            generation: raw >> GEN_SHIFT,
        }
    }

    fn next_generation(self) -> u64 {
        (self.generation + 1) & GENERATION_MASK
    }
}

/// Why a transition was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The receipt's lease is over (or never was this slot's lease).
    Stale,
    /// The message is not in a state the transition starts from.
    WrongState(MessageState),
}

/// How a lease ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseEnd {
    /// Deleted by its consumer: the slot becomes free.
    Delete,
    /// Released (visibility 0) or expired: visible again.
    Release,
    /// Deferred by its consumer.
    Defer,
    /// Dead-lettered, or expired with nowhere to go: the slot leaves this
    /// queue (it is freed, or re-enters as a visible dead letter).
    Remove,
}

/// The state word of one message slot.
#[derive(Debug)]
pub struct StateWord(Cell<u64>);

impl Default for StateWord {
    fn default() -> Self {
        StateWord::new()
    }
}

impl StateWord {
    /// A free slot at generation 0.
    pub fn new() -> StateWord {
        StateWord(Cell::new(0))
    }

    /// A free slot whose next lease generations start above `generation`
    /// (a slot re-created after the slab was trimmed never repeats a
    /// generation an earlier receipt for that slot may hold).
    pub fn free_at(generation: u64) -> StateWord {
        StateWord(Cell::new(
            Word {
                state: MessageState::Free,
                delivery_count: 0,
                generation,
            }
            .pack(),
        ))
    }

    /// The current word.
    pub fn load(&self) -> Word {
        Word::unpack(self.0.get())
    }

    fn update(
        &self,
        f: impl FnOnce(Word) -> Result<Word, Refused>,
    ) -> Result<(Word, Word), Refused> {
        let old = Word::unpack(self.0.get());
        let new = f(old)?;
        self.0.set(new.pack());
        Ok((old, new))
    }

    /// Occupies a free slot with a new message in `state` (visible, delayed)
    /// and delivery count `count`. The generation is kept from the slot's past.
    pub fn occupy(&self, state: MessageState, count: u32) -> Result<Word, Refused> {
        self.update(|w| match w.state {
            MessageState::Free => Ok(Word {
                state,
                delivery_count: count,
                generation: w.generation,
            }),
            other => Err(Refused::WrongState(other)),
        })
        .map(|(_, new)| new)
    }

    /// Delivers a message that is `from` (visible or deferred): the delivery
    /// count grows by one and a new generation names the lease. With
    /// `keep_visible` (a receive with visibility 0) the lease ends at once:
    /// the message stays visible under a generation that no receipt holds.
    ///
    /// Returns the new word; its generation is the receipt's.
    pub fn deliver(&self, from: MessageState, keep_visible: bool) -> Result<Word, Refused> {
        self.update(|w| {
            if w.state != from {
                return Err(Refused::WrongState(w.state));
            }
            let delivery_count = (w.delivery_count + 1).min(DELIVERY_COUNT_MAX);
            let generation = w.next_generation();
            let state = if keep_visible {
                MessageState::Visible
            } else {
                MessageState::InFlight
            };
            Ok(Word {
                state,
                delivery_count,
                generation,
            })
        })
        .map(|(_, new)| new)
    }

    /// Confirms that the lease `generation` is still held, without changing
    /// it (the linearization point of an update-visibility that extends it).
    pub fn hold(&self, generation: u64) -> Result<Word, Refused> {
        self.update(|w| {
            if w.state == MessageState::InFlight && w.generation == generation {
                Ok(w)
            } else {
                Err(Refused::Stale)
            }
        })
        .map(|(_, new)| new)
    }

    /// Renews the lease `generation` under the next generation, its
    /// delivery count kept: a new receipt names it and the old one is
    /// stale (an update of a leased message that hands out a new receipt).
    pub fn renew(&self, generation: u64) -> Result<Word, Refused> {
        self.update(|w| {
            if w.state != MessageState::InFlight || w.generation != generation {
                return Err(Refused::Stale);
            }
            Ok(Word {
                generation: w.next_generation(),
                ..w
            })
        })
        .map(|(_, new)| new)
    }

    /// Ends the lease `generation` the way `end` says. Exactly one caller can
    /// end a given lease; every other gets `Stale`.
    pub fn end_lease(&self, generation: u64, end: LeaseEnd) -> Result<Word, Refused> {
        self.update(|w| {
            if w.state != MessageState::InFlight || w.generation != generation {
                return Err(Refused::Stale);
            }
            Ok(Word {
                state: match end {
                    LeaseEnd::Delete | LeaseEnd::Remove => MessageState::Free,
                    LeaseEnd::Release => MessageState::Visible,
                    LeaseEnd::Defer => MessageState::Deferred,
                },
                delivery_count: w.delivery_count,
                generation: w.next_generation(),
            })
        })
        .map(|(_, new)| new)
    }

    /// Moves a message that is not leased from `from` to `to` (a delay that
    /// ends, a dead letter entering its DLQ). Bumps the generation.
    pub fn shift(&self, from: MessageState, to: MessageState) -> Result<Word, Refused> {
        self.update(|w| {
            if w.state != from {
                return Err(Refused::WrongState(w.state));
            }
            Ok(Word {
                state: to,
                delivery_count: w.delivery_count,
                generation: w.next_generation(),
            })
        })
        .map(|(_, new)| new)
    }

    /// Frees the slot whatever its state (purge, queue delete, expiry),
    /// bumping the generation so every receipt for it goes stale.
    pub fn free(&self) -> Word {
        self.update(|w| {
            Ok(Word {
                state: MessageState::Free,
                delivery_count: 0,
                generation: w.next_generation(),
            })
        })
        .map(|(_, new)| new)
        .unwrap_or_else(|_| unreachable!("free accepts every state"))
    }

    /// Sets the delivery count (a redrive resets it to 0).
    pub fn set_delivery_count(&self, count: u32) -> Word {
        self.update(|w| {
            Ok(Word {
                delivery_count: count.min(DELIVERY_COUNT_MAX),
                ..w
            })
        })
        .map(|(_, new)| new)
        .unwrap_or_else(|_| unreachable!("infallible"))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn packs_and_unpacks() {
        let w = Word {
            state: MessageState::Deferred,
            delivery_count: 777,
            generation: GENERATION_MASK,
        };
        assert_eq!(Word::unpack(w.pack()), w);
    }

    #[test]
    fn receipt_of_an_ended_lease_is_stale() {
        let s = StateWord::new();
        s.occupy(MessageState::Visible, 0).unwrap();
        let lease = s.deliver(MessageState::Visible, false).unwrap();
        assert_eq!(lease.delivery_count, 1);
        s.end_lease(lease.generation, LeaseEnd::Release).unwrap();
        assert_eq!(
            s.end_lease(lease.generation, LeaseEnd::Delete),
            Err(Refused::Stale)
        );
        assert_eq!(s.hold(lease.generation), Err(Refused::Stale));
    }

    #[test]
    fn visibility_zero_delivery_counts_but_names_no_lease() {
        let s = StateWord::new();
        s.occupy(MessageState::Visible, 0).unwrap();
        let w = s.deliver(MessageState::Visible, true).unwrap();
        assert_eq!(w.state, MessageState::Visible);
        assert_eq!(w.delivery_count, 1);
        assert_eq!(s.hold(w.generation), Err(Refused::Stale));
    }

    #[test]
    fn a_reused_slot_never_honours_an_old_receipt() {
        let s = StateWord::new();
        s.occupy(MessageState::Visible, 0).unwrap();
        let lease = s.deliver(MessageState::Visible, false).unwrap();
        s.end_lease(lease.generation, LeaseEnd::Delete).unwrap();
        s.occupy(MessageState::Visible, 0).unwrap();
        let next = s.deliver(MessageState::Visible, false).unwrap();
        assert_ne!(next.generation, lease.generation);
        assert_eq!(
            s.end_lease(lease.generation, LeaseEnd::Delete),
            Err(Refused::Stale)
        );
        assert!(s.end_lease(next.generation, LeaseEnd::Delete).is_ok());
    }

    #[test]
    fn a_renewed_lease_has_a_new_generation_and_the_old_one_is_stale() {
        let w = StateWord::new();
        w.occupy(MessageState::Visible, 0).unwrap();
        let leased = w.deliver(MessageState::Visible, false).unwrap();
        let renewed = w.renew(leased.generation).unwrap();
        assert_ne!(renewed.generation, leased.generation);
        assert_eq!(renewed.delivery_count, leased.delivery_count);
        assert_eq!(renewed.state, MessageState::InFlight);
        assert_eq!(w.renew(leased.generation), Err(Refused::Stale));
        assert_eq!(w.hold(leased.generation), Err(Refused::Stale));
        assert!(w.hold(renewed.generation).is_ok());
        w.end_lease(renewed.generation, LeaseEnd::Release).unwrap();
        assert_eq!(w.renew(renewed.generation), Err(Refused::Stale));
    }

    #[test]
    fn delivery_count_saturates() {
        let s = StateWord::new();
        s.occupy(MessageState::Visible, DELIVERY_COUNT_MAX).unwrap();
        let w = s.deliver(MessageState::Visible, true).unwrap();
        assert_eq!(w.delivery_count, DELIVERY_COUNT_MAX);
    }
}
