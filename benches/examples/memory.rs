//! Bytes per resident message: puts N messages with 100-byte payloads into
//! one queue and reports what the engine allocated for them, counted by a
//! wrapping global allocator, and how much the resident set grew.
//!
//! `cargo run --release -p fila-benches --example memory -- 1000000 10000000`
//! (`-- --dedup 1000000`: bytes per remembered deduplication id instead;
//! `-- --groups 1000000`: what a message in a group and a group cost;
//! `-- --attempts 100000`: what a message's failed attempts cost)
//!
//! The engine copies every payload it stores (a stored message owns exactly
//! its bytes), so both figures count one 100-byte copy per message as
//! payload and report what is allocated beyond it. Then the queue is
//! deleted, and what stays allocated and resident is reported too: the
//! engine gives its message slots back.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use fila_benches::engine_with_queues;
use fila_core::NewMessage;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged and only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same layout contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        // SAFETY: as for `dealloc` and `alloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Resident set size in bytes, from /proc (0 where there is none).
fn rss() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4096)
}

struct Figures {
    allocated: f64,
    resident: f64,
    /// After deleting the queue: bytes still allocated and resident,
    /// beyond what was there before the puts, per message that was stored.
    allocated_after_delete: f64,
    resident_after_delete: f64,
    /// How long the delete took (one call, its shard held throughout).
    delete_ms: f64,
}

/// Puts `n` messages of `payload` into `queue`, 20 a request.
fn put_copies(engine: &fila_core::Engine, queue: &str, payload: &Bytes, n: usize) {
    let mut left = n;
    while left > 0 {
        let k = left.min(20);
        let batch = (0..k).map(|_| NewMessage::new(payload.clone())).collect();
        for answer in engine.put(queue, batch).expect("put") {
            answer.expect("every put fits");
        }
        left -= k;
    }
}

fn measure(n: usize) -> Figures {
    let (engine, queues) = engine_with_queues(1);
    let queue = &queues[0];
    let template = Bytes::from(vec![0x5Au8; 100]);
    let before = LIVE.load(Ordering::Relaxed);
    let rss_before = rss();
    put_copies(&engine, queue, &template, n);
    let after = LIVE.load(Ordering::Relaxed);
    let rss_after = rss();
    let payload_bytes = 100 * n;
    let stats = engine.stats(queue).unwrap();
    assert_eq!(stats.visible as usize, n);
    let began = std::time::Instant::now();
    engine.delete_queue(queue).expect("delete");
    let delete_ms = began.elapsed().as_secs_f64() * 1e3;
    let deleted = LIVE.load(Ordering::Relaxed);
    let rss_deleted = rss();
    let per = |bytes: usize| bytes as f64 / n as f64;
    Figures {
        allocated: per(after - before - payload_bytes),
        resident: per(rss_after.saturating_sub(rss_before + payload_bytes)),
        allocated_after_delete: per(deleted.saturating_sub(before)),
        resident_after_delete: per(rss_deleted.saturating_sub(rss_before)),
        delete_ms,
    }
}

/// Bytes allocated per remembered deduplication id: `n` puts with ids of
/// 36 bytes (a UUID's text), then a purge (which keeps the ids) frees
/// the messages; what stays is the table.
fn measure_dedup(n: usize) -> (f64, f64) {
    let (engine, queues) = engine_with_queues(1);
    let queue = &queues[0];
    let before = LIVE.load(Ordering::Relaxed);
    let rss_before = rss();
    let mut next = 0usize;
    while next < n {
        let k = (n - next).min(20);
        let batch = (next..next + k)
            .map(|i| {
                let mut m = NewMessage::new(Bytes::new());
                m.dedup_id = Some(format!("{i:036}"));
                m
            })
            .collect();
        for answer in engine.put(queue, batch).expect("put") {
            answer.expect("every put fits");
        }
        next += k;
    }
    engine
        .purge(fila_core::Address::queue(queue))
        .expect("purge");
    engine.tick();
    let stats = engine.stats(queue).unwrap();
    assert_eq!((stats.visible, stats.dedup_entries), (0, n as u64));
    let per = |bytes: usize| bytes as f64 / n as f64;
    (
        per(LIVE.load(Ordering::Relaxed).saturating_sub(before)),
        per(rss().saturating_sub(rss_before)),
    )
}

/// Bytes allocated per message, beyond its 100-byte payload, for `n`
/// messages in groups of `per_group` (0: no group) with 10-byte keys.
fn measure_grouped(n: usize, per_group: usize) -> f64 {
    let (engine, queues) = engine_with_queues(1);
    let queue = &queues[0];
    let template = Bytes::from(vec![0x5Au8; 100]);
    let before = LIVE.load(Ordering::Relaxed);
    let mut next = 0usize;
    while next < n {
        let k = (n - next).min(20);
        let batch = (next..next + k)
            .map(|i| {
                let mut m = NewMessage::new(template.clone());
                m.group = i.checked_div(per_group).map(|g| format!("g{g:09}"));
                m
            })
            .collect();
        for answer in engine.put(queue, batch).expect("put") {
            answer.expect("every put fits");
        }
        next += k;
    }
    let stats = engine.stats(queue).unwrap();
    let groups = if per_group == 0 {
        0
    } else {
        n.div_ceil(per_group)
    };
    assert_eq!((stats.visible, stats.groups), (n as u64, groups as u64));
    (LIVE.load(Ordering::Relaxed) - before - 100 * n) as f64 / n as f64
}

