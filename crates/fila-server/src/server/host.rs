//! The shard host of a loop: the shards it owns, their timers and budgets,
//! requests for them from any loop, the receives parked on them, and what
//! goes back.
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
//!
//! Answers for this loop's own connections are kept in order
//! ([`ShardHost::next_local`]) for the front end to take.

#[cfg(not(loom))]
mod parts;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use fila_core::{shard_of, Message, Owner, WaitId};
use fila_proto::{self as proto, ErrorCode, Request, Response};

use super::front::ConnRef;
use super::mailbox::{Msg, Post};
use super::view::{ExportAsk, Pause, ScrapeAsk};
use super::Shared;
use crate::auth::{self, TokenId};
use crate::dispatch::{self, error, Answer, Outcome};

/// Requests one connection may have at other loops' owners at once; past
/// it the connection's turn stops until answers come back.
pub const IN_FLIGHT_MAX: usize = 64;
/// Timers a shard runs in one turn of its loop, and that an operation may
/// run before it starts: no request pays for a backlog beyond this (an
/// instant is never split, so one instant's timers run together).
pub const TIMERS_PER_TURN: usize = 1_024;

/// Where an answer goes: which loop, connection and request.
#[derive(Clone, Copy, Debug)]
pub(in crate::server) struct Route {
    pub(in crate::server) lp: usize,
    pub(in crate::server) conn: ConnRef,
    pub(in crate::server) request_id: u64,
    pub(in crate::server) opcode: u8,
    pub(in crate::server) started: Instant,
    /// Output room held for the answer while the request is away.
    pub(in crate::server) room: usize,
    /// The connection's number for the receive if it parks.
    pub(in crate::server) park: u64,
    /// The fields a receive's answer carries.
    pub(in crate::server) fields: proto::Fields,
    /// The shard of its queue (0 when it names none).
    pub(in crate::server) shard: usize,
    /// Its caller cannot follow a `not_leader` answer (an SQS or console
    /// request, or another node's): a cluster node's follower forwards it
    /// to the partition's leader. (Read by the cluster, not built with
    /// `--cfg loom`.)
    #[cfg_attr(loom, allow(dead_code))]
    pub(in crate::server) forward: bool,
}

/// A request for a shard's owner.
pub(in crate::server) struct RunJob {
    pub(in crate::server) route: Route,
    pub(in crate::server) req: Request,
    /// The connection is under its limit of parked receives.
    pub(in crate::server) may_park: bool,
    /// The dead-letter target it names was found (on its own shard).
    pub(in crate::server) checked: bool,
}

/// A list of queues going from loop to loop, each adding its shards'
/// names.
pub(in crate::server) struct ListJob {
    route: Route,
    /// What the caller may see of the names it asked for.
    ranges: Vec<auth::Range>,
    after: String,
    limit: usize,
    names: Vec<String>,
    left: usize,
}

impl ListJob {
    /// A list of queues for `route` (a `ListQueues` request), to visit
    /// every loop from loop 0 up, or from the loop that starts it.
    pub(in crate::server) fn new(
        shared: &Shared,
        route: Route,
        req: Request,
        token: Option<(&auth::TokenTable, TokenId)>,
    ) -> Option<Box<ListJob>> {
        let Request::ListQueues {
            prefix,
            after,
            limit,
        } = req
        else {
            return None;
        };
        let limit = match usize::from(limit) {
            0 => dispatch::LIST_PAGE_MAX,
            n => n.min(dispatch::LIST_PAGE_MAX),
        };
        // A token lists only what it may see (and so pages over it: the
        // cursor is always a name it may see).
        let ranges = match token {
            Some((tokens, token)) => tokens.visible_ranges(token, &prefix),
            None => vec![auth::Range::all(&prefix)],
        };
        Some(Box::new(ListJob {
            route,
            ranges,
            after,
            limit,
            names: Vec::new(),
            left: shared.loops.owners(),
        }))
    }
}

