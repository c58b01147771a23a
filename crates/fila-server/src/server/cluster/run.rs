//! A request on a cluster node: routed to its queue's partition and run
//! on that partition's leader — here, or (for a gateway, which cannot
//! follow `not_leader`) forwarded; a list of queues and the server's stats
//! gathered from every partition's leader; and the leader's side of what
//! other nodes forward.

use std::time::{Duration, Instant};

use fila_cluster::node::{Course, HeldTo, Step};
use fila_cluster::ReplicaError;
use fila_core::Owner;
use fila_proto::{ErrorCode, Opcode, Request, Response};

use super::forward::{self, Ask, Placing};
use super::groups::{Cluster, Held, Part, MAP, META};
use super::turns::{Turn, Waiting};
use super::POLL;
use crate::dispatch::{self, error, Answer, Outcome};
use crate::server::host::{Done, ListJob, Route, RunJob};

/// Whether a request came from a caller that cannot follow a
/// `not_leader` answer (the SQS API, the console): one a follower forwards
/// to its leader.
fn forwards(route: &Route) -> bool {
    route.forward
}

/// The partition `req` goes to: its queue's (placed first by a create),
/// partition 0 for a request without a queue; an answer when its queue is
/// placed nowhere.
async fn partition_of(c: &Cluster, req: &Request) -> Result<u32, Answer> {
    let Some(queue) = crate::ops::queue_of(req) else {
        return Ok(0);
    };
    let placing = match req {
        Request::CreateQueue { .. } => Placing::Create(dispatch::target_of(req).map(str::to_owned)),
        _ => Placing::Find,
    };
    match c.placement(queue, placing).await? {
        Some(p) if (p as usize) < c.parts.len() => Ok(p),
        Some(p) => Err(error(
            ErrorCode::INTERNAL,
            format!("internal: queue {queue} lives in partition {p}, which this node does not run"),
        )
        .into()),
        // A queue placed nowhere does not exist.
        None if matches!(
            req,
            Request::DeleteQueue {
                if_exists: true,
                ..
            }
        ) =>
        {
            Err(Response::Ok.into())
        }
        None => Err(Answer::failed(&fila_core::Error::QueueNotFound(
            queue.to_owned(),
        ))),
    }
}

/// A request on its partition: run on the leader's engine (a receive
/// that waits, again when a request here may have made messages visible
/// or the engine's next timer is due, until messages come or the wait
/// ends: [`nap`]); a gateway's request on a follower is forwarded to the
/// leader.
pub(super) async fn run_job(
    c: &Cluster,
    job: RunJob,
    turn: &mut Turn,
    route: &mut Route,
) -> Answer {
    run_since(c, job, turn, route, Instant::now()).await
}

