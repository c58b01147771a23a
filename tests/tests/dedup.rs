//! Deduplication ids over the wire: a resend stores nothing and answers as
//! the first put did, across connections, both clients and a restart;
//! content deduplication; bad ids refused.

use fila_client::{ErrorCode, PutEntry, SettingsPatch};
use fila_tests::TestServer;

#[test]
fn a_resend_with_the_same_id_stores_nothing_and_answers_as_the_first() {
    let mut s = TestServer::start();
    let mut c = s.client();
    c.create_queue("orders", SettingsPatch::default()).unwrap();
    let first = c.put_idempotent("orders", "order 17", "order-17").unwrap();
    // Another connection (a reconnect), another payload: still the first.
    let again = s
        .client()
        .put_idempotent("orders", "order 17, resent", "order-17")
        .unwrap();
    assert_eq!(again, first);
    let other = c.put_idempotent("orders", "order 18", "order-18").unwrap();
    assert_ne!(other.seq, first.seq);
    let stats = c.stats("orders").unwrap();
    assert_eq!((stats.visible, stats.puts, stats.dedup_entries), (2, 2, 2));
    // In a batch: the duplicate entry is answered, the new one stored.
    let acks = c
        .put_many(
            "orders",
            vec![
                PutEntry {
                    payload: "dup".into(),
                    dedup_id: Some("order-18".into()),
                    ..PutEntry::default()
                },
                PutEntry {
                    payload: "new".into(),
                    dedup_id: Some("order-19".into()),
                    ..PutEntry::default()
                },
            ],
        )
        .unwrap();
    assert_eq!(acks[0].as_ref().unwrap(), &other);
    assert_eq!(c.stats("orders").unwrap().visible, 3);
    // The async client too.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let addr = s.addr.to_string();
    let got = rt.block_on(async {
        let a = fila_client::AsyncClient::connect(fila_client::ClientOptions::new(addr))
            .await
            .unwrap();
        a.put_idempotent("orders", "x", "order-17").await.unwrap()
    });
    assert_eq!(got, first);
    // Remembered through a restart (the log and the snapshot keep them).
    s.restart();
    let mut c = s.client();
    assert_eq!(
        c.put_idempotent("orders", "late", "order-17").unwrap(),
        first
    );
    assert_eq!(c.stats("orders").unwrap().visible, 3);
}

#[test]
fn a_queue_with_content_dedup_takes_a_payload_and_attributes_once() {
    let s = TestServer::start();
    let mut c = s.client();
    c.create_queue(
        "events",
        SettingsPatch {
            content_dedup: Some(true),
            dedup_window_ms: Some(60_000),
            ..SettingsPatch::default()
        },
    )
    .unwrap();
    let got = c.get_queue("events").unwrap();
    assert_eq!((got.content_dedup, got.dedup_window_ms), (true, 60_000));
    let a = c.put_one("events", "same").unwrap();
    assert_eq!(c.put_one("events", "same").unwrap(), a);
    let with_attr = PutEntry {
        payload: "same".into(),
        attributes: vec![("k".into(), "v".into())],
        ..PutEntry::default()
    };
    let b = c.put_many("events", vec![with_attr]).unwrap();
    assert_ne!(b[0].as_ref().unwrap().seq, a.seq, "attributes are content");
    assert_eq!(c.stats("events").unwrap().visible, 2);
}

#[test]
fn bad_ids_and_windows_are_refused_with_a_clear_error() {
    let s = TestServer::start();
    let mut c = s.client();
    c.create_queue("q", SettingsPatch::default()).unwrap();
    let e = c.put_idempotent("q", "x", "i".repeat(129)).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::INVALID_ARGUMENT), "{e}");
    assert!(e.to_string().contains("dedup_id"), "{e}");
    let e = c.put_idempotent("q", "x", "").unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::INVALID_ARGUMENT), "{e}");
    for window in [999, 86_400_001] {
        let e = c
            .update_queue(
                "q",
                SettingsPatch {
                    dedup_window_ms: Some(window),
                    ..SettingsPatch::default()
                },
            )
            .unwrap_err();
        assert!(e.to_string().contains("dedup_window_ms"), "{e}");
    }
    assert_eq!(c.stats("q").unwrap().visible, 0, "nothing stored");
}
