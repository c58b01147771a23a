//! Whether a loop with nothing to do polls a little before it blocks.
//!
//! A loop that blocks in `epoll_wait` is put to sleep and woken by the
//! next request: on a virtual machine with few cores both the sleep and
//! the wake-up cost more than a lone request's whole work (the profile in
//! docs/benchmarks.md, "A lone request's round trip"). A client with one
//! request in flight sends its next one a few microseconds after its
//! answer, so a loop whose waits have all been that short polls without
//! blocking for up to [`SPIN_WINDOW`] first. One wait that was longer
//! stops it until [`QUICK_IN_A_ROW`] short ones in a row have come again,
//! so a loop that serves requests spread out in time (a fixed rate, an
//! idle server) blocks at once and spends nothing on polling.

use std::time::Duration;

/// How long a loop polls before it blocks, when it does.
pub const SPIN_WINDOW: Duration = Duration::from_micros(30);

/// Waits in a row that ended within [`SPIN_WINDOW`] before a loop polls
/// before blocking.
pub const QUICK_IN_A_ROW: u32 = 8;

/// The record of a loop's last waits for work.
#[derive(Debug, Default)]
pub(super) struct Spin {
    /// Waits in a row that ended within the window (at most
    /// [`QUICK_IN_A_ROW`]).
    quick: u32,
}

impl Spin {
    /// How long to poll before blocking in the next wait (zero: block at
    /// once).
    pub(super) fn window(&self) -> Duration {
        if self.quick >= QUICK_IN_A_ROW {
            SPIN_WINDOW
        } else {
            Duration::ZERO
        }
    }

    /// Notes how long a wait for work lasted, polling and blocking.
    pub(super) fn waited(&mut self, took: Duration) {
        self.quick = if took <= SPIN_WINDOW {
            (self.quick + 1).min(QUICK_IN_A_ROW)
        } else {
            0
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUICK: Duration = Duration::from_micros(5);
    const SLOW: Duration = Duration::from_micros(500);

    #[test]
    fn a_loop_polls_only_after_enough_quick_waits_in_a_row() {
        let mut s = Spin::default();
        for _ in 1..QUICK_IN_A_ROW {
            s.waited(QUICK);
            assert_eq!(s.window(), Duration::ZERO);
        }
        s.waited(QUICK);
        assert_eq!(s.window(), SPIN_WINDOW);
        // More quick waits keep it there; the count does not grow past
        // what it needs.
        for _ in 0..100 {
            s.waited(QUICK);
        }
        assert_eq!(s.quick, QUICK_IN_A_ROW);
        assert_eq!(s.window(), SPIN_WINDOW);
    }

    #[test]
    fn one_long_wait_stops_the_polling_until_quick_ones_come_again() {
        let mut s = Spin::default();
        for _ in 0..QUICK_IN_A_ROW {
            s.waited(QUICK);
        }
        s.waited(SLOW);
        assert_eq!(s.window(), Duration::ZERO);
        // Waits spread out in time, a few quick among them, never poll.
        for i in 0..1_000 {
            s.waited(if i % 4 == 3 { SLOW } else { QUICK });
            assert_eq!(s.window(), Duration::ZERO);
        }
    }

    #[test]
    fn a_wait_of_exactly_the_window_counts_as_quick() {
        let mut s = Spin::default();
        for _ in 0..QUICK_IN_A_ROW {
            s.waited(SPIN_WINDOW);
        }
        assert_eq!(s.window(), SPIN_WINDOW);
        s.waited(SPIN_WINDOW + Duration::from_nanos(1));
        assert_eq!(s.window(), Duration::ZERO);
    }
}