/// [`run_job`] for a request that began at `started` (a receive another
/// node held part of its wait).
async fn run_since(
    c: &Cluster,
    job: RunJob,
    turn: &mut Turn,
    route: &mut Route,
    started: Instant,
) -> Answer {
    match job.req {
        Request::ChangeCluster(change) => {
            return match c.node.change_everywhere(change).await {
                Ok(()) => Response::Ok.into(),
                Err(r) => c.refused(r),
            };
        }
        Request::ServerStats => return stats_all(c).await,
        _ => {}
    }
    let g = match partition_of(c, &job.req).await {
        Ok(g) => g,
        Err(answer) => return answer,
    };
    let part = &c.parts[g as usize];
    // Its queue's shard: whose timers a waiting receive sleeps until.
    let shard = crate::ops::queue_of(&job.req).map_or(0, |q| part.shard_of(q));
    let mut room = job.route.room;
    let mut wait: Option<Duration> = None;
    // A receive that waits is held by the leader while it can be.
    let waits = matches!(&job.req, Request::Receive(r) if r.wait_ms != Some(0));
    let mut course = Course::new(c.id, forwards(&job.route), waits);
    let mut waiting: Option<Waiting<'_>> = None;
    // A receive that may wait listens for its queue's messages from
    // before its first look.
    let listening = match &job.req {
        Request::Receive(r) if r.wait_ms != Some(0) => {
            Some(c.waiters[g as usize].listen(&r.queue.name))
        }
        _ => None,
    };
    // Whether the next look must be answered (confirmed by a quorum when
    // it finds nothing): the first (its wait is not known before it) and
    // the last; a waiting receive's looks between them that find nothing
    // are dropped.
    let mut answered = true;
    loop {
        // Before the look: a wake after it is not missed.
        let seen = listening.as_ref().map_or(0, |l| l.woken().seen());
        let tried = match attempt_unless(part, job.req.clone(), room, !answered).await {
            Ok(Some(done)) => Ok(done),
            Ok(None) => {
                // Nothing yet: wait on, or look once more, answered.
                let left = wait.map_or(Duration::ZERO, |w| w.saturating_sub(started.elapsed()));
                match &listening {
                    Some(l) if !left.is_zero() && !c.stopping() => {
                        turn.sleep_or(nap(part, shard, left).await, l.woken(), seen)
                            .await;
                    }
                    _ => answered = true,
                }
                continue;
            }
            // A node holding no replica of the partition learns its
            // leader from one that does.
            Err(e) => Err(c.named(g, e).await),
        };
        // Where it goes from here: `fila_cluster::node::Course`.
        let waited = started.elapsed();
        let ran = match tried {
            Ok(done) => Ok(done),
            Err(e) => match course.refused(&e, waited, c.stopping()) {
                Step::Hold(leader) => {
                    let ask = Ask::Wait {
                        group: g,
                        room,
                        waited,
                        req: Box::new(job.req.clone()),
                    };
                    if waiting.is_none() {
                        match Waiting::start(&c.shared, job.may_park) {
                            Ok(w) => waiting = Some(w),
                            Err(refused) => return refused,
                        }
                    }
                    let (to, answer) = match c.forward_held_while_leading(g, leader, &ask).await {
                        Held::Done(answer) => {
                            let not_leader = answer.code() == Some(ErrorCode::NOT_LEADER);
                            (HeldTo::Answered { not_leader }, Some(answer))
                        }
                        Held::Poll => (HeldTo::Unheld, None),
                        Held::Failed(answer) => (HeldTo::Failed, Some(answer)),
                        Held::Moved => (HeldTo::Moved, None),
                    };
                    match (course.held(to, started.elapsed(), c.stopping()), answer) {
                        (Step::Answer, Some(answer)) => return answer,
                        (Step::Pause, _) => {
                            turn.sleep(POLL).await;
                            continue;
                        }
                        (Step::Unknown, _) => return unknown(c, g),
                        _ => continue,
                    }
                }
                Step::Forward(leader) => {
                    let ask = Ask::Run {
                        group: g,
                        room,
                        req: Box::new(job.req.clone()),
                    };
                    let done = c.forward_while_leading(g, leader, &ask).await;
                    match (course.forwarded(done.is_none(), started.elapsed()), done) {
                        (Step::Answer, Some(done)) => done,
                        (Step::Unknown, _) => return unknown(c, g),
                        _ => continue,
                    }
                }
                Step::Pause => {
                    turn.sleep(POLL).await;
                    continue;
                }
                _ => Err(c.refusal(g, &e)),
            },
        };
        let (answer, wait_ms) = match ran {
            Ok(done) => done,
            Err(answer) => return answer,
        };
        unplace_if_gone(c, part, &job.req, &answer).await;
        wake_receives(c, g, &Wakes::of(&job.req), &answer);
        let wait = *wait.get_or_insert(Duration::from_millis(wait_ms));
        let empty = matches!(&answer, Answer::Messages(_, ms) if ms.is_empty());
        let left = wait.saturating_sub(started.elapsed());
        if !empty || left.is_zero() || c.stopping() {
            return answer;
        }
        if waiting.is_none() {
            match Waiting::start(&c.shared, job.may_park) {
                Ok(w) => waiting = Some(w),
                Err(refused) => return refused,
            }
            room = hold_less(c, part, &job.req, route).await;
        }
        let Some(listening) = &listening else {
            return answer;
        };
        answered = false;
        turn.sleep_or(nap(part, shard, left).await, listening.woken(), seen)
            .await;
    }
}

