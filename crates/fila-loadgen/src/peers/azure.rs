//! fila's Azure Queue Storage API (path-style REST over HTTP/1.1
//! keep-alive, every request signed with SharedKey by the development
//! account, as the SDKs sign them): Put Message for each message (the API
//! has no batch put), Get Messages of up to 32 (whatever the workload
//! asks: its receives are of the binary protocol's 20) to receive, Delete Message
//! for each message received. Requests on a connection are pipelined as
//! far as a batch goes (a producer's puts, a consumer's deletes).
//!
//! A message's text is the payload as the SQS peer sends it: its first 8
//! bytes (its send time) as 16 hex digits.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;
use fila_azure::auth::{dev_key, sign, DEV_ACCOUNT};
use fila_azure::xml;

use super::sqs::{from_text, to_text};
use super::{http_answer, Conn};
use crate::target::{Consumer, Got, Producer, QueueCycle, Target};

/// The most messages one Get Messages takes.
const GET_MAX: u32 = 32;
/// The service version the requests name.
const VERSION: &str = "2021-12-02";

/// A fila server's Azure listener.
pub struct Azure {
    /// Its address.
    pub addr: String,
    /// Label in reports.
    pub label: String,
}

/// Signs and queues one request to `path` (after the account) with
/// `query` (sorted by name, as the string to sign lists them).
fn request(
    conn: &mut Conn,
    key: &[u8],
    method: &str,
    path: &str,
    query: &[(&str, String)],
    body: &[u8],
) {
    let date = fila_azure::time::rfc1123(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
    );
    let length = if body.is_empty() {
        String::new()
    } else {
        body.len().to_string()
    };
    let content_type = if body.is_empty() {
        ""
    } else {
        "application/xml"
    };
    let mut resource = format!("/{DEV_ACCOUNT}/{DEV_ACCOUNT}{path}");
    for (name, value) in query {
        resource.push_str(&format!("\n{name}:{value}"));
    }
    let text = format!(
        "{method}\n\n\n{length}\n\n{content_type}\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{VERSION}\n{resource}"
    );
    let signature = sign(key, &text);
    let mut target = format!("/{DEV_ACCOUNT}{path}");
    for (i, (name, value)) in query.iter().enumerate() {
        target.push(if i == 0 { '?' } else { '&' });
        target.push_str(name);
        target.push('=');
        for b in value.bytes() {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                target.push(b as char);
            } else {
                target.push_str(&format!("%{b:02X}"));
            }
        }
    }
    let mut head = format!(
        "{method} {target} HTTP/1.1\r\nhost: x\r\nx-ms-date: {date}\r\nx-ms-version: {VERSION}\r\nauthorization: SharedKey {DEV_ACCOUNT}:{signature}\r\ncontent-length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        head.push_str("content-type: application/xml\r\n");
    }
    head.push_str("\r\n");
    conn.put(head.as_bytes());
    conn.put(body);
}

/// Reads one answer that must have status `want`; its body.
fn expect(conn: &mut Conn, want: u16, what: &str) -> Result<Vec<u8>, String> {
    match http_answer(conn)? {
        (status, body) if status == want => Ok(body),
        (status, body) => Err(format!(
            "{what} answered {status}: {}",
            String::from_utf8_lossy(&body)
        )),
    }
}

impl Target for Azure {
    fn name(&self) -> String {
        if self.label.is_empty() {
            "fila (Azure Queue API)".into()
        } else {
            format!("fila (Azure Queue API, {})", self.label)
        }
    }

    fn prepare(&self, queues: &[String]) -> Result<(), String> {
        let key = dev_key();
        let mut c = Conn::open(&self.addr)?;
        for queue in queues {
            request(&mut c, &key, "DELETE", &format!("/{queue}"), &[], b"");
            match http_answer(&mut c)? {
                (204 | 404, _) => {}
                (status, body) => {
                    return Err(format!(
                        "Delete Queue answered {status}: {}",
                        String::from_utf8_lossy(&body)
                    ))
                }
            }
            request(&mut c, &key, "PUT", &format!("/{queue}"), &[], b"");
            expect(&mut c, 201, "Create Queue")?;
        }
        Ok(())
    }

