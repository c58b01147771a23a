//! The update message request (opcode 0x32) through a real server and the
//! Rust client: a leased message's payload replaced and its lease renewed
//! under a new receipt, the old one refused; a payload past the queue's
//! limit refused with nothing changed; and the new payload on disk: a
//! restart brings it back (a restart ends leases).

use bytes::Bytes;
use fila_client::{ErrorCode, QueueRef, SettingsPatch};
use fila_tests::TestServer;

#[test]
fn a_leased_message_is_updated_under_a_new_receipt_and_a_restart_keeps_its_payload() {
    let mut s = TestServer::start();
    let mut c = s.client();
    let settings = SettingsPatch {
        max_message_bytes: Some(1024),
        ..SettingsPatch::default()
    };
    c.create_queue("jobs", settings).unwrap();
    c.put_one("jobs", Bytes::from_static(b"draft")).unwrap();
    let [m] = &c.receive("jobs", 1, Some(0)).unwrap()[..] else {
        panic!("one message")
    };
    let q = QueueRef {
        name: "jobs".into(),
        dlq: false,
    };
    let old = m.receipt.unwrap();
    let too_large = c
        .update_message(&q, old, 60_000, Some(Bytes::from(vec![b'x'; 1025])))
        .unwrap_err();
    assert_eq!(too_large.code(), Some(ErrorCode::MESSAGE_TOO_LARGE));
    let u = c
        .update_message(&q, old, 60_000, Some(Bytes::from_static(b"final")))
        .unwrap();
    let new = u.receipt.expect("a renewed lease");
    assert_ne!(new, old);
    let stale = c.delete("jobs", &[old]).unwrap();
    assert_eq!(
        stale[0].as_ref().unwrap_err().code(),
        Some(ErrorCode::RECEIPT_STALE)
    );
    assert_eq!(c.stats("jobs").unwrap().bytes, 5);
    s.restart();
    let mut c = s.client();
    let [again] = &c.receive("jobs", 1, Some(0)).unwrap()[..] else {
        panic!("the message, visible again after the restart")
    };
    assert_eq!(&again.payload[..], b"final");
    // Updated without a payload: only its lease moves; released with 0.
    let u = c
        .update_message(&q, again.receipt.unwrap(), 0, None)
        .unwrap();
    assert_eq!(u.receipt, None);
    let [last] = &c.receive("jobs", 1, Some(0)).unwrap()[..] else {
        panic!("visible at once")
    };
    assert_eq!(&last.payload[..], b"final");
    c.delete("jobs", &[last.receipt.unwrap()]).unwrap()[0]
        .as_ref()
        .unwrap();
}
