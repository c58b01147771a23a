//! A cluster node (docs/cluster.md): this node's member of the metadata
//! group, a Raft node of every partition (a replica of those the map
//! places on this node, idle for the others), the peer listener, and the
//! endpoint of the loops' post that every queue request goes to instead
//! of a loop's shards (but for the puts, receives and deletes a loop runs
//! itself on a partition's leader here, [`fast`]).
//!
//! One thread (`fila-cluster`) runs a small tokio runtime of its own with
//! the Raft nodes ([`fila_cluster::Metadata`], a [`fila_cluster::Replica`]
//! per partition), the peer protocol's listener
//! ([`fila_cluster::peer::serve`]) and the endpoint's mailbox. A request
//! (`Msg::Run`) goes to its queue's partition — the routing table
//! ([`groups`]) kept from this node's copy of the map, else the metadata
//! leader, which places a new queue — and runs on that partition's
//! replica: on the leader it executes on the partition's engine and is
//! answered once its records are committed (a put, receive or delete is
//! most often run so by the loop that read it, without coming here:
//! [`fast`]); on a follower it is answered
//! `not_leader` with the leader's client address (a gateway's request is
//! forwarded instead); on a node holding no replica of it, the leader is
//! asked of one of its replicas. A list of queues (`Msg::List`) and the server's
//! stats gather every partition's part from its leader; the leases of an
//! answer nobody could take (`Msg::Abandon`) go back to the partition
//! that made them. Every answer goes back to the connection's loop as
//! `Msg::Done`. A receive that waits looks again as soon as a request
//! on its partition's leader here may have made its queue's messages
//! visible (`turns::Waiters`) and when the leader's engine has a timer
//! due, until its wait ends or messages come (a replica parks nothing in
//! its engine); one a follower forwards is held by the leader the same way
//! (`Ask::Wait`), or, while the follower's connections for those are all
//! taken, forwarded again every [`POLL`]. A read
//! (peek, stats, settings, channels, move tasks, a list) first confirms
//! the leadership with a quorum. The single node's own engine and log are
//! not used.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fila_cluster::node::Node;
use fila_cluster::peer::{serve, Forward, Forwarder, PeerNetwork, PeerTls};
use fila_cluster::{LogStore, Metadata, NodeLog, Replica, StateMachine};
use fila_core::SystemClock;
use fila_wal::{FsStorage, LogOptions};
use tokio::sync::{Notify, Semaphore};
use tracing::{info, warn};

use super::host::Done;
use super::mailbox::Msg;
use super::Shared;
use crate::config::ClusterConfig;

pub(in crate::server) mod fast;
mod forward;
mod groups;
mod run;
mod status;
mod turns;
use groups::{Cluster, META};
use turns::Turn;

/// How often a request waiting for a leader (none known, or this node
/// not serving yet), or a receive waiting through a forward, looks again:
/// as often as the node's own waits ([`fila_cluster::node::LOOK`]).
pub(in crate::server) const POLL: Duration = fila_cluster::node::LOOK;
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

/// A group's Raft log and state machine.
type Stores = (LogStore<FsStorage>, StateMachine<FsStorage>);

/// The node's Raft log (`raft/node-log`, shared by its groups), after
/// moving into it each group's own log of the layout before
/// (`raft/<group>/log`: once its entries are synced in the shared log, it
/// is renamed `log.moved`, durably, and then removed).
fn open_node_log(
    dir: &std::path::Path,
    partitions: usize,
    options: LogOptions,
) -> io::Result<NodeLog<FsStorage>> {
    let failed = |e: fila_cluster::Error| io::Error::other(format!("the node's Raft log: {e}"));
    let node_log = NodeLog::open(FsStorage::new(dir.join(NODE_LOG))?, options).map_err(failed)?;
    let groups = std::iter::once(("meta".to_owned(), u64::from(META)))
        .chain((0..partitions).map(|p| (format!("p{p}"), p as u64)));
    for (name, id) in groups {
        let folder = dir.join(&name);
        let old = folder.join("log");
        // A log moved before: the shared log holds it, whatever is left.
        let moved = folder.join("log.moved");
        if old.exists() {
            let entries =
                fila_cluster::move_group_log(&node_log, id, FsStorage::existing(&old), options)
                    .map_err(|e| io::Error::other(format!("moving the Raft log of {name}: {e}")))?;
            // Set aside in one step, durably, before anything is removed:
            // a log half removed must never be moved in again.
            std::fs::rename(&old, &moved)?;
            std::fs::File::open(&folder)?.sync_all()?;
            info!(group = %name, entries, "moved a group's Raft log into the node's");
        }
        if moved.exists() {
            std::fs::remove_dir_all(&moved)?;
        }
    }
    Ok(node_log)
}

/// The node's Raft log's folder under `raft/`.
const NODE_LOG: &str = "node-log";

