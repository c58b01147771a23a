//! Issue 6: what a hostile or careless client could do before, each refused
//! now. Every test runs against a real server on 127.0.0.1.

use fila_client::{ErrorCode, PutEntry, SettingsPatch, RECEIPT_LEN};
use fila_tests::TestServer;

/// Offsets inside a receipt (docs/protocol.md, "Receipts").
const SLOT: std::ops::Range<usize> = 9..13;
const GENERATION: std::ops::Range<usize> = 13..21;
const TAG: std::ops::Range<usize> = 24..32;

#[test]
fn forged_receipts_never_end_a_lease() {
    let s = TestServer::start();
    let mut c = s.client();
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    let entries = (0..100)
        .map(|_| PutEntry {
            payload: bytes::Bytes::from_static(b"m"),
            ..PutEntry::default()
        })
        .collect::<Vec<_>>();
    assert!(c
        .put_many("jobs", entries)
        .unwrap()
        .iter()
        .all(|a| a.is_ok()));
    // Another consumer holds 99 leases; the forger holds one.
    let mut victim = s.client();
    let mut theirs = Vec::new();
    while theirs.len() < 99 {
        let want = (99 - theirs.len()).min(20) as u8;
        theirs.extend(victim.receive("jobs", want, Some(0)).unwrap());
    }
    let mine = c.receive("jobs", 1, Some(0)).unwrap();
    let template = mine[0].receipt.unwrap();
    assert_eq!(template.len(), RECEIPT_LEN);

    let mut forged = Vec::with_capacity(100_000);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for slot in 0u32..501 {
        for generation in 1u64..=100 {
            let mut r = template;
            r[SLOT].copy_from_slice(&slot.to_be_bytes());
            r[GENERATION].copy_from_slice(&generation.to_be_bytes());
            if r == template || forged.len() == 100_000 {
                continue; // the forger's real receipt is no forgery
            }
            forged.push(r); // the forger's own tag
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            r[TAG].copy_from_slice(&x.to_be_bytes()); // a random tag
            forged.push(r);
        }
    }
    assert_eq!(forged.len(), 100_000);
    let mut succeeded = 0;
    for batch in forged.chunks(20) {
        for entry in c.delete("jobs", batch).unwrap() {
            match entry {
                Ok(()) => succeeded += 1,
                Err(e) => assert_eq!(e.code(), Some(ErrorCode::RECEIPT_INVALID)),
            }
        }
    }
    assert_eq!(succeeded, 0, "a forged receipt ended a lease");
    let stats = c.stats("jobs").unwrap();
    assert_eq!(
        (stats.in_flight, stats.deletes),
        (100, 0),
        "nothing changed"
    );
    // The real receipts still work.
    let receipts: Vec<_> = theirs.iter().map(|m| m.receipt.unwrap()).collect();
    for batch in receipts.chunks(20) {
        assert!(victim
            .delete("jobs", batch)
            .unwrap()
            .iter()
            .all(|e| e.is_ok()));
    }
    assert!(c.delete("jobs", &[template]).unwrap()[0].is_ok());
}

#[test]
fn a_receipt_from_an_earlier_run_is_refused() {
    let first = TestServer::start();
    let mut c = first.client();
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    c.put_one("jobs", "m").unwrap();
    let old = c.receive("jobs", 1, Some(0)).unwrap()[0].receipt.unwrap();
    first.stop();

    // Same queue, same slot, same generation on a new run.
    let second = TestServer::start();
    let mut c = second.client();
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    c.put_one("jobs", "m").unwrap();
    let new = c.receive("jobs", 1, Some(0)).unwrap()[0].receipt.unwrap();
    assert_eq!(old[SLOT], new[SLOT]);
    assert_eq!(old[GENERATION], new[GENERATION]);
    let e = c.delete("jobs", &[old]).unwrap().remove(0).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::RECEIPT_INVALID));
    assert_eq!(c.stats("jobs").unwrap().in_flight, 1);
    assert!(c.delete("jobs", &[new]).unwrap()[0].is_ok());
}

