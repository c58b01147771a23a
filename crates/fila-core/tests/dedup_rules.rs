//! Deduplication ids, rule by rule, on a manual clock: a resend within the
//! window answers as the first put did and stores nothing; the window ends
//! on time; content keys; what a purge, a delete and the stored-bytes
//! limit do to the remembered ids.

use bytes::Bytes;
use fila_core::limits::DEDUP_ID_LEN_MAX;
use fila_core::*;

mod rules;

use rules::engine;

fn put(engine: &Engine, payload: &str, id: Option<&str>) -> Result<PutReceipt, Error> {
    let mut m = NewMessage::new(Bytes::copy_from_slice(payload.as_bytes()));
    m.dedup_id = id.map(str::to_owned);
    engine.put("q", vec![m]).unwrap().remove(0)
}

fn stats(engine: &Engine) -> QueueStats {
    engine.stats("q").unwrap()
}

#[test]
fn a_resend_within_the_window_is_answered_as_the_first_and_stores_nothing() {
    let (clock, engine) = engine(QueueSettings {
        dedup_window_ms: 10_000,
        ..QueueSettings::default()
    });
    let first = put(&engine, "a", Some("x")).unwrap();
    clock.advance(9_999);
    engine.tick();
    assert_eq!(put(&engine, "b", Some("x")).unwrap(), first);
    let s = stats(&engine);
    assert_eq!((s.visible, s.puts, s.dedup_entries), (1, 1, 1));
    // The window counts from the first put, not the resend: at 10 000 ms
    // the id is forgotten, and the next put with it is a new message.
    clock.advance(1);
    engine.tick();
    assert_eq!(stats(&engine).dedup_entries, 0, "forgotten on time");
    let second = put(&engine, "c", Some("x")).unwrap();
    assert_ne!(second.seq, first.seq);
    assert_eq!(stats(&engine).visible, 2);
}

#[test]
fn a_delivered_or_deleted_message_still_dedups_its_resends() {
    let (_clock, engine) = engine(QueueSettings::default());
    let first = put(&engine, "a", Some("x")).unwrap();
    let got = engine
        .receive_now(Address::queue("q"), &ReceiveOptions::now(1))
        .unwrap();
    engine
        .delete(Address::queue("q"), &[got[0].receipt.unwrap()])
        .unwrap();
    assert_eq!(put(&engine, "a", Some("x")).unwrap(), first);
    assert_eq!(stats(&engine).visible, 0, "not stored again");
}

#[test]
fn content_keys_cover_the_payload_and_the_attributes() {
    let (_clock, engine) = engine(QueueSettings {
        content_dedup: true,
        ..QueueSettings::default()
    });
    let a = put(&engine, "same", None).unwrap();
    assert_eq!(put(&engine, "same", None).unwrap(), a);
    let mut m = NewMessage::new("same");
    m.attributes = vec![("k".into(), "v".into())];
    let b = engine.put("q", vec![m]).unwrap().remove(0).unwrap();
    assert_ne!(a.seq, b.seq);
    // An explicit id wins over the content.
    let c = put(&engine, "same", Some("own")).unwrap();
    assert_ne!(c.seq, a.seq);
    assert_eq!(stats(&engine).visible, 3);
    // Distinct contents never share a key by their bytes alone.
    assert_ne!(
        content_key(b"ab", &[]),
        content_key(b"a", &[("b".into(), String::new())])
    );
    assert_ne!(dedup_key("ab"), content_key(b"ab", &[]));
}

#[test]
fn a_purge_keeps_the_ids_and_a_delete_forgets_them() {
    let (_clock, engine) = engine(QueueSettings::default());
    let first = put(&engine, "a", Some("x")).unwrap();
    engine.purge(Address::queue("q")).unwrap();
    assert_eq!(
        put(&engine, "a", Some("x")).unwrap(),
        first,
        "purged, still remembered"
    );
    engine.delete_queue("q").unwrap();
    engine.tick();
    assert!(engine.create_queue("q", QueueSettings::default()).unwrap());
    let again = put(&engine, "a", Some("x")).unwrap();
    assert_eq!(stats(&engine).visible, 1, "a new queue remembers nothing");
    assert_eq!(again.seq, 1);
}

#[test]
fn remembered_ids_count_against_the_stored_bytes_and_are_given_back() {
    let (clock, engine) = engine(QueueSettings {
        dedup_window_ms: 1_000,
        ..QueueSettings::default()
    });
    let before = engine.stored_bytes();
    put(&engine, "", Some("x")).unwrap();
    let one = engine.stored_bytes() - before;
    put(&engine, "", None).unwrap();
    let plain = engine.stored_bytes() - before - one;
    assert_eq!(one - plain, DEDUP_ENTRY_BYTES, "the entry is counted");
    clock.advance(1_000);
    engine.tick();
    assert_eq!(
        engine.stored_bytes() - before,
        2 * plain,
        "given back when forgotten"
    );
    engine.check_invariants().unwrap();
}

#[test]
fn a_long_id_is_refused() {
    let (_clock, engine) = engine(QueueSettings::default());
    let long = "i".repeat(DEDUP_ID_LEN_MAX + 1);
    let e = put(&engine, "a", Some(&long)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(put(&engine, "a", Some(&"i".repeat(DEDUP_ID_LEN_MAX))).is_ok());
}
