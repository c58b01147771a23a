//! The async client, on tokio: one connection shared by every clone, a
//! writer task that sends whatever callers encoded since its last write
//! (one write for many requests), and a reader task that hands each answer
//! to the call waiting for its id, in whatever order they come. On a
//! cluster it keeps a route per queue — the node a `not_leader` answer
//! named for it — and a call on a queue routed to another node than the
//! one talked to goes on a connection of its own to that node (at most
//! eight such).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use fila_proto::Encode;
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::call::{self, Call, WINDOW};
use crate::*;

mod conn;
use conn::{read_loop, register, write_loop, Conn, Sent, Shared, State};

struct Inner {
    options: ClientOptions,
    /// Where it talks now: `options.addr`, or the leader a `not_leader`
    /// named.
    addr: Mutex<String>,
    tls: crate::tls::TlsCache,
    /// The connection in use (checked without waiting).
    current: Mutex<Option<Arc<Conn>>>,
    /// Connections left for another node, kept until the answers they
    /// wait for are in.
    retired: Mutex<Vec<Arc<Conn>>>,
    /// Held while a new connection is opened, so only one is.
    connecting: tokio::sync::Mutex<()>,
    /// Each queue's node, as a `not_leader` answer named it.
    routes: Mutex<HashMap<String, String>>,
    /// Connections to the nodes routes name other than the one talked to.
    others: Mutex<HashMap<String, Arc<Conn>>>,
}

/// Connections kept to nodes other than the one talked to.
const OTHERS_MAX: usize = 8;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An async client. Clones share one connection, and every call on any
/// clone is pipelined on it; answers reach their callers by request id.
///
/// ```no_run
/// # async fn demo() -> Result<(), fila_client::ClientError> {
/// use fila_client::{AllOk, AsyncClient, ClientOptions, SettingsPatch};
///
/// let c = AsyncClient::connect(ClientOptions::new("127.0.0.1:7700")).await?;
/// c.create_queue("jobs", SettingsPatch::default()).await?;
/// c.put_payloads("jobs", &["a".into(), "b".into()]).await?.all_ok()?;
/// let ms = c.receive("jobs", 20, Some(1_000)).await?;
/// let receipts: Vec<_> = ms.iter().filter_map(|m| m.receipt).collect();
/// c.delete("jobs", &receipts).await?.all_ok()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AsyncClient {
    inner: Arc<Inner>,
}

impl AsyncClient {
    /// Connects (and authenticates when the options carry a token). Needs
    /// a tokio runtime with I/O and time enabled.
    pub async fn connect(options: ClientOptions) -> Result<AsyncClient> {
        let c = AsyncClient {
            inner: Arc::new(Inner {
                addr: Mutex::new(options.addr.clone()),
                options,
                tls: crate::tls::TlsCache::default(),
                current: Mutex::new(None),
                retired: Mutex::new(Vec::new()),
                connecting: tokio::sync::Mutex::new(()),
                routes: Mutex::new(HashMap::new()),
                others: Mutex::new(HashMap::new()),
            }),
        };
        c.connection().await?;
        Ok(c)
    }

    fn current(&self) -> Option<Arc<Shared>> {
        let cur = self.inner.current.lock().unwrap_or_else(|p| p.into_inner());
        cur.as_ref()
            .filter(|c| c.shared.lost().is_none())
            .map(|c| c.shared.clone())
    }

    /// The live connection, or a new one (never resending what the old one
    /// lost).
    async fn connection(&self) -> Result<Arc<Shared>> {
        if let Some(s) = self.current() {
            return Ok(s);
        }
        let _one = self.inner.connecting.lock().await;
        if let Some(s) = self.current() {
            return Ok(s);
        }
        let conn = Arc::new(self.open().await?);
        let shared = conn.shared.clone();
        *self.inner.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(conn);
        Ok(shared)
    }

