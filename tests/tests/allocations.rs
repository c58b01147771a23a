//! Heap allocations through a real server do not grow with the number of
//! messages a request carries: a cycle of put / receive / delete of 20
//! messages allocates (server, client and this test together, counted by a
//! counting global allocator) about what a cycle of 1 message does. A stored
//! payload goes into a recycled buffer, an answer is encoded from borrowed
//! views, a client decodes payloads as slices of the frame; anything done
//! per message would add at least 19 a request.

// A global allocator is an unsafe trait; this test's one exception to the
// workspace's `unsafe_code = "deny"`, forwarding to the system allocator.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use fila_proto::SettingsPatch;
use fila_tests::TestServer;

struct Counting;

static COUNT: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the
// only addition is an atomic counter bump, which does not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        COUNT.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        COUNT.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The fewest allocations of one cycle of put / receive / delete of `n`
/// messages, over 30 cycles after 300 of warm-up.
fn per_cycle(client: &mut fila_client::Client, queue: &str, n: usize) -> u64 {
    let payloads: Vec<Bytes> = (0..n).map(|_| Bytes::from(vec![7u8; 100])).collect();
    let mut cycle = || -> u64 {
        let before = COUNT.load(Ordering::Relaxed);
        let acks = client.put_payloads(queue, &payloads).expect("put");
        assert!(acks.iter().all(Result::is_ok));
        let got = client.receive(queue, n as u8, Some(0)).expect("receive");
        assert_eq!(got.len(), n);
        let receipts: Vec<_> = got.iter().map(|m| m.receipt.expect("leased")).collect();
        let done = client.delete(queue, &receipts).expect("delete");
        assert!(done.iter().all(Result::is_ok));
        drop((acks, got, receipts, done));
        COUNT.load(Ordering::Relaxed) - before
    };
    for _ in 0..300 {
        cycle();
    }
    // The fewest: other threads (the log writer) may allocate now and
    // then; what a cycle itself costs is its floor.
    (0..30).map(|_| cycle()).min().expect("cycles ran")
}

#[test]
fn allocations_through_the_server_do_not_grow_with_the_messages_of_a_request() {
    let s = TestServer::with(|c| {
        c.event_loops = 1;
        c.shards = 1;
        c.metrics_listen = None;
        c.sqs_listen = None;
        c.azure_listen = None;
        c.console_listen = None;
        c.sync = fila_server::Sync::None;
    });
    let mut client = s.client();
    client
        .create_queue("allocs", SettingsPatch::default())
        .expect("create");
    let one = per_cycle(&mut client, "allocs", 1);
    let twenty = per_cycle(&mut client, "allocs", 20);
    eprintln!(
        "allocations per cycle of put / receive / delete: 1 message {one}, 20 messages {twenty}"
    );
    assert!(
        twenty <= one + 6,
        "20 messages a request allocate {twenty} a cycle, 1 message {one}: something allocates per message"
    );
}
