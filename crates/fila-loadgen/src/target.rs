//! The systems under test, behind one pair of traits so every system runs
//! the same workload code and is timed by the same code. fila is the first
//! adapter; the peers (Redis Streams, beanstalkd, NATS JetStream) come next.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fila_client::{
    Client, ClientOptions, DeleteRef, Fields, PayloadsRef, Receipt, ReceiveRef, Response,
    SettingsPatch,
};

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
    /// Makes the queue empty and ready.
    fn prepare(&self, queue: &str) -> Result<(), String>;
    /// A new producer connection.
    fn producer(&self, queue: &str) -> Result<Box<dyn Producer>, String>;
    /// A new consumer connection.
    fn consumer(&self, queue: &str) -> Result<Box<dyn Consumer>, String>;
}

/// fila over its blocking client.
pub struct Fila {
    /// Server address.
    pub addr: String,
    /// Token, if the server wants one.
    pub token: Option<String>,
    /// Label in reports (the sync mode, say).
    pub label: String,
    /// The fields a receive asks for (the workload reads only the payload).
    pub fields: Fields,
}

impl Fila {
    fn connect(&self) -> Result<Client, String> {
        let mut options = ClientOptions::new(self.addr.clone());
        if let Some(t) = &self.token {
            options = options.token(t.clone());
        }
        Client::connect(options).map_err(|e| e.to_string())
    }
}

impl Target for Fila {
    fn name(&self) -> String {
        if self.label.is_empty() {
            "fila".into()
        } else {
            format!("fila ({})", self.label)
        }
    }

    fn prepare(&self, queue: &str) -> Result<(), String> {
        let mut c = self.connect()?;
        c.delete_queue_if_exists(queue).map_err(|e| e.to_string())?;
        c.create_queue(
            queue,
            SettingsPatch {
                max_messages: Some(1 << 32),
                max_bytes: Some(64 << 30),
                ..SettingsPatch::default()
            },
        )
        .map_err(|e| e.to_string())?;
        Ok(())
    }

    fn producer(&self, queue: &str) -> Result<Box<dyn Producer>, String> {
        Ok(Box::new(FilaProducer {
            client: self.connect()?,
            queue: queue.to_owned(),
            in_flight: VecDeque::new(),
        }))
    }

    fn consumer(&self, queue: &str) -> Result<Box<dyn Consumer>, String> {
        Ok(Box::new(FilaConsumer {
            client: self.connect()?,
            queue: queue.to_owned(),
            fields: self.fields,
            previous: Vec::new(),
            deletes: VecDeque::new(),
        }))
    }
}

struct FilaProducer {
    client: Client,
    queue: String,
    in_flight: VecDeque<(u64, usize)>,
}

impl Producer for FilaProducer {
    fn send(&mut self, batch: &[Bytes]) -> Result<(), String> {
        let req = PayloadsRef {
            queue: &self.queue,
            payloads: batch,
        };
        let id = self.client.send(&req).map_err(|e| e.to_string())?;
        self.client.flush().map_err(|e| e.to_string())?;
        self.in_flight.push_back((id, batch.len()));
        Ok(())
    }

    fn confirm(&mut self) -> Result<(), String> {
        let (id, n) = self
            .in_flight
            .pop_front()
            .ok_or("nothing in flight to confirm")?;
        match self.client.wait(id, Duration::ZERO) {
            Ok(Response::Put(acks)) if acks.len() == n => {
                match acks.into_iter().find_map(|a| a.err()) {
                    None => Ok(()),
                    Some(e) => Err(format!("{}: {}", e.code, e.message)),
                }
            }
            Ok(other) => Err(format!("unexpected answer to a put: {other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }
}

struct FilaConsumer {
    client: Client,
    queue: String,
    fields: Fields,
    previous: Vec<Receipt>,
    /// Deletes sent and not yet confirmed: id and send time.
    deletes: VecDeque<(u64, Instant)>,
}

impl FilaConsumer {
    fn send_delete(&mut self) -> Result<(), String> {
        if self.previous.is_empty() {
            return Ok(());
        }
        let id = self
            .client
            .send(&DeleteRef {
                queue: &self.queue,
                dlq: false,
                receipts: &self.previous,
            })
            .map_err(|e| e.to_string())?;
        self.previous.clear();
        self.deletes.push_back((id, Instant::now()));
        Ok(())
    }

    /// Confirms the oldest delete; answers its round trip.
    fn confirm_delete(&mut self) -> Result<u64, String> {
        let (id, at) = self.deletes.pop_front().ok_or("no delete in flight")?;
        match self.client.wait(id, Duration::ZERO) {
            Ok(Response::Deleted(results)) => match results.into_iter().find_map(|r| r.err()) {
                None => Ok(at.elapsed().as_micros() as u64),
                Some(e) => Err(format!("{}: {}", e.code, e.message)),
            },
            Ok(other) => Err(format!("unexpected answer to a delete: {other:?}")),
            Err(e) => Err(e.to_string()),
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
        let receive = self
            .client
            .send(&ReceiveRef {
                queue: &self.queue,
                dlq: false,
                max_messages: max as u8,
                visibility_ms: Some(visibility_ms),
                wait_ms: Some(wait_ms),
                channel: None,
                fields: self.fields,
            })
            .map_err(|e| e.to_string())?;
        let sent = Instant::now();
        let messages = match self.client.wait(receive, Duration::from_millis(wait_ms)) {
            Ok(r) => r
                .into_messages()
                .map_err(|other| format!("unexpected answer to a receive: {other:?}"))?,
            Err(e) => return Err(e.to_string()),
        };
        let receive_us = sent.elapsed().as_micros() as u64;
        self.previous
            .extend(messages.iter().filter_map(|m| m.receipt));
        let mut deletes_us = Vec::new();
        while self.deletes.len() > depth.saturating_sub(1) {
            deletes_us.push(self.confirm_delete()?);
        }
        Ok(Got {
            payloads: messages.into_iter().map(|m| m.payload).collect(),
            receive_us,
            deletes_us,
            arrived: Vec::new(),
        })
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
