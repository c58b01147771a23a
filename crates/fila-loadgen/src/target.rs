//! The systems under test, behind one pair of traits so every system runs
//! the same workload code and is timed by the same code: fila's adapter
//! here, the peers' (Redis Streams, beanstalkd, NATS JetStream) in
//! `peers/`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fila_client::{
    Client, ClientOptions, DeleteRef, ErrorCode, Fields, PayloadsRef, Receipt, ReceiveRef,
    Response, SettingsPatch,
};

use crate::nodes::{Nodes, Sent};

/// A producer connection: batches sent pipelined, acknowledgements taken
/// in order.
pub trait Producer: Send {
    /// Sends one batch (written at once) without waiting for its
    /// acknowledgement.
    fn send(&mut self, batch: &[Bytes]) -> Result<(), String>;
    /// Waits for the acknowledgement of the oldest batch not yet confirmed.
    fn confirm(&mut self) -> Result<(), String>;
}

/// What one consumer step got.
pub struct Got {
    /// The payloads received.
    pub payloads: Vec<Bytes>,
    /// Round trip of the receive (µs).
    pub receive_us: u64,
    /// Round trips of the deletes confirmed during this step.
    pub deletes_us: Vec<u64>,
    /// When each payload arrived, for adapters whose step gathers messages
    /// over time (empty: at the step's end).
    pub arrived: Vec<Instant>,
}

impl Got {
    /// What a step received, the receive's round trip and the deletes it
    /// confirmed.
    pub fn new(payloads: Vec<Bytes>, receive: Duration, deletes_us: Vec<u64>) -> Got {
        Got {
            payloads,
            receive_us: receive.as_micros() as u64,
            deletes_us,
            arrived: Vec::new(),
        }
    }

    /// Sets when each payload arrived.
    pub fn arrived(mut self, at: Vec<Instant>) -> Got {
        self.arrived = at;
        self
    }
}

/// A consumer connection.
pub trait Consumer: Send {
    /// Sends the delete of what the last step received, then receives up
    /// to `max` more (waiting up to `wait_ms`); at most `depth` deletes stay
    /// unconfirmed (the oldest are confirmed first).
    fn step(
        &mut self,
        max: u32,
        visibility_ms: u64,
        wait_ms: u64,
        depth: usize,
    ) -> Result<Got, String>;
    /// Deletes what the last step received and confirms every delete.
    fn finish(&mut self) -> Result<Vec<u64>, String>;
}

/// A system to test.
pub trait Target: Sync {
    /// Its name in reports.
    fn name(&self) -> String;
    /// Makes the queues empty and ready.
    fn prepare(&self, queues: &[String]) -> Result<(), String>;
    /// A new producer connection: its batches go to `queues` in turn.
    fn producer(&self, queues: &[String]) -> Result<Box<dyn Producer>, String>;
    /// A new consumer connection: it receives from the first of `queues`
    /// until a receive comes back empty, then from the next. With `delete`
    /// false it never deletes (the leases run out and the messages come
    /// back).
    fn consumer(&self, queues: &[String], delete: bool) -> Result<Box<dyn Consumer>, String>;
    /// fila's own adapter, for the scenarios only fila runs.
    fn fila(&self) -> Option<&Fila> {
        None
    }
}

/// A consumer's queues, taken in turn: it stays on one while receives
/// bring messages and moves to the next when one comes back empty, and it
/// remembers where the last receive's messages came from (their deletes go
/// there).
pub struct QueueCycle {
    queues: Vec<Arc<str>>,
    at: usize,
    last: usize,
}

impl QueueCycle {
    /// Starts at the first of `queues` (at least one).
    pub fn new(queues: &[String]) -> QueueCycle {
        assert!(!queues.is_empty(), "a consumer has a queue");
        QueueCycle {
            queues: queues.iter().map(|q| Arc::from(q.as_str())).collect(),
            at: 0,
            last: 0,
        }
    }

    /// The queue to receive from now.
    pub fn current(&self) -> &str {
        &self.queues[self.at]
    }

    /// The queue the last receive's messages came from.
    pub fn last(&self) -> &str {
        &self.queues[self.last]
    }

    /// [`QueueCycle::last`], shared (kept with a request in flight).
    pub fn last_shared(&self) -> Arc<str> {
        self.queues[self.last].clone()
    }

    /// Notes a receive from [`QueueCycle::current`] that brought `n`
    /// messages.
    pub fn received(&mut self, n: usize) {
        self.last = self.at;
        if n == 0 {
            self.at = (self.at + 1) % self.queues.len();
        }
    }
}

/// Refuses what an adapter does not do, naming the system and the
/// scenario.
pub fn unsupported(system: &str, what: &str) -> String {
    format!("{system} does not run {what} in this harness (see docs/benchmarks.md)")
}