impl ListJob {
    /// Where its answer goes.
    #[cfg(not(loom))]
    pub(in crate::server) fn route(&self) -> Route {
        self.route
    }

    /// Adds the names of `owner`'s shards.
    fn gather(&mut self, owner: &Owner) {
        for range in &self.ranges {
            let mut mine = owner.list_queues(&range.prefix, &self.after, self.limit + 1);
            if range.exact {
                mine.retain(|n| *n == range.prefix);
            }
            self.names.append(&mut mine);
        }
        if self.ranges.len() > 1 {
            // Ranges may overlap ("a*" and "ab*").
            self.names.sort_unstable();
            self.names.dedup();
        }
        // Keep what can still be on the page: memory stays O(limit).
        if self.names.len() > 2 * (self.limit + 1) {
            self.names.sort_unstable();
            self.names.truncate(self.limit + 1);
        }
    }

    /// The page, once every owner added its names.
    fn finish(self) -> (Route, Done) {
        let ListJob {
            route,
            names,
            limit,
            ..
        } = self;
        let (names, next) = fila_core::page_of(names, limit);
        (
            route,
            Done::Answer(Response::Queues { names, next }.into(), false),
        )
    }

    /// Its visible ranges, cursor and limit (what a follower forwards to
    /// its leader).
    #[cfg(not(loom))]
    pub(in crate::server) fn parts(&self) -> (Vec<auth::Range>, String, usize) {
        (self.ranges.clone(), self.after.clone(), self.limit)
    }

    /// The list a follower forwarded ([`ListJob::parts`]), answered to
    /// `route`.
    #[cfg(not(loom))]
    pub(in crate::server) fn of_parts(
        route: Route,
        ranges: Vec<auth::Range>,
        after: String,
        limit: usize,
    ) -> ListJob {
        ListJob {
            route,
            ranges,
            after,
            limit: limit.clamp(1, dispatch::LIST_PAGE_MAX),
            names: Vec::new(),
            left: 1,
        }
    }

    /// The whole list from one owner of every shard (a cluster node's
    /// partition).
    #[cfg(not(loom))]
    pub(in crate::server) fn finish_on(mut self, owner: &Owner) -> (Route, Done) {
        self.gather(owner);
        self.finish()
    }
}

/// What became of a request at its shard's owner.
pub(in crate::server) enum Done {
    /// The answer, and whether the call logged a change (then it waits
    /// for the log when answers do).
    Answer(Answer, bool),
    Parked(WaitId),
    /// A parked receive's answer: messages, none when its wait ended, or
    /// `queue_deleted`.
    Late(Result<Vec<Message>, fila_core::Error>),
    /// A parked receive was cancelled (the server is stopping, its client
    /// closed its side): answer it with no messages.
    Cancelled,
    /// (A cluster node.) A receive now waits on its partition's leader:
    /// it is still away, and its answer will take at most this many bytes
    /// (what `max_messages` of its queue's largest messages need), so the
    /// room its connection holds for it drops to that — as for a receive
    /// parked on a single node ([`Done::Parked`]).
    Waits(usize),
    /// (A cluster node.) A receive parked as `wait` in the engine of
    /// partition `part`, which its home loop keeps: its answer will take
    /// at most `room` bytes (as [`Done::Waits`]), and its connection, if it
    /// closes first, cancels it there ([`ShardHost::cancel_part`]).
    #[cfg_attr(loom, allow(dead_code))]
    PartParked {
        part: usize,
        wait: WaitId,
        room: usize,
    },
}

