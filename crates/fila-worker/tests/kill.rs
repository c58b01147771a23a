//! A worker process killed with SIGKILL mid-handler: its messages come back
//! when their leases run out, and nothing else is lost.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fila_client::SettingsPatch;
use fila_tests::{TempDir, TestServer};

#[test]
fn a_killed_workers_messages_come_back_after_the_lease() {
    let s = TestServer::with(|c| c.sync = fila_server::Sync::None);
    let mut c = s.client();
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    for i in 0..3 {
        c.put_one("jobs", format!("m{i}")).unwrap();
    }
    let dir = TempDir::new("worker");
    let config = dir.path().join("worker.toml");
    std::fs::write(
        &config,
        "[queues.jobs]\nvisibility_timeout_ms = 1000\nlong_poll_ms = 200\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_fila-echo-worker"))
        .args([
            "--addr",
            &s.addr.to_string(),
            "--queue",
            "jobs",
            "--work-ms",
            "60000",
        ])
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let wait_for =
        |what: &str, c: &mut fila_client::Client, f: &dyn Fn(&fila_client::Stats) -> bool| {
            let end = Instant::now() + Duration::from_secs(20);
            loop {
                let st = c.stats("jobs").unwrap();
                if f(&st) {
                    return st;
                }
                assert!(Instant::now() < end, "{what}: {st:?}");
                std::thread::sleep(Duration::from_millis(10));
            }
        };
    wait_for("the worker leases all three", &mut c, &|st| {
        st.in_flight == 3
    });
    // Renewed past the first lease: still held after two lease lengths.
    std::thread::sleep(Duration::from_millis(2_000));
    let held = c.stats("jobs").unwrap();
    child.kill().unwrap(); // SIGKILL: no drain, no release.
    child.wait().unwrap();
    assert_eq!(held.in_flight, 3, "renewed while alive: {held:?}");
    let killed_at = Instant::now();
    wait_for("the leases run out", &mut c, &|st| st.visible == 3);
    assert!(killed_at.elapsed() < Duration::from_secs(3));
    let back = c.receive("jobs", 10, Some(0)).unwrap();
    assert_eq!(back.len(), 3);
    assert!(back.iter().all(|m| m.delivery_count == 2), "{back:?}");
}
