//! The `fila-loadgen` binary against a real server: every message put is
//! received and deleted, the report says so, and bad flags are one line.

use std::process::Command;

use fila_tests::TestServer;

fn loadgen(s: &TestServer, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fila-loadgen"))
        .arg("--addr")
        .arg(s.addr.to_string())
        .args(args)
        .output()
        .expect("fila-loadgen runs")
}

fn field(json: &str, name: &str) -> u64 {
    let at = json.find(&format!("\"{name}\":")).expect(name) + name.len() + 3;
    json[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .unwrap()
}

#[test]
fn the_lifecycle_puts_receives_and_deletes_every_message() {
    let s = TestServer::with(|c| c.sync = fila_server::Sync::None);
    let pid = std::process::id().to_string();
    let o = loadgen(
        &s,
        &[
            "--messages",
            "2000",
            "--producers",
            "2",
            "--consumers",
            "2",
            "--json",
            "--server-pid",
            &pid,
        ],
    );
    let out = succeeded(&o);
    assert_eq!(field(&out, "produced"), 2000, "{out}");
    assert_eq!(field(&out, "consumed"), 2000, "{out}");
    let e2e = &out[out.find("\"end_to_end_us\"").unwrap()..];
    assert_eq!(field(e2e, "count"), 2000, "{out}");
    assert!(field(e2e, "p50") <= field(e2e, "p99") && field(e2e, "p99") <= field(e2e, "max"));
    assert!(out.contains("\"server\":{\"cpu_s\""), "{out}");
    let mut c = s.client();
    let stats = c.stats("loadgen").unwrap();
    assert_eq!((stats.visible, stats.in_flight), (0, 0), "all deleted");
}

#[test]
fn the_fixed_rate_keeps_its_schedule() {
    let s = TestServer::with(|c| c.sync = fila_server::Sync::None);
    let o = loadgen(
        &s,
        &[
            "--scenario",
            "fixed-rate",
            "--rate",
            "2000",
            "--messages",
            "1000",
            "--batch",
            "1",
            "--quiet",
        ],
    );
    let out = succeeded(&o);
    assert!(out.contains("1000 messages in"), "{out}");
    // 1 000 messages at 2 000 a second take half a second at least.
    let secs: f64 = out
        .split(" messages in ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(secs >= 0.45, "{out}");
}

#[test]
fn bad_flags_are_one_line_and_exit_2() {
    let s = TestServer::with(|c| c.sync = fila_server::Sync::None);
    for (args, want) in [
        (&["--batch", "21"][..], "--batch must be 1..=20"),
        (&["--size", "4"][..], "--size must be at least 8"),
        (
            &["--scenario", "chaos"][..],
            "is not one of lifecycle, fixed-rate",
        ),
        (&["--producers", "x"][..], "is not a whole number"),
    ] {
        let o = loadgen(&s, args);
        assert_eq!(o.status.code(), Some(2));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want) && err.lines().count() == 1, "{err}");
    }
}