// ----- helpers for raw connections ------------------------------------------

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use fila_client::{QueueRef, Receive, Request, Response};
use fila_proto::{split_frame, FRAME_LEN_LIMIT};
use fila_server::auth::{Grant, Permission};

fn q(name: &str) -> QueueRef {
    QueueRef {
        name: name.into(),
        dlq: false,
    }
}

fn receive(queue: &str, wait_ms: u64, visibility_ms: Option<u64>) -> Request {
    Request::Receive(Receive {
        queue: q(queue),
        max_messages: 1,
        visibility_ms,
        wait_ms: Some(wait_ms),
        channel: None,
        fields: Default::default(),
    })
}

fn frames(reqs: impl IntoIterator<Item = (u64, Request)>) -> BytesMut {
    let mut out = BytesMut::new();
    for (id, r) in reqs {
        r.encode(id, &mut out);
    }
    out
}

/// Reads answers from a raw socket until `n` came or 10 s passed.
fn read_answers(raw: &mut TcpStream, n: usize) -> Vec<(u64, Response)> {
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = BytesMut::new();
    let mut chunk = vec![0u8; 64 << 10];
    let mut got = Vec::new();
    while got.len() < n {
        if let Some((h, body)) = split_frame(&mut buf, FRAME_LEN_LIMIT).unwrap() {
            got.push((h.request_id, Response::decode(&h, body).unwrap()));
            continue;
        }
        match raw.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
        }
    }
    got
}

/// Whether the server closed the socket within 10 s (reading and dropping
/// whatever else it sends).
fn closed_by_server(raw: &mut TcpStream) -> bool {
    raw.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut b = [0u8; 4096];
    while Instant::now() < deadline {
        match raw.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return true,
        }
    }
    false
}

/// Waits (10 s at most) for a condition the server reaches on its own.
fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::yield_now();
    }
}

fn code_of(r: &Response) -> ErrorCode {
    match r {
        Response::Error(e) => e.code,
        other => panic!("expected an error, got {other:?}"),
    }
}

// ----- memory -----------------------------------------------------------------

#[test]
fn attribute_bytes_count_against_max_bytes_on_the_wire() {
    let s = TestServer::start();
    let mut c = s.client();
    c.create_queue(
        "small",
        SettingsPatch {
            max_bytes: Some(1024),
            ..SettingsPatch::default()
        },
    )
    .unwrap();
    let entry = PutEntry {
        payload: Bytes::from_static(b"x"),
        attributes: (0..16)
            .map(|i| (format!("k{i:02}"), "v".repeat(500)))
            .collect(),
        ..PutEntry::default()
    };
    for _ in 0..40 {
        let r = c.put("small", vec![entry.clone()]).unwrap().remove(0);
        assert_eq!(r.unwrap_err().code(), Some(ErrorCode::QUEUE_FULL));
    }
    assert_eq!(c.stats("small").unwrap().bytes, 0);
}

