//! The engine and the model side by side: one operation applied to both,
//! every answer, completed long poll, receipt outcome and queue's stats
//! compared. Shared by the property test (tests/model_check.rs) and the
//! `engine_model` fuzz target (fuzz/fuzz_targets/engine_model.rs).

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use fila_core::*;

use super::{MReceipt, Model};

pub const QUEUES: [&str; 4] = ["alpha", "beta", "gamma", "missing"];
pub const CHANNELS: [Option<&str>; 4] = [None, Some("x"), Some("y"), Some("xz")];
pub const START: u64 = 1_700_000_000_000;

/// One operation, with small numbers that pick queues, messages and
/// receipts.
#[derive(Clone, Debug)]
#[allow(missing_docs)]
pub enum Op {
    Create {
        q: u8,
        vis: u16,
        max_deliveries: u8,
        max_messages: u8,
        small_bytes: bool,
        pct: u8,
        dloe: bool,
        target: Option<u8>,
        wait: u16,
    },
    Update {
        q: u8,
        vis: Option<u16>,
        max_deliveries: Option<u8>,
        target: Option<Option<u8>>,
        dloe: Option<bool>,
        max_messages: Option<u8>,
    },
    DeleteQueue(u8),
    Purge(u8, bool),
    Put(u8, Vec<(u8, u8, u8, u16, Option<u16>)>),
    Receive {
        q: u8,
        dlq: bool,
        max: u8,
        vis: Option<u16>,
        wait: Option<u16>,
        filter: u8,
    },
    UpdateVisibility(u8, bool, Vec<(u8, u16)>),
    Delete(u8, bool, Vec<u8>),
    /// Leases ended as failed (a "nack").
    Release(u8, bool, Vec<u8>),
    /// Pause (true) or resume the halves the bits name (1 receiving, 2
    /// sending).
    Pause(u8, u8, bool),
    Defer(u8, u8),
    DeadLetter(u8, u8, bool),
    ReceiveDeferred(u8, Vec<u8>, Option<u16>),
    Peek(u8, bool, u8, u8),
    Cancel(u8, u8),
    /// A redrive: queue, maximum, rate, and a filter ([`filter_of`]).
    Redrive(u8, Option<u8>, Option<u8>, u8),
    /// A move's preview: queue, DLQ, back to the sources, a filter
    /// ([`filter_of`]), from sequence number.
    Preview(u8, bool, bool, u8, u8),
    CancelWait(u8),
    Advance(u32),
    /// An operator's delete (or, with `dead_letter`, dead-letter of a
    /// main-queue message; `long`: a reason past its limit) by sequence
    /// number, whatever the message's state.
    BySeq {
        q: u8,
        dlq: bool,
        seq: u8,
        dead_letter: bool,
        long: bool,
    },
}

fn err(e: &Error) -> String {
    match e {
        Error::InvalidArgument { field, .. } => format!("invalid_argument {field}"),
        Error::NotFound { seq, .. } => format!("not_found {seq}"),
        other => format!("{other:?}"),
    }
}

fn res<T, U: PartialEq + std::fmt::Debug>(
    r: &Result<T, Error>,
    f: impl Fn(&T) -> U,
) -> Result<U, String> {
    r.as_ref().map(f).map_err(err)
}

type Completions = Arc<Mutex<Vec<(u64, Result<Vec<Message>, Error>)>>>;

/// Filter `n` of a few that the harness's messages can meet (none for 0),
/// times relative to `now`.
pub fn filter_of(n: u8, now: u64) -> Option<MoveFilter> {
    let f = MoveFilter::default();
    Some(match n % 9 {
        0 => return None,
        1 => MoveFilter {
            reason: Some("max_deliveries".into()),
            ..f
        },
        2 => MoveFilter {
            reason: Some("bad-input".into()),
            ..f
        },
        3 => MoveFilter {
            text: Some("why".into()),
            ..f
        },
        4 => MoveFilter {
            since_ms: Some(now.saturating_sub(2_000)),
            ..f
        },
        5 => MoveFilter {
            attributes: vec![("k".into(), "v10".into())],
            until_ms: Some(now.saturating_sub(500)),
            ..f
        },
        6 => MoveFilter {
            reason: Some("expired".into()),
            ..f
        },
        // Refused: a range that ends before it starts.
        7 => MoveFilter {
            since_ms: Some(now),
            until_ms: Some(now),
            ..f
        },
        // No condition: no filter.
        _ => f,
    })
}

