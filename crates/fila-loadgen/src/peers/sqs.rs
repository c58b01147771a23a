//! fila's SQS-compatible API (AWS JSON 1.0 over HTTP/1.1 keep-alive,
//! unsigned: a server without tokens): SendMessageBatch of at most 10
//! entries to put, ReceiveMessage of at most 10 to receive,
//! DeleteMessageBatch to delete, as an SDK would send them. Requests on a
//! connection may be pipelined (`--depth`, `--ack-depth`); with 1 each
//! connection has one request in flight, as the SDKs have.
//!
//! SQS bodies are text: a payload's first 8 bytes (its send time) travel
//! as 16 hex digits, so a message is 8 bytes longer than `--size`.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;
use serde_json::Value;

use super::Conn;
use crate::target::{Consumer, Got, Producer, QueueCycle, Target};

/// Entries of one SQS batch.
const BATCH: usize = 10;
/// The account in queue URLs.
const ACCOUNT: &str = "000000000000";

/// A fila server's SQS listener.
pub struct Sqs {
    /// Its address.
    pub addr: String,
    /// Label in reports.
    pub label: String,
}

/// A payload as an SQS body (or an Azure message's text): the stamp in
/// hex, the rest as it is (the workload fills it with ASCII).
pub(super) fn to_text(p: &[u8]) -> String {
    let (stamp, rest) = p.split_at(8.min(p.len()));
    let mut s = String::with_capacity(p.len() + 8);
    for b in stamp {
        s.push_str(&format!("{b:02x}"));
    }
    s.push_str(&String::from_utf8_lossy(rest));
    s
}

pub(super) fn from_text(s: &str) -> Bytes {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len().saturating_sub(8));
    let mut i = 0;
    while i + 1 < b.len().min(16) {
        let hex = std::str::from_utf8(&b[i..i + 2]).unwrap_or("00");
        out.push(u8::from_str_radix(hex, 16).unwrap_or(0));
        i += 2;
    }
    out.extend_from_slice(&b[16.min(b.len())..]);
    Bytes::from(out)
}

fn url(queue: &str) -> String {
    format!("http://localhost/{ACCOUNT}/{queue}")
}

/// Queues one request.
fn request(conn: &mut Conn, host: &str, op: &str, body: &str) {
    conn.put(
        format!(
            "POST / HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/x-amz-json-1.0\r\nx-amz-target: AmazonSQS.{op}\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    conn.put(body.as_bytes());
}

/// Reads one answer: its status and JSON body.
fn answer(conn: &mut Conn) -> Result<(u16, Value), String> {
    let (status, body) = super::http_answer(conn)?;
    let v = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).map_err(|e| format!("bad JSON answer: {e}"))?
    };
    Ok((status, v))
}

/// Reads one answer that must be a success.
fn ok(conn: &mut Conn) -> Result<Value, String> {
    match answer(conn)? {
        (200, v) => Ok(v),
        (status, v) => Err(format!("SQS answered {status}: {v}")),
    }
}

/// Fails on a batch answer's failed entries.
fn all_done(v: &Value, what: &str) -> Result<(), String> {
    match v.get("Failed").and_then(Value::as_array) {
        Some(f) if !f.is_empty() => Err(format!("{what}: {}", f[0])),
        _ => Ok(()),
    }
}

impl Target for Sqs {
    fn name(&self) -> String {
        if self.label.is_empty() {
            "fila (SQS API)".into()
        } else {
            format!("fila (SQS API, {})", self.label)
        }
    }

    fn prepare(&self, queues: &[String]) -> Result<(), String> {
        let mut c = Conn::open(&self.addr)?;
        for queue in queues {
            request(
                &mut c,
                &self.addr,
                "DeleteQueue",
                &format!("{{\"QueueUrl\":\"{}\"}}", url(queue)),
            );
            let (status, v) = answer(&mut c)?;
            if status != 200 && !v.to_string().contains("QueueDoesNotExist") {
                return Err(format!("DeleteQueue answered {status}: {v}"));
            }
            // Redelivered as often as the leases run out (no redrive
            // policy), as the other systems.
            request(
                &mut c,
                &self.addr,
                "CreateQueue",
                &format!("{{\"QueueName\":\"{queue}\"}}"),
            );
            ok(&mut c)?;
        }
        Ok(())
    }

    fn producer(&self, queues: &[String]) -> Result<Box<dyn Producer>, String> {
        Ok(Box::new(SqsProducer {
            conn: Conn::open(&self.addr)?,
            host: self.addr.clone(),
            urls: queues.iter().map(|q| url(q)).collect(),
            next: 0,
            in_flight: VecDeque::new(),
        }))
    }

    fn consumer(&self, queues: &[String], delete: bool) -> Result<Box<dyn Consumer>, String> {
        Ok(Box::new(SqsConsumer {
            conn: Conn::open(&self.addr)?,
            host: self.addr.clone(),
            queues: QueueCycle::new(queues),
            delete,
            previous: Vec::new(),
            deletes: VecDeque::new(),
        }))
    }
}

