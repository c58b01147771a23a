//! # fila-client: a blocking client
//!
//! fila-client owns the client side of the protocol: one TCP connection,
//! requests pipelined on it (send many, then collect their answers by id),
//! typed helpers for every operation, and errors that mirror the protocol's
//! codes.
//!
//! Reconnection never repeats a request: when the connection breaks, every
//! request sent and not yet answered fails with
//! [`ClientError::ConnectionLost`], and the next call opens a new connection
//! (presenting the token again).
//!
//! ```no_run
//! use fila_client::{Client, ClientOptions};
//! use fila_proto::{PutEntry, SettingsPatch};
//!
//! let mut c = Client::connect(ClientOptions::new("127.0.0.1:7700"))?;
//! c.create_queue("jobs", SettingsPatch::default())?;
//! c.put_one("jobs", "hello")?;
//! for m in c.receive("jobs", 10, Some(0))? {
//!     c.delete("jobs", &[m.receipt.unwrap()])?;
//! }
//! # Ok::<(), fila_client::ClientError>(())
//! ```
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
pub use fila_proto::{
    limits, Availability, ErrorCode, Message, Opcode, PutAck, PutEntry, QueueRef, Receipt, Receive,
    Request, Response, Settings, SettingsPatch, Stats, WireError, RECEIPT_LEN,
};
use fila_proto::{split_frame, ProtoError, FRAME_LEN_LIMIT};

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error.
    #[error("{code}: {message}")]
    Server {
        /// The protocol's code.
        code: ErrorCode,
        /// The server's line.
        message: String,
    },
    /// The connection could not be opened.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// Where.
        addr: String,
        /// Why.
        source: io::Error,
    },
    /// The connection broke with this request unanswered; it was not sent
    /// again.
    #[error("connection lost before the answer: {0}")]
    ConnectionLost(io::Error),
    /// No answer within the request timeout; the connection is dropped.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The server sent bytes that are not a valid answer.
    #[error("protocol error: {0}")]
    Protocol(#[from] ProtoError),
    /// An answer of the wrong shape for the request.
    #[error("unexpected answer to {op:?}: {answer}")]
    Unexpected {
        /// The request's opcode.
        op: Opcode,
        /// What came instead.
        answer: String,
    },
}

impl ClientError {
    /// The protocol error code, for a server error.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Server { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// How to connect.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// `host:port`.
    pub addr: String,
    /// A token to present after connecting.
    pub token: Option<String>,
    /// Connection timeout.
    pub connect_timeout: Duration,
    /// How long a call waits for its answer beyond its own long-poll wait.
    pub request_timeout: Duration,
}

impl ClientOptions {
    /// Defaults: no token, 5 s to connect, 30 s per answer.
    pub fn new(addr: impl Into<String>) -> ClientOptions {
        ClientOptions {
            addr: addr.into(),
            token: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
        }
    }

    /// With a token.
    pub fn token(mut self, token: impl Into<String>) -> ClientOptions {
        self.token = Some(token.into());
        self
    }
}

struct Connection {
    stream: TcpStream,
    input: BytesMut,
    output: BytesMut,
    /// Answers read while waiting for another.
    early: HashMap<u64, Response>,
    /// Requests sent and not yet answered: id → (opcode, sent at).
    in_flight: HashMap<u64, Opcode>,
}

/// A blocking client on one connection.
pub struct Client {
    options: ClientOptions,
    conn: Option<Connection>,
    next_id: u64,
}

type Result<T> = std::result::Result<T, ClientError>;

fn expect<T>(
    op: Opcode,
    r: Response,
    f: impl FnOnce(Response) -> std::result::Result<T, Response>,
) -> Result<T> {
    match r {
        Response::Error(e) => Err(ClientError::Server {
            code: e.code,
            message: e.message,
        }),
        other => f(other).map_err(|r| ClientError::Unexpected {
            op,
            answer: format!("{r:?}"),
        }),
    }
}

/// One entry of a batch answer, with the server's error as a
/// [`ClientError`].
pub type EntryResult<T> = Result<T>;

