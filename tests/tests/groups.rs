//! Message groups on a real server: 1 000 groups of 100 messages through 8
//! consumers that fail at random (a release: the message comes back first
//! in its group) and crash at random (a batch left to its short lease),
//! checked from outside: each message is delivered only once every earlier
//! message of its group was deleted, and a group is never delivered to one
//! consumer while another holds a lease of it that cannot yet have ended.
//! Then the wire's other group paths: the ordered switch, the answer's key,
//! the counts, a restart.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fila_client::{ErrorCode, PutEntry, QueueRef, ReceiveRef, SettingsPatch};
use fila_tests::TestServer;

const GROUPS: usize = 1_000;
const PER_GROUP: u64 = 100;
const CONSUMERS: usize = 8;

/// A small xorshift: each consumer's failures from its own seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// What the consumers saw, per group.
#[derive(Default)]
struct Group {
    /// Messages whose delete was sent (they end in order: a count).
    deleted: u64,
    /// The consumer holding a lease of it, and the earliest its lease can
    /// end (its receive was sent before the server leased).
    holder: Option<(usize, Instant)>,
}

/// A message's number in its group, from its payload `group:number`.
fn number_of(payload: &[u8]) -> u64 {
    let text = std::str::from_utf8(payload).unwrap();
    text.split_once(':').unwrap().1.parse().unwrap()
}

