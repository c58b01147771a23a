//! A cluster node (docs/cluster.md): this node's replica of the cluster's
//! partition, the peer listener, and the endpoint of the loops' post that
//! every queue request goes to instead of a loop's shards.
//!
//! One thread (`fila-cluster`) runs a small tokio runtime of its own with
//! the Raft node ([`fila_cluster::Replica`]), the peer protocol's listener
//! ([`fila_cluster::peer::serve`]) and the endpoint's mailbox: a request
//! (`Msg::Run`), a list of queues (`Msg::List`) or the leases of an answer
//! nobody could take (`Msg::Abandon`) runs on the replica — on the leader
//! it executes on the partition's engine and is answered once its records
//! are committed; on a follower it is answered `not_leader` with the
//! leader's client address — and its answer goes back to the connection's
//! loop as `Msg::Done`. A receive that waits is tried again every
//! [`POLL`] until its wait ends or messages come (a replica parks
//! nothing). A read (peek, stats, settings, channels, move tasks, a list)
//! first confirms the leadership with a quorum. The single node's own engine and log are not used.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fila_cluster::peer::{serve, Forward, Forwarder, PeerNetwork, PeerTls};
use fila_cluster::{LogStore, Member, Replica, ReplicaError, StateMachine};
use fila_core::{Owner, SystemClock};
use fila_proto::{ErrorCode, Opcode, Request};
use fila_wal::{FsStorage, LogOptions};
use openraft::async_runtime::watch::WatchReceiver;
use sha2::{Digest, Sha256};
use tokio::sync::{Notify, Semaphore};
use tracing::{info, warn};

use super::host::{Done, ListJob, RunJob};
use super::mailbox::Msg;
use super::Shared;
use crate::config::ClusterConfig;
use forward::Ask;

mod change;
mod forward;
mod turns;
use crate::dispatch::{self, error, Answer, Outcome};
use change::change_cluster;
use turns::{Turn, Waiting};

/// How often a waiting receive looks again.
pub(in crate::server) const POLL: Duration = Duration::from_millis(50);
/// Requests running on the replica at once; more wait for a turn.
const RUNNING_MAX: usize = 4_096;
/// Timers: a heartbeat every 100 ms, an election after 400–800 ms without
/// one.
const HEARTBEAT_MS: u64 = 100;
const ELECTION_MS: (u64, u64) = (400, 800);

/// The cluster node's thread.
pub(in crate::server) struct ClusterNode {
    thread: Option<std::thread::JoinHandle<()>>,
}

type Node = Replica<FsStorage>;

