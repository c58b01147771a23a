//! The reference model: fila's queue semantics written plainly, with
//! `BTreeMap`s, linear scans and a clock moved by hand, so that each rule can
//! be read off the code. The property tests run random operation sequences
//! against it and the engine and compare every answer.
//!
//! What the model decides the same way as the engine, because the SPEC leaves
//! it open and the answers must be comparable:
//! - visible order within a channel is the order messages became visible;
//!   channels take turns in the order they became non-empty, a channel that
//!   gave a message goes to the back;
//! - timed events run in time order; at one instant messages (by queue name,
//!   DLQ after queue, sequence number) before redrive ticks before long-poll
//!   deadlines; after each event, parked receives are served;
//! - a group's head is on its channel's ring (takes its turn among the
//!   channel's visible messages and other heads) from when it may be given:
//!   it is the group's first visible, delayed or leased message, visible,
//!   and nothing of the group is leased;
//! - within a channel the highest priority level with messages ready is
//!   served (a group's head counts at its own level); with
//!   priority_fairness N, every N-th pick made while two levels or more
//!   are ready takes the highest level below the one the last such pick
//!   took, wrapping to the highest below the top; a channel's count and
//!   cursor start again when it is made again (it had no message left);
//! - dead letters bound for a target queue are delivered after the operation
//!   (or the whole tick), in (time, source, sequence) order; a target that is
//!   gone or full sends them back to the source's own DLQ.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use fila_core::lease::DELIVERY_COUNT_MAX;
use fila_core::*;

pub mod harness;
mod order;
mod receipts;

/// The model's receipt: which queue incarnation, which sub-queue, which lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MReceipt {
    pub queue_id: u32,
    pub dlq: bool,
    pub lease: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Visible,
    /// Taken by a visibility-0 receive, until the receive ends.
    Looking,
    InFlight(u64),
    Delayed,
    Deferred,
}

#[derive(Clone, Debug)]
struct M {
    id: MessageId,
    seq: u64,
    payload: Bytes,
    attributes: Option<Attributes>,
    channel: Option<Arc<str>>,
    inserted: u64,
    expires: u64,
    visible_at: u64,
    count: u32,
    /// When it was first delivered (the engine keeps it to the second
    /// after its put).
    first: Option<u64>,
    st: St,
    stamp: u64,
    dead_letter: Option<Arc<DeadLetter>>,
    group: Option<Arc<str>>,
    /// Its priority level.
    level: u8,
    /// Its failed attempts, oldest first.
    attempts: Vec<Attempt>,
    /// On its channel's ring: a grouped message of a queue's own half as
    /// its group's head (in a DLQ, any visible one).
    queued: bool,
}

impl M {
    /// Whether a receive may take it: visible, and ungrouped or its
    /// group's queued head.
    fn ready(&self) -> bool {
        self.st == St::Visible && (self.group.is_none() || self.queued)
    }

    /// Whether it is in its group's order (not deferred).
    fn member(&self) -> bool {
        self.st != St::Deferred
    }

    /// What the message counts against max_bytes: payload and attributes.
    fn bytes(&self) -> u64 {
        self.payload.len() as u64
            + self.attributes.as_ref().map_or(0, |a| {
                a.iter()
                    .map(|(k, v)| (k.len() + v.len()) as u64)
                    .sum::<u64>()
            })
    }
}

#[derive(Default)]
struct Sub {
    msgs: BTreeMap<u64, M>,
    rr: Vec<Option<Arc<str>>>,
    /// The channel a prefix-filtered receive was last served from.
    cursor: Option<Arc<str>>,
    waiters: Vec<u64>,
    /// Per channel, the priority fairness rule's picks with a choice and
    /// the level its last fair pick took.
    fairness: HashMap<Option<Arc<str>>, (u32, u8)>,
}

struct Job {
    remaining: Option<u64>,
    rate: u32,
    at: u64,
    /// A filtered redrive's filter, and the first sequence number of the
    /// DLQ it has not looked at.
    filter: Option<(fila_core::MoveFilter, u64)>,
}