    fn producer(&self, queues: &[String]) -> Result<Box<dyn Producer>, String> {
        Ok(Box::new(AzureProducer {
            conn: Conn::open(&self.addr)?,
            key: dev_key(),
            queues: queues.to_vec(),
            next: 0,
            in_flight: VecDeque::new(),
        }))
    }

    fn consumer(&self, queues: &[String], delete: bool) -> Result<Box<dyn Consumer>, String> {
        Ok(Box::new(AzureConsumer {
            conn: Conn::open(&self.addr)?,
            key: dev_key(),
            queues: QueueCycle::new(queues),
            delete,
            previous: Vec::new(),
            deletes: VecDeque::new(),
        }))
    }
}

struct AzureProducer {
    conn: Conn,
    key: Vec<u8>,
    queues: Vec<String>,
    next: usize,
    /// Puts per batch sent, in order.
    in_flight: VecDeque<usize>,
}

impl Producer for AzureProducer {
    fn send(&mut self, batch: &[Bytes]) -> Result<(), String> {
        let path = format!("/{}/messages", self.queues[self.next % self.queues.len()]);
        self.next += 1;
        for p in batch {
            let mut body = String::from("<QueueMessage><MessageText>");
            xml::escape_into(&to_text(p), &mut body);
            body.push_str("</MessageText></QueueMessage>");
            request(
                &mut self.conn,
                &self.key,
                "POST",
                &path,
                &[],
                body.as_bytes(),
            );
        }
        self.in_flight.push_back(batch.len());
        self.conn.flush()
    }

    fn confirm(&mut self) -> Result<(), String> {
        let n = self.in_flight.pop_front().ok_or("nothing in flight")?;
        for _ in 0..n {
            expect(&mut self.conn, 201, "Put Message")?;
        }
        Ok(())
    }
}

struct AzureConsumer {
    conn: Conn,
    key: Vec<u8>,
    queues: QueueCycle,
    delete: bool,
    /// (message id, pop receipt) of what the last step brought, from
    /// `queues.last()`.
    previous: Vec<(String, String)>,
    /// Deletes sent, not yet confirmed: requests and send time.
    deletes: VecDeque<(usize, Instant)>,
}

impl AzureConsumer {
    fn send_delete(&mut self) {
        if self.previous.is_empty() || !self.delete {
            self.previous.clear();
            return;
        }
        let queue = self.queues.last().to_owned();
        let taken = std::mem::take(&mut self.previous);
        for (id, receipt) in &taken {
            let query = [("popreceipt", receipt.clone())];
            request(
                &mut self.conn,
                &self.key,
                "DELETE",
                &format!("/{queue}/messages/{id}"),
                &query,
                b"",
            );
        }
        self.deletes.push_back((taken.len(), Instant::now()));
    }

    fn confirm_delete(&mut self) -> Result<u64, String> {
        let (n, at) = self.deletes.pop_front().ok_or("no delete in flight")?;
        for _ in 0..n {
            expect(&mut self.conn, 204, "Delete Message")?;
        }
        Ok(at.elapsed().as_micros() as u64)
    }
}

impl Consumer for AzureConsumer {
    fn step(
        &mut self,
        _max: u32,
        visibility_ms: u64,
        _wait_ms: u64,
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
        // Azure has no long poll: a receive answers at once.
        let query = [
            // As many as one Get Messages takes (the workload's 20 is the
            // binary protocol's most).
            ("numofmessages", GET_MAX.to_string()),
            (
                "visibilitytimeout",
                visibility_ms.div_ceil(1000).max(1).to_string(),
            ),
        ];
        let path = format!("/{}/messages", self.queues.current());
        request(&mut self.conn, &self.key, "GET", &path, &query, b"");
        self.conn.flush()?;
        let sent = Instant::now();
        while !self.deletes.is_empty() {
            deletes_us.push(self.confirm_delete()?);
        }
        let body = expect(&mut self.conn, 200, "Get Messages")?;
        let doc = xml::parse(&body).map_err(|e| e.to_string())?;
        let mut payloads = Vec::new();
        for m in doc.all("QueueMessage") {
            let field = |name: &str| m.child(name).map(|e| e.text.clone());
            let (Some(id), Some(receipt), Some(text)) = (
                field("MessageId"),
                field("PopReceipt"),
                field("MessageText"),
            ) else {
                return Err("a message without its id, pop receipt or text".into());
            };
            payloads.push(from_text(&text));
            self.previous.push((id, receipt));
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
