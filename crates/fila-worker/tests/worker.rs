//! The worker against a real server: retries and the poison queue, leases
//! renewed past their length (also with a handler that blocks its thread),
//! the concurrency bound, decode errors, outputs, and the drain.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fila_client::{ClientOptions, SettingsPatch};
use fila_tests::TestServer;
use fila_worker::{
    Delivery, HandlerError, Json, Outputs, Settings, StatsHandle, Worker, WorkerStats,
    INPUT_ID_ATTRIBUTE,
};

fn server() -> TestServer {
    TestServer::with(|c| c.sync = fila_server::Sync::None)
}

fn options(s: &TestServer) -> ClientOptions {
    ClientOptions::new(s.addr.to_string())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Resolves once `done` holds of the worker's counters (20 s at most: the
/// test's assertions say what was missing).
async fn until(stats: StatsHandle, done: impl Fn(&WorkerStats) -> bool) {
    let end = tokio::time::Instant::now() + Duration::from_secs(20);
    while !done(&stats.get()) && tokio::time::Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn quick() -> Settings {
    Settings {
        long_poll: Duration::from_millis(200),
        shutdown_deadline: Duration::from_secs(5),
        ..Settings::default()
    }
}

#[test]
fn five_failures_send_the_message_to_the_poison_queue_with_the_error() {
    let s = server();
    let mut c = s.client();
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    c.put_one("jobs", "bad").unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let worker = Worker::new(options(&s)).queue("jobs", quick(), move |d: Delivery| {
        let seen = seen.clone();
        async move {
            seen.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(HandlerError::msg(format!(
                "boom on try {}",
                d.dequeue_count
            )))
        }
    });
    let stats = worker.stats();
    runtime()
        .block_on(worker.run_until(until(stats.clone(), |s| s.poisoned == 1)))
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 5);
    let st = stats.get();
    assert_eq!((st.failed, st.poisoned, st.processed), (5, 1, 0));
    let jobs = c.stats("jobs").unwrap();
    assert_eq!((jobs.visible, jobs.in_flight), (0, 0));
    let poisoned = c.receive("jobs-poison", 10, Some(0)).unwrap();
    assert_eq!(poisoned.len(), 1);
    assert_eq!(poisoned[0].payload, "bad");
    let dl = poisoned[0]
        .dead_letter
        .as_ref()
        .expect("a dead-letter record");
    assert_eq!(dl.source_queue, "jobs");
    assert_eq!(dl.consumer_reason, "max_dequeue_count");
    assert_eq!(dl.description, "boom on try 5");
    assert_eq!(dl.delivery_count, 5);
}

/// A failure is released as failed: the queue's retry policy holds the
/// message back (an hour here), where before the worker made it visible
/// at once.
#[test]
fn a_failed_message_waits_for_its_queues_retry_policy() {
    let s = server();
    let mut c = s.client();
    c.create_queue(
        "jobs",
        SettingsPatch {
            retry_initial_ms: Some(3_600_000),
            retry_max_ms: Some(3_600_000),
            ..SettingsPatch::default()
        },
    )
    .unwrap();
    c.put_one("jobs", "bad").unwrap();
    let worker = Worker::new(options(&s)).queue("jobs", quick(), |_: Delivery| async {
        Err::<(), _>(HandlerError::msg("boom"))
    });
    let stats = worker.stats();
    runtime()
        .block_on(worker.run_until(until(stats.clone(), |s| s.failed == 1)))
        .unwrap();
    assert_eq!(stats.get().failed, 1);
    let jobs = c.stats("jobs").unwrap();
    assert_eq!(
        (jobs.visible, jobs.in_flight, jobs.delayed, jobs.retries),
        (0, 0, 1, 1),
        "{jobs:?}"
    );
    // The failure is kept in the message's attempts.
    let queue = fila_client::QueueRef {
        name: "jobs".into(),
        dlq: false,
    };
    let fields = fila_client::Fields::ALL.with(fila_client::Fields::ATTEMPTS);
    let held = c.peek_with(queue, 0, 1, fields).unwrap();
    let a = &held[0].attempts;
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(
        (a[0].reason.as_str(), a[0].description.as_str()),
        ("handler_failed", "boom")
    );
}

#[test]
fn a_payload_that_cannot_be_decoded_goes_to_poison_on_its_first_delivery() {
    #[derive(serde::Deserialize)]
    struct Job {
        #[allow(dead_code)]
        width: u32,
    }
    let s = server();
    let mut c = s.client();
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    c.put_one("jobs", "not json").unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let worker = Worker::new(options(&s)).queue("jobs", quick(), move |Json(_job): Json<Job>| {
        let seen = seen.clone();
        async move {
            seen.fetch_add(1, Ordering::SeqCst);
            Ok::<(), HandlerError>(())
        }
    });
    let stats = worker.stats();
    runtime()
        .block_on(worker.run_until(until(stats.clone(), |s| s.poisoned == 1)))
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the handler never ran");
    let p = c.receive("jobs-poison", 10, Some(0)).unwrap();
    let dl = p[0].dead_letter.as_ref().unwrap();
    assert_eq!(
        (dl.consumer_reason.as_str(), dl.delivery_count),
        ("decode", 1)
    );
    assert!(dl.description.contains("JSON"), "{}", dl.description);
}

fn lease_test(blocking: bool) {
    let s = server();
    let mut c = s.client();
    c.create_queue("slow", SettingsPatch::default()).unwrap();
    c.put_one("slow", "job").unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let settings = Settings {
        visibility_timeout: Duration::from_secs(1),
        ..quick()
    };
    let worker = Worker::new(options(&s)).queue("slow", settings, move |_: Delivery| {
        let seen = seen.clone();
        async move {
            seen.fetch_add(1, Ordering::SeqCst);
            // Three leases long.
            if blocking {
                std::thread::sleep(Duration::from_millis(3_200));
            } else {
                tokio::time::sleep(Duration::from_millis(3_200)).await;
            }
            Ok::<(), HandlerError>(())
        }
    });
    let stats = worker.stats();
    // A blocking handler on a one-thread runtime holds the only thread the
    // worker's own tasks have: renewal must not need it.
    let rt = if blocking {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    } else {
        runtime()
    };
    rt.block_on(worker.run_until(until(stats.clone(), |s| s.processed == 1)))
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "delivered once");
    let st = stats.get();
    assert!(st.renewals >= 2, "{st:?}");
    let q = c.stats("slow").unwrap();
    assert_eq!((q.deliveries, q.deletes, q.visible), (1, 1, 0), "{q:?}");
}