/// An engine and a model driven together.
pub struct Harness {
    clock: ManualClock,
    engine: Engine,
    model: Model,
    receipts: Vec<(Receipt, MReceipt)>,
    done: Completions,
    parked: Vec<(u64, WaitId)>,
    next_key: u64,
}

fn strip(mut m: Message) -> (Message, Option<Receipt>) {
    let r = m.receipt.take();
    (m, r)
}

impl Harness {
    /// Both empty, at [`START`].
    pub fn new() -> Harness {
        let clock = ManualClock::new(START);
        Harness {
            engine: Engine::new(3, Arc::new(clock.clone())),
            clock,
            model: Model::new(START),
            receipts: Vec::new(),
            done: Arc::default(),
            parked: Vec::new(),
            next_key: 0,
        }
    }

    /// Compares two lists of deliveries and remembers their receipts.
    fn deliveries(&mut self, what: &str, engine: Vec<Message>, model: Vec<super::Delivery>) {
        let engine: Vec<_> = engine.into_iter().map(strip).collect();
        let left: Vec<&Message> = engine.iter().map(|(m, _)| m).collect();
        let right: Vec<&Message> = model.iter().map(|(m, _)| m).collect();
        assert_eq!(left, right, "{what}: messages differ");
        for ((_, er), (_, mr)) in engine.iter().zip(model.iter()) {
            assert_eq!(er.is_some(), mr.is_some(), "{what}: receipts");
            if let (Some(e), Some(m)) = (er, mr) {
                self.receipts.push((*e, *m));
            }
        }
    }

    fn pick(&self, i: u8) -> Option<(Receipt, MReceipt)> {
        if self.receipts.is_empty() {
            return None;
        }
        // Favour recent receipts, which are the ones still likely to be live.
        let n = self.receipts.len();
        let back = usize::from(i) % n.min(8);
        Some(self.receipts[n - 1 - back])
    }

    fn completions(&mut self) {
        let mut engine = std::mem::take(&mut *self.done.lock().unwrap());
        let mut model = std::mem::take(&mut self.model.completions);
        engine.sort_by_key(|c| c.0);
        model.sort_by_key(|c| c.0);
        assert_eq!(
            engine.iter().map(|c| c.0).collect::<Vec<_>>(),
            model.iter().map(|c| c.0).collect::<Vec<_>>(),
            "the same long polls completed"
        );
        for ((key, e), (_, m)) in engine.into_iter().zip(model) {
            self.parked.retain(|p| p.0 != key);
            match (e, m) {
                (Ok(e), Ok(m)) => self.deliveries("long poll", e, m),
                (e, m) => assert_eq!(res(&e, |_| ()), res(&m, |_| ()), "long poll {key}"),
            }
        }
    }

    fn check_stats(&mut self) {
        assert_eq!(
            self.engine.list_queues(""),
            self.model.list_queues(""),
            "queue lists"
        );
        for name in QUEUES {
            assert_eq!(
                res(&self.engine.stats(name), Clone::clone),
                res(&self.model.stats(name), Clone::clone),
                "stats of {name} at {}",
                self.model.now
            );
        }
    }

    fn settings(&self, q: u8) -> Option<String> {
        Some(QUEUES[usize::from(q)].to_owned())
    }

