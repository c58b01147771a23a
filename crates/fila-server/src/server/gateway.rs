//! The web console's way to the shards (its listener runs on a thread of
//! its own): the same as a binary request's.
//!
//! The gateway is an endpoint of the loops' post like a loop that owns no
//! shard: a request goes as `Msg::Run` (a list as `Msg::List`) to the
//! mailbox of the loop that owns its queue's shard, that loop's shard host
//! runs it and sends the answer back as `Msg::Done` to the gateway's own
//! mailbox, which one task of the listener's runtime drains (woken through
//! the doorbell like a loop). A receive that waits parks in the shard host
//! exactly as a binary one does, and its late answer comes back the same
//! way; a request whose HTTP client went away has its parked receive
//! cancelled, and a late answer nobody waits for gives its leases back.
//! With `sync = always` an answer waits for the log exactly as on the
//! binary protocol (the call logged a change, or it hands out a message
//! that may not be durable yet). On a cluster node every request goes to
//! the cluster node's endpoint instead (`server/cluster`), which forwards
//! it to the partition's leader when this node does not lead it; nothing
//! parks there.

#![cfg_attr(loom, allow(dead_code))]

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fila_core::{Message, WaitId};
use fila_proto::{self as proto, Request};
use tokio::sync::{oneshot, Notify};

use crate::auth::TokenId;
use crate::dispatch::{self, Answer};
use crate::server::front::ConnRef;
use crate::server::host::{Done, ListJob, Route, RunJob};
use crate::server::log_wait::LogWait;
use crate::server::mailbox::{Msg, Post};
use crate::server::Shared;
use fila_sqs::error::{Kind, SqsError};

/// What a request came to.
pub(in crate::server) enum Reply {
    /// The answer of a call.
    Answer(Answer),
    /// A receive that waited: its messages (none when its wait ended).
    Late(Result<Vec<Message>, fila_core::Error>),
}

/// A request away at a shard's owner.
struct Pending {
    tx: oneshot::Sender<Reply>,
    route: Route,
    /// Its receive parked there.
    parked: Option<WaitId>,
    fields: proto::Fields,
}

/// Answers held until the log is durable up to their marks.
struct Held {
    mark: u64,
    tx: oneshot::Sender<Reply>,
    reply: Reply,
}

struct State {
    post: Post,
    next: u64,
    pending: HashMap<u64, Pending>,
    held: Vec<Held>,
}

/// The gateway (see the module docs).
pub(in crate::server) struct Gateway {
    pub(in crate::server) index: usize,
    pub(in crate::server) shared: Arc<Shared>,
    notify: Arc<Notify>,
    log: LogWait,
    state: RefCell<State>,
}

/// Cancels what a request left at a shard's owner when its caller goes
/// away before the answer.
struct Guard<'a> {
    gateway: &'a Gateway,
    id: u64,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        let mut state = self.gateway.state.borrow_mut();
        if let Some(p) = state.pending.remove(&self.id) {
            if let Some(wait) = p.parked {
                let dest =
                    fila_core::owner_of_shard(wait.shard(), self.gateway.shared.loops.owners());
                state.post.send(dest, Msg::Cancel { wait, reply: None });
                state.post.flush();
            }
        }
    }
}

impl Gateway {
    pub(in crate::server) fn new(
        index: usize,
        shared: Arc<Shared>,
        notify: Arc<Notify>,
    ) -> Gateway {
        Gateway {
            index,
            log: LogWait::new(index, shared.clone()),
            state: RefCell::new(State {
                post: Post::new(index, shared.loops.clone()),
                next: 0,
                pending: HashMap::new(),
                held: Vec::new(),
            }),
            shared,
            notify,
        }
    }

    /// Requests away at the shards' owners, and answers held for the log.
    pub(in crate::server) fn in_progress(&self) -> usize {
        let state = self.state.borrow();
        state.pending.len() + state.held.len()
    }