#[test]
fn a_handler_three_leases_long_is_delivered_once() {
    lease_test(false);
}

#[test]
fn a_handler_that_blocks_its_thread_does_not_stop_renewal() {
    lease_test(true);
}

#[test]
fn concurrency_never_exceeds_batch_size_plus_threshold() {
    let s = server();
    let mut c = s.client();
    c.create_queue("many", SettingsPatch::default()).unwrap();
    let payloads: Vec<bytes::Bytes> = (0..60).map(|i| format!("m{i}").into()).collect();
    c.put_payloads("many", &payloads).unwrap();
    let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (n, m) = (now.clone(), most.clone());
    let settings = Settings {
        batch_size: 4,
        new_batch_threshold: 2,
        ..quick()
    };
    let worker = Worker::new(options(&s)).queue("many", settings, move |_: Delivery| {
        let (n, m) = (n.clone(), m.clone());
        async move {
            let running = n.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(running, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            n.fetch_sub(1, Ordering::SeqCst);
            Ok::<(), HandlerError>(())
        }
    });
    let stats = worker.stats();
    runtime()
        .block_on(worker.run_until(until(stats.clone(), |s| s.processed == 60)))
        .unwrap();
    assert_eq!(stats.get().processed, 60);
    let most = most.load(Ordering::SeqCst);
    assert!((4..=6).contains(&most), "at most 4 + 2 at once, got {most}");
}

#[test]
fn a_group_runs_in_order_one_at_a_time_while_groups_run_side_by_side() {
    use std::collections::HashMap;
    use std::sync::Mutex;
    let s = server();
    let mut c = s.client();
    c.create_queue("ordered", SettingsPatch::default()).unwrap();
    let groups = ["a", "b", "c", "d"];
    for g in groups {
        let payloads: Vec<bytes::Bytes> = (0..10).map(|i| format!("{g}{i}").into()).collect();
        for r in c.put_grouped("ordered", g, &payloads).unwrap() {
            r.unwrap();
        }
    }
    // Per group: whether a handler of it runs, and the order handlers of
    // it succeeded in; the most handlers running at once.
    let running: Arc<Mutex<HashMap<String, bool>>> = Arc::default();
    let done: Arc<Mutex<HashMap<String, Vec<u64>>>> = Arc::default();
    let overlaps = Arc::new(AtomicUsize::new(0));
    let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (r, d, o, n, m) = (
        running.clone(),
        done.clone(),
        overlaps.clone(),
        now.clone(),
        most.clone(),
    );
    let settings = Settings {
        batch_size: 8,
        ..quick()
    };
    let worker = Worker::new(options(&s)).queue("ordered", settings, move |x: Delivery| {
        let (r, d, o, n, m) = (r.clone(), d.clone(), o.clone(), n.clone(), m.clone());
        async move {
            let group = x.group.clone().expect("grouped");
            if r.lock().unwrap().insert(group.clone(), true) == Some(true) {
                o.fetch_add(1, Ordering::SeqCst);
            }
            m.fetch_max(n.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(3)).await;
            n.fetch_sub(1, Ordering::SeqCst);
            r.lock().unwrap().insert(group.clone(), false);
            // Every third message fails its first try: it comes back first
            // in its group.
            if x.seq.is_multiple_of(3) && x.dequeue_count == 1 {
                return Err(HandlerError::msg("once"));
            }
            d.lock().unwrap().entry(group).or_default().push(x.seq);
            Ok::<(), HandlerError>(())
        }
    });
    let stats = worker.stats();
    runtime()
        .block_on(worker.run_until(until(stats.clone(), |s| s.processed == 40)))
        .unwrap();
    assert_eq!(stats.get().processed, 40);
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two of a group ran at once"
    );
    for (g, seqs) in done.lock().unwrap().iter() {
        let mut sorted = seqs.clone();
        sorted.sort_unstable();
        assert_eq!(seqs, &sorted, "group {g} out of order");
        assert_eq!(seqs.len(), 10, "group {g}");
    }
    assert!(most.load(Ordering::SeqCst) >= 2, "groups ran side by side");
}

