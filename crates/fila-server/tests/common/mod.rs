//! Shared by the tests that run the `fila-server` binary.

use std::io::{BufRead, BufReader};
use std::sync::mpsc::Receiver;
use std::time::Duration;

/// Reads the child's stdout on a thread (so a missing line fails the test
/// in time instead of blocking it) until the "listening" line: answers the
/// address it names, the lines up to it, and the rest to come. `None` when
/// no such line came within `secs`.
pub fn listening(
    child: &mut std::process::Child,
    secs: u64,
) -> Option<(String, Vec<String>, Receiver<String>)> {
    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut log = Vec::new();
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(secs)) {
        log.push(line.clone());
        if let Some(rest) = line.split("listen=").nth(1) {
            let addr = rest.split_whitespace().next()?.to_owned();
            return Some((addr, log, rx));
        }
    }
    eprintln!("no listening line: {log:?}");
    None
}