impl ClusterNode {
    /// Opens this node's Raft log and state machine (under the data
    /// directory's `raft/`), binds the peer listener and starts the thread
    /// as endpoint `index` of the post.
    pub(in crate::server) fn start(
        config: &ClusterConfig,
        index: usize,
        notify: Arc<Notify>,
        shared: Arc<Shared>,
    ) -> io::Result<ClusterNode> {
        let dir = shared.config.data_dir.join("raft");
        let storage = |name: &str| FsStorage::new(dir.join(name));
        let log = LogStore::open(storage("log")?, LogOptions::default())
            .map_err(|e| io::Error::other(format!("the Raft log: {e}")))?;
        let state = StateMachine::open(storage("state")?)
            .map_err(|e| io::Error::other(format!("the Raft state: {e}")))?;
        let tls = match (
            &shared.config.tls_cert,
            &shared.config.tls_key,
            &config.tls_ca,
        ) {
            (Some(cert), Some(key), Some(ca)) => {
                let (server, client) = crate::tls::peer_configs(cert, key, ca)
                    .map_err(|e| io::Error::other(format!("the peers' TLS: {e}")))?;
                let tls = PeerTls::new(server, client);
                shared.live.set_peer_tls(tls.clone());
                Some(tls)
            }
            _ => None,
        };
        let listener = std::net::TcpListener::bind(config.listen)?;
        listener.set_nonblocking(true)?;
        let config = config.clone();
        let thread = std::thread::Builder::new()
            .name("fila-cluster".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("fila-cluster-rt")
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => return fail(&shared, format!("the cluster runtime: {e}")),
                };
                rt.block_on(run(
                    config, tls, listener, log, state, index, notify, shared,
                ));
            })?;
        Ok(ClusterNode {
            thread: Some(thread),
        })
    }

    /// Waits for its thread (once the server stops).
    pub(in crate::server) fn join(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The server cannot go on: says why and stops it.
fn fail(shared: &Shared, why: String) {
    warn!("{why}");
    shared
        .fatal
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert(why);
    shared.stopping.store(true, Ordering::Release);
    for i in 0..shared.loops.endpoints() {
        shared.loops.wake(i);
    }
}

/// The partition's receipt secret, derived from the cluster's.
fn receipt_secret(secret: &str) -> [u64; 2] {
    let d = Sha256::new()
        .chain_update(b"fila partition receipts")
        .chain_update(secret.as_bytes())
        .finalize();
    let u = |i: usize| u64::from_be_bytes(d[i..i + 8].try_into().expect("8 bytes"));
    [u(0), u(8)]
}

#[allow(clippy::too_many_arguments)]
async fn run(
    config: ClusterConfig,
    tls: Option<PeerTls>,
    listener: std::net::TcpListener,
    log: LogStore<FsStorage>,
    state: StateMachine<FsStorage>,
    index: usize,
    notify: Arc<Notify>,
    shared: Arc<Shared>,
) {
    let raft_config = openraft::Config {
        cluster_name: "fila".into(),
        heartbeat_interval: HEARTBEAT_MS,
        election_timeout_min: ELECTION_MS.0,
        election_timeout_max: ELECTION_MS.1,
        ..Default::default()
    };
    let raft_config = match raft_config.validate() {
        Ok(c) => Arc::new(c),
        Err(e) => return fail(&shared, format!("the Raft configuration: {e}")),
    };
    let secret: Arc<[u8]> = Arc::from(config.secret.as_bytes());
    let replica = match Replica::start(
        config.node_id,
        raft_config,
        PeerNetwork::new(config.node_id, 0, secret.clone(), tls.clone()),
        log,
        state,
        Arc::new(SystemClock),
        Some(receipt_secret(&config.secret)),
    )
    .await
    {
        Ok(r) => Arc::new(r),
        Err(e) => return fail(&shared, format!("the cluster node: {e}")),
    };
    // The partition is held to the node's configured limits.
    replica.set_limits(fila_core::EngineLimits {
        max_stored_bytes: shared.config.max_stored_bytes,
        max_queues: shared.config.max_queues,
    });
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => return fail(&shared, format!("the peer listener: {e}")),
    };
    let raft = replica.raft().clone();
    let peer_tls = tls.is_some();
    let fwd = Arc::new(Forwarder::new(PeerNetwork::new(
        config.node_id,
        0,
        secret.clone(),
        tls.clone(),
    )));
    let answers: Forward = {
        let (replica, shared) = (replica.clone(), shared.clone());
        Arc::new(move |body| {
            let (replica, shared) = (replica.clone(), shared.clone());
            Box::pin(async move { answer_forward(&replica, &shared, body).await })
        })
    };
    let peers = tokio::spawn(serve(
        listener,
        config.node_id,
        secret,
        tls,
        move |g| (g == 0).then(|| raft.clone()),
        Some(answers),
    ));
    bootstrap(&config, &replica).await;
    info!(node = config.node_id, peers = %config.listen, tls = peer_tls, "cluster node started");
    let view = tokio::spawn(keep_view(replica.clone(), shared.clone()));
    mail(replica.clone(), fwd, index, notify, shared.clone()).await;
    hand_over(&replica).await;
    view.abort();
    *shared
        .published
        .view
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = None;
    *shared
        .published
        .totals
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = None;
    peers.abort();
    if let Err(e) = replica.shutdown().await {
        warn!("stopping the cluster node: {e}");
    }
}

