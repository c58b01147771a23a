//! Issue 7: kill -9 the real server binary while producers and consumers
//! run, restart it on the same data directory, and check that every
//! acknowledged put that was not acknowledged deleted is there and that no
//! acknowledged delete came back (a delete sent but not answered may or
//! may not have happened). `FILA_KILL_ROUNDS` sets the number of
//! kills (5 by default; docs/durability.md records a run of 100).

mod common;

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fila_client::{Client, ClientOptions, QueueRef, SettingsPatch};

struct Server {
    child: std::process::Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &std::path::Path) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fila-server"))
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "off"])
        .args(["--sqs-listen", "off", "--console-listen", "off"])
        .args(["--azure-listen", "off"])
        .args(["--shards", "2", "--event-loops", "2", "--data-dir"])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("fila-server starts");
    if let Some((addr, _, rx)) = common::listening(&mut child, 30) {
        // Keep draining its log so it never blocks on a full pipe.
        std::thread::spawn(move || while rx.recv().is_ok() {});
        return Server { child, addr };
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("fila-server did not start listening");
}

fn client(addr: &str) -> Client {
    Client::connect(ClientOptions::new(addr.to_string())).expect("connect")
}

/// Every payload in the queue and its DLQ.
fn present(c: &mut Client) -> HashSet<String> {
    let mut out = HashSet::new();
    for dlq in [false, true] {
        let mut from = 0;
        loop {
            let page = c
                .peek(
                    QueueRef {
                        name: "jobs".into(),
                        dlq,
                    },
                    from,
                    100,
                )
                .unwrap();
            let Some(last) = page.last() else { break };
            from = last.seq + 1;
            out.extend(
                page.iter()
                    .map(|m| String::from_utf8_lossy(&m.payload).into_owned()),
            );
        }
    }
    out
}

