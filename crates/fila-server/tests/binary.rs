//! The `fila-server` binary: starts, serves, and stops on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn it_starts_serves_and_stops_gracefully_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fila-server"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "off",
            "--shards",
            "2",
            "--event-loops",
            "2",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fila-server starts");
    let stdout = child.stdout.take().unwrap();
    // Read the log on a thread, so a missing line fails the test in time
    // instead of blocking it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut addr = None;
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(20)) {
        if let Some(rest) = line.split("listen=").nth(1) {
            addr = Some(rest.split_whitespace().next().unwrap().to_owned());
            break;
        }
    }
    let Some(addr) = addr else {
        let _ = child.kill();
        panic!("no listening line with the address");
    };
    // list queues by hand: request id 1.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(&[0, 0, 0, 14, 1, 0x13, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0])
        .unwrap();
    let mut answer = [0u8; 18];
    s.read_exact(&mut answer).unwrap();
    assert_eq!(answer[15], 1, "answered request 1");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert!(st.success(), "exit status {st}");
            break;
        }
        assert!(Instant::now() < deadline, "did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_bad_flag_is_one_line_and_exit_2() {
    let o = Command::new(env!("CARGO_BIN_EXE_fila-server"))
        .args(["--shards", "lots"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err.trim(),
        "fila-server: --shards: \"lots\" is not a whole number"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_fila-server"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("127.0.0.1:7700"));
}
