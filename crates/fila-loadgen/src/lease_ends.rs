//! The `lease-ends` scenario, on fila's async client: `waiters` receives,
//! each on a queue of its own over `connections` connections, wait for a
//! message whose lease is running: each waiter puts one message, leases
//! it for a visibility drawn from 500 ms to `--visibility`, then receives
//! with a wait (20 s) and measures how late that receive is answered
//! against the lease's end as the server gave it (`next_visible_at_ms`,
//! the server's wall clock, the same machine's), deletes it, and again
//! until `--duration` ends. The promise measured: a message is visible,
//! and a waiting receive answered, when its lease ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fila_client::{AllOk, AsyncClient, Fields, ReceiveRef, SettingsPatch};
use hdrhistogram::Histogram;

use crate::idle::{err, PER_CONNECTION};
use crate::report::{histogram, percentiles_json, percentiles_line, record};
use crate::target::Fila;

/// What the run measured: lateness of each waiting receive, µs.
pub struct LeaseEndsReport {
    waiters: usize,
    visibility_ms: (u64, u64),
    seconds: f64,
    late: Histogram<u64>,
    /// Answered before the lease ended (never, if the promise holds).
    early: u64,
}

/// The wall clock in µs since the epoch (what the server's
/// `next_visible_at_ms` is read against, on the same machine).
pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Runs the scenario against fila at `target`.
pub fn run(
    target: &Fila,
    queue: &str,
    waiters: usize,
    connections: usize,
    max_visibility_ms: u64,
    duration: Duration,
) -> Result<LeaseEndsReport, String> {
    let per = waiters.div_ceil(connections.max(1));
    if per > PER_CONNECTION {
        return Err(format!(
            "{per} waiters a connection; use --consumers {} or more",
            waiters.div_ceil(PER_CONNECTION)
        ));
    }
    let min_ms = 500.min(max_visibility_ms);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(err)?;
    let options = target.options();
    rt.block_on(async {
        let admin = AsyncClient::connect(options.clone()).await.map_err(err)?;
        for i in 0..waiters {
            let q = format!("{queue}-{i}");
            admin.delete_queue_if_exists(&q).await.map_err(err)?;
            admin
                .create_queue(&q, SettingsPatch::default())
                .await
                .map_err(err)?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let start = Instant::now();
        let mut tasks = Vec::new();
        for k in 0..connections {
            let c = AsyncClient::connect(options.clone()).await.map_err(err)?;
            for i in k * per..((k + 1) * per).min(waiters) {
                let (c, stop) = (c.clone(), stop.clone());
                let q = format!("{queue}-{i}");
                // Each waiter's own sequence of visibilities (xorshift).
                let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ (i as u64 + 1);
                tasks.push(tokio::spawn(async move {
                    let mut late = histogram();
                    let mut early = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        let vis = min_ms + seed % (max_visibility_ms - min_ms + 1);
                        c.put_one(&q, "lease").await.map_err(err)?;
                        let leased = receive(&c, &q, vis, 0).await?;
                        let Some(m) = leased.first() else {
                            return Err(format!("{q}: the message put was not there"));
                        };
                        let ends_us = m.next_visible_at_ms * 1_000;
                        let again = receive(&c, &q, 60_000, 20_000).await?;
                        let at = now_us();
                        let Some(m) = again.first() else {
                            return Err(format!(
                                "{q}: a 20 s wait for a lease of {vis} ms ended empty"
                            ));
                        };
                        if at < ends_us {
                            early += 1;
                        } else {
                            record(&mut late, at - ends_us);
                        }
                        let receipts: Vec<_> = m.receipt.into_iter().collect();
                        c.delete(&q, &receipts)
                            .await
                            .map_err(err)?
                            .all_ok()
                            .map_err(err)?;
                    }
                    Ok::<_, String>((late, early))
                }));
            }
        }
        tokio::time::sleep(duration).await;
        stop.store(true, Ordering::Relaxed);
        let mut late = histogram();
        let mut early = 0;
        for t in tasks {
            let (h, e) = t.await.map_err(err)??;
            late.add(&h).map_err(err)?;
            early += e;
        }
        Ok(LeaseEndsReport {
            waiters,
            visibility_ms: (min_ms, max_visibility_ms),
            seconds: start.elapsed().as_secs_f64(),
            late,
            early,
        })
    })
}

async fn receive(
    c: &AsyncClient,
    queue: &str,
    visibility_ms: u64,
    wait_ms: u64,
) -> Result<Vec<fila_client::Message>, String> {
    c.receive_with(ReceiveRef {
        queue,
        dlq: false,
        max_messages: 1,
        visibility_ms: Some(visibility_ms),
        wait_ms: Some(wait_ms),
        channel: None,
        fields: Fields::ALL,
    })
    .await
    .map_err(err)
}

impl LeaseEndsReport {
    /// The report as a table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "lease-ends: {} waiters, leases of {}-{} ms, {:.1} s: {} waits answered, {} before the lease ended\nlate after the lease's end, µs:",
            self.waiters,
            self.visibility_ms.0,
            self.visibility_ms.1,
            self.seconds,
            self.late.len(),
            self.early
        );
        out.push_str(&percentiles_line(&self.late));
        out.push('\n');
        out
    }

    /// The report as one JSON object.
    pub fn json(&self) -> String {
        let late = percentiles_json(&self.late);
        format!(
            "{{\"scenario\":\"lease-ends\",\"waiters\":{},\"visibility_ms\":[{},{}],\"seconds\":{:.3},\"answered\":{},\"early\":{},\"late_us\":{{{}}}}}",
            self.waiters,
            self.visibility_ms.0,
            self.visibility_ms.1,
            self.seconds,
            self.late.len(),
            self.early,
            late
        )
    }
}