    /// Applies `op` to both and compares everything.
    pub fn step(&mut self, op: &Op) {
        let engine = &self.engine;
        match op.clone() {
            Op::Create {
                q,
                vis,
                max_deliveries,
                max_messages,
                small_bytes,
                pct,
                dloe,
                target,
                wait,
            } => {
                let name = QUEUES[usize::from(q)];
                let s = QueueSettings {
                    visibility_timeout_ms: u64::from(vis),
                    max_deliveries: u32::from(max_deliveries),
                    retention_ms: 60_000 + u64::from(vis) * 10,
                    max_messages: u64::from(max_messages),
                    max_bytes: if small_bytes { 1024 } else { 1 << 20 },
                    channel_capacity_pct: pct,
                    dead_letter_on_expiration: dloe,
                    dead_letter_target: target.and_then(|t| self.settings(t)),
                    receive_wait_default_ms: u64::from(wait),
                    // A third of the queues delay puts that name no delay
                    // (by as long as they wait: no new field in the ops).
                    delay_ms: if pct % 3 == 0 { u64::from(wait) } else { 0 },
                    // Windows short enough for the steps to pass (no new
                    // fields in the ops); every fourth deduplicates by
                    // content.
                    dedup_window_ms: 1_000 + u64::from(vis) * 10,
                    content_dedup: max_messages % 4 == 0,
                    // Queues of 1, 3 or 5 levels; strict or fair every 1
                    // to 3 picks.
                    priority_levels: 1 + (max_deliveries % 3) * 2,
                    priority_fairness: u32::from(wait % 4),
                    // Every other queue retries later: from 100 ms, by
                    // ×1 to ×2.5, up to 2 s, some with jitter.
                    retry_initial_ms: if vis % 2 == 0 {
                        100 + u64::from(wait % 900)
                    } else {
                        0
                    },
                    retry_multiplier_pct: 100 + u32::from(max_messages % 4) * 50,
                    retry_max_ms: 2_000,
                    retry_jitter_pct: if vis % 3 == 0 { 50 } else { 0 },
                    // 0 to 3 failed attempts kept: the oldest go early.
                    attempt_history: u32::from(wait % 4),
                    ..QueueSettings::default()
                };
                let e = engine.create_queue(name, s.clone());
                let m = self.model.create_queue(name, s);
                assert_eq!(res(&e, |x| *x), res(&m, |x| *x), "create {name}");
            }
            Op::Update {
                q,
                vis,
                max_deliveries,
                target,
                dloe,
                max_messages,
            } => {
                let name = QUEUES[usize::from(q)];
                let u = SettingsUpdate {
                    visibility_timeout_ms: vis.map(u64::from),
                    max_deliveries: max_deliveries.map(u32::from),
                    dead_letter_target: target.map(|t| t.and_then(|t| self.settings(t))),
                    dead_letter_on_expiration: dloe,
                    max_messages: max_messages.map(u64::from),
                    ..SettingsUpdate::default()
                };
                let e = engine.update_queue(name, &u);
                let m = self.model.update_queue(name, &u);
                assert_eq!(
                    res(&e, Clone::clone),
                    res(&m, Clone::clone),
                    "update {name}"
                );
            }
            Op::DeleteQueue(q) => {
                let name = QUEUES[usize::from(q)];
                assert_eq!(
                    res(&engine.delete_queue(name), |_| ()),
                    res(&self.model.delete_queue(name), |_| ())
                );
            }
            Op::Purge(q, dlq) => {
                let name = QUEUES[usize::from(q)];
                let addr = Address { queue: name, dlq };
                assert_eq!(
                    res(&engine.purge(addr), |_| ()),
                    res(&self.model.purge(name, dlq), |_| ())
                );
            }
            Op::Put(q, entries) => {
                let name = QUEUES[usize::from(q)];
                let now = self.clock.now_ms();
                let batch: Vec<NewMessage> = entries
                    .iter()
                    .map(|&(len, channel, avail, param, ttl)| NewMessage {
                        payload: Bytes::from(vec![b'p'; usize::from(len) * 7]),
                        attributes: if len % 5 == 0 {
                            vec![("k".into(), format!("v{len}"))]
                        } else {
                            vec![]
                        },
                        channel: CHANNELS[usize::from(channel)].map(str::to_owned),
                        availability: match avail {
                            0 => Availability::DelayMs(u64::from(param)),
                            1 => Availability::At(now + u64::from(param)),
                            2 => Availability::At(now.saturating_sub(u64::from(param))),
                            3 => Availability::DelayMs(900_001),
                            _ => Availability::Now,
                        },
                        ttl_ms: ttl.map(u64::from),
                        // A quarter of the puts name one of three ids.
                        dedup_id: (len % 4 == 1).then(|| format!("d{}", param % 3)),
                        // Two thirds of the puts are in one of two groups
                        // (of their channel).
                        group: (len % 3 != 2).then(|| format!("g{}", len % 2)),
                        // Half name a level of 1 to 4 (above a queue's
                        // levels: refused).
                        priority: len.is_multiple_of(2).then_some(1 + (param % 4) as u8),
                    })
                    .collect();
                let e = engine.put(name, batch.clone());
                let m = self.model.put(name, batch);
                assert_eq!(
                    res(&e, |v| v.iter().map(|r| res(r, |x| *x)).collect::<Vec<_>>()),
                    res(&m, |v| v.iter().map(|r| res(r, |x| *x)).collect::<Vec<_>>()),
                    "put {name}"
                );
            }
            Op::Receive {
                q,
                dlq,
                max,
                vis,
                wait,
                filter,
            } => {
                let name = QUEUES[usize::from(q)];
                let opts = ReceiveOptions {
                    max_messages: u32::from(max),
                    visibility_ms: vis.map(u64::from),
                    wait_ms: wait.map(u64::from),
                    channel: match filter {
                        1 => Some(ChannelFilter::Exact("x".into())),
                        2 => Some(ChannelFilter::Prefix("x".into())),
                        3 => Some(ChannelFilter::Prefix(String::new())),
                        4 => Some(ChannelFilter::Exact("y".into())),
                        _ => None,
                    },
                    // The model has no byte budgets: none here.
                    max_answer_bytes: None,
                };
                self.next_key += 1;
                let key = self.next_key;
                let done = self.done.clone();
                let e = engine.receive(Address { queue: name, dlq }, &opts, move |r| {
                    done.lock().unwrap().push((key, r));
                });
                let m = self.model.receive(name, dlq, &opts, key);
                match (e, m) {
                    (Ok(Received::Ready(e)), Ok(Some(m))) => self.deliveries("receive", e, m),
                    (Ok(Received::Parked(id)), Ok(None)) => self.parked.push((key, id)),
                    (Err(e), Err(m)) => assert_eq!(err(&e), err(&m), "receive {name}"),
                    (e, m) => panic!(
                        "receive {name}: engine {e:?} model {:?}",
                        m.map(|x| x.map(|v| v.len()))
                    ),
                }
            }
            Op::UpdateVisibility(q, dlq, picks) => {
                let name = QUEUES[usize::from(q)];
                let chosen: Vec<_> = picks
                    .iter()
                    .filter_map(|(i, t)| self.pick(*i).map(|r| (r, u64::from(*t))))
                    .collect();
                let e_changes: Vec<_> = chosen
                    .iter()
                    .map(|((r, _), t)| VisibilityChange {
                        receipt: *r,
                        timeout_ms: *t,
                    })
                    .collect();
                let m_changes: Vec<_> = chosen.iter().map(|((_, r), t)| (*r, *t)).collect();
                let e = engine.update_visibility(Address { queue: name, dlq }, &e_changes);
                if chosen.is_empty() {
                    assert!(matches!(e, Err(Error::InvalidArgument { .. })));
                    return;
                }
                let m = self.model.update_visibility(name, dlq, &m_changes);
                assert_eq!(
                    res(&e, |v| v.iter().map(|r| res(r, |x| *x)).collect::<Vec<_>>()),
                    res(&m, |v| v.iter().map(|r| res(r, |x| *x)).collect::<Vec<_>>()),
                    "update visibility"
                );
            }
            Op::Delete(q, dlq, picks) => {
                let name = QUEUES[usize::from(q)];
                let chosen: Vec<_> = picks.iter().filter_map(|i| self.pick(*i)).collect();
                let e_r: Vec<_> = chosen.iter().map(|(r, _)| *r).collect();
                let m_r: Vec<_> = chosen.iter().map(|(_, r)| *r).collect();
                let e = engine.delete(Address { queue: name, dlq }, &e_r);
                if chosen.is_empty() {
                    assert!(matches!(e, Err(Error::InvalidArgument { .. })));
                    return;
                }
                let m = self.model.delete(name, dlq, &m_r);
                assert_eq!(
                    res(&e, |v| v.iter().map(|r| res(r, |_| ())).collect::<Vec<_>>()),
                    res(&m, |v| v.iter().map(|r| res(r, |_| ())).collect::<Vec<_>>()),
                    "delete"
                );
            }
            Op::Release(q, dlq, picks) => {
                let name = QUEUES[usize::from(q)];
                let chosen: Vec<_> = picks.iter().filter_map(|i| self.pick(*i)).collect();
                let e_r: Vec<_> = chosen.iter().map(|(r, _)| *r).collect();
                let m_r: Vec<_> = chosen.iter().map(|(_, r)| *r).collect();
                // Every other release says why.
                let (reason, description) = if picks.len() % 2 == 0 {
                    ("bad input", "field x")
                } else {
                    ("", "")
                };
                let e = engine.release(Address { queue: name, dlq }, &e_r, reason, description);
                if chosen.is_empty() {
                    assert!(matches!(e, Err(Error::InvalidArgument { .. })));
                    return;
                }
                let m = self.model.release(name, dlq, &m_r, reason, description);
                assert_eq!(
                    res(&e, |v| v.iter().map(|r| res(r, |x| *x)).collect::<Vec<_>>()),
                    res(&m, |v| v.iter().map(|r| res(r, |x| *x)).collect::<Vec<_>>()),
                    "release"
                );
            }
            Op::Pause(q, halves, paused) => {
                let name = QUEUES[usize::from(q)];
                let halves = Pause {
                    receive: halves & 1 != 0,
                    send: halves & 2 != 0,
                };
                let e = if paused {
                    engine.pause(name, halves)
                } else {
                    engine.resume(name, halves)
                };
                let m = self.model.set_paused(name, halves, paused);
                assert_eq!(
                    res(&e, |p| *p),
                    res(&m, |p| *p),
                    "pause {halves:?} {paused}"
                );
            }
            Op::Defer(q, i) => {
                let name = QUEUES[usize::from(q)];
                if let Some((e_r, m_r)) = self.pick(i) {
                    assert_eq!(
                        res(&engine.defer(name, &e_r), |_| ()),
                        res(&self.model.defer(name, &m_r), |_| ()),
                        "defer"
                    );
                }
            }
            Op::DeadLetter(q, i, long) => {
                let name = QUEUES[usize::from(q)];
                let reason = if long {
                    "r".repeat(300)
                } else {
                    "bad-input".to_owned()
                };
                if let Some((e_r, m_r)) = self.pick(i) {
                    let e = engine.dead_letter(name, &e_r, &reason, "why");
                    let m = self.model.dead_letter(name, &m_r, &reason, "why");
                    assert_eq!(res(&e, |_| ()), res(&m, |_| ()), "dead letter");
                }
            }
            Op::ReceiveDeferred(q, seqs, vis) => {
                let name = QUEUES[usize::from(q)];
                let seqs: Vec<u64> = seqs.iter().map(|s| u64::from(*s)).collect();
                let e = engine.receive_deferred(name, &seqs, vis.map(u64::from));
                let m = self.model.receive_deferred(name, &seqs, vis.map(u64::from));
                match (e, m) {
                    (Ok(e), Ok(m)) => {
                        assert_eq!(e.len(), m.len());
                        for (e, m) in e.into_iter().zip(m) {
                            match (e, m) {
                                (Ok(e), Ok(m)) => {
                                    self.deliveries("receive deferred", vec![e], vec![m])
                                }
                                (e, m) => assert_eq!(
                                    res(&e, |_| ()),
                                    res(&m, |_| ()),
                                    "receive deferred entry"
                                ),
                            }
                        }
                    }
                    (e, m) => assert_eq!(res(&e, |_| ()), res(&m, |_| ()), "receive deferred"),
                }
            }
            Op::Peek(q, dlq, from, max) => {
                let name = QUEUES[usize::from(q)];
                let e = engine.peek(
                    Address { queue: name, dlq },
                    u64::from(from),
                    u32::from(max),
                );
                let m = self.model.peek(name, dlq, u64::from(from), u32::from(max));
                assert_eq!(res(&e, Clone::clone), res(&m, Clone::clone), "peek");
            }
            Op::Cancel(q, seq) => {
                let name = QUEUES[usize::from(q)];
                let e = engine.cancel_scheduled(name, u64::from(seq));
                let m = self.model.cancel_scheduled(name, u64::from(seq));
                assert_eq!(res(&e, |_| ()), res(&m, |_| ()), "cancel");
            }
            Op::Redrive(q, max, rate, filter) => {
                let name = QUEUES[usize::from(q)];
                let (max, rate) = (max.map(u64::from), rate.map(u32::from));
                let filter = filter_of(filter, self.clock.now_ms());
                let e = match filter.clone() {
                    None => engine.redrive(name, max, rate),
                    Some(f) => engine.redrive_where(name, max, rate, f),
                };
                let m = self.model.redrive(name, max, rate, filter);
                assert_eq!(res(&e, |x| *x), res(&m, |x| *x), "redrive");
            }
            Op::Preview(q, dlq, back, filter, from) => {
                let name = QUEUES[usize::from(q)];
                let filter = filter_of(filter, self.clock.now_ms()).unwrap_or_default();
                let from = u64::from(from);
                let e = engine.preview_move(name, dlq, back, &filter, from);
                let m = self.model.preview_move(name, dlq, back, &filter, from);
                assert_eq!(res(&e, Clone::clone), res(&m, Clone::clone), "preview");
            }
            Op::CancelWait(i) => {
                if !self.parked.is_empty() {
                    let (key, id) = self.parked.remove(usize::from(i) % self.parked.len());
                    assert_eq!(
                        engine.cancel_wait(id),
                        self.model.cancel_wait(key),
                        "cancel wait"
                    );
                }
            }
            Op::BySeq {
                q,
                dlq,
                seq,
                dead_letter,
                long,
            } => {
                let name = QUEUES[usize::from(q)];
                let seq = u64::from(seq);
                let (e, m) = if dead_letter {
                    let reason = if long {
                        "r".repeat(300)
                    } else {
                        "operator".into()
                    };
                    (
                        engine.dead_letter_seq(name, seq, &reason, "by hand"),
                        self.model.dead_letter_seq(name, seq, &reason, "by hand"),
                    )
                } else {
                    (
                        engine.delete_seq(Address { queue: name, dlq }, seq),
                        self.model.delete_seq(name, dlq, seq),
                    )
                };
                assert_eq!(res(&e, |_| ()), res(&m, |_| ()), "by seq");
            }
            Op::Advance(ms) => {
                self.clock.advance(u64::from(ms));
                engine.tick();
                self.model.advance(self.clock.now_ms());
            }
        }
        self.completions();
        self.check_stats();
        if let Err(e) = self.engine.check_invariants() {
            panic!("after {op:?}: {e}");
        }
        for name in QUEUES {
            for dlq in [false, true] {
                let e = engine_peek_all(&self.engine, name, dlq);
                let m = self.model.peek(name, dlq, 0, 100);
                assert_eq!(
                    res(&e, Clone::clone),
                    res(&m, Clone::clone),
                    "every message of {name} (dlq {dlq})"
                );
            }
        }
    }
}

fn engine_peek_all(engine: &Engine, name: &str, dlq: bool) -> Result<Vec<Message>, Error> {
    engine.peek(Address { queue: name, dlq }, 0, 100)
}
