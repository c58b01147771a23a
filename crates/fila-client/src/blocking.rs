//! The blocking client: requests pipelined on one TCP connection at a
//! time. On a cluster it keeps a route per queue — the node a `not_leader`
//! answer named for it — and each call on a queue goes to its route's
//! node, on a connection kept open to each node it talks to (an idle
//! one waits, nothing in flight, while the client talks to another).

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use fila_proto::{split_frame, Encode, FRAME_LEN_LIMIT};

use crate::call::{self, Call, WINDOW};

mod moves;
use crate::tls::{TlsCache, Transport};
use crate::*;

struct Connection {
    stream: Transport,
    input: BytesMut,
    output: BytesMut,
    /// Answers read while waiting for another.
    early: HashMap<u64, Response>,
    /// Requests sent and not yet answered.
    in_flight: HashMap<u64, Opcode>,
}

/// A blocking client on one connection at a time.
pub struct Client {
    options: ClientOptions,
    tls: TlsCache,
    conn: Option<Connection>,
    /// Connections to other nodes, nothing in flight, by address.
    idle: Vec<(String, Connection)>,
    /// Each queue's node, as a `not_leader` answer named it.
    routes: HashMap<String, String>,
    next_id: u64,
}

/// Connections kept open to nodes other than the one talked to.
const IDLE_MAX: usize = 8;
/// Queues whose route is kept (past it, the routes are forgotten and
/// learnt again).
pub(crate) const ROUTES_MAX: usize = 4_096;

impl Client {
    /// Connects (and authenticates when the options carry a token).
    pub fn connect(options: ClientOptions) -> Result<Client> {
        let mut c = Client {
            options,
            tls: TlsCache::default(),
            conn: None,
            idle: Vec::new(),
            routes: HashMap::new(),
            next_id: 1,
        };
        c.ensure_connected()?;
        Ok(c)
    }

    /// A connection, made if there is none: to `addr`, or when it cannot
    /// be reached to the other nodes in turn (the first that answers is
    /// the address from then on).
    fn ensure_connected(&mut self) -> Result<()> {
        if self.conn.is_some() {
            return Ok(());
        }
        let candidates = self.options.candidates();
        let mut first_error = None;
        for addr in candidates.iter() {
            self.options.addr = addr.clone();
            match self.connect_here() {
                Ok(()) => {
                    if *addr != candidates[0] {
                        // The node the routes named is gone: they are
                        // learnt again.
                        self.routes.retain(|_, a| *a != candidates[0]);
                    }
                    return Ok(());
                }
                Err(e @ ClientError::Connect { .. }) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => {
                    self.options.addr = candidates[0].clone();
                    return Err(e);
                }
            }
        }
        self.options.addr = candidates[0].clone();
        Err(first_error.expect("at least one candidate"))
    }

