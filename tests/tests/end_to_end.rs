//! Every operation over a real socket, long polls across connections, and
//! pipelining.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use fila_client::{
    ClientError, ErrorCode, PutEntry, QueueRef, Receive, Request, Response, SettingsPatch,
};
use fila_tests::TestServer;

fn q(name: &str) -> QueueRef {
    QueueRef {
        name: name.into(),
        dlq: false,
    }
}

fn dlq(name: &str) -> QueueRef {
    QueueRef {
        name: name.into(),
        dlq: true,
    }
}

/// A receive of one message on queue "q", waiting up to `wait_ms`.
fn poll(wait_ms: u64) -> Request {
    Request::Receive(Receive {
        queue: q("q"),
        max_messages: 1,
        visibility_ms: None,
        wait_ms: Some(wait_ms),
        channel: None,
        fields: Default::default(),
    })
}

#[test]
fn every_operation_end_to_end() {
    let s = TestServer::start();
    let mut c = s.client();
    let (server, max_frame) = c.hello().unwrap();
    assert!(server.starts_with("fila-server/"));
    assert!(max_frame >= 1 << 20);

    // Queues.
    let patch = SettingsPatch {
        visibility_timeout_ms: Some(60_000),
        max_deliveries: Some(3),
        ..SettingsPatch::default()
    };
    assert!(c.create_queue("jobs", patch.clone()).unwrap());
    assert!(!c.create_queue("jobs", patch).unwrap());
    let e = c
        .create_queue("jobs", SettingsPatch::default())
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::QUEUE_EXISTS));
    assert_eq!(c.get_queue("jobs").unwrap().max_deliveries, 3);
    let upd = c
        .update_queue(
            "jobs",
            SettingsPatch {
                max_deliveries: Some(4),
                ..SettingsPatch::default()
            },
        )
        .unwrap();
    assert_eq!(upd.max_deliveries, 4);
    c.create_queue("jobs-2", SettingsPatch::default()).unwrap();
    assert_eq!(c.list_queues("jobs").unwrap(), vec!["jobs", "jobs-2"]);

    // Put, receive, update visibility, delete.
    let acks = c
        .put(
            "jobs",
            vec![
                PutEntry {
                    payload: Bytes::from_static(b"a"),
                    attributes: vec![("k".into(), "v".into())],
                    ..PutEntry::default()
                },
                PutEntry {
                    payload: Bytes::from_static(b"b"),
                    channel: Some("eu".into()),
                    ..PutEntry::default()
                },
                PutEntry {
                    payload: Bytes::from(vec![0u8; 300 << 10]),
                    ..PutEntry::default()
                },
            ],
        )
        .unwrap();
    assert!(acks[0].is_ok() && acks[1].is_ok());
    assert_eq!(
        acks[2].as_ref().unwrap_err().code(),
        Some(ErrorCode::MESSAGE_TOO_LARGE)
    );
    let got = c.receive("jobs", 10, Some(0)).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].attributes, vec![("k".to_string(), "v".to_string())]);
    assert_eq!(got[1].channel.as_deref(), Some("eu"));
    let r0 = got[0].receipt.unwrap();
    let r1 = got[1].receipt.unwrap();
    let vis = c
        .update_visibility(&q("jobs"), &[(r0, 120_000), ([9u8; 32], 5)])
        .unwrap();
    assert!(vis[0].is_ok());
    assert_eq!(
        vis[1].as_ref().unwrap_err().code(),
        Some(ErrorCode::RECEIPT_INVALID)
    );
    let del = c.delete("jobs", &[r0, r0]).unwrap();
    assert!(del[0].is_ok());
    assert_eq!(
        del[1].as_ref().unwrap_err().code(),
        Some(ErrorCode::RECEIPT_STALE)
    );

    // Defer, receive deferred, dead-letter, peek, redrive.
    c.defer("jobs", r1).unwrap();
    let seq = got[1].seq;
    let taken = c.receive_deferred("jobs", &[seq, 9_999], None).unwrap();
    let m = taken[0].as_ref().unwrap();
    assert_eq!(m.delivery_count, 2);
    assert_eq!(
        taken[1].as_ref().unwrap_err().code(),
        Some(ErrorCode::NOT_FOUND)
    );
    c.dead_letter("jobs", m.receipt.unwrap(), "bad", "no parse")
        .unwrap();
    let dead = c.peek(dlq("jobs"), 0, 10).unwrap();
    assert_eq!(dead.len(), 1);
    let dl = dead[0].dead_letter.as_ref().unwrap();
    assert_eq!(
        (
            dl.reason,
            dl.consumer_reason.as_str(),
            dl.source_queue.as_str()
        ),
        (3, "bad", "jobs")
    );
    assert_eq!(c.redrive("jobs", None, None).unwrap(), (1, 0));
    let back = c.receive("jobs", 10, Some(0)).unwrap();
    assert_eq!(&back[0].payload[..], b"b");
    assert_eq!(back[0].delivery_count, 1);

    // Scheduled and cancelled.
    let later = c
        .put(
            "jobs",
            vec![PutEntry {
                payload: Bytes::from_static(b"later"),
                availability: fila_client::Availability::DelayMs(60_000),
                ..PutEntry::default()
            }],
        )
        .unwrap();
    let seq = later[0].as_ref().unwrap().seq;
    c.cancel_scheduled("jobs", seq).unwrap();
    assert_eq!(
        c.cancel_scheduled("jobs", seq).unwrap_err().code(),
        Some(ErrorCode::NOT_FOUND)
    );

    // Stats, purge, delete.
    let st = c.stats("jobs").unwrap();
    assert_eq!(
        (st.in_flight, st.puts, st.deletes, st.redriven),
        (1, 3, 1, 1)
    );
    c.purge("jobs", false).unwrap();
    assert_eq!(c.stats("jobs").unwrap().in_flight, 0);
    let counters = c.server_stats().unwrap();
    assert!(counters.iter().any(|(k, v)| k == "queues" && *v == 2));
    c.delete_queue("jobs").unwrap();
    assert_eq!(
        c.stats("jobs").unwrap_err().code(),
        Some(ErrorCode::QUEUE_NOT_FOUND)
    );
}

