//! The async client against a real server, and both clients against
//! hand-made servers that check what goes over the wire: batch helpers
//! pipelined, a lost connection never resent, timeouts.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use fila_client::{
    AllOk, AsyncClient, Client, ClientError, ClientOptions, ErrorCode, Fields, Opcode, PutEntry,
    QueueRef, ReceiveRef, Response, SettingsPatch,
};
use fila_proto::{split_frame, Entry, FrameHeader, Request, FRAME_LEN_LIMIT};
use fila_tests::TestServer;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn options(addr: impl ToString) -> ClientOptions {
    let mut o = ClientOptions::new(addr.to_string());
    o.request_timeout = Duration::from_secs(5);
    o
}

fn lean(queue: &str, wait_ms: u64) -> ReceiveRef<'_> {
    ReceiveRef {
        queue,
        dlq: false,
        max_messages: 20,
        visibility_ms: None,
        wait_ms: Some(wait_ms),
        channel: None,
        fields: Fields::PAYLOAD_AND_RECEIPT,
    }
}

#[test]
fn the_async_client_does_every_operation_end_to_end() {
    let s = TestServer::start();
    runtime().block_on(async {
        let c = AsyncClient::connect(options(s.addr)).await.unwrap();
        assert!(c.hello().await.unwrap().0.starts_with("fila"));
        assert!(c.create_queue("jobs", SettingsPatch::default()).await.unwrap());
        let payloads: Vec<Bytes> = (0..50).map(|i| Bytes::from(format!("m{i}"))).collect();
        let acks = c.put_payloads("jobs", &payloads).await.unwrap().all_ok().unwrap();
        assert_eq!(acks.len(), 50);
        assert!(acks.windows(2).all(|w| w[0].seq < w[1].seq));
        c.put_many(
            "jobs",
            vec![PutEntry {
                payload: "tagged".into(),
                attributes: vec![("k".into(), "v".into())],
                ..PutEntry::default()
            }],
        )
        .await
        .unwrap()
        .all_ok()
        .unwrap();

        // Payload and receipt only: nothing else travels.
        let got = c.receive_with(lean("jobs", 0)).await.unwrap();
        assert_eq!(got.len(), 20);
        assert_eq!(got[0].payload, "m0");
        assert!(got.iter().all(|m| m.id == 0 && m.receipt.is_some()));
        let receipts: Vec<_> = got.iter().map(|m| m.receipt.unwrap()).collect();
        let q = QueueRef {
            name: "jobs".into(),
            dlq: false,
        };
        let changes: Vec<_> = receipts.iter().map(|r| (*r, 60_000)).collect();
        c.update_visibility(&q, &changes).await.unwrap().all_ok().unwrap();
        c.delete("jobs", &receipts).await.unwrap().all_ok().unwrap();
        // Deleting again: the first failed entry is named.
        let again = c.delete("jobs", &receipts).await.unwrap().all_ok().unwrap_err();
        assert!(
            matches!(again, ClientError::Entry { index: 0, code, .. } if code == ErrorCode::RECEIPT_STALE),
            "{again}"
        );

        // Every field by default; defer and take back.
        let full = c.receive("jobs", 1, Some(0)).await.unwrap();
        assert_eq!((full[0].payload.as_ref(), full[0].delivery_count), (&b"m20"[..], 1));
        assert!(full[0].id != 0 && full[0].inserted_at_ms > 0);
        c.defer("jobs", full[0].receipt.unwrap()).await.unwrap();
        let back = c
            .receive_deferred("jobs", &[full[0].seq], None)
            .await
            .unwrap()
            .all_ok()
            .unwrap();
        assert_eq!(back[0].payload, "m20");
        let stats = c.stats("jobs").await.unwrap();
        assert_eq!((stats.deletes, stats.in_flight), (20, 1));
        assert_eq!(c.list_queues("").await.unwrap(), vec!["jobs".to_string()]);
        let missing = c.get_queue("nope").await.unwrap_err();
        assert_eq!(missing.code(), Some(ErrorCode::QUEUE_NOT_FOUND));
    });
    s.stop();
}