#[test]
fn outputs_are_put_with_the_input_id_exactly_when_the_input_is_deleted() {
    let s = server();
    let mut c = s.client();
    c.create_queue("in", SettingsPatch::default()).unwrap();
    c.create_queue("out", SettingsPatch::default()).unwrap();
    let ok = c.put_one("in", "to-out").unwrap();
    c.put_one("in", "to-missing").unwrap();
    let worker = Worker::new(options(&s)).queue(
        "in",
        Settings {
            visibility_timeout_on_failure: Duration::from_secs(60),
            ..quick()
        },
        |d: Delivery, text: String| async move {
            let mut out = Outputs::new();
            // The second message's output queue does not exist: its put
            // fails, so it must not be deleted.
            let target = if text == "to-out" { "out" } else { "missing" };
            out.push(target, format!("from {}", d.id_hex()));
            Ok::<_, HandlerError>(out)
        },
    );
    let stats = worker.stats();
    runtime()
        .block_on(worker.run_until(until(stats.clone(), |s| s.processed + s.failed == 2)))
        .unwrap();
    let st = stats.get();
    assert_eq!((st.processed, st.failed), (1, 1), "{st:?}");
    let out = c.receive("out", 10, Some(0)).unwrap();
    assert_eq!(out.len(), 1);
    let input_id = format!("{:032x}", ok.id);
    assert_eq!(out[0].payload, format!("from {input_id}"));
    assert!(out[0]
        .attributes
        .contains(&(INPUT_ID_ATTRIBUTE.to_string(), input_id)));
    let q = c.stats("in").unwrap();
    // One deleted with its output; the other kept (leased away for the
    // failure's 60 s), with no output anywhere.
    assert_eq!((q.deletes, q.in_flight + q.visible), (1, 1), "{q:?}");
}

