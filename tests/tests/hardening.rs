//! Issue 6: what a hostile or careless client could do before, each refused
//! now. Every test runs against a real server on 127.0.0.1.

use fila_client::{ErrorCode, PutEntry, SettingsPatch, RECEIPT_LEN};
use fila_tests::TestServer;

/// Offsets inside a receipt (docs/protocol.md, "Receipts").
const SLOT: std::ops::Range<usize> = 9..13;
const GENERATION: std::ops::Range<usize> = 13..21;
const TAG: std::ops::Range<usize> = 24..32;

#[test]
fn forged_receipts_never_end_a_lease() {
    let s = TestServer::start();
    let mut c = s.client();
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    let entries = (0..100)
        .map(|_| PutEntry {
            payload: bytes::Bytes::from_static(b"m"),
            ..PutEntry::default()
        })
        .collect();
    assert!(c
        .put_many("jobs", entries)
        .unwrap()
        .iter()
        .all(|a| a.is_ok()));
    // Another consumer holds 99 leases; the forger holds one.
    let mut victim = s.client();
    let mut theirs = Vec::new();
    while theirs.len() < 99 {
        let want = (99 - theirs.len()).min(20) as u8;
        theirs.extend(victim.receive("jobs", want, Some(0)).unwrap());
    }
    let mine = c.receive("jobs", 1, Some(0)).unwrap();
    let template = mine[0].receipt.unwrap();
    assert_eq!(template.len(), RECEIPT_LEN);

    let mut forged = Vec::with_capacity(100_000);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for slot in 0u32..501 {
        for generation in 1u64..=100 {
            let mut r = template;
            r[SLOT].copy_from_slice(&slot.to_be_bytes());
            r[GENERATION].copy_from_slice(&generation.to_be_bytes());
            if r == template || forged.len() == 100_000 {
                continue; // the forger's real receipt is no forgery
            }
            forged.push(r); // the forger's own tag
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            r[TAG].copy_from_slice(&x.to_be_bytes()); // a random tag
            forged.push(r);
        }
    }
    assert_eq!(forged.len(), 100_000);
    let mut succeeded = 0;
    for batch in forged.chunks(20) {
        for entry in c.delete("jobs", batch).unwrap() {
            match entry {
                Ok(()) => succeeded += 1,
                Err(e) => assert_eq!(e.code(), Some(ErrorCode::RECEIPT_INVALID)),
            }
        }
    }
    assert_eq!(succeeded, 0, "a forged receipt ended a lease");
    let stats = c.stats("jobs").unwrap();
    assert_eq!(
        (stats.in_flight, stats.deletes),
        (100, 0),
        "nothing changed"
    );
    // The real receipts still work.
    let receipts: Vec<_> = theirs.iter().map(|m| m.receipt.unwrap()).collect();
    for batch in receipts.chunks(20) {
        assert!(victim
            .delete("jobs", batch)
            .unwrap()
            .iter()
            .all(|e| e.is_ok()));
    }
    assert!(c.delete("jobs", &[template]).unwrap()[0].is_ok());
}

#[test]
fn a_receipt_from_an_earlier_run_is_refused() {
    let first = TestServer::start();
    let mut c = first.client();
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    c.put_one("jobs", "m").unwrap();
    let old = c.receive("jobs", 1, Some(0)).unwrap()[0].receipt.unwrap();
    first.stop();

    // Same queue, same slot, same generation on a new run.
    let second = TestServer::start();
    let mut c = second.client();
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    c.put_one("jobs", "m").unwrap();
    let new = c.receive("jobs", 1, Some(0)).unwrap()[0].receipt.unwrap();
    assert_eq!(old[SLOT], new[SLOT]);
    assert_eq!(old[GENERATION], new[GENERATION]);
    let e = c.delete("jobs", &[old]).unwrap().remove(0).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::RECEIPT_INVALID));
    assert_eq!(c.stats("jobs").unwrap().in_flight, 1);
    assert!(c.delete("jobs", &[new]).unwrap()[0].is_ok());
}
