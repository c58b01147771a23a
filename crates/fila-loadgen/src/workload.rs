//! The workloads: producers and consumers on threads of their own, one
//! connection each, against any [`Target`].
//!
//! Every payload starts with the time it was sent (or, at a fixed rate,
//! the time it was scheduled to be sent), in microseconds since the run
//! began, so a consumer measures put-to-receive latency without clocks of
//! two machines. At a fixed rate the schedule, not the send, is the start:
//! a producer that falls behind does not hide the delay (no coordinated
//! omission).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use hdrhistogram::Histogram;

use crate::report::{histogram, proc_stats, record, Report};
use crate::target::Target;

/// What to run.
#[derive(Clone, Debug)]
pub struct Load {
    /// `lifecycle`, `fixed-rate`, `fan-in`, `many-queues` or
    /// `redelivery` (`long-poll-idle` runs in [`crate::idle`]).
    pub scenario: String,
    /// Queues of `many-queues` (1 otherwise).
    pub queues: usize,
    /// Parked receives of `long-poll-idle`.
    pub waiters: usize,
    /// Producer connections.
    pub producers: usize,
    /// Consumer connections.
    pub consumers: usize,
    /// Messages to put in all (the run also stops at `duration`).
    pub messages: u64,
    /// Payload bytes (at least 8: the timestamp).
    pub size: usize,
    /// Messages per put.
    pub batch: usize,
    /// Puts in flight per producer.
    pub depth: usize,
    /// Deletes in flight per consumer (1: each delete is confirmed before
    /// the next receive's messages are counted).
    pub ack_depth: usize,
    /// Messages per second for all producers together (fixed-rate).
    pub rate: u64,
    /// Visibility timeout of a receive, ms.
    pub visibility_ms: u64,
    /// Long-poll wait of a receive, ms.
    pub wait_ms: u64,
    /// The run stops after this long whatever is left.
    pub duration: Duration,
    /// The queue.
    pub queue: String,
    /// The server's process, for its CPU and memory.
    pub server_pid: Option<u32>,
    /// Print a progress line every second (to stderr).
    pub progress: bool,
}

struct Shared {
    epoch: Instant,
    produced: AtomicU64,
    consumed: AtomicU64,
    /// Microseconds since the epoch of the last message consumed.
    last_consumed_us: AtomicU64,
    producers_done: AtomicU64,
    stop: AtomicBool,
}

impl Shared {
    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }
}

fn payload(size: usize, stamp_us: u64) -> Bytes {
    let mut b = BytesMut::with_capacity(size.max(8));
    b.put_u64_le(stamp_us);
    b.resize(size.max(8), 0x61);
    b.freeze()
}

fn stamp_of(p: &[u8]) -> Option<u64> {
    let b: [u8; 8] = p.get(..8)?.try_into().ok()?;
    Some(u64::from_le_bytes(b))
}

/// The queues of a run: `queue` alone, or `queue-0` … for many-queues.
fn queues_of(load: &Load) -> Vec<String> {
    if load.scenario == "many-queues" {
        (0..load.queues.max(1))
            .map(|k| format!("{}-{k}", load.queue))
            .collect()
    } else {
        vec![load.queue.clone()]
    }
}

/// Producer `i`'s queues: all of them, starting at its own share, so the
/// producers spread over the queues from the start.
fn producer_queues(all: &[String], i: usize, producers: usize) -> Vec<String> {
    let mut q = all.to_vec();
    q.rotate_left(i * all.len() / producers.max(1));
    q
}

/// Consumer `j`'s queues: every `consumers`-th queue from the `j`-th (the
/// consumers share no queue when there are enough of them).
fn consumer_queues(all: &[String], j: usize, consumers: usize) -> Vec<String> {
    if all.len() < consumers {
        return vec![all[j % all.len()].clone()];
    }
    all.iter().skip(j).step_by(consumers).cloned().collect()
}