    /// The address it talks to now (another node's after it followed
    /// `not_leader`).
    pub fn addr(&self) -> String {
        self.inner
            .addr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A `not_leader` answer on `used` to a request on `queue` that names
    /// the leader: the queue's route is that node, and when `used` is the
    /// connection talked to the client moves there (`true`: send again).
    /// Answers still due on the old connection come in before it closes.
    fn follow(
        &self,
        used: &Arc<Shared>,
        code: ErrorCode,
        message: &str,
        queue: Option<&str>,
    ) -> bool {
        if code != ErrorCode::NOT_LEADER || !self.inner.options.follow_leader {
            return false;
        }
        let Some(leader) = crate::leader_in(message) else {
            return false;
        };
        if let Some(q) = queue {
            let mut routes = lock(&self.inner.routes);
            if routes.len() >= crate::blocking::ROUTES_MAX {
                routes.clear();
            }
            routes.insert(q.to_owned(), leader.to_owned());
        }
        let mut addr = self.inner.addr.lock().unwrap_or_else(|p| p.into_inner());
        let mut current = self.inner.current.lock().unwrap_or_else(|p| p.into_inner());
        let still_there = current
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(&c.shared, used));
        if still_there {
            if *addr == leader {
                return false;
            }
            let from = std::mem::replace(&mut *addr, leader.to_owned());
            let mut others = lock(&self.inner.others);
            if let Some(old) = current.take() {
                // Kept for the queues routed to it, or until the answers
                // it waits for are in.
                others.retain(|_, c| c.shared.lost().is_none());
                if others.len() < OTHERS_MAX {
                    others.insert(from, old);
                } else {
                    let mut retired = lock(&self.inner.retired);
                    retired.retain(|c| !c.shared.state().pending.is_empty());
                    retired.push(old);
                }
            }
            // A connection already open to the leader is the one used.
            *current = others.remove(leader).filter(|c| c.shared.lost().is_none());
        }
        // Moved already (by another call that was refused too): send again.
        true
    }

