//! Shared by the tests that run the `fila-server` binary.

// Each test file uses its own part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;
use std::time::Instant;

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

/// A running `fila-server` process, killed when dropped.
pub struct Child {
    pub child: std::process::Child,
    /// Its `XDG_DATA_HOME`, so its default data directory is its own.
    pub data: std::path::PathBuf,
    pub addr: String,
    /// Its SQS listener's address (empty when off).
    pub sqs: String,
    /// Log lines up to the listening line.
    pub log: Vec<String>,
    /// The log lines after it.
    pub lines: std::sync::mpsc::Receiver<String>,
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

/// A fresh `XDG_DATA_HOME` for one spawned server.
pub fn data_home() -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "fila-bin-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub const ARGS: [&str; 14] = [
    "--listen",
    "127.0.0.1:0",
    "--azure-listen",
    "off",
    "--metrics-listen",
    "off",
    "--console-listen",
    "off",
    "--sqs-listen",
    "127.0.0.1:0",
    "--shards",
    "2",
    "--event-loops",
    "2",
];

/// Starts the binary through `sh -c "<prefix> exec fila-server ARGS..."`
/// and waits (20 s at most) for its listening line.
pub fn spawn(prefix: &str, extra: &[&str], env: &[(&str, &str)]) -> Child {
    let mut cmd = format!("{prefix} exec \"$0\"");
    for (i, _) in ARGS.iter().chain(extra).enumerate() {
        // ${N}: sh reads $10 as $1 followed by 0.
        cmd.push_str(&format!(" \"${{{}}}\"", i + 1));
    }
    let data = data_home();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .arg(env!("CARGO_BIN_EXE_fila-server"))
        .args(ARGS.iter().chain(extra))
        .env("XDG_DATA_HOME", &data)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fila-server starts");
    if let Some((addr, log, lines)) = listening(&mut child, 20) {
        let sqs = log
            .last()
            .and_then(|l| l.split("sqs=").nth(1))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or("")
            .to_owned();
        return Child {
            child,
            data,
            addr,
            sqs,
            log,
            lines,
        };
    }
    let _ = child.kill();
    let mut err = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        let _ = stderr.read_to_string(&mut err);
    }
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&data);
    panic!("no listening line with the address: {err}");
}

/// Waits (20 s at most) for the process to exit.
pub fn exit_status(child: &mut std::process::Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        assert!(Instant::now() < deadline, "the process did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The thread names ARCHITECTURE.md's "Threads and what each owns" gives
/// (in backticks, `fila-…`; an `i` at the end stands for a number).
pub fn documented_threads() -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ARCHITECTURE.md");
    let doc = std::fs::read_to_string(path).expect("ARCHITECTURE.md");
    let section = doc
        .split("## Threads and what each owns")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("a section on threads");
    let mut names: Vec<String> = section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|q| q.starts_with("fila-") && !q.contains(' ') && !q.contains('/'))
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Whether thread name `comm` (the kernel keeps 15 bytes) is the
/// documented `name`.
fn is_named(comm: &str, name: &str) -> bool {
    let cut = |s: &str| s.chars().take(15).collect::<String>();
    if cut(name) == comm {
        return true;
    }
    match name.strip_suffix('i') {
        Some(stem) => comm
            .strip_prefix(&cut(stem))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())),
        None => false,
    }
}

/// Every thread process `pid` runs but its main one is one that
/// ARCHITECTURE.md names (read from `/proc`); answers the names seen.
pub fn assert_threads_documented(pid: u32) -> Vec<String> {
    let documented = documented_threads();
    assert!(documented.len() >= 7, "{documented:?}");
    let mut seen = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("/proc") {
        let task = task.expect("a task");
        if task.file_name().to_string_lossy() == pid.to_string() {
            continue;
        }
        let Ok(comm) = std::fs::read_to_string(task.path().join("comm")) else {
            // It ended meanwhile.
            continue;
        };
        let comm = comm.trim_end().to_owned();
        assert!(
            documented.iter().any(|d| is_named(&comm, d)),
            "thread {comm:?} of the server is not in ARCHITECTURE.md's {documented:?}"
        );
        seen.push(comm);
    }
    seen.sort();
    seen
}
