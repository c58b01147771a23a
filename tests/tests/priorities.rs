//! Priority levels over the wire: the highest level first, a level above
//! the queue's refused, the fairness rule, the settings, a restart.

use fila_client::{ErrorCode, PutEntry, SettingsPatch};
use fila_tests::TestServer;

fn entry(payload: &str, priority: Option<u8>) -> PutEntry {
    PutEntry {
        payload: payload.to_owned().into(),
        priority,
        ..PutEntry::default()
    }
}

#[test]
fn urgent_work_comes_first_and_the_levels_survive_a_restart() {
    let mut s = TestServer::start();
    let mut c = s.client();
    let settings = c
        .create_queue(
            "jobs",
            SettingsPatch {
                priority_levels: Some(3),
                ..SettingsPatch::default()
            },
        )
        .and_then(|_| c.get_queue("jobs"))
        .unwrap();
    assert_eq!(
        (settings.priority_levels, settings.priority_fairness),
        (3, 0)
    );
    let acks = c
        .put_many(
            "jobs",
            vec![
                entry("bulk", None),
                entry("urgent", Some(3)),
                entry("normal", Some(2)),
                entry("too high", Some(4)),
            ],
        )
        .unwrap();
    let refused = acks[3].as_ref().unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::INVALID_ARGUMENT));
    assert!(refused.to_string().contains("priority"), "{refused}");
    s.restart();
    let mut c = s.client();
    let got = c.receive("jobs", 10, Some(0)).unwrap();
    let order: Vec<(&[u8], u8)> = got.iter().map(|m| (&m.payload[..], m.priority)).collect();
    assert_eq!(
        order,
        [(&b"urgent"[..], 3), (&b"normal"[..], 2), (&b"bulk"[..], 1)]
    );
}

#[test]
fn fairness_lets_a_lower_level_through_under_sustained_high_load() {
    let s = TestServer::start();
    let mut c = s.client();
    c.create_queue(
        "jobs",
        SettingsPatch {
            priority_levels: Some(10),
            priority_fairness: Some(4),
            ..SettingsPatch::default()
        },
    )
    .unwrap();
    c.put_many("jobs", vec![entry("low", Some(1))]).unwrap()[0]
        .as_ref()
        .unwrap();
    let highs: Vec<PutEntry> = (0..10)
        .map(|i| entry(&format!("high{i}"), Some(10)))
        .collect();
    for a in c.put_many("jobs", highs).unwrap() {
        a.unwrap();
    }
    // One message a receive: the fourth pick made while "low" waits is it.
    let mut seen = Vec::new();
    for _ in 0..4 {
        let m = c.receive("jobs", 1, Some(0)).unwrap().remove(0);
        seen.push(String::from_utf8(m.payload.to_vec()).unwrap());
        c.delete("jobs", &[m.receipt.unwrap()]).unwrap()[0]
            .as_ref()
            .unwrap();
    }
    assert_eq!(seen, ["high0", "high1", "high2", "low"]);
}