/// The answer of a request whose leaders kept changing under its
/// forwards ([`Step::Unknown`]).
fn unknown(c: &Cluster, g: u32) -> Answer {
    c.refusal(g, &ReplicaError::Unknown { leader: None })
}

/// A receive that starts waiting holds only the room its answer could
/// need — `max_messages` of its queue's largest messages — as a receive
/// parked on a single node does: its connection's loop is told
/// (`Done::Waits`) and reads the connection's next requests meanwhile,
/// and `route` says the new room. Answers the room its looks may fill.
async fn hold_less(c: &Cluster, part: &Part, req: &Request, route: &mut Route) -> usize {
    let Request::Receive(r) = req else {
        return route.room;
    };
    // Only a loop's connection holds room (not a gateway, not a forward).
    if route.lp >= c.shared.loops.owners() {
        return route.room;
    }
    let queue = r.queue.name.clone();
    let largest = part
        .serving(part.shard_of(&queue), move |owner| {
            owner
                .queue_settings(&queue)
                .ok()
                .map(|s| fila_core::answer_bytes_max(s.max_message_bytes))
        })
        .await
        .flatten();
    let Some(largest) = largest else {
        return route.room;
    };
    let need = largest.saturating_mul(u64::from(r.max_messages));
    let need = usize::try_from(need).unwrap_or(usize::MAX);
    if need < route.room {
        // Told with the room it held until now.
        let held = *route;
        route.room = need;
        super::answer(&c.shared, held, Done::Waits(need)).await;
    }
    route.room
}

/// How long a receive waiting on its partition's leader here sleeps before
/// it looks again, at most `left` (its wait's end): until the next timer
/// of its queue's shard, `shard` (a lease or a delay that ends may make a
/// message visible then; the look runs the timers that are due), at least
/// a millisecond. A put, a release or a move run here wakes it sooner
/// ([`wake_receives`]), so do messages another loop's shard moved into the
/// partition (`Fast::moved_in`), and so does the engine's being dropped once this
/// node no longer leads (`status::let_go`). An engine that is not serving
/// (being rebuilt for a new leadership) is looked at again within
/// [`POLL`].
async fn nap(part: &Part, shard: usize, left: Duration) -> Duration {
    let due = match part.next_due(shard).await {
        Some(due) => due,
        None if part.serving(shard, |_| ()).await.is_some() => left,
        None => POLL,
    };
    due.max(Duration::from_millis(1)).min(left)
}

/// Which receives waiting on a partition's leader here a request may have
/// given messages (its row's [`crate::ops::Wakes`]). A put made on
/// another node is forwarded here and wakes them the same way; a lease or
/// a delay that ends wakes them at the engine's timer ([`nap`]). Taken
/// before the request runs (it is moved into the run): the queue's name,
/// not the request.
enum Wakes {
    None,
    Put(String, usize),
    Changed(String),
    All,
}

impl Wakes {
    fn of(req: &Request) -> Wakes {
        let queue = || crate::ops::queue_of(req).unwrap_or_default().to_owned();
        match crate::ops::of(req).wakes {
            crate::ops::Wakes::Nothing => Wakes::None,
            crate::ops::Wakes::PerMessage => {
                let n = match req {
                    Request::Put { messages, .. } => messages.len(),
                    _ => 1,
                };
                Wakes::Put(queue(), n)
            }
            crate::ops::Wakes::Queue => Wakes::Changed(queue()),
            crate::ops::Wakes::Partition => Wakes::All,
        }
    }
}

