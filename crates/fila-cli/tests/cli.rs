//! The `fila` binary against a real server.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use fila_tests::TestServer;

fn fila(s: &TestServer, args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fila"));
    cmd.arg("--addr").arg(s.addr.to_string()).args(args);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("fila runs");
    let input = stdin.unwrap_or("");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn receipts(json: &str) -> Vec<String> {
    json.split("\"receipt\":\"")
        .skip(1)
        .map(|rest| rest[..64].to_owned())
        .collect()
}

#[test]
fn a_tour_with_the_cli() {
    let s = TestServer::start();
    let o = fila(
        &s,
        &["queue", "create", "jobs", "--max-deliveries", "3"],
        None,
    );
    assert!(o.status.success(), "{o:?}");
    assert_eq!(out(&o).trim(), "created queue jobs");
    assert!(
        out(&fila(&s, &["queue", "get", "jobs"], None)).contains("max_deliveries             3")
    );
    assert_eq!(
        out(&fila(&s, &["--json", "queue", "list"], None)).trim(),
        "[\"jobs\"]"
    );

    let o = fila(
        &s,
        &[
            "put",
            "jobs",
            "first",
            "second",
            "--attr",
            "k=v",
            "--channel",
            "eu",
        ],
        None,
    );
    assert!(o.status.success(), "{o:?}");
    assert_eq!(out(&o).lines().count(), 2);
    let o = fila(&s, &["put", "jobs"], Some("from stdin 1\nfrom stdin 2\n"));
    assert!(o.status.success());

    let o = fila(&s, &["--json", "receive", "jobs", "--max", "10"], None);
    assert!(o.status.success());
    let json = out(&o);
    assert!(
        json.contains("\"payload\":\"first\"") && json.contains("\"attributes\":{\"k\":\"v\"}"),
        "{json}"
    );
    let rs = receipts(&json);
    assert_eq!(rs.len(), 4);

    let o = fila(&s, &["visibility", "jobs", &rs[0], "60000"], None);
    assert!(o.status.success(), "{o:?}");
    let o = fila(&s, &["delete", "jobs", &rs[0], &rs[1]], None);
    assert!(o.status.success(), "{o:?}");
    let o = fila(&s, &["defer", "jobs", &rs[2]], None);
    assert!(o.status.success());
    let o = fila(
        &s,
        &["dead-letter", "jobs", &rs[3], "--reason", "bad"],
        None,
    );
    assert!(o.status.success());

    let peek = out(&fila(&s, &["peek", "jobs"], None));
    assert!(peek.contains("deferred"), "{peek}");
    let dlq = out(&fila(&s, &["--json", "peek", "jobs", "--dlq"], None));
    assert!(dlq.contains("\"reason\":\"consumer\""), "{dlq}");
    let o = fila(&s, &["--json", "redrive", "jobs"], None);
    assert_eq!(out(&o).trim(), "{\"moved\":1,\"scheduled\":0}");
    let seq = peek
        .lines()
        .find(|l| l.contains("deferred"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_owned();
    let o = fila(&s, &["receive-deferred", "jobs", &seq], None);
    assert!(o.status.success(), "{o:?}");

    let stats = out(&fila(&s, &["--json", "queue", "stats", "jobs"], None));
    assert!(
        stats.contains("\"puts\":4") && stats.contains("\"deletes\":2"),
        "{stats}"
    );
    assert!(fila(&s, &["queue", "purge", "jobs"], None).status.success());
    assert!(fila(&s, &["queue", "delete", "jobs"], None)
        .status
        .success());
    assert!(out(&fila(&s, &["server-stats"], None)).contains("connections"));
}

#[test]
fn exit_codes_mean_something() {
    let s = TestServer::start();
    // 2: the command line is wrong.
    let o = fila(&s, &["queue", "frobnicate"], None);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown queue subcommand"));
    assert_eq!(
        fila(&s, &["delete", "q", "not-a-receipt"], None)
            .status
            .code(),
        Some(2)
    );
    // 1: the server refused.
    let o = fila(&s, &["queue", "stats", "missing"], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("queue_not_found"));
    fila(&s, &["queue", "create", "q"], None);
    let stale = "0".repeat(64);
    assert_eq!(
        fila(&s, &["delete", "q", &stale], None).status.code(),
        Some(1),
        "a failed entry"
    );
    // 3: nothing listens there.
    let addr = s.addr.to_string();
    s.stop();
    let o = Command::new(env!("CARGO_BIN_EXE_fila"))
        .args(["--addr", &addr, "queue", "list"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
}
