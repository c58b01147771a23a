//! The partition's members change among the faults: a node is added as a
//! learner and promoted, a voter is removed — then crashed and its disks
//! thrown away; a new empty node under a new id takes its place, to be
//! added later, as an operator brings a wiped machine back — while clients put, receive and delete and nodes crash, restart and
//! are cut off; half the puts carry a deduplication id and are sent again
//! with it while their outcome is unknown or no node takes them, as a
//! client does after a failover. The history checker holds the end state
//! to what clients were told, no message is stored twice, and every
//! member at the end holds the same state.

use std::collections::BTreeSet;

use fila_cluster::Member;
use openraft::async_runtime::watch::WatchReceiver;

use super::*;

/// Four nodes: three voters at first, one waiting to be added.
const SLOTS: [NodeId; 4] = [1, 2, 3, 4];

/// A node of the cluster now, drawn by `rng`.
fn any(c: &Cluster, rng: &mut Rng) -> NodeId {
    let ids: Vec<NodeId> = c.slots.keys().copied().collect();
    ids[rng.below(ids.len() as u64) as usize]
}

/// Membership changes a run made (and puts sent again).
#[derive(Default)]
struct Changes {
    /// Puts acknowledged after they were sent again with their
    /// deduplication id (an earlier try's outcome unknown, or no leader).
    resent: usize,
    added: usize,
    promoted: usize,
    /// Removed (their commit answered), then wiped.
    wiped: usize,
}

/// The voters and the other members the node `id` knows of.
pub(super) fn membership(c: &Cluster, id: NodeId) -> Option<(BTreeSet<NodeId>, BTreeSet<NodeId>)> {
    let r = c.replica(id)?;
    let m = r.raft().metrics();
    let m = m.borrow_watched();
    let membership = m.membership_config.membership();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let nodes = membership.nodes().map(|(id, _)| *id).collect();
    Some((voters, nodes))
}

pub(super) fn member(id: NodeId) -> Member {
    Member {
        addr: format!("node-{id}"),
        client: format!("client-{id}"),
    }
}

/// One change, on the node that led last: add the node that is not a
/// member, promote a learner, or — with four voters — remove one, and once
/// its removal is committed wipe it.
async fn change(c: &mut Cluster, rng: &mut Rng, down: &mut Vec<NodeId>, done: &mut Changes) {
    let leader = c.leader;
    let (Some(replica), Some((voters, nodes))) = (c.replica(leader), membership(c, leader)) else {
        return;
    };
    let outsider = c.slots.keys().copied().find(|id| !nodes.contains(id));
    let learner = nodes.iter().copied().find(|id| !voters.contains(id));
    let within = Duration::from_secs(15);
    if let Some(id) = learner {
        let r = tokio::time::timeout(within, replica.promote(id)).await;
        if tracing() {
            eprintln!("promote {id} -> {r:?} via {leader}");
        }
        if matches!(r, Ok(Ok(()))) {
            done.promoted += 1;
        }
    } else if let Some(id) = outsider {
        let r = tokio::time::timeout(within, replica.add_learner(id, member(id))).await;
        if tracing() {
            eprintln!("add {id} -> {r:?} via {leader}");
        }
        if matches!(r, Ok(Ok(()))) {
            done.added += 1;
        }
    } else if voters.len() == 4 {
        let v: Vec<NodeId> = voters.into_iter().collect();
        let id = v[rng.below(4) as usize];
        let r = tokio::time::timeout(within, replica.remove(id)).await;
        if tracing() {
            eprintln!("remove {id} -> {r:?} via {leader}");
        }
        if matches!(r, Ok(Ok(()))) {
            // Out of the membership for good: its disks go, and the machine
            // comes back empty under a new id.
            c.crash(id).await;
            down.retain(|d| *d != id);
            c.slots.remove(&id);
            let new = c.slots.keys().max().copied().unwrap_or(0).max(c.retired) + 1;
            c.retired = new;
            c.slots.insert(
                new,
                Slot {
                    log: Disk::new(new * 1_000 + 1),
                    state: Disk::new(new * 1_000 + 2),
                    replica: None,
                    store: None,
                },
            );
            c.start(new).await;
            if tracing() {
                eprintln!("node {id} wiped: back as node {new}");
            }
            done.wiped += 1;
        }
    }
}

/// A put with a deduplication id, sent again with the same id while no
/// node takes it or its outcome is unknown — what a client does after a
/// failover: stored once whatever the tries before made.
async fn put_deduplicated(c: &mut Cluster, h: &mut History, n: u64, done: &mut Changes) {
    let body = format!("d{n}");
    h.attempted.insert(body.clone());
    let op = {
        let body = body.clone();
        move |e: &mut Owner| {
            let mut m = NewMessage::new(body.clone());
            m.dedup_id = Some(body.clone());
            e.put(QUEUE, vec![m])
        }
    };
    for attempt in 0..20 {
        let outcome = c.attempt(&op).await;
        if tracing() {
            let what = match &outcome {
                Outcome::Done(r) => format!("{r:?}"),
                Outcome::Unknown => "unknown".to_owned(),
                Outcome::Refused => "refused".to_owned(),
            };
            eprintln!("put {body} (try {attempt}) -> {what} via {}", c.leader);
        }
        match outcome {
            Outcome::Done(Ok(entries)) => {
                if entries.iter().all(|r| r.is_ok()) {
                    h.acked.insert(body);
                    done.resent += usize::from(attempt > 0);
                }
                return;
            }
            Outcome::Done(Err(_)) => return,
            Outcome::Unknown | Outcome::Refused => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
        }
    }
}

