//! Bad input and bad clients: the server answers clearly or closes the one
//! connection, never falls over, and keeps serving everyone else.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use fila_client::{ErrorCode, QueueRef, Request, Response, SettingsPatch};
use fila_proto::{split_frame, FRAME_LEN_LIMIT};
use fila_tests::TestServer;

/// Reads one answer frame from a raw socket (bounded by a timeout); for a
/// socket that is sent one request at a time.
fn read_answer(raw: &mut TcpStream) -> Option<(u64, Response)> {
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some((h, body)) = split_frame(&mut buf, FRAME_LEN_LIMIT).unwrap() {
            return Some((h.request_id, Response::decode(&h, body).unwrap()));
        }
        match raw.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn closed(raw: &mut TcpStream) -> bool {
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 64];
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        match raw.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
    false
}

fn code(r: &Response) -> ErrorCode {
    match r {
        Response::Error(e) => e.code,
        other => panic!("expected an error, got {other:?}"),
    }
}

fn healthy(s: &TestServer) {
    let mut c = s.client();
    assert!(c.list_queues("").is_ok(), "another client is served");
}

#[test]
fn an_oversized_length_prefix_is_refused_and_the_connection_closed() {
    let s = TestServer::start();
    let mut raw = TcpStream::connect(s.addr).unwrap();
    raw.write_all(&[0xFF, 0xFF, 0xFF, 0xFF, 1, 0x13, 0, 0])
        .unwrap();
    let (id, r) = read_answer(&mut raw).expect("an answer before closing");
    assert_eq!((id, code(&r)), (0, ErrorCode::FRAME_TOO_LARGE));
    assert!(closed(&mut raw));
    healthy(&s);
}

#[test]
fn unknown_opcodes_and_malformed_bodies_are_answered_and_the_connection_lives() {
    let s = TestServer::start();
    let mut raw = TcpStream::connect(s.addr).unwrap();
    // Opcode 0xEE, request id 5, empty body.
    raw.write_all(&[0, 0, 0, 12, 1, 0xEE, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5])
        .unwrap();
    let (id, r) = read_answer(&mut raw).unwrap();
    assert_eq!((id, code(&r)), (5, ErrorCode::UNKNOWN_OPCODE));
    // A list-queues whose string length runs past the body.
    raw.write_all(&[0, 0, 0, 14, 1, 0x13, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6, 0, 9])
        .unwrap();
    let (id, r) = read_answer(&mut raw).unwrap();
    assert_eq!((id, code(&r)), (6, ErrorCode::MALFORMED_FRAME));
    // Still open: a good request is answered.
    let mut good = BytesMut::new();
    Request::ListQueues {
        prefix: String::new(),
        after: String::new(),
        limit: 0,
    }
    .encode(7, &mut good);
    raw.write_all(&good).unwrap();
    assert_eq!(
        read_answer(&mut raw).unwrap(),
        (
            7,
            Response::Queues {
                names: vec![],
                next: None
            }
        )
    );
}

#[test]
fn an_unsupported_version_is_answered_then_closed() {
    let s = TestServer::start();
    let mut raw = TcpStream::connect(s.addr).unwrap();
    raw.write_all(&[0, 0, 0, 12, 9, 0x13, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8])
        .unwrap();
    let (id, r) = read_answer(&mut raw).unwrap();
    assert_eq!((id, code(&r)), (8, ErrorCode::UNSUPPORTED_VERSION));
    assert!(closed(&mut raw));
    healthy(&s);
}

