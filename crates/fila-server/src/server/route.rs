//! Requests on their way to the loop that owns their queue's shard, and
//! answers on their way back.
//!
//! Every shard is owned by one event loop (shard `i` by loop
//! `i % event_loops`, [`fila_core::owner_of_shard`]) and touched by no
//! other thread. A request for a queue of a shard this loop owns runs
//! here, at once; any other goes to its owner's mailbox (`mailbox.rs`),
//! and its answer comes back through the connection's loop's mailbox, in
//! the order the owner sent them: a parked receive's late answer never
//! overtakes the news that it parked. Dead letters bound for a shard of
//! another loop travel the same way. What is away is bounded by what was
//! asked: a connection has at most [`IN_FLIGHT_MAX`] requests at other
//! loops, and parked receives are limited.

use std::sync::mpsc::Sender as MpscSender;
use std::sync::Condvar;

use fila_core::event::{ExportCursor, ImagePart};
use fila_core::{shard_of, Message, QueueStats, Totals};

use super::*;

/// Requests one connection may have at other loops' owners at once; past
/// it the connection's turn stops until answers come back.
pub const IN_FLIGHT_MAX: usize = 64;
/// Timers a shard runs in one turn of its loop, and that an operation may
/// run before it starts: no request pays for a backlog beyond this (an
/// instant is never split, so one instant's timers run together).
pub const TIMERS_PER_TURN: usize = 1_024;
/// How long a snapshot or a scrape waits for every loop.
const GATHER_DEADLINE: Duration = Duration::from_secs(2);

/// Where an answer goes: which loop, connection and request.
#[derive(Clone, Copy, Debug)]
pub(super) struct Route {
    pub(super) lp: usize,
    pub(super) slot: usize,
    pub(super) generation: u64,
    pub(super) request_id: u64,
    pub(super) opcode: u8,
    pub(super) started: Instant,
    /// Output room held for the answer while the request is away.
    pub(super) room: usize,
    /// The connection's number for the receive if it parks.
    pub(super) park: u64,
    /// The fields a receive's answer carries.
    pub(super) fields: proto::Fields,
    /// The shard of its queue (0 when it names none).
    pub(super) shard: usize,
}

/// A request for a shard's owner.
pub(super) struct RunJob {
    pub(super) route: Route,
    pub(super) req: Request,
    /// The connection is under its limit of parked receives.
    pub(super) may_park: bool,
    /// The dead-letter target it names was found (on its own shard).
    pub(super) checked: bool,
}

/// A list of queues going from loop to loop, each adding its shards'
/// names.
pub(super) struct ListJob {
    pub(super) route: Route,
    /// What the caller may see of the names it asked for.
    ranges: Vec<auth::Range>,
    after: String,
    limit: usize,
    names: Vec<String>,
    left: usize,
}

/// What became of a request at its shard's owner.
pub(super) enum Done {
    /// The answer, and whether the call logged a change (then it waits
    /// for the log when answers do).
    Answer(Answer, bool),
    Parked(WaitId),
    /// A parked receive's answer: messages, none when its wait ended, or
    /// `queue_deleted`.
    Late(Result<Vec<Message>, fila_core::Error>),
    /// A parked receive was cancelled (the server is stopping): answer it
    /// with no messages.
    Cancelled,
}

/// Every loop stopped at once, for the moment a snapshot begins: the log
/// writer drains every shard's buffer with none of them changing, so the
/// snapshot's LSN is a consistent cut (no record before it follows one
/// after it).
pub(super) struct Pause {
    arrived: Mutex<usize>,
    all_in: Condvar,
    released: Mutex<bool>,
    release: Condvar,
}

impl Pause {
    fn new() -> Pause {
        Pause {
            arrived: Mutex::new(0),
            all_in: Condvar::new(),
            released: Mutex::new(false),
            release: Condvar::new(),
        }
    }