/// What a put is deduplicated by: its id, or its content.
#[derive(Clone, PartialEq, Eq, Hash)]
enum DedupKey {
    Id(String),
    Content(Vec<u8>, Vec<(String, String)>),
}

struct Q {
    id: u32,
    name: Arc<str>,
    settings: QueueSettings,
    subs: [Sub; 2],
    next_seq: u64,
    stats: QueueStats,
    redrive: Option<Job>,
    /// Remembered puts: key → (sequence number, forgotten at).
    dedup: HashMap<DedupKey, (u64, u64)>,
}

struct Waiter {
    key: u64,
    queue: String,
    dlq: bool,
    max: u32,
    visibility: u64,
    filter: Option<ChannelFilter>,
    deadline: u64,
}

struct Out {
    target: String,
    source: Arc<str>,
    source_seq: u64,
    at: u64,
    msg: M,
}

/// A delivered message and its model receipt.
pub type Delivery = (Message, Option<MReceipt>);

pub struct Model {
    pub now: u64,
    queues: BTreeMap<String, Q>,
    next_qid: u32,
    next_lease: u64,
    stamp: u64,
    /// Parked receives in the order they parked.
    waiters: Vec<Waiter>,
    gained: Vec<(String, bool)>,
    outbox: Vec<Out>,
    /// Completed parked receives: (key, answer).
    pub completions: Vec<(u64, Result<Vec<Delivery>, Error>)>,
}

fn idx(dlq: bool) -> usize {
    usize::from(dlq)
}

impl Model {
    pub fn new(now: u64) -> Model {
        Model {
            now,
            queues: BTreeMap::new(),
            next_qid: 1,
            next_lease: 1,
            stamp: 0,
            waiters: Vec::new(),
            gained: Vec::new(),
            outbox: Vec::new(),
            completions: Vec::new(),
        }
    }

    fn q(&self, name: &str) -> Result<&Q, Error> {
        self.queues
            .get(name)
            .ok_or_else(|| Error::QueueNotFound(name.to_owned()))
    }

    fn q_mut(&mut self, name: &str) -> Result<&mut Q, Error> {
        self.queues
            .get_mut(name)
            .ok_or_else(|| Error::QueueNotFound(name.to_owned()))
    }

    fn view(&self, m: &M, dlq: bool) -> Message {
        let state = match m.st {
            St::Visible | St::Looking if dlq => State::DeadLettered,
            St::Visible | St::Looking => State::Visible,
            St::InFlight(_) => State::InFlight,
            St::Delayed => State::Delayed,
            St::Deferred => State::Deferred,
        };
        Message {
            id: m.id,
            seq: m.seq,
            payload: Payload::copy_from_slice(&m.payload),
            attributes: m.attributes.clone(),
            channel: m.channel.clone(),
            inserted_at_ms: m.inserted,
            expires_at_ms: m.expires,
            next_visible_at_ms: m.visible_at,
            delivery_count: m.count,
            first_received_at_ms: m
                .first
                .map(|f| m.inserted + ((f - m.inserted) / 1000).min((1 << 22) - 2) * 1000),
            state,
            receipt: None,
            dead_letter: m.dead_letter.clone(),
            group: m.group.clone(),
            priority: m.level,
            attempts: (!m.attempts.is_empty()).then(|| Arc::new(m.attempts.clone())),
        }
    }

    /// Takes a message out of its sub-queue for good.
    fn remove(&mut self, name: &str, dlq: bool, seq: u64) -> M {
        let sub = &mut self.queues.get_mut(name).unwrap().subs[idx(dlq)];
        let mut m = sub.msgs.remove(&seq).unwrap();
        sub.fix_rr(&m.channel);
        // A named channel with no message left is made afresh later.
        if m.channel.is_some() && !sub.msgs.values().any(|o| o.channel == m.channel) {
            sub.fairness.remove(&m.channel);
        }
        if !dlq {
            self.refresh_group_of(name, m.channel.clone(), m.group.clone());
        }
        m.queued = false;
        m
    }

    // ----- queues -------------------------------------------------------------

    fn check_target(&self, name: &str, s: &QueueSettings) -> Result<(), Error> {
        if let Some(t) = &s.dead_letter_target {
            if t == name {
                return Err(Error::InvalidArgument {
                    field: "dead_letter_target",
                    limit: String::new(),
                });
            }
            self.q(t)?;
        }
        Ok(())
    }

