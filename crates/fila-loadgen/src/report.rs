//! Latency histograms (HdrHistogram, µs, 3 significant digits), the
//! server's CPU time and memory from /proc, and the final table or JSON.

use hdrhistogram::Histogram;

/// A latency histogram in microseconds, 1 µs to 10 minutes.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds")
}

/// Records `us` (clamped into the histogram's range).
pub fn record(h: &mut Histogram<u64>, us: u64) {
    let _ = h.record(us.clamp(1, 600_000_000));
}

/// The percentiles a report shows.
pub const PERCENTILES: [(&str, f64); 5] = [
    ("p50", 50.0),
    ("p90", 90.0),
    ("p99", 99.0),
    ("p99.9", 99.9),
    ("max", 100.0),
];

/// `h`'s percentiles as a table's words: " p50 X p90 Y ...".
pub fn percentiles_line(h: &Histogram<u64>) -> String {
    values(h)
        .into_iter()
        .map(|(n, v)| format!(" {n} {v}"))
        .collect()
}

/// `h`'s percentiles as a JSON object's members: `"p50":X,"p90":Y,...`.
pub fn percentiles_json(h: &Histogram<u64>) -> String {
    let parts: Vec<String> = values(h)
        .into_iter()
        .map(|(n, v)| format!("\"{n}\":{v}"))
        .collect();
    parts.join(",")
}

fn values(h: &Histogram<u64>) -> Vec<(&'static str, u64)> {
    PERCENTILES
        .iter()
        .map(|(name, q)| {
            let v = if *q >= 100.0 {
                h.max()
            } else {
                h.value_at_percentile(*q)
            };
            (*name, v)
        })
        .collect()
}

/// A process's CPU time (user + system) and resident memory, from /proc.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcStats {
    /// CPU seconds used so far.
    pub cpu_s: f64,
    /// Resident bytes now.
    pub rss_bytes: u64,
}

/// Reads `/proc/PID/stat` and `/proc/PID/status`; `None` when the process
/// is not there (not local, or gone). CPU ticks are taken at 100 a second
/// (Linux's USER_HZ).
pub fn proc_stats(pid: u32) -> Option<ProcStats> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(ProcStats {
        cpu_s: (utime + stime) / 100.0,
        rss_bytes: rss_kib * 1024,
    })
}

/// The outcome of one run.
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// The system's name.
    pub system: String,
    /// A line describing the load.
    pub load: String,
    /// Messages put and acknowledged.
    pub produced: u64,
    /// Messages received (and deleted, in the lifecycle).
    pub consumed: u64,
    /// Seconds from the first put to the last message consumed.
    pub seconds: f64,
    /// Put to receive, from the timestamp in the payload.
    pub end_to_end: Histogram<u64>,
    /// Round trips per operation.
    pub put: Histogram<u64>,
    /// Receive round trips.
    pub receive: Histogram<u64>,
    /// Delete round trips.
    pub delete: Histogram<u64>,
    /// The server's CPU seconds during the run and its peak resident bytes.
    pub server: Option<(f64, u64)>,
}

impl Report {
    /// Messages through the whole lifecycle per second.
    pub fn rate(&self) -> f64 {
        self.consumed as f64 / self.seconds.max(1e-9)
    }

    /// The human table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{} on {}: {}\n{} messages in {:.2} s: {:.0} msg/s ({} put)\n",
            self.scenario,
            self.system,
            self.load,
            self.consumed,
            self.seconds,
            self.rate(),
            self.produced
        );
        out.push_str(&format!(
            "{:<22}{:>10}{:>10}{:>10}{:>10}{:>10}{:>8}\n",
            "latency (µs)", "p50", "p90", "p99", "p99.9", "max", "count"
        ));
        for (name, h) in [
            ("end to end", &self.end_to_end),
            ("put round trip", &self.put),
            ("receive round trip", &self.receive),
            ("delete round trip", &self.delete),
        ] {
            if h.is_empty() {
                continue;
            }
            out.push_str(&format!("{name:<22}"));
            for (_, v) in values(h) {
                out.push_str(&format!("{v:>10}"));
            }
            out.push_str(&format!("{:>8}\n", h.len()));
        }
        if let Some((cpu, rss)) = self.server {
            out.push_str(&format!(
                "server: {cpu:.2} CPU s, {:.2} µs CPU per message, {:.0} messages per CPU second, peak RSS {} MiB\n",
                cpu * 1e6 / self.consumed.max(1) as f64,
                self.consumed as f64 / cpu.max(1e-9),
                rss >> 20
            ));
        }
        out
    }

    /// One JSON object.
    pub fn json(&self) -> String {
        let hist =
            |h: &Histogram<u64>| format!("{{{},\"count\":{}}}", percentiles_json(h), h.len());
        let server = match self.server {
            Some((cpu, rss)) => format!(
                "{{\"cpu_s\":{cpu:.3},\"cpu_us_per_message\":{:.3},\"messages_per_cpu_s\":{:.0},\"peak_rss_bytes\":{rss}}}",
                cpu * 1e6 / self.consumed.max(1) as f64,
                self.consumed as f64 / cpu.max(1e-9)
            ),
            None => "null".into(),
        };
        format!(
            "{{\"scenario\":{},\"system\":{},\"load\":{},\"produced\":{},\"consumed\":{},\"seconds\":{:.3},\"messages_per_s\":{:.0},\"end_to_end_us\":{},\"put_us\":{},\"receive_us\":{},\"delete_us\":{},\"server\":{server}}}",
            json_str(&self.scenario),
            json_str(&self.system),
            json_str(&self.load),
            self.produced,
            self.consumed,
            self.seconds,
            self.rate(),
            hist(&self.end_to_end),
            hist(&self.put),
            hist(&self.receive),
            hist(&self.delete),
        )
    }
}

/// A JSON string literal.
pub fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_what_was_recorded() {
        let mut h = histogram();
        for v in 1..=1000 {
            record(&mut h, v);
        }
        let v = values(&h);
        assert_eq!(v[0], ("p50", 500));
        assert_eq!(v[2], ("p99", 990));
        assert_eq!(v[4], ("max", 1000));
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_str("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }

    #[test]
    fn this_process_has_proc_stats() {
        let s = proc_stats(std::process::id()).expect("/proc of this process");
        assert!(s.rss_bytes > 0);
    }
}