/// The limit on parked receives a receive that parked would pass (its
/// name and value): its connection's, or the server's; within both it
/// is counted against the server's (`Shared::parked`).
pub(in crate::server) fn park_limit(
    shared: &Shared,
    may_park: bool,
) -> Option<(&'static str, usize)> {
    let config = &shared.config;
    if !may_park {
        return Some((
            "max_parked_per_connection",
            config.max_parked_per_connection,
        ));
    }
    let counted = shared
        .parked
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < config.max_parked as u64).then_some(n + 1)
        });
    counted
        .is_err()
        .then_some(("max_parked", config.max_parked))
}

/// The answer to a receive refused for `limit` of `max` parked receives.
pub(in crate::server) fn park_refused(limit: &str, max: usize) -> Answer {
    error(
        ErrorCode::RESOURCE_EXHAUSTED,
        format!("resource_exhausted: {limit} of {max} parked receives reached"),
    )
    .into()
}

/// A loop's shards (see the module docs).
pub(in crate::server) struct ShardHost {
    index: usize,
    shared: Arc<Shared>,
    /// The shards this loop owns: no other thread touches them.
    owner: Owner,
    /// Receives parked on the shards owned here, by their wait: where
    /// each one's answer goes.
    parked: HashMap<WaitId, Route>,
    /// Answers for this loop's own connections, in order.
    local: VecDeque<(Route, Done)>,
    /// (A cluster node.) Answers run here on a partition's leader, held
    /// until their entries commit.
    held: super::held::HeldAnswers,
    /// (A cluster node.) The shards of the partitions' leader engines
    /// this loop keeps, by partition (`cluster/fast.rs`): no other thread
    /// touches them.
    #[cfg(not(loom))]
    engines: Vec<fila_cluster::Slot>,
    /// (A cluster node.) Receives parked in those engines, by partition.
    #[cfg(not(loom))]
    part_waits: Vec<parts::PartWaits>,
}

impl ShardHost {
    pub(in crate::server) fn new(index: usize, shared: Arc<Shared>, owner: Owner) -> ShardHost {
        ShardHost {
            index,
            shared,
            owner,
            parked: HashMap::new(),
            local: VecDeque::new(),
            held: Default::default(),
            #[cfg(not(loom))]
            engines: Vec::new(),
            #[cfg(not(loom))]
            part_waits: Vec::new(),
        }
    }

    /// The owner, for the loom model's checks.
    #[cfg(all(test, loom))]
    pub(in crate::server) fn owner_for_model(&mut self) -> &mut Owner {
        &mut self.owner
    }

    /// The answers held for commits, for the loom model.
    #[cfg(all(test, loom))]
    pub(in crate::server) fn held_for_model(&mut self) -> &mut super::held::HeldAnswers {
        &mut self.held
    }

    /// The next answer for one of this loop's connections.
    pub(in crate::server) fn next_local(&mut self) -> Option<(Route, Done)> {
        self.local.pop_front()
    }

    /// The shards' time: due timers within the turn's budget; answers
    /// whether every shard caught up.
    pub(in crate::server) fn advance(&mut self, post: &mut Post) -> bool {
        let caught_up = self.owner.advance(TIMERS_PER_TURN);
        self.hand_on(post);
        #[cfg(not(loom))]
        self.advance_parts(post);
        caught_up
    }

    /// When the next timer of a shard owned here is due (on a cluster
    /// node, of a partition engine's shard kept here too).
    pub(in crate::server) fn next_deadline(&self) -> Option<u64> {
        let mine = self.owner.next_deadline();
        #[cfg(not(loom))]
        let mine = self.parts_deadline().into_iter().chain(mine).min();
        mine
    }

    /// The loop that owns shard `shard`.
    fn owner_of(&self, shard: usize) -> usize {
        fila_core::owner_of_shard(shard, self.shared.loops.owners())
    }

    fn owner_of_queue(&self, name: &str) -> usize {
        self.owner_of(shard_of(name, self.shared.totals.shard_count()))
    }