    pub fn create_queue(&mut self, name: &str, settings: QueueSettings) -> Result<bool, Error> {
        validate_queue_name("name", name)?;
        settings.validate()?;
        self.check_target(name, &settings)?;
        if let Some(q) = self.queues.get(name) {
            // Every setting, in the engine's order (tags are no setting).
            macro_rules! differing {
                ($($field:ident),*) => {
                    [$((stringify!($field), q.settings.$field != settings.$field)),*]
                };
            }
            let fields = fila_core::for_each_setting!(differing);
            return match fields.iter().find(|f| f.1) {
                None => Ok(false),
                Some((field, _)) => Err(Error::QueueExists {
                    name: name.to_owned(),
                    field,
                }),
            };
        }
        let id = self.next_qid;
        self.next_qid += 1;
        self.queues.insert(
            name.to_owned(),
            Q {
                id,
                name: Arc::from(name),
                settings,
                subs: [Sub::default(), Sub::default()],
                next_seq: 1,
                stats: QueueStats {
                    times: QueueTimes {
                        created_at_ms: self.now,
                        modified_at_ms: self.now,
                    },
                    ..QueueStats::default()
                },
                redrive: None,
                dedup: HashMap::new(),
            },
        );
        Ok(true)
    }

    pub fn queue_settings(&self, name: &str) -> Result<QueueSettings, Error> {
        Ok(self.q(name)?.settings.clone())
    }

    pub fn update_queue(&mut self, name: &str, u: &SettingsUpdate) -> Result<QueueSettings, Error> {
        // Like the engine: a new target is checked first, then the queue's
        // settings are read, changed and validated in one step.
        if let Some(Some(t)) = &u.dead_letter_target {
            let probe = QueueSettings {
                dead_letter_target: Some(t.clone()),
                ..QueueSettings::default()
            };
            probe.validate()?;
            self.check_target(name, &probe)?;
        }
        let next = u.apply(&self.q(name)?.settings);
        next.validate()?;
        let now = self.now;
        let q = self.q_mut(name)?;
        q.settings = next.clone();
        if u.changes_settings() {
            q.stats.times.modified_at_ms = now;
        }
        Ok(next)
    }

    pub fn list_queues(&self, prefix: &str) -> Vec<String> {
        self.queues
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect()
    }

    pub fn delete_queue(&mut self, name: &str) -> Result<(), Error> {
        self.q(name)?;
        let mut keep = Vec::new();
        for w in std::mem::take(&mut self.waiters) {
            if w.queue == name {
                self.completions
                    .push((w.key, Err(Error::QueueDeleted(name.to_owned()))));
            } else {
                keep.push(w);
            }
        }
        self.waiters = keep;
        self.queues.remove(name);
        self.gained.retain(|(n, _)| n != name);
        Ok(())
    }

    pub fn purge(&mut self, name: &str, dlq: bool) -> Result<(), Error> {
        let q = self.q_mut(name)?;
        q.subs[idx(dlq)].msgs.clear();
        q.subs[idx(dlq)].rr.clear();
        q.subs[idx(dlq)].cursor = None;
        q.subs[idx(dlq)].fairness.clear();
        if dlq {
            q.redrive = None;
        }
        Ok(())
    }