fn entries<T>(v: Vec<fila_proto::Entry<T>>) -> Vec<EntryResult<T>> {
    v.into_iter()
        .map(|e| {
            e.map_err(|e| ClientError::Server {
                code: e.code,
                message: e.message,
            })
        })
        .collect()
}

impl Client {
    /// Connects (and authenticates when the options carry a token).
    pub fn connect(options: ClientOptions) -> Result<Client> {
        let mut c = Client {
            options,
            conn: None,
            next_id: 1,
        };
        c.ensure_connected()?;
        Ok(c)
    }

    fn ensure_connected(&mut self) -> Result<()> {
        if self.conn.is_some() {
            return Ok(());
        }
        let addr = &self.options.addr;
        let addrs: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .map_err(|source| ClientError::Connect {
                addr: addr.clone(),
                source,
            })?
            .collect();
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
        for a in addrs {
            match TcpStream::connect_timeout(&a, self.options.connect_timeout) {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    self.conn = Some(Connection {
                        stream,
                        input: BytesMut::with_capacity(64 << 10),
                        output: BytesMut::new(),
                        early: HashMap::new(),
                        in_flight: HashMap::new(),
                    });
                    if let Some(token) = self.options.token.clone() {
                        let r = self.call(Request::Auth { token })?;
                        expect(Opcode::Auth, r, |r| match r {
                            Response::Ok => Ok(()),
                            other => Err(other),
                        })?;
                    }
                    return Ok(());
                }
                Err(e) => last = e,
            }
        }
        Err(ClientError::Connect {
            addr: addr.clone(),
            source: last,
        })
    }

    fn lose(&mut self, e: io::Error) -> ClientError {
        // Everything in flight is lost with the connection; nothing is
        // resent.
        self.conn = None;
        ClientError::ConnectionLost(e)
    }

    /// Queues a request without waiting (pipelining); returns its id.
    /// Call [`Client::flush`] (or [`Client::wait`], which flushes) to send.
    pub fn send(&mut self, req: &Request) -> Result<u64> {
        self.ensure_connected()?;
        let id = self.next_id;
        self.next_id += 1;
        let conn = self.conn.as_mut().expect("connected");
        req.encode(id, &mut conn.output);
        conn.in_flight.insert(id, req.opcode());
        Ok(id)
    }

    /// Writes every queued request.
    pub fn flush(&mut self) -> Result<()> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(());
        };
        let _ = conn
            .stream
            .set_write_timeout(Some(self.options.request_timeout));
        let out = std::mem::take(&mut conn.output);
        if let Err(e) = conn.stream.write_all(&out) {
            return Err(self.lose(e));
        }
        Ok(())
    }

    /// Waits for the answer to request `id`, up to `extra` beyond the
    /// request timeout (for long polls).
    pub fn wait(&mut self, id: u64, extra: Duration) -> Result<Response> {
        self.flush()?;
        let deadline = Instant::now() + self.options.request_timeout + extra;
        loop {
            let conn = self.conn.as_mut().ok_or_else(|| {
                ClientError::ConnectionLost(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "not connected",
                ))
            })?;
            if let Some(r) = conn.early.remove(&id) {
                return Ok(r);
            }
            if !conn.in_flight.contains_key(&id) {
                return Err(ClientError::ConnectionLost(io::Error::new(
                    io::ErrorKind::NotFound,
                    "no such request in flight",
                )));
            }
            while let Some((header, body)) = split_frame(&mut conn.input, FRAME_LEN_LIMIT)? {
                let r = Response::decode(&header, body)?;
                conn.in_flight.remove(&header.request_id);
                if header.request_id == 0 {
                    // The server could not read the frame's id: it refused
                    // the stream and is closing it.
                    self.conn = None;
                    return match r {
                        Response::Error(e) => Err(ClientError::Server {
                            code: e.code,
                            message: e.message,
                        }),
                        other => Err(ClientError::Unexpected {
                            op: Opcode::Hello,
                            answer: format!("{other:?}"),
                        }),
                    };
                }
                if header.request_id == id {
                    return Ok(r);
                }
                conn.early.insert(header.request_id, r);
            }
            let now = Instant::now();
            if now >= deadline {
                let t = self.options.request_timeout + extra;
                self.conn = None;
                return Err(ClientError::Timeout(t));
            }
            let _ = conn
                .stream
                .set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))));
            let mut chunk = [0u8; 64 << 10];
            match conn.stream.read(&mut chunk) {
                Ok(0) => {
                    return Err(self.lose(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "server closed",
                    )))
                }
                Ok(n) => conn.input.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.lose(e)),
            }
        }
    }

    /// Sends one request and waits for its answer.
    pub fn call(&mut self, req: Request) -> Result<Response> {
        let extra = match &req {
            Request::Receive(r) => {
                Duration::from_millis(r.wait_ms.unwrap_or(fila_proto::limits::WAIT_MS_MAX))
            }
            _ => Duration::ZERO,
        };
        let id = self.send(&req)?;
        self.wait(id, extra)
    }

    fn ok(&mut self, req: Request) -> Result<()> {
        let op = req.opcode();
        let r = self.call(req)?;
        expect(op, r, |r| match r {
            Response::Ok => Ok(()),
            other => Err(other),
        })
    }

    /// Hello: the server's name and frame limit.
    pub fn hello(&mut self) -> Result<(String, u32)> {
        let r = self.call(Request::Hello {
            client: format!("fila-client/{}", env!("CARGO_PKG_VERSION")),
        })?;
        expect(Opcode::Hello, r, |r| match r {
            Response::Hello {
                server,
                max_frame_len,
                ..
            } => Ok((server, max_frame_len)),
            other => Err(other),
        })
    }

    /// Server-wide counters.
    pub fn server_stats(&mut self) -> Result<Vec<(String, u64)>> {
        let r = self.call(Request::ServerStats)?;
        expect(Opcode::ServerStats, r, |r| match r {
            Response::ServerStats(v) => Ok(v),
            other => Err(other),
        })
    }

    /// Creates a queue; `false` when it existed with the same settings.
    pub fn create_queue(&mut self, name: &str, settings: SettingsPatch) -> Result<bool> {
        let r = self.call(Request::CreateQueue {
            name: name.into(),
            settings,
        })?;
        expect(Opcode::CreateQueue, r, |r| match r {
            Response::Created(c) => Ok(c),
            other => Err(other),
        })
    }

    /// A queue's settings.
    pub fn get_queue(&mut self, name: &str) -> Result<Settings> {
        let r = self.call(Request::GetQueue { name: name.into() })?;
        expect(Opcode::GetQueue, r, |r| match r {
            Response::Queue(s) => Ok(s),
            other => Err(other),
        })
    }

    /// Changes settings; answers those in force.
    pub fn update_queue(&mut self, name: &str, settings: SettingsPatch) -> Result<Settings> {
        let r = self.call(Request::UpdateQueue {
            name: name.into(),
            settings,
        })?;
        expect(Opcode::UpdateQueue, r, |r| match r {
            Response::Queue(s) => Ok(s),
            other => Err(other),
        })
    }

    /// Every queue name with this prefix, sorted: follows the server's
    /// pages to the end.
    pub fn list_queues(&mut self, prefix: &str) -> Result<Vec<String>> {
        let mut all = Vec::new();
        let mut after = String::new();
        loop {
            let (names, next) = self.list_queues_page(prefix, &after, 0)?;
            all.extend(names);
            match next {
                // A cursor that does not move on would loop forever.
                Some(next) if next > after => after = next,
                _ => return Ok(all),
            }
        }
    }

    /// One page of queue names: up to `limit` (0: the server's page size,
    /// 1 000) after `after` ("" from the start), and the cursor of the next
    /// page when more remain.
    pub fn list_queues_page(
        &mut self,
        prefix: &str,
        after: &str,
        limit: u16,
    ) -> Result<(Vec<String>, Option<String>)> {
        let r = self.call(Request::ListQueues {
            prefix: prefix.into(),
            after: after.into(),
            limit,
        })?;
        expect(Opcode::ListQueues, r, |r| match r {
            Response::Queues { names, next } => Ok((names, next)),
            other => Err(other),
        })
    }

    /// Deletes a queue.
    pub fn delete_queue(&mut self, name: &str) -> Result<()> {
        self.ok(Request::DeleteQueue {
            name: name.into(),
            if_exists: false,
        })
    }

    /// Deletes a queue if it exists; a missing queue is no error.
    pub fn delete_queue_if_exists(&mut self, name: &str) -> Result<()> {
        self.ok(Request::DeleteQueue {
            name: name.into(),
            if_exists: true,
        })
    }

    /// Purges a queue (or its DLQ).
    pub fn purge(&mut self, name: &str, dlq: bool) -> Result<()> {
        self.ok(Request::Purge {
            queue: QueueRef {
                name: name.into(),
                dlq,
            },
        })
    }

    /// A queue's stats.
    pub fn stats(&mut self, name: &str) -> Result<Stats> {
        let r = self.call(Request::QueueStats { name: name.into() })?;
        expect(Opcode::QueueStats, r, |r| match r {
            Response::Stats(s) => Ok(s),
            other => Err(other),
        })
    }

    /// Puts 1–20 messages; each entry answers alone.
    pub fn put(
        &mut self,
        queue: &str,
        messages: Vec<PutEntry>,
    ) -> Result<Vec<EntryResult<PutAck>>> {
        let r = self.call(Request::Put {
            queue: queue.into(),
            messages,
        })?;
        expect(Opcode::Put, r, |r| match r {
            Response::Put(v) => Ok(entries(v)),
            other => Err(other),
        })
    }

    /// Puts one message with only a payload.
    pub fn put_one(&mut self, queue: &str, payload: impl Into<Bytes>) -> Result<PutAck> {
        let entry = PutEntry {
            payload: payload.into(),
            ..PutEntry::default()
        };
        self.put(queue, vec![entry])?
            .pop()
            .expect("one answer per entry")
    }

    /// Puts any number of messages, 20 per request, pipelined.
    pub fn put_many(
        &mut self,
        queue: &str,
        messages: Vec<PutEntry>,
    ) -> Result<Vec<EntryResult<PutAck>>> {
        let mut ids = Vec::new();
        let mut rest = messages;
        while !rest.is_empty() {
            let tail = rest.split_off(rest.len().min(fila_proto::limits::BATCH_LEN_MAX));
            let batch = std::mem::replace(&mut rest, tail);
            ids.push(self.send(&Request::Put {
                queue: queue.into(),
                messages: batch,
            })?);
        }
        let mut out = Vec::new();
        for id in ids {
            let r = self.wait(id, Duration::ZERO)?;
            out.extend(expect(Opcode::Put, r, |r| match r {
                Response::Put(v) => Ok(entries(v)),
                other => Err(other),
            })?);
        }
        Ok(out)
    }

    /// Cancels a scheduled message.
    pub fn cancel_scheduled(&mut self, queue: &str, seq: u64) -> Result<()> {
        self.ok(Request::CancelScheduled {
            queue: queue.into(),
            seq,
        })
    }

    /// Receives with full options.
    pub fn receive_with(&mut self, r: Receive) -> Result<Vec<Message>> {
        let resp = self.call(Request::Receive(r))?;
        expect(Opcode::Receive, resp, |r| match r {
            Response::Messages(v) => Ok(v),
            other => Err(other),
        })
    }

    /// Receives up to `max` messages from a queue, waiting up to `wait_ms`
    /// (the queue's default when `None`).
    pub fn receive(&mut self, queue: &str, max: u8, wait_ms: Option<u64>) -> Result<Vec<Message>> {
        self.receive_with(Receive {
            queue: QueueRef {
                name: queue.into(),
                dlq: false,
            },
            max_messages: max,
            visibility_ms: None,
            wait_ms,
            channel: None,
        })
    }

    /// Changes leases' next-visible times (any number, 20 per request).
    pub fn update_visibility(
        &mut self,
        queue: QueueRef,
        changes: &[(Receipt, u64)],
    ) -> Result<Vec<EntryResult<u64>>> {
        let mut out = Vec::new();
        for chunk in changes.chunks(fila_proto::limits::BATCH_LEN_MAX) {
            let r = self.call(Request::UpdateVisibility {
                queue: queue.clone(),
                entries: chunk.to_vec(),
            })?;
            out.extend(expect(Opcode::UpdateVisibility, r, |r| match r {
                Response::Visibility(v) => Ok(entries(v)),
                other => Err(other),
            })?);
        }
        Ok(out)
    }

    /// Deletes by receipt from a queue (any number, 20 per request).
    pub fn delete(&mut self, queue: &str, receipts: &[Receipt]) -> Result<Vec<EntryResult<()>>> {
        self.delete_from(
            QueueRef {
                name: queue.into(),
                dlq: false,
            },
            receipts,
        )
    }

    /// Deletes by receipt from a queue or its DLQ.
    pub fn delete_from(
        &mut self,
        queue: QueueRef,
        receipts: &[Receipt],
    ) -> Result<Vec<EntryResult<()>>> {
        let mut out = Vec::new();
        for chunk in receipts.chunks(fila_proto::limits::BATCH_LEN_MAX) {
            let r = self.call(Request::Delete {
                queue: queue.clone(),
                receipts: chunk.to_vec(),
            })?;
            out.extend(expect(Opcode::Delete, r, |r| match r {
                Response::Deleted(v) => Ok(entries(v)),
                other => Err(other),
            })?);
        }
        Ok(out)
    }

    /// Defers a leased message.
    pub fn defer(&mut self, queue: &str, receipt: Receipt) -> Result<()> {
        self.ok(Request::Defer {
            queue: queue.into(),
            receipt,
        })
    }

    /// Takes deferred messages by sequence number (any number, 20 per
    /// request).
    pub fn receive_deferred(
        &mut self,
        queue: &str,
        seqs: &[u64],
        visibility_ms: Option<u64>,
    ) -> Result<Vec<EntryResult<Message>>> {
        let mut out = Vec::new();
        for chunk in seqs.chunks(fila_proto::limits::BATCH_LEN_MAX) {
            let r = self.call(Request::ReceiveDeferred {
                queue: queue.into(),
                seqs: chunk.to_vec(),
                visibility_ms,
            })?;
            out.extend(expect(Opcode::ReceiveDeferred, r, |r| match r {
                Response::Deferred(v) => Ok(entries(v)),
                other => Err(other),
            })?);
        }
        Ok(out)
    }

    /// Dead-letters a leased message.
    pub fn dead_letter(
        &mut self,
        queue: &str,
        receipt: Receipt,
        reason: &str,
        description: &str,
    ) -> Result<()> {
        self.ok(Request::DeadLetter {
            queue: queue.into(),
            receipt,
            reason: reason.into(),
            description: description.into(),
        })
    }

    /// Browses from a sequence number.
    pub fn peek(&mut self, queue: QueueRef, from_seq: u64, max: u8) -> Result<Vec<Message>> {
        let r = self.call(Request::Peek {
            queue,
            from_seq,
            max_messages: max,
        })?;
        expect(Opcode::Peek, r, |r| match r {
            Response::Messages(v) => Ok(v),
            other => Err(other),
        })
    }

    /// Moves dead letters back: (moved now, scheduled at the rate).
    pub fn redrive(
        &mut self,
        queue: &str,
        max: Option<u64>,
        rate_per_second: Option<u32>,
    ) -> Result<(u64, u64)> {
        let r = self.call(Request::Redrive {
            queue: queue.into(),
            max_messages: max,
            rate_per_second,
        })?;
        expect(Opcode::Redrive, r, |r| match r {
            Response::Redrive { moved, scheduled } => Ok((moved, scheduled)),
            other => Err(other),
        })
    }
}
