//! Issue 7: what a restart keeps. Every test runs a real server on a data
//! directory of its own and restarts it on the same directory.

use fila_client::{ErrorCode, PutEntry, QueueRef, SettingsPatch};
use fila_server::Sync;
use fila_tests::TestServer;

fn q(name: &str, dlq: bool) -> QueueRef {
    QueueRef {
        name: name.into(),
        dlq,
    }
}

#[test]
fn a_restart_keeps_queues_messages_and_their_state() {
    let mut s = TestServer::start();
    let mut c = s.client();
    let settings = SettingsPatch {
        visibility_timeout_ms: Some(60_000),
        max_deliveries: Some(5),
        ..SettingsPatch::default()
    };
    c.create_queue("jobs", settings.clone()).unwrap();
    c.create_queue("gone", SettingsPatch::default()).unwrap();
    let entries = (0..10)
        .map(|i| PutEntry {
            payload: bytes::Bytes::from(format!("m{i}")),
            attributes: vec![("k".into(), format!("v{i}"))],
            channel: (i % 2 == 0).then(|| "even".to_string()),
            ..PutEntry::default()
        })
        .collect::<Vec<_>>();
    let acks: Vec<_> = c
        .put_many("jobs", entries)
        .unwrap()
        .into_iter()
        .map(|a| a.unwrap())
        .collect();
    // Two deleted, one deferred, one dead-lettered, two leased.
    let got = c.receive("jobs", 6, Some(0)).unwrap();
    assert_eq!(got.len(), 6);
    let r = |i: usize| got[i].receipt.unwrap();
    assert!(c
        .delete("jobs", &[r(0), r(1)])
        .unwrap()
        .iter()
        .all(|e| e.is_ok()));
    c.defer("jobs", r(2)).unwrap();
    c.dead_letter("jobs", r(3), "bad", "input").unwrap();
    c.delete_queue("gone").unwrap();
    let deferred_seq = got[2].seq;
    let leased = [r(4), r(5)];
    let before = c.peek(q("jobs", false), 0, 100).unwrap();
    drop(c);

    s.restart();
    let mut c = s.client();
    assert_eq!(c.list_queues("").unwrap(), vec!["jobs".to_string()]);
    let kept = c.get_queue("jobs").unwrap();
    assert_eq!(
        (kept.visibility_timeout_ms, kept.max_deliveries),
        (60_000, 5)
    );
    let stats = c.stats("jobs").unwrap();
    // 10 put, 2 deleted, 1 dead-lettered: 6 visible (the 2 leased came
    // back), 1 deferred, 1 in the DLQ, none in flight.
    assert_eq!(
        (
            stats.visible,
            stats.in_flight,
            stats.deferred,
            stats.dead_lettered
        ),
        (6, 0, 1, 1)
    );
    let after = c.peek(q("jobs", false), 0, 100).unwrap();
    assert_eq!(after.len(), before.len());
    for (a, b) in after.iter().zip(&before) {
        assert_eq!((a.id, a.seq, &a.payload), (b.id, b.seq, &b.payload));
        assert_eq!((&a.attributes, &a.channel), (&b.attributes, &b.channel));
        assert_eq!(a.delivery_count, b.delivery_count, "counts are kept");
    }
    let ids: Vec<u128> = acks.iter().map(|a| a.id).collect();
    assert!(after.iter().all(|m| ids.contains(&m.id)));
    let dlq = c.peek(q("jobs", true), 0, 10).unwrap();
    assert_eq!(dlq.len(), 1);
    let dl = dlq[0].dead_letter.as_ref().unwrap();
    assert_eq!(
        (dl.consumer_reason.as_str(), dl.description.as_str()),
        ("bad", "input")
    );
    // Receipts of the old run are refused; the leased messages are
    // visible again.
    for old in leased {
        let e = c.delete("jobs", &[old]).unwrap().remove(0).unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::RECEIPT_INVALID));
    }
    let again = c.receive_deferred("jobs", &[deferred_seq], None).unwrap();
    assert!(again[0].is_ok(), "the deferred message is still deferred");
    // New puts continue the sequence, new queues get new ids.
    let next = c.put_one("jobs", "later").unwrap();
    assert!(next.seq > acks.last().unwrap().seq);
    c.create_queue("gone", SettingsPatch::default()).unwrap();
    let fresh = c.put_one("gone", "x").unwrap();
    assert!(ids.iter().all(|id| *id != fresh.id));
}