/// fila over its blocking client.
pub struct Fila {
    /// Server address.
    pub addr: String,
    /// Token, if the server wants one.
    pub token: Option<String>,
    /// TLS, if the server speaks it.
    pub tls: Option<fila_client::TlsOptions>,
    /// Every put carries a deduplication id of its own.
    pub dedup_ids: bool,
    /// Puts go round this many message groups (0: none).
    pub groups: u64,
    /// The queues' retry policy's first wait (0: none).
    pub retry_initial_ms: u64,
    /// The failed attempts each message keeps (`None`: the server's
    /// default).
    pub attempt_history: Option<u32>,
    /// Label in reports (the sync mode, say).
    pub label: String,
    /// The fields a receive asks for (the workload reads only the payload).
    pub fields: Fields,
    /// Each queue's node, as the cluster's `not_leader` answers named it
    /// when the queues were made (on a single node: `addr`).
    pub routes: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl Fila {
    /// How to connect: the address, the token, TLS.
    pub fn options(&self) -> ClientOptions {
        let mut options = ClientOptions::new(self.addr.clone());
        if let Some(t) = &self.token {
            options = options.token(t.clone());
        }
        if let Some(tls) = &self.tls {
            options = options.tls(tls.clone());
        }
        options
    }

    fn connect(&self) -> Result<Client, String> {
        Client::connect(self.options()).map_err(|e| e.to_string())
    }

    /// Connections to the nodes leading `queues`.
    fn nodes(&self, queues: &[String]) -> Result<Nodes, String> {
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        Nodes::connect(&self.options(), queues, |q| {
            routes.get(q).cloned().unwrap_or_else(|| self.addr.clone())
        })
    }

    /// On a cluster (docs/cluster.md), the run starts on the node that
    /// leads its one partition, or with several the metadata group; each
    /// queue's requests then follow `not_leader` to its partition's leader
    /// (when the queues are made, and whenever a leadership moves during
    /// the run: [`Nodes::answer`]). A single node answers the question
    /// `invalid_argument` and nothing changes. `ask`: false when no server
    /// is there to ask.
    pub fn go_to_leader(&mut self, ask: bool) {
        if !ask {
            return;
        }
        let Ok(mut c) = self.connect() else {
            return;
        };
        let Ok(status) = c.cluster_status() else {
            return;
        };
        let leader = match status.partitions.as_slice() {
            [one] => one.leader,
            _ => status.leader,
        }
        .and_then(|id| status.members.iter().find(|m| m.id == id));
        if let Some(m) = leader {
            if m.client != self.addr {
                eprintln!(
                    "fila-loadgen: node {} leads the cluster: the run goes to {}",
                    m.id, m.client
                );
                self.addr = m.client.clone();
            }
        }
    }
}

impl Target for Fila {
    fn fila(&self) -> Option<&Fila> {
        Some(self)
    }

    fn name(&self) -> String {
        if self.label.is_empty() {
            "fila".into()
        } else {
            format!("fila ({})", self.label)
        }
    }

    fn prepare(&self, queues: &[String]) -> Result<(), String> {
        let mut c = self.connect()?;
        for queue in queues {
            c.delete_queue_if_exists(queue).map_err(|e| e.to_string())?;
            c.create_queue(
                queue,
                SettingsPatch {
                    max_messages: Some(1 << 32),
                    max_bytes: Some(64 << 30),
                    // Redelivered as often as the leases run out.
                    max_deliveries: Some(0),
                    retry_initial_ms: (self.retry_initial_ms > 0).then_some(self.retry_initial_ms),
                    attempt_history: self.attempt_history,
                    retry_max_ms: (self.retry_initial_ms > 0).then_some(
                        self.retry_initial_ms
                            .max(fila_client::limits::RETRY_MAX_MS_DEFAULT),
                    ),
                    ..SettingsPatch::default()
                },
            )
            .map_err(|e| e.to_string())?;
            // The create followed the queue's partition to its leader.
            self.routes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(queue.clone(), c.addr().to_owned());
        }
        Ok(())
    }

    fn producer(&self, queues: &[String]) -> Result<Box<dyn Producer>, String> {
        static PRODUCERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let number = PRODUCERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Box::new(FilaProducer {
            nodes: self.nodes(queues)?,
            queues: queues.iter().map(|q| Arc::from(q.as_str())).collect(),
            next: 0,
            in_flight: VecDeque::new(),
            number,
            put: 0,
            dedup: self.dedup_ids,
            groups: self.groups,
        }))
    }

    fn consumer(&self, queues: &[String], delete: bool) -> Result<Box<dyn Consumer>, String> {
        Ok(Box::new(FilaConsumer {
            nodes: self.nodes(queues)?,
            queues: QueueCycle::new(queues),
            delete,
            fields: self.fields,
            previous: Vec::new(),
            deletes: VecDeque::new(),
        }))
    }
}

