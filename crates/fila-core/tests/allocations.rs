//! Heap allocations of the engine's hot path at steady state, counted with
//! a counting global allocator: a put of 20 messages, a receive of 20 and a
//! delete of 20, through the in-process `Engine` API, after a warm-up that
//! grows every slab, ring and vector to its working size: none per message
//! and one per request (docs/benchmarks.md "Allocations on the hot path"),
//! so a change that adds allocations fails here.

// A global allocator is an unsafe trait; this test's one exception to the
// workspace's `unsafe_code = "deny"`, forwarding to the system allocator.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use bytes::Bytes;
use fila_core::*;

struct Counting;

thread_local! {
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// only addition is a thread-local counter bump, which does not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations made on this thread by `f`.
fn count<T>(f: impl FnOnce() -> T) -> (u64, T) {
    let before = COUNT.with(Cell::get);
    let out = f();
    (COUNT.with(Cell::get) - before, out)
}

#[test]
fn a_put_receive_and_delete_of_20_allocate_once_a_request() {
    steady_state(None, [1, 1, 1]);
}

#[test]
fn messages_on_a_channel_allocate_nothing_more_per_message() {
    // The engine looks a channel up by the caller's name and keeps one
    // shared copy of it. Here the channel empties at every delete and is
    // made again by the next put: its name is that put's one more
    // allocation (its slot and ring are reused).
    steady_state(Some("tenant-7"), [2, 1, 1]);
}

/// Asserts the worst allocation counts of a put, receive and delete of 20
/// at steady state (on `channel` when given) are at most `bounds`.
fn steady_state(channel: Option<&str>, bounds: [u64; 3]) {
    let clock = ManualClock::new(1_700_000_000_000);
    let engine = Engine::new(1, Arc::new(clock.clone()));
    engine.create_queue("q", QueueSettings::default()).unwrap();
    let payload = Bytes::from(vec![7u8; 100]);
    let batch = || -> Vec<NewMessage> {
        (0..20)
            .map(|_| NewMessage {
                channel: channel.map(str::to_owned),
                ..NewMessage::new(payload.clone())
            })
            .collect()
    };
    let opts = ReceiveOptions::now(20);
    let cycle = |engine: &Engine| -> [u64; 3] {
        let b = batch();
        let (put, acks) = count(|| engine.put("q", b).unwrap());
        assert!(acks.iter().all(Result::is_ok));
        let (receive, got) = count(|| engine.receive_now(Address::queue("q"), &opts).unwrap());
        assert_eq!(got.len(), 20);
        let receipts: Vec<Receipt> = got.iter().map(|m| m.receipt.unwrap()).collect();
        let (delete, done) = count(|| engine.delete(Address::queue("q"), &receipts).unwrap());
        assert!(done.iter().all(Result::is_ok));
        [put, receive, delete]
    };
    // Warm-up: slabs, rings, wheel and indexes at their working size.
    for _ in 0..200 {
        cycle(&engine);
    }
    let mut worst = [0u64; 3];
    for _ in 0..50 {
        for (w, n) in worst.iter_mut().zip(cycle(&engine)) {
            *w = (*w).max(n);
        }
    }
    let [put, receive, delete] = worst;
    eprintln!("allocations per request of 20 at steady state: put {put}, receive {receive}, delete {delete}");
    // A put copies each payload into a buffer recycled from the shard's
    // pool (the buffers the previous cycle's delete gave back; the receiver
    // still held its messages at that delete, and dropped them after), a
    // receive hands out clones of the stored buffers, a delete gives them
    // back: none per message. Each allocates its answer vector.
    assert!(put <= bounds[0], "put of 20: {put} allocations");
    assert!(receive <= bounds[1], "receive of 20: {receive} allocations");
    assert!(delete <= bounds[2], "delete of 20: {delete} allocations");
}
