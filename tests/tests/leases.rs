//! Issue 37: a receive waiting on a queue whose only message is leased is
//! answered when the lease ends, not when something else wakes the loop.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fila_client::{Client, ReceiveRef, SettingsPatch};
use fila_core::{Clock, ManualClock, SystemClock};
use fila_tests::TestServer;

fn receive(
    c: &mut Client,
    queue: &str,
    visibility_ms: Option<u64>,
    wait_ms: u64,
) -> Vec<fila_client::Message> {
    c.receive_with(ReceiveRef {
        queue,
        dlq: false,
        max_messages: 1,
        visibility_ms,
        wait_ms: Some(wait_ms),
        channel: None,
        fields: fila_proto::Fields::ALL,
    })
    .expect("the receive")
}

/// The cause, on a manual clock: the loop ran the lease's end among its
/// timers, which served the parked receive into its connection's output,
/// and then slept without writing it out (until the next request, the
/// once-a-second housekeeping, or here — none — the next timer, the new
/// lease's end a minute away). One loop, one shard, no housekeeping.
#[test]
fn a_parked_receive_served_by_a_lease_end_is_written_before_the_loop_sleeps() {
    let clock = ManualClock::new(1_800_000_000_000);
    let s = TestServer::with_clock(Arc::new(clock.clone()), |c| {
        c.shards = 1;
        c.event_loops = 1;
        c.idle_timeout_secs = 0;
    });
    let mut c = s.client();
    c.create_queue("q", SettingsPatch::default()).unwrap();
    c.put_one("q", "only").unwrap();
    let leased = receive(&mut c, "q", Some(50), 0);
    assert_eq!(leased.len(), 1);
    let (tx, rx) = mpsc::channel();
    let addr = s.addr;
    let waiter = std::thread::spawn(move || {
        let mut c = Client::connect(fila_client::ClientOptions::new(addr.to_string())).unwrap();
        tx.send(receive(&mut c, "q", Some(60_000), 30_000)).unwrap();
    });
    s.wait_parked(1);
    // The lease ends; the loop sleeps until then (50 ms by this clock, in
    // real time) and runs it.
    clock.advance(50);
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the waiting receive was answered when the lease ended");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, leased[0].id);
    assert_eq!(got[0].delivery_count, 2);
    waiter.join().unwrap();
}

/// Through the real server on the system clock: for leases of 0.5, 1.1,
/// 2.5, 3 and 7 s (each on a queue of its own, all at once), a receive
/// waiting for the leased message is answered within 50 ms of the lease's
/// end, by the server's own clock (the answer's `next_visible_at_ms`),
/// and not before it.
#[test]
fn a_waiting_receive_gets_the_message_within_50_ms_of_its_lease_end() {
    let s = TestServer::start();
    let leases = [500u64, 1_100, 2_500, 3_000, 7_000];
    let mut c = s.client();
    for ms in leases {
        let q = format!("lease-{ms}");
        c.create_queue(&q, SettingsPatch::default()).unwrap();
        c.put_one(&q, "only").unwrap();
    }
    let threads: Vec<_> = leases
        .iter()
        .map(|&ms| {
            let addr = s.addr;
            std::thread::spawn(move || {
                let q = format!("lease-{ms}");
                let mut c =
                    Client::connect(fila_client::ClientOptions::new(addr.to_string())).unwrap();
                let leased = receive(&mut c, &q, Some(ms), 0);
                let ends = leased[0].next_visible_at_ms;
                let again = receive(&mut c, &q, Some(60_000), 20_000);
                let at = SystemClock.now_ms();
                assert_eq!(again.len(), 1, "{ms} ms: the wait ended empty");
                (ms, ends, at)
            })
        })
        .collect();
    let started = Instant::now();
    for t in threads {
        let (ms, ends, at) = t.join().unwrap();
        assert!(
            at >= ends,
            "{ms} ms: answered {} ms before the lease ended",
            ends - at
        );
        assert!(
            at - ends <= 50,
            "{ms} ms: answered {} ms after the lease ended",
            at - ends
        );
    }
    assert!(started.elapsed() < Duration::from_secs(20));
}