    pub fn stats(&self, name: &str) -> Result<QueueStats, Error> {
        let q = self.q(name)?;
        let main = &q.subs[0];
        let count = |st: fn(&St) -> bool| main.msgs.values().filter(|m| st(&m.st)).count() as u64;
        let mut s = q.stats.clone();
        s.visible = count(|s| *s == St::Visible);
        s.in_flight = count(|s| matches!(s, St::InFlight(_)));
        s.delayed = count(|s| *s == St::Delayed);
        s.deferred = count(|s| *s == St::Deferred);
        s.dead_lettered = q.subs[1].msgs.len() as u64;
        s.paused = Pause {
            receive: q.settings.receive_paused,
            send: q.settings.send_paused,
        };
        s.bytes = q
            .subs
            .iter()
            .flat_map(|sub| sub.msgs.values())
            .map(M::bytes)
            .sum();
        s.oldest_age_ms = main
            .msgs
            .values()
            .next()
            .map_or(0, |m| self.now.saturating_sub(m.inserted));
        s.dedup_entries = q.dedup.values().filter(|(_, at)| *at > self.now).count() as u64;
        let mut groups: HashMap<(Option<Arc<str>>, Arc<str>), bool> = HashMap::new();
        for m in main.msgs.values().filter(|m| m.member()) {
            if let Some(g) = &m.group {
                *groups.entry((m.channel.clone(), g.clone())).or_default() |=
                    matches!(m.st, St::InFlight(_));
            }
        }
        s.groups = groups.len() as u64;
        s.groups_in_flight = groups.values().filter(|busy| **busy).count() as u64;
        Ok(s)
    }

    // ----- put ----------------------------------------------------------------