/// How often the cluster's view (what `ClusterStatus` answers) is
/// refreshed.
const VIEW_EVERY: Duration = Duration::from_millis(100);

/// Keeps `shared.published.view` the Raft node's view: members, leader, log
/// indexes, and on the leader how far each member has taken the log; and
/// `shared.published.totals` the partition's totals while it leads.
async fn keep_view(replica: Arc<Node>, shared: Arc<Shared>) {
    loop {
        let leader = replica.known_leader();
        let status = {
            let m = replica.raft().metrics();
            let m = m.borrow_watched();
            let membership = m.membership_config.membership();
            let voters: Vec<u64> = membership.voter_ids().collect();
            let matched = m.replication.as_ref();
            fila_proto::ClusterStatus {
                node_id: m.id,
                leader,
                term: m.current_term,
                last_log_index: m.last_log_index,
                committed_index: m.cluster_committed.map(|c| c.index),
                applied_index: m.last_applied.map(|a| a.index),
                members: membership
                    .nodes()
                    .map(|(id, node)| fila_proto::ClusterMemberStatus {
                        id: *id,
                        peer: node.addr.clone(),
                        client: node.client.clone(),
                        voter: voters.contains(id),
                        matched_index: matched
                            .and_then(|r| r.get(id))
                            .and_then(|l| l.as_ref().map(|l| l.index)),
                    })
                    .collect(),
            }
        };
        *shared
            .published
            .view
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(status);
        let totals = replica.serving(|owner| owner.totals()).await;
        *shared
            .published
            .totals
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = totals;
        tokio::time::sleep(VIEW_EVERY).await;
    }
}

/// A leader being stopped hands its leadership to the voter furthest
/// along first, so that the others need not wait for an election.
async fn hand_over(replica: &Node) {
    if !replica.raft().is_leader() {
        return;
    }
    match replica.transfer_leader(None).await {
        Ok(to) => info!(to, "stopping: the leadership was handed over"),
        Err(e) => warn!("stopping: the leadership was not handed over: {e}"),
    }
}

/// The node with the lowest id of a cluster that has never started makes
/// the first membership, every member a voter — unless it joins a running
/// cluster (`join`); the others wait to hear from it.
async fn bootstrap(config: &ClusterConfig, replica: &Node) {
    let lowest = config.members.iter().map(|m| m.id).min();
    if lowest != Some(config.node_id) || config.join {
        return;
    }
    let empty = {
        let m = replica.raft().metrics();
        let m = m.borrow_watched();
        m.last_log_index.is_none() && m.membership_config.membership().voter_ids().count() == 0
    };
    if !empty {
        return;
    }
    let members: BTreeMap<u64, Member> = config
        .members
        .iter()
        .map(|m| {
            (
                m.id,
                Member {
                    addr: m.peer.clone(),
                    client: m.client.clone(),
                },
            )
        })
        .collect();
    match replica.raft().initialize(members).await {
        Ok(()) => info!(members = config.members.len(), "cluster initialized"),
        Err(e) => warn!("initializing the cluster: {e}"),
    }
}

/// Serves the endpoint's mailbox until the server stops and nothing is in
/// progress.
async fn mail(
    replica: Arc<Node>,
    fwd: Arc<Forwarder>,
    index: usize,
    notify: Arc<Notify>,
    shared: Arc<Shared>,
) {
    let running = Arc::new(AtomicUsize::new(0));
    let turns = Arc::new(Semaphore::new(RUNNING_MAX));
    let me = shared.loops.get(index);
    loop {
        while let Some(msg) = me.take() {
            let (replica, shared, running) = (replica.clone(), shared.clone(), running.clone());
            let fwd = fwd.clone();
            let Ok(turn) = turns.clone().acquire_owned().await else {
                return;
            };
            running.fetch_add(1, Ordering::AcqRel);
            let mut turn = Turn {
                permit: Some(turn),
                turns: turns.clone(),
            };
            tokio::spawn(async move {
                on_msg(&replica, &shared, &fwd, msg, &mut turn).await;
                running.fetch_sub(1, Ordering::AcqRel);
            });
        }
        let stopping = shared.stopping.load(Ordering::Acquire);
        let idle = running.load(Ordering::Acquire) == 0;
        me.drained.store(stopping && idle, Ordering::SeqCst);
        if stopping
            && idle
            && shared
                .loops
                .iter()
                .all(|l| l.drained.load(Ordering::Acquire))
        {
            return;
        }
        me.about_to_sleep();
        if me.has_mail() {
            me.awake();
            continue;
        }
        if stopping {
            tokio::time::sleep(Duration::from_millis(20)).await;
        } else {
            let _ = tokio::time::timeout(Duration::from_millis(200), notify.notified()).await;
        }
        me.awake();
    }
}

