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
    // A single node has no cluster to show: a refusal (1), said plainly.
    let o = fila(&s, &["cluster", "status"], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("single node"));
    assert_eq!(fila(&s, &["cluster", "grow"], None).status.code(), Some(2));
    // Nor members to change.
    let o = fila(
        &s,
        &[
            "cluster",
            "add",
            "4",
            "--peer",
            "127.0.0.1:1",
            "--client",
            "127.0.0.1:2",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("single node"));
    assert_eq!(
        fila(&s, &["cluster", "add", "4", "--peer", "127.0.0.1:1"], None)
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        fila(&s, &["cluster", "promote", "zero"], None)
            .status
            .code(),
        Some(2)
    );
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

#[test]
fn receive_without_wait_uses_the_queues_default_wait() {
    let s = TestServer::start();
    let mut c = s.client();
    c.create_queue("slow", fila_client::SettingsPatch::default())
        .unwrap();
    // The queue's default wait is 30 s: the CLI parks until a put comes.
    let child = Command::new(env!("CARGO_BIN_EXE_fila"))
        .args(["--addr", &s.addr.to_string(), "receive", "slow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    s.wait_parked(1);
    c.put_one("slow", "late").unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{o:?}");
    assert!(out(&o).contains("late"), "{}", out(&o));
}

#[test]
fn messages_show_ids_attributes_dead_letter_reasons_and_binary_payloads() {
    let s = TestServer::start();
    let mut c = s.client();
    c.create_queue("q", fila_client::SettingsPatch::default())
        .unwrap();
    c.put(
        "q",
        vec![fila_client::PutEntry {
            payload: bytes::Bytes::from_static(&[0xff, 0x00, 0x41]),
            attributes: vec![("kind".into(), "blob".into())],
            ..Default::default()
        }],
    )
    .unwrap();
    let o = fila(&s, &["--json", "peek", "q"], None);
    let json = out(&o);
    assert!(
        json.contains("\"payload\":\"/wBB\",\"payload_encoding\":\"base64\""),
        "{json}"
    );
    // A quick look (visibility 0) leaves it visible for what follows.
    let o = fila(
        &s,
        &["receive", "q", "--wait", "0", "--visibility", "0"],
        None,
    );
    let table = out(&o);
    let m = &c
        .peek(
            fila_client::QueueRef {
                name: "q".into(),
                dlq: false,
            },
            0,
            1,
        )
        .unwrap()[0];
    assert!(table.contains(&format!("{:032x}", m.id)), "{table}");
    assert!(table.contains("attribute kind=blob"), "{table}");
    assert!(table.contains("base64:/wBB"), "{table}");
    let receipt = receipts(&out(&fila(&s, &["--json", "peek", "q"], None)));
    assert!(receipt.is_empty(), "peek shows no receipts");
    // Dead-letter it with a reason; peek --dlq shows the reason.
    let got = c.receive("q", 1, Some(0)).unwrap();
    c.dead_letter("q", got[0].receipt.unwrap(), "bad-input", "not a blob")
        .unwrap();
    let table = out(&fila(&s, &["peek", "q", "--dlq"], None));
    assert!(table.contains("consumer reason \"bad-input\""), "{table}");
    assert!(table.contains("dead-lettered from q"), "{table}");
}

#[test]
fn queue_delete_if_exists_lets_scripts_reset() {
    let s = TestServer::start();
    let o = fila(&s, &["queue", "delete", "nothing-here"], None);
    assert_eq!(o.status.code(), Some(1));
    let o = fila(
        &s,
        &["queue", "delete", "nothing-here", "--if-exists"],
        None,
    );
    assert!(o.status.success(), "{o:?}");
    fila(&s, &["queue", "create", "there"], None);
    let o = fila(&s, &["queue", "delete", "there", "--if-exists"], None);
    assert!(o.status.success());
    assert!(s.client().list_queues("").unwrap().is_empty());
}

#[test]
fn the_cli_speaks_tls_with_flags_or_the_environment_and_reloads() {
    let dir = fila_tests::TempDir::new("cli-tls");
    let ca = fila_tests::pki::TestCa::new(dir.path(), "cli CA");
    let cert = ca.server(dir.path(), "server");
    let s = TestServer::with(|c| {
        c.tls_cert = Some(cert.cert.clone());
        c.tls_key = Some(cert.key.clone());
    });
    let named = format!("localhost:{}", s.addr.port());
    let ca_path = ca.cert.display().to_string();
    let run = |args: &[&str], env: &[(&str, &str)]| {
        Command::new(env!("CARGO_BIN_EXE_fila"))
            .args(args)
            .env_remove("FILA_TLS")
            .env_remove("FILA_CA")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let o = run(
        &[
            "--addr", &named, "--tls", "--ca", &ca_path, "queue", "create", "q",
        ],
        &[],
    );
    assert!(o.status.success(), "{o:?}");
    let filas = format!("filas://{named}");
    let o = run(
        &["--addr", &filas, "queue", "list"],
        &[("FILA_CA", ca_path.as_str())],
    );
    assert!(o.status.success() && out(&o).contains('q'), "{o:?}");
    let o = run(
        &["--addr", &named, "reload"],
        &[("FILA_TLS", "1"), ("FILA_CA", ca_path.as_str())],
    );
    assert!(out(&o).contains("reloaded (generation 1)"), "{o:?}");
    // Without a CA, or with the wrong one: a clear line, exit 3.
    let o = run(&["--addr", &filas, "queue", "list"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("a CA file is needed"), "{err}");
    let other = fila_tests::pki::TestCa::new(dir.path(), "other CA");
    let other_path = other.cert.display().to_string();
    let o = run(
        &["--addr", &filas, "--ca", &other_path, "queue", "list"],
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("UnknownIssuer"), "{err}");
    // TLS flags without TLS are a usage error.
    let o = run(&["--addr", &named, "--ca", &ca_path, "queue", "list"], &[]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
}

#[test]
fn a_put_with_a_dedup_id_is_stored_once() {
    let s = TestServer::start();
    fila(
        &s,
        &["queue", "create", "q", "--dedup-window", "60000"],
        None,
    );
    let first = fila(
        &s,
        &["--json", "put", "q", "hello", "--dedup-id", "h-1"],
        None,
    );
    let again = fila(
        &s,
        &["--json", "put", "q", "hello", "--dedup-id", "h-1"],
        None,
    );
    assert!(first.status.success(), "{first:?}");
    assert_eq!(out(&first), out(&again), "the same id and sequence number");
    let stats = out(&fila(&s, &["queue", "stats", "q"], None));
    assert!(stats.contains("dedup_entries"), "{stats}");
    let get = out(&fila(&s, &["queue", "get", "q"], None));
    assert!(
        get.contains("dedup_window_ms") && get.contains("60000"),
        "{get}"
    );
    let two = fila(&s, &["put", "q", "a", "b", "--dedup-id", "x"], None);
    assert_eq!(two.status.code(), Some(2), "one id names one message");
}

#[test]
fn puts_in_a_group_come_in_order_one_at_a_time() {
    let s = TestServer::start();
    let create = fila(&s, &["queue", "create", "o", "--ordered", "true"], None);
    assert!(create.status.success(), "{create:?}");
    assert!(out(&fila(&s, &["queue", "get", "o"], None)).contains("ordered"));
    let refused = fila(&s, &["put", "o", "loose"], None);
    assert!(!refused.status.success(), "an ordered queue wants a group");
    let put = fila(
        &s,
        &["put", "o", "created", "paid", "--group", "order-9"],
        None,
    );
    assert!(put.status.success(), "{put:?}");
    let got = out(&fila(
        &s,
        &["--json", "receive", "o", "--max", "10", "--wait", "0"],
        None,
    ));
    assert!(got.contains("\"payload\":\"created\""), "{got}");
    assert!(got.contains("\"group\":\"order-9\""), "{got}");
    assert!(!got.contains("paid"), "one of the group at a time: {got}");
    let stats = out(&fila(&s, &["queue", "stats", "o"], None));
    assert!(stats.contains("groups_in_flight"), "{stats}");
}

#[test]
fn a_higher_priority_is_received_first() {
    let s = TestServer::start();
    let create = fila(
        &s,
        &["queue", "create", "p", "--priority-levels", "5"],
        None,
    );
    assert!(create.status.success(), "{create:?}");
    assert!(out(&fila(&s, &["queue", "get", "p"], None)).contains("priority_levels"));
    assert!(fila(&s, &["put", "p", "bulk"], None).status.success());
    assert!(fila(&s, &["put", "p", "urgent", "--priority", "5"], None)
        .status
        .success());
    let refused = fila(&s, &["put", "p", "x", "--priority", "6"], None);
    assert!(!refused.status.success(), "above the queue's levels");
    let got = out(&fila(
        &s,
        &["--json", "receive", "p", "--max", "1", "--wait", "0"],
        None,
    ));
    assert!(got.contains("\"payload\":\"urgent\""), "{got}");
    assert!(got.contains("\"priority\":5"), "{got}");
}

#[test]
fn a_retry_policy_is_set_shown_and_a_release_waits_for_it() {
    let s = TestServer::start();
    let create = fila(
        &s,
        &[
            "queue",
            "create",
            "r",
            "--retry-initial",
            "3600000",
            "--retry-multiplier",
            "1.5",
            "--retry-max",
            "7200000",
            "--retry-jitter",
            "10",
        ],
        None,
    );
    assert!(create.status.success(), "{create:?}");
    let got = out(&fila(&s, &["--json", "queue", "get", "r"], None));
    for field in [
        "\"retry_initial_ms\":3600000",
        "\"retry_multiplier_pct\":150",
        "\"retry_max_ms\":7200000",
        "\"retry_jitter_pct\":10",
    ] {
        assert!(got.contains(field), "{field} in {got}");
    }
    for bad in ["1.234", "x", ".5", "-1", "1.-5"] {
        let o = fila(
            &s,
            &["queue", "update", "r", "--retry-multiplier", bad],
            None,
        );
        assert_eq!(o.status.code(), Some(2), "{bad}: {o:?}");
    }
    let o = fila(
        &s,
        &["queue", "update", "r", "--retry-multiplier", "0.5"],
        None,
    );
    assert_eq!(o.status.code(), Some(1), "the server's range: {o:?}");
    assert!(fila(&s, &["put", "r", "work"], None).status.success());
    let json = out(&fila(&s, &["--json", "receive", "r", "--wait", "0"], None));
    let rs = receipts(&json);
    assert_eq!(rs.len(), 1);
    let released = fila(&s, &["--json", "release", "r", &rs[0]], None);
    assert!(released.status.success(), "{released:?}");
    assert!(
        out(&released).contains("next_visible_at_ms"),
        "{released:?}"
    );
    let stats = out(&fila(&s, &["--json", "queue", "stats", "r"], None));
    assert!(stats.contains("\"delayed\":1"), "{stats}");
    assert!(stats.contains("\"retries\":1"), "{stats}");
    let again = fila(&s, &["release", "r", &rs[0]], None);
    assert_eq!(again.status.code(), Some(1), "a stale receipt: {again:?}");
}

#[test]
fn a_release_says_why_and_a_peek_shows_the_failures() {
    let s = TestServer::start();
    let create = fila(
        &s,
        &["queue", "create", "h", "--attempt-history", "3"],
        None,
    );
    assert!(create.status.success(), "{create:?}");
    assert!(out(&fila(&s, &["queue", "get", "h"], None)).contains("attempt_history"));
    assert!(fila(&s, &["put", "h", "work"], None).status.success());
    let json = out(&fila(&s, &["--json", "receive", "h", "--wait", "0"], None));
    let rs = receipts(&json);
    let released = fila(
        &s,
        &[
            "release",
            "h",
            &rs[0],
            "--reason",
            "timeout",
            "--description",
            "upstream 504",
        ],
        None,
    );
    assert!(released.status.success(), "{released:?}");
    let peek = out(&fila(&s, &["--json", "peek", "h"], None));
    assert!(
        peek.contains(
            "\"attempts\":[{\"at_ms\":"
        ) && peek.contains("\"delivery\":1,\"ended\":\"released\",\"reason\":\"timeout\",\"description\":\"upstream 504\"}]"),
        "{peek}"
    );
    let table = out(&fila(&s, &["peek", "h"], None));
    assert!(
        table.contains("failed delivery 1 at")
            && table.contains("released, \"timeout\": \"upstream 504\""),
        "{table}"
    );
}

#[test]
fn a_queue_is_paused_and_resumed_by_halves() {
    let s = TestServer::start();
    assert!(fila(&s, &["queue", "create", "p"], None).status.success());
    let paused = fila(&s, &["queue", "pause", "p", "--send"], None);
    assert!(paused.status.success(), "{paused:?}");
    assert_eq!(out(&paused).trim(), "p: sending paused");
    let refused = fila(&s, &["put", "p", "x"], None);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("queue_paused"),
        "{refused:?}"
    );
    let both = out(&fila(&s, &["--json", "queue", "pause", "p"], None));
    assert_eq!(
        both.trim(),
        "{\"name\":\"p\",\"receive_paused\":true,\"send_paused\":true}"
    );
    let got = out(&fila(&s, &["--json", "queue", "get", "p"], None));
    assert!(got.contains("\"receive_paused\":true"), "{got}");
    let resumed = out(&fila(&s, &["queue", "resume", "p", "--send"], None));
    assert_eq!(resumed.trim(), "p: receiving paused");
    assert!(fila(&s, &["put", "p", "x"], None).status.success());
    let none = out(&fila(&s, &["--json", "receive", "p", "--wait", "0"], None));
    assert!(receipts(&none).is_empty(), "{none}");
    assert_eq!(
        out(&fila(&s, &["queue", "resume", "p"], None)).trim(),
        "p: not paused"
    );
    let one = out(&fila(&s, &["--json", "receive", "p", "--wait", "0"], None));
    assert_eq!(receipts(&one).len(), 1, "{one}");
}

#[test]
fn an_operator_deletes_and_dead_letters_by_seq_and_sees_the_channels() {
    let s = TestServer::start();
    assert!(fila(&s, &["queue", "create", "ops"], None).status.success());
    for (body, channel) in [("a", "red"), ("b", "red"), ("c", "blue")] {
        let o = fila(&s, &["put", "ops", body, "--channel", channel], None);
        assert!(o.status.success(), "{o:?}");
    }
    let o = fila(&s, &["--json", "channels", "ops"], None);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        out(&o).trim(),
        "{\"channels\":[{\"name\":null,\"visible\":0,\"held\":0},\
         {\"name\":\"blue\",\"visible\":1,\"held\":1},\
         {\"name\":\"red\",\"visible\":2,\"held\":2}],\"next\":null}"
    );
    let o = fila(&s, &["delete-seq", "ops", "1"], None);
    assert_eq!(out(&o).trim(), "deleted 1", "{o:?}");
    let o = fila(
        &s,
        &["dead-letter-seq", "ops", "2", "--reason", "poison"],
        None,
    );
    assert_eq!(out(&o).trim(), "dead-lettered 2", "{o:?}");
    let dlq = out(&fila(&s, &["--json", "peek", "ops", "--dlq"], None));
    assert!(dlq.contains("\"poison\""), "{dlq}");
    let o = fila(&s, &["delete-seq", "ops", "1"], None);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no held message with sequence number 1"),
        "{o:?}"
    );
}

#[test]
fn a_filtered_redrive_is_previewed_then_moves_only_its_matches() {
    let s = TestServer::start();
    let create = fila(&s, &["queue", "create", "f", "--max-deliveries", "0"], None);
    assert!(create.status.success(), "{create:?}");
    for (body, tenant, reason) in [
        ("a1", "a", "timeout"),
        ("b1", "b", "timeout"),
        ("a2", "a", "bad"),
    ] {
        let put = fila(
            &s,
            &["put", "f", body, "--attr", &format!("tenant={tenant}")],
            None,
        );
        assert!(put.status.success(), "{put:?}");
        let json = out(&fila(&s, &["--json", "receive", "f", "--wait", "0"], None));
        let rs = receipts(&json);
        let dl = fila(&s, &["dead-letter", "f", &rs[0], "--reason", reason], None);
        assert!(dl.status.success(), "{dl:?}");
    }
    let filter = ["--attr", "tenant=a", "--reason", "timeout", "--since", "1h"];
    let mut args = vec!["redrive", "f", "--preview"];
    args.extend(filter);
    let preview = out(&fila(&s, &args, None));
    assert!(
        preview.starts_with("1 messages would move; nothing moved") && preview.contains("a1"),
        "{preview}"
    );
    let mut args = vec!["--json", "redrive", "f", "--preview", "--text", "time"];
    args.extend(["--until", "1"]);
    assert_eq!(
        out(&fila(&s, &args, None)).trim(),
        "{\"matched\":0,\"complete\":true,\"messages\":[]}"
    );
    let mut args = vec!["--json", "redrive", "f"];
    args.extend(filter);
    assert_eq!(
        out(&fila(&s, &args, None)).trim(),
        "{\"moved\":1,\"scheduled\":0}"
    );
    let moves = out(&fila(&s, &["moves", "f"], None));
    assert!(
        moves.contains("only: attribute tenant=a, reason timeout, failed at or after"),
        "{moves}"
    );
    let json = out(&fila(
        &s,
        &["--json", "receive", "f", "--wait", "0", "--max", "10"],
        None,
    ));
    assert!(
        json.contains("\"payload\":\"a1\"") && !json.contains("b1"),
        "{json}"
    );
    // A bad filter: the server's refusal, by name; a bad time, a usage error.
    let o = fila(&s, &["redrive", "f", "--reason", ""], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("filter.reason"),
        "{o:?}"
    );
    let o = fila(&s, &["move", "f", "--since", "yesterday"], None);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
}