    /// A loop's part: it is stopped (it published everything it logged);
    /// then it waits to be let go.
    fn arrive(&self) {
        *lock(&self.arrived) += 1;
        self.all_in.notify_all();
        let mut released = lock(&self.released);
        while !*released {
            released = self
                .release
                .wait(released)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    fn let_go(&self) {
        *lock(&self.released) = true;
        self.release.notify_all();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The log writer's question to one loop: the next piece of a shard's
/// state for a snapshot.
pub(super) struct ExportAsk {
    cursor: ExportCursor,
    max_messages: usize,
    max_bytes: u64,
    reply: MpscSender<(ExportCursor, Vec<ImagePart>)>,
}

/// A scrape's question to one loop.
pub(super) struct ScrapeAsk {
    max: usize,
    reply: MpscSender<Vec<(String, QueueStats)>>,
}

/// The engine as the loops hold it, for the log writer (snapshots) and
/// the metrics endpoint (per-queue series): both ask every loop through
/// its mailbox and never touch a shard themselves.
pub(super) struct LoopsView {
    pub(super) loops: Loops,
    pub(super) totals: Totals,
    /// Loops still running.
    pub(super) alive: Arc<AtomicU64>,
}

impl LoopsView {
    /// Sends `msg()` to every loop, each within the gathering deadline;
    /// `false` when one's mailbox stayed full.
    fn ask(&self, msg: impl Fn() -> Msg, deadline: Instant) -> bool {
        (0..self.loops.len()).all(|dest| self.loops.push_within(dest, msg(), deadline))
    }
}

impl fila_store::Source for LoopsView {
    fn quiesce(&self, during: &mut dyn FnMut()) -> bool {
        let n = self.loops.len();
        let pause = Arc::new(Pause::new());
        let deadline = Instant::now() + GATHER_DEADLINE;
        let all_in = self.ask(|| Msg::Pause(pause.clone()), deadline) && {
            let mut arrived = lock(&pause.arrived);
            loop {
                if *arrived == n {
                    break true;
                }
                let now = Instant::now();
                if now >= deadline || self.alive.load(Ordering::Acquire) < n as u64 {
                    break false;
                }
                arrived = pause
                    .all_in
                    .wait_timeout(arrived, (deadline - now).min(Duration::from_millis(50)))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        };
        // Every loop is stopped: no shard changes and nothing is logged
        // until they are let go.
        if all_in {
            during();
        }
        pause.let_go();
        all_in
    }

    fn export_piece(
        &self,
        cursor: &mut ExportCursor,
        max_messages: usize,
        max_bytes: u64,
    ) -> Option<Vec<ImagePart>> {
        let shards = self.totals.shard_count();
        if cursor.shard >= shards {
            cursor.done = true;
            return Some(Vec::new());
        }
        // The loop that owns the shard takes the piece between two of its
        // turns: the others go on.
        let owner = fila_core::owner_of_shard(cursor.shard, self.loops.len());
        let (reply, answer) = std::sync::mpsc::channel();
        let ask = Msg::Export(ExportAsk {
            cursor: cursor.clone(),
            max_messages,
            max_bytes,
            reply,
        });
        let deadline = Instant::now() + GATHER_DEADLINE;
        if !self.loops.push_within(owner, ask, deadline) {
            return None;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let (moved, parts) = answer.recv_timeout(left).ok()?;
        *cursor = moved;
        Some(parts)
    }

    fn next_queue_id(&self) -> u32 {
        self.totals.next_queue_id()
    }

    fn stored_bytes(&self) -> u64 {
        self.totals.stored_bytes()
    }
}

impl crate::metrics::EngineView for LoopsView {
    fn totals(&self) -> Totals {
        self.totals.clone()
    }

    fn queue_stats(&self, max: usize) -> Vec<(String, QueueStats)> {
        let (reply, answers) = std::sync::mpsc::channel();
        let deadline = Instant::now() + GATHER_DEADLINE;
        self.ask(
            || {
                Msg::Scrape(ScrapeAsk {
                    max,
                    reply: reply.clone(),
                })
            },
            deadline,
        );
        drop(reply);
        let mut all = Vec::new();
        for _ in 0..self.loops.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            match answers.recv_timeout(left) {
                Ok(mut part) => all.append(&mut part),
                Err(_) => break,
            }
        }
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        all.truncate(max);
        all
    }
}

impl Loop {
    /// The loop that owns shard `shard`.
    pub(super) fn owner_of(&self, shard: usize) -> usize {
        fila_core::owner_of_shard(shard, self.shared.loops.len())
    }

    fn owner_of_queue(&self, name: &str) -> usize {
        self.owner_of(shard_of(name, self.shared.totals.shard_count()))
    }

    /// The loop a request goes to first: its dead-letter target's owner
    /// (to check the target exists), else its queue's.
    pub(super) fn first_hop(&self, req: &Request) -> usize {
        match dispatch::target_of(req) {
            Some(target) => self.owner_of_queue(target),
            None => crate::ops::queue_of(req).map_or(self.index, |q| self.owner_of_queue(q)),
        }
    }

    /// Sends `msg` to loop `dest` (another loop) at the end of this turn.
    pub(super) fn send_to(&mut self, dest: usize, msg: Msg) {
        debug_assert_ne!(dest, self.index);
        self.outbox.send(dest, msg);
    }

    /// Pushes what this turn sent to the other loops, each woken once;
    /// answers whether any is left (a mailbox was full).
    pub(super) fn flush_outgoing(&mut self) -> bool {
        self.outbox.flush(&self.shared.loops)
    }

    /// Says this loop is about to block in poll, then looks once more for
    /// mail; answers whether there is some (then it must not block). A
    /// loop sending to this one wakes it only when the flag is set, so a
    /// busy loop is not woken at all.
    pub(super) fn going_to_sleep(&mut self) -> bool {
        let me = self.shared.loops.get(self.index);
        me.about_to_sleep();
        let work = me.has_mail();
        if work {
            me.awake();
        }
        work
    }

    /// Whether another thread sent this loop something.
    pub(super) fn work_handed_in(&self) -> bool {
        self.shared.loops.get(self.index).has_mail()
    }

    /// Serves a message for the shards owned here.
    pub(super) fn serve_job(&mut self, msg: Msg) {
        match msg {
            Msg::Run(run) => {
                let route = run.route;
                if let Some(done) = self.serve(run) {
                    self.deliver(route, done);
                }
                // After the answer: a parked receive that a put filled is
                // answered after the put (both through the same mailbox, in
                // order).
                self.hand_on();
            }
            Msg::List(list) => self.visit_list(list),
            Msg::Transit(t) => {
                self.owner.accept(t);
                self.hand_on();
            }
            Msg::Cancel { wait, reply } => self.cancel_here(wait, reply),
            Msg::Abandon { shard, receipts } => {
                self.owner.abandon(shard, &receipts);
                self.hand_on();
            }
            _ => debug_assert!(false, "not a message for a shard's owner"),
        }
    }

    /// Ends the leases of an answer that can no longer be written (its
    /// connection closed): the messages are visible again at once, on
    /// whichever loop owns `shard`.
    pub(super) fn abandon(&mut self, shard: usize, receipts: Vec<fila_core::Receipt>) {
        if receipts.is_empty() {
            return;
        }
        let dest = self.owner_of(shard);
        if dest == self.index {
            self.owner.abandon(shard, &receipts);
            self.hand_on();
        } else {
            self.send_to(dest, Msg::Abandon { shard, receipts });
        }
    }

    /// Cancels a parked receive of a shard owned here.
    fn cancel_here(&mut self, wait: WaitId, reply: Option<Route>) {
        if self.owner.cancel_wait(wait) {
            self.parked_here.remove(&wait);
            self.unpark_count();
            if let Some(route) = reply {
                self.deliver(route, Done::Cancelled);
            }
        }
        // Else it was answered: its answer is on its way to its loop (or
        // it was refused parking and never recorded).
    }

    /// Cancels a parked receive wherever its shard is owned.
    pub(super) fn cancel_wait(&mut self, wait: WaitId, reply: Option<Route>) {
        let dest = self.owner_of(wait.shard());
        if dest == self.index {
            self.cancel_here(wait, reply);
        } else {
            self.send_to(dest, Msg::Cancel { wait, reply });
        }
    }

    /// Sends an answer to the loop of its connection (this one: at once).
    fn deliver(&mut self, route: Route, done: Done) {
        if route.lp == self.index {
            self.on_done(route, done);
        } else {
            self.send_to(route.lp, Msg::Done { route, done });
        }
    }

    /// Hands on what the owner's last call produced: parked receives it
    /// completed are answered, dead letters go to their shards' loops.
    pub(super) fn hand_on(&mut self) {
        if !self.owner.has_output() {
            return;
        }
        for c in self.owner.take_completions() {
            // The wait ended by its answer: it counts no more, whether or
            // not its connection is still there.
            let Some(route) = self.parked_here.remove(&c.wait) else {
                debug_assert!(false, "a completion for a receive not parked here");
                continue;
            };
            self.unpark_count();
            self.deliver(route, Done::Late(c.result));
        }
        let shards = self.shared.totals.shard_count();
        for t in self.owner.take_transit() {
            let dest = self.owner_of(t.shard(shards));
            self.send_to(dest, Msg::Transit(t));
        }
    }

    /// Runs a request on a shard owned here, or passes it on to the loop
    /// that owns it; answers the outcome when it ran here (then the caller
    /// answers it and calls [`Loop::hand_on`]).
    pub(super) fn serve(&mut self, mut run: RunJob) -> Option<Done> {
        if !run.checked {
            if let Some(target) = dispatch::target_of(&run.req) {
                let dest = self.owner_of_queue(target);
                if dest != self.index {
                    self.send_to(dest, Msg::Run(run));
                    return None;
                }
                if let Err(answer) = dispatch::precheck(&run.req) {
                    return Some(Done::Answer(answer.into(), false));
                }
                if !self.owner.has_queue(target) {
                    let e = fila_core::Error::QueueNotFound(target.to_owned());
                    return Some(Done::Answer(Answer::failed(&e), false));
                }
            }
            run.checked = true;
        }
        let Some(queue) = crate::ops::queue_of(&run.req) else {
            return Some(Done::Answer(
                error(
                    ErrorCode::INTERNAL,
                    "internal: a request without a queue reached a shard",
                )
                .into(),
                false,
            ));
        };
        let dest = self.owner_of_queue(queue);
        if dest != self.index {
            self.send_to(dest, Msg::Run(run));
            return None;
        }
        let route = run.route;
        let before = self.owner.changes();
        let done = match dispatch::run(&mut self.owner, run.req, route.room) {
            Outcome::Answer(r) => Done::Answer(r, self.owner.changes() != before),
            Outcome::Parked(wait) => self.confirm_park(wait, run.may_park, route),
        };
        // The caller hands on what the call produced (`hand_on`) once the
        // answer is on its way.
        Some(done)
    }

    /// A receive parked here: kept (its answer to go to `route`) if the
    /// limits allow, else cancelled and answered `resource_exhausted`.
    fn confirm_park(&mut self, wait: WaitId, may_park: bool, route: Route) -> Done {
        let shared = self.shared.clone();
        let config = &shared.config;
        let refused = if !may_park {
            Some((
                "max_parked_per_connection",
                config.max_parked_per_connection,
            ))
        } else if shared
            .parked
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < config.max_parked as u64).then_some(n + 1)
            })
            .is_err()
        {
            Some(("max_parked", config.max_parked))
        } else {
            None
        };
        if let Some((limit, max)) = refused {
            // Never leave it parked: it would hold messages for nobody.
            // Nothing ran since it parked, so it is still there.
            if self.owner.cancel_wait(wait) {
                return Done::Answer(
                    error(
                        ErrorCode::RESOURCE_EXHAUSTED,
                        format!("resource_exhausted: {limit} of {max} parked receives reached"),
                    )
                    .into(),
                    false,
                );
            }
            if limit == "max_parked_per_connection" {
                shared.parked.fetch_add(1, Ordering::AcqRel);
            }
        }
        shared.metrics.parked.fetch_add(1, Ordering::Relaxed);
        self.parked_here.insert(wait, route);
        Done::Parked(wait)
    }

    /// Starts a list of queues: this loop's shards, then each other loop's.
    pub(super) fn start_list(&mut self, route: Route, req: Request, token: Option<TokenId>) {
        let Request::ListQueues {
            prefix,
            after,
            limit,
        } = req
        else {
            return;
        };
        let limit = match usize::from(limit) {
            0 => dispatch::LIST_PAGE_MAX,
            n => n.min(dispatch::LIST_PAGE_MAX),
        };
        // A token lists only what it may see (and so pages over it: the
        // cursor is always a name it may see).
        let ranges = match token {
            Some(token) => self.shared.config.tokens.visible_ranges(token, &prefix),
            None => vec![auth::Range::all(&prefix)],
        };
        self.visit_list(Box::new(ListJob {
            route,
            ranges,
            after,
            limit,
            names: Vec::new(),
            left: self.shared.loops.len(),
        }));
    }

    fn visit_list(&mut self, mut list: Box<ListJob>) {
        for range in &list.ranges {
            let mut mine = self
                .owner
                .list_queues(&range.prefix, &list.after, list.limit + 1);
            if range.exact {
                mine.retain(|n| *n == range.prefix);
            }
            list.names.append(&mut mine);
        }
        if list.ranges.len() > 1 {
            // Ranges may overlap ("a*" and "ab*").
            list.names.sort_unstable();
            list.names.dedup();
        }
        // Keep what can still be on the page: memory stays O(limit).
        if list.names.len() > 2 * (list.limit + 1) {
            list.names.sort_unstable();
            list.names.truncate(list.limit + 1);
        }
        list.left -= 1;
        if list.left > 0 {
            let next = (self.index + 1) % self.shared.loops.len();
            self.send_to(next, Msg::List(list));
            return;
        }
        let ListJob {
            route,
            names,
            limit,
            ..
        } = *list;
        let (names, next) = fila_core::page_of(names, limit);
        self.deliver(
            route,
            Done::Answer(Response::Queues { names, next }.into(), false),
        );
    }

    /// An answer for one of this loop's connections, from whichever loop
    /// ran the request.
    pub(super) fn on_done(&mut self, route: Route, done: Done) {
        let done = match done {
            Done::Late(result) => return self.on_late(route, result),
            other => other,
        };
        let Some(conn) = self
            .conns
            .get_mut(route.slot)
            .and_then(|c| c.as_mut())
            .filter(|c| c.generation == route.generation)
        else {
            // Closed meanwhile: a receive that parked holds messages for
            // nobody: cancel it; messages an answer leased go back.
            match done {
                Done::Parked(wait) => self.cancel_wait(wait, None),
                Done::Answer(answer, _) => self.abandon(route.shard, answer.receipts()),
                Done::Cancelled | Done::Late(_) => {}
            }
            return;
        };
        if !matches!(done, Done::Cancelled) {
            conn.in_flight -= 1;
            conn.reserved -= route.room;
            if route.opcode == proto::Opcode::Receive as u8 {
                conn.receives_out -= 1;
            }
            let was_barrier = conn.barrier == Some(route.park);
            if was_barrier {
                conn.barrier = None;
            }
            let resume = if conn.barrier.is_some() {
                false
            } else if was_barrier {
                true
            } else if conn.moving_to.is_some() {
                conn.in_flight == 0
            } else {
                conn.in_flight < IN_FLIGHT_MAX / 2
            };
            if conn.owners_paused && resume {
                conn.owners_paused = false;
                self.requeue(route.slot);
            }
        }
        let op = proto::Opcode::from_u8(route.opcode).ok();
        let conn = self.conns[route.slot].as_mut().expect("open");
        match done {
            Done::Answer(response, logged) => {
                if let Some(op) = op {
                    self.shared.metrics.record(
                        self.index,
                        op,
                        route.started.elapsed(),
                        response.is_error(),
                    );
                }
                let mark = self.hold_mark(logged, &response, Some(route.shard));
                self.respond_held(route.slot, route.opcode, route.request_id, &response, mark);
            }
            Done::Parked(wait) => {
                if let Some(op) = op {
                    self.shared
                        .metrics
                        .record(self.index, op, route.started.elapsed(), false);
                }
                self.park(route, wait);
                if self.conns[route.slot]
                    .as_ref()
                    .is_some_and(|c| c.peer_closed)
                {
                    // Its client closed while it was parking.
                    self.end_parked(route.slot);
                }
            }
            Done::Late(_) => {}
            Done::Cancelled => {
                let Some(p) = conn.parked.remove(&route.park) else {
                    return;
                };
                conn.reserved -= p.reserved;
                self.respond(
                    route.slot,
                    proto::Opcode::Receive as u8,
                    p.request_id,
                    &Response::Messages(Vec::new()).into(),
                );
            }
        }
        self.dirty.push(route.slot);
    }

    /// A parked receive's answer, for one of this loop's connections.
    fn on_late(&mut self, route: Route, result: Result<Vec<Message>, fila_core::Error>) {
        let parked = self
            .conns
            .get_mut(route.slot)
            .and_then(|c| c.as_mut())
            .filter(|c| c.generation == route.generation)
            .and_then(|c| c.parked.remove(&route.park));
        let Some(p) = parked else {
            // Its connection closed (or cancelled it) while the answer was
            // on its way: what it leased goes back.
            if let Ok(ms) = result {
                let receipts = ms.iter().filter_map(|m| m.receipt).collect();
                self.abandon(route.shard, receipts);
            }
            return;
        };
        let conn = self.conns[route.slot].as_mut().expect("just found");
        conn.reserved -= p.reserved;
        let result = match result {
            // Filled as its client was closing (its cancel came too late):
            // answered empty, what it leased back.
            Ok(ms) if conn.peer_closed && !ms.is_empty() => {
                let receipts = ms.iter().filter_map(|m| m.receipt).collect();
                self.abandon(route.shard, receipts);
                Ok(Vec::new())
            }
            other => other,
        };
        let response = match result {
            Ok(ms) => dispatch::messages_of(ms, p.fields),
            Err(e) => Answer::failed(&e),
        };
        // Most often filled by a put not yet durable: held until it is.
        let opcode = proto::Opcode::Receive as u8;
        let mark = self.hold_mark(false, &response, Some(p.wait.shard()));
        self.respond_held(route.slot, opcode, p.request_id, &response, mark);
        self.dirty.push(route.slot);
    }

    /// Notes a receive parked on its shard: the connection holds room for
    /// its answer until it comes.
    fn park(&mut self, route: Route, wait: WaitId) {
        let conn = self.conns[route.slot].as_mut().expect("open");
        let reserved = usize::try_from(wait.reserved_bytes()).unwrap_or(usize::MAX);
        conn.reserved += reserved;
        let held = conn.buffered() + conn.reserved;
        conn.parked.insert(
            route.park,
            Parked {
                wait,
                request_id: route.request_id,
                reserved,
                fields: route.fields,
            },
        );
        self.note_held(held);
    }

    /// A scrape's part: the first `max` queues of the shards owned here,
    /// with their stats.
    pub(super) fn scrape(&mut self, ask: ScrapeAsk) {
        let names = self.owner.list_queues("", "", ask.max);
        let stats = names
            .into_iter()
            .filter_map(|q| self.owner.stats(&q).ok().map(|s| (q, s)))
            .collect();
        self.hand_on();
        let _ = ask.reply.send(stats);
    }

    /// Stops with every other loop while the log writer drains the shards'
    /// buffers (see [`Pause`]).
    pub(super) fn pause(&mut self, pause: Arc<Pause>) {
        pause.arrive();
    }

    /// The log writer's question: the next piece of one of this loop's
    /// shards for a snapshot (a pause of this loop only, for one piece).
    pub(super) fn export(&mut self, mut ask: ExportAsk) {
        let mut parts = Vec::new();
        self.owner
            .export_piece(&mut ask.cursor, ask.max_messages, ask.max_bytes, &mut parts);
        let _ = ask.reply.send((ask.cursor, parts));
    }
}