#[test]
fn sync_none_keeps_nothing_and_sync_interval_keeps_what_was_synced() {
    let mut s = TestServer::with(|c| c.sync = Sync::None);
    let mut c = s.client();
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    c.put_one("jobs", "m").unwrap();
    drop(c);
    s.restart();
    assert!(s.client().list_queues("").unwrap().is_empty());

    let mut s = TestServer::with(|c| {
        c.sync = Sync::Interval;
        c.sync_interval_ms = 5;
    });
    let mut c = s.client();
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    c.put_one("jobs", "m").unwrap();
    drop(c);
    // A graceful stop syncs what is left.
    s.restart();
    assert_eq!(s.client().stats("jobs").unwrap().visible, 1);
}

#[test]
fn a_second_server_on_the_same_data_directory_is_refused() {
    let s = TestServer::start();
    let mut config = fila_server::Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        metrics_listen: None,
        sqs_listen: None,
        azure_listen: None,
        console_listen: None,
        data_dir: s.data.path().to_owned(),
        ..fila_server::Config::default()
    };
    config.validate().unwrap();
    let e = fila_server::Server::start(config).err().expect("refused");
    assert!(
        e.to_string().contains("in use by another fila-server"),
        "{e}"
    );
}

#[test]
fn a_damaged_log_refuses_to_start_and_says_where() {
    let mut s = TestServer::start();
    let mut c = s.client();
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    for i in 0..20 {
        c.put_one("jobs", format!("message {i}")).unwrap();
    }
    drop(c);
    s.halt();
    let dir = s.data.path().to_owned();
    let ok = fila_server::check_data(&dir).unwrap();
    assert_eq!((ok.queues, ok.messages), (1, 20));
    // A bit flipped in the middle of the log, with good records after it:
    // not a torn write, so nothing may be dropped silently.
    let segment = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "seg"))
        .expect("a segment");
    let mut bytes = std::fs::read(&segment).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    std::fs::write(&segment, &bytes).unwrap();
    let e = fila_server::check_data(&dir).unwrap_err();
    assert!(e.contains("corrupt at byte") && e.contains(".seg"), "{e}");
    let e = s.resume().expect_err("refused").to_string();
    assert!(e.contains("corrupt at byte") && e.contains(".seg"), "{e}");
    // Put back, it starts with everything.
    bytes[middle] ^= 0x10;
    std::fs::write(&segment, &bytes).unwrap();
    s.resume().unwrap();
    assert_eq!(s.client().stats("jobs").unwrap().visible, 20);
}

/// A bit flipped in the last record of the log: the record is whole and
/// its checksum fails, so it was damaged after it was written (and maybe
/// acknowledged), not torn by a crash: the server refuses to start and
/// `--check-data` says so, rather than cutting it off as a torn tail.
#[test]
fn a_bit_flipped_in_the_last_record_refuses_to_start() {
    let mut s = TestServer::start();
    let mut c = s.client();
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    for i in 0..5 {
        c.put_one("jobs", format!("message {i}")).unwrap();
    }
    drop(c);
    s.halt();
    let dir = s.data.path().to_owned();
    let segment = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .max()
        .expect("a segment");
    let mut bytes = std::fs::read(&segment).unwrap();
    // Walk the records (u32 length, then that many bytes) to the last one.
    let mut at = 32;
    let mut last = at;
    while at + 4 <= bytes.len() {
        last = at;
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        at += 4 + len;
    }
    assert_eq!(at, bytes.len(), "whole records");
    // A bit of its checksum.
    bytes[last + 5] ^= 0x04;
    std::fs::write(&segment, &bytes).unwrap();
    let e = fila_server::check_data(&dir).unwrap_err();
    assert!(
        e.contains(&format!("corrupt at byte {last}")) && e.contains(".seg"),
        "{e}"
    );
    let e = s.resume().expect_err("refused").to_string();
    assert!(e.contains("checksum does not match"), "{e}");
    // Put back, it starts with everything.
    bytes[last + 5] ^= 0x04;
    std::fs::write(&segment, &bytes).unwrap();
    s.resume().unwrap();
    assert_eq!(s.client().stats("jobs").unwrap().visible, 5);
}