/// Issue 42's operations through the async client: a release with its
/// reason, the attempts a peek asks for, a pause and a resume.
#[test]
fn the_async_client_releases_peeks_attempts_and_pauses() {
    let s = TestServer::start();
    runtime().block_on(async {
        let c = AsyncClient::connect(options(s.addr)).await.unwrap();
        c.create_queue("jobs", SettingsPatch::default())
            .await
            .unwrap();
        c.put_one("jobs", "work").await.unwrap();
        let got = c.receive_with(lean("jobs", 0)).await.unwrap();
        let q = QueueRef {
            name: "jobs".into(),
            dlq: false,
        };
        c.release_with(&q, &[got[0].receipt.unwrap()], "timeout", "upstream")
            .await
            .unwrap()
            .all_ok()
            .unwrap();
        let peeked = c
            .peek_with(q.clone(), 0, 10, Fields::ALL.with(Fields::ATTEMPTS))
            .await
            .unwrap();
        assert_eq!(peeked[0].attempts.len(), 1);
        assert_eq!(peeked[0].attempts[0].reason, "timeout");
        let paused = c
            .pause_queue("jobs", fila_client::Halves::BOTH)
            .await
            .unwrap();
        assert!(paused.receive && paused.send);
        let e = c.put_one("jobs", "refused").await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::QUEUE_PAUSED), "{e}");
        let now = c
            .resume_queue("jobs", fila_client::Halves::BOTH)
            .await
            .unwrap();
        assert!(!now.receive && !now.send);
        c.put_one("jobs", "accepted").await.unwrap();
        // A filtered move: "work" only (released for a timeout), previewed
        // first.
        c.create_queue("done", SettingsPatch::default())
            .await
            .unwrap();
        let filter = fila_client::MoveFilter {
            reason: Some("timeout".into()),
            ..fila_client::MoveFilter::default()
        };
        let preview = c
            .preview_move("jobs", false, Some("done"), &filter, 0)
            .await
            .unwrap();
        assert_eq!(preview.matched, 1);
        assert_eq!(&preview.messages[0].payload[..], b"work");
        let task = c
            .start_move_where("jobs", Some("done"), None, None, &filter)
            .await
            .unwrap();
        assert_eq!((task.moved, task.filter), (1, filter.clone()));
        let dlq = c.redrive_where("jobs", None, None, &filter).await.unwrap();
        assert_eq!(dlq, (0, 0), "an empty DLQ");
    });
}

#[test]
fn answers_come_back_in_any_order_on_one_connection_and_parked_receives_keep_their_fields() {
    let s = TestServer::start();
    runtime().block_on(async {
        let c = AsyncClient::connect(options(s.addr)).await.unwrap();
        c.create_queue("q", SettingsPatch::default()).await.unwrap();
        let poller = c.clone();
        let parked = tokio::spawn(async move { poller.call(&lean("q", 10_000)).await });
        // The receive parks; later requests on the same connection are
        // answered first.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let metrics = s.server().metrics();
        while metrics.parked.load(std::sync::atomic::Ordering::Acquire) < 1 {
            assert!(std::time::Instant::now() < deadline, "never parked");
            tokio::task::yield_now().await;
        }
        assert_eq!(c.stats("q").await.unwrap().visible, 0);
        assert!(!parked.is_finished());
        c.put_one("q", "late").await.unwrap();
        match parked.await.unwrap().unwrap() {
            Response::Selected(f, ms) => {
                assert_eq!(f, Fields::PAYLOAD_AND_RECEIPT);
                assert_eq!(ms[0].payload, "late");
                assert!(ms[0].receipt.is_some() && ms[0].id == 0);
            }
            other => panic!("{other:?}"),
        }
    });
    s.stop();
}

// ----- hand-made servers -----------------------------------------------