#[test]
fn random_bytes_and_truncated_frames_never_hurt_the_server() {
    let s = TestServer::start();
    let mut c = s.client();
    c.create_queue("q", SettingsPatch::default()).unwrap();
    let mut x: u64 = 0x1234_5678_9ABC_DEF1;
    for round in 0..50 {
        let mut raw = TcpStream::connect(s.addr).unwrap();
        let mut junk = vec![0u8; 1 + (round * 97) % 4096];
        for b in junk.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        if round % 2 == 0 {
            // A valid put cut short.
            let mut frame = BytesMut::new();
            Request::Put {
                queue: "q".into(),
                messages: vec![Default::default()],
            }
            .encode(1, &mut frame);
            junk = frame[..frame.len() / 2].to_vec();
        }
        let _ = raw.write_all(&junk);
        drop(raw);
        assert!(c.list_queues("").is_ok(), "served after round {round}");
    }
    assert_eq!(c.stats("q").unwrap().puts, 0, "nothing half-sent was put");
}

#[test]
fn a_thousand_connections_and_the_limit_on_them() {
    let s = TestServer::with(|c| c.max_connections = 1_000);
    let mut c = s.client();
    let mut open: Vec<TcpStream> = (0..998)
        .map(|_| TcpStream::connect(s.addr).unwrap())
        .collect();
    // 999 open now; every one of them can talk.
    let mut frame = BytesMut::new();
    Request::ListQueues {
        prefix: String::new(),
        after: String::new(),
        limit: 0,
    }
    .encode(3, &mut frame);
    for raw in open.iter_mut().step_by(97) {
        raw.write_all(&frame).unwrap();
        assert_eq!(
            read_answer(raw).unwrap(),
            (
                3,
                Response::Queues {
                    names: vec![],
                    next: None
                }
            )
        );
    }
    // One more fits; the next is closed at once.
    let _last = TcpStream::connect(s.addr).unwrap();
    let mut extra = TcpStream::connect(s.addr).unwrap();
    extra.write_all(&frame).unwrap();
    assert!(closed(&mut extra), "over max_connections: closed");
    assert!(
        c.list_queues("").is_ok(),
        "the first client is still served"
    );
    open.clear();
}

#[test]
fn a_client_that_never_reads_is_throttled_and_others_are_served() {
    let s = TestServer::with(|c| c.max_output_bytes = fila_server::OUTPUT_BYTES_MIN);
    let mut c = s.client();
    c.create_queue("big", SettingsPatch::default()).unwrap();
    let payload = bytes::Bytes::from(vec![7u8; 60 << 10]);
    for _ in 0..20 {
        c.put(
            "big",
            vec![fila_client::PutEntry {
                payload: payload.clone(),
                ..Default::default()
            }],
        )
        .unwrap();
    }
    // A client that asks for 20 × 60 KiB again and again and never reads.
    let mut greedy = TcpStream::connect(s.addr).unwrap();
    greedy.set_nonblocking(true).unwrap();
    let mut frame = BytesMut::new();
    Request::Peek {
        queue: QueueRef {
            name: "big".into(),
            dlq: false,
        },
        from_seq: 0,
        max_messages: 20,
        fields: fila_client::Fields::ALL,
    }
    .encode(1, &mut frame);
    let mut written = 0usize;
    let mut blocked_since: Option<Instant> = None;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        match greedy.write(&frame) {
            Ok(n) => {
                written += n;
                blocked_since = None;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let since = *blocked_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_millis(500) {
                    break;
                }
                assert!(
                    c.list_queues("").is_ok(),
                    "others are served while one is throttled"
                );
            }
            Err(e) => panic!("{e}"),
        }
        assert!(
            written < 512 << 20,
            "the server kept reading a client that never reads"
        );
    }
    assert!(
        blocked_since.is_some(),
        "the server stopped reading the greedy client"
    );
    // Each request asks for ~1.2 MB of answers; the server read only a few
    // of them before throttling (kernel buffers hold the rest).
    assert!(
        written < 64 << 20,
        "only {written} bytes of requests were taken in"
    );
    assert!(c.stats("big").is_ok());
    drop(greedy);
    assert!(c.list_queues("").is_ok());
}