#[test]
fn late_answers_of_parked_receives_stay_within_the_output_cap() {
    let cap = fila_server::OUTPUT_BYTES_MIN;
    let s = TestServer::with(|c| c.max_output_bytes = cap);
    let mut c = s.client();
    c.create_queue(
        "big",
        SettingsPatch {
            max_message_bytes: Some(1 << 20),
            max_deliveries: Some(0),
            ..SettingsPatch::default()
        },
    )
    .unwrap();
    // 1 000 quick-look long polls, never read.
    let mut greedy = TcpStream::connect(s.addr).unwrap();
    let reqs = (1..=1000u64).map(|id| (id, receive("big", 20_000, Some(0))));
    greedy.write_all(&frames(reqs)).unwrap();
    // Only those whose answers fit are taken in: the rest wait unread.
    s.wait_parked(1);
    let mut parked_seen = 0;
    for _ in 0..30 {
        // Each put answers every parked quick look with the same 1 MiB.
        c.put_one("big", Bytes::from(vec![5u8; 1 << 20])).unwrap();
        parked_seen = parked_seen.max(s.server().metrics().parked.load(Ordering::Acquire));
    }
    assert!(
        parked_seen < 10,
        "{parked_seen} receives parked within a {cap}-byte cap"
    );
    let high = s
        .server()
        .metrics()
        .output_high_water
        .load(Ordering::Acquire);
    assert!(
        high > 0 && high as usize <= cap,
        "{high} answer bytes held for one connection"
    );
    // Pipelined peeks of 1 MiB messages are cut to the room too.
    let mut peeker = TcpStream::connect(s.addr).unwrap();
    let peek = Request::Peek {
        queue: q("big"),
        from_seq: 0,
        max_messages: 100,
        fields: fila_client::Fields::ALL,
    };
    peeker
        .write_all(&frames((1..=20u64).map(|id| (id, peek.clone()))))
        .unwrap();
    let answers = read_answers(&mut peeker, 20);
    assert_eq!(answers.len(), 20, "every peek is answered once read");
    let high = s
        .server()
        .metrics()
        .output_high_water
        .load(Ordering::Acquire);
    assert!(
        high as usize <= cap,
        "{high} answer bytes held for one connection"
    );
    drop(greedy);
    healthy(&s);
}

fn healthy(s: &TestServer) {
    let mut c = s.client();
    assert!(c.list_queues("").is_ok(), "another client is served");
}

#[test]
fn parked_receives_are_bounded_per_connection_and_per_server() {
    let s = TestServer::with(|c| {
        c.max_parked_per_connection = 10;
        c.max_parked = 15;
    });
    s.client()
        .create_queue("q", SettingsPatch::default())
        .unwrap();
    let mut a = TcpStream::connect(s.addr).unwrap();
    a.write_all(&frames(
        (1..=11u64).map(|id| (id, receive("q", 30_000, None))),
    ))
    .unwrap();
    let refused = read_answers(&mut a, 1);
    assert_eq!(refused[0].0, 11, "the eleventh receive is answered at once");
    assert_eq!(code_of(&refused[0].1), ErrorCode::RESOURCE_EXHAUSTED);
    s.wait_parked(10);
    let mut b = TcpStream::connect(s.addr).unwrap();
    b.write_all(&frames(
        (1..=6u64).map(|id| (id, receive("q", 30_000, None))),
    ))
    .unwrap();
    let refused = read_answers(&mut b, 1);
    assert_eq!(refused[0].0, 6, "the sixteenth on the server is refused");
    assert_eq!(code_of(&refused[0].1), ErrorCode::RESOURCE_EXHAUSTED);
    assert_eq!(s.server().metrics().parked.load(Ordering::Acquire), 15);
    // Closing a gives its places back.
    drop(a);
    eventually("a's receives are cancelled", || {
        s.server().metrics().parked.load(Ordering::Acquire) == 5
    });
}

#[test]
fn closing_a_connection_cancels_every_parked_receive_even_with_one_request_id() {
    let s = TestServer::start();
    let mut c = s.client();
    // Small messages: 100 parked receives' answers fit the output room.
    let small = SettingsPatch {
        max_message_bytes: Some(1024),
        ..SettingsPatch::default()
    };
    c.create_queue("q", small).unwrap();
    let mut raw = TcpStream::connect(s.addr).unwrap();
    raw.write_all(&frames(
        (0..100).map(|_| (5u64, receive("q", 30_000, None))),
    ))
    .unwrap();
    s.wait_parked(100);
    c.put_one("q", "first").unwrap();
    let answered = read_answers(&mut raw, 1);
    assert_eq!(answered[0].0, 5);
    assert!(matches!(&answered[0].1, Response::Messages(m) if m.len() == 1));
    drop(raw);
    eventually("the other 99 receives are cancelled", || {
        s.server().metrics().parked.load(Ordering::Acquire) == 0
    });
    // Messages put now go to whoever asks, not to a closed connection.
    c.put_one("q", "second").unwrap();
    let got = c.receive("q", 1, Some(0)).unwrap();
    assert_eq!(&got[0].payload[..], b"second");
}