#[test]
fn a_drain_loses_nothing_and_what_did_not_finish_is_visible_at_once() {
    let s = server();
    let mut c = s.client();
    c.create_queue("drain", SettingsPatch::default()).unwrap();
    // Two quick ones first: when they end, two run, the threshold, and the
    // next batch brings the running to 4 + 2.
    let payloads: Vec<bytes::Bytes> = ["quick", "quick"]
        .into_iter()
        .chain(std::iter::repeat_n("slow", 8))
        .map(bytes::Bytes::from)
        .collect();
    c.put_payloads("drain", &payloads).unwrap();
    let settings = Settings {
        batch_size: 4,
        new_batch_threshold: 2,
        shutdown_deadline: Duration::from_millis(300),
        ..quick()
    };
    let worker = Worker::new(options(&s)).queue("drain", settings, |text: String| async move {
        if text == "slow" {
            // Never finishes on its own.
            std::future::pending::<()>().await;
        }
        Ok::<(), HandlerError>(())
    });
    let stats = worker.stats();
    runtime()
        .block_on(worker.run_until(until(stats.clone(), |s| s.in_flight == 6)))
        .unwrap();
    let st = stats.get();
    assert_eq!(
        (st.processed, st.released, st.in_flight),
        (2, 6, 0),
        "{st:?}"
    );
    let q = c.stats("drain").unwrap();
    assert_eq!((q.visible, q.in_flight, q.deletes), (8, 0, 2), "{q:?}");
    // Visible at once: a receive now gets all eight.
    let got = c.receive("drain", 20, Some(0)).unwrap();
    assert_eq!(got.len(), 8);
}

#[test]
fn a_queue_that_does_not_exist_is_a_clear_error() {
    let s = server();
    let e = runtime()
        .block_on(
            Worker::new(options(&s))
                .queue("nope", quick(), |_: Delivery| async {
                    Ok::<(), String>(())
                })
                .run_until(async {}),
        )
        .unwrap_err();
    assert!(e.to_string().contains("queue nope"), "{e}");
}

#[test]
fn a_panicking_handler_is_a_failure_and_the_worker_goes_on() {
    let s = server();
    let mut c = s.client();
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    c.put_one("jobs", "x").unwrap();
    let worker = Worker::new(options(&s)).queue("jobs", quick(), |d: Delivery| async move {
        if d.dequeue_count == 1 {
            panic!("first try panics");
        }
        Ok::<(), HandlerError>(())
    });
    let stats = worker.stats();
    runtime()
        .block_on(worker.run_until(until(stats.clone(), |s| s.processed == 1)))
        .unwrap();
    let st = stats.get();
    assert_eq!((st.failed, st.processed, st.poisoned), (1, 1, 0), "{st:?}");
    assert_eq!(c.stats("jobs").unwrap().deletes, 1);
}