/// Reads frames from `s` until `n` have come (10 s at most).
fn read_frames(s: &mut TcpStream, buf: &mut BytesMut, n: usize) -> Vec<(FrameHeader, Bytes)> {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    let mut chunk = [0u8; 64 << 10];
    while out.len() < n {
        while let Some(f) = split_frame(buf, FRAME_LEN_LIMIT).unwrap() {
            out.push(f);
        }
        if out.len() >= n {
            break;
        }
        let k = s.read(&mut chunk).expect("the client sends in time");
        assert!(k > 0, "the client closed with {} of {n} frames", out.len());
        buf.extend_from_slice(&chunk[..k]);
    }
    out
}

/// The answer a hand-made server gives: every entry succeeds.
fn answer(header: &FrameHeader, body: Bytes) -> Response {
    let ok = |n: usize| -> Vec<Entry<()>> { vec![Ok(()); n] };
    match Request::decode(header, body).unwrap() {
        Request::Delete { receipts, .. } => Response::Deleted(ok(receipts.len())),
        Request::UpdateVisibility { entries, .. } => {
            Response::Visibility(entries.iter().map(|_| Ok(7)).collect())
        }
        Request::QueueStats { .. } => Response::Stats(Default::default()),
        other => panic!("unexpected {other:?}"),
    }
}

fn reply(s: &mut TcpStream, frames: &[(FrameHeader, Bytes)]) {
    let mut out = BytesMut::new();
    for (h, body) in frames {
        answer(h, body.clone()).encode(h.opcode, h.request_id, &mut out);
    }
    s.write_all(&out).unwrap();
}

/// A server that accepts `n` connections and runs `serve` on each, by
/// index.
fn fake(
    n: usize,
    serve: impl Fn(usize, TcpStream) + Send + 'static,
) -> (SocketAddr, JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        for i in 0..n {
            let (s, _) = l.accept().unwrap();
            serve(i, s);
        }
    });
    (addr, t)
}

/// A server that answers nothing until it has read every request of a
/// 50-entry batch (3 requests of up to 20), so a client that waited for
/// each answer before sending the next would time out.
fn all_before_any() -> (SocketAddr, JoinHandle<()>) {
    fake(1, |_, mut s| {
        let mut buf = BytesMut::new();
        for _ in 0..2 {
            let frames = read_frames(&mut s, &mut buf, 3);
            reply(&mut s, &frames);
        }
    })
}

#[test]
fn batch_helpers_are_pipelined_in_both_clients() {
    let receipts = vec![[1u8; 32]; 50];
    let changes = vec![([1u8; 32], 1_000); 50];
    let q = QueueRef {
        name: "q".into(),
        dlq: false,
    };

    let (addr, server) = all_before_any();
    let mut o = options(addr);
    o.request_timeout = Duration::from_secs(3);
    let mut c = Client::connect(o.clone()).unwrap();
    assert_eq!(
        c.delete("q", &receipts).unwrap().all_ok().unwrap().len(),
        50
    );
    assert_eq!(
        c.update_visibility(&q, &changes).unwrap().all_ok().unwrap(),
        vec![7; 50]
    );
    drop(c);
    server.join().unwrap();

    let (addr, server) = all_before_any();
    o.addr = addr.to_string();
    runtime().block_on(async {
        let c = AsyncClient::connect(o).await.unwrap();
        assert_eq!(c.delete("q", &receipts).await.unwrap().len(), 50);
        assert_eq!(c.update_visibility(&q, &changes).await.unwrap().len(), 50);
    });
    server.join().unwrap();
}