/// After a request on partition `g` here (unless it failed), wakes the
/// receives waiting on it that it may have given messages ([`Wakes`]).
fn wake_receives(c: &Cluster, g: u32, wakes: &Wakes, answer: &Answer) {
    let Some(waiters) = c.waiters.get(g as usize) else {
        return;
    };
    if answer.is_error() {
        return;
    }
    match wakes {
        Wakes::None => {}
        Wakes::Put(queue, n) => waiters.put(queue, *n),
        Wakes::Changed(queue) => waiters.changed(queue),
        Wakes::All => waiters.wake_all(),
    }
}

/// A queue deleted, or whose create failed and that does not exist,
/// frees its name: its placement is taken away (so another partition may
/// take it, and it counts no more against `max_queues`).
async fn unplace_if_gone(c: &Cluster, part: &Part, req: &Request, answer: &Answer) {
    let name = match (req, answer) {
        (Request::DeleteQueue { name, .. }, Answer::Wire(Response::Ok)) => name.clone(),
        (Request::CreateQueue { name, .. }, Answer::Wire(Response::Error(_))) => {
            let q = name.clone();
            match part
                .read(part.shard_of(&q), move |owner| owner.has_queue(&q))
                .await
            {
                Ok(false) => name.clone(),
                _ => return,
            }
        }
        _ => return,
    };
    if c.placement(&name, Placing::Remove).await.is_err() {
        tracing::warn!(queue = %name, "a queue that is gone keeps its placement");
    }
}

/// One look of `req` on this node's replica of its partition: its answer,
/// and the wait a receive asked for (or its queue's default). A read is
/// answered only once the leadership is confirmed with a quorum (a
/// deposed leader that does not know it refuses it).
async fn attempt(part: &Part, req: Request, room: usize) -> Result<(Answer, u64), ReplicaError> {
    let done = attempt_unless(part, req, room, false).await?;
    Ok(done.expect("never dropped"))
}

/// [`attempt`]; with `droppable`, a receive that finds nothing is not
/// answered (`None`): it changed nothing, so no quorum is asked to
/// confirm the leadership — a receive waiting for messages looks so
/// between its first look and its last.
async fn attempt_unless(
    part: &Part,
    mut req: Request,
    room: usize,
    droppable: bool,
) -> Result<Option<(Answer, u64)>, ReplicaError> {
    if let Request::ServerStats = req {
        // A partition's part of the server's stats (its engine's totals,
        // which every shard has).
        let figures = part.read(0, |owner| figures(&owner.totals())).await?;
        return Ok(Some((Response::ServerStats(figures).into(), 0)));
    }
    let asked_wait = match &mut req {
        Request::Receive(r) => Some(r.wait_ms.replace(0)),
        _ => None,
    };
    let read = is_read(&req);
    let shard = crate::ops::queue_of(&req).map_or(0, |q| part.shard_of(q));
    if let Some(target) = dispatch::target_of(&req) {
        let on = part.shard_of(target);
        if on != shard {
            // A dead-letter target on another shard of the engine is
            // checked there first, as a single node checks it.
            if let Err(answer) = dispatch::precheck(&req) {
                return Ok(Some((answer.into(), 0)));
            }
            let name = target.to_owned();
            if !part.read(on, move |owner| owner.has_queue(&name)).await? {
                let e = fila_core::Error::QueueNotFound(target.to_owned());
                return Ok(Some((Answer::failed(&e), 0)));
            }
        }
    }
    let work = move |owner: &mut Owner| {
        let default_wait = match (&asked_wait, crate::ops::queue_of(&req)) {
            (Some(None), Some(q)) => owner
                .queue_settings(q)
                .map(|s| s.receive_wait_default_ms)
                .unwrap_or(0),
            (Some(Some(ms)), _) => *ms,
            _ => 0,
        };
        (run_on(owner, req, room), default_wait)
    };
    if read {
        part.read(shard, work).await.map(Some)
    } else {
        let empty = |(answer, _): &(Answer, u64)| {
            droppable && matches!(answer, Answer::Messages(_, ms) if ms.is_empty())
        };
        part.execute_unless(shard, work, empty).await
    }
}