struct FilaProducer {
    nodes: Nodes,
    queues: Vec<Arc<str>>,
    next: usize,
    /// Puts sent and not yet confirmed, kept to be sent again to a new
    /// leader.
    in_flight: VecDeque<(Sent, Put)>,
    /// This producer's number, and the messages it put so far.
    number: u64,
    put: u64,
    /// Each message carries a deduplication id of its own (`p<number>-<n>`).
    dedup: bool,
    /// Messages go round this many groups (0: none), starting from
    /// producers' own places.
    groups: u64,
}

/// A put in flight: its queue and messages.
enum Put {
    /// Payloads alone.
    Payloads(Arc<str>, Vec<Bytes>),
    /// Messages with a deduplication id or a group.
    Entries(Arc<str>, Vec<fila_client::PutEntry>),
}

impl Put {
    fn len(&self) -> usize {
        match self {
            Put::Payloads(_, p) => p.len(),
            Put::Entries(_, m) => m.len(),
        }
    }

    fn send(&self, nodes: &mut Nodes) -> Result<Sent, String> {
        match self {
            Put::Payloads(queue, payloads) => nodes.send(&PayloadsRef { queue, payloads }),
            Put::Entries(queue, messages) => nodes.send(&fila_client::PutRef { queue, messages }),
        }
    }

    /// The answer to it, sent as `sent` (followed to a new leader).
    fn answer(&self, nodes: &mut Nodes, sent: Sent) -> Result<Response, String> {
        match self {
            Put::Payloads(queue, payloads) => {
                nodes.answer(&PayloadsRef { queue, payloads }, sent, Duration::ZERO)
            }
            Put::Entries(queue, messages) => nodes.answer(
                &fila_client::PutRef { queue, messages },
                sent,
                Duration::ZERO,
            ),
        }
    }
}

impl Producer for FilaProducer {
    fn send(&mut self, batch: &[Bytes]) -> Result<(), String> {
        // Kept to be sent again: the name shared, the payloads' bytes too.
        let queue = self.queues[self.next % self.queues.len()].clone();
        self.next += 1;
        let put = if !self.dedup && self.groups == 0 {
            Put::Payloads(queue, batch.to_vec())
        } else {
            let (number, groups, dedup) = (self.number, self.groups, self.dedup);
            let messages: Vec<fila_client::PutEntry> = batch
                .iter()
                .map(|p| {
                    self.put += 1;
                    let n = self.put;
                    fila_client::PutEntry {
                        payload: p.clone(),
                        dedup_id: dedup.then(|| format!("p{number}-{n}")),
                        group: (groups > 0)
                            .then(|| format!("g{}", (number.wrapping_mul(7919) + n) % groups)),
                        ..fila_client::PutEntry::default()
                    }
                })
                .collect();
            Put::Entries(queue, messages)
        };
        let id = put.send(&mut self.nodes)?;
        self.nodes.flush(id)?;
        self.in_flight.push_back((id, put));
        Ok(())
    }

    fn confirm(&mut self) -> Result<(), String> {
        let (mut id, put) = self
            .in_flight
            .pop_front()
            .ok_or("nothing in flight to confirm")?;
        let mut tries = 1;
        loop {
            match put.answer(&mut self.nodes, id) {
                Ok(Response::Put(acks)) if acks.len() == put.len() => {
                    return match acks.into_iter().find_map(|a| a.err()) {
                        None => Ok(()),
                        Some(e) => Err(format!("{}: {}", e.code, e.message)),
                    };
                }
                // A leadership was lost while the put committed: with
                // deduplication ids it is sent again (stored once).
                Ok(Response::Error(e))
                    if e.code == ErrorCode::OUTCOME_UNKNOWN
                        && self.dedup
                        && tries < UNKNOWN_TRIES =>
                {
                    tries += 1;
                    id = put.send(&mut self.nodes)?;
                    self.nodes.flush(id)?;
                }
                Ok(Response::Error(e)) if e.code == ErrorCode::OUTCOME_UNKNOWN => {
                    return Err(format!(
                        "a put: {} (with --dedup-ids such a put is sent again)",
                        e.message
                    ))
                }
                Ok(Response::Error(e)) => return Err(format!("a put: {}", e.message)),
                Ok(other) => return Err(format!("unexpected answer to a put: {other:?}")),
                Err(e) => return Err(e),
            }
        }
    }
}

/// How many times a put or a delete whose outcome is unknown (a
/// leadership lost while it committed) is sent at most.
const UNKNOWN_TRIES: usize = 3;

