//! A queue's retry policy: how long a message whose lease ended without a
//! delete waits before it is visible again.
//!
//! The delay is a function of the queue's settings, the message's
//! sequence number and its delivery count only — no clock, no randomness
//! — so an engine rebuilt from its log (a restart, a cluster's new
//! leader) gives a lease that ended the same delay the engine that saw it
//! end gave: `visible again = lease's end + retry_delay(count, seq)`.

use crate::error::{check_range, Error};
use crate::limits::*;
use crate::settings::QueueSettings;

impl QueueSettings {
    /// Whether a lease that ends without a delete waits before the
    /// message is visible again.
    pub fn retries_later(&self) -> bool {
        self.retry_initial_ms > 0
    }

    /// How long message `seq` waits after its `count`-th delivery's lease
    /// ended without a delete (`None`: the policy is off, visible at
    /// once). The `n`-th delivery waits `retry_initial_ms ×
    /// (retry_multiplier_pct / 100)^(n − 1)`, at most `retry_max_ms`,
    /// less up to `retry_jitter_pct` percent of that drawn from `seq` and
    /// `count`.
    pub fn retry_delay(&self, count: u32, seq: u64) -> Option<u64> {
        if !self.retries_later() {
            return None;
        }
        let max = self.retry_max_ms.max(self.retry_initial_ms);
        // In millionths of a millisecond, so that a small delay grows by
        // a small multiplier too.
        const FINE: u128 = 1_000_000;
        let cap = u128::from(max) * FINE;
        let mut delay = u128::from(self.retry_initial_ms) * FINE;
        if self.retry_multiplier_pct > RETRY_MULTIPLIER_PCT_MIN {
            // At most log(12 h) / log(1.01) ≈ 1 800 steps before the cap.
            for _ in 1..count.max(1) {
                delay = delay * u128::from(self.retry_multiplier_pct) / 100;
                if delay >= cap {
                    break;
                }
            }
        }
        let delay = u64::try_from(delay.min(cap) / FINE).unwrap_or(max);
        let off =
            u128::from(delay) * u128::from(self.retry_jitter_pct) * u128::from(draw(seq, count))
                / (100 * u128::from(DRAWS));
        Some(delay - u64::try_from(off).unwrap_or(0).min(delay))
    }

    /// Checks the retry policy's fields against their ranges.
    pub(crate) fn validate_retry(&self) -> Result<(), Error> {
        check_range(
            "retry_initial_ms",
            self.retry_initial_ms,
            0,
            RETRY_MS_MAX,
            " ms",
        )?;
        check_range(
            "retry_multiplier_pct",
            self.retry_multiplier_pct.into(),
            RETRY_MULTIPLIER_PCT_MIN.into(),
            RETRY_MULTIPLIER_PCT_MAX.into(),
            " %",
        )?;
        check_range("retry_max_ms", self.retry_max_ms, 1, RETRY_MS_MAX, " ms")?;
        if self.retry_max_ms < self.retry_initial_ms {
            return Err(Error::invalid(
                "retry_max_ms",
                format!(
                    "must be at least retry_initial_ms ({} ms; got {} ms)",
                    self.retry_initial_ms, self.retry_max_ms
                ),
            ));
        }
        check_range(
            "retry_jitter_pct",
            self.retry_jitter_pct.into(),
            0,
            100,
            " %",
        )
    }
}

/// The draws [`draw`] makes: 0 ..= `DRAWS`.
const DRAWS: u64 = 1 << 16;

/// A number in 0 ..= [`DRAWS`] drawn from `seq` and `count` alone
/// (splitmix64's finalizer), spread evenly over the messages of a queue.
fn draw(seq: u64, count: u32) -> u64 {
    let mut z = seq ^ (u64::from(count) << 40) ^ 0x9E37_79B9_7F4A_7C15;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    z % (DRAWS + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(initial: u64, pct: u32, max: u64, jitter: u8) -> QueueSettings {
        QueueSettings {
            retry_initial_ms: initial,
            retry_multiplier_pct: pct,
            retry_max_ms: max,
            retry_jitter_pct: jitter,
            ..QueueSettings::default()
        }
    }

    #[test]
    fn off_by_default() {
        let s = QueueSettings::default();
        assert!(!s.retries_later());
        assert_eq!(s.retry_delay(3, 7), None);
        s.validate().unwrap();
    }

    #[test]
    fn delays_grow_by_the_multiplier_up_to_the_cap() {
        let s = policy(1_000, 200, 10_000, 0);
        let delays: Vec<u64> = (1..=6).map(|n| s.retry_delay(n, 1).unwrap()).collect();
        assert_eq!(delays, [1_000, 2_000, 4_000, 8_000, 10_000, 10_000]);
        let s = policy(1_000, 150, 60_000, 0);
        assert_eq!(s.retry_delay(3, 1), Some(2_250));
        // A multiplier of 1: every retry waits the first delay.
        let s = policy(500, 100, 500, 0);
        assert_eq!(s.retry_delay(900, 1), Some(500));
    }

    #[test]
    fn the_highest_counts_stay_at_the_cap() {
        let s = policy(1, 101, RETRY_MS_MAX, 0);
        assert_eq!(
            s.retry_delay(crate::lease::DELIVERY_COUNT_MAX, 1),
            Some(RETRY_MS_MAX)
        );
        let s = policy(RETRY_MS_MAX, 1_000, RETRY_MS_MAX, 0);
        assert_eq!(s.retry_delay(u32::MAX, u64::MAX), Some(RETRY_MS_MAX));
    }

    #[test]
    fn jitter_takes_off_at_most_its_share_and_spreads_the_messages() {
        let s = policy(10_000, 200, 10_000, 50);
        let delays: Vec<u64> = (0..1_000)
            .map(|seq| s.retry_delay(1, seq).unwrap())
            .collect();
        assert!(delays.iter().all(|d| (5_000..=10_000).contains(d)));
        let distinct: std::collections::BTreeSet<u64> = delays.iter().copied().collect();
        assert!(distinct.len() > 900, "{} distinct delays", distinct.len());
        let below_mid = delays.iter().filter(|d| **d < 7_500).count();
        assert!(
            (400..600).contains(&below_mid),
            "{below_mid} of 1000 below the middle"
        );
        // The same message and count, the same delay (a rebuilt engine's).
        assert_eq!(s.retry_delay(4, 77), s.retry_delay(4, 77));
    }

    #[test]
    fn out_of_range_policies_are_refused_by_name() {
        let refused = |s: QueueSettings| s.validate().unwrap_err().to_string();
        assert!(
            refused(policy(RETRY_MS_MAX + 1, 200, RETRY_MS_MAX, 0)).contains("retry_initial_ms")
        );
        assert!(refused(policy(1_000, 99, 10_000, 0)).contains("retry_multiplier_pct"));
        assert!(refused(policy(1_000, 1_001, 10_000, 0)).contains("retry_multiplier_pct"));
        assert!(refused(policy(20_000, 200, 10_000, 0)).contains("retry_max_ms"));
        assert!(refused(policy(1_000, 200, 10_000, 101)).contains("retry_jitter_pct"));
        policy(20_000, 200, 20_000, 100).validate().unwrap();
    }
}