    /// The loop a request goes to first: its dead-letter target's owner
    /// (to check the target exists), else its queue's.
    pub(in crate::server) fn first_hop(&self, req: &Request) -> usize {
        if let Some(cluster) = self.shared.cluster {
            // A cluster node: every request is away — at its endpoint,
            // or held here until its entry commits (`committed`).
            return cluster;
        }
        match dispatch::target_of(req) {
            Some(target) => self.owner_of_queue(target),
            None => crate::ops::queue_of(req).map_or(self.index, |q| self.owner_of_queue(q)),
        }
    }

    /// A request of one of this loop's connections: run here (its answer,
    /// then what its call completed for others, kept for
    /// [`ShardHost::next_local`]) or sent to the loop that owns its shard.
    pub(in crate::server) fn submit(&mut self, run: RunJob, post: &mut Post) {
        if let Some(cluster) = self.shared.cluster {
            // A cluster node: every queue is the partition's, run here
            // on its leader's engine when it can be.
            #[cfg(not(loom))]
            match self.shared.fast.get().and_then(|f| f.route(&run)) {
                Some((g, home)) if home == self.index => self.lead(g, run, post),
                Some((_, home)) => post.send(home, Msg::Lead(run)),
                None => post.send(cluster, Msg::Run(run)),
            }
            #[cfg(loom)]
            post.send(cluster, Msg::Run(run));
            return;
        }
        let route = run.route;
        if let Some(done) = self.serve(run, post) {
            self.deliver(route, done, post);
            self.hand_on(post);
        }
    }

    /// Serves a message another loop sent for the shards owned here.
    pub(in crate::server) fn serve_msg(&mut self, msg: Msg, post: &mut Post) {
        match msg {
            Msg::Run(run) => {
                let route = run.route;
                if let Some(done) = self.serve(run, post) {
                    self.deliver(route, done, post);
                }
                // After the answer: a parked receive that a put filled is
                // answered after the put (both through the same mailbox, in
                // order).
                self.hand_on(post);
            }
            Msg::List(list) => self.visit_list(list, post),
            Msg::Transit(t) => {
                self.owner.accept(t);
                self.hand_on(post);
            }
            Msg::Cancel { wait, reply } => self.cancel_here(wait, reply, post),
            Msg::Abandon { shard, receipts } => {
                self.owner.abandon(shard, &receipts);
                self.hand_on(post);
            }
            #[cfg(not(loom))]
            Msg::Lead(run) => match self.shared.fast.get().and_then(|f| f.route(&run)) {
                Some((g, home)) if home == self.index => self.lead(g, run, post),
                // Not (or no longer) this node's to run.
                _ => {
                    if let Some(cluster) = self.shared.cluster {
                        post.send(cluster, Msg::Run(run));
                    }
                }
            },
            #[cfg(not(loom))]
            Msg::CancelPart {
                part,
                wait,
                lp,
                conn,
                answer,
            } => self.cancel_part_here(part, wait, (lp, conn), answer, post),
            #[cfg(not(loom))]
            Msg::Engine { part, job } => {
                job(self.engine(part));
                // What it ran may have filled receives parked here.
                self.after_engine(part, post);
            }
            _ => debug_assert!(false, "not a message for a shard's owner"),
        }
    }

    /// Ends the leases of an answer that can no longer be written (its
    /// connection closed): the messages are visible again at once, on
    /// whichever loop owns `shard`.
    pub(in crate::server) fn abandon(
        &mut self,
        shard: usize,
        receipts: Vec<fila_core::Receipt>,
        post: &mut Post,
    ) {
        if receipts.is_empty() {
            return;
        }
        if let Some(cluster) = self.shared.cluster {
            post.send(cluster, Msg::Abandon { shard, receipts });
            return;
        }
        let dest = self.owner_of(shard);
        if dest == self.index {
            self.owner.abandon(shard, &receipts);
            self.hand_on(post);
        } else {
            post.send(dest, Msg::Abandon { shard, receipts });
        }
    }