#[test]
fn a_throttled_client_that_reads_late_gets_every_answer() {
    let s = TestServer::with(|c| c.max_output_bytes = fila_server::OUTPUT_BYTES_MIN);
    let mut c = s.client();
    c.create_queue("q", SettingsPatch::default()).unwrap();
    fila_tests::put_filled(&mut c, "q", 20, 10 << 10, 1);
    // 50 peeks of ~200 KiB each, sent at once, read only afterwards.
    let mut raw = TcpStream::connect(s.addr).unwrap();
    let mut frames = BytesMut::new();
    for id in 1..=50u64 {
        Request::Peek {
            queue: QueueRef {
                name: "q".into(),
                dlq: false,
            },
            from_seq: 0,
            max_messages: 20,
            fields: fila_client::Fields::ALL,
        }
        .encode(id, &mut frames);
    }
    raw.write_all(&frames).unwrap();
    let mut seen = Vec::new();
    let mut buf = BytesMut::new();
    let mut chunk = vec![0u8; 64 << 10];
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for _ in 0..50 {
        let (id, r) = loop {
            if let Some((h, body)) = split_frame(&mut buf, FRAME_LEN_LIMIT).unwrap() {
                break (h.request_id, Response::decode(&h, body).unwrap());
            }
            let n = raw.read(&mut chunk).expect("every answer arrives");
            assert!(n > 0, "the server closed the connection");
            buf.extend_from_slice(&chunk[..n]);
        };
        match r {
            Response::Messages(ms) => assert_eq!(ms.len(), 20),
            other => panic!("{other:?}"),
        }
        seen.push(id);
    }
    assert_eq!(seen, (1..=50).collect::<Vec<u64>>());
}

#[test]
fn a_client_that_half_closes_after_its_requests_still_gets_the_answers() {
    let s = TestServer::start();
    let raw = TcpStream::connect(s.addr).unwrap();
    let mut frames = BytesMut::new();
    for id in 1..=3u64 {
        Request::ListQueues {
            prefix: String::new(),
            after: String::new(),
            limit: 0,
        }
        .encode(id, &mut frames);
    }
    let ids: Vec<u64> = send_then_half_close(raw, &frames, &[])
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(ids, vec![1, 2, 3], "every answer, then the close");
}

