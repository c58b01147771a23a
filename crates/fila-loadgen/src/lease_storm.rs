//! The `lease-storm` scenario, on fila's async client: `--messages`
//! messages are put and all leased for an hour; `--consumers` connections
//! start long-polling the queue; then every lease is given its end by a
//! visibility change to a time drawn uniformly from 1 s to `--visibility`
//! (60 s unless given), so that that many leases are in flight at once
//! and none ends before the consumers wait. The consumers measure, for
//! every message that comes back, how late it came against the end of its
//! lease as the server answered the change (`next visible at`, the
//! server's wall clock on the same machine), and apart those whose lease
//! ended after the last end was given (the visibility changes, as fast as
//! 8 connections go, saturate the server and the client's one thread until
//! then). With `--rate`, a producer and a consumer keep a second queue
//! busy beside them at that many messages a second.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fila_client::{AllOk, AsyncClient, Fields, QueueRef, Receipt, ReceiveRef, SettingsPatch};
use hdrhistogram::Histogram;

use crate::idle::err;
use crate::lease_ends::now_us;
use crate::report::{histogram, percentiles_json, percentiles_line, record};
use crate::target::Fila;

/// Receives (then visibility changes) in flight while the leases are
/// taken (then given their ends).
const LEASING: usize = 8;
/// The visibility the leases are taken with, and the consumers take what
/// comes back with: longer than any run.
const HOLD_MS: u64 = 3_600_000;

/// What the run measured.
pub struct LeaseStormReport {
    leases: u64,
    visibility_ms: (u64, u64),
    rate: u64,
    /// Taking every lease (for longer than the run).
    leasing_s: f64,
    /// Giving every lease its end.
    setting_s: f64,
    /// Messages back, and how late (µs).
    late: Histogram<u64>,
    /// Those of them whose lease ended after every lease was given its
    /// end: the server was no longer saturated by the visibility changes
    /// (nor the one client thread busy sending them).
    settled: Histogram<u64>,
    /// The latest of the settled: how late (µs), and when it came back (µs
    /// of the wall clock), to find it in a trace of the run.
    worst: (u64, u64),
    early: u64,
    /// Messages back that no lease of the run was known for (none when
    /// the server is right).
    unknown: u64,
    missing: u64,
}

fn receive_ref(queue: &str, visibility_ms: u64, wait_ms: u64, fields: Fields) -> ReceiveRef<'_> {
    ReceiveRef {
        queue,
        dlq: false,
        max_messages: 20,
        visibility_ms: Some(visibility_ms),
        wait_ms: Some(wait_ms),
        channel: None,
        fields,
    }
}

