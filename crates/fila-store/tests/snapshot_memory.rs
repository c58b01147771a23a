//! What a snapshot holds in memory beyond the live data, measured with a
//! byte-counting global allocator: it is written as a stream, a piece at a
//! time, so its high-water mark does not grow with the data (it was about
//! twice the stored bytes: the encoded body, then a copy with its header).
//! The live data here is 48 MiB; the snapshot may add at most 16 MiB.

// A global allocator is an unsafe trait; this test's one exception to the
// workspace's `unsafe_code = "deny"`, forwarding to the system allocator.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fila_core::{Engine, ManualClock, NewMessage, QueueSettings};
use fila_store::{Hooks, Store, StoreOptions};
use fila_wal::FsStorage;

struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);
static PEAK: AtomicI64 = AtomicI64::new(0);

fn grew(by: i64) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// only addition is an atomic count of the bytes held, which does not
// allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size() as i64);
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size as i64 - layout.size() as i64);
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MIB: i64 = 1 << 20;

#[test]
fn a_snapshot_holds_at_most_16_mib_beyond_the_live_data() {
    let dir = std::env::temp_dir().join(format!("fila-snapmem-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let engine = Arc::new(Engine::new(4, clock));
    let options = StoreOptions {
        // Only the snapshot asked for below.
        compact_min_bytes: u64::MAX / 4,
        ..StoreOptions::default()
    };
    let (store, _) = Store::open(
        FsStorage::new(&dir).unwrap(),
        engine.clone(),
        options,
        Hooks::default(),
    )
    .unwrap();
    for q in ["a", "b", "c", "d"] {
        engine.create_queue(q, QueueSettings::default()).unwrap();
    }
    // 48 MiB of payloads, 4 KiB each, over four queues.
    let payload = Bytes::from(vec![7u8; 4 << 10]);
    for i in 0..(48 << 20) / (4 << 10) / 20 {
        let q = ["a", "b", "c", "d"][i % 4];
        let batch = (0..20).map(|_| NewMessage::new(payload.clone())).collect();
        engine.put(q, batch).unwrap();
    }
    // Everything logged is written before the measure starts.
    let marks = store.marks();
    let mark = marks.mark();
    let deadline = Instant::now() + Duration::from_secs(60);
    while marks.durable() < mark {
        assert!(Instant::now() < deadline, "the log never caught up");
        std::thread::yield_now();
    }
    let live = LIVE.load(Ordering::Relaxed);
    assert!(live > 48 * MIB, "{live} bytes live");
    PEAK.store(live, Ordering::Relaxed);
    store.request_snapshot();
    while store.snapshots() == 0 {
        assert!(Instant::now() < deadline, "no snapshot");
        std::thread::yield_now();
    }
    let extra = PEAK.load(Ordering::Relaxed) - live;
    eprintln!(
        "live {} MiB, the snapshot's high-water mark {:.1} MiB beyond it",
        live / MIB,
        extra as f64 / MIB as f64
    );
    assert!(extra <= 16 * MIB, "the snapshot held {extra} bytes more");
    store.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