    fn unpark_count(&self) {
        self.shared.parked.fetch_sub(1, Ordering::AcqRel);
        self.shared.metrics.parked.fetch_sub(1, Ordering::Relaxed);
    }

    /// Cancels a parked receive of a shard owned here.
    fn cancel_here(&mut self, wait: WaitId, reply: Option<Route>, post: &mut Post) {
        if self.owner.cancel_wait(wait) {
            self.parked.remove(&wait);
            self.unpark_count();
            if let Some(route) = reply {
                self.deliver(route, Done::Cancelled, post);
            }
        }
        // Else it was answered: its answer is on its way to its loop.
    }

    /// (A cluster node.) Cancels receive `wait` parked in partition
    /// `part`'s engine (on the loop that keeps it) if it is still the
    /// receive of connection `conn` of loop `lp` (`Done::PartParked`), and
    /// answers it with no messages when `answer` (its client closed its
    /// side, or the server stops) — else its connection is gone.
    #[cfg_attr(loom, allow(unused_variables))]
    pub(in crate::server) fn cancel_part(
        &mut self,
        part: usize,
        wait: WaitId,
        (lp, conn): (usize, ConnRef),
        answer: bool,
        post: &mut Post,
    ) {
        #[cfg(not(loom))]
        {
            // A partition engine's shards are on the loops as a single
            // node's are.
            let home = fila_core::owner_of_shard(wait.shard(), self.shared.loops.owners());
            if home == self.index {
                self.cancel_part_here(part, wait, (lp, conn), answer, post);
            } else {
                let msg = Msg::CancelPart {
                    part,
                    wait,
                    lp,
                    conn,
                    answer,
                };
                post.send(home, msg);
            }
        }
    }

    /// Cancels a parked receive wherever its shard is owned; `reply` (its
    /// connection's) is answered `Cancelled` if it was still parked.
    pub(in crate::server) fn cancel_wait(
        &mut self,
        wait: WaitId,
        reply: Option<Route>,
        post: &mut Post,
    ) {
        let dest = self.owner_of(wait.shard());
        if dest == self.index {
            self.cancel_here(wait, reply, post);
        } else {
            post.send(dest, Msg::Cancel { wait, reply });
        }
    }

    /// (A cluster node.) Lets out the held answers whose entries' outcome
    /// is known (a request whose entry was refused runs again at the
    /// cluster node's endpoint).
    pub(in crate::server) fn committed(&mut self, post: &mut Post) {
        let Some(cluster) = self.shared.cluster else {
            return;
        };
        use super::held::Released;
        let mut done = std::mem::take(&mut self.held.done);
        self.held
            .take_done(self.index, &self.shared.told, &mut done);
        for released in done.drain(..) {
            match released {
                Released::Answer(route, answer) => {
                    self.deliver(route, Done::Answer(answer, false), post)
                }
                Released::Again(job) => post.send(cluster, Msg::Run(*job)),
            }
        }
        self.held.done = done;
    }

    /// Sends an answer to the loop of its connection (this one: kept for
    /// [`ShardHost::next_local`]).
    fn deliver(&mut self, route: Route, done: Done, post: &mut Post) {
        if route.lp == self.index {
            self.local.push_back((route, done));
        } else {
            post.send(route.lp, Msg::Done { route, done });
        }
    }

    /// Hands on what the owner's last call produced: parked receives it
    /// completed are answered, dead letters go to their shards' loops.
    fn hand_on(&mut self, post: &mut Post) {
        if !self.owner.has_output() {
            return;
        }
        for c in self.owner.take_completions() {
            // The wait ended by its answer: it counts no more, whether or
            // not its connection is still there.
            let Some(route) = self.parked.remove(&c.wait) else {
                debug_assert!(false, "a completion for a receive not parked here");
                continue;
            };
            self.unpark_count();
            self.deliver(route, Done::Late(c.result), post);
        }
        let shards = self.shared.totals.shard_count();
        for t in self.owner.take_transit() {
            let dest = self.owner_of(t.shard(shards));
            post.send(dest, Msg::Transit(t));
        }
    }