#[test]
fn a_worker_backs_off_while_the_server_is_away_and_goes_on_when_it_returns() {
    // A fixed port, so the server comes back where the worker looks.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut s = TestServer::with(|c| c.listen = port);
    let mut c = s.client();
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    let worker = Worker::new(options(&s))
        .seed(3)
        .queue("jobs", quick(), |_: Delivery| async {
            Ok::<(), HandlerError>(())
        });
    let stats = worker.stats();
    let rt = runtime();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = rt.spawn(worker.run_until(async move {
        let _ = stop_rx.await;
    }));
    let wait = |what: &str, f: &dyn Fn(&WorkerStats) -> bool| {
        let end = std::time::Instant::now() + Duration::from_secs(20);
        while !f(&stats.get()) {
            assert!(std::time::Instant::now() < end, "{what}: {:?}", stats.get());
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    // Running: one message through before the server goes away.
    c.put_one("jobs", "before").unwrap();
    wait("the message before", &|st| st.processed == 1);
    s.halt();
    wait("three failed polls", &|st| st.poll_errors >= 3);
    let third = stats.get().poll_errors;
    // About 200, 400, 800 ms so far, 1.6 s next: at most one more in the
    // next second (without a back-off there would be hundreds).
    std::thread::sleep(Duration::from_secs(1));
    assert!(stats.get().poll_errors <= third + 2, "{:?}", stats.get());
    s.resume().unwrap();
    let mut c = s.client();
    c.put_one("jobs", "after").unwrap();
    wait("the message after the return", &|st| st.processed == 2);
    stop_tx.send(()).unwrap();
    rt.block_on(running).unwrap().unwrap();
}

#[test]
fn base64_payloads_are_decoded_for_the_handler_and_bad_ones_go_to_poison_at_once() {
    let s = server();
    let mut c = s.client();
    c.create_queue("b64", SettingsPatch::default()).unwrap();
    c.put_one("b64", "aGVsbG8=").unwrap(); // "hello"
    c.put_one("b64", "not base64!").unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let got = seen.clone();
    let settings = Settings {
        message_encoding: fila_worker::Encoding::Base64,
        ..quick()
    };
    let worker = Worker::new(options(&s)).queue("b64", settings, move |text: String| {
        let got = got.clone();
        async move {
            got.lock().unwrap().push(text);
            Ok::<(), HandlerError>(())
        }
    });
    let stats = worker.stats();
    runtime()
        .block_on(worker.run_until(until(stats.clone(), |s| {
            s.processed == 1 && s.poisoned == 1
        })))
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), vec!["hello".to_string()]);
    let p = c.receive("b64-poison", 10, Some(0)).unwrap();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].payload, "not base64!", "the payload as it was put");
    let dl = p[0].dead_letter.as_ref().unwrap();
    assert_eq!(
        (dl.consumer_reason.as_str(), dl.delivery_count),
        ("decode", 1)
    );
    assert!(dl.description.contains("base64"), "{}", dl.description);
}

/// A server with an operator's token and a worker's: receive on `jobs`,
/// send on `jobs-poison`, nothing more.
fn least_privilege_server() -> TestServer {
    use fila_server::auth::{Grant, Permission};
    TestServer::with(|c| {
        c.sync = fila_server::Sync::None;
        c.tokens.add(
            "operator".into(),
            vec![Grant::new(
                "*",
                &[Permission::Manage, Permission::Send, Permission::Receive],
            )],
        );
        c.tokens.add(
            "worker".into(),
            vec![
                Grant::new("jobs", &[Permission::Receive]),
                Grant::new("jobs-poison", &[Permission::Send]),
            ],
        );
    })
}

/// The worker needs no `manage`: with the queue's dead-letter target set
/// once by an operator, a token with receive on the queue and send on the
/// poison queue runs it, poison messages included.
#[test]
fn a_worker_needs_only_receive_and_send_on_its_poison_queue() {
    let s = least_privilege_server();
    let mut op = s.client_with_token("operator").unwrap();
    op.create_queue("jobs-poison", SettingsPatch::default())
        .unwrap();
    op.create_queue(
        "jobs",
        SettingsPatch {
            dead_letter_target: Some(Some("jobs-poison".into())),
            ..SettingsPatch::default()
        },
    )
    .unwrap();
    op.put_one("jobs", "good").unwrap();
    op.put_one("jobs", "bad").unwrap();
    let worker = Worker::new(options(&s).token("worker")).queue(
        "jobs",
        Settings {
            max_dequeue_count: 1,
            ..quick()
        },
        |d: Delivery, text: String| async move {
            if text == "bad" {
                Err(HandlerError::msg(format!("bad on try {}", d.dequeue_count)))
            } else {
                Ok(())
            }
        },
    );
    let stats = worker.stats();
    runtime()
        .block_on(worker.run_until(until(stats.clone(), |s| {
            s.processed == 1 && s.poisoned == 1
        })))
        .unwrap();
    let st = stats.get();
    assert_eq!((st.processed, st.poisoned), (1, 1));
    let poisoned = op.receive("jobs-poison", 10, Some(0)).unwrap();
    assert_eq!(poisoned.len(), 1);
    assert_eq!(poisoned[0].payload, "bad");
}

