//! Pausing a queue over the wire (issue 42, item 2): a receive waiting on
//! a paused queue is answered on the resume; a paused put is refused
//! `queue_paused`; leases go on; the pause needs manage, is kept across a
//! restart and shows in the settings and the metrics.

use std::sync::mpsc;
use std::time::Duration;

use fila_client::{Client, ClientOptions, ErrorCode, Halves, SettingsPatch};
use fila_server::auth::{Grant, Permission};
use fila_tests::TestServer;

const RECEIVE: Halves = Halves {
    receive: true,
    send: false,
};

#[test]
fn a_waiting_receive_is_answered_on_the_resume_and_leases_go_on() {
    let s = TestServer::start();
    let mut c = s.client();
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    c.put_one("jobs", "leased before").unwrap();
    let leased = c.receive("jobs", 1, Some(0)).unwrap();
    assert_eq!(leased.len(), 1);
    assert_eq!(c.pause_queue("jobs", RECEIVE).unwrap(), RECEIVE);
    c.put_one("jobs", "put while paused").unwrap();
    assert!(c.receive("jobs", 10, Some(0)).unwrap().is_empty());
    // A receive that waits parks; the resume answers it.
    let (tx, rx) = mpsc::channel();
    let addr = s.addr;
    let waiter = std::thread::spawn(move || {
        let mut c = Client::connect(ClientOptions::new(addr.to_string())).unwrap();
        tx.send(c.receive("jobs", 10, Some(20_000)).unwrap())
            .unwrap();
    });
    s.wait_parked(1);
    // The lease taken before the pause goes on.
    c.delete("jobs", &[leased[0].receipt.unwrap()]).unwrap()[0]
        .as_ref()
        .unwrap();
    assert!(s
        .metrics()
        .contains("fila_queue_receive_paused{queue=\"jobs\"} 1"));
    assert_eq!(c.resume_queue("jobs", RECEIVE).unwrap(), Halves::default());
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the resume answered the waiting receive");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload, "put while paused");
    waiter.join().unwrap();
    assert!(s
        .metrics()
        .contains("fila_queue_receive_paused{queue=\"jobs\"} 0"));
}

#[test]
fn a_paused_put_is_refused_and_the_pause_is_kept_across_a_restart() {
    let mut s = TestServer::start();
    let mut c = s.client();
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    assert_eq!(c.pause_queue("jobs", Halves::BOTH).unwrap(), Halves::BOTH);
    s.restart();
    let mut c = s.client();
    assert_eq!(c.get_queue("jobs").unwrap().paused, Halves::BOTH);
    let refused = c.put_one("jobs", "x").unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::QUEUE_PAUSED), "{refused}");
    assert!(
        refused.to_string().contains("sending is paused"),
        "{refused}"
    );
    // A create with the same settings is no conflict while paused.
    assert!(!c.create_queue("jobs", SettingsPatch::default()).unwrap());
    let e = c.pause_queue("missing", RECEIVE).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::QUEUE_NOT_FOUND), "{e}");
    let e = c.pause_queue("jobs", Halves::default()).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::INVALID_ARGUMENT), "{e}");
}

#[test]
fn pausing_needs_the_manage_grant() {
    let s = TestServer::with(|c| {
        c.tokens.add(
            "ops-token".into(),
            vec![Grant::new("*", &[Permission::Manage])],
        );
        c.tokens.add(
            "worker-token".into(),
            vec![Grant::new("jobs", &[Permission::Send, Permission::Receive])],
        );
    });
    let mut ops = s.client_with_token("ops-token").unwrap();
    ops.create_queue("jobs", SettingsPatch::default()).unwrap();
    let mut worker = s.client_with_token("worker-token").unwrap();
    let e = worker.pause_queue("jobs", RECEIVE).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::FORBIDDEN), "{e}");
    assert_eq!(ops.pause_queue("jobs", RECEIVE).unwrap(), RECEIVE);
}