    fn capacity(&self, q: &Q, channel: &Option<Arc<str>>, len: u64) -> Result<(), Error> {
        let s = &q.settings;
        let full = |limit: &'static str, max: u64| Error::QueueFull {
            name: q.name.to_string(),
            limit,
            max,
        };
        let all = q.subs.iter().flat_map(|sub| sub.msgs.values());
        let held = all.clone().count() as u64;
        let bytes: u64 = all.map(M::bytes).sum();
        if held + 1 > s.max_messages {
            return Err(full("max_messages", s.max_messages));
        }
        if bytes + len > s.max_bytes {
            return Err(full("max_bytes", s.max_bytes));
        }
        if s.channel_capacity_pct < 100 {
            let pct = u64::from(s.channel_capacity_pct);
            let mine = q.subs[0].msgs.values().filter(|m| &m.channel == channel);
            let held = mine.clone().count() as u64;
            let bytes: u64 = mine.map(M::bytes).sum();
            let max_messages = (s.max_messages * pct / 100).max(1);
            let max_bytes = (s.max_bytes * pct / 100).max(1);
            if held + 1 > max_messages {
                return Err(full("channel share of max_messages", max_messages));
            }
            if bytes + len > max_bytes {
                return Err(full("channel share of max_bytes", max_bytes));
            }
        }
        Ok(())
    }

    pub fn put(
        &mut self,
        name: &str,
        batch: Vec<NewMessage>,
    ) -> Result<Vec<Result<PutReceipt, Error>>, Error> {
        if batch.is_empty() || batch.len() > 20 {
            return Err(Error::InvalidArgument {
                field: "messages",
                limit: String::new(),
            });
        }
        if self.q(name)?.settings.send_paused {
            return Err(Error::QueuePaused {
                name: name.to_owned(),
                what: "sending",
            });
        }
        let now = self.now;
        let mut answers = Vec::new();
        for m in batch {
            answers.push(self.put_one(name, m, now));
        }
        self.serve_gained();
        self.flush_outbox();
        Ok(answers)
    }

    fn put_one(&mut self, name: &str, m: NewMessage, now: u64) -> Result<PutReceipt, Error> {
        let q = self.q(name)?;
        m.validate(&q.settings, now)?;
        // Within the window, a resend is answered as its first put was.
        let key = match &m.dedup_id {
            Some(id) => Some(DedupKey::Id(id.clone())),
            None if q.settings.content_dedup => {
                Some(DedupKey::Content(m.payload.to_vec(), m.attributes.clone()))
            }
            None => None,
        };
        if let Some(&(seq, at)) = key.as_ref().and_then(|k| q.dedup.get(k)) {
            if at > now {
                return Ok(PutReceipt {
                    id: MessageId((u128::from(q.id) << 64) | u128::from(seq)),
                    seq,
                });
            }
        }
        let channel: Option<Arc<str>> = m.channel.as_deref().map(Arc::from);
        let attributes_len: usize = m.attributes.iter().map(|(k, v)| k.len() + v.len()).sum();
        self.capacity(q, &channel, (m.payload.len() + attributes_len) as u64)?;
        let lifetime = m.ttl_ms.unwrap_or(q.settings.retention_ms);
        let visible_at = match m.availability {
            Availability::Now => now + q.settings.delay_ms,
            Availability::DelayMs(d) => now + d,
            Availability::At(at) => at.max(now),
        };
        let attributes: Option<Attributes> = if m.attributes.is_empty() {
            None
        } else {
            Some(
                m.attributes
                    .into_iter()
                    .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
                    .collect(),
            )
        };
        let q = self.q_mut(name)?;
        let seq = q.next_seq;
        q.next_seq += 1;
        q.stats.puts += 1;
        if let Some(k) = key {
            let window = q.settings.dedup_window_ms;
            q.dedup.insert(k, (seq, now + window));
        }
        let id = MessageId((u128::from(q.id) << 64) | u128::from(seq));
        q.subs[0].msgs.insert(
            seq,
            M {
                id,
                seq,
                payload: m.payload,
                attributes,
                channel,
                inserted: now,
                expires: now + lifetime,
                visible_at,
                count: 0,
                first: None,
                st: St::Delayed,
                stamp: 0,
                dead_letter: None,
                group: m.group.as_deref().map(Arc::from),
                level: m.priority.unwrap_or(1),
                attempts: Vec::new(),
                queued: false,
            },
        );
        if visible_at <= now {
            self.enter_visible(name, false, seq);
        }
        Ok(PutReceipt { id, seq })
    }

    pub fn cancel_scheduled(&mut self, name: &str, seq: u64) -> Result<(), Error> {
        let q = self.q(name)?;
        match q.subs[0].msgs.get(&seq) {
            Some(m) if m.st == St::Delayed => {
                self.remove(name, false, seq);
                self.serve_gained();
                self.flush_outbox();
                Ok(())
            }
            _ => Err(Error::NotFound {
                seq,
                what: "scheduled",
            }),
        }
    }

    // ----- receive ------------------------------------------------------------

    fn pick(
        &self,
        name: &str,
        dlq: bool,
        filter: Option<&ChannelFilter>,
    ) -> Option<Option<Arc<str>>> {
        let sub = &self.queues[name].subs[idx(dlq)];
        match filter {
            None => sub.rr.first().cloned(),
            Some(ChannelFilter::Prefix(p)) if p.is_empty() => sub.rr.first().cloned(),
            Some(ChannelFilter::Exact(want)) => sub
                .rr
                .iter()
                .find(|c| c.as_deref() == Some(want.as_str()))
                .cloned(),
            // A prefix: the matching channels in name order, round-robin
            // from after the last one a prefix receive was served from.
            Some(f) => {
                let mut matching: Vec<Arc<str>> = sub
                    .rr
                    .iter()
                    .flatten()
                    .filter(|c| f.matches(Some(c)))
                    .cloned()
                    .collect();
                matching.sort();
                let after = sub
                    .cursor
                    .as_ref()
                    .filter(|c| f.matches(Some(c)))
                    .and_then(|cur| matching.iter().find(|c| *c > cur).cloned());
                after.or_else(|| matching.first().cloned()).map(Some)
            }
        }
    }

    fn take(
        &mut self,
        name: &str,
        dlq: bool,
        max: u32,
        vis: u64,
        filter: Option<&ChannelFilter>,
    ) -> Vec<Delivery> {
        let now = self.now;
        let mut out = Vec::new();
        let mut looks = Vec::new();
        if !dlq && self.queues[name].settings.receive_paused {
            return out;
        }
        while (out.len() as u32) < max {
            let Some(channel) = self.pick(name, dlq, filter) else {
                break;
            };
            let q = self.queues.get_mut(name).unwrap();
            let sub = &mut q.subs[idx(dlq)];
            let fairness = q.settings.priority_fairness;
            let level = sub.pick_level(&channel, fairness);
            let seq = sub
                .msgs
                .values()
                .filter(|m| m.ready() && m.channel == channel && m.level == level)
                .min_by_key(|m| m.stamp)
                .unwrap()
                .seq;
            let m = sub.msgs.get_mut(&seq).unwrap();
            m.st = St::Looking;
            m.queued = false;
            if let Some(ChannelFilter::Prefix(p)) = filter {
                if !p.is_empty() {
                    sub.cursor = channel.clone();
                }
            }
            sub.fix_rr(&channel);
            sub.rotate(&channel);
            let max_deliveries = q.settings.max_deliveries;
            if !dlq && max_deliveries > 0 && sub.msgs[&seq].count >= max_deliveries {
                self.dead_letter_msg(name, seq, DeadLetterReason::MaxDeliveries, now);
                continue;
            }
            q.stats.deliveries += 1;
            let lease = self.next_lease;
            self.next_lease += 1;
            let m = q.subs[idx(dlq)].msgs.get_mut(&seq).unwrap();
            m.count = (m.count + 1).min(DELIVERY_COUNT_MAX);
            m.first.get_or_insert(now);
            m.visible_at = now + vis;
            if vis == 0 {
                looks.push(seq);
            } else {
                m.st = St::InFlight(lease);
            }
            let receipt = MReceipt {
                queue_id: q.id,
                dlq,
                lease,
            };
            let q = &self.queues[name];
            let message = self.view(&q.subs[idx(dlq)].msgs[&seq], dlq);
            out.push((message, Some(receipt)));
        }
        for seq in looks {
            self.enter_visible(name, dlq, seq);
        }
        out
    }

    /// Receives; `Ok(None)` means parked under `key`.
    pub fn receive(
        &mut self,
        name: &str,
        dlq: bool,
        opts: &ReceiveOptions,
        key: u64,
    ) -> Result<Option<Vec<Delivery>>, Error> {
        opts.validate()?;
        let q = self.q(name)?;
        let vis = opts
            .visibility_ms
            .unwrap_or(q.settings.visibility_timeout_ms);
        let wait = opts.wait_ms.unwrap_or(q.settings.receive_wait_default_ms);
        let out = self.take(name, dlq, opts.max_messages, vis, opts.channel.as_ref());
        let parked = out.is_empty() && wait > 0 && key != u64::MAX;
        if parked {
            self.waiters.push(Waiter {
                key,
                queue: name.to_owned(),
                dlq,
                max: opts.max_messages,
                visibility: vis,
                filter: opts.channel.clone(),
                deadline: self.now + wait,
            });
        }
        self.serve_gained();
        self.flush_outbox();
        Ok(if parked { None } else { Some(out) })
    }

    /// Pauses (`paused`) or resumes the halves `halves` names; a resumed
    /// receive half serves its waiting receives.
    pub fn set_paused(&mut self, name: &str, halves: Pause, paused: bool) -> Result<Pause, Error> {
        if halves.is_none() {
            return Err(Error::InvalidArgument {
                field: "pause",
                limit: String::new(),
            });
        }
        let s = &mut self.q_mut(name)?.settings;
        if halves.receive {
            s.receive_paused = paused;
        }
        if halves.send {
            s.send_paused = paused;
        }
        let now = Pause {
            receive: s.receive_paused,
            send: s.send_paused,
        };
        if halves.receive && !paused {
            self.gained.push((name.to_owned(), false));
            self.serve_gained();
            self.flush_outbox();
        }
        Ok(now)
    }

    pub fn cancel_wait(&mut self, key: u64) -> bool {
        let before = self.waiters.len();
        self.waiters.retain(|w| w.key != key);
        before != self.waiters.len()
    }

    fn serve_gained(&mut self) {
        while !self.gained.is_empty() {
            let (name, dlq) = self.gained.remove(0);
            if !self.queues.contains_key(&name) {
                continue;
            }
            let mut i = 0;
            loop {
                let mine: Vec<usize> = (0..self.waiters.len())
                    .filter(|j| self.waiters[*j].queue == name && self.waiters[*j].dlq == dlq)
                    .collect();
                if i >= mine.len() || self.queues[&name].subs[idx(dlq)].visible() == 0 {
                    break;
                }
                let w = &self.waiters[mine[i]];
                let (max, vis, filter, key) = (w.max, w.visibility, w.filter.clone(), w.key);
                let out = self.take(&name, dlq, max, vis, filter.as_ref());
                if out.is_empty() {
                    i += 1;
                    continue;
                }
                self.waiters.retain(|w| w.key != key);
                self.completions.push((key, Ok(out)));
            }
        }
    }
}