#[test]
fn acknowledged_messages_survive_kill_9() {
    let rounds: u64 = std::env::var("FILA_KILL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let dir = std::env::temp_dir().join(format!("fila-kill9-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let acked = Arc::new(Mutex::new(HashSet::<String>::new()));
    let deleted = Arc::new(Mutex::new(HashSet::<String>::new()));
    // Deletes sent: done or not, nobody was told.
    let deleting = Arc::new(Mutex::new(HashSet::<String>::new()));
    let next = Arc::new(AtomicU64::new(0));
    let mut rng: u64 = 0x2545_F491_4F6C_DD1D ^ std::process::id() as u64;
    let mut server = start(&dir);
    client(&server.addr)
        .create_queue("jobs", SettingsPatch::default())
        .unwrap();
    for round in 0..rounds {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // Kill once this many more puts are acknowledged.
        let target = acked.lock().unwrap().len() as u64 + 20 + rng % 300;
        let stop = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::new();
        for _ in 0..2 {
            let (addr, acked, next, stop) = (
                server.addr.clone(),
                acked.clone(),
                next.clone(),
                stop.clone(),
            );
            workers.push(std::thread::spawn(move || {
                let mut c = client(&addr);
                while !stop.load(Ordering::Acquire) {
                    let p = format!("m{}", next.fetch_add(1, Ordering::Relaxed));
                    if c.put_one("jobs", p.clone()).is_err() {
                        return;
                    }
                    acked.lock().unwrap().insert(p);
                }
            }));
        }
        {
            let (addr, deleted, deleting, stop) = (
                server.addr.clone(),
                deleted.clone(),
                deleting.clone(),
                stop.clone(),
            );
            workers.push(std::thread::spawn(move || {
                let mut c = client(&addr);
                while !stop.load(Ordering::Acquire) {
                    let Ok(got) = c.receive("jobs", 10, Some(0)) else {
                        return;
                    };
                    let receipts: Vec<_> = got.iter().filter_map(|m| m.receipt).collect();
                    if receipts.is_empty() {
                        continue;
                    }
                    deleting.lock().unwrap().extend(
                        got.iter()
                            .map(|m| String::from_utf8_lossy(&m.payload).into_owned()),
                    );
                    let Ok(results) = c.delete("jobs", &receipts) else {
                        return;
                    };
                    let mut d = deleted.lock().unwrap();
                    for (m, r) in got.iter().zip(results) {
                        if r.is_ok() {
                            d.insert(String::from_utf8_lossy(&m.payload).into_owned());
                        }
                    }
                }
            }));
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while (acked.lock().unwrap().len() as u64) < target {
            assert!(Instant::now() < deadline, "round {round}: puts stalled");
            std::thread::yield_now();
        }
        // SIGKILL while the workers are mid-request.
        server.child.kill().unwrap();
        server.child.wait().unwrap();
        stop.store(true, Ordering::Release);
        for w in workers {
            w.join().unwrap();
        }
        drop(server);
        server = start(&dir);
        let have = present(&mut client(&server.addr));
        let acked = acked.lock().unwrap();
        let deleted = deleted.lock().unwrap();
        let deleting = deleting.lock().unwrap();
        let lost: Vec<_> = acked
            .iter()
            .filter(|p| !deleting.contains(*p) && !have.contains(*p))
            .collect();
        assert!(lost.is_empty(), "round {round}: lost {lost:?}");
        let back: Vec<_> = deleted.iter().filter(|p| have.contains(*p)).collect();
        assert!(back.is_empty(), "round {round}: deleted came back {back:?}");
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Nothing reaches a consumer before it is durable: a receive parked on a
/// connection, filled by a put pipelined behind it, while other producers
/// keep the log busy with large messages (so a sync takes a while); the
/// moment the receive's answer arrives (whatever became of the put's), the
/// server is killed with SIGKILL. After the restart the message is there
/// with the id the consumer saw, and a new put gets another id.
#[test]
fn a_message_handed_out_is_durable_however_soon_the_server_dies() {
    use fila_client::{Fields, PutEntry, Receive, Request, Response};
    use std::io::{Read, Write};
    let rounds: u64 = std::env::var("FILA_KILL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let dir = std::env::temp_dir().join(format!("fila-kill9-first-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut server = start(&dir);
    client(&server.addr)
        .create_queue("first", SettingsPatch::default())
        .unwrap();
    client(&server.addr)
        .create_queue(
            "flood",
            SettingsPatch {
                max_message_bytes: Some(1 << 20),
                ..SettingsPatch::default()
            },
        )
        .unwrap();
    for round in 0..rounds {
        // Producers of 512 KiB messages keep the writer busy, until the
        // kill ends their connections.
        let flood: Vec<_> = (0..2)
            .map(|_| {
                // Connected before the round goes on: the kill may come at
                // once.
                let mut c = client(&server.addr);
                std::thread::spawn(move || {
                    let body = bytes::Bytes::from(vec![0u8; 512 << 10]);
                    for _ in 0..1_000 {
                        if c.put_one("flood", body.clone()).is_err() {
                            return;
                        }
                    }
                })
            })
            .collect();
        let mut raw = std::net::TcpStream::connect(&server.addr).unwrap();
        let mut frames = bytes::BytesMut::new();
        Request::Receive(Receive {
            queue: QueueRef {
                name: "first".into(),
                dlq: false,
            },
            max_messages: 1,
            visibility_ms: None,
            wait_ms: Some(10_000),
            channel: None,
            fields: Fields::ALL,
        })
        .encode(1, &mut frames);
        Request::Put {
            queue: "first".into(),
            messages: vec![PutEntry {
                payload: bytes::Bytes::from(format!("round {round}")),
                ..Default::default()
            }],
        }
        .encode(2, &mut frames);
        raw.write_all(&frames).unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = bytes::BytesMut::new();
        let mut chunk = [0u8; 4096];
        let seen = 'read: loop {
            while let Some((h, body)) =
                fila_proto::split_frame(&mut buf, fila_proto::FRAME_LEN_LIMIT).unwrap()
            {
                if h.request_id == 1 {
                    match Response::decode(&h, body).unwrap() {
                        Response::Messages(ms) if ms.len() == 1 => break 'read ms[0].clone(),
                        other => panic!("round {round}: {other:?}"),
                    }
                }
            }
            let n = raw.read(&mut chunk).expect("an answer");
            assert!(n > 0, "round {round}: the connection closed");
            buf.extend_from_slice(&chunk[..n]);
        };
        // At once: the receive's answer may be all the client ever got.
        server.child.kill().unwrap();
        server.child.wait().unwrap();
        for f in flood {
            f.join().unwrap();
        }
        drop(server);
        server = start(&dir);
        let mut c = client(&server.addr);
        c.purge("flood", false).unwrap();
        let page = c
            .peek(
                QueueRef {
                    name: "first".into(),
                    dlq: false,
                },
                seen.seq,
                1,
            )
            .unwrap();
        assert!(
            page.first()
                .is_some_and(|m| m.id == seen.id && m.payload == seen.payload),
            "round {round}: the message handed out ({:?}) is gone after the restart: {page:?}",
            seen.id
        );
        let again = c.put_one("first", "next").unwrap();
        assert_ne!(again.id, seen.id, "round {round}: its id was given again");
        // Done with it.
        let got = c.receive("first", 10, Some(0)).unwrap();
        let receipts: Vec<_> = got.iter().filter_map(|m| m.receipt).collect();
        c.delete("first", &receipts).unwrap();
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 21: a producer that resends after kill -9 with the deduplication
/// ids it used stores nothing twice: every put it sent (answered or not)
/// sent again after the restart, each answered as the first was when the
/// first was answered, and each payload in the queue once.
#[test]
fn a_resend_with_its_dedup_ids_after_kill_9_stores_nothing_twice() {
    let rounds: u64 = std::env::var("FILA_KILL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let dir = std::env::temp_dir().join(format!("fila-kill9-dedup-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut server = start(&dir);
    client(&server.addr)
        .create_queue(
            "once",
            SettingsPatch {
                dedup_window_ms: Some(600_000),
                ..SettingsPatch::default()
            },
        )
        .unwrap();
    // Every put sent: its number, and its answer's sequence number if one came.
    let sent = Arc::new(Mutex::new(Vec::<(u64, Option<u64>)>::new()));
    let next = Arc::new(AtomicU64::new(0));
    for round in 0..rounds {
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (addr, sent, next, stop) = (
                    server.addr.clone(),
                    sent.clone(),
                    next.clone(),
                    stop.clone(),
                );
                std::thread::spawn(move || {
                    let mut c = client(&addr);
                    while !stop.load(Ordering::Acquire) {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        let i = {
                            let mut s = sent.lock().unwrap();
                            s.push((n, None));
                            s.len() - 1
                        };
                        match c.put_idempotent("once", format!("m{n}"), format!("id-{n}")) {
                            Ok(ack) => sent.lock().unwrap()[i].1 = Some(ack.seq),
                            Err(_) => return,
                        }
                    }
                })
            })
            .collect();
        let target = sent.lock().unwrap().len() + 50;
        let deadline = Instant::now() + Duration::from_secs(60);
        while sent.lock().unwrap().len() < target {
            assert!(Instant::now() < deadline, "round {round}: puts stalled");
            std::thread::yield_now();
        }
        server.child.kill().unwrap();
        server.child.wait().unwrap();
        stop.store(true, Ordering::Release);
        for w in workers {
            w.join().unwrap();
        }
        drop(server);
        server = start(&dir);
        // The producer resends everything it sent.
        let mut c = client(&server.addr);
        let sent = sent.lock().unwrap();
        for (n, seq) in sent.iter() {
            let ack = c
                .put_idempotent("once", format!("m{n}"), format!("id-{n}"))
                .unwrap();
            if let Some(seq) = seq {
                assert_eq!(ack.seq, *seq, "round {round}: m{n} answered anew");
            }
        }
        let mut payloads: Vec<String> = Vec::new();
        let mut from = 0;
        loop {
            let page = c
                .peek(
                    QueueRef {
                        name: "once".into(),
                        dlq: false,
                    },
                    from,
                    100,
                )
                .unwrap();
            let Some(last) = page.last() else { break };
            from = last.seq + 1;
            payloads.extend(
                page.iter()
                    .map(|m| String::from_utf8_lossy(&m.payload).into_owned()),
            );
        }
        let unique: HashSet<&String> = payloads.iter().collect();
        assert_eq!(
            unique.len(),
            payloads.len(),
            "round {round}: a payload twice"
        );
        assert_eq!(payloads.len(), sent.len(), "round {round}: every put once");
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
