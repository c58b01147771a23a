//! Failed authentications per peer address, so a client cannot guess
//! tokens by reconnecting: a bounded table owned by one thread (the
//! accepting event loop for the binary protocol; the metrics thread for
//! its endpoint), no lock.
//!
//! A peer (an IPv4 address, or an IPv6 /64: one host holds a whole /64)
//! may fail [`FREE_FAILURES`] times; each failure after that blocks it for
//! [`BLOCK_FIRST`], doubling with every further failure up to
//! [`BLOCK_MAX`]. A blocked peer's new connections are refused at once
//! with the time left. A peer is forgotten [`FORGET_AFTER`] after its last
//! failure; a success does not clear its count (one valid low-grant token
//! must not buy more guesses at another). The table holds at most
//! [`PEERS_MAX`] peers; past that the oldest entry makes room.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Failures a peer may have before it is blocked.
pub const FREE_FAILURES: u32 = 10;
/// The first block.
pub const BLOCK_FIRST: Duration = Duration::from_secs(1);
/// The longest block.
pub const BLOCK_MAX: Duration = Duration::from_secs(300);
/// A peer with no failure for this long is forgotten.
pub const FORGET_AFTER: Duration = Duration::from_secs(600);
/// Peers the table holds at most (about 64 bytes each).
pub const PEERS_MAX: usize = 65_536;

#[derive(Clone, Copy, Debug)]
struct Entry {
    failures: u32,
    /// When it entered the table (its place in the order).
    entered: Instant,
    last: Instant,
    blocked_until: Option<Instant>,
}

/// The table (see the module docs).
#[derive(Debug)]
pub struct AuthGuard {
    peers: HashMap<IpAddr, Entry>,
    /// Peers in the order they entered the table (an entry may be stale:
    /// its peer was forgotten, or forgotten and entered again later).
    order: VecDeque<(IpAddr, Instant)>,
    max: usize,
}

impl Default for AuthGuard {
    fn default() -> Self {
        AuthGuard::with_capacity(PEERS_MAX)
    }
}

/// What the table keys a peer by: its IPv4 address, or its IPv6 /64.
fn key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

impl AuthGuard {
    /// A table of at most `max` peers.
    pub fn with_capacity(max: usize) -> AuthGuard {
        AuthGuard {
            peers: HashMap::new(),
            order: VecDeque::new(),
            max: max.max(1),
        }
    }

    /// How long `ip` is still blocked at `now`, if it is.
    pub fn blocked(&mut self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let e = self.peers.get(&key(ip))?;
        let until = e.blocked_until?;
        (until > now).then(|| until - now)
    }

    /// Notes a failed authentication from `ip` at `now`; answers how long
    /// it is now blocked, if it is.
    pub fn failed(&mut self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let k = key(ip);
        let known = self
            .peers
            .get(&k)
            .is_some_and(|e| now.saturating_duration_since(e.last) < FORGET_AFTER);
        if !known {
            self.peers.remove(&k);
            self.make_room(now);
            self.order.push_back((k, now));
            self.peers.insert(
                k,
                Entry {
                    failures: 0,
                    entered: now,
                    last: now,
                    blocked_until: None,
                },
            );
        }
        let e = self.peers.get_mut(&k).expect("just made");
        e.failures = e.failures.saturating_add(1);
        e.last = now;
        if e.failures > FREE_FAILURES {
            let doublings = (e.failures - FREE_FAILURES - 1).min(20);
            let block = BLOCK_FIRST.saturating_mul(1 << doublings).min(BLOCK_MAX);
            e.blocked_until = Some(now + block);
            return Some(block);
        }
        None
    }

    /// Peers held now.
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// Whether no peer is held.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// Drops forgotten peers (and order entries of peers that entered
    /// again since) from the front; while the table is full, the oldest
    /// peer goes too.
    fn make_room(&mut self, now: Instant) {
        while let Some(&(ip, entered)) = self.order.front() {
            let drop_peer = match self.peers.get(&ip) {
                Some(e) if e.entered == entered => {
                    now.saturating_duration_since(e.last) >= FORGET_AFTER
                        || self.peers.len() >= self.max
                }
                // Gone already, or entered again later: a stale entry.
                _ => {
                    self.order.pop_front();
                    continue;
                }
            };
            if !drop_peer {
                return;
            }
            self.order.pop_front();
            self.peers.remove(&ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_peer_is_blocked_after_its_free_failures_and_each_block_doubles() {
        let mut g = AuthGuard::default();
        let t0 = Instant::now();
        for _ in 0..FREE_FAILURES {
            assert_eq!(g.failed(ip("10.0.0.1"), t0), None);
        }
        assert_eq!(g.blocked(ip("10.0.0.1"), t0), None);
        assert_eq!(g.failed(ip("10.0.0.1"), t0), Some(BLOCK_FIRST));
        assert_eq!(g.blocked(ip("10.0.0.1"), t0), Some(BLOCK_FIRST));
        assert_eq!(g.blocked(ip("10.0.0.2"), t0), None, "another peer");
        let t1 = t0 + BLOCK_FIRST;
        assert_eq!(g.blocked(ip("10.0.0.1"), t1), None, "the block ended");
        assert_eq!(g.failed(ip("10.0.0.1"), t1), Some(2 * BLOCK_FIRST));
        let mut t = t1;
        for _ in 0..30 {
            t += BLOCK_MAX;
            g.failed(ip("10.0.0.1"), t);
        }
        assert_eq!(g.blocked(ip("10.0.0.1"), t), Some(BLOCK_MAX), "capped");
        // Forgotten after a quiet while.
        let later = t + FORGET_AFTER;
        assert_eq!(g.failed(ip("10.0.0.1"), later), None);
    }

    #[test]
    fn an_ipv6_host_is_one_peer_per_64() {
        let mut g = AuthGuard::default();
        let t0 = Instant::now();
        for i in 0..=FREE_FAILURES {
            g.failed(ip(&format!("2001:db8:1:2::{i:x}")), t0);
        }
        assert!(g.blocked(ip("2001:db8:1:2:ffff::1"), t0).is_some());
        assert!(g.blocked(ip("2001:db8:1:3::1"), t0).is_none());
    }

    #[test]
    fn the_table_is_bounded_and_the_oldest_peer_makes_room() {
        let mut g = AuthGuard::with_capacity(100);
        let t0 = Instant::now();
        for i in 0..10_000u32 {
            let a = ip(&format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255));
            g.failed(a, t0 + Duration::from_millis(u64::from(i)));
            assert!(g.len() <= 100, "{} peers", g.len());
        }
        assert!(g.order.len() <= 200, "{} in order", g.order.len());
    }
}
