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
