//! The console's small history: one sample a second of the queues its
//! pages showed lately, and of the server, kept for the last hour, for
//! the charts and the rates.
//!
//! Bounded: at most [`QUEUES_MAX`] queues are sampled (a queue not shown
//! for [`SHOWN_FOR`] stops being sampled and its samples go; when the
//! table is full the queue shown least recently makes room), each with at
//! most [`SPAN`] samples of 32 bytes — about 7.4 MB at most, and nothing
//! while nobody looks. A sample costs one stats request per queue through
//! the loops' mailboxes, as any admin request does.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Samples kept per queue (one a second: an hour).
pub const SPAN: usize = 3600;
/// Queues sampled at once.
pub const QUEUES_MAX: usize = 64;
/// A queue no page showed for this long is no longer sampled.
pub const SHOWN_FOR: Duration = Duration::from_secs(600);
/// Seconds the rates on a page are averaged over.
pub const RATE_WINDOW: usize = 10;

/// A queue at one second: its counts, and what happened during the
/// second before (puts, deliveries, deletes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// Messages visible.
    pub visible: u32,
    /// Messages leased.
    pub in_flight: u32,
    /// Messages delayed.
    pub delayed: u32,
    /// Messages deferred.
    pub deferred: u32,
    /// Messages in the dead-letter queue.
    pub dead_lettered: u32,
    /// Messages put during the second before.
    pub puts: u32,
    /// Messages delivered during the second before.
    pub deliveries: u32,
    /// Messages deleted during the second before.
    pub deletes: u32,
}

/// What a stats answer says, as the history keeps it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Reading {
    /// Messages visible.
    pub visible: u64,
    /// Messages leased.
    pub in_flight: u64,
    /// Messages delayed.
    pub delayed: u64,
    /// Messages deferred.
    pub deferred: u64,
    /// Messages in the dead-letter queue.
    pub dead_lettered: u64,
    /// Messages put so far (a counter that only grows).
    pub puts: u64,
    /// Messages delivered so far (a counter that only grows).
    pub deliveries: u64,
    /// Messages deleted so far (a counter that only grows).
    pub deletes: u64,
}

struct Track {
    shown: Instant,
    last: Option<Reading>,
    samples: VecDeque<Sample>,
}

/// The server at one second.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServerSample {
    /// Connections open.
    pub connections: u32,
    /// Requests answered during the second before.
    pub requests: u32,
    /// Bytes of messages stored.
    pub stored_bytes: u64,
}

/// Every queue's samples, and the server's.
#[derive(Default)]
pub struct History {
    queues: HashMap<String, Track>,
    server: VecDeque<ServerSample>,
    last_requests: Option<u64>,
}

fn clamp(n: u64) -> u32 {
    n.min(u64::from(u32::MAX)) as u32
}

fn push<T>(ring: &mut VecDeque<T>, v: T) {
    if ring.len() == SPAN {
        ring.pop_front();
    }
    ring.push_back(v);
}

impl History {
    /// A page showed queue `name`: sample it from now on (the least
    /// recently shown makes room when [`QUEUES_MAX`] are sampled).
    pub fn show(&mut self, name: &str, now: Instant) {
        if let Some(t) = self.queues.get_mut(name) {
            t.shown = now;
            return;
        }
        if self.queues.len() >= QUEUES_MAX {
            if let Some(oldest) = self
                .queues
                .iter()
                .min_by_key(|(_, t)| t.shown)
                .map(|(n, _)| n.clone())
            {
                self.queues.remove(&oldest);
            }
        }
        self.queues.insert(
            name.to_owned(),
            Track {
                shown: now,
                last: None,
                samples: VecDeque::new(),
            },
        );
    }

    /// The queues to sample now (those not shown for [`SHOWN_FOR`] are
    /// dropped first).
    pub fn due(&mut self, now: Instant) -> Vec<String> {
        self.queues
            .retain(|_, t| now.duration_since(t.shown) < SHOWN_FOR);
        self.queues.keys().cloned().collect()
    }