// ----- fairness, connections --------------------------------------------------

#[test]
fn a_pipelining_client_does_not_starve_others_on_its_loop() {
    let s = TestServer::with(|c| c.event_loops = 1);
    let addr = s.addr;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flooding = stop.clone();
    // Hellos as fast as the server answers them, read as they come.
    let flood = std::thread::spawn(move || {
        let mut raw = TcpStream::connect(addr).unwrap();
        let mut reader = raw.try_clone().unwrap();
        let reading = flooding.clone();
        let r = std::thread::spawn(move || {
            let mut b = vec![0u8; 1 << 16];
            reader
                .set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            while !reading.load(Ordering::Acquire) {
                let _ = reader.read(&mut b);
            }
        });
        let batch = frames((0..512u64).map(|id| {
            (
                id,
                Request::Hello {
                    client: "flood".into(),
                    max_version: None,
                },
            )
        }));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !flooding.load(Ordering::Acquire) && Instant::now() < deadline {
            if raw.write_all(&batch).is_err() {
                break;
            }
        }
        flooding.store(true, Ordering::Release);
        r.join().unwrap();
    });
    let mut c = s.client();
    let started = Instant::now();
    let mut done = 0;
    while done < 200 && started.elapsed() < Duration::from_secs(20) {
        c.hello().unwrap();
        done += 1;
    }
    stop.store(true, Ordering::Release);
    flood.join().unwrap();
    assert_eq!(
        done, 200,
        "another client completed {done} requests in 20 s"
    );
}

#[test]
fn a_connection_over_max_connections_gets_an_error_frame() {
    let s = TestServer::with(|c| c.max_connections = 2);
    let _a = s.client();
    let _b = s.client();
    let mut third = TcpStream::connect(s.addr).unwrap();
    let answer = read_answers(&mut third, 1);
    assert_eq!(answer.len(), 1, "an answer, not a silent close");
    assert_eq!(code_of(&answer[0].1), ErrorCode::RESOURCE_EXHAUSTED);
    assert!(closed_by_server(&mut third));
}

// ----- authentication ----------------------------------------------------------

fn with_tokens() -> TestServer {
    TestServer::with(|c| {
        c.auth_timeout_secs = 1;
        c.tokens.add(
            "admin".into(),
            vec![Grant::new(
                "*",
                &[Permission::Send, Permission::Receive, Permission::Manage],
            )],
        );
        c.tokens.add(
            "mine".into(),
            vec![Grant::new(
                "mine-*",
                &[Permission::Send, Permission::Receive, Permission::Manage],
            )],
        );
    })
}

#[test]
fn before_auth_only_small_hello_and_auth_frames_are_taken() {
    let s = with_tokens();
    // A big partial frame before auth is refused at once.
    let mut raw = TcpStream::connect(s.addr).unwrap();
    let mut big = BytesMut::new();
    Request::Hello {
        client: "x".repeat(10_000),
        max_version: None,
    }
    .encode(1, &mut big);
    raw.write_all(&big[..5_000]).unwrap();
    let answer = read_answers(&mut raw, 1);
    assert_eq!(code_of(&answer[0].1), ErrorCode::FRAME_TOO_LARGE);
    assert!(closed_by_server(&mut raw));
    // Hellos do not keep an unauthenticated connection open.
    let mut idle = TcpStream::connect(s.addr).unwrap();
    let hello = frames([(
        1,
        Request::Hello {
            client: "h".into(),
            max_version: None,
        },
    )]);
    let started = Instant::now();
    let mut open = true;
    while open && started.elapsed() < Duration::from_secs(10) {
        open = idle.write_all(&hello).is_ok() && !read_answers(&mut idle, 1).is_empty();
    }
    assert!(!open, "still open after 10 s of hellos");
    assert!(started.elapsed() >= Duration::from_millis(900));
    // An authenticated connection lives on.
    let mut c = s.client_with_token("admin").unwrap();
    assert!(c.list_queues("").is_ok());
}