/// Without the target set, a worker that may not set it says what an
/// operator runs once.
#[test]
fn without_a_target_a_worker_without_manage_says_what_to_run_once() {
    let s = least_privilege_server();
    let mut op = s.client_with_token("operator").unwrap();
    op.create_queue("jobs", SettingsPatch::default()).unwrap();
    let e = runtime()
        .block_on(
            Worker::new(options(&s).token("worker"))
                .queue("jobs", quick(), |_: Delivery| async {
                    Ok::<(), String>(())
                })
                .run_until(async {}),
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("fila queue create jobs-poison && fila queue update jobs --dead-letter-target jobs-poison"),
        "{e}"
    );
}

#[test]
fn a_worker_works_a_queue_over_tls() {
    let dir = fila_tests::TempDir::new("worker-tls");
    let ca = fila_tests::pki::TestCa::new(dir.path(), "worker CA");
    let cert = ca.server(dir.path(), "server");
    let s = TestServer::with(|c| {
        c.sync = fila_server::Sync::None;
        c.tls_cert = Some(cert.cert.clone());
        c.tls_key = Some(cert.key.clone());
    });
    let opts = ClientOptions::new(format!("filas://localhost:{}", s.addr.port())).tls(
        fila_client::TlsOptions {
            ca: Some(ca.cert.clone()),
            ..fila_client::TlsOptions::default()
        },
    );
    let mut c = fila_client::Client::connect(opts.clone()).unwrap();
    c.create_queue("in", SettingsPatch::default()).unwrap();
    c.create_queue("out", SettingsPatch::default()).unwrap();
    for i in 0..10 {
        c.put_one("in", format!("m{i}")).unwrap();
    }
    let worker = Worker::new(opts).queue("in", quick(), |_d: Delivery, text: String| async move {
        let mut out = Outputs::new();
        out.push("out", format!("echo {text}"));
        Ok::<_, HandlerError>(out)
    });
    let stats = worker.stats();
    runtime()
        .block_on(worker.run_until(until(stats.clone(), |s| s.processed == 10)))
        .unwrap();
    assert_eq!(stats.get().processed, 10);
    assert_eq!(c.stats("out").unwrap().visible, 10);
}

#[test]
fn a_handler_run_again_stores_none_of_its_outputs_twice() {
    let s = server();
    let mut c = s.client();
    c.create_queue("out", SettingsPatch::default()).unwrap();
    let outputs = || {
        let mut o = Outputs::new();
        o.push("out", "first").push("out", "second");
        o
    };
    // What the worker puts for input 7's outputs, as if its handler ran
    // twice (a crash between the puts and the delete brings the input back).
    for _ in 0..2 {
        for (queue, entries) in fila_worker::output_entries(7, outputs()) {
            let acks = c.put_many(&queue, entries).unwrap();
            assert!(acks.iter().all(|a| a.is_ok()));
        }
    }
    let stats = c.stats("out").unwrap();
    assert_eq!((stats.visible, stats.dedup_entries), (2, 2), "{stats:?}");
    // Another input's same outputs are its own.
    for (queue, entries) in fila_worker::output_entries(8, outputs()) {
        c.put_many(&queue, entries).unwrap();
    }
    assert_eq!(c.stats("out").unwrap().visible, 4);
}