/// Runs `load` against `target`.
pub fn run(target: &dyn Target, load: &Load) -> Result<Report, String> {
    if load.size < 8 {
        return Err("--size must be at least 8 (the payload carries its send time)".into());
    }
    let queues = queues_of(load);
    target.prepare(&queues)?;
    let shared = Arc::new(Shared {
        epoch: Instant::now(),
        produced: AtomicU64::new(0),
        consumed: AtomicU64::new(0),
        last_consumed_us: AtomicU64::new(0),
        producers_done: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let server_before = load.server_pid.and_then(proc_stats);
    let mut peak_rss = server_before.map_or(0, |s| s.rss_bytes);
    let deadline = shared.epoch + load.duration;
    let result = std::thread::scope(|scope| -> Result<_, String> {
        let mut producers = Vec::new();
        let per = load.messages / load.producers as u64;
        for i in 0..load.producers {
            let quota = per + u64::from((i as u64) < load.messages % load.producers as u64);
            let mut p = target.producer(&producer_queues(&queues, i, load.producers))?;
            let shared = &shared;
            producers.push(scope.spawn(move || {
                let r = produce(&mut *p, load, quota, shared, deadline);
                shared.producers_done.fetch_add(1, Ordering::AcqRel);
                r
            }));
        }
        let mut consumers = Vec::new();
        let delete = load.scenario != "redelivery";
        for j in 0..load.consumers {
            let mine = consumer_queues(&queues, j, load.consumers);
            // Cycling over queues, a long poll on an empty one would only
            // wait: receives there do not wait.
            let wait_ms = if mine.len() > 1 { 0 } else { load.wait_ms };
            let mut c = target.consumer(&mine, delete)?;
            let shared = &shared;
            consumers.push(scope.spawn(move || consume(&mut *c, load, wait_ms, shared, deadline)));
        }
        // Progress and the server's memory, once a second.
        let mut last = (0, 0);
        while !consumers.iter().all(|c| c.is_finished()) {
            std::thread::sleep(Duration::from_millis(100));
            let elapsed = shared.epoch.elapsed();
            if let Some(s) = load.server_pid.and_then(proc_stats) {
                peak_rss = peak_rss.max(s.rss_bytes);
            }
            if load.progress && elapsed.as_millis() / 1000 != u128::from(last.0) {
                let produced = shared.produced.load(Ordering::Relaxed);
                let consumed = shared.consumed.load(Ordering::Relaxed);
                eprint!(
                    "\r{:>6.1} s  put {produced:>10}  done {consumed:>10}  {:>9} msg/s   ",
                    elapsed.as_secs_f64(),
                    consumed - last.1
                );
                last = (elapsed.as_secs(), consumed);
            }
        }
        if load.progress {
            eprintln!();
        }
        let mut put = histogram();
        for p in producers {
            put.add(p.join().map_err(|_| "a producer panicked")??)
                .map_err(|e| e.to_string())?;
        }
        let (mut e2e, mut receive, mut delete) = (histogram(), histogram(), histogram());
        for c in consumers {
            let [a, b, d] = c.join().map_err(|_| "a consumer panicked")??;
            e2e.add(a).map_err(|e| e.to_string())?;
            receive.add(b).map_err(|e| e.to_string())?;
            delete.add(d).map_err(|e| e.to_string())?;
        }
        Ok((put, e2e, receive, delete))
    })?;
    let (put, end_to_end, receive, delete) = result;
    let server = match (server_before, load.server_pid.and_then(proc_stats)) {
        (Some(a), Some(b)) => Some((b.cpu_s - a.cpu_s, peak_rss.max(b.rss_bytes))),
        _ => None,
    };
    let load_line = match load.scenario.as_str() {
        "fixed-rate" => format!(
            "{} msg/s fixed, {} producers (batch {}, depth {}), {} consumers, {} B",
            load.rate, load.producers, load.batch, load.depth, load.consumers, load.size
        ),
        "redelivery" => format!(
            "{} producers (batch {}, depth {}), {} consumers that never delete (visibility {} ms: \
             'done' counts deliveries), {} B",
            load.producers, load.batch, load.depth, load.consumers, load.visibility_ms, load.size
        ),
        "many-queues" => format!(
            "{} queues, {} producers (batch {}, depth {}) over all of them, {} consumers over \
             their share (deletes in flight {}), {} B",
            queues.len(),
            load.producers,
            load.batch,
            load.depth,
            load.consumers,
            load.ack_depth,
            load.size
        ),
        _ => format!(
            "{} producers (batch {}, depth {}), {} consumers (deletes in flight {}), {} B",
            load.producers, load.batch, load.depth, load.consumers, load.ack_depth, load.size
        ),
    };
    Ok(Report {
        scenario: load.scenario.clone(),
        system: target.name(),
        load: load_line,
        produced: shared.produced.load(Ordering::Acquire),
        consumed: shared.consumed.load(Ordering::Acquire),
        seconds: shared.last_consumed_us.load(Ordering::Acquire) as f64 / 1e6,
        end_to_end,
        put,
        receive,
        delete,
        server,
    })
}

fn produce(
    p: &mut dyn crate::target::Producer,
    load: &Load,
    quota: u64,
    shared: &Shared,
    deadline: Instant,
) -> Result<Histogram<u64>, String> {
    let mut put = histogram();
    let mut in_flight: VecDeque<(Instant, u64)> = VecDeque::new();
    let mut sent = 0u64;
    let fixed = load.scenario == "fixed-rate";
    // Each producer's share of the rate, as the gap between its batches.
    let gap_us = if fixed {
        (load.batch as f64 * load.producers as f64 * 1e6 / load.rate.max(1) as f64) as u64
    } else {
        0
    };
    let mut batch_no = 0u64;
    loop {
        let now = Instant::now();
        let more = sent < quota && now < deadline && !shared.stop.load(Ordering::Relaxed);
        if more && in_flight.len() < load.depth {
            let n = (quota - sent).min(load.batch as u64);
            let stamp = if fixed {
                let due = gap_us * batch_no;
                let now_us = shared.now_us();
                if due > now_us {
                    std::thread::sleep(Duration::from_micros(due - now_us));
                }
                due
            } else {
                shared.now_us()
            };
            batch_no += 1;
            let batch: Vec<Bytes> = (0..n).map(|_| payload(load.size, stamp)).collect();
            p.send(&batch)?;
            in_flight.push_back((Instant::now(), n));
            sent += n;
            // Keep pipelining while there is room (at a fixed rate, the
            // next batch waits for its time, not for acknowledgements).
            if in_flight.len() < load.depth {
                continue;
            }
        }
        let Some((at, n)) = in_flight.pop_front() else {
            break;
        };
        p.confirm()?;
        if !fixed {
            // At a fixed rate an acknowledgement is taken only when the
            // window is full, so its wait is not a round trip.
            record(&mut put, at.elapsed().as_micros() as u64);
        }
        shared.produced.fetch_add(n, Ordering::AcqRel);
    }
    Ok(put)
}

fn consume(
    c: &mut dyn crate::target::Consumer,
    load: &Load,
    wait_ms: u64,
    shared: &Shared,
    deadline: Instant,
) -> Result<[Histogram<u64>; 3], String> {
    let (mut e2e, mut receive, mut delete) = (histogram(), histogram(), histogram());
    // Messages never deleted come back: that run ends with its time.
    let until_deadline = load.scenario == "redelivery";
    loop {
        let all_produced = shared.producers_done.load(Ordering::Acquire) == load.producers as u64;
        let done =
            shared.consumed.load(Ordering::Acquire) >= shared.produced.load(Ordering::Acquire);
        if (all_produced && done && !until_deadline) || Instant::now() >= deadline {
            break;
        }
        let got = c.step(20, load.visibility_ms, wait_ms, load.ack_depth)?;
        let now_us = shared.now_us();
        for (i, p) in got.payloads.iter().enumerate() {
            let at = got.arrived.get(i).map_or(now_us, |t| {
                t.saturating_duration_since(shared.epoch).as_micros() as u64
            });
            if let Some(stamp) = stamp_of(p) {
                record(&mut e2e, at.saturating_sub(stamp));
            }
        }
        record(&mut receive, got.receive_us);
        for d in got.deletes_us {
            record(&mut delete, d);
        }
        if !got.payloads.is_empty() {
            shared
                .consumed
                .fetch_add(got.payloads.len() as u64, Ordering::AcqRel);
            shared.last_consumed_us.fetch_max(now_us, Ordering::AcqRel);
        }
    }
    for d in c.finish()? {
        record(&mut delete, d);
    }
    Ok([e2e, receive, delete])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producers_spread_over_every_queue_and_consumers_share_none() {
        let all: Vec<String> = (0..10).map(|k| k.to_string()).collect();
        let p = producer_queues(&all, 1, 2);
        assert_eq!((p.len(), p[0].as_str()), (10, "5"));
        let mut seen: Vec<String> = (0..3).flat_map(|j| consumer_queues(&all, j, 3)).collect();
        seen.sort();
        let mut want = all.clone();
        want.sort();
        assert_eq!(seen, want);
        assert_eq!(consumer_queues(&all[..2], 3, 4), vec!["1".to_string()]);
    }

    #[test]
    fn a_payload_carries_its_stamp_and_has_its_size() {
        let p = payload(100, 123_456);
        assert_eq!(p.len(), 100);
        assert_eq!(stamp_of(&p), Some(123_456));
        assert_eq!(payload(3, 1).len(), 8);
    }
}