#[test]
fn a_failed_auth_leaves_the_connection_unauthenticated_and_three_close_it() {
    let s = with_tokens();
    let mut raw = TcpStream::connect(s.addr).unwrap();
    let auth = |t: &str| Request::Auth { token: t.into() };
    let put = Request::Put {
        queue: "mine-a".into(),
        messages: vec![PutEntry::default()],
    };
    raw.write_all(&frames([
        (1, auth("admin")),
        (
            2,
            Request::CreateQueue {
                name: "mine-a".into(),
                settings: SettingsPatch::default(),
            },
        ),
        (3, auth("wrong")),
        (4, put.clone()),
        (5, auth("wrong again")),
        (6, auth("and again")),
        (7, put),
    ]))
    .unwrap();
    // Answers come in the order they finish (a create waits for the log):
    // by request id.
    let mut answers = read_answers(&mut raw, 7);
    answers.sort_by_key(|(id, _)| *id);
    assert!(matches!(answers[0].1, Response::Ok));
    assert!(matches!(answers[1].1, Response::Created(true)));
    assert_eq!(code_of(&answers[2].1), ErrorCode::UNAUTHENTICATED);
    assert_eq!(
        code_of(&answers[3].1),
        ErrorCode::UNAUTHENTICATED,
        "the put after a failed auth is refused"
    );
    assert_eq!(code_of(&answers[4].1), ErrorCode::UNAUTHENTICATED);
    assert_eq!(code_of(&answers[5].1), ErrorCode::UNAUTHENTICATED);
    assert_eq!(answers.len(), 6, "the third failure closes the connection");
    assert!(closed_by_server(&mut raw));
    let mut admin = s.client_with_token("admin").unwrap();
    assert_eq!(admin.stats("mine-a").unwrap().puts, 0);
}

#[test]
fn a_dead_letter_target_needs_send_on_the_target() {
    let s = with_tokens();
    let mut admin = s.client_with_token("admin").unwrap();
    admin
        .create_queue("orders-eu", SettingsPatch::default())
        .unwrap();
    let mut mine = s.client_with_token("mine").unwrap();
    let target = |t: &str| SettingsPatch {
        dead_letter_target: Some(Some(t.into())),
        ..SettingsPatch::default()
    };
    for t in ["orders-eu", "orders-nowhere"] {
        let e = mine.create_queue("mine-a", target(t)).unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::FORBIDDEN), "target {t}");
    }
    mine.create_queue("mine-a", SettingsPatch::default())
        .unwrap();
    let e = mine
        .update_queue("mine-a", target("orders-eu"))
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::FORBIDDEN));
    mine.create_queue("mine-poison", SettingsPatch::default())
        .unwrap();
    mine.update_queue("mine-a", target("mine-poison")).unwrap();
    assert_eq!(admin.stats("orders-eu").unwrap().puts, 0);
}

// ----- many queues --------------------------------------------------------------

#[test]
fn listing_many_queues_pages_and_never_truncates() {
    let s = TestServer::start();
    let mut c = s.client();
    let names: Vec<String> = (0..2_500).map(|i| format!("q-{i:05}")).collect();
    for n in &names {
        c.create_queue(n, SettingsPatch::default()).unwrap();
    }
    let (page, next) = c.list_queues_page("q-", "", 0).unwrap();
    assert_eq!(page.len(), 1_000);
    assert_eq!(next.as_deref(), Some("q-00999"));
    let (page, next) = c.list_queues_page("q-", "q-00999", 2_000).unwrap();
    assert_eq!(page[0], "q-01000");
    assert_eq!(page.len(), 1_000, "pages hold at most 1 000");
    assert!(next.is_some());
    assert_eq!(c.list_queues("q-").unwrap(), names);
    assert_eq!(c.list_queues("q-024").unwrap().len(), 100);
}

