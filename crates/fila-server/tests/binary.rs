//! The `fila-server` binary: starts, serves, and stops on SIGTERM.

mod common;

use common::{data_home, exit_status, spawn};

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn it_starts_serves_and_stops_gracefully_on_sigterm() {
    let mut server = spawn("", &[], &[]);
    let addr = server.addr.clone();
    let child = &mut server.child;
    // list queues by hand: request id 1, prefix "", after "", limit 0.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(&[
        0, 0, 0, 18, 1, 0x13, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0,
    ])
    .unwrap();
    let mut answer = [0u8; 19];
    s.read_exact(&mut answer).unwrap();
    assert_eq!(answer[15], 1, "answered request 1");
    assert_eq!(&answer[16..], &[0, 0, 0], "no queues, no next page");
    // Every thread it runs is one ARCHITECTURE.md names.
    let threads = common::assert_threads_documented(child.id());
    for name in ["fila-loop-0", "fila-loop-1", "fila-wal-writer"] {
        assert!(threads.iter().any(|t| t == name), "{threads:?}");
    }
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let st = exit_status(child);
    assert!(st.success(), "exit status {st}");
}

#[test]
fn a_panic_on_any_thread_stops_the_process_with_status_70() {
    let mut server = spawn("", &[], &[("FILA_TEST_PANIC", "1")]);
    let st = exit_status(&mut server.child);
    assert_eq!(st.code(), Some(70), "exit status {st}");
}

fn hello(id: u64) -> Vec<u8> {
    // hello, client "t"
    let mut f = vec![0, 0, 0, 15, 1, 0x01, 0, 0];
    f.extend_from_slice(&id.to_be_bytes());
    f.extend_from_slice(&[0, 1, b't']);
    f
}