struct FilaConsumer {
    nodes: Nodes,
    queues: QueueCycle,
    delete: bool,
    fields: Fields,
    /// What the last receive brought, from `queues.last()`.
    previous: Vec<Receipt>,
    /// Deletes sent and not yet confirmed: id, send time, queue and
    /// receipts (kept to be sent again to a new leader).
    deletes: VecDeque<(Sent, Instant, Arc<str>, Vec<Receipt>)>,
}

impl FilaConsumer {
    fn send_delete(&mut self) -> Result<(), String> {
        if self.previous.is_empty() {
            return Ok(());
        }
        let queue = self.queues.last_shared();
        let receipts = std::mem::take(&mut self.previous);
        let id = self.nodes.send(&DeleteRef {
            queue: &queue,
            dlq: false,
            receipts: &receipts,
        })?;
        self.deletes
            .push_back((id, Instant::now(), queue, receipts));
        Ok(())
    }

    /// Confirms the oldest delete; answers its round trip. One whose
    /// outcome is unknown (a leadership lost while it committed) is sent
    /// again: a receipt it then calls stale was taken by the first, or its
    /// lease ended and the message comes back.
    fn confirm_delete(&mut self) -> Result<u64, String> {
        let (mut id, at, queue, receipts) =
            self.deletes.pop_front().ok_or("no delete in flight")?;
        let req = DeleteRef {
            queue: &queue,
            dlq: false,
            receipts: &receipts,
        };
        let mut tries = 1;
        loop {
            match self.nodes.answer(&req, id, Duration::ZERO) {
                Ok(Response::Deleted(results)) => {
                    let failed = results
                        .into_iter()
                        .find_map(|r| r.err())
                        .filter(|e| tries == 1 || e.code != ErrorCode::RECEIPT_STALE);
                    return match failed {
                        None => Ok(at.elapsed().as_micros() as u64),
                        Some(e) => Err(format!("{}: {}", e.code, e.message)),
                    };
                }
                Ok(Response::Error(e))
                    if e.code == ErrorCode::OUTCOME_UNKNOWN && tries < UNKNOWN_TRIES =>
                {
                    tries += 1;
                    id = self.nodes.send(&req)?;
                    self.nodes.flush(id)?;
                }
                Ok(Response::Error(e)) => return Err(format!("a delete: {}", e.message)),
                Ok(other) => return Err(format!("unexpected answer to a delete: {other:?}")),
                Err(e) => return Err(e),
            }
        }
    }
}

impl Consumer for FilaConsumer {
    fn step(
        &mut self,
        max: u32,
        visibility_ms: u64,
        wait_ms: u64,
        depth: usize,
    ) -> Result<Got, String> {
        self.send_delete()?;
        let mut deletes_us = Vec::new();
        if depth == 0 {
            // One request in flight: the delete is answered before the
            // next receive is sent.
            while !self.deletes.is_empty() {
                deletes_us.push(self.confirm_delete()?);
            }
        }
        let req = ReceiveRef {
            queue: self.queues.current(),
            dlq: false,
            max_messages: max as u8,
            visibility_ms: Some(visibility_ms),
            wait_ms: Some(wait_ms),
            channel: None,
            fields: self.fields,
        };
        let receive = self.nodes.send(&req)?;
        let sent = Instant::now();
        let messages = match self
            .nodes
            .answer(&req, receive, Duration::from_millis(wait_ms))?
        {
            // A leadership lost while the leases committed: nothing
            // received (leased or not, the messages come back).
            Response::Error(e) if e.code == ErrorCode::OUTCOME_UNKNOWN => Ok(Vec::new()),
            answer => answer.into_messages(),
        }
        .map_err(|other| format!("unexpected answer to a receive: {other:?}"))?;
        let receive = sent.elapsed();
        if self.delete {
            self.previous
                .extend(messages.iter().filter_map(|m| m.receipt));
        }
        self.queues.received(messages.len());
        while self.deletes.len() > depth.saturating_sub(1) {
            deletes_us.push(self.confirm_delete()?);
        }
        let payloads = messages.into_iter().map(|m| m.payload).collect();
        Ok(Got::new(payloads, receive, deletes_us))
    }

    fn finish(&mut self) -> Result<Vec<u64>, String> {
        self.send_delete()?;
        let mut deletes_us = Vec::new();
        while !self.deletes.is_empty() {
            deletes_us.push(self.confirm_delete()?);
        }
        Ok(deletes_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_consumer_stays_on_a_queue_while_it_gives_and_moves_on_when_empty() {
        let qs: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let mut c = QueueCycle::new(&qs);
        assert_eq!(c.current(), "a");
        c.received(5);
        assert_eq!((c.current(), c.last()), ("a", "a"));
        c.received(0);
        assert_eq!((c.current(), c.last()), ("b", "a"));
        c.received(2);
        c.received(0);
        c.received(0);
        assert_eq!((c.current(), c.last()), ("a", "c"));
    }
}