    /// Runs `req` (authorized by the caller) on the loop that owns its
    /// queue's shard and answers what it came to; `room` bounds the bytes
    /// of messages its answer may carry.
    pub(in crate::server) async fn call(
        &self,
        req: Request,
        token: Option<(&crate::auth::TokenTable, TokenId)>,
        room: usize,
    ) -> Result<Reply, SqsError> {
        if self.shared.stopping.load(Ordering::Acquire) {
            return Err(SqsError::new(
                Kind::ServiceUnavailable,
                "The server is stopping.",
            ));
        }
        let fields = match &req {
            Request::Receive(r) => r.fields,
            _ => proto::Fields::ALL,
        };
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut state = self.state.borrow_mut();
            if state.post.is_backlogged() {
                // The loops' mailboxes have been full for a while: what this
                // gateway already sent goes first; SDKs try this again.
                return Err(SqsError::new(
                    Kind::ServiceUnavailable,
                    "The server is busy; try again.",
                ));
            }
            let id = state.next;
            state.next += 1;
            let owners = self.shared.loops.owners();
            let shards = self.shared.totals.shard_count();
            let owner_of =
                |q: &str| fila_core::owner_of_shard(fila_core::shard_of(q, shards), owners);
            let route = Route {
                lp: self.index,
                conn: ConnRef {
                    slot: id as usize,
                    generation: 0,
                },
                request_id: id,
                opcode: req.opcode() as u8,
                started: Instant::now(),
                room,
                park: id,
                fields,
                shard: crate::ops::queue_of(&req).map_or(0, |q| fila_core::shard_of(q, shards)),
                forward: true,
            };
            if let Request::ListQueues { .. } = &req {
                let Some(list) = ListJob::new(&self.shared, route, req, token) else {
                    return Err(SqsError::new(Kind::InternalError, "not a list"));
                };
                state
                    .post
                    .send(self.shared.cluster.unwrap_or(0), Msg::List(list));
            } else {
                let dest = match dispatch::target_of(&req) {
                    // A cluster node: every queue is its partition's.
                    _ if self.shared.cluster.is_some() => self.shared.cluster.unwrap_or(0),
                    Some(target) => owner_of(target),
                    None => match crate::ops::queue_of(&req) {
                        Some(q) => owner_of(q),
                        None => {
                            return Err(SqsError::new(
                                Kind::InternalError,
                                "a request without a queue",
                            ))
                        }
                    },
                };
                state.post.send(
                    dest,
                    Msg::Run(RunJob {
                        route,
                        req,
                        may_park: true,
                        checked: false,
                    }),
                );
            }
            state.pending.insert(
                id,
                Pending {
                    tx,
                    route,
                    parked: None,
                    fields,
                },
            );
            if state.post.flush() {
                // A mailbox was full: the mail task pushes it again.
                self.notify.notify_one();
            }
            id
        };
        let guard = Guard { gateway: self, id };
        let reply = rx.await;
        std::mem::forget(guard);
        reply.map_err(|_| SqsError::new(Kind::ServiceUnavailable, "The server is stopping."))
    }

    /// Ends every receive parked for the gateway (the server is stopping):
    /// each is answered with no messages.
    pub(in crate::server) fn end_parked(&self) {
        let mut state = self.state.borrow_mut();
        let parked: Vec<(WaitId, Route)> = state
            .pending
            .values()
            .filter_map(|p| p.parked.map(|w| (w, p.route)))
            .collect();
        for (wait, route) in parked {
            let dest = fila_core::owner_of_shard(wait.shard(), self.shared.loops.owners());
            state.post.send(
                dest,
                Msg::Cancel {
                    wait,
                    reply: Some(route),
                },
            );
        }
        state.post.flush();
    }

    /// Serves the gateway's mailbox until the server stops and nothing is
    /// in progress.
    pub(in crate::server) async fn mail(self: Rc<Self>) {
        let me = self.shared.loops.get(self.index);
        loop {
            let mut took = false;
            while let Some(msg) = me.take() {
                self.on_msg(msg);
                took = true;
            }
            if took {
                me.took();
            }
            self.release_held();
            let left = self.state.borrow_mut().post.flush();
            let stopping = self.shared.stopping.load(Ordering::Acquire);
            me.drained
                .store(stopping && self.in_progress() == 0, Ordering::SeqCst);
            me.about_to_sleep();
            if me.has_mail() {
                me.awake();
                continue;
            }
            if left || stopping {
                // Pushed again shortly; a stopping gateway looks again.
                tokio::time::sleep(Duration::from_millis(if left { 1 } else { 20 })).await;
            } else {
                self.notify.notified().await;
            }
            me.awake();
        }
    }

    fn on_msg(&self, msg: Msg) {
        let Msg::Done { route, done } = msg else {
            debug_assert!(false, "the gateway was sent something other than an answer");
            return;
        };
        let id = route.request_id;
        let mut state = self.state.borrow_mut();
        match done {
            // A gateway holds no output room per request; on a cluster its
            // requests go to the node's endpoint, never to a partition's
            // home loop (no `PartParked`).
            Done::Waits(_) | Done::PartParked { .. } => {}
            Done::Parked(wait) => match state.pending.get_mut(&id) {
                Some(p) => p.parked = Some(wait),
                None => {
                    // Its caller went away as it parked.
                    let dest = fila_core::owner_of_shard(wait.shard(), self.shared.loops.owners());
                    state.post.send(dest, Msg::Cancel { wait, reply: None });
                }
            },
            Done::Answer(answer, logged) => {
                let Some(p) = state.pending.remove(&id) else {
                    self.abandon(&mut state.post, route.shard, answer.receipts());
                    return;
                };
                let mark = self.log.hold_mark(logged, &answer, Some(route.shard));
                self.answer(&mut state, p.tx, Reply::Answer(answer), mark);
            }
            Done::Late(result) => {
                let Some(p) = state.pending.remove(&id) else {
                    if let Ok(ms) = result {
                        let receipts = ms.iter().filter_map(|m| m.receipt).collect();
                        self.abandon(&mut state.post, route.shard, receipts);
                    }
                    return;
                };
                let mark = match &result {
                    Ok(ms) if !ms.is_empty() => {
                        let view = dispatch::messages_of(ms.clone(), p.fields);
                        self.log.hold_mark(false, &view, Some(route.shard))
                    }
                    _ => None,
                };
                self.answer(&mut state, p.tx, Reply::Late(result), mark);
            }
            Done::Cancelled => {
                if let Some(p) = state.pending.remove(&id) {
                    let _ = p.tx.send(Reply::Late(Ok(Vec::new())));
                }
            }
        }
    }

    fn answer(
        &self,
        state: &mut State,
        tx: oneshot::Sender<Reply>,
        reply: Reply,
        mark: Option<u64>,
    ) {
        match mark {
            Some(mark) => {
                state.held.push(Held { mark, tx, reply });
                self.shared
                    .loops
                    .get(self.index)
                    .waiting_for_log
                    .store(true, Ordering::SeqCst);
            }
            None => {
                let _ = tx.send(reply);
            }
        }
    }

    /// Lets out the answers whose marks are durable.
    fn release_held(&self) {
        let Some(marks) = self.shared.marks.as_ref() else {
            return;
        };
        let mut state = self.state.borrow_mut();
        if state.held.is_empty() {
            return;
        }
        let durable = marks.durable();
        let (due, kept): (Vec<Held>, Vec<Held>) = std::mem::take(&mut state.held)
            .into_iter()
            .partition(|h| h.mark <= durable);
        state.held = kept;
        self.shared
            .loops
            .get(self.index)
            .waiting_for_log
            .store(!state.held.is_empty(), Ordering::SeqCst);
        for h in due {
            let _ = h.tx.send(h.reply);
        }
    }

    /// Ends leases nobody will get (their caller went away).
    fn abandon(&self, post: &mut Post, shard: usize, receipts: Vec<fila_core::Receipt>) {
        if receipts.is_empty() {
            return;
        }
        let dest = self
            .shared
            .cluster
            .unwrap_or_else(|| fila_core::owner_of_shard(shard, self.shared.loops.owners()));
        post.send(dest, Msg::Abandon { shard, receipts });
    }
}
