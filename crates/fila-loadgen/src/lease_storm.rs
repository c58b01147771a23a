//! The `lease-storm` scenario, on fila's async client: `--messages`
//! messages are put and then all leased, each receive of 20 with a
//! visibility drawn uniformly from 1 s to `--visibility` (60 s unless
//! given), so that that many leases are in flight at once; then
//! `--consumers` connections long-poll the queue and measure, for every
//! message that comes back, how late it came against the end of its lease
//! as the server gave it (`next_visible_at_ms`, the server's wall clock
//! on the same machine). With `--rate`, a producer and a consumer keep a
//! second queue busy beside them at that many messages a second.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fila_client::{AllOk, AsyncClient, Fields, ReceiveRef, SettingsPatch};
use hdrhistogram::Histogram;

use crate::idle::err;
use crate::lease_ends::now_us;
use crate::report::{histogram, percentiles_json, percentiles_line, record};
use crate::target::Fila;

/// Receives in flight while the leases are taken.
const LEASING: usize = 8;

/// What the run measured.
pub struct LeaseStormReport {
    leases: u64,
    visibility_ms: (u64, u64),
    rate: u64,
    leasing_s: f64,
    /// Messages back, and how late (µs).
    late: Histogram<u64>,
    early: u64,
    /// Leases that ended before the consumers began (not measured).
    unwatched: u64,
    missing: u64,
}

fn receive_ref(queue: &str, visibility_ms: u64, wait_ms: u64) -> ReceiveRef<'_> {
    ReceiveRef {
        queue,
        dlq: false,
        max_messages: 20,
        visibility_ms: Some(visibility_ms),
        wait_ms: Some(wait_ms),
        channel: None,
        fields: Fields::ID.with(Fields::TIMES),
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
        // Lease them all, recording when each lease ends.
        let ends: Arc<Mutex<HashMap<u128, u64>>> =
            Arc::new(Mutex::new(HashMap::with_capacity(leases as usize)));
        let leased = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for k in 0..LEASING {
            let c = AsyncClient::connect(options.clone()).await.map_err(err)?;
            let (ends, leased, q) = (ends.clone(), leased.clone(), queue.to_owned());
            let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ (k as u64 + 1);
            tasks.push(tokio::spawn(async move {
                while leased.load(Ordering::Relaxed) < leases {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let vis = min_ms + seed % (max_visibility_ms - min_ms + 1);
                    let got = c.receive_with(receive_ref(&q, vis, 0)).await.map_err(err)?;
                    if got.is_empty() {
                        break;
                    }
                    leased.fetch_add(got.len() as u64, Ordering::Relaxed);
                    let mut ends = ends.lock().expect("not poisoned");
                    for m in got {
                        ends.insert(m.id, m.next_visible_at_ms);
                    }
                }
                Ok::<(), String>(())
            }));
        }
        for t in tasks {
            t.await.map_err(err)??;
        }
        let leasing_s = started.elapsed().as_secs_f64();
        let in_flight = ends.lock().expect("not poisoned").len() as u64;
        if in_flight != leases {
            return Err(format!("{in_flight} of {leases} leased"));
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
                        .receive_with(receive_ref(&q, 30_000, 100))
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
        // Every message back, each as late as it is. A lease that ended
        // before the consumers began (the leasing took longer than its
        // visibility) waited for nobody: counted apart, not as lateness.
        let deadline = Instant::now() + duration;
        let begun_us = now_us();
        let mut waiters = Vec::new();
        for _ in 0..consumers.max(1) {
            let c = AsyncClient::connect(options.clone()).await.map_err(err)?;
            let (ends, q) = (ends.clone(), queue.to_owned());
            waiters.push(tokio::spawn(async move {
                let mut late = histogram();
                let mut early = 0u64;
                let mut unwatched = 0u64;
                while Instant::now() < deadline && !ends.lock().expect("not poisoned").is_empty() {
                    let left = deadline
                        .saturating_duration_since(Instant::now())
                        .as_millis() as u64;
                    let got = c
                        .receive_with(receive_ref(&q, 3_600_000, left.clamp(1, 20_000)))
                        .await
                        .map_err(err)?;
                    let at = now_us();
                    let mut ends = ends.lock().expect("not poisoned");
                    for m in got {
                        let Some(end) = ends.remove(&m.id) else {
                            continue;
                        };
                        let end_us = end * 1_000;
                        if at < end_us {
                            early += 1;
                        } else if end_us < begun_us {
                            unwatched += 1;
                        } else {
                            record(&mut late, at - end_us);
                        }
                    }
                }
                Ok::<_, String>((late, early, unwatched))
            }));
        }
        let mut late = histogram();
        let mut early = 0;
        let mut unwatched = 0;
        for t in waiters {
            let (h, e, u) = t.await.map_err(err)??;
            late.add(&h).map_err(err)?;
            early += e;
            unwatched += u;
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
            late,
            early,
            unwatched,
            missing,
        })
    })
}

impl LeaseStormReport {
    /// The report as a table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "lease-storm: {} leases in flight ({}-{} ms, taken in {:.1} s), busy beside: {} msg/s; back {} ({} ended before the consumers began, not measured), early {}, not back {}\nlate after the lease's end, µs:",
            self.leases,
            self.visibility_ms.0,
            self.visibility_ms.1,
            self.leasing_s,
            self.rate,
            self.late.len(),
            self.unwatched,
            self.early,
            self.missing
        );
        out.push_str(&percentiles_line(&self.late));
        out.push('\n');
        out
    }

    /// The report as one JSON object.
    pub fn json(&self) -> String {
        let late = percentiles_json(&self.late);
        format!(
            "{{\"scenario\":\"lease-storm\",\"leases\":{},\"visibility_ms\":[{},{}],\"rate\":{},\"leasing_s\":{:.3},\"back\":{},\"unwatched\":{},\"early\":{},\"missing\":{},\"late_us\":{{{}}}}}",
            self.leases,
            self.visibility_ms.0,
            self.visibility_ms.1,
            self.rate,
            self.leasing_s,
            self.late.len(),
            self.unwatched,
            self.early,
            self.missing,
            late
        )
    }
}