#[test]
fn a_lost_connection_fails_what_was_in_flight_and_nothing_is_sent_again() {
    let (log_tx, log_rx) = std::sync::mpsc::channel();
    let (addr, server) = fake(2, move |i, mut s| {
        let mut buf = BytesMut::new();
        if i == 0 {
            // Read the request, then drop the connection unanswered.
            read_frames(&mut s, &mut buf, 1);
            return;
        }
        let frames = read_frames(&mut s, &mut buf, 1);
        log_tx
            .send(frames.iter().map(|(h, _)| h.opcode).collect::<Vec<_>>())
            .unwrap();
        reply(&mut s, &frames);
        // Nothing else arrives: the lost delete is not resent.
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        assert!(matches!(s.read(&mut [0u8; 64]), Ok(0) | Err(_)));
    });
    runtime().block_on(async {
        let c = AsyncClient::connect(options(addr)).await.unwrap();
        let lost = c.delete("q", &[[1u8; 32]]).await.unwrap_err();
        assert!(matches!(lost, ClientError::ConnectionLost(_)), "{lost}");
        // The next call opens a new connection by itself.
        assert_eq!(c.stats("q").await.unwrap().visible, 0);
        assert_eq!(log_rx.recv().unwrap(), vec![Opcode::QueueStats as u8]);
        drop(c);
    });
    server.join().unwrap();
}

#[test]
fn a_call_that_times_out_fails_alone_and_the_connection_serves_the_next() {
    let (addr, server) = fake(1, |_, mut s| {
        let mut buf = BytesMut::new();
        // The first request is never answered; the second is.
        read_frames(&mut s, &mut buf, 1);
        let frames = read_frames(&mut s, &mut buf, 1);
        reply(&mut s, &frames);
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.read(&mut [0u8; 64]);
    });
    let mut o = options(addr);
    o.request_timeout = Duration::from_millis(200);
    runtime().block_on(async {
        let c = AsyncClient::connect(o).await.unwrap();
        let t = c.stats("q").await.unwrap_err();
        assert!(
            matches!(t, ClientError::Timeout(d) if d == Duration::from_millis(200)),
            "{t}"
        );
        assert_eq!(c.stats("q").await.unwrap().visible, 0);
    });
    server.join().unwrap();
}

/// Both clients given several nodes (`host:port,host:port,...`) talk to
/// the first they can reach; once the node they talk to is gone, the call
/// that finds it gone fails (nothing is resent) and the next one talks to
/// another node of the list.
#[test]
fn both_clients_fall_back_on_the_other_nodes_they_were_given() {
    let a = TestServer::start();
    let b = TestServer::start();
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let list = format!("{closed},{},{}", a.addr, b.addr);
    let mut c = Client::connect(options(&list)).unwrap();
    assert_eq!(c.addr(), a.addr.to_string(), "the first node that answers");
    assert!(c.create_queue("jobs", SettingsPatch::default()).unwrap());
    let rt = runtime();
    let ac = rt.block_on(AsyncClient::connect(options(&list))).unwrap();
    assert_eq!(ac.addr(), a.addr.to_string());
    assert!(!rt
        .block_on(ac.create_queue("jobs", SettingsPatch::default()))
        .unwrap());
    let b_addr = b.addr.to_string();
    a.stop();
    // The call that finds the connection gone fails; the next talks to b.
    let lost = (0..50).find_map(|_| c.hello().err());
    assert!(
        matches!(lost, Some(ClientError::ConnectionLost(_))),
        "{lost:?}"
    );
    assert!(c.hello().unwrap().0.starts_with("fila"));
    assert_eq!(c.addr(), b_addr);
    assert!(c.create_queue("jobs", SettingsPatch::default()).unwrap());
    rt.block_on(async {
        let mut answered = false;
        for _ in 0..3 {
            if ac.hello().await.is_ok() {
                answered = true;
                break;
            }
        }
        assert!(answered, "the async client reached b");
        assert_eq!(ac.addr(), b_addr);
        assert!(!ac
            .create_queue("jobs", SettingsPatch::default())
            .await
            .unwrap());
    });
    // With every node gone, a connect says where it tried first.
    drop(b);
    let Err(err) = Client::connect(options(&list)) else {
        panic!("connected with every node gone");
    };
    assert!(
        matches!(&err, ClientError::Connect { addr, .. } if *addr == closed.to_string()),
        "{err}"
    );
}