    /// A new connection: to the address it talks to, or when that cannot
    /// be reached to the other nodes in turn (the first that answers is
    /// the address from then on).
    async fn open(&self) -> Result<Conn> {
        let mut options = self.inner.options.clone();
        options.addr = self.addr();
        let mut first_error = None;
        for addr in options.candidates() {
            let mut o = options.clone();
            o.addr = addr.clone();
            match self.open_at(&o).await {
                Ok(conn) => {
                    *self.inner.addr.lock().unwrap_or_else(|p| p.into_inner()) = addr;
                    return Ok(conn);
                }
                Err(e @ ClientError::Connect { .. }) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(first_error.expect("at least one candidate"))
    }

    /// A new connection to `o.addr`.
    async fn open_at(&self, o: &ClientOptions) -> Result<Conn> {
        let connect_error = |source| ClientError::Connect {
            addr: o.addr.clone(),
            source,
        };
        let stream = tokio::time::timeout(o.connect_timeout, TcpStream::connect(o.addr.as_str()))
            .await
            .map_err(|_| connect_error(io::Error::new(io::ErrorKind::TimedOut, "timed out")))?
            .map_err(connect_error)?;
        let _ = stream.set_nodelay(true);
        let tls = self.inner.tls.get(o)?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                output: BytesMut::with_capacity(64 << 10),
                pending: HashMap::new(),
                next_id: 1,
                lost: None,
            }),
            wake_writer: Notify::new(),
        });
        let tasks = match tls {
            None => {
                let (r, w) = stream.into_split();
                [
                    tokio::spawn(read_loop(shared.clone(), r)),
                    tokio::spawn(write_loop(shared.clone(), w)),
                ]
            }
            Some((config, name)) => {
                let connector = tokio_rustls::TlsConnector::from(config);
                let tls = tokio::time::timeout(o.connect_timeout, connector.connect(name, stream))
                    .await
                    .map_err(|_| ClientError::Tls(format!("handshake with {}: timed out", o.addr)))?
                    .map_err(|e| ClientError::Tls(format!("handshake with {}: {e}", o.addr)))?;
                let (r, w) = tokio::io::split(tls);
                [
                    tokio::spawn(read_loop(shared.clone(), r)),
                    tokio::spawn(write_loop(shared.clone(), w)),
                ]
            }
        };
        let conn = Conn { tasks, shared };
        if let Some(token) = &o.token {
            let c = call::auth(token);
            let r = register(&conn.shared, &c.req)?
                .answer(o.request_timeout)
                .await?;
            c.read(r)?;
        }
        Ok(conn)
    }

    async fn send<R: Encode + ?Sized>(&self, req: &R) -> Result<Sent> {
        if let Some(shared) = self.routed(req).await {
            if let Ok(sent) = register(&shared, req) {
                return Ok(sent);
            }
        }
        register(&self.connection().await?, req)
    }

    /// The connection to the node `req`'s queue's route names, when that
    /// is not the node talked to (opened if there is none; a node that
    /// cannot be reached loses its routes).
    async fn routed<R: Encode + ?Sized>(&self, req: &R) -> Option<Arc<Shared>> {
        if !self.inner.options.follow_leader {
            return None;
        }
        let q = req.queue()?;
        // Nothing allocated while the route is the node talked to.
        let addr = {
            let routes = lock(&self.inner.routes);
            let addr = routes.get(q)?;
            if *addr == *lock(&self.inner.addr) {
                return None;
            }
            addr.clone()
        };
        let open = |others: &HashMap<String, Arc<Conn>>| {
            others
                .get(&addr)
                .filter(|c| c.shared.lost().is_none())
                .map(|c| c.shared.clone())
        };
        if let Some(s) = open(&lock(&self.inner.others)) {
            return Some(s);
        }
        let _one = self.inner.connecting.lock().await;
        if let Some(s) = open(&lock(&self.inner.others)) {
            return Some(s);
        }
        let mut o = self.inner.options.clone();
        o.addr = addr.clone();
        match self.open_at(&o).await {
            Ok(conn) => {
                let mut others = lock(&self.inner.others);
                others.retain(|_, c| c.shared.lost().is_none());
                if others.len() >= OTHERS_MAX {
                    return None;
                }
                let conn = Arc::new(conn);
                let shared = conn.shared.clone();
                others.insert(addr, conn);
                Some(shared)
            }
            Err(_) => {
                lock(&self.inner.routes).retain(|_, a| *a != addr);
                None
            }
        }
    }

    fn limit<R: Encode + ?Sized>(&self, req: &R) -> Duration {
        self.inner.options.request_timeout + Duration::from_millis(req.long_poll_ms())
    }

    /// Sends one request (a [`Request`] or a borrowed view) and waits for
    /// its answer, up to the request timeout beyond its long-poll wait.
    ///
    /// A `not_leader` answer naming the leader is followed there (with
    /// [`ClientOptions::follow_leader`], as [`Hops`] says).
    pub async fn call<R: Encode + ?Sized>(&self, req: &R) -> Result<Response> {
        let mut hops = Hops::default();
        loop {
            let sent = self.send(req).await?;
            let used = sent.shared.clone();
            let r = sent.answer(self.limit(req)).await?;
            if let Response::Error(e) = &r {
                if self.follow(&used, e.code, &e.message, req.queue()) {
                    if let Some(pause) = hops.next() {
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                }
            }
            return Ok(r);
        }
    }

    async fn run<R: Encode, T>(&self, c: Call<R, T>) -> Result<T> {
        let r = self.call(&c.req).await?;
        c.read(r)
    }

    /// Runs a batch helper's requests pipelined, at most 32 in flight, and
    /// joins their entries in order.
    async fn batch<R: Encode, T>(
        &self,
        calls: impl Iterator<Item = Call<R, Vec<EntryResult<T>>>>,
    ) -> Result<Vec<EntryResult<T>>> {
        let mut out = Vec::new();
        let mut in_flight = VecDeque::with_capacity(WINDOW);
        let mut calls = calls.peekable();
        while calls.peek().is_some() || !in_flight.is_empty() {
            while in_flight.len() < WINDOW {
                let Some(c) = calls.next() else { break };
                in_flight.push_back((self.send(&c.req).await?, c));
            }
            let (sent, c) = in_flight.pop_front().expect("one in flight");
            let used = sent.shared.clone();
            let mut r = sent.answer(self.inner.options.request_timeout).await?;
            let mut hops = Hops::default();
            // Refused by a node that does not lead: that request again, on
            // the leader, before the next answer is read (the order holds).
            while let Response::Error(e) = &r {
                if !self.follow(&used, e.code, &e.message, c.req.queue()) {
                    break;
                }
                let Some(pause) = hops.next() else { break };
                tokio::time::sleep(pause).await;
                r = self
                    .send(&c.req)
                    .await?
                    .answer(self.inner.options.request_timeout)
                    .await?;
            }
            out.extend(c.read(r)?);
        }
        Ok(out)
    }

    /// Hello: the server's name and frame limit.
    pub async fn hello(&self) -> Result<(String, u32)> {
        self.run(call::hello()).await
    }

    /// Server-wide counters.
    pub async fn server_stats(&self) -> Result<Vec<(String, u64)>> {
        self.run(call::server_stats()).await
    }

    /// A cluster node's view of its cluster (docs/cluster.md); a single
    /// node answers `invalid_argument`.
    pub async fn cluster_status(&self) -> Result<ClusterStatus> {
        self.run(call::cluster_status()).await
    }

    /// Changes a cluster's members or moves its leadership
    /// (docs/cluster.md): sent to the leader (a `not_leader` answer is
    /// followed), answered once the change is committed — a transfer once
    /// another node leads. Needs manage on every queue; a single node
    /// answers `invalid_argument`, as does a change that cannot be made.
    pub async fn change_cluster(&self, change: ClusterChange) -> Result<()> {
        self.run(call::change_cluster(change)).await
    }

    /// Asks the server to read its tokens and TLS files again (needs
    /// manage on every queue); a file that fails keeps what is in use and
    /// is answered as an error.
    pub async fn reload(&self) -> Result<Reloaded> {
        self.run(call::reload()).await
    }

    /// Creates a queue; `false` when it existed with the same settings.
    pub async fn create_queue(&self, name: &str, settings: SettingsPatch) -> Result<bool> {
        self.run(call::create_queue(name, settings)).await
    }

    /// A queue's settings.
    pub async fn get_queue(&self, name: &str) -> Result<Settings> {
        self.run(call::get_queue(name)).await
    }

    /// Changes settings; answers those in force.
    pub async fn update_queue(&self, name: &str, settings: SettingsPatch) -> Result<Settings> {
        self.run(call::update_queue(name, settings)).await
    }

    /// Every queue name with this prefix, sorted: follows the server's
    /// pages to the end.
    pub async fn list_queues(&self, prefix: &str) -> Result<Vec<String>> {
        let mut all = Vec::new();
        let mut after = String::new();
        loop {
            let (names, next) = self.list_queues_page(prefix, &after, 0).await?;
            all.extend(names);
            match call::next_page(&after, next) {
                Some(next) => after = next,
                None => return Ok(all),
            }
        }
    }

    /// One page of queue names (see [`Client::list_queues_page`]).
    pub async fn list_queues_page(
        &self,
        prefix: &str,
        after: &str,
        limit: u16,
    ) -> Result<(Vec<String>, Option<String>)> {
        self.run(call::list_queues_page(prefix, after, limit)).await
    }

    /// Deletes a queue.
    pub async fn delete_queue(&self, name: &str) -> Result<()> {
        self.run(call::delete_queue(name, false)).await
    }

    /// Deletes a queue if it exists; a missing queue is no error.
    pub async fn delete_queue_if_exists(&self, name: &str) -> Result<()> {
        self.run(call::delete_queue(name, true)).await
    }

    /// Purges a queue (or its DLQ).
    pub async fn purge(&self, name: &str, dlq: bool) -> Result<()> {
        self.run(call::purge(name, dlq)).await
    }

    /// Pauses a queue's receiving, sending or both (`halves`; needs
    /// manage): its receives find nothing — those that wait, wait — and its
    /// puts are refused `queue_paused`, until [`AsyncClient::resume_queue`].
    /// Answers what is paused now.
    pub async fn pause_queue(&self, name: &str, halves: Halves) -> Result<Halves> {
        self.run(call::pause(name, halves, true)).await
    }

    /// Resumes what a pause paused (`halves`); answers what is paused now.
    pub async fn resume_queue(&self, name: &str, halves: Halves) -> Result<Halves> {
        self.run(call::pause(name, halves, false)).await
    }

    /// A queue's stats.
    pub async fn stats(&self, name: &str) -> Result<Stats> {
        self.run(call::stats(name)).await
    }

    /// Puts any number of messages, 20 per request, pipelined.
    pub async fn put_many(
        &self,
        queue: &str,
        messages: impl AsRef<[PutEntry]>,
    ) -> Result<Vec<EntryResult<PutAck>>> {
        self.batch(call::puts(queue, messages.as_ref())).await
    }

    /// Puts any number of bare payloads, 20 per request, pipelined.
    pub async fn put_payloads(
        &self,
        queue: &str,
        payloads: &[Bytes],
    ) -> Result<Vec<EntryResult<PutAck>>> {
        self.batch(call::payload_puts(queue, payloads)).await
    }

    /// Puts one message with only a payload.
    pub async fn put_one(&self, queue: &str, payload: impl Into<Bytes>) -> Result<PutAck> {
        self.put_payloads(queue, &[payload.into()])
            .await?
            .pop()
            .expect("one answer per entry")
    }

    /// Puts one payload with a deduplication id: sent again with the same
    /// id within the queue's dedup window (after a timeout, a lost
    /// connection), it stores nothing and answers the first put's id and
    /// sequence number — what to resend with when an answer was lost.
    pub async fn put_idempotent(
        &self,
        queue: &str,
        payload: impl Into<Bytes>,
        dedup_id: impl Into<String>,
    ) -> Result<PutAck> {
        let entry = PutEntry {
            payload: payload.into(),
            dedup_id: Some(dedup_id.into()),
            ..PutEntry::default()
        };
        self.put_many(queue, vec![entry])
            .await?
            .pop()
            .expect("one answer per entry")
    }

    /// Puts payloads into message group `group`, in order: the queue
    /// delivers a group's messages in sequence order, one leased at a time.
    pub async fn put_grouped(
        &self,
        queue: &str,
        group: &str,
        payloads: &[Bytes],
    ) -> Result<Vec<EntryResult<PutAck>>> {
        self.put_many(queue, grouped(group, payloads)).await
    }

    /// Cancels a scheduled message.
    pub async fn cancel_scheduled(&self, queue: &str, seq: u64) -> Result<()> {
        self.run(call::cancel_scheduled(queue, seq)).await
    }

    /// Receives with every option, among them the fields the messages
    /// carry.
    pub async fn receive_with(&self, r: ReceiveRef<'_>) -> Result<Vec<Message>> {
        self.run(call::receive(r)).await
    }

    /// Receives up to `max` messages, waiting up to `wait_ms` (the queue's
    /// default when `None`).
    pub async fn receive(
        &self,
        queue: &str,
        max: u8,
        wait_ms: Option<u64>,
    ) -> Result<Vec<Message>> {
        self.receive_with(call::simple_receive(queue, max, wait_ms))
            .await
    }

    /// Changes leases' next-visible times (any number, 20 per request,
    /// pipelined).
    pub async fn update_visibility(
        &self,
        queue: &QueueRef,
        changes: &[(Receipt, u64)],
    ) -> Result<Vec<EntryResult<u64>>> {
        self.batch(call::visibilities(&queue.name, queue.dlq, changes))
            .await
    }

    /// Updates a leased message (see [`crate::Client::update_message`]).
    pub async fn update_message(
        &self,
        queue: &QueueRef,
        receipt: Receipt,
        timeout_ms: u64,
        payload: Option<Bytes>,
    ) -> Result<MessageUpdate> {
        self.run(call::update_message(queue, receipt, timeout_ms, payload))
            .await
    }

    /// Deletes by receipt from a queue (any number, 20 per request,
    /// pipelined).
    pub async fn delete(&self, queue: &str, receipts: &[Receipt]) -> Result<Vec<EntryResult<()>>> {
        self.batch(call::deletes(queue, false, receipts)).await
    }

    /// Deletes by receipt from a queue or its DLQ.
    pub async fn delete_from(
        &self,
        queue: &QueueRef,
        receipts: &[Receipt],
    ) -> Result<Vec<EntryResult<()>>> {
        self.batch(call::deletes(&queue.name, queue.dlq, receipts))
            .await
    }

    /// Ends leases as failed (a "nack"; any number, 20 per request,
    /// pipelined): each message is visible again after its queue's retry
    /// policy's delay, at once without one. Answers each message's next
    /// visible time (ms).
    pub async fn release(
        &self,
        queue: &QueueRef,
        receipts: &[Receipt],
    ) -> Result<Vec<EntryResult<u64>>> {
        self.batch(call::releases(&queue.name, queue.dlq, receipts, ("", "")))
            .await
    }

    /// [`Self::release`] with the consumer's reason (≤ 256 bytes) and
    /// description (≤ 4 KiB), kept in each message's attempt history.
    pub async fn release_with(
        &self,
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
        .await
    }

    /// Defers a leased message.
    pub async fn defer(&self, queue: &str, receipt: Receipt) -> Result<()> {
        self.run(call::defer(queue, receipt)).await
    }

    /// Takes deferred messages by sequence number (any number, 20 per
    /// request, pipelined).
    pub async fn receive_deferred(
        &self,
        queue: &str,
        seqs: &[u64],
        visibility_ms: Option<u64>,
    ) -> Result<Vec<EntryResult<Message>>> {
        self.batch(call::deferred(queue, seqs, visibility_ms)).await
    }

    /// Dead-letters a leased message.
    pub async fn dead_letter(
        &self,
        queue: &str,
        receipt: Receipt,
        reason: &str,
        description: &str,
    ) -> Result<()> {
        self.run(call::dead_letter(queue, receipt, reason, description))
            .await
    }

    /// Browses from a sequence number.
    pub async fn peek(&self, queue: QueueRef, from_seq: u64, max: u8) -> Result<Vec<Message>> {
        self.run(call::peek(queue, from_seq, max, Fields::ALL))
            .await
    }

    /// [`Self::peek`] whose messages carry the groups of `fields`
    /// (`Fields::ALL.with(Fields::ATTEMPTS)`: every field and each
    /// message's failed attempts).
    pub async fn peek_with(
        &self,
        queue: QueueRef,
        from_seq: u64,
        max: u8,
        fields: Fields,
    ) -> Result<Vec<Message>> {
        self.run(call::peek(queue, from_seq, max, fields)).await
    }

    /// Moves dead letters back: (moved now, scheduled at the rate).
    pub async fn redrive(
        &self,
        queue: &str,
        max: Option<u64>,
        rate_per_second: Option<u32>,
    ) -> Result<(u64, u64)> {
        self.redrive_where(queue, max, rate_per_second, &MoveFilter::default())
            .await
    }

    /// [`Self::redrive`] of only the dead letters `filter` takes (see the
    /// blocking client's).
    pub async fn redrive_where(
        &self,
        queue: &str,
        max: Option<u64>,
        rate_per_second: Option<u32>,
        filter: &MoveFilter,
    ) -> Result<(u64, u64)> {
        self.run(call::redrive(queue, max, rate_per_second, filter))
            .await
    }

    /// What a redrive or a move would take (see the blocking client's).
    pub async fn preview_move(
        &self,
        queue: &str,
        dlq: bool,
        to: Option<&str>,
        filter: &MoveFilter,
        from_seq: u64,
    ) -> Result<MovePreview> {
        self.run(call::preview_move(queue, dlq, to, filter, from_seq))
            .await
    }

    /// Starts moving a queue's visible messages out (a move task): to
    /// `to`, or each back to the queue it was dead-lettered from.
    pub async fn start_move(
        &self,
        queue: &str,
        to: Option<&str>,
        max: Option<u64>,
        rate_per_second: Option<u32>,
    ) -> Result<MoveInfo> {
        self.start_move_where(queue, to, max, rate_per_second, &MoveFilter::default())
            .await
    }

    /// [`Self::start_move`] of only the messages `filter` takes.
    pub async fn start_move_where(
        &self,
        queue: &str,
        to: Option<&str>,
        max: Option<u64>,
        rate_per_second: Option<u32>,
        filter: &MoveFilter,
    ) -> Result<MoveInfo> {
        self.run(call::start_move(queue, to, max, rate_per_second, filter))
            .await
    }

    /// A queue's move tasks (redrives included), oldest first.
    pub async fn list_moves(&self, queue: &str) -> Result<Vec<MoveInfo>> {
        self.run(call::list_moves(queue)).await
    }

    /// Cancels a running move task; answers it as it now is.
    pub async fn cancel_move(&self, queue: &str, id: u64) -> Result<MoveInfo> {
        self.run(call::cancel_move(queue, id)).await
    }

    /// Deletes message `seq` of the queue (or its DLQ) whatever its state,
    /// as an operator does: a lease on it ends. Needs manage.
    pub async fn delete_seq(&self, queue: &str, dlq: bool, seq: u64) -> Result<()> {
        self.run(call::delete_seq(queue, dlq, seq)).await
    }

    /// Dead-letters message `seq` of the queue whatever its state, with an
    /// operator's reason and description. Needs manage.
    pub async fn dead_letter_seq(
        &self,
        queue: &str,
        seq: u64,
        reason: &str,
        description: &str,
    ) -> Result<()> {
        self.run(call::dead_letter_seq(queue, seq, reason, description))
            .await
    }

    /// A page of the queue's channels with messages ready (the default
    /// channel first when `after` is empty), at most `limit` (1–100), and
    /// the `after` of the next page. Needs manage.
    pub async fn channels(
        &self,
        queue: &str,
        after: &str,
        limit: u16,
    ) -> Result<(Vec<ChannelInfo>, Option<String>)> {
        self.run(call::channels(queue, after, limit)).await
    }
}