/// Runs the scenario against fila at `target`.
pub fn run(
    target: &Fila,
    queue: &str,
    leases: u64,
    consumers: usize,
    max_visibility_ms: u64,
    rate: u64,
    duration: Duration,
) -> Result<LeaseStormReport, String> {
    let min_ms = 1_000.min(max_visibility_ms);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(err)?;
    let options = target.options();
    let busy = format!("{queue}-busy");
    rt.block_on(async {
        let admin = AsyncClient::connect(options.clone()).await.map_err(err)?;
        for q in [queue, busy.as_str()] {
            admin.delete_queue_if_exists(q).await.map_err(err)?;
            let settings = SettingsPatch {
                max_messages: Some(leases.max(1_000) * 2),
                ..SettingsPatch::default()
            };
            admin.create_queue(q, settings).await.map_err(err)?;
        }
        // Put them all.
        let payloads: Vec<Bytes> = (0..1_000).map(|_| Bytes::from_static(&[7; 100])).collect();
        let mut put = 0u64;
        while put < leases {
            let n = (leases - put).min(payloads.len() as u64) as usize;
            admin
                .put_payloads(queue, &payloads[..n])
                .await
                .map_err(err)?
                .all_ok()
                .map_err(err)?;
            put += n as u64;
        }
        // Lease them all, for longer than the run: nothing comes back yet.
        let taken: Arc<Mutex<Vec<(u128, Receipt)>>> =
            Arc::new(Mutex::new(Vec::with_capacity(leases as usize)));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..LEASING {
            let c = AsyncClient::connect(options.clone()).await.map_err(err)?;
            let (taken, q) = (taken.clone(), queue.to_owned());
            tasks.push(tokio::spawn(async move {
                loop {
                    if taken.lock().expect("not poisoned").len() as u64 >= leases {
                        break;
                    }
                    let got = c
                        .receive_with(receive_ref(&q, HOLD_MS, 0, Fields::ID))
                        .await
                        .map_err(err)?;
                    if got.is_empty() {
                        break;
                    }
                    let mut taken = taken.lock().expect("not poisoned");
                    taken.extend(got.iter().filter_map(|m| Some((m.id, m.receipt?))));
                }
                Ok::<(), String>(())
            }));
        }
        for t in tasks {
            t.await.map_err(err)??;
        }
        let leasing_s = started.elapsed().as_secs_f64();
        let taken = std::mem::take(&mut *taken.lock().expect("not poisoned"));
        if taken.len() as u64 != leases {
            return Err(format!("{} of {leases} leased", taken.len()));
        }
        let stop = Arc::new(AtomicBool::new(false));
        // The busy pair beside them, paced.
        let mut side = Vec::new();
        if rate > 0 {
            let p = AsyncClient::connect(options.clone()).await.map_err(err)?;
            let (stop_p, q) = (stop.clone(), busy.clone());
            side.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(
                    Duration::from_millis(20 * 1_000 / rate.max(1)).max(Duration::from_millis(1)),
                );
                let batch: Vec<Bytes> = (0..20).map(|_| Bytes::from_static(&[1; 100])).collect();
                while !stop_p.load(Ordering::Relaxed) {
                    tick.tick().await;
                    p.put_payloads(&q, &batch)
                        .await
                        .map_err(err)?
                        .all_ok()
                        .map_err(err)?;
                }
                Ok::<(), String>(())
            }));
            let c = AsyncClient::connect(options.clone()).await.map_err(err)?;
            let (stop_c, q) = (stop.clone(), busy.clone());
            side.push(tokio::spawn(async move {
                while !stop_c.load(Ordering::Relaxed) {
                    let got = c
                        .receive_with(receive_ref(&q, 30_000, 100, Fields::ID))
                        .await
                        .map_err(err)?;
                    let receipts: Vec<_> = got.iter().filter_map(|m| m.receipt).collect();
                    if !receipts.is_empty() {
                        c.delete(&q, &receipts)
                            .await
                            .map_err(err)?
                            .all_ok()
                            .map_err(err)?;
                    }
                }
                Ok::<(), String>(())
            }));
        }
        // The consumers wait on the queue before any lease is given its
        // end: every message back is measured, each as late as it is.
        let ends: Arc<Mutex<HashMap<u128, u64>>> =
            Arc::new(Mutex::new(HashMap::with_capacity(leases as usize)));
        let all_set = Arc::new(AtomicBool::new(false));
        // When the last end was given (µs, the server's clock), `MAX` until then.
        let set_at = Arc::new(AtomicU64::new(u64::MAX));
        let deadline = Instant::now() + duration;
        let mut waiters = Vec::new();
        for _ in 0..consumers.max(1) {
            let c = AsyncClient::connect(options.clone()).await.map_err(err)?;
            let (ends, all_set, q) = (ends.clone(), all_set.clone(), queue.to_owned());
            let set_at = set_at.clone();
            waiters.push(tokio::spawn(async move {
                let mut late = histogram();
                let mut settled = histogram();
                let mut worst = (0u64, 0u64);
                let mut early = 0u64;
                let mut unknown = 0u64;
                while Instant::now() < deadline
                    && !(all_set.load(Ordering::Acquire)
                        && ends.lock().expect("not poisoned").is_empty())
                {
                    let left = deadline
                        .saturating_duration_since(Instant::now())
                        .as_millis() as u64;
                    let got = c
                        .receive_with(receive_ref(
                            &q,
                            HOLD_MS,
                            left.clamp(1, 20_000),
                            Fields::ID.with(Fields::TIMES),
                        ))
                        .await
                        .map_err(err)?;
                    let at = now_us();
                    let mut ends = ends.lock().expect("not poisoned");
                    for m in got {
                        let Some(end) = ends.remove(&m.id) else {
                            unknown += 1;
                            continue;
                        };
                        let end_us = end * 1_000;
                        if at < end_us {
                            early += 1;
                        } else {
                            record(&mut late, at - end_us);
                            if end_us >= set_at.load(Ordering::Acquire) {
                                record(&mut settled, at - end_us);
                                worst = worst.max((at - end_us, at));
                            }
                        }
                    }
                }
                Ok::<_, String>((late, settled, worst, early, unknown))
            }));
        }
        // Then every lease is given its end: a visibility drawn from 1 s
        // to the maximum, from now, the end as the server answers it.
        let started = Instant::now();
        let per = taken.len().div_ceil(LEASING);
        let mut tasks = Vec::new();
        for (k, chunk) in taken.chunks(per.max(1)).enumerate() {
            let c = AsyncClient::connect(options.clone()).await.map_err(err)?;
            let (ends, q) = (
                ends.clone(),
                QueueRef {
                    name: queue.to_owned(),
                    dlq: false,
                },
            );
            let chunk = chunk.to_vec();
            let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ (k as u64 + 1);
            tasks.push(tokio::spawn(async move {
                for batch in chunk.chunks(20) {
                    let changes: Vec<(Receipt, u64)> = batch
                        .iter()
                        .map(|(_, r)| {
                            seed ^= seed << 13;
                            seed ^= seed >> 7;
                            seed ^= seed << 17;
                            (*r, min_ms + seed % (max_visibility_ms - min_ms + 1))
                        })
                        .collect();
                    let set = c
                        .update_visibility(&q, &changes)
                        .await
                        .map_err(err)?
                        .all_ok()
                        .map_err(err)?;
                    let mut ends = ends.lock().expect("not poisoned");
                    for ((id, _), end) in batch.iter().zip(set) {
                        ends.insert(*id, end);
                    }
                }
                Ok::<(), String>(())
            }));
        }
        for t in tasks {
            t.await.map_err(err)??;
        }
        set_at.store(now_us(), Ordering::Release);
        all_set.store(true, Ordering::Release);
        let setting_s = started.elapsed().as_secs_f64();
        let mut late = histogram();
        let mut settled = histogram();
        let mut worst = (0, 0);
        let mut early = 0;
        let mut unknown = 0;
        for t in waiters {
            let (h, s, w, e, u) = t.await.map_err(err)??;
            worst = worst.max(w);
            late.add(&h).map_err(err)?;
            settled.add(&s).map_err(err)?;
            early += e;
            unknown += u;
        }
        stop.store(true, Ordering::Relaxed);
        for t in side {
            t.await.map_err(err)??;
        }
        let missing = ends.lock().expect("not poisoned").len() as u64;
        Ok(LeaseStormReport {
            leases,
            visibility_ms: (min_ms, max_visibility_ms),
            rate,
            leasing_s,
            setting_s,
            late,
            settled,
            worst,
            early,
            unknown,
            missing,
        })
    })
}