#[test]
fn a_long_poll_is_answered_when_a_message_arrives_on_another_connection() {
    let s = TestServer::start();
    let mut producer = s.client();
    producer
        .create_queue("q", SettingsPatch::default())
        .unwrap();
    let addr = s.addr.to_string();
    let consumer = std::thread::spawn(move || {
        let mut c = fila_client::Client::connect(fila_client::ClientOptions::new(addr)).unwrap();
        let started = Instant::now();
        let got = c.receive("q", 5, Some(20_000)).unwrap();
        (got, started.elapsed())
    });
    // Let the receive park, checking through the server's own gauge.
    let deadline = Instant::now() + Duration::from_secs(10);
    while producer
        .server_stats()
        .unwrap()
        .iter()
        .find(|(k, _)| k == "receives_parked")
        .unwrap()
        .1
        == 0
    {
        assert!(Instant::now() < deadline, "the receive never parked");
        std::thread::yield_now();
    }
    producer.put_one("q", "wake up").unwrap();
    let (got, took) = consumer.join().unwrap();
    assert_eq!(&got[0].payload[..], b"wake up");
    assert!(
        took < Duration::from_secs(20),
        "answered on arrival, not at the end of the wait"
    );
}

#[test]
fn a_long_poll_returns_empty_when_its_wait_ends_and_other_requests_are_answered_meanwhile() {
    let s = TestServer::start();
    let mut c = s.client();
    c.create_queue("q", SettingsPatch::default()).unwrap();
    let poll = c.send(&poll(300)).unwrap();
    let list = c
        .send(&Request::ListQueues {
            prefix: String::new(),
            after: String::new(),
            limit: 0,
        })
        .unwrap();
    // The list, sent after the parked receive, is answered first.
    assert_eq!(
        c.wait(list, Duration::ZERO).unwrap(),
        Response::Queues {
            names: vec!["q".into()],
            next: None
        }
    );
    assert_eq!(
        c.wait(poll, Duration::from_secs(5)).unwrap(),
        Response::Messages(vec![])
    );
}

