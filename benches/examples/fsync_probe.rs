//! How many `fdatasync`s a second the disk under a directory takes: appends
//! 4 KiB and syncs, again and again, for a few seconds. The figure that a
//! durable log's group commit amortises.
//!
//! `cargo run --release -p fila-benches --example fsync_probe -- [DIR] [SECONDS]`

use std::io::Write;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = args
        .first()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let seconds: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    let path = dir.join(format!("fila-fsync-probe-{}", std::process::id()));
    let mut f = std::fs::File::create(&path).expect("create the probe file");
    let block = vec![0x5Au8; 4096];
    let started = Instant::now();
    let mut syncs = 0u64;
    let mut slowest = Duration::ZERO;
    while started.elapsed() < Duration::from_secs(seconds) && syncs < 10_000_000 {
        f.write_all(&block).expect("write");
        let t = Instant::now();
        f.sync_data().expect("fdatasync");
        slowest = slowest.max(t.elapsed());
        syncs += 1;
        if syncs.is_multiple_of(4096) {
            // Keep the file small: start it again.
            f.set_len(0).expect("truncate");
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    drop(f);
    let _ = std::fs::remove_file(&path);
    println!(
        "{}: {syncs} fdatasyncs of 4 KiB appends in {elapsed:.1} s = {:.0}/s, mean {:.1} µs, slowest {:.1} ms",
        dir.display(),
        syncs as f64 / elapsed,
        elapsed * 1e6 / syncs as f64,
        slowest.as_secs_f64() * 1e3
    );
}