async fn churn(seed: u64) -> (History, Changes) {
    let mut rng = Rng(seed.wrapping_mul(0xA24B_AED4_963E_E407) | 1);
    let mut c = Cluster::with(seed, &SLOTS).await;
    let mut h = History::default();
    let mut done = Changes::default();
    create_queue(&mut c, seed).await;
    let mut n = 0;
    let mut down: Vec<NodeId> = Vec::new();
    for _ in 0..120 {
        match rng.below(100) {
            0..=19 => {
                n += 1;
                put(&mut c, &mut h, n).await;
            }
            20..=39 => {
                n += 1;
                put_deduplicated(&mut c, &mut h, n, &mut done).await;
            }
            40..=59 => receive_and_delete(&mut c, &mut h, &mut rng, &mut down).await,
            60..=65 if down.is_empty() => {
                let id = any(&c, &mut rng);
                if tracing() {
                    eprintln!("crash {id}");
                }
                c.crash(id).await;
                down.push(id);
            }
            66..=71 => {
                for id in down.drain(..) {
                    if tracing() {
                        eprintln!("start {id}");
                    }
                    c.start(id).await;
                }
            }
            72..=75 => {
                let id = any(&c, &mut rng);
                if tracing() {
                    eprintln!("cut {id}");
                }
                c.net.cut_off(id)
            }
            76..=79 => {
                if tracing() {
                    eprintln!("heal");
                }
                c.net.heal()
            }
            80..=94 => change(&mut c, &mut rng, &mut down, &mut done).await,
            _ => tokio::time::sleep(Duration::from_millis(rng.below(1000))).await,
        }
    }
    // The end: a blank entry after everything, applied by every member.
    let (end, index) = c.settle(seed, &mut down).await;
    let (_, members) = membership(&c, c.leader).unwrap();
    c.agree(seed, &members, index).await;
    check(seed, &h, &end);
    let ids: Vec<NodeId> = c.slots.keys().copied().collect();
    for id in ids {
        c.crash(id).await;
    }
    (h, done)
}

#[test]
fn members_added_promoted_removed_and_wiped_among_faults_lose_nothing() {
    let seeds: u64 = std::env::var("FILA_SIM_MEMBER_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    let mut total = Changes::default();
    let (mut acked, mut deleted, mut ran) = (0, 0, 0);
    let only = only_seed();
    for (h, done) in each_seed(seeds, churn) {
        ran += 1;
        acked += h.acked.len();
        deleted += h.deleted.len();
        total.added += done.added;
        total.promoted += done.promoted;
        total.wiped += done.wiped;
        total.resent += done.resent;
    }
    eprintln!(
        "{ran} seeds: {} learners added, {} promoted, {} voters removed and wiped; {acked} puts and {deleted} deletes acknowledged, {} puts acknowledged after they were sent again",
        total.added, total.promoted, total.wiped, total.resent
    );
    if only.is_some() {
        // A replay of one seed checks that seed; what the runs covered is
        // a question for all of them.
        return;
    }
    // The runs changed the members, more than once, and served meanwhile.
    assert!(total.added > ran / 2, "{} adds", total.added);
    assert!(total.promoted > 0 && total.wiped > 0);
    assert!(total.resent > 0, "no put was sent again");
    assert!(acked > 0 && deleted > 0);
}

/// A leader that removes itself keeps its vote after it steps down, but it
/// leads nothing: it answers `not_leader` without naming itself, executes
/// nothing (not even a read from its old state), and the others serve.
#[test]
fn a_leader_that_removed_itself_serves_nothing() {
    each_seed(3, |seed| async move {
        let mut c = Cluster::new(seed).await;
        create_queue(&mut c, seed).await;
        let old = c.leader;
        let replica = c.replica(old).unwrap();
        replica.remove(old).await.unwrap();
        // Past openraft's step-down delay and the hand-over.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (voters, _) = membership(&c, old).unwrap();
        assert!(!voters.contains(&old), "seed {seed}: {voters:?}");
        let stale = replica.execute(replica.shard_of(QUEUE), contents).await;
        match stale {
            Err(ReplicaError::NotLeader { leader }) => {
                assert_ne!(leader, Some(old), "seed {seed}: it names itself")
            }
            other => panic!("seed {seed}: the removed leader answered {other:?}"),
        }
        assert_ne!(replica.known_leader(), Some(old), "seed {seed}");
        // The others took over.
        let mut served = false;
        for _ in 0..50 {
            for id in NODES.iter().filter(|&&n| n != old) {
                let r = c.replica(*id).unwrap();
                if let Ok(e) = r.execute(r.shard_of(QUEUE), contents).await {
                    assert!(e.is_empty(), "seed {seed}: {e:?}");
                    served = true;
                }
            }
            if served {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(served, "seed {seed}: no other node served");
        for id in NODES {
            c.crash(id).await;
        }
    });
}
