//! connect: how many connections a second the server takes in — each a TCP
//! connect, with `--tls` a TLS handshake (a full one: no session is
//! resumed), the auth frame when a token is given, one hello round trip,
//! and the close. `--producers` threads for `--duration` seconds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::report::{histogram, proc_stats, record};
use crate::target::Fila;

/// What connect measured.
pub struct Connects {
    /// Connections opened (and closed) a second, all threads.
    pub per_s: f64,
    /// Connections opened in all.
    pub count: u64,
    /// Connect to hello answered, µs: p50, p99.
    pub open_us: [u64; 2],
    /// The server's CPU seconds over the run, when its pid was given.
    pub server_cpu_s: Option<f64>,
    /// Whether they spoke TLS.
    pub tls: bool,
}

impl Connects {
    /// One JSON object.
    pub fn json(&self, threads: usize) -> String {
        format!(
            "{{\"scenario\":\"connect\",\"tls\":{},\"threads\":{threads},\"connections_per_s\":{:.0},\"open_us\":{{\"p50\":{},\"p99\":{}}},\"server_cpu_ms_per_connection\":{}}}",
            self.tls,
            self.per_s,
            self.open_us[0],
            self.open_us[1],
            self.cpu_ms_per_connection()
                .map_or("null".into(), |v| format!("{v:.3}"))
        )
    }

    /// Lines for a person.
    pub fn table(&self, threads: usize) -> String {
        format!(
            "connect ({}): {threads} threads: {:.0} connections/s; connect to hello p50 {} µs, p99 {} µs{}\n",
            if self.tls { "TLS" } else { "clear text" },
            self.per_s,
            self.open_us[0],
            self.open_us[1],
            self.cpu_ms_per_connection()
                .map_or(String::new(), |v| format!("; server CPU {v:.3} ms a connection"))
        )
    }

    fn cpu_ms_per_connection(&self) -> Option<f64> {
        let cpu = self.server_cpu_s?;
        (self.count > 0).then(|| cpu * 1000.0 / self.count as f64)
    }
}

/// Opens connections from `threads` threads for `duration`.
pub fn run(
    target: &Fila,
    threads: usize,
    duration: Duration,
    server_pid: Option<u32>,
) -> Result<Connects, String> {
    let options = target.options();
    // Fail early and clearly (a wrong CA, a refused token).
    fila_client::Client::connect(options.clone())
        .and_then(|mut c| c.hello())
        .map_err(|e| e.to_string())?;
    let count = AtomicU64::new(0);
    let cpu_before = server_pid.and_then(|p| proc_stats(p).map(|s| s.cpu_s));
    let started = Instant::now();
    let deadline = started + duration;
    let mut hist = histogram();
    std::thread::scope(|scope| -> Result<(), String> {
        let workers: Vec<_> = (0..threads.max(1))
            .map(|_| {
                let (options, count) = (options.clone(), &count);
                scope.spawn(move || -> Result<_, String> {
                    let mut h = histogram();
                    while Instant::now() < deadline {
                        let at = Instant::now();
                        let mut c = fila_client::Client::connect(options.clone())
                            .map_err(|e| e.to_string())?;
                        c.hello().map_err(|e| e.to_string())?;
                        record(&mut h, at.elapsed().as_micros() as u64);
                        drop(c);
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(h)
                })
            })
            .collect();
        for w in workers {
            let h = w.join().map_err(|_| "a connect thread panicked")??;
            hist.add(h).map_err(|e| e.to_string())?;
        }
        Ok(())
    })?;
    let secs = started.elapsed().as_secs_f64();
    let cpu_after = server_pid.and_then(|p| proc_stats(p).map(|s| s.cpu_s));
    let count = count.load(Ordering::Relaxed);
    Ok(Connects {
        per_s: count as f64 / secs,
        count,
        open_us: [
            hist.value_at_percentile(50.0),
            hist.value_at_percentile(99.0),
        ],
        server_cpu_s: cpu_before.zip(cpu_after).map(|(b, a)| a - b),
        tls: options.tls.is_some(),
    })
}