struct SqsProducer {
    conn: Conn,
    host: String,
    urls: Vec<String>,
    next: usize,
    /// Requests per batch sent, in order.
    in_flight: VecDeque<usize>,
}

impl Producer for SqsProducer {
    fn send(&mut self, batch: &[Bytes]) -> Result<(), String> {
        let url = &self.urls[self.next % self.urls.len()];
        self.next += 1;
        let mut requests = 0;
        for chunk in batch.chunks(BATCH) {
            let entries: Vec<String> = chunk
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    format!(
                        "{{\"Id\":\"{i}\",\"MessageBody\":{}}}",
                        Value::String(to_text(p))
                    )
                })
                .collect();
            let body = format!(
                "{{\"QueueUrl\":\"{url}\",\"Entries\":[{}]}}",
                entries.join(",")
            );
            request(&mut self.conn, &self.host, "SendMessageBatch", &body);
            requests += 1;
        }
        self.in_flight.push_back(requests);
        self.conn.flush()
    }

    fn confirm(&mut self) -> Result<(), String> {
        let n = self.in_flight.pop_front().ok_or("nothing in flight")?;
        for _ in 0..n {
            all_done(&ok(&mut self.conn)?, "SendMessageBatch")?;
        }
        Ok(())
    }
}

struct SqsConsumer {
    conn: Conn,
    host: String,
    queues: QueueCycle,
    delete: bool,
    /// Receipt handles the last receive brought, from `queues.last()`.
    previous: Vec<String>,
    /// Deletes sent, not yet confirmed: requests and send time.
    deletes: VecDeque<(usize, Instant)>,
}

impl SqsConsumer {
    fn send_delete(&mut self) {
        if self.previous.is_empty() || !self.delete {
            self.previous.clear();
            return;
        }
        let url = url(self.queues.last());
        let handles = std::mem::take(&mut self.previous);
        let mut requests = 0;
        for chunk in handles.chunks(BATCH) {
            let entries: Vec<String> = chunk
                .iter()
                .enumerate()
                .map(|(i, h)| format!("{{\"Id\":\"{i}\",\"ReceiptHandle\":\"{h}\"}}"))
                .collect();
            let body = format!(
                "{{\"QueueUrl\":\"{url}\",\"Entries\":[{}]}}",
                entries.join(",")
            );
            request(&mut self.conn, &self.host, "DeleteMessageBatch", &body);
            requests += 1;
        }
        self.deletes.push_back((requests, Instant::now()));
    }

    fn confirm_delete(&mut self) -> Result<u64, String> {
        let (n, at) = self.deletes.pop_front().ok_or("no delete in flight")?;
        for _ in 0..n {
            all_done(&ok(&mut self.conn)?, "DeleteMessageBatch")?;
        }
        Ok(at.elapsed().as_micros() as u64)
    }
}

impl Consumer for SqsConsumer {
    fn step(
        &mut self,
        max: u32,
        visibility_ms: u64,
        wait_ms: u64,
        depth: usize,
    ) -> Result<Got, String> {
        self.send_delete();
        let mut deletes_us = Vec::new();
        if depth == 0 {
            self.conn.flush()?;
            while !self.deletes.is_empty() {
                deletes_us.push(self.confirm_delete()?);
            }
        }
        let body = format!(
            "{{\"QueueUrl\":\"{}\",\"MaxNumberOfMessages\":{},\"VisibilityTimeout\":{},\"WaitTimeSeconds\":{}}}",
            url(self.queues.current()),
            max.clamp(1, BATCH as u32),
            visibility_ms.div_ceil(1000).max(1),
            wait_ms.div_ceil(1000).min(20)
        );
        request(&mut self.conn, &self.host, "ReceiveMessage", &body);
        self.conn.flush()?;
        let sent = Instant::now();
        // Answers come in order: the deletes sent before this receive
        // first.
        while !self.deletes.is_empty() {
            deletes_us.push(self.confirm_delete()?);
        }
        let v = ok(&mut self.conn)?;
        let mut payloads = Vec::new();
        if let Some(ms) = v.get("Messages").and_then(Value::as_array) {
            for m in ms {
                let (Some(body), Some(handle)) = (
                    m.get("Body").and_then(Value::as_str),
                    m.get("ReceiptHandle").and_then(Value::as_str),
                ) else {
                    return Err(format!("a message without body or handle: {m}"));
                };
                payloads.push(from_text(body));
                self.previous.push(handle.to_owned());
            }
        }
        self.queues.received(payloads.len());
        Ok(Got::new(payloads, sent.elapsed(), deletes_us))
    }

    fn finish(&mut self) -> Result<Vec<u64>, String> {
        self.send_delete();
        let mut out = Vec::new();
        while !self.deletes.is_empty() {
            out.push(self.confirm_delete()?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_travels_as_text_and_comes_back_whole() {
        let mut p = 0x0102_0304_a0b0_c0ffu64.to_le_bytes().to_vec();
        p.extend_from_slice(b"aaaa");
        let text = to_text(&p);
        assert_eq!(text, "ffc0b0a004030201aaaa");
        assert_eq!(&from_text(&text)[..], &p[..]);
    }
}