/// Sends an answer back to its connection's loop.
fn answer(shared: &Shared, route: super::host::Route, done: Done) {
    let msg = Msg::Done { route, done };
    if !shared
        .loops
        .push_within(route.lp, msg, Instant::now() + Duration::from_secs(5))
    {
        warn!(
            lp = route.lp,
            "a loop's mailbox stayed full: an answer was dropped"
        );
    }
}

async fn on_msg(replica: &Node, shared: &Shared, fwd: &Forwarder, msg: Msg, turn: &mut Turn) {
    match msg {
        Msg::Run(job) => {
            let route = job.route;
            let done = Done::Answer(run_job(replica, shared, fwd, job, turn).await, false);
            answer(shared, route, done);
        }
        Msg::List(list) => {
            let route = list.route();
            let ask = forwards(shared, &route).then(|| {
                let (ranges, after, limit) = list.parts();
                Ask::List {
                    ranges,
                    after,
                    limit,
                }
            });
            let done = match (replica.read(move |owner| list_on(*list, owner)).await, ask) {
                (Ok(answer), _) => answer,
                (Err(ReplicaError::NotLeader { leader: Some(id) }), Some(ask)) => {
                    match forward_to(replica, shared, fwd, id, &ask).await {
                        Ok((answer, _)) | Err(answer) => answer,
                    }
                }
                (Err(e), _) => refusal(replica, shared, &e),
            };
            answer(shared, route, Done::Answer(done, false));
        }
        Msg::Abandon { receipts, .. } => {
            let given = receipts.clone();
            let ran = replica
                .execute(move |owner| owner.abandon(0, &receipts))
                .await;
            // Leases a gateway took through the leader go back there.
            if let Err(ReplicaError::NotLeader { leader: Some(id) }) = ran {
                let _ = forward_to(replica, shared, fwd, id, &Ask::Abandon(given)).await;
            }
        }
        Msg::Scrape(ask) => {
            // The metrics endpoint's per-queue series: the partition's,
            // while this node leads it.
            let max = ask.max;
            let stats = replica
                .serving(move |owner| {
                    let names = owner.list_queues("", "", max);
                    names
                        .into_iter()
                        .filter_map(|q| owner.stats(&q).ok().map(|s| (q, s)))
                        .collect()
                })
                .await
                .unwrap_or_default();
            let _ = ask.reply.send(stats);
        }
        Msg::Cancel { reply, .. } => {
            // Nothing parks here: a cancel finds nothing to cancel.
            if let Some(route) = reply {
                answer(shared, route, Done::Cancelled);
            }
        }
        _ => debug_assert!(false, "not a message for the cluster node"),
    }
}