/// Whether a request only reads a queue (answered through the read
/// index): its row in `ops.rs` says so.
fn is_read(req: &Request) -> bool {
    crate::ops::of(req).cluster == crate::ops::OnCluster::Read
}

/// The server stats a partition's engine adds up to the cluster's.
const ADDED: [&str; 4] = [
    "queues",
    "stored_bytes",
    "stored_bytes_reserved",
    "max_stored_bytes",
];

/// A partition's figures: what [`ADDED`] names, and whether it refuses
/// puts for its disk.
fn figures(t: &fila_core::Totals) -> Vec<(String, u64)> {
    vec![
        (ADDED[0].into(), t.queue_count()),
        (ADDED[1].into(), t.stored_bytes()),
        (ADDED[2].into(), t.reserved_bytes()),
        (ADDED[3].into(), t.limits().max_stored_bytes),
        (
            "puts_refused_disk".into(),
            u64::from(t.disk() != fila_core::DiskState::Ok),
        ),
    ]
}

/// The server's stats: this node's connections and requests, the
/// cluster's queues and bytes — every partition's, as its leader holds
/// them.
async fn stats_all(c: &Cluster) -> Answer {
    let mut stats = c.shared.metrics.server_stats(&c.shared.totals);
    for (name, v) in stats.iter_mut() {
        match name.as_str() {
            "max_queues" => *v = c.shared.config.max_queues,
            "shards" => *v = c.parts.len() as u64,
            n if ADDED.contains(&n) || n == "puts_refused_disk" => *v = 0,
            _ => {}
        }
    }
    for (g, part) in c.parts.iter().enumerate() {
        let g = g as u32;
        let ask = Ask::Run {
            group: g,
            room: 0,
            req: Box::new(Request::ServerStats),
        };
        let here = || attempt(part, Request::ServerStats, 0);
        let answer = match c.on_leader(g, ask, here).await {
            Ok((answer, _)) | Err(answer) => answer,
        };
        let Answer::Wire(Response::ServerStats(figures)) = answer else {
            return answer;
        };
        for (name, v) in figures {
            if let Some((_, sum)) = stats.iter_mut().find(|(n, _)| *n == name) {
                if name == "puts_refused_disk" {
                    *sum = (*sum).max(v);
                } else {
                    *sum = sum.saturating_add(v);
                }
            }
        }
    }
    Response::ServerStats(stats).into()
}

/// A list of queues: every partition's part, from its leader, merged into
/// one page.
pub(super) async fn list_all(c: &Cluster, list: &ListJob) -> Answer {
    let (ranges, after, limit) = list.parts();
    let mut names = Vec::new();
    let mut more = false;
    for (g, part) in c.parts.iter().enumerate() {
        let g = g as u32;
        let ask = Ask::List {
            group: g,
            ranges: ranges
                .iter()
                .map(|r| fila_cluster::forward::Range {
                    prefix: r.prefix.clone(),
                    exact: r.exact,
                })
                .collect(),
            after: after.clone(),
            limit,
        };
        let here = || {
            let (ranges, after) = (ranges.clone(), after.clone());
            async move { list_part(part, ranges, after, limit).await.map(|a| (a, 0)) }
        };
        let answer = match c.on_leader(g, ask, here).await {
            Ok((answer, _)) | Err(answer) => answer,
        };
        if let Err(other) = gather_page(answer, &mut names, &mut more) {
            return other;
        }
    }
    page(names, more, limit)
}