/// Bytes allocated per message for `n` messages that each failed once
/// (leased and released as failed, with a reason of `reason` bytes), and
/// for `n` that each failed twice: what a message's first failed attempt
/// costs (its history made) and what a later one adds.
fn measure_attempts(n: usize, reason: usize) -> (f64, f64) {
    let (engine, queues) = engine_with_queues(1);
    let queue = &queues[0];
    let template = Bytes::from(vec![0x5Au8; 100]);
    let why = "r".repeat(reason);
    put_copies(&engine, queue, &template, n);
    let fail_all = || {
        let opts = fila_core::ReceiveOptions::now(20);
        let mut failed = 0;
        while failed < n {
            let got = engine
                .receive_now(fila_core::Address::queue(queue), &opts)
                .expect("receive");
            let receipts: Vec<_> = got.iter().filter_map(|m| m.receipt).collect();
            failed += receipts.len();
            engine
                .release(fila_core::Address::queue(queue), &receipts, &why, "")
                .expect("release");
        }
    };
    let before = LIVE.load(Ordering::Relaxed);
    fail_all();
    let once = LIVE.load(Ordering::Relaxed);
    fail_all();
    let twice = LIVE.load(Ordering::Relaxed);
    let per = |bytes: usize| bytes as f64 / n as f64;
    (per(once - before), per(twice - once))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `--attempts N`: a failed attempt's bytes.
    if args.first().map(String::as_str) == Some("--attempts") {
        let n: usize = args.get(1).map_or(100_000, |a| a.parse().expect("a count"));
        for reason in [0, 32] {
            let (first, next) = measure_attempts(n, reason);
            println!(
                "{n} messages, a reason of {reason} bytes: the first failed attempt {first:.1} \
                 bytes allocated per message, each later one {next:.1} more"
            );
        }
        return;
    }
    // `--groups N`: a grouped message's and a group's bytes.
    if args.first().map(String::as_str) == Some("--groups") {
        let n: usize = args
            .get(1)
            .map_or(1_000_000, |a| a.parse().expect("a count"));
        let plain = measure_grouped(n, 0);
        let shared = measure_grouped(n, 100);
        let own = measure_grouped(n, 1);
        println!("{n} messages, bytes allocated per message beyond the payload:");
        println!("  no group {plain:.1}; 100 a group {shared:.1}; each its own group {own:.1}");
        println!(
            "  a grouped message costs {:.1} more; a group (10-byte key) {:.1}",
            shared - plain,
            own - shared
        );
        return;
    }
    // `--dedup N`: bytes per remembered deduplication id.
    if args.first().map(String::as_str) == Some("--dedup") {
        let n: usize = args
            .get(1)
            .map_or(1_000_000, |a| a.parse().expect("a count"));
        let (allocated, resident) = measure_dedup(n);
        println!(
            "{n} deduplication ids: {allocated:.1} bytes allocated, {resident:.1} resident per id"
        );
        return;
    }
    // Each measurement runs in a fresh process, so that memory freed by one
    // cannot be reused by the next and hide from the resident figure.
    if args.first().map(String::as_str) == Some("--one") {
        let n: usize = args[1].parse().expect("a message count");
        let f = measure(n);
        println!(
            "{:.1} {:.1} | {:.1} {:.1} | {:.0}",
            f.allocated, f.resident, f.allocated_after_delete, f.resident_after_delete, f.delete_ms
        );
        return;
    }
    let ns: Vec<usize> = args
        .iter()
        .map(|a| a.parse().expect("message counts"))
        .collect();
    let ns = if ns.is_empty() { vec![1_000_000] } else { ns };
    let me = std::env::current_exe().expect("own path");
    let one = |n: usize| -> String {
        let out = std::process::Command::new(&me)
            .args(["--one", &n.to_string()])
            .output()
            .expect("run a measurement");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .expect("utf-8")
            .trim()
            .to_owned()
    };
    println!(
        "{:>10} | {:>14} | {:>20} | delete ms",
        "messages", "stored: alloc RSS", "after delete: alloc RSS"
    );
    for n in ns {
        println!("{n:>10} | {}", one(n));
    }
    println!("stored: bytes per message beyond its 100-byte payload copy; alloc = bytes");
    println!("the engine asked the allocator for (capacity included), RSS = resident growth;");
    println!("after delete: what stays, per message that was stored; delete ms: how long");
    println!("deleting the queue took (one call: its shard serves nothing else meanwhile)");
}
