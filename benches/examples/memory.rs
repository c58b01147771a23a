//! Bytes per resident message: puts N messages with 100-byte payloads into
//! one queue and reports what the engine allocated for them, counted by a
//! wrapping global allocator (exact, unlike RSS).
//!
//! `cargo run --release -p fila-benches --example memory -- 1000000 10000000`
//!
//! Two figures per N: with one payload buffer shared by every message (the
//! engine's own cost per message, as when payloads are slices of network
//! reads) and with a payload allocated per message (adds the allocator's
//! rounding and the payload buffers' bookkeeping).

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

fn measure(n: usize, shared: bool) -> f64 {
    let (engine, queues) = engine_with_queues(1);
    let queue = &queues[0];
    let template = Bytes::from(vec![0x5Au8; 100]);
    let before = LIVE.load(Ordering::Relaxed);
    let mut left = n;
    while left > 0 {
        let k = left.min(20);
        let batch = (0..k)
            .map(|_| {
                let payload = if shared {
                    template.clone()
                } else {
                    Bytes::from(vec![0x5Au8; 100])
                };
                NewMessage::new(payload)
            })
            .collect();
        for answer in engine.put(queue, batch).expect("put") {
            answer.expect("every put fits");
        }
        left -= k;
    }
    let after = LIVE.load(Ordering::Relaxed);
    let payload_bytes = if shared { 0 } else { 100 * n };
    let per_message = (after - before - payload_bytes) as f64 / n as f64;
    let stats = engine.stats(queue).unwrap();
    assert_eq!(stats.visible as usize, n);
    drop(engine);
    per_message
}

fn main() {
    let ns: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("message counts"))
        .collect();
    let ns = if ns.is_empty() { vec![1_000_000] } else { ns };
    println!(
        "{:>12} {:>26} {:>26}",
        "messages", "bytes/msg (shared payload)", "bytes/msg (own payload)"
    );
    for n in ns {
        let shared = measure(n, true);
        let own = measure(n, false);
        println!("{n:>12} {shared:>26.1} {own:>26.1}");
    }
}