#[test]
fn a_thousand_groups_through_eight_failing_consumers_stay_in_order_one_at_a_time() {
    let s = TestServer::with(|c| c.sync = fila_server::Sync::None);
    let mut c = s.client();
    c.create_queue(
        "orders",
        SettingsPatch {
            ordered: Some(true),
            max_deliveries: Some(0),
            ..SettingsPatch::default()
        },
    )
    .unwrap();
    // Round-robin over the groups, so every batch of puts mixes them; a
    // group's messages are numbered 0..100 in put order (the payload says
    // which).
    for i in 0..PER_GROUP {
        let entries: Vec<PutEntry> = (0..GROUPS)
            .map(|g| PutEntry {
                payload: format!("{g}:{i}").into(),
                group: Some(format!("g{g}")),
                ..PutEntry::default()
            })
            .collect();
        for ack in c.put_many("orders", entries).unwrap() {
            ack.unwrap();
        }
    }
    let stats = c.stats("orders").unwrap();
    assert_eq!(
        (stats.visible, stats.groups),
        (GROUPS as u64 * PER_GROUP, GROUPS as u64)
    );
    let state: Arc<Mutex<HashMap<String, Group>>> = Arc::default();
    let violations: Arc<Mutex<Vec<String>>> = Arc::default();
    let deadline = Instant::now() + Duration::from_secs(240);
    let threads: Vec<_> = (0..CONSUMERS)
        .map(|me| {
            let (state, violations) = (state.clone(), violations.clone());
            let mut c = s.client();
            std::thread::spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((me as u64 + 1) * 0x2545_F491));
                let mut idle = 0;
                while Instant::now() < deadline && idle < 20 {
                    // One receive in 25 is a crash: its batch is left to
                    // a 30 ms lease.
                    let crash = rng.below(25) == 0;
                    let visibility = if crash { 30 } else { 30_000 };
                    let sent = Instant::now();
                    let got = c
                        .receive_with(ReceiveRef {
                            queue: "orders",
                            dlq: false,
                            max_messages: 20,
                            visibility_ms: Some(visibility),
                            wait_ms: Some(50),
                            channel: None,
                            fields: fila_client::Fields::ALL,
                        })
                        .unwrap();
                    if got.is_empty() {
                        idle += 1;
                        continue;
                    }
                    idle = 0;
                    let now = Instant::now();
                    let mut deletes = Vec::new();
                    let mut releases = Vec::new();
                    {
                        let mut state = state.lock().unwrap();
                        let mut groups_here = std::collections::HashSet::new();
                        for m in &got {
                            let g = m.group.clone().expect("every message has its group");
                            if !groups_here.insert(g.clone()) {
                                violations
                                    .lock()
                                    .unwrap()
                                    .push(format!("{g}: two in one answer"));
                            }
                            let number = number_of(&m.payload);
                            let st = state.entry(g.clone()).or_default();
                            if number != st.deleted {
                                violations.lock().unwrap().push(format!(
                                    "{g}: message {number} delivered after {} deleted",
                                    st.deleted
                                ));
                            }
                            if let Some((other, ends)) = st.holder {
                                // Its lease cannot have ended yet (5 ms
                                // for the server's millisecond clock).
                                if other != me && ends > now + Duration::from_millis(5) {
                                    violations.lock().unwrap().push(format!(
                                        "{g}: delivered to {me} while {other} holds a lease"
                                    ));
                                }
                            }
                            st.holder = Some((me, sent + Duration::from_millis(visibility)));
                            if crash {
                                continue;
                            }
                            // One in ten fails: released, first again.
                            if rng.below(10) == 0 {
                                st.holder = None;
                                releases.push((m.receipt.unwrap(), 0));
                            } else {
                                st.holder = None;
                                st.deleted += 1;
                                deletes.push(m.receipt.unwrap());
                            }
                        }
                    }
                    if !releases.is_empty() {
                        let queue = QueueRef {
                            name: "orders".into(),
                            dlq: false,
                        };
                        for r in c.update_visibility(&queue, &releases).unwrap() {
                            r.unwrap();
                        }
                    }
                    if !deletes.is_empty() {
                        for r in c.delete("orders", &deletes).unwrap() {
                            r.unwrap();
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let violations = violations.lock().unwrap();
    assert!(
        violations.is_empty(),
        "{} violations: {:?}",
        violations.len(),
        &violations[..violations.len().min(10)]
    );
    let state = state.lock().unwrap();
    assert_eq!(state.len(), GROUPS);
    assert!(
        state.values().all(|g| g.deleted == PER_GROUP),
        "every message done"
    );
    let stats = c.stats("orders").unwrap();
    assert_eq!((stats.visible, stats.in_flight, stats.groups), (0, 0, 0));
}

#[test]
fn groups_over_the_wire_the_ordered_switch_the_key_and_the_counts() {
    let mut s = TestServer::start();
    let mut c = s.client();
    c.create_queue(
        "o",
        SettingsPatch {
            ordered: Some(true),
            ..SettingsPatch::default()
        },
    )
    .unwrap();
    assert!(c.get_queue("o").unwrap().ordered);
    let refused = c.put_one("o", "no group").unwrap_err();
    assert_eq!(
        refused.code(),
        Some(ErrorCode::INVALID_ARGUMENT),
        "{refused}"
    );
    assert!(refused.to_string().contains("group"), "{refused}");
    let payloads: Vec<bytes::Bytes> = vec!["a1".into(), "a2".into()];
    for r in c.put_grouped("o", "customer-7", &payloads).unwrap() {
        r.unwrap();
    }
    let got = c.receive("o", 10, Some(0)).unwrap();
    assert_eq!(got.len(), 1, "one of the group at a time");
    assert_eq!(got[0].group.as_deref(), Some("customer-7"));
    assert_eq!(got[0].payload, "a1");
    let st = c.stats("o").unwrap();
    assert_eq!((st.groups, st.groups_in_flight), (1, 1));
    // A restart drops the lease; the group and its order survive.
    s.restart();
    let mut c = s.client();
    let got = c.receive("o", 10, Some(0)).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload, "a1");
    c.delete("o", &[got[0].receipt.unwrap()]).unwrap()[0]
        .as_ref()
        .unwrap();
    let got = c.receive("o", 10, Some(0)).unwrap();
    assert_eq!(got[0].payload, "a2");
    // The switch can be turned off: ungrouped puts are taken again.
    let after = c
        .update_queue(
            "o",
            SettingsPatch {
                ordered: Some(false),
                ..SettingsPatch::default()
            },
        )
        .unwrap();
    assert!(!after.ordered);
    c.put_one("o", "plain").unwrap();
}