#[test]
fn pipelined_requests_are_answered_by_request_id() {
    let s = TestServer::start();
    let mut c = s.client();
    c.create_queue("p", SettingsPatch::default()).unwrap();
    let entries: Vec<PutEntry> = (0..500)
        .map(|i| PutEntry {
            payload: Bytes::from(format!("m{i}")),
            ..PutEntry::default()
        })
        .collect();
    let acks = c.put_many("p", entries).unwrap();
    assert_eq!(acks.len(), 500);
    let seqs: Vec<u64> = acks.iter().map(|a| a.as_ref().unwrap().seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    // Many different requests in flight at once, collected in reverse.
    let ids: Vec<u64> = (0..50)
        .map(|_| c.send(&Request::QueueStats { name: "p".into() }).unwrap())
        .collect();
    c.flush().unwrap();
    for id in ids.into_iter().rev() {
        match c.wait(id, Duration::ZERO).unwrap() {
            Response::Stats(st) => assert_eq!(st.visible, 500),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn the_metrics_endpoint_speaks_prometheus() {
    let s = TestServer::start();
    let mut c = s.client();
    c.create_queue("m", SettingsPatch::default()).unwrap();
    c.put_one("m", "x").unwrap();
    let body = s.metrics();
    assert!(body.starts_with("HTTP/1.1 200 OK"));
    assert!(body.contains("fila_queue_visible{queue=\"m\"} 1"), "{body}");
    assert!(body.contains("fila_requests_total{op=\"put\"} 1"));
    assert!(body.contains("fila_request_duration_seconds_bucket{op=\"put\",le=\"+Inf\"} 1"));
    assert!(body.contains("fila_connections 1"));
}

#[test]
fn a_stop_answers_parked_receives_and_closes() {
    let s = TestServer::start();
    let mut c = s.client();
    c.create_queue("q", SettingsPatch::default()).unwrap();
    let poll = c.send(&poll(20_000)).unwrap();
    c.flush().unwrap();
    s.wait_parked(1);
    let started = Instant::now();
    s.stop();
    assert_eq!(
        c.wait(poll, Duration::ZERO).unwrap(),
        Response::Messages(vec![])
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let e = c.list_queues("").unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::ConnectionLost(_) | ClientError::Connect { .. }
        ),
        "{e}"
    );
}

#[test]
fn a_frame_written_by_hand_matches_docs_protocol_md() {
    use std::io::{Read, Write};
    let s = TestServer::start();
    let mut raw = std::net::TcpStream::connect(s.addr).unwrap();
    // list queues, request id 77, prefix "", after "", limit 0.
    raw.write_all(&[
        0, 0, 0, 18, 1, 0x13, 0, 0, 0, 0, 0, 0, 0, 0, 0, 77, 0, 0, 0, 0, 0, 0,
    ])
    .unwrap();
    // No names, no next page.
    let mut answer = [0u8; 19];
    raw.read_exact(&mut answer).unwrap();
    assert_eq!(
        answer,
        [0, 0, 0, 15, 1, 0x13, 0, 1, 0, 0, 0, 0, 0, 0, 0, 77, 0, 0, 0]
    );
    let _ = BytesMut::new();
}

#[test]
fn a_broken_connection_fails_what_was_in_flight_and_the_next_call_reconnects_without_resending() {
    let first = TestServer::start();
    let addr = first.addr;
    let mut c = first.client();
    c.create_queue("q", SettingsPatch::default()).unwrap();
    let poll = c.send(&poll(20_000)).unwrap();
    c.flush().unwrap();
    first.wait_parked(1);
    first.stop();
    // The parked receive was answered (empty) by the graceful stop, then the
    // connection closed; the next request on it fails and is not resent.
    assert_eq!(
        c.wait(poll, Duration::ZERO).unwrap(),
        Response::Messages(vec![])
    );
    let lost = c.put_one("q", "x").unwrap_err();
    assert!(
        matches!(
            lost,
            ClientError::ConnectionLost(_) | ClientError::Connect { .. }
        ),
        "{lost}"
    );
    // A new server on the same address: the client reconnects by itself.
    let second = TestServer::with(|cfg| cfg.listen = addr);
    assert_eq!(
        c.list_queues("").unwrap(),
        Vec::<String>::new(),
        "a fresh server, nothing replayed"
    );
    second.stop();
}

#[test]
fn idle_connections_are_closed_after_the_idle_timeout_but_parked_receives_are_not_idle() {
    use std::io::Read;
    let s = TestServer::with(|c| c.idle_timeout_secs = 1);
    let mut c = s.client();
    c.create_queue("q", SettingsPatch::default()).unwrap();
    let mut idle = std::net::TcpStream::connect(s.addr).unwrap();
    let poll = c.send(&poll(3_000)).unwrap();
    c.flush().unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let mut b = [0u8; 1];
    assert_eq!(idle.read(&mut b).unwrap_or(0), 0, "closed by the server");
    assert!(started.elapsed() < Duration::from_secs(9));
    // The polling connection outlived the idle timeout and got its answer.
    assert_eq!(
        c.wait(poll, Duration::from_secs(5)).unwrap(),
        Response::Messages(vec![])
    );
}

#[test]
fn a_peek_of_large_messages_is_cut_to_fit_the_output_room_and_continues_from_the_last() {
    let s = TestServer::start();
    let mut c = s.client();
    c.create_queue(
        "big",
        SettingsPatch {
            max_message_bytes: Some(1 << 20),
            ..SettingsPatch::default()
        },
    )
    .unwrap();
    let payload = Bytes::from(vec![3u8; 1 << 20]);
    for _ in 0..4 {
        c.put(
            "big",
            (0..5)
                .map(|_| PutEntry {
                    payload: payload.clone(),
                    ..PutEntry::default()
                })
                .collect::<Vec<_>>(),
        )
        .unwrap();
    }
    // The default output room is 8 MiB: an answer holds the 1 MiB
    // messages that fit, and the next peek goes on from the last one.
    let mut seen = Vec::new();
    let mut from = 0;
    for _ in 0..20 {
        let page = c.peek(q("big"), from, 100).unwrap();
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 7, "{} MiB in one 8 MiB answer", page.len());
        from = page.last().unwrap().seq + 1;
        seen.extend(page.iter().map(|m| m.seq));
    }
    assert_eq!(seen, (1..=20).collect::<Vec<_>>());
}

/// A connection whose requests all go to a queue of another loop's shard
/// moves to that loop (after `MOVE_AFTER` in a row, once nothing of it is
/// away), and goes on working there: every put acknowledged once, every
/// message received and deleted, in order per connection.
#[test]
fn a_connection_moves_to_the_loop_that_owns_its_queue_and_loses_nothing() {
    let s = TestServer::start();
    let mut admin = s.client();
    admin.create_queue("hot", SettingsPatch::default()).unwrap();
    // Two connections in a row land on the two loops: one is on the loop
    // that owns "hot", the other is not.
    let mut a = s.client();
    let mut b = s.client();
    let moved = || {
        s.server()
            .metrics()
            .moved
            .load(std::sync::atomic::Ordering::Acquire)
    };
    assert_eq!(moved(), 0);
    for (i, c) in [&mut a, &mut b].into_iter().enumerate() {
        let entries = (0..2_000)
            .map(|n| PutEntry {
                payload: Bytes::from(format!("{i}-{n}")),
                ..PutEntry::default()
            })
            .collect::<Vec<_>>();
        // 100 requests of 20, pipelined 32 at a time.
        let acks = c.put_many("hot", entries).unwrap();
        assert_eq!(acks.len(), 2_000);
        assert!(acks.iter().all(|a| a.is_ok()));
    }
    assert_eq!(moved(), 1, "the connection on the other loop moved");
    // Both go on: receive and delete everything, from both connections.
    let mut seen = std::collections::HashSet::new();
    for round in 0..400 {
        let c = if round % 2 == 0 { &mut a } else { &mut b };
        let got = c.receive("hot", 20, Some(0)).unwrap();
        if got.is_empty() {
            continue;
        }
        let receipts: Vec<_> = got.iter().map(|m| m.receipt.unwrap()).collect();
        assert!(c
            .delete("hot", &receipts)
            .unwrap()
            .iter()
            .all(|e| e.is_ok()));
        for m in got {
            assert!(seen.insert(m.payload.clone()), "delivered twice");
        }
    }
    assert_eq!(seen.len(), 4_000);
    let st = admin.stats("hot").unwrap();
    assert_eq!((st.visible, st.in_flight, st.deletes), (0, 0, 4_000));
}

/// A create naming a dead-letter target visits the target's loop first;
/// a put pipelined right behind it never overtakes it, whichever loops the
/// connection, the queue and the target are on.
#[test]
fn a_put_pipelined_behind_a_create_with_a_target_finds_the_queue() {
    let s = TestServer::start();
    let on = |shard: usize, base: &str| {
        (0..)
            .map(|i| format!("{base}{i}"))
            .find(|n| fila_core::shard_of(n, 2) == shard)
            .unwrap()
    };
    let mut admin = s.client();
    for shard in 0..2 {
        admin
            .create_queue(&on(shard, "target"), SettingsPatch::default())
            .unwrap();
    }
    // Two connections in a row: one on each loop.
    for (i, mut c) in [s.client(), s.client()].into_iter().enumerate() {
        for shard in 0..2 {
            let name = on(shard, &format!("q{i}-"));
            let target = on(1 - shard, "target");
            let create = c
                .send(&Request::CreateQueue {
                    name: name.clone(),
                    settings: SettingsPatch {
                        dead_letter_target: Some(Some(target)),
                        ..SettingsPatch::default()
                    },
                })
                .unwrap();
            let put = c
                .send(&Request::Put {
                    queue: name.clone(),
                    messages: vec![PutEntry::default()],
                })
                .unwrap();
            c.flush().unwrap();
            assert!(matches!(
                c.wait(create, Duration::from_secs(5)).unwrap(),
                Response::Created(true)
            ));
            match c.wait(put, Duration::from_secs(5)).unwrap() {
                Response::Put(entries) => assert!(entries[0].is_ok(), "{name}: {entries:?}"),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
}

/// server-stats shows what is stored: one 10-byte message is 10 bytes and
/// its bookkeeping, not the room a shard took ahead (about 1 MiB); that
/// room is shown apart.
#[test]
fn server_stats_shows_what_is_stored_and_the_reserve_apart() {
    let s = TestServer::start();
    let mut c = s.client();
    c.create_queue("q", SettingsPatch::default()).unwrap();
    c.put_one("q", "0123456789").unwrap();
    let counters = c.server_stats().unwrap();
    let get = |name: &str| counters.iter().find(|(k, _)| k == name).unwrap().1;
    assert_eq!(
        get("stored_bytes"),
        10 + fila_core::MESSAGE_OVERHEAD_BYTES,
        "{counters:?}"
    );
    assert!(get("stored_bytes_reserved") >= get("stored_bytes"));
}

#[test]
fn move_tasks_over_the_wire() {
    let s = TestServer::start();
    let mut c = s.client();
    c.create_queue("dlq", SettingsPatch::default()).unwrap();
    c.create_queue(
        "src",
        SettingsPatch {
            dead_letter_target: Some(Some("dlq".into())),
            ..SettingsPatch::default()
        },
    )
    .unwrap();
    for i in 0..4 {
        c.put_one("src", format!("m{i}")).unwrap();
    }
    for m in c.receive("src", 10, Some(0)).unwrap() {
        c.dead_letter("src", m.receipt.unwrap(), "bad", "").unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.stats("dlq").unwrap().visible < 4 {
        assert!(Instant::now() < deadline, "the dead letters never arrived");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Paced at one a second: one now, then cancelled.
    let task = c.start_move("dlq", None, None, Some(1)).unwrap();
    assert_eq!(
        (task.id, task.moved, task.to_move, task.status),
        (1, 1, 4, 0)
    );
    let listed = c.list_moves("dlq").unwrap();
    assert_eq!(listed, vec![task.clone()]);
    let cancelled = c.cancel_move("dlq", task.id).unwrap();
    assert_eq!(cancelled.status, 2);
    let e = c.cancel_move("dlq", 9).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::NOT_FOUND), "{e:?}");
    // The rest to a named queue at once.
    c.create_queue("other", SettingsPatch::default()).unwrap();
    let all = c.start_move("dlq", Some("other"), None, None).unwrap();
    assert_eq!((all.moved, all.status), (3, 1));
    assert_eq!(c.stats("src").unwrap().visible, 1);
    assert_eq!(c.stats("other").unwrap().visible, 3);
    assert_eq!(c.list_moves("dlq").unwrap().len(), 2);
    // A queue that does not exist.
    let e = c.start_move("nope", None, None, None).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::QUEUE_NOT_FOUND), "{e:?}");
}