    /// Connects to `options.addr`.
    fn connect_here(&mut self) -> Result<()> {
        let addr = &self.options.addr;
        let addrs: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .map_err(|source| ClientError::Connect {
                addr: addr.clone(),
                source,
            })?
            .collect();
        let tls = self.tls.get(&self.options)?;
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
        for a in addrs {
            match TcpStream::connect_timeout(&a, self.options.connect_timeout) {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    let tls = tls.as_ref().map(|(c, n)| (c, n.clone()));
                    let mut stream = Transport::new(stream, tls)?;
                    self.handshake(&mut stream)?;
                    self.conn = Some(Connection {
                        stream,
                        input: BytesMut::with_capacity(64 << 10),
                        output: BytesMut::new(),
                        early: HashMap::new(),
                        in_flight: HashMap::new(),
                    });
                    if let Some(token) = self.options.token.clone() {
                        self.run(call::auth(&token))?;
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

    /// Completes a TLS handshake within the connect timeout, so that a
    /// refused certificate is reported as such.
    fn handshake(&self, stream: &mut Transport) -> Result<()> {
        let Transport::Tls(t) = stream else {
            return Ok(());
        };
        let _ = t.sock.set_read_timeout(Some(self.options.connect_timeout));
        let _ = t.sock.set_write_timeout(Some(self.options.connect_timeout));
        while t.conn.is_handshaking() {
            t.conn.complete_io(&mut t.sock).map_err(|e| {
                ClientError::Tls(format!("handshake with {}: {e}", self.options.addr))
            })?;
        }
        Ok(())
    }

    fn lose(&mut self, e: io::Error) -> ClientError {
        // Everything in flight is lost with the connection; nothing is
        // resent.
        self.conn = None;
        ClientError::ConnectionLost(e)
    }

    /// Queues a request without waiting (pipelining); returns its id.
    /// Call [`Client::flush`] (or [`Client::wait`], which flushes) to send.
    /// Any [`Encode`] will do: a [`Request`] or a borrowed view such as
    /// [`fila_proto::PayloadsRef`].
    pub fn send<R: Encode + ?Sized>(&mut self, req: &R) -> Result<u64> {
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
        if conn.output.is_empty() {
            return Ok(());
        }
        let _ = conn
            .stream
            .tcp()
            .set_write_timeout(Some(self.options.request_timeout));
        let written = conn
            .stream
            .write_all(&conn.output)
            .and_then(|()| conn.stream.flush());
        conn.output.clear();
        if let Err(e) = written {
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
                    return Err(refused(r));
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
                .tcp()
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

    /// Sends one request and waits for its answer (following `not_leader`
    /// to the leader it names, with [`ClientOptions::follow_leader`]).
    pub fn call(&mut self, req: Request) -> Result<Response> {
        self.answer(&req)
    }

    /// The answer to `req`, `not_leader` followed as [`crate::Hops`] says.
    fn answer<R: Encode + ?Sized>(&mut self, req: &R) -> Result<Response> {
        let mut hops = crate::Hops::default();
        self.route(req);
        loop {
            let id = self.send(req)?;
            let r = self.wait(id, Duration::from_millis(req.long_poll_ms()))?;
            if let Response::Error(e) = &r {
                if self.follow(e.code, &e.message, req.queue()) {
                    if let Some(pause) = hops.next() {
                        std::thread::sleep(pause);
                        continue;
                    }
                }
            }
            return Ok(r);
        }
    }

    fn run<R: Encode, T>(&mut self, c: Call<R, T>) -> Result<T> {
        let r = self.answer(&c.req)?;
        c.read(r)
    }

    /// A `not_leader` answer to a request on `queue` that names the
    /// leader: the queue's route is that node, and the client moves there
    /// (`true`: send again).
    fn follow(&mut self, code: ErrorCode, message: &str, queue: Option<&str>) -> bool {
        if code != ErrorCode::NOT_LEADER || !self.options.follow_leader {
            return false;
        }
        let Some(addr) = crate::leader_in(message) else {
            return false;
        };
        if addr == self.options.addr {
            return false;
        }
        let addr = addr.to_owned();
        if let Some(q) = queue {
            if self.routes.len() >= ROUTES_MAX {
                self.routes.clear();
            }
            self.routes.insert(q.to_owned(), addr.clone());
        }
        self.go_to(addr);
        true
    }

    /// Before a call on `req`'s queue: to the node its route names (not
    /// while requests sent with [`Client::send`] wait on this one).
    fn route<R: Encode + ?Sized>(&mut self, req: &R) {
        if !self.options.follow_leader {
            return;
        }
        let busy = self
            .conn
            .as_ref()
            .is_some_and(|c| !c.in_flight.is_empty() || !c.early.is_empty());
        let Some(addr) = req.queue().and_then(|q| self.routes.get(q)) else {
            return;
        };
        if !busy && *addr != self.options.addr {
            self.go_to(addr.clone());
        }
    }

    /// Talks to `addr` from now on: the connection there kept idle, if
    /// any, else a new one at the next send; the one it leaves is kept
    /// idle when nothing is in flight on it.
    fn go_to(&mut self, addr: String) {
        if addr == self.options.addr {
            return;
        }
        if let Some(c) = self.conn.take() {
            if c.in_flight.is_empty() && c.early.is_empty() && c.output.is_empty() {
                let from = std::mem::take(&mut self.options.addr);
                self.idle.retain(|(a, _)| *a != from);
                if self.idle.len() >= IDLE_MAX {
                    self.idle.remove(0);
                }
                self.idle.push((from, c));
            }
        }
        if let Some(i) = self.idle.iter().position(|(a, _)| *a == addr) {
            self.conn = Some(self.idle.swap_remove(i).1);
        }
        self.options.addr = addr;
    }

    /// The address this client talks to now (another node's after it
    /// followed `not_leader`).
    pub fn addr(&self) -> &str {
        &self.options.addr
    }

    /// Runs a batch helper's requests pipelined, at most [`WINDOW`] in
    /// flight, and joins their entries in order. Requests answered
    /// `not_leader` are sent again, in order, to the leader named, once
    /// every answer of the window is in (each request was refused or done
    /// by itself: none is done twice).
    fn batch<R: Encode, T>(
        &mut self,
        calls: impl Iterator<Item = Call<R, Vec<EntryResult<T>>>>,
    ) -> Result<Vec<EntryResult<T>>> {
        type Batch<R, T> = Call<R, Vec<EntryResult<T>>>;
        let mut done: Vec<Option<Vec<EntryResult<T>>>> = Vec::new();
        let mut waiting: VecDeque<(usize, Batch<R, T>)> = VecDeque::new();
        let mut in_flight: VecDeque<(u64, usize, Batch<R, T>)> = VecDeque::with_capacity(WINDOW);
        let mut calls = calls.enumerate().peekable();
        let mut hops = crate::Hops::default();
        // The leader to move to once every answer of the window is in,
        // after a pause.
        let mut moving: Option<(String, Duration)> = None;
        loop {
            while moving.is_none() && in_flight.len() < WINDOW {
                let next = match waiting.pop_front() {
                    Some(c) => Some(c),
                    None => calls.next(),
                };
                let Some((i, c)) = next else { break };
                if in_flight.is_empty() {
                    self.route(&c.req);
                }
                if done.len() <= i {
                    done.resize_with(i + 1, || None);
                }
                in_flight.push_back((self.send(&c.req)?, i, c));
            }
            let Some((id, i, c)) = in_flight.pop_front() else {
                match moving.take() {
                    Some((addr, pause)) => {
                        // Every answer of the old leader is in: move.
                        std::thread::sleep(pause);
                        self.go_to(addr);
                        continue;
                    }
                    None => break,
                }
            };
            let r = self.wait(id, Duration::ZERO)?;
            if let Response::Error(e) = &r {
                if e.code == ErrorCode::NOT_LEADER && self.options.follow_leader {
                    let addr = crate::leader_in(&e.message).filter(|a| *a != self.options.addr);
                    if let Some(addr) = addr {
                        let hop = match &moving {
                            Some(_) => Some(Duration::ZERO),
                            None => hops.next(),
                        };
                        if let Some(pause) = hop {
                            if moving.is_none() {
                                moving = Some((addr.to_owned(), pause));
                                if let Some(q) = c.req.queue() {
                                    if self.routes.len() >= ROUTES_MAX {
                                        self.routes.clear();
                                    }
                                    self.routes.insert(q.to_owned(), addr.to_owned());
                                }
                            }
                            waiting.push_back((i, c));
                            continue;
                        }
                    }
                }
            }
            done[i] = Some(c.read(r)?);
        }
        Ok(done.into_iter().flatten().flatten().collect())
    }

    /// Hello: the server's name and frame limit.
    pub fn hello(&mut self) -> Result<(String, u32)> {
        self.run(call::hello())
    }

    /// Server-wide counters.
    pub fn server_stats(&mut self) -> Result<Vec<(String, u64)>> {
        self.run(call::server_stats())
    }

    /// A cluster node's view of its cluster (docs/cluster.md); a single
    /// node answers `invalid_argument`. Asked of the node connected to:
    /// it does not follow `not_leader`.
    pub fn cluster_status(&mut self) -> Result<ClusterStatus> {
        let id = self.send(&Request::ClusterStatus)?;
        let r = self.wait(id, Duration::ZERO)?;
        call::cluster_status().read(r)
    }

    /// Changes a cluster's members or moves its leadership
    /// (docs/cluster.md): sent to the leader (a `not_leader` answer is
    /// followed), answered once the change is committed — a transfer once
    /// another node leads. Needs manage on every queue; a single node
    /// answers `invalid_argument`, as does a change that cannot be made.
    pub fn change_cluster(&mut self, change: ClusterChange) -> Result<()> {
        self.run(call::change_cluster(change))
    }

    /// Asks the server to read its tokens and TLS files again (needs
    /// manage on every queue); a file that fails keeps what is in use and
    /// is answered as an error.
    pub fn reload(&mut self) -> Result<Reloaded> {
        self.run(call::reload())
    }

    /// Creates a queue; `false` when it existed with the same settings.
    pub fn create_queue(&mut self, name: &str, settings: SettingsPatch) -> Result<bool> {
        self.run(call::create_queue(name, settings))
    }

    /// A queue's settings.
    pub fn get_queue(&mut self, name: &str) -> Result<Settings> {
        self.run(call::get_queue(name))
    }

    /// Changes settings; answers those in force.
    pub fn update_queue(&mut self, name: &str, settings: SettingsPatch) -> Result<Settings> {
        self.run(call::update_queue(name, settings))
    }

    /// Every queue name with this prefix, sorted: follows the server's
    /// pages to the end.
    pub fn list_queues(&mut self, prefix: &str) -> Result<Vec<String>> {
        let mut all = Vec::new();
        let mut after = String::new();
        loop {
            let (names, next) = self.list_queues_page(prefix, &after, 0)?;
            all.extend(names);
            match call::next_page(&after, next) {
                Some(next) => after = next,
                None => return Ok(all),
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
        self.run(call::list_queues_page(prefix, after, limit))
    }

    /// Deletes a queue.
    pub fn delete_queue(&mut self, name: &str) -> Result<()> {
        self.run(call::delete_queue(name, false))
    }

    /// Deletes a queue if it exists; a missing queue is no error.
    pub fn delete_queue_if_exists(&mut self, name: &str) -> Result<()> {
        self.run(call::delete_queue(name, true))
    }

    /// Purges a queue (or its DLQ).
    pub fn purge(&mut self, name: &str, dlq: bool) -> Result<()> {
        self.run(call::purge(name, dlq))
    }

    /// Pauses a queue's receiving, sending or both (`halves`; needs
    /// manage): its receives find nothing — those that wait, wait — and its
    /// puts are refused `queue_paused`, until [`Client::resume_queue`].
    /// Answers what is paused now.
    pub fn pause_queue(&mut self, name: &str, halves: Halves) -> Result<Halves> {
        self.run(call::pause(name, halves, true))
    }

    /// Resumes what a pause paused (`halves`); answers what is paused now.
    pub fn resume_queue(&mut self, name: &str, halves: Halves) -> Result<Halves> {
        self.run(call::pause(name, halves, false))
    }

    /// A queue's stats.
    pub fn stats(&mut self, name: &str) -> Result<Stats> {
        self.run(call::stats(name))
    }

    /// Puts messages; each entry answers alone (the same as
    /// [`Client::put_many`]).
    pub fn put(
        &mut self,
        queue: &str,
        messages: impl AsRef<[PutEntry]>,
    ) -> Result<Vec<EntryResult<PutAck>>> {
        self.put_many(queue, messages)
    }

    /// Puts one message with only a payload.
    pub fn put_one(&mut self, queue: &str, payload: impl Into<Bytes>) -> Result<PutAck> {
        self.put_payloads(queue, &[payload.into()])?
            .pop()
            .expect("one answer per entry")
    }

    /// Puts one payload with a deduplication id: sent again with the same
    /// id within the queue's dedup window (after a timeout, a lost
    /// connection), it stores nothing and answers the first put's id and
    /// sequence number — what to resend with when an answer was lost.
    pub fn put_idempotent(
        &mut self,
        queue: &str,
        payload: impl Into<Bytes>,
        dedup_id: impl Into<String>,
    ) -> Result<PutAck> {
        let entry = PutEntry {
            payload: payload.into(),
            dedup_id: Some(dedup_id.into()),
            ..PutEntry::default()
        };
        self.put_many(queue, vec![entry])?
            .pop()
            .expect("one answer per entry")
    }

    /// Puts payloads into message group `group`, in order: the queue
    /// delivers a group's messages in sequence order, one leased at a time.
    pub fn put_grouped(
        &mut self,
        queue: &str,
        group: &str,
        payloads: &[Bytes],
    ) -> Result<Vec<EntryResult<PutAck>>> {
        self.put_many(queue, crate::grouped(group, payloads))
    }

    /// Puts any number of messages, 20 per request, pipelined.
    pub fn put_many(
        &mut self,
        queue: &str,
        messages: impl AsRef<[PutEntry]>,
    ) -> Result<Vec<EntryResult<PutAck>>> {
        self.batch(call::puts(queue, messages.as_ref()))
    }

    /// Puts any number of bare payloads (no attributes, visible at once),
    /// 20 per request, pipelined; encoded straight from the slice.
    pub fn put_payloads(
        &mut self,
        queue: &str,
        payloads: &[Bytes],
    ) -> Result<Vec<EntryResult<PutAck>>> {
        self.batch(call::payload_puts(queue, payloads))
    }

    /// Cancels a scheduled message.
    pub fn cancel_scheduled(&mut self, queue: &str, seq: u64) -> Result<()> {
        self.run(call::cancel_scheduled(queue, seq))
    }

    /// Receives with every option, among them the fields the messages
    /// carry.
    pub fn receive_with(&mut self, r: ReceiveRef<'_>) -> Result<Vec<Message>> {
        self.run(call::receive(r))
    }

    /// Receives up to `max` messages from a queue, waiting up to `wait_ms`
    /// (the queue's default when `None`).
    pub fn receive(&mut self, queue: &str, max: u8, wait_ms: Option<u64>) -> Result<Vec<Message>> {
        self.receive_with(call::simple_receive(queue, max, wait_ms))
    }

    /// Changes leases' next-visible times (any number, 20 per request,
    /// pipelined).
    pub fn update_visibility(
        &mut self,
        queue: &QueueRef,
        changes: &[(Receipt, u64)],
    ) -> Result<Vec<EntryResult<u64>>> {
        self.batch(call::visibilities(&queue.name, queue.dlq, changes))
    }

    /// Updates a leased message: its payload replaced when one is given,
    /// its lease renewed to end `timeout_ms` from now under a new receipt
    /// (the old one stale); 0 releases it. Its delivery count is kept.
    pub fn update_message(
        &mut self,
        queue: &QueueRef,
        receipt: Receipt,
        timeout_ms: u64,
        payload: Option<Bytes>,
    ) -> Result<MessageUpdate> {
        self.run(call::update_message(queue, receipt, timeout_ms, payload))
    }

    /// Deletes by receipt from a queue (any number, 20 per request,
    /// pipelined).
    pub fn delete(&mut self, queue: &str, receipts: &[Receipt]) -> Result<Vec<EntryResult<()>>> {
        self.batch(call::deletes(queue, false, receipts))
    }

    /// Deletes by receipt from a queue or its DLQ.
    pub fn delete_from(
        &mut self,
        queue: &QueueRef,
        receipts: &[Receipt],
    ) -> Result<Vec<EntryResult<()>>> {
        self.batch(call::deletes(&queue.name, queue.dlq, receipts))
    }

    /// Ends leases as failed (a "nack"; any number, 20 per request,
    /// pipelined): each message is visible again after its queue's retry
    /// policy's delay, at once without one. Answers each message's next
    /// visible time (ms).
    pub fn release(
        &mut self,
        queue: &QueueRef,
        receipts: &[Receipt],
    ) -> Result<Vec<EntryResult<u64>>> {
        self.batch(call::releases(&queue.name, queue.dlq, receipts, ("", "")))
    }

    /// [`Self::release`] with the consumer's reason (≤ 256 bytes) and
    /// description (≤ 4 KiB), kept in each message's attempt history.
    pub fn release_with(
        &mut self,
        queue: &QueueRef,
        receipts: &[Receipt],
        reason: &str,
        description: &str,
    ) -> Result<Vec<EntryResult<u64>>> {
        self.batch(call::releases(
            &queue.name,
            queue.dlq,
            receipts,
            (reason, description),
        ))
    }

    /// Defers a leased message.
    pub fn defer(&mut self, queue: &str, receipt: Receipt) -> Result<()> {
        self.run(call::defer(queue, receipt))
    }

    /// Takes deferred messages by sequence number (any number, 20 per
    /// request, pipelined).
    pub fn receive_deferred(
        &mut self,
        queue: &str,
        seqs: &[u64],
        visibility_ms: Option<u64>,
    ) -> Result<Vec<EntryResult<Message>>> {
        self.batch(call::deferred(queue, seqs, visibility_ms))
    }

    /// Dead-letters a leased message.
    pub fn dead_letter(
        &mut self,
        queue: &str,
        receipt: Receipt,
        reason: &str,
        description: &str,
    ) -> Result<()> {
        self.run(call::dead_letter(queue, receipt, reason, description))
    }

    /// Browses from a sequence number.
    pub fn peek(&mut self, queue: QueueRef, from_seq: u64, max: u8) -> Result<Vec<Message>> {
        self.run(call::peek(queue, from_seq, max, Fields::ALL))
    }

    /// [`Self::peek`] whose messages carry the groups of `fields`
    /// (`Fields::ALL.with(Fields::ATTEMPTS)`: every field and each
    /// message's failed attempts).
    pub fn peek_with(
        &mut self,
        queue: QueueRef,
        from_seq: u64,
        max: u8,
        fields: Fields,
    ) -> Result<Vec<Message>> {
        self.run(call::peek(queue, from_seq, max, fields))
    }

    /// Deletes message `seq` of the queue (or its DLQ) whatever its state,
    /// as an operator does: a lease on it ends. Needs manage.
    pub fn delete_seq(&mut self, queue: &str, dlq: bool, seq: u64) -> Result<()> {
        self.run(call::delete_seq(queue, dlq, seq))
    }

    /// Dead-letters message `seq` of the queue whatever its state, with an
    /// operator's reason and description. Needs manage.
    pub fn dead_letter_seq(
        &mut self,
        queue: &str,
        seq: u64,
        reason: &str,
        description: &str,
    ) -> Result<()> {
        self.run(call::dead_letter_seq(queue, seq, reason, description))
    }

    /// A page of the queue's channels with messages ready (the default
    /// channel first when `after` is empty), at most `limit` (1–100), and
    /// the `after` of the next page. Needs manage.
    pub fn channels(
        &mut self,
        queue: &str,
        after: &str,
        limit: u16,
    ) -> Result<(Vec<ChannelInfo>, Option<String>)> {
        self.run(call::channels(queue, after, limit))
    }
}