    /// Runs a request on a shard owned here, or passes it on to the loop
    /// that owns it; answers the outcome when it ran here (then the caller
    /// delivers it and hands on what the call produced).
    fn serve(&mut self, mut run: RunJob, post: &mut Post) -> Option<Done> {
        if !run.checked {
            if let Some(target) = dispatch::target_of(&run.req) {
                let dest = self.owner_of_queue(target);
                if dest != self.index {
                    post.send(dest, Msg::Run(run));
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
            post.send(dest, Msg::Run(run));
            return None;
        }
        let route = run.route;
        let before = self.owner.changes();
        let done = match dispatch::run(&mut self.owner, run.req, route.room) {
            Outcome::Answer(r) => Done::Answer(r, self.owner.changes() != before),
            Outcome::Parked(wait) => self.confirm_park(wait, run.may_park, route),
        };
        Some(done)
    }

    /// A receive parked here: kept (its answer to go to `route`) if the
    /// limits allow, else cancelled and answered `resource_exhausted`.
    fn confirm_park(&mut self, wait: WaitId, may_park: bool, route: Route) -> Done {
        let shared = self.shared.clone();
        if let Some((limit, max)) = park_limit(&shared, may_park) {
            // Never leave it parked: it would hold messages for nobody.
            // Nothing ran since it parked, so it is still there.
            if self.owner.cancel_wait(wait) {
                return Done::Answer(park_refused(limit, max), false);
            }
            if limit == "max_parked_per_connection" {
                shared.parked.fetch_add(1, Ordering::AcqRel);
            }
        }
        shared.metrics.parked.fetch_add(1, Ordering::Relaxed);
        self.parked.insert(wait, route);
        Done::Parked(wait)
    }

    /// Starts a list of queues: this loop's shards, then each other loop's.
    pub(in crate::server) fn start_list(
        &mut self,
        route: Route,
        req: Request,
        token: Option<(&auth::TokenTable, TokenId)>,
        post: &mut Post,
    ) {
        if let Some(list) = ListJob::new(&self.shared, route, req, token) {
            match self.shared.cluster {
                Some(cluster) => post.send(cluster, Msg::List(list)),
                None => self.visit_list(list, post),
            }
        }
    }

    fn visit_list(&mut self, mut list: Box<ListJob>, post: &mut Post) {
        list.gather(&self.owner);
        list.left -= 1;
        if list.left > 0 {
            let next = (self.index + 1) % self.shared.loops.owners();
            post.send(next, Msg::List(list));
            return;
        }
        let (route, done) = (*list).finish();
        self.deliver(route, done, post);
    }

    /// A scrape's part: the first `max` queues of the shards owned here,
    /// with their stats.
    pub(in crate::server) fn scrape(&mut self, ask: ScrapeAsk, post: &mut Post) {
        let names = self.owner.list_queues("", "", ask.max);
        let stats = names
            .into_iter()
            .filter_map(|q| self.owner.stats(&q).ok().map(|s| (q, s)))
            .collect();
        self.hand_on(post);
        let _ = ask.reply.send(stats);
    }

    /// Stops with every other loop while the log writer drains the shards'
    /// buffers (see [`Pause`]).
    pub(in crate::server) fn pause(&mut self, pause: Arc<Pause>) {
        pause.arrive();
    }

    /// The log writer's question: the next piece of one of this loop's
    /// shards for a snapshot (a pause of this loop only, for one piece).
    pub(in crate::server) fn export(&mut self, mut ask: ExportAsk) {
        let mut parts = Vec::new();
        self.owner
            .export_piece(&mut ask.cursor, ask.max_messages, ask.max_bytes, &mut parts);
        let _ = ask.reply.send((ask.cursor, parts));
    }
}
