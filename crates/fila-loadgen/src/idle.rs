//! The `long-poll-idle` scenario, on fila's async client: `waiters`
//! receives parked on an empty queue over `connections` connections for the
//! whole run (each asked again when its wait ends), while one more
//! connection probes a second queue with put → receive → delete every
//! 10 ms. Reports what the idle waiters cost: the server's CPU and memory
//! (from /proc) and the probe's round trip beside them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fila_client::{AllOk, AsyncClient, Fields, ReceiveRef, SettingsPatch};
use hdrhistogram::Histogram;

use crate::report::{histogram, percentiles_json, percentiles_line, proc_stats, record};
use crate::target::Fila;

/// Waiters a connection can park: each holds room for 20 answers of up to
/// 14 000 bytes (a 1 KiB message with attributes and names at their limits) in
/// the connection's 8 MiB of output room, and 2 MiB must stay free.
pub const PER_CONNECTION: usize = 20;

/// What the idle run measured.
pub struct IdleReport {
    waiters: usize,
    connections: usize,
    seconds: f64,
    /// Server CPU seconds and peak RSS during the measured span.
    server: Option<(f64, u64, u64)>,
    probe: Histogram<u64>,
}

/// An error as the scenarios report it.
pub(crate) fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Runs the scenario against fila at `target`.
pub fn run(
    target: &Fila,
    queue: &str,
    waiters: usize,
    connections: usize,
    duration: Duration,
    server_pid: Option<u32>,
) -> Result<IdleReport, String> {
    let per = waiters.div_ceil(connections.max(1));
    if per > PER_CONNECTION {
        return Err(format!(
            "{per} waiters a connection: a parked receive of 20 holds output room for 20 of \
             the largest answers its queue allows, so a connection with the default 8 MiB \
             of output room parks about {PER_CONNECTION}; use --consumers {} or more",
            waiters.div_ceil(PER_CONNECTION)
        ));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(err)?;
    let options = target.options();
    let probe_queue = format!("{queue}-probe");
    rt.block_on(async {
        let admin = AsyncClient::connect(options.clone()).await.map_err(err)?;
        for q in [queue, probe_queue.as_str()] {
            admin.delete_queue_if_exists(q).await.map_err(err)?;
            let settings = SettingsPatch {
                // The room a parked receive holds follows this.
                max_message_bytes: Some(1_024),
                ..SettingsPatch::default()
            };
            admin.create_queue(q, settings).await.map_err(err)?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for k in 0..connections {
            let c = AsyncClient::connect(options.clone()).await.map_err(err)?;
            let n = per.min(waiters.saturating_sub(k * per));
            for _ in 0..n {
                let (c, stop, queue) = (c.clone(), stop.clone(), queue.to_owned());
                tasks.push(tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        c.receive_with(ReceiveRef {
                            queue: &queue,
                            dlq: false,
                            max_messages: 20,
                            visibility_ms: None,
                            wait_ms: Some(fila_client::limits::WAIT_MS_MAX),
                            channel: None,
                            fields: Fields::PAYLOAD_AND_RECEIPT,
                        })
                        .await?;
                    }
                    Ok::<(), fila_client::ClientError>(())
                }));
            }
        }
        // Every waiter parked before the measure starts (60 s at most).
        let parked = || async {
            let stats = admin.server_stats().await.map_err(err)?;
            Ok::<u64, String>(
                stats
                    .iter()
                    .find(|(k, _)| k == "receives_parked")
                    .map_or(0, |(_, v)| *v),
            )
        };
        let ready_by = Instant::now() + Duration::from_secs(60);
        while parked().await? < waiters as u64 {
            if Instant::now() > ready_by {
                return Err(format!(
                    "only {} of {waiters} receives parked after 60 s",
                    parked().await?
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let before = server_pid.and_then(proc_stats);
        let mut peak = before.map_or(0, |s| s.rss_bytes);
        let start = Instant::now();
        let mut probe = histogram();
        let probing = AsyncClient::connect(options.clone()).await.map_err(err)?;
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        while start.elapsed() < duration {
            tick.tick().await;
            let t = Instant::now();
            probing.put_one(&probe_queue, "probe").await.map_err(err)?;
            let got = probing
                .receive(&probe_queue, 1, Some(1_000))
                .await
                .map_err(err)?;
            let receipts: Vec<_> = got.iter().filter_map(|m| m.receipt).collect();
            probing
                .delete(&probe_queue, &receipts)
                .await
                .map_err(err)?
                .all_ok()
                .map_err(err)?;
            record(&mut probe, t.elapsed().as_micros() as u64);
            if let Some(s) = server_pid.and_then(proc_stats) {
                peak = peak.max(s.rss_bytes);
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        let after = server_pid.and_then(proc_stats);
        stop.store(true, Ordering::Relaxed);
        for t in &tasks {
            if t.is_finished() {
                return Err("a waiter failed before the end".into());
            }
        }
        // Dropping the runtime drops the waiters and closes their
        // connections; the server cancels what they parked.
        Ok(IdleReport {
            waiters,
            connections,
            seconds,
            server: match (before, after) {
                (Some(a), Some(b)) => Some((b.cpu_s - a.cpu_s, a.rss_bytes, peak.max(b.rss_bytes))),
                _ => None,
            },
            probe,
        })
    })
}

impl IdleReport {
    /// The report as a table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "long-poll-idle: {} receives parked over {} connections for {:.1} s\n",
            self.waiters, self.connections, self.seconds
        );
        match self.server {
            Some((cpu, rss0, rss)) => out.push_str(&format!(
                "server: {:.2} % of a core ({cpu:.2} CPU s), RSS {:.1} MiB (peak {:.1} MiB)\n",
                100.0 * cpu / self.seconds,
                rss0 as f64 / (1 << 20) as f64,
                rss as f64 / (1 << 20) as f64
            )),
            None => out.push_str("server: not measured (give --server-pid)\n"),
        }
        out.push_str(&format!(
            "probe put → receive → delete ({} round trips), µs:",
            self.probe.len()
        ));
        out.push_str(&percentiles_line(&self.probe));
        out.push('\n');
        out
    }

    /// The report as one JSON object.
    pub fn json(&self) -> String {
        let probe = percentiles_json(&self.probe);
        let server = match self.server {
            Some((cpu, rss0, rss)) => format!(
                "{{\"cpu_s\":{cpu:.3},\"cpu_pct\":{:.3},\"rss_bytes_before\":{rss0},\"rss_bytes_peak\":{rss}}}",
                100.0 * cpu / self.seconds
            ),
            None => "null".into(),
        };
        format!(
            "{{\"scenario\":\"long-poll-idle\",\"waiters\":{},\"connections\":{},\"seconds\":{:.3},\"server\":{server},\"probe_us\":{{{}}}}}",
            self.waiters,
            self.connections,
            self.seconds,
            probe
        )
    }
}