impl LeaseStormReport {
    /// The report as a table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "lease-storm: {} leases in flight ({}-{} ms; taken in {:.1} s, given their ends in {:.1} s), busy beside: {} msg/s; back {}, early {}, unknown {}, not back {}\nlate after the lease's end, µs:",
            self.leases,
            self.visibility_ms.0,
            self.visibility_ms.1,
            self.leasing_s,
            self.setting_s,
            self.rate,
            self.late.len(),
            self.early,
            self.unknown,
            self.missing
        );
        out.push_str(&percentiles_line(&self.late));
        out.push_str("\nof them, leases that ended after every end was given, µs:");
        out.push_str(&percentiles_line(&self.settled));
        out.push('\n');
        out
    }

    /// The report as one JSON object.
    pub fn json(&self) -> String {
        let late = percentiles_json(&self.late);
        format!(
            "{{\"scenario\":\"lease-storm\",\"leases\":{},\"visibility_ms\":[{},{}],\"rate\":{},\"leasing_s\":{:.3},\"setting_s\":{:.3},\"back\":{},\"early\":{},\"unknown\":{},\"missing\":{},\"late_us\":{{{}}},\"settled_late_us\":{{{}}},\"worst_at_us\":{}}}",
            self.leases,
            self.visibility_ms.0,
            self.visibility_ms.1,
            self.rate,
            self.leasing_s,
            self.setting_s,
            self.late.len(),
            self.early,
            self.unknown,
            self.missing,
            late,
            percentiles_json(&self.settled),
            self.worst.1
        )
    }
}