impl ClusterNode {
    /// Opens the node's Raft log, which its groups share (under the data
    /// directory's `raft/`: `node-log/`, [`open_node_log`]), and the state
    /// machine of each group (`meta/`, and `p0/`, `p1/` ... for the
    /// partitions), binds the peer listener and starts the thread as
    /// endpoint `index` of the post.
    pub(in crate::server) fn start(
        config: &ClusterConfig,
        index: usize,
        notify: Arc<Notify>,
        shared: Arc<Shared>,
    ) -> io::Result<ClusterNode> {
        let dir = shared.config.data_dir.join("raft");
        // Before partitions, the one group's log and state were raft/log
        // and raft/state: such a directory is not taken for an empty one.
        for old in ["log", "state"] {
            if dir.join(old).exists() {
                return Err(io::Error::other(format!(
                    "{} holds a cluster node of an earlier layout (one group in raft/log and raft/state); this version keeps each group in a folder of its own: start this node with an empty data directory under a new node id (docs/cluster.md)",
                    dir.display()
                )));
            }
        }
        let options = LogOptions {
            segment_bytes: shared.config.segment_bytes,
        };
        let node_log = open_node_log(&dir, config.partitions, options)?;
        let open = |group: &str, id: u64, map: bool| -> io::Result<Stores> {
            let at = |name: &str| FsStorage::new(dir.join(group).join(name));
            let log = node_log
                .group(id)
                .map_err(|e| io::Error::other(format!("the Raft log of {group}: {e}")))?;
            let state = if map {
                StateMachine::open_map(at("state")?)
            } else {
                StateMachine::open(at("state")?)
            }
            .map_err(|e| io::Error::other(format!("the Raft state of {group}: {e}")))?;
            Ok((log, state))
        };
        let meta = open("meta", u64::from(META), true)?;
        let parts = (0..config.partitions)
            .map(|p| open(&format!("p{p}"), p as u64, false))
            .collect::<io::Result<Vec<Stores>>>()?;
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
        let listener = std::net::TcpListener::bind(config.listen).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot listen on {} (cluster.listen): {e}", config.listen),
            )
        })?;
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
                    config, tls, listener, meta, parts, index, notify, shared,
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

#[allow(clippy::too_many_arguments)]
async fn run(
    config: ClusterConfig,
    tls: Option<PeerTls>,
    listener: std::net::TcpListener,
    meta: Stores,
    parts: Vec<Stores>,
    index: usize,
    notify: Arc<Notify>,
    shared: Arc<Shared>,
) {
    // Each group's snapshot is taken when its state machine says one is
    // due (the log since holds the last one's size: `keep_view`), not
    // every 5 000 entries whatever the state's size.
    let raft_config = match fila_cluster::view::raft_config(HEARTBEAT_MS, ELECTION_MS) {
        Ok(c) => c,
        Err(e) => return fail(&shared, format!("the Raft configuration: {e}")),
    };
    let secret: Arc<[u8]> = Arc::from(config.secret.as_bytes());
    let id = config.node_id;
    let net = |g: u32| PeerNetwork::new(id, u64::from(g), secret.clone(), tls.clone());
    let started = Metadata::start(id, raft_config.clone(), net(META), meta.0, meta.1).await;
    let meta = match started {
        Ok(m) => m,
        Err(e) => return fail(&shared, format!("the cluster node's metadata group: {e}")),
    };
    // Each partition is held to its share of the node's stored bytes (a
    // node holds a replica of every one) and to the node's queues; its
    // key comes from the map.
    let share = shared.config.max_stored_bytes / parts.len().max(1) as u64;
    let mut replicas = Vec::with_capacity(parts.len());
    for (p, (log, state)) in parts.into_iter().enumerate() {
        let clock = Arc::new(SystemClock);
        let started = Replica::start(
            id,
            raft_config.clone(),
            net(p as u32),
            log,
            state,
            clock,
            None,
        )
        .await;
        match started {
            Ok(r) => {
                r.set_limits(fila_core::EngineLimits {
                    max_stored_bytes: share,
                    max_queues: shared.config.max_queues,
                });
                // Message ids unique across the cluster: each partition's
                // in a space of its own (its queue ids are its own).
                r.set_id_space(p as u32 + 1);
                // Its engine has the node's `shards`, hashed over the
                // event loops as a single node's are (shard i on loop i
                // mod loops), each loop running every operation on its
                // own.
                r.set_homes(
                    (0..shared.loops.owners().max(1))
                        .map(|lp| {
                            Arc::new(fast::LoopHome {
                                loops: shared.loops.clone(),
                                lp,
                                part: p,
                            }) as Arc<dyn fila_cluster::Home>
                        })
                        .collect(),
                    shared.config.shards,
                );
                replicas.push(Arc::new(r));
            }
            Err(e) => return fail(&shared, format!("the cluster node's partition {p}: {e}")),
        }
    }
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => return fail(&shared, format!("the peer listener: {e}")),
    };
    let rafts: Vec<_> = replicas.iter().map(|r| r.raft().clone()).collect();
    let meta_raft = meta.raft().clone();
    let node = Node::new(
        id,
        meta,
        replicas,
        config.replicas,
        Forwarder::new(net(0)),
        shared.stopping.clone(),
    );
    let c = Arc::new(Cluster {
        node,
        shared: shared.clone(),
        waiters: (0..config.partitions)
            .map(|_| turns::Waiters::default())
            .collect(),
    });
    let fast = fast::Fast::new(&c);
    for part in &c.parts {
        let f = Arc::downgrade(&fast);
        // An outcome noted: the loops waiting for word look again.
        part.set_on_commit(Arc::new(move || {
            if let Some(f) = f.upgrade() {
                f.committed();
            }
        }));
    }
    let _ = shared.fast.set(fast);
    let answers: Forward = {
        let c = c.clone();
        Arc::new(move |body| {
            let c = c.clone();
            Box::pin(async move { run::answer_forward(&c, body).await })
        })
    };
    let peer_tls = tls.is_some();
    let peers = tokio::spawn(serve(
        listener,
        id,
        secret.clone(),
        tls.clone(),
        move |g| match u32::try_from(g) {
            Ok(META) => Some(meta_raft.clone()),
            Ok(p) => rafts.get(p as usize).cloned(),
            Err(_) => None,
        },
        Some(answers),
    ));
    status::bootstrap(&config, &c).await;
    info!(node = id, peers = %config.listen, tls = peer_tls, partitions = c.parts.len(), "cluster node started");
    let view = tokio::spawn(status::keep_view(c.clone()));
    let voters = tokio::spawn(status::keep_meta_voters(c.clone()));
    let hints = tokio::spawn(status::keep_hints(c.clone()));
    mail(c.clone(), index, notify).await;
    voters.abort();
    hints.abort();
    // Every leadership handed over first: the others need not wait for
    // an election.
    c.hand_over().await;
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
    for part in &c.parts {
        if let Err(e) = part.shutdown().await {
            warn!("stopping the cluster node: {e}");
        }
    }
    if let Err(e) = c.meta.raft().shutdown().await {
        warn!("stopping the cluster node's metadata group: {e}");
    }
}