#[test]
fn metrics_list_at_most_metrics_max_queues_and_serve_scrapes_concurrently() {
    let s = TestServer::with(|c| c.metrics_max_queues = 10);
    let mut c = s.client();
    for i in 0..50 {
        c.create_queue(&format!("q{i:02}"), SettingsPatch::default())
            .unwrap();
    }
    let addr = s.server().metrics_addr().unwrap();
    // A scraper that sends one byte and then nothing.
    let mut slow = TcpStream::connect(addr).unwrap();
    slow.write_all(b"G").unwrap();
    let started = Instant::now();
    let mut scrape = TcpStream::connect(addr).unwrap();
    scrape
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    scrape
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    scrape.read_to_string(&mut body).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the scrape waited for the slow one"
    );
    assert_eq!(body.matches("fila_queue_visible{").count(), 10);
    assert!(body.contains("fila_metrics_queues_omitted 40"));
    drop(slow);
}

#[test]
fn receive_deferred_answers_what_fits_the_room_and_leaves_the_rest_deferred() {
    let s = TestServer::with(|c| c.max_output_bytes = fila_server::OUTPUT_BYTES_MIN);
    let mut c = s.client();
    c.create_queue(
        "big",
        SettingsPatch {
            max_message_bytes: Some(1 << 20),
            ..SettingsPatch::default()
        },
    )
    .unwrap();
    let entries = (0..5)
        .map(|_| PutEntry {
            payload: Bytes::from(vec![9u8; 1 << 20]),
            ..PutEntry::default()
        })
        .collect::<Vec<_>>();
    c.put("big", entries).unwrap();
    let mut seqs = Vec::new();
    while seqs.len() < 5 {
        for m in c.receive("big", 5, Some(0)).unwrap() {
            c.defer("big", m.receipt.unwrap()).unwrap();
            seqs.push(m.seq);
        }
    }
    // 4 MiB of room: three 1 MiB messages fit, the other two stay deferred.
    let got = c.receive_deferred("big", &seqs, None).unwrap();
    assert!(got[..3].iter().all(|e| e.is_ok()));
    for e in &got[3..] {
        let e = e.as_ref().unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::RESOURCE_EXHAUSTED));
    }
    assert_eq!(c.stats("big").unwrap().deferred, 2);
    let rest = c.receive_deferred("big", &seqs[3..], None).unwrap();
    assert!(rest.iter().all(|e| e.is_ok()));
    assert_eq!(c.stats("big").unwrap().in_flight, 5);
}

#[test]
fn connections_that_never_authenticate_cannot_keep_a_client_with_a_token_out() {
    let s = TestServer::with(|c| {
        c.max_connections = 8;
        c.tokens
            .add("admin".into(), vec![Grant::new("*", &[Permission::Manage])]);
    });
    // Eight connections that only say hello fill the server.
    let hello = frames([(
        1,
        Request::Hello {
            client: "idle".into(),
            max_version: None,
        },
    )]);
    let mut idle: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut raw = TcpStream::connect(s.addr).unwrap();
            raw.write_all(&hello).unwrap();
            assert_eq!(read_answers(&mut raw, 1).len(), 1, "adopted");
            raw
        })
        .collect();
    // Clients with a token still get in, each in the place of an idle one.
    let mut admins = Vec::new();
    for _ in 0..4 {
        let mut c = s.client_with_token("admin").unwrap();
        assert!(c.list_queues("").is_ok());
        admins.push(c);
    }
    let metrics = s.server().metrics();
    eventually("idle connections make room", || {
        metrics.connections.load(Ordering::Acquire) <= 8
    });
    let gone = |raw: &mut TcpStream| {
        raw.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut b = [0u8; 4096];
        loop {
            match raw.read(&mut b) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(_) => return false,
            }
        }
    };
    let evicted = idle.iter_mut().map(gone).filter(|g| *g).count();
    assert_eq!(evicted, 4, "one idle connection closed per client let in");
}