/// Adds a page of names to `names` (`more`: it said more follow); an
/// answer that is not a page is handed back.
fn gather_page(answer: Answer, names: &mut Vec<String>, more: &mut bool) -> Result<(), Answer> {
    match answer {
        Answer::Wire(Response::Queues { names: mine, next }) => {
            *more |= next.is_some();
            names.extend(mine);
            Ok(())
        }
        other => Err(other),
    }
}

/// One page of the names several parts answered: each answered its first
/// `limit` names after the cursor, so the first `limit` of them all skip
/// none of any part's.
fn page(names: Vec<String>, more: bool, limit: usize) -> Answer {
    let (names, mut next) = fila_core::page_of(names, limit);
    if next.is_none() && more {
        next = names.last().cloned();
    }
    Response::Queues { names, next }.into()
}

/// A list of queues on every shard of `part`'s engine (each home's owner
/// lists its shards), as one page.
async fn list_part(
    part: &Part,
    ranges: Vec<crate::auth::Range>,
    after: String,
    limit: usize,
) -> Result<Answer, ReplicaError> {
    let mut names = Vec::new();
    let mut more = false;
    for shard in part.home_shards() {
        let list = ListJob::of_parts(nowhere(), ranges.clone(), after.clone(), limit);
        let answer = part.read(shard, move |owner| list_on(list, owner)).await?;
        if let Err(other) = gather_page(answer, &mut names, &mut more) {
            return Ok(other);
        }
    }
    Ok(page(names, more, limit))
}

/// Ends the leases of `receipts` on every shard of `part`'s engine (a
/// receipt of a queue on another shard changes nothing on this one).
async fn abandon_part(part: &Part, receipts: Vec<fila_core::Receipt>) -> Result<(), ReplicaError> {
    let receipts = std::sync::Arc::new(receipts);
    for shard in 0..part.shards() {
        let given = receipts.clone();
        part.execute(shard, move |owner| owner.abandon(shard, &given))
            .await?;
    }
    Ok(())
}

/// Leases of an answer nobody could take, given back on the partition
/// that made them (a receipt of another partition's key is no lease of
/// it, and changes nothing there).
pub(super) async fn abandon_all(c: &Cluster, receipts: Vec<fila_core::Receipt>) {
    for (g, part) in c.parts.iter().enumerate() {
        let ran = match abandon_part(part, receipts.clone()).await {
            Err(e) => Err(c.named(g as u32, e).await),
            done => done,
        };
        if let Err(ReplicaError::NotLeader { leader: Some(id) }) = ran {
            let ask = Ask::Abandon {
                group: g as u32,
                receipts: receipts.clone(),
            };
            let _ = c.forward_to(id, &ask).await;
        }
    }
}