/// A client throttled for output room sends its last request and closes
/// its writing half together, so the server learns of the close in the
/// same event as it learns of the request, and reads that request only
/// after the event, in a read that comes back short: it must still read
/// on to the end of the stream, answer, and close (it once waited for an
/// event that never comes, until the idle timeout).
#[test]
fn a_throttled_client_that_half_closes_gets_every_answer_then_the_close() {
    let s = TestServer::with(|c| c.max_output_bytes = fila_server::OUTPUT_BYTES_MIN);
    let mut c = s.client();
    c.create_queue("q", SettingsPatch::default()).unwrap();
    fila_tests::put_filled(&mut c, "q", 20, 10 << 10, 1);
    let peek = |id: u64, frames: &mut BytesMut| {
        Request::Peek {
            queue: QueueRef {
                name: "q".into(),
                dlq: false,
            },
            from_seq: 0,
            max_messages: 20,
            fields: fila_client::Fields::ALL,
        }
        .encode(id, frames)
    };
    // ~40 MiB of answers: more than the socket buffers and the output room
    // hold, so the server is throttled while the client does not read.
    let mut raw = TcpStream::connect(s.addr).unwrap();
    let mut frames = BytesMut::new();
    for id in 1..=200u64 {
        peek(id, &mut frames);
    }
    raw.write_all(&frames).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut first = [0u8; 1];
    raw.read_exact(&mut first).expect("the first answer starts");
    // A small request, answered in the turn that reads it.
    let mut last = BytesMut::new();
    Request::ListQueues {
        prefix: String::new(),
        after: String::new(),
        limit: 0,
    }
    .encode(201, &mut last);
    let answers: Vec<u64> = send_then_half_close(raw, &last, &first)
        .into_iter()
        .map(|(id, r)| match r {
            Response::Messages(ms) => {
                assert_eq!(ms.len(), 20);
                id
            }
            Response::Queues { .. } => id,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(answers, (1..=201).collect::<Vec<u64>>());
}

/// Writes `frames`, closes the writing half, and reads every answer until
/// the server closes the connection (`read` is what was read before).
fn send_then_half_close(mut raw: TcpStream, frames: &[u8], read: &[u8]) -> Vec<(u64, Response)> {
    raw.write_all(frames).unwrap();
    raw.shutdown(std::net::Shutdown::Write).unwrap();
    let mut all = read.to_vec();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    raw.read_to_end(&mut all)
        .expect("every answer, then the close, within 10 s");
    let mut buf = BytesMut::from(&all[..]);
    let mut answers = Vec::new();
    while let Some((h, body)) = split_frame(&mut buf, FRAME_LEN_LIMIT).unwrap() {
        answers.push((h.request_id, Response::decode(&h, body).unwrap()));
    }
    answers
}

/// The same with puts to queues of both loops' shards (some run on the
/// connection's loop, the others at the other loop's owner): a half close
/// waits for the answers that are away.
#[test]
fn a_half_close_waits_for_the_answers_of_requests_at_other_loops() {
    let s = TestServer::start();
    let mut c = s.client();
    let names: Vec<String> = (0..2)
        .map(|shard| {
            (0..)
                .map(|i| format!("hc{i}"))
                .find(|n| fila_core::shard_of(n, 2) == shard)
                .unwrap()
        })
        .collect();
    for n in &names {
        c.create_queue(n, SettingsPatch::default()).unwrap();
    }
    let raw = TcpStream::connect(s.addr).unwrap();
    let mut frames = BytesMut::new();
    for id in 1..=20u64 {
        Request::Put {
            queue: names[(id % 2) as usize].clone(),
            messages: vec![Default::default()],
        }
        .encode(id, &mut frames);
    }
    let mut ids = Vec::new();
    for (id, answer) in send_then_half_close(raw, &frames, &[]) {
        match answer {
            Response::Put(entries) => assert!(entries[0].is_ok()),
            other => panic!("{other:?}"),
        }
        ids.push(id);
    }
    ids.sort_unstable();
    assert_eq!(
        ids,
        (1..=20).collect::<Vec<u64>>(),
        "every answer, then the close"
    );
    for n in &names {
        assert_eq!(c.stats(n).unwrap().visible, 10);
    }
}

/// A consumer whose parked receive holds all its output room (so the
/// server is not reading its socket) closes: its parked receive ends with
/// it, and the messages put next go to a live consumer at once instead of
/// being leased to a connection that no longer exists.
#[test]
fn a_closed_connections_parked_receive_leases_nothing() {
    let s = TestServer::with(|c| c.max_output_bytes = fila_server::OUTPUT_BYTES_MIN);
    let mut c = s.client();
    c.create_queue(
        "q",
        SettingsPatch {
            max_message_bytes: Some(1 << 20),
            visibility_timeout_ms: Some(600_000),
            ..SettingsPatch::default()
        },
    )
    .unwrap();
    for round in 0..5 {
        let mut raw = TcpStream::connect(s.addr).unwrap();
        let mut frames = BytesMut::new();
        Request::Receive(fila_client::Receive {
            queue: QueueRef {
                name: "q".into(),
                dlq: false,
            },
            max_messages: 20,
            visibility_ms: None,
            wait_ms: Some(20_000),
            channel: None,
            fields: fila_client::Fields::ALL,
        })
        .encode(1, &mut frames);
        raw.write_all(&frames).unwrap();
        s.wait_parked(1);
        drop(raw);
        // The server sees the close though it is not reading the socket.
        s.wait_parked_at_most(0);
        c.put_one("q", format!("m{round}")).unwrap();
        let got = c.receive("q", 10, Some(10_000)).unwrap();
        assert_eq!(got.len(), 1, "round {round}: the live consumer got it");
        c.delete("q", &[got[0].receipt.unwrap()]).unwrap();
        assert_eq!(c.stats("q").unwrap().in_flight, 0, "round {round}");
    }
}