/// Connections that never send a request cannot hold the metrics
/// endpoint: more idle connections than it takes, and than one address
/// may hold, then every scrape is answered; the idle ones are closed by
/// the head deadline (or made room).
#[test]
fn idle_connections_cannot_keep_scrapes_out_of_the_metrics_endpoint() {
    let s = TestServer::start();
    let addr = s.server().metrics_addr().unwrap();
    let idle: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut t = TcpStream::connect(addr).unwrap();
            let _ = t.write_all(b"G");
            t
        })
        .collect();
    for i in 0..24 {
        let mut scrape = TcpStream::connect(addr).unwrap();
        scrape
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        scrape
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut body = String::new();
        scrape.read_to_string(&mut body).unwrap();
        assert!(body.starts_with("HTTP/1.1 200 OK"), "scrape {i}: {body}");
    }
    let deadline = fila_server::scrape::HEAD_DEADLINE + Duration::from_secs(5);
    for mut t in idle {
        t.set_read_timeout(Some(deadline)).unwrap();
        let mut b = [0u8; 16];
        match t.read(&mut b) {
            Ok(0) => {}
            Err(e)
                if e.kind() != std::io::ErrorKind::WouldBlock
                    && e.kind() != std::io::ErrorKind::TimedOut => {}
            other => panic!("an idle connection was kept: {other:?}"),
        }
    }
}

/// Wrong bearer tokens at the metrics endpoint count as failed
/// authentications of the address: past the free ones it is answered 429
/// at once, whatever it sends.
#[test]
fn guessing_tokens_at_the_metrics_endpoint_gets_the_address_refused() {
    let s = TestServer::with(|c| {
        c.tokens.add(
            "scraper".into(),
            vec![Grant::new("*", &[Permission::Manage])],
        );
    });
    let addr = s.server().metrics_addr().unwrap();
    let scrape = |token: &str| {
        let mut t = TcpStream::connect(addr).unwrap();
        t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = write!(
            t,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n"
        );
        let mut body = String::new();
        let _ = t.read_to_string(&mut body);
        body
    };
    let mut refused = None;
    for i in 0..40 {
        if scrape(&format!("guess-{i}")).starts_with("HTTP/1.1 429") {
            refused = Some(i);
            break;
        }
    }
    let i = refused.expect("refused once it guessed too often");
    assert!(i as u32 >= fila_server::guard::FREE_FAILURES, "after {i}");
    assert!(scrape("scraper").starts_with("HTTP/1.1 429"));
}

/// One producer of big messages on a server whose log syncs every minute
/// (`sync = interval`): its backlog is written as it passes the flush
/// mark, not at the next interval, and another client is answered all the
/// while (a backlog over 64 MiB used to pause every client until the
/// writer's timer came).
#[test]
fn a_producer_of_big_messages_stalls_no_one_on_an_interval() {
    let s = TestServer::with(|c| {
        c.sync = fila_server::Sync::Interval;
        c.sync_interval_ms = 60_000;
    });
    let mut c = s.client();
    c.create_queue(
        "big",
        SettingsPatch {
            max_message_bytes: Some(1 << 20),
            ..SettingsPatch::default()
        },
    )
    .unwrap();
    let addr = s.addr.to_string();
    let started = Instant::now();
    let producer = std::thread::spawn(move || {
        let mut p = fila_client::Client::connect(fila_client::ClientOptions::new(addr)).unwrap();
        let body = Bytes::from(vec![9u8; 1 << 20]);
        for _ in 0..100 {
            p.put_one("big", body.clone()).unwrap();
        }
        started.elapsed()
    });
    let mut slowest = Duration::ZERO;
    while !producer.is_finished() {
        let t = Instant::now();
        c.list_queues("").unwrap();
        slowest = slowest.max(t.elapsed());
        assert!(
            started.elapsed() < Duration::from_secs(50),
            "the producer stalled (waiting for the interval?)"
        );
    }
    let took = producer.join().unwrap();
    assert!(
        took < Duration::from_secs(50),
        "100 MiB took {took:?}: they waited for the interval"
    );
    assert!(
        slowest < Duration::from_secs(10),
        "another client waited {slowest:?}"
    );
}