#[test]
fn the_loopback_floor_echoes_frames() {
    let o = Command::new(env!("CARGO_BIN_EXE_fila-loadgen"))
        .args([
            "--scenario",
            "floor",
            "--producers",
            "2",
            "--duration",
            "1",
            "--json",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(field(&out, "frames_per_s") > 0, "{out}");
    assert_eq!(field(&out, "connections"), 2, "{out}");
}

fn json_run(s: &TestServer, args: &[&str]) -> String {
    succeeded(&loadgen(s, args))
}

/// The report of a run that succeeded (else its output and errors).
fn succeeded(o: &std::process::Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{out} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[test]
fn many_queues_spreads_every_message_over_every_queue() {
    let s = TestServer::with(|c| c.sync = fila_server::Sync::None);
    let out = json_run(
        &s,
        &[
            "--scenario",
            "many-queues",
            "--queues",
            "30",
            "--messages",
            "3000",
            "--producers",
            "2",
            "--consumers",
            "3",
            "--json",
        ],
    );
    assert_eq!(field(&out, "produced"), 3000, "{out}");
    assert_eq!(field(&out, "consumed"), 3000, "{out}");
    let mut c = s.client();
    for k in 0..30 {
        let st = c.stats(&format!("loadgen-{k}")).unwrap();
        assert!(st.puts > 0, "queue {k} got nothing: {st:?}");
        assert_eq!((st.visible, st.in_flight, st.deletes), (0, 0, st.puts));
    }
}

#[test]
fn redelivery_never_deletes_and_the_leases_bring_messages_back() {
    let s = TestServer::with(|c| c.sync = fila_server::Sync::None);
    let out = json_run(
        &s,
        &[
            "--scenario",
            "redelivery",
            "--messages",
            "200",
            "--visibility",
            "100",
            "--duration",
            "2",
            "--json",
        ],
    );
    assert_eq!(field(&out, "produced"), 200, "{out}");
    assert!(field(&out, "consumed") > 200, "redelivered: {out}");
    let st = s.client().stats("loadgen").unwrap();
    assert_eq!(st.deletes, 0);
    assert_eq!(st.visible + st.in_flight, 200);
    assert_eq!(st.deliveries, field(&out, "consumed"), "{st:?}");
}

#[test]
fn long_poll_idle_parks_its_waiters_and_probes_meanwhile() {
    let s = TestServer::with(|c| c.sync = fila_server::Sync::None);
    let pid = std::process::id().to_string();
    let out = json_run(
        &s,
        &[
            "--scenario",
            "long-poll-idle",
            "--waiters",
            "40",
            "--duration",
            "1",
            "--json",
            "--server-pid",
            &pid,
        ],
    );
    assert_eq!(field(&out, "waiters"), 40, "{out}");
    assert_eq!(field(&out, "connections"), 2, "20 a connection: {out}");
    let probe = &out[out.find("\"probe_us\"").unwrap()..];
    assert!(field(probe, "p50") > 0, "{out}");
    assert!(out.contains("\"cpu_pct\""), "{out}");
}

#[test]
fn a_peer_that_cannot_run_a_scenario_says_so() {
    let s = TestServer::with(|c| c.sync = fila_server::Sync::None);
    let o = loadgen(&s, &["--system", "beanstalkd", "--scenario", "many-queues"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("beanstalkd does not run many-queues"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn the_lifecycle_runs_over_tls() {
    let dir = fila_tests::TempDir::new("loadgen-tls");
    let ca = fila_tests::pki::TestCa::new(dir.path(), "loadgen CA");
    let cert = ca.server(dir.path(), "server");
    let s = TestServer::with(|c| {
        c.sync = fila_server::Sync::None;
        c.tls_cert = Some(cert.cert.clone());
        c.tls_key = Some(cert.key.clone());
    });
    let o = Command::new(env!("CARGO_BIN_EXE_fila-loadgen"))
        .arg("--addr")
        .arg(format!("filas://localhost:{}", s.addr.port()))
        .arg("--ca")
        .arg(&ca.cert)
        .args([
            "--messages",
            "1000",
            "--producers",
            "1",
            "--consumers",
            "1",
            "--json",
        ])
        .output()
        .expect("fila-loadgen runs");
    let out = succeeded(&o);
    assert_eq!(field(&out, "consumed"), 1000, "{out}");
}

/// A status of the cluster from `addr` whose partition 0 has a leader:
/// that leader's id.
fn partition_leader(addr: &str) -> Option<u64> {
    let mut o = fila_client::ClientOptions::new(addr);
    o.follow_leader = false;
    let mut c = fila_client::Client::connect(o).ok()?;
    c.cluster_status().ok()?.partitions.first()?.leader
}

#[test]
fn a_run_on_a_cluster_follows_its_partition_to_a_new_leader() {
    // Three nodes in this process, one partition of three replicas.
    let ports: Vec<(u16, u16)> = (0..3)
        .map(|_| (fila_tests::free_port(), fila_tests::free_port()))
        .collect();
    let members: Vec<fila_server::ClusterMember> = ports
        .iter()
        .zip(1..)
        .map(|(&(client, peer), id)| fila_server::ClusterMember {
            id,
            peer: format!("127.0.0.1:{peer}"),
            client: format!("127.0.0.1:{client}"),
        })
        .collect();
    let nodes: Vec<TestServer> = ports
        .iter()
        .zip(1..)
        .map(|(&(client, peer), id)| {
            let members = members.clone();
            TestServer::with(move |c| {
                c.listen = format!("127.0.0.1:{client}").parse().unwrap();
                (c.metrics_listen, c.sqs_listen, c.console_listen) = (None, None, None);
                c.azure_listen = None;
                (c.shards, c.event_loops) = (1, 1);
                c.cluster = Some(fila_server::ClusterConfig {
                    node_id: id,
                    listen: format!("127.0.0.1:{peer}").parse().unwrap(),
                    secret: "a secret the three nodes share".into(),
                    members,
                    join: false,
                    tls_ca: None,
                    partitions: 1,
                    replicas: 3,
                });
            })
        })
        .collect();
    let addrs: Vec<String> = nodes.iter().map(|n| n.addr.to_string()).collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let first = loop {
        if let Some(l) = partition_leader(&addrs[0]) {
            break l;
        }
        assert!(std::time::Instant::now() < deadline, "no leader");
        std::thread::yield_now();
    };

    // 6 000 messages at 2 000 a second: the run lasts three seconds. A
    // put whose outcome the move leaves unknown is sent again with its
    // deduplication id; leases of a receive whose outcome is unknown end
    // after a second.
    let run = Command::new(env!("CARGO_BIN_EXE_fila-loadgen"))
        .args(["--addr", &addrs.join(","), "--scenario", "fixed-rate"])
        .args(["--rate", "2000", "--messages", "6000", "--batch", "10"])
        .args(["--dedup-ids", "--visibility", "1000", "--json", "--quiet"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("fila-loadgen starts");

    // Once messages flow, the partition's leadership moves away.
    let leader_addr = &addrs[first as usize - 1];
    let mut o = fila_client::ClientOptions::new(leader_addr.as_str());
    o.follow_leader = false;
    let mut c = fila_client::Client::connect(o).unwrap();
    loop {
        let put = c.stats("loadgen").map(|s| s.puts);
        if put.is_ok_and(|n| n > 0) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the run put nothing");
        std::thread::yield_now();
    }
    c.change_cluster(fila_client::ClusterChange::TransferLeader { to: None })
        .unwrap();
    let now = loop {
        match partition_leader(leader_addr) {
            Some(l) if l != first => break l,
            _ => {}
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the leadership stayed"
        );
        std::thread::yield_now();
    };
    let mut run = run;
    assert!(
        run.try_wait().unwrap().is_none(),
        "the run ended before the leadership moved: nothing was proved"
    );

    let out = succeeded(&run.wait_with_output().unwrap());
    assert_eq!(field(&out, "produced"), 6000, "{out}");
    assert_eq!(field(&out, "consumed"), 6000, "{out}");
    let mut on_new = nodes[now as usize - 1].client();
    let stats = on_new.stats("loadgen").unwrap();
    assert_eq!((stats.visible, stats.in_flight), (0, 0), "all deleted");
}
