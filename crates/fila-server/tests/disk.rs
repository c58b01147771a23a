//! The data directory's disk, through the real binary: a full disk (a
//! small tmpfs in a private mount namespace) and a directory made
//! read-only (for a server running as an unprivileged user). Both need
//! root (to mount, to change user); without it each test says so and
//! passes without running.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fila_client::{Client, ClientOptions, ErrorCode, SettingsPatch};

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

fn scratch(what: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "fila-{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A tmpfs of `size` in a mount namespace of its own, held by a process
/// that sleeps there; servers run in it through `nsenter`. Dropped, the
/// holder is killed and the tmpfs goes with it.
struct Tmpfs {
    holder: Child,
    dir: PathBuf,
}

impl Tmpfs {
    fn new(size: &str) -> Option<Tmpfs> {
        if !is_root() {
            eprintln!("skipped: a tmpfs in a private mount namespace needs root");
            return None;
        }
        let dir = scratch("tmpfs");
        let mut holder = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(format!(
                "mount -t tmpfs -o size={size},mode=0700 fila-test \"$0\" && echo mounted && exec sleep 600"
            ))
            .arg(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        let mut out = holder.stdout.take().unwrap();
        let mut line = [0u8; 8];
        let mounted = out.read_exact(&mut line).is_ok() && &line[..7] == b"mounted";
        if !mounted {
            let _ = holder.kill();
            let _ = holder.wait();
            let mut err = String::new();
            let _ = holder.stderr.take().unwrap().read_to_string(&mut err);
            eprintln!("skipped: no tmpfs in a private mount namespace: {err}");
            let _ = std::fs::remove_dir_all(&dir);
            return None;
        }
        let fs = Tmpfs { holder, dir };
        let enters = Command::new("nsenter")
            .arg("-t")
            .arg(fs.holder.id().to_string())
            .args(["-m", "--", "true"])
            .status()
            .is_ok_and(|s| s.success());
        if !enters {
            eprintln!("skipped: nsenter cannot enter the test's mount namespace");
            return None;
        }
        Some(fs)
    }

    /// The binary with `args`, run in the namespace.
    fn server(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg("-t")
            .arg(self.holder.id().to_string())
            .arg("-m")
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_fila-server"))
            .args(args);
        cmd
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A running server process, killed when dropped.
struct Running {
    child: Child,
    addr: String,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(mut cmd: Command) -> Result<Running, String> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    match common::listening(&mut child, 20) {
        Some((addr, _, lines)) => Ok(Running { child, addr, lines }),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            Err(err)
        }
    }
}

const ARGS: [&str; 14] = [
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

fn args<'a>(data: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = ARGS.to_vec();
    a.extend(["--data-dir", data]);
    a.extend(extra);
    a
}

fn client(s: &Running) -> Client {
    Client::connect(ClientOptions::new(s.addr.clone())).unwrap()
}

fn refused_for_disk(e: &fila_client::ClientError) -> bool {
    let text = e.to_string();
    e.code() == Some(ErrorCode::RESOURCE_EXHAUSTED)
        && (text.contains("disk full") || text.contains("not writable"))
}

/// A server on a 16 MiB file system fills it: puts are refused
/// (`resource_exhausted`, disk full) while it keeps running (it used to
/// stop with status 74 and again after every restart); receives and
/// deletes go on; it restarts on the full disk with every acknowledged
/// message; once messages are deleted, puts are taken again by themselves.
#[test]
fn a_full_disk_refuses_puts_keeps_serving_and_recovers_by_itself() {
    let Some(fs) = Tmpfs::new("16m") else { return };
    let data = fs.dir.join("data");
    let data = data.to_str().unwrap();
    let extra = [
        "--segment-bytes",
        "1048576",
        "--disk-reserve-bytes",
        "2097152",
    ];
    let mut server = start(fs.server(&args(data, &extra))).expect("starts");
    let mut c = client(&server);
    c.create_queue("q", SettingsPatch::default()).unwrap();
    let body = vec![3u8; 16 << 10];
    let mut acked = 0u64;
    let refusal = loop {
        assert!(acked < 2_000, "16 MiB never filled");
        match c.put_one("q", body.clone()) {
            Ok(_) => acked += 1,
            Err(e) => break e,
        }
    };
    assert!(refused_for_disk(&refusal), "{refusal}");
    assert!(acked >= 100, "only {acked} fit");
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server stopped"
    );
    // Receives and deletes go on.
    let got = c.receive("q", 10, Some(0)).unwrap();
    assert_eq!(got.len(), 10);
    let receipts: Vec<_> = got.iter().map(|m| m.receipt.unwrap()).collect();
    c.delete("q", &receipts).unwrap();
    let stats = c.server_stats().unwrap();
    assert!(
        stats
            .iter()
            .any(|(k, v)| k == "puts_refused_disk" && *v == 1),
        "{stats:?}"
    );
    drop(c);
    // Killed, it starts again on the full disk with everything.
    let _ = server.child.kill();
    let _ = server.child.wait();
    drop(server);
    let server = start(fs.server(&args(data, &extra))).expect("starts on a full disk");
    let mut c = client(&server);
    assert_eq!(c.stats("q").unwrap().visible, acked - 10);
    // Deleting makes room: puts come back without a restart.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = c.receive("q", 20, Some(0)).unwrap();
        if got.is_empty() {
            break;
        }
        let receipts: Vec<_> = got.iter().map(|m| m.receipt.unwrap()).collect();
        c.delete("q", &receipts).unwrap();
        assert!(Instant::now() < deadline, "deleting took too long");
    }
    loop {
        match c.put_one("q", "room again") {
            Ok(_) => break,
            Err(e) => {
                assert!(refused_for_disk(&e), "{e}");
                assert!(Instant::now() < deadline, "puts never came back");
                std::thread::yield_now();
            }
        }
    }
    let _ = server.lines.try_recv();
}

/// Runs the binary as `nobody` (root can write anywhere, so a read-only
/// directory shows only to an unprivileged user).
fn as_nobody(args: &[&str]) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid",
        "65534",
        "--regid",
        "65534",
        "--clear-groups",
        "--",
    ])
    .arg(env!("CARGO_BIN_EXE_fila-server"))
    .args(args);
    cmd
}