/// The answer of `e`: `not_leader` naming the leader, `outcome_unknown`,
/// or `internal` — and then the Raft node failed (its storage): the server
/// stops, saying why, as a single node does when its log fails.
fn refusal(replica: &Node, shared: &Shared, e: &ReplicaError) -> Answer {
    match e {
        ReplicaError::NotLeader { leader } => {
            let at = leader.and_then(|id| {
                let m = replica.raft().metrics();
                let m = m.borrow_watched();
                let node = m.membership_config.membership().get_node(&id)?;
                Some(format!("leader {id} at {}", node.client))
            });
            let message = match at {
                Some(at) => format!("not_leader: this node does not lead the partition; {at}"),
                None => "not_leader: this node does not lead the partition; the leader is not known yet (try another node)".to_owned(),
            };
            error(ErrorCode::NOT_LEADER, message).into()
        }
        ReplicaError::Unknown { .. } => {
            error(ErrorCode::OUTCOME_UNKNOWN, format!("outcome_unknown: {e}")).into()
        }
        ReplicaError::Refused(why) => error(
            ErrorCode::INVALID_ARGUMENT,
            format!("invalid_argument: {why}"),
        )
        .into(),
        _ => {
            fail(
                shared,
                format!("the cluster node failed, nothing more can be acknowledged: {e}"),
            );
            error(ErrorCode::INTERNAL, format!("internal: {e}")).into()
        }
    }
}

/// How long a request of a gateway waits for a leader to be known before
/// it is answered `not_leader` (an election takes about a second).
const LEADER_WAIT: Duration = Duration::from_secs(5);
/// How long a forward to the leader may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether a request came from a gateway (the SQS API, the console): one
/// a follower forwards to its leader, since its caller cannot follow a
/// `not_leader` answer.
fn forwards(shared: &Shared, route: &super::host::Route) -> bool {
    route.lp >= shared.loops.owners()
}

/// The leader's peer address, when this node knows it.
fn peer_of(replica: &Node, id: u64) -> Option<String> {
    let m = replica.raft().metrics();
    let m = m.borrow_watched();
    Some(m.membership_config.membership().get_node(&id)?.addr.clone())
}

/// Sends `ask` to the leader `leader`: its answer and wait, or the answer
/// of a forward that failed.
async fn forward_to(
    replica: &Node,
    shared: &Shared,
    fwd: &Forwarder,
    leader: u64,
    ask: &Ask,
) -> Result<(Answer, u64), Answer> {
    let Some(addr) = peer_of(replica, leader) else {
        let lost = ReplicaError::NotLeader { leader: None };
        return Err(refusal(replica, shared, &lost));
    };
    match fwd
        .forward(leader, &addr, ask.encode(), FORWARD_TIMEOUT)
        .await
    {
        Ok(bytes) => forward::decode_answer(&bytes).map_err(|why| {
            let e = std::io::Error::new(std::io::ErrorKind::InvalidData, why);
            forward::lost(leader, &e)
        }),
        Err(e) => Err(forward::lost(leader, &e)),
    }
}

/// A request on the partition: run on the leader's engine (a receive
/// that waits, again every [`POLL`] until messages come or the wait
/// ends); a gateway's request on a follower is forwarded to the leader.
async fn run_job(
    replica: &Node,
    shared: &Shared,
    fwd: &Forwarder,
    job: RunJob,
    turn: &mut Turn,
) -> Answer {
    if let Request::ChangeCluster(change) = job.req {
        return match change_cluster(replica, change).await {
            Ok(()) => fila_proto::Response::Ok.into(),
            Err(e) => refusal(replica, shared, &e),
        };
    }
    let room = job.route.room;
    let forwards = forwards(shared, &job.route);
    let started = Instant::now();
    let mut wait: Option<Duration> = None;
    let mut waiting: Option<Waiting<'_>> = None;
    loop {
        let ran = match attempt(replica, shared, job.req.clone(), room).await {
            Ok(done) => Ok(done),
            Err(ReplicaError::NotLeader { leader: Some(id) }) if forwards => {
                let ask = Ask::Run {
                    room,
                    req: Box::new(job.req.clone()),
                };
                forward_to(replica, shared, fwd, id, &ask).await
            }
            Err(ReplicaError::NotLeader { leader: None })
                if forwards
                    && started.elapsed() < LEADER_WAIT
                    && !shared.stopping.load(Ordering::Acquire) =>
            {
                turn.sleep(POLL).await;
                continue;
            }
            Err(e) => Err(refusal(replica, shared, &e)),
        };
        let (answer, wait_ms) = match ran {
            Ok(done) => done,
            Err(answer) => return answer,
        };
        let wait = *wait.get_or_insert(Duration::from_millis(wait_ms));
        let empty = matches!(&answer, Answer::Messages(_, ms) if ms.is_empty());
        let left = wait.saturating_sub(started.elapsed());
        if !empty || left.is_zero() || shared.stopping.load(Ordering::Acquire) {
            return answer;
        }
        if waiting.is_none() {
            match Waiting::start(shared, job.may_park) {
                Ok(w) => waiting = Some(w),
                Err(refused) => return refused,
            }
        }
        turn.sleep(left.min(POLL)).await;
    }
}