#[test]
fn out_of_descriptors_it_warns_and_accepts_again_once_they_free_up() {
    let server = spawn("ulimit -n 40;", &[], &[]);
    assert!(
        server.log.iter().any(|l| l.contains("open-files limit")),
        "a warning at start: {:?}",
        server.log
    );
    // More clients than descriptors: the last ones wait in the backlog.
    let mut clients: Vec<TcpStream> = (0..60)
        .map(|i| {
            let mut s = TcpStream::connect(&server.addr).unwrap();
            s.write_all(&hello(i)).unwrap();
            s
        })
        .collect();
    // Free the first 40; every one of the other 20 is then served.
    let rest = clients.split_off(40);
    drop(clients);
    for (i, mut s) in rest.into_iter().enumerate() {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut head = [0u8; 16];
        s.read_exact(&mut head)
            .unwrap_or_else(|e| panic!("client {} was never served: {e}", 40 + i));
        assert_eq!(head[5], 0x01, "a hello answer");
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

/// Three wrong tokens close a connection; an address that keeps failing
/// (reconnecting for more guesses) is refused at connect for a while, even
/// with the right token; the warnings are rate limited.
#[test]
fn failed_auths_close_the_connection_then_block_the_address_and_warn_rate_limited() {
    let dir = std::env::temp_dir().join(format!("fila-auth-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("fila.toml");
    std::fs::write(
        &config,
        "[[tokens]]\ntoken = \"right\"\n[[tokens.grants]]\nqueues = \"*\"\npermissions = [\"send\"]\n",
    )
    .unwrap();
    let server = spawn("", &["--config", config.to_str().unwrap()], &[]);
    let started = Instant::now();
    let auth = |id: u64, token: &[u8; 5]| {
        let mut f = vec![0, 0, 0, 19, 1, 0x02, 0, 0];
        f.extend_from_slice(&id.to_be_bytes());
        f.extend_from_slice(&[0, 5]);
        f.extend_from_slice(token);
        f
    };
    let blocked = |all: &[u8]| all.windows(14).any(|w| w == b"too many faile");
    // Connections of 3 wrong tokens each, as fast as they are answered,
    // until the address is refused.
    let mut refused_at = None;
    for n in 0..40 {
        let mut s = TcpStream::connect(&server.addr).unwrap();
        for id in 1..=3 {
            // The server may have closed already (refused at connect).
            let _ = s.write_all(&auth(id, b"wrong"));
        }
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut all = Vec::new();
        let _ = s.read_to_end(&mut all);
        if blocked(&all) {
            refused_at = Some(n);
            break;
        }
        assert!(all.len() >= 3 * 16, "three answers before the close");
    }
    let n = refused_at.expect("an address that keeps failing is refused");
    assert!(
        n * 3 >= fila_server::guard::FREE_FAILURES as usize,
        "refused after {n} connections"
    );
    // Blocked means blocked, whatever token it brings now.
    let mut s = TcpStream::connect(&server.addr).unwrap();
    let _ = s.write_all(&auth(1, b"right"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut all = Vec::new();
    let _ = s.read_to_end(&mut all);
    assert!(blocked(&all), "{:?}", String::from_utf8_lossy(&all));
    // At most one warning a second made it to the log.
    let mut warnings = 0;
    while let Ok(line) = server.lines.recv_timeout(Duration::from_millis(500)) {
        if line.contains("unknown token") {
            warnings += 1;
        }
    }
    let seconds = started.elapsed().as_secs() + 2;
    assert!(
        (1..=seconds).contains(&warnings),
        "{warnings} warnings for {} failures",
        3 * n
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_default_data_directory_is_made_and_check_data_reads_it() {
    let mut server = spawn("", &[], &[]);
    let mut c =
        fila_client::Client::connect(fila_client::ClientOptions::new(server.addr.clone())).unwrap();
    assert!(c
        .create_queue("q", fila_client::SettingsPatch::default())
        .unwrap());
    drop(c);
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(server.child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    assert!(exit_status(&mut server.child).success());
    let dir = server.data.join("fila");
    assert!(dir.join("LOCK").exists(), "{}", dir.display());
    let o = Command::new(env!("CARGO_BIN_EXE_fila-server"))
        .arg("--check-data")
        .arg(&dir)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("1 queues, 0 messages"), "{out}");
    assert!(!out.contains("torn"), "{out}");
    // The last record cut short (a torn write): still ok, and said.
    let segment = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .max()
        .expect("a segment");
    let len = std::fs::metadata(&segment).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_fila-server"))
        .arg("--check-data")
        .arg(&dir)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("0 queues")
            && out.contains("a torn write ends the log")
            && out.contains(".seg"),
        "{out}"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_fila-server"))
        .arg("--check-data")
        .arg(dir.join("nowhere"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a directory"));
}

fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The log holds every payload and attribute: the data directory is its
/// owner's alone (0700) and so is every file in it (0600), even under a
/// umask that would give them to everyone.
#[test]
fn the_data_directory_and_its_files_are_private_whatever_the_umask() {
    let server = spawn("umask 000;", &[], &[]);
    let mut c =
        fila_client::Client::connect(fila_client::ClientOptions::new(server.addr.clone())).unwrap();
    c.create_queue("q", fila_client::SettingsPatch::default())
        .unwrap();
    c.put_one("q", "secret").unwrap();
    let dir = server.data.join("fila");
    assert_eq!(mode(&dir), 0o700, "{}", dir.display());
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(files
        .iter()
        .any(|f| f.extension().is_some_and(|x| x == "seg")));
    for f in &files {
        assert_eq!(mode(f), 0o600, "{}", f.display());
    }
}

/// A data directory others may read is used, with a warning that says so.
#[test]
fn a_data_directory_others_can_read_is_warned_of() {
    use std::os::unix::fs::PermissionsExt;
    let open = data_home().join("open");
    std::fs::create_dir_all(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let server = spawn("", &["--data-dir", open.to_str().unwrap()], &[]);
    assert!(
        server
            .log
            .iter()
            .any(|l| l.contains("open to its group or to everyone") && l.contains("755")),
        "{:?}",
        server.log
    );
    drop(server);
    let _ = std::fs::remove_dir_all(open.parent().unwrap());
}

/// `--sync none` keeps nothing: it uses no data directory (none is made,
/// none is locked) and says so at start.
#[test]
fn sync_none_uses_no_data_directory_and_says_so() {
    let home = data_home();
    let dir = home.join("unused");
    let server = spawn(
        "",
        &["--sync", "none", "--data-dir", dir.to_str().unwrap()],
        &[],
    );
    assert!(
        server
            .log
            .iter()
            .any(|l| l.contains("no data directory is used or locked")),
        "{:?}",
        server.log
    );
    assert!(!dir.exists(), "a directory was made");
    drop(server);
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn sighup_reloads_the_tokens_and_a_broken_file_keeps_them() {
    let dir = data_home();
    let file = dir.join("fila.toml");
    let write = |token: &str| {
        std::fs::write(
            &file,
            format!("[[tokens]]\ntoken = {token:?}\n[[tokens.grants]]\nqueues = \"*\"\npermissions = [\"manage\"]\n"),
        )
        .unwrap()
    };
    write("first");
    let config = file.display().to_string();
    let server = spawn("", &["--config", &config], &[]);
    let connect = |token: &str| {
        fila_client::Client::connect(
            fila_client::ClientOptions::new(server.addr.clone()).token(token),
        )
        .and_then(|mut c| c.list_queues(""))
    };
    connect("first").expect("the first token works");
    let hup = |pid: u32| {
        let st = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    };
    let wait_line = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(line) = server.lines.recv_timeout(Duration::from_millis(100)) {
                if line.contains(what) {
                    return line;
                }
            }
        }
        panic!("no log line with {what:?}");
    };
    write("second");
    hup(server.child.id());
    wait_line("reloaded tokens and TLS files");
    connect("second").expect("the new token works");
    assert!(connect("first").is_err(), "the old token is gone");
    // A file that does not parse: one line saying so, the tokens kept.
    std::fs::write(&file, "[[tokens]\n").unwrap();
    hup(server.child.id());
    let line = wait_line("reload:");
    assert!(line.contains("kept"), "{line}");
    connect("second").expect("the tokens in use are kept");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn log_format_json_writes_one_object_a_line() {
    let data = data_home();
    let mut child = Command::new(env!("CARGO_BIN_EXE_fila-server"))
        .args(common::ARGS)
        .args(["--log-format", "json"])
        .env("XDG_DATA_HOME", &data)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut listening = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    while listening.is_none() && Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) {
            let v: serde_json::Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not one JSON object: {line:?}: {e}"));
            if v["fields"]["message"] == "fila-server listening" {
                listening = Some(v);
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&data);
    let v = listening.expect("a listening line");
    assert_eq!(v["level"], "INFO");
    assert!(v["fields"]["listen"]
        .as_str()
        .is_some_and(|a| a.starts_with("127.0.0.1:")));
}

#[test]
fn the_systemd_unit_verifies_and_is_hardened() {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/fila.service"
    ))
    .unwrap();
    for line in [
        "DynamicUser=yes",
        "StateDirectory=fila",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "ExecReload=/bin/kill -HUP $MAINPID",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line}");
    }
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped systemd-analyze verify: not installed");
        return;
    }
    // The unit as installed, but naming the binary built here.
    let dir = data_home();
    let path = dir.join("fila.service");
    std::fs::write(
        &path,
        unit.replace(
            "/usr/local/bin/fila-server",
            env!("CARGO_BIN_EXE_fila-server"),
        ),
    )
    .unwrap();
    let o = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        o.status.success() && o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// An address another process holds: the start fails in one line that
/// names the address and which setting asked for it.
#[test]
fn a_taken_address_is_named_in_one_line() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    for (flag, setting) in [
        ("--listen", "listen"),
        ("--sqs-listen", "sqs_listen"),
        ("--azure-listen", "azure_listen"),
        ("--console-listen", "console_listen"),
        ("--metrics-listen", "metrics_listen"),
    ] {
        let says = format!("cannot listen on {addr} ({setting}): ");
        let mut args = vec![
            "--sync",
            "none",
            "--listen",
            "127.0.0.1:0",
            "--sqs-listen",
            "off",
            "--azure-listen",
            "off",
            "--console-listen",
            "off",
            "--metrics-listen",
            "off",
        ];
        args.extend([flag, addr.as_str()]);
        let o = Command::new(env!("CARGO_BIN_EXE_fila-server"))
            .args(&args)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{flag}: it started");
        let err = String::from_utf8_lossy(&o.stderr);
        let last = err.trim().lines().last().unwrap_or_default();
        assert!(
            last.starts_with("fila-server: ") && last.contains(&says),
            "{flag}: {err}"
        );
    }
}