/// Serves the endpoint's mailbox until the server stops and nothing is in
/// progress.
async fn mail(c: Arc<Cluster>, index: usize, notify: Arc<Notify>) {
    let shared = c.shared.clone();
    let running = Arc::new(AtomicUsize::new(0));
    let turns = Arc::new(Semaphore::new(RUNNING_MAX));
    let me = shared.loops.get(index);
    loop {
        while let Some(msg) = me.take() {
            let (c, running) = (c.clone(), running.clone());
            let Ok(turn) = turns.clone().acquire_owned().await else {
                return;
            };
            running.fetch_add(1, Ordering::AcqRel);
            let mut turn = Turn {
                permit: Some(turn),
                turns: turns.clone(),
            };
            tokio::spawn(async move {
                on_msg(&c, msg, &mut turn).await;
                running.fetch_sub(1, Ordering::AcqRel);
            });
            me.took();
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

/// Sends an answer back to its connection's loop (or gateway): waits, as a
/// task, while that mailbox is full; never drops it.
pub(super) async fn answer(shared: &Shared, route: super::host::Route, done: Done) {
    shared.loops.push(route.lp, Msg::Done { route, done }).await;
}

async fn on_msg(c: &Cluster, msg: Msg, turn: &mut Turn) {
    let shared = &c.shared;
    match msg {
        Msg::Run(job) => {
            // A receive that waits holds less room from then on: its answer
            // goes with the route that says so.
            let mut route = job.route;
            let done = Done::Answer(run::run_job(c, job, turn, &mut route).await, false);
            answer(shared, route, done).await;
        }
        Msg::List(list) => {
            let route = list.route();
            let done = Done::Answer(run::list_all(c, &list).await, false);
            answer(shared, route, done).await;
        }
        Msg::Abandon { receipts, .. } => run::abandon_all(c, receipts).await,
        Msg::Scrape(ask) => {
            // The metrics endpoint's per-queue series: the partitions'
            // this node leads.
            let mut stats = Vec::new();
            for part in &c.parts {
                // (Each home's owner lists all its shards' queues.)
                for shard in part.home_shards() {
                    let max = ask.max.saturating_sub(stats.len());
                    let mine: Vec<(String, fila_core::QueueStats)> = part
                        .serving(shard, move |owner| {
                            let names = owner.list_queues("", "", max);
                            names
                                .into_iter()
                                .filter_map(|q| owner.stats(&q).ok().map(|s| (q, s)))
                                .collect()
                        })
                        .await
                        .unwrap_or_default();
                    stats.extend(mine);
                }
            }
            let _ = ask.reply.send(stats);
        }
        Msg::Cancel { reply, .. } => {
            // Nothing parks here: a cancel finds nothing to cancel.
            if let Some(route) = reply {
                answer(shared, route, Done::Cancelled).await;
            }
        }
        _ => debug_assert!(false, "not a message for the cluster node"),
    }
}