/// The leader's side of a forward: runs what another node sent as its
/// own and answers it (see [`forward`]).
pub(super) async fn answer_forward(c: &Cluster, body: Vec<u8>) -> Vec<u8> {
    let ask = match Ask::decode(&body) {
        Ok(ask) => ask,
        Err(why) => return forward::refused(&why),
    };
    let g = ask.group();
    let part = c.parts.get(g as usize);
    if part.is_none() && g != META && g != MAP {
        return forward::refused(&format!("no partition {g} here"));
    }
    // A placement, a partition's leader: the node's own asks.
    if let Some(reply) = c.answer_own(&ask).await {
        return reply;
    }
    match (ask, part) {
        (Ask::Run { req, room, .. }, _) if req.opcode() == Opcode::ChangeCluster => {
            let Request::ChangeCluster(change) = *req else {
                return forward::refused("a cluster change that is none");
            };
            let (answer, index) = match c.change_here(g, change, room as u64).await {
                Ok(index) => (Response::Ok.into(), index),
                Err(e) => (c.refusal(g, &e), 0),
            };
            forward::encode_answer(&answer, Opcode::ChangeCluster as u8, index)
        }
        (
            Ask::Wait {
                room, waited, req, ..
            },
            Some(_),
        ) => {
            // Waits here as a receive of this node's own would, then
            // answers: a forward is not forwarded again (`not_leader`).
            let opcode = req.opcode() as u8;
            let mut route = nowhere();
            route.forward = false;
            route.room = room;
            let job = RunJob {
                route,
                req: *req,
                may_park: true,
                checked: true,
            };
            // Its own turn: held forwards are bounded by the peers'
            // `FORWARDS_HELD`, not by the node's running requests.
            let mut turn = Turn {
                permit: None,
                turns: std::sync::Arc::new(tokio::sync::Semaphore::new(1)),
            };
            let began = Instant::now()
                .checked_sub(waited)
                .unwrap_or_else(Instant::now);
            let answer = run_since(c, job, &mut turn, &mut route, began).await;
            forward::encode_answer(&answer, opcode, 0)
        }
        (Ask::Run { room, req, .. }, Some(part)) => {
            let opcode = req.opcode() as u8;
            let wakes = Wakes::of(&req);
            let (answer, wait_ms) = match attempt(part, *req, room).await {
                Ok(done) => done,
                Err(e) => (c.refusal(g, &e), 0),
            };
            wake_receives(c, g, &wakes, &answer);
            forward::encode_answer(&answer, opcode, wait_ms)
        }
        (
            Ask::List {
                ranges,
                after,
                limit,
                ..
            },
            Some(part),
        ) => {
            let ranges = ranges
                .into_iter()
                .map(|r| crate::auth::Range {
                    prefix: r.prefix,
                    exact: r.exact,
                })
                .collect();
            let answer = match list_part(part, ranges, after, limit).await {
                Ok(answer) => answer,
                Err(e) => c.refusal(g, &e),
            };
            forward::encode_answer(&answer, Opcode::ListQueues as u8, 0)
        }
        (Ask::Abandon { receipts, .. }, Some(part)) => {
            let answer = match abandon_part(part, receipts).await {
                Ok(_) => Response::Ok.into(),
                Err(e) => c.refusal(g, &e),
            };
            // `Ok` travels as the answer of an opcode whose answer it is.
            forward::encode_answer(&answer, Opcode::Auth as u8, 0)
        }
        // (The node's own asks are answered above.)
        _ => forward::refused("a forward without its partition"),
    }
}

/// The route of a request that came from another node (its answer goes
/// back over the peer connection, not to a loop).
fn nowhere() -> Route {
    Route {
        lp: usize::MAX,
        conn: crate::server::front::ConnRef {
            slot: 0,
            generation: 0,
        },
        request_id: 0,
        opcode: 0,
        started: Instant::now(),
        room: 0,
        park: 0,
        fields: fila_proto::Fields::ALL,
        shard: 0,
        forward: true,
    }
}

/// Runs a request on the partition's engine as a shard host runs one: a
/// dead-letter target it names is checked first (here when this shard
/// holds it, else on its own before, `attempt_unless`).
pub(super) fn run_on(owner: &mut Owner, req: Request, room: usize) -> Answer {
    if let Some(target) = dispatch::target_of(&req) {
        if let Err(answer) = dispatch::precheck(&req) {
            return answer.into();
        }
        if owner.owns(owner.totals().shard_of(target)) && !owner.has_queue(target) {
            return Answer::failed(&fila_core::Error::QueueNotFound(target.to_owned()));
        }
    }
    match dispatch::run(owner, req, room) {
        Outcome::Answer(a) => a,
        Outcome::Parked(wait) => {
            // Never: every receive here has no wait.
            owner.cancel_wait(wait);
            Answer::Messages(fila_proto::Fields::ALL, Vec::new())
        }
    }
}

/// A list of queues, whole, from the partition's engine.
fn list_on(list: ListJob, owner: &Owner) -> Answer {
    match list.finish_on(owner) {
        (_, Done::Answer(answer, _)) => answer,
        _ => error(ErrorCode::INTERNAL, "internal: a list did not finish").into(),
    }
}