/// A snapshot stops every event loop at once (each owns shards): queues on
/// both loops' shards, a dead-letter target on the other one, messages
/// leased, deferred and dead-lettered while the snapshot is taken, and
/// everything is there after a restart from the snapshot and the log after
/// it.
#[test]
fn a_snapshot_taken_across_the_loops_restores_everything() {
    let mut s = TestServer::with(|c| c.event_loops = 2);
    let mut c = s.client();
    // Names on both shards (FNV-1a mod 2 splits these).
    let names: Vec<String> = (0..8).map(|i| format!("q{i}")).collect();
    let shards: std::collections::HashSet<usize> =
        names.iter().map(|n| fila_core::shard_of(n, 2)).collect();
    assert_eq!(shards.len(), 2, "the names cover both shards");
    c.create_queue("poison", SettingsPatch::default()).unwrap();
    for n in &names {
        c.create_queue(
            n,
            SettingsPatch {
                max_deliveries: Some(1),
                dead_letter_target: Some(Some("poison".into())),
                ..SettingsPatch::default()
            },
        )
        .unwrap();
        let entries = (0..30)
            .map(|i| PutEntry {
                payload: bytes::Bytes::from(format!("{n}-{i}")),
                ..PutEntry::default()
            })
            .collect::<Vec<_>>();
        assert!(c.put_many(n, entries).unwrap().iter().all(|a| a.is_ok()));
        // One dead-lettered by hand (moved to "poison", maybe on the other
        // loop), one deferred, the rest visible.
        let got = c.receive(n, 2, Some(0)).unwrap();
        c.dead_letter(n, got[0].receipt.unwrap(), "bad", "x")
            .unwrap();
        c.defer(n, got[1].receipt.unwrap()).unwrap();
    }
    let server = s.server();
    let before = server.snapshots();
    server.request_snapshot();
    // The writer takes it at its next batch; a put makes one.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while server.snapshots() == before {
        assert!(std::time::Instant::now() < deadline, "no snapshot taken");
        c.put_one("poison", "tick").unwrap();
    }
    let stats_before: Vec<_> = names.iter().map(|n| c.stats(n).unwrap()).collect();
    let poison_before = c.stats("poison").unwrap();
    drop(c);
    s.restart();
    let mut c = s.client();
    for (n, before) in names.iter().zip(&stats_before) {
        let after = c.stats(n).unwrap();
        assert_eq!(
            (after.visible, after.deferred, after.dead_lettered),
            (before.visible, before.deferred, before.dead_lettered),
            "{n}"
        );
        assert_eq!((after.visible, after.deferred), (28, 1), "{n}");
    }
    let poison = c.stats("poison").unwrap();
    assert_eq!(poison.visible, poison_before.visible);
    // The 8 dead letters and at least one tick.
    assert!(poison.visible > 8);
}

/// Issue 37: `tests/fixtures/torn-forward/` is a data directory's only
/// segment, written with `--sync interval --shards 2` while `cc-dl1`'s
/// messages were dead-lettered to `cc-dlt` (the other shard), cut where a
/// crash can cut it: one batch held `cc-dl1`'s creation after the
/// forwards out of it (the target's shard was written first), and the cut
/// kept the forwards of sequence numbers 130-159 and lost their puts. A
/// restart must not give those numbers out again: a put of one of them
/// would be skipped at the next restart as the put a forward overtook.
#[test]
fn acknowledged_puts_survive_a_log_torn_between_forwards_and_their_puts() {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/torn-forward/wal-0000000000000001.seg");
    let mut s = TestServer::with(|c| {
        let to = c.data_dir.join("wal-0000000000000001.seg");
        std::fs::copy(&fixture, &to).expect("the fixture copied");
        // The fixture is read-only in the repository; the server cuts it.
        let mut perms = std::fs::metadata(&to).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        std::fs::set_permissions(&to, perms).unwrap();
    });
    let mut c = s.client();
    assert_eq!(c.stats("cc-dlt").unwrap().visible, 150);
    assert_eq!(c.stats("cc-dl1").unwrap().visible, 0);
    let mut acked = Vec::new();
    for i in 0..600 {
        acked.push(c.put_one("cc-dl1", format!("after {i}")).unwrap());
    }
    assert!(
        acked.iter().all(|a| a.seq >= 160),
        "a sequence number a surviving forward names was given again: {}",
        acked[0].seq
    );
    drop(c);
    s.restart();
    let mut c = s.client();
    let mut kept = std::collections::HashMap::new();
    let mut from = 0;
    loop {
        let page = c.peek(q("cc-dl1", false), from, 20).unwrap();
        let Some(last) = page.last() else { break };
        from = last.seq + 1;
        kept.extend(page.into_iter().map(|m| (m.seq, m.id)));
    }
    let lost: Vec<u64> = acked
        .iter()
        .filter(|a| kept.get(&a.seq) != Some(&a.id))
        .map(|a| a.seq)
        .collect();
    assert!(lost.is_empty(), "acknowledged puts lost: {lost:?}");
    assert_eq!(kept.len(), 600);
}