fn chown_nobody(path: &Path) {
    let ok = Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A data directory made read-only (its files still writable) is found
/// at start — the server refuses, saying so — and while it runs as soon
/// as the next segment is made ahead (half a segment before it is due):
/// puts are refused then, receives go on.
#[test]
fn a_data_directory_made_read_only_is_found_at_start_and_before_a_segment_is_due() {
    if !is_root() {
        eprintln!("skipped: running the server as another user needs root");
        return;
    }
    let runs = as_nobody(&["--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !runs {
        eprintln!("skipped: the binary cannot be run as nobody here (setpriv, or its path)");
        return;
    }
    let home = scratch("readonly");
    chmod(&home, 0o755);
    let dir = home.join("data");
    std::fs::create_dir_all(&dir).unwrap();
    chmod(&dir, 0o700);
    chown_nobody(&dir);
    let data = dir.to_str().unwrap();
    let extra = ["--segment-bytes", "1048576"];
    // Running: made read-only, the next segment cannot be made ahead.
    let server = start(as_nobody(&args(data, &extra))).expect("starts");
    let mut c = client(&server);
    c.create_queue("q", SettingsPatch::default()).unwrap();
    c.put_one("q", "before").unwrap();
    chmod(&dir, 0o500);
    let body = vec![1u8; 8 << 10];
    let mut puts = 0;
    let refusal = loop {
        // Half a segment is 64 of these; a whole one 128.
        assert!(puts < 120, "not found before the segment was due");
        match c.put_one("q", body.clone()) {
            Ok(_) => puts += 1,
            Err(e) => break e,
        }
    };
    assert!(refused_for_disk(&refusal), "{refusal}");
    assert!(refusal.to_string().contains("not writable"), "{refusal}");
    assert_eq!(
        c.receive("q", 1, Some(0)).unwrap().len(),
        1,
        "receives go on"
    );
    drop(c);
    drop(server);
    // At start: refused, saying why.
    let out = as_nobody(&args(data, &extra)).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("new files cannot be made there"), "{err}");
    chmod(&dir, 0o700);
    let _ = std::fs::remove_dir_all(&home);
}
