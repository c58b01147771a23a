//! NATS JetStream, a work-queue stream with one durable pull consumer:
//! publish with a reply inbox (the stream's acknowledgement, pipelined);
//! pull (`MSG.NEXT`, batch 20, expiring after the wait); `+ACK` each
//! message (fire and forget: JetStream confirms acks only on request).

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

use super::Conn;
use crate::target::{unsupported, Consumer, Got, Producer, Target};

/// A NATS server with JetStream.
pub struct Nats {
    /// Its address.
    pub addr: String,
    /// `memory` or `file`.
    pub storage: String,
    /// The consumer's ack wait (its lease), ms.
    pub ack_wait_ms: u64,
}

/// One thing the server sent.
enum Incoming {
    /// A message: its reply subject and payload.
    Msg {
        reply: Option<String>,
        payload: Vec<u8>,
    },
    /// A status message (`HMSG` with a status line): its code.
    Status(u16),
}

struct Client {
    conn: Conn,
    inbox: String,
}

static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Client {
    fn open(addr: &str) -> Result<Client, String> {
        let mut conn = Conn::open(addr)?;
        let info = conn.line()?;
        if !info.starts_with("INFO") {
            return Err(format!("not a NATS server: {info:?}"));
        }
        conn.put(b"CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"no_responders\":true}\r\nPING\r\n");
        loop {
            let l = conn.line()?;
            if l == "PONG" {
                break;
            }
            if l.starts_with("-ERR") {
                return Err(l);
            }
        }
        let inbox = format!(
            "_INBOX.lg{}",
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        conn.put(format!("SUB {inbox}.* 1\r\n").as_bytes());
        Ok(Client { conn, inbox })
    }

    fn publish(&mut self, subject: &str, reply: Option<&str>, payload: &[u8]) {
        match reply {
            Some(r) => self
                .conn
                .put(format!("PUB {subject} {r} {}\r\n", payload.len()).as_bytes()),
            None => self
                .conn
                .put(format!("PUB {subject} {}\r\n", payload.len()).as_bytes()),
        }
        self.conn.put(payload);
        self.conn.put(b"\r\n");
    }

    /// The next message or status (answering the server's pings).
    fn next(&mut self) -> Result<Incoming, String> {
        loop {
            let line = self.conn.line()?;
            let parts: Vec<&str> = line.split(' ').collect();
            match parts[0] {
                "PING" => self.conn.put(b"PONG\r\n"),
                "+OK" | "PONG" | "INFO" => {}
                "-ERR" => return Err(format!("nats: {line}")),
                "MSG" => {
                    let len: usize = parts
                        .last()
                        .and_then(|l| l.parse().ok())
                        .ok_or(format!("bad line {line:?}"))?;
                    let reply = (parts.len() == 5).then(|| parts[3].to_owned());
                    let payload = self.conn.bytes(len)?;
                    return Ok(Incoming::Msg { reply, payload });
                }
                "HMSG" => {
                    let n = parts.len();
                    let hdr: usize = parts[n - 2].parse().map_err(|_| format!("{line:?}"))?;
                    let total: usize = parts[n - 1].parse().map_err(|_| format!("{line:?}"))?;
                    let reply = (n == 6).then(|| parts[3].to_owned());
                    let data = self.conn.bytes(total)?;
                    let head = String::from_utf8_lossy(&data[..hdr.min(data.len())]).to_string();
                    // "NATS/1.0 408 Request Timeout": a status ends a pull.
                    let status = head
                        .lines()
                        .next()
                        .and_then(|l| l.split(' ').nth(1))
                        .and_then(|c| c.parse::<u16>().ok());
                    match status {
                        Some(code) => return Ok(Incoming::Status(code)),
                        None => {
                            return Ok(Incoming::Msg {
                                reply,
                                payload: data[hdr.min(data.len())..].to_vec(),
                            })
                        }
                    }
                }
                _ => return Err(format!("unexpected {line:?}")),
            }
        }
    }

    /// A JetStream API request; answers the JSON reply.
    fn api(&mut self, subject: &str, body: &str) -> Result<String, String> {
        let reply = format!("{}.api", self.inbox);
        self.publish(subject, Some(&reply), body.as_bytes());
        match self.next()? {
            Incoming::Msg { payload, .. } => Ok(String::from_utf8_lossy(&payload).into_owned()),
            Incoming::Status(code) => Err(format!("JetStream API status {code} for {subject}")),
        }
    }
}

fn stream_of(queue: &str) -> String {
    queue.replace(['.', '*', '>', ' '], "_")
}

impl Target for Nats {
    fn name(&self) -> String {
        format!("nats jetstream ({})", self.storage)
    }

    fn prepare(&self, queues: &[String]) -> Result<(), String> {
        let [queue] = queues else {
            // A subject per queue and a consumer per subject: not the same
            // code path as one work-queue stream.
            return Err(unsupported("nats jetstream", "many-queues"));
        };
        let s = stream_of(queue);
        let mut c = Client::open(&self.addr)?;
        let _ = c.api(&format!("$JS.API.STREAM.DELETE.{s}"), "");
        let r = c.api(
            &format!("$JS.API.STREAM.CREATE.{s}"),
            &format!(
                "{{\"name\":\"{s}\",\"subjects\":[\"{s}.q\"],\"retention\":\"workqueue\",\"storage\":\"{}\",\"num_replicas\":1}}",
                self.storage
            ),
        )?;
        if r.contains("\"error\"") {
            return Err(format!("creating the stream: {r}"));
        }
        let r = c.api(
            &format!("$JS.API.CONSUMER.DURABLE.CREATE.{s}.lg"),
            &format!(
                "{{\"stream_name\":\"{s}\",\"config\":{{\"durable_name\":\"lg\",\"ack_policy\":\"explicit\",\"ack_wait\":{},\"max_ack_pending\":1000000,\"max_waiting\":512}}}}",
                self.ack_wait_ms.max(1) * 1_000_000
            ),
        )?;
        if r.contains("\"error\"") {
            return Err(format!("creating the consumer: {r}"));
        }
        Ok(())
    }

    fn producer(&self, queues: &[String]) -> Result<Box<dyn Producer>, String> {
        Ok(Box::new(NatsProducer {
            client: Client::open(&self.addr)?,
            subject: format!("{}.q", stream_of(&queues[0])),
            in_flight: VecDeque::new(),
        }))
    }

    fn consumer(&self, queues: &[String], delete: bool) -> Result<Box<dyn Consumer>, String> {
        Ok(Box::new(NatsConsumer {
            client: Client::open(&self.addr)?,
            delete,
            next: format!("$JS.API.CONSUMER.MSG.NEXT.{}.lg", stream_of(&queues[0])),
        }))
    }
}

struct NatsProducer {
    client: Client,
    subject: String,
    in_flight: VecDeque<usize>,
}

impl Producer for NatsProducer {
    fn send(&mut self, batch: &[Bytes]) -> Result<(), String> {
        let reply = format!("{}.p", self.client.inbox);
        for p in batch {
            self.client.publish(&self.subject, Some(&reply), p);
        }
        self.in_flight.push_back(batch.len());
        self.client.conn.flush()
    }

    fn confirm(&mut self) -> Result<(), String> {
        let n = self.in_flight.pop_front().ok_or("nothing in flight")?;
        for _ in 0..n {
            match self.client.next()? {
                Incoming::Msg { payload, .. } if !payload.starts_with(b"{\"error\"") => {}
                Incoming::Msg { payload, .. } => {
                    return Err(String::from_utf8_lossy(&payload).into_owned())
                }
                Incoming::Status(code) => return Err(format!("publish answered status {code}")),
            }
        }
        Ok(())
    }
}

struct NatsConsumer {
    client: Client,
    /// Acknowledge what arrives (false: the ack wait runs out and it comes
    /// back).
    delete: bool,
    next: String,
}

impl Consumer for NatsConsumer {
    fn step(
        &mut self,
        max: u32,
        _visibility_ms: u64,
        wait_ms: u64,
        _depth: usize,
    ) -> Result<Got, String> {
        let reply = format!("{}.pull", self.client.inbox);
        let next = self.next.clone();
        self.client.publish(
            &next,
            Some(&reply),
            format!(
                "{{\"batch\":{max},\"expires\":{}}}",
                wait_ms.max(1) * 1_000_000
            )
            .as_bytes(),
        );
        let sent = Instant::now();
        let mut payloads = Vec::new();
        let mut arrived = Vec::new();
        while payloads.len() < max as usize {
            match self.client.next()? {
                Incoming::Msg { reply, payload } => {
                    arrived.push(Instant::now());
                    payloads.push(Bytes::from(payload));
                    if let Some(ack) = reply.filter(|_| self.delete) {
                        self.client.publish(&ack, None, b"+ACK");
                    }
                }
                Incoming::Status(_) => break,
            }
        }
        self.client.conn.flush()?;
        Ok(Got::new(payloads, sent.elapsed(), Vec::new()).arrived(arrived))
    }

    fn finish(&mut self) -> Result<Vec<u64>, String> {
        self.client.conn.flush()?;
        Ok(Vec::new())
    }
}
