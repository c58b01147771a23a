//! Time, passed in: the engine reads milliseconds since the Unix epoch from a
//! [`Clock`], so tests drive a [`ManualClock`] by hand and never sleep.
//!
//! [`SystemClock`] is monotonic: it reads the wall clock once, at first use,
//! and moves on by the operating system's monotonic clock from there. Leases,
//! delays and long-poll deadlines therefore never freeze or jump when the
//! wall clock is stepped; the timestamps users see are that anchor plus the
//! monotonic time since.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A source of wall-clock time in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time.
    fn now_ms(&self) -> u64;
}

/// The operating system's clock, made monotonic: the wall time read at first
/// use plus the monotonic time elapsed since.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

fn anchor() -> &'static (std::time::Instant, u64) {
    static ANCHOR: std::sync::OnceLock<(std::time::Instant, u64)> = std::sync::OnceLock::new();
    ANCHOR.get_or_init(|| (std::time::Instant::now(), wall_ms()))
}

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        let (at, wall) = anchor();
        wall + at.elapsed().as_millis() as u64
    }
}

/// A clock that moves only when told to. Clones share the same time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock reading `now_ms`.
    pub fn new(now_ms: u64) -> ManualClock {
        ManualClock(Arc::new(AtomicU64::new(now_ms)))
    }

    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock (it may not go backwards).
    pub fn set(&self, now_ms: u64) {
        self.0.fetch_max(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_clock_follows_the_monotonic_clock_from_its_anchor() {
        let c = SystemClock;
        let first = c.now_ms();
        let (at, wall) = anchor();
        let second = c.now_ms();
        let elapsed = at.elapsed().as_millis() as u64;
        assert!(first <= second);
        // Whatever the wall clock does after the anchor, readings are the
        // anchor plus monotonic time, never the wall clock read again.
        assert!(second >= *wall && second <= wall + elapsed);
    }
}