/// One look of `req` on this node's replica: its answer, and the wait a
/// receive asked for (or its queue's default). A read is answered only
/// once the leadership is confirmed with a quorum (a deposed leader that
/// does not know it refuses it).
async fn attempt(
    replica: &Node,
    shared: &Shared,
    mut req: Request,
    room: usize,
) -> Result<(Answer, u64), ReplicaError> {
    if let Request::ServerStats = req {
        // The partition's totals (queues, stored bytes, its limits) as its
        // leader holds them, with this node's connections and requests.
        let totals = replica.read(|owner| owner.totals()).await?;
        let stats = shared.metrics.server_stats(&totals);
        return Ok((fila_proto::Response::ServerStats(stats).into(), 0));
    }
    let asked_wait = match &mut req {
        Request::Receive(r) => Some(r.wait_ms.replace(0)),
        _ => None,
    };
    let read = matches!(
        req.opcode(),
        Opcode::Peek | Opcode::QueueStats | Opcode::GetQueue | Opcode::Channels | Opcode::ListMoves
    );
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
        replica.read(work).await
    } else {
        replica.execute(work).await
    }
}

/// The leader's side of a forward: runs what a follower sent as its own
/// and answers it (see [`forward`]).
async fn answer_forward(replica: &Node, shared: &Shared, body: Vec<u8>) -> Vec<u8> {
    let ask = match Ask::decode(&body) {
        Ok(ask) => ask,
        Err(why) => return forward::refused(&why),
    };
    match ask {
        Ask::Run { req, .. } if req.opcode() == Opcode::ChangeCluster => {
            forward::refused("a cluster change is not forwarded")
        }
        Ask::Run { room, req } => {
            let opcode = req.opcode() as u8;
            let (answer, wait_ms) = match attempt(replica, shared, *req, room).await {
                Ok(done) => done,
                Err(e) => (refusal(replica, shared, &e), 0),
            };
            forward::encode_answer(&answer, opcode, wait_ms)
        }
        Ask::List {
            ranges,
            after,
            limit,
        } => {
            let list = ListJob::of_parts(nowhere(), ranges, after, limit);
            let answer = match replica.read(move |owner| list_on(list, owner)).await {
                Ok(answer) => answer,
                Err(e) => refusal(replica, shared, &e),
            };
            forward::encode_answer(&answer, Opcode::ListQueues as u8, 0)
        }
        Ask::Abandon(receipts) => {
            let answer = match replica
                .execute(move |owner| owner.abandon(0, &receipts))
                .await
            {
                Ok(_) => fila_proto::Response::Ok.into(),
                Err(e) => refusal(replica, shared, &e),
            };
            // `Ok` travels as the answer of an opcode whose answer it is.
            forward::encode_answer(&answer, Opcode::Auth as u8, 0)
        }
    }
}

/// The route of a request that came from another node (its answer goes
/// back over the peer connection, not to a loop).
fn nowhere() -> super::host::Route {
    super::host::Route {
        lp: usize::MAX,
        conn: super::front::ConnRef {
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
    }
}

/// Runs a request on the partition's engine as a shard host runs one: a
/// dead-letter target it names is checked first.
fn run_on(owner: &mut Owner, req: Request, room: usize) -> Answer {
    if let Some(target) = dispatch::target_of(&req) {
        if let Err(answer) = dispatch::precheck(&req) {
            return answer.into();
        }
        if !owner.has_queue(target) {
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
