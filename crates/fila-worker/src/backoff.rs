//! The polling back-off of the Azure queue trigger: 100 ms after a poll
//! that found messages, about 200 ms after the first empty or failed one,
//! then twice as long each time (randomized ±20 %), up to the maximum
//! polling interval.

use std::time::Duration;

/// The delay before the first retry after an empty or failed poll.
pub const FIRST_DELAY: Duration = Duration::from_millis(200);
/// The delay after a poll that found messages.
pub const FOUND_DELAY: Duration = Duration::from_millis(100);

/// A small seeded random source (xorshift64*): enough for jitter, and
/// reproducible in tests.
#[derive(Clone, Debug)]
pub struct Jitter(u64);

impl Jitter {
    /// A source from `seed` (0 is replaced by a fixed odd constant).
    pub fn new(seed: u64) -> Jitter {
        Jitter(if seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            seed
        })
    }

    /// A source seeded from the clock and the process.
    pub fn from_time() -> Jitter {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Jitter::new(t ^ (u64::from(std::process::id()) << 32))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The back-off state of one poller.
#[derive(Clone, Debug)]
pub struct Backoff {
    max: Duration,
    /// The un-jittered delay of the last empty or failed poll (zero after
    /// a poll that found messages).
    current: Duration,
    jitter: Jitter,
}

impl Backoff {
    /// A back-off growing to `max`.
    pub fn new(max: Duration, jitter: Jitter) -> Backoff {
        Backoff {
            max: max.max(FOUND_DELAY),
            current: Duration::ZERO,
            jitter,
        }
    }

    /// The delay after a poll that found messages: 100 ms, and the next
    /// empty poll starts again at about 200 ms.
    pub fn found(&mut self) -> Duration {
        self.current = Duration::ZERO;
        FOUND_DELAY.min(self.max)
    }

    /// Starts the sequence again (a poll succeeded), without a delay.
    pub fn reset(&mut self) {
        self.current = Duration::ZERO;
    }

    /// The delay after an empty or failed poll: about 200 ms the first
    /// time, then about twice the last, never past the maximum.
    pub fn empty(&mut self) -> Duration {
        self.current = if self.current.is_zero() {
            FIRST_DELAY
        } else {
            self.current.saturating_mul(2)
        }
        .min(self.max);
        // ±20 %, so many workers do not poll in step.
        let factor = 0.8 + 0.4 * self.jitter.next_f64();
        self.current.mul_f64(factor).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_starts_near_200_ms_doubles_to_the_maximum_and_resets_on_a_find() {
        let mut b = Backoff::new(Duration::from_secs(2), Jitter::new(7));
        let ms: Vec<u128> = (0..8).map(|_| b.empty().as_millis()).collect();
        let nominal = [200, 400, 800, 1600, 2000, 2000, 2000, 2000];
        for (got, want) in ms.iter().zip(nominal) {
            let (got, want) = (*got as f64, want as f64);
            assert!(
                got >= want * 0.8 - 1.0 && got <= (want * 1.2).min(2000.0),
                "{ms:?}"
            );
        }
        // The jitter is seeded: the same seed, the same sequence.
        let mut again = Backoff::new(Duration::from_secs(2), Jitter::new(7));
        assert_eq!(
            ms,
            (0..8)
                .map(|_| again.empty().as_millis())
                .collect::<Vec<_>>()
        );
        assert_eq!(b.found(), Duration::from_millis(100));
        let first = b.empty().as_millis();
        assert!((160..=240).contains(&first), "{first}");
        b.empty();
        b.reset();
        let again = b.empty().as_millis();
        assert!((160..=240).contains(&again), "{again}");
    }

    #[test]
    fn the_jitter_is_spread_evenly_over_zero_to_one() {
        let mut j = Jitter::new(1);
        let xs: Vec<f64> = (0..1000).map(|_| j.next_f64()).collect();
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((0.4..0.6).contains(&mean), "{mean}");
    }
}