    /// Queue `name`'s stats at this second (its rates are the counters'
    /// growth since the last reading).
    pub fn record(&mut self, name: &str, r: Reading) {
        let Some(t) = self.queues.get_mut(name) else {
            return;
        };
        let grew = |now: u64, then: Option<u64>| clamp(then.map_or(0, |t| now.saturating_sub(t)));
        let last = t.last;
        push(
            &mut t.samples,
            Sample {
                visible: clamp(r.visible),
                in_flight: clamp(r.in_flight),
                delayed: clamp(r.delayed),
                deferred: clamp(r.deferred),
                dead_lettered: clamp(r.dead_lettered),
                puts: grew(r.puts, last.map(|l| l.puts)),
                deliveries: grew(r.deliveries, last.map(|l| l.deliveries)),
                deletes: grew(r.deletes, last.map(|l| l.deletes)),
            },
        );
        t.last = Some(r);
    }

    /// A queue that is gone: its samples go.
    pub fn forget(&mut self, name: &str) {
        self.queues.remove(name);
    }

    /// The server at this second (`requests`: answered since the start).
    pub fn record_server(&mut self, connections: u64, requests: u64, stored_bytes: u64) {
        let grew = self.last_requests.map_or(0, |l| requests.saturating_sub(l));
        self.last_requests = Some(requests);
        push(
            &mut self.server,
            ServerSample {
                connections: clamp(connections),
                requests: clamp(grew),
                stored_bytes,
            },
        );
    }

    /// Queue `name`'s samples, oldest first.
    pub fn samples(&self, name: &str) -> Option<&VecDeque<Sample>> {
        self.queues.get(name).map(|t| &t.samples)
    }

    /// The server's samples, oldest first.
    pub fn server(&self) -> &VecDeque<ServerSample> {
        &self.server
    }

    /// Queue `name`'s puts, deliveries and deletes a second, averaged over
    /// the last [`RATE_WINDOW`] seconds (`None` before two readings).
    pub fn rates(&self, name: &str) -> Option<(f64, f64, f64)> {
        let t = self.queues.get(name)?;
        let n = t.samples.len().saturating_sub(1).min(RATE_WINDOW);
        if n == 0 {
            return None;
        }
        let recent = t.samples.iter().rev().take(n);
        let (p, d, x) = recent.fold((0u64, 0u64, 0u64), |(p, d, x), s| {
            (
                p + u64::from(s.puts),
                d + u64::from(s.deliveries),
                x + u64::from(s.deletes),
            )
        });
        let n = n as f64;
        Some((p as f64 / n, d as f64 / n, x as f64 / n))
    }

    /// Queues sampled now.
    pub fn len(&self) -> usize {
        self.queues.len()
    }

    /// Whether no queue is sampled.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(puts: u64, visible: u64) -> Reading {
        Reading {
            puts,
            visible,
            ..Reading::default()
        }
    }

    #[test]
    fn rates_are_the_counters_growth_and_the_window_is_an_hour() {
        let t0 = Instant::now();
        let mut h = History::default();
        h.show("q", t0);
        assert_eq!(h.due(t0), ["q"]);
        for s in 0..(SPAN as u64 + 5) {
            h.record("q", reading(s * 7, s));
        }
        let samples = h.samples("q").unwrap();
        assert_eq!(samples.len(), SPAN, "an hour at most");
        assert_eq!(samples.back().unwrap().visible as u64, SPAN as u64 + 4);
        assert!(samples.iter().skip(1).all(|s| s.puts == 7));
        assert_eq!(h.rates("q"), Some((7.0, 0.0, 0.0)));
        h.record("unshown", reading(1, 1));
        assert!(h.samples("unshown").is_none(), "only shown queues are kept");
    }

    #[test]
    fn queues_not_shown_stop_being_sampled_and_the_table_is_bounded() {
        let t0 = Instant::now();
        let mut h = History::default();
        for i in 0..QUEUES_MAX + 10 {
            h.show(&format!("q{i}"), t0 + Duration::from_millis(i as u64));
        }
        assert_eq!(h.len(), QUEUES_MAX);
        assert!(
            h.samples("q0").is_none(),
            "the least recently shown made room"
        );
        assert!(h.samples(&format!("q{}", QUEUES_MAX + 9)).is_some());
        assert!(h.due(t0 + SHOWN_FOR + Duration::from_secs(1)).is_empty());
        assert_eq!(h.len(), 0);
    }
}
