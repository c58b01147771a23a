//! The partition's members change among the faults: a node is added as a
//! learner and promoted, a voter is removed — then crashed, its disks
//! wiped, and started again empty, to be added back later as a new member
//! — while clients put, receive and delete and nodes crash, restart and
//! are cut off. The history checker holds the end state to what clients
//! were told, and every member at the end holds the same state.

use std::collections::BTreeSet;

use fila_cluster::Member;
use openraft::async_runtime::watch::WatchReceiver;

use super::*;

/// Four nodes: three voters at first, one waiting to be added.
const SLOTS: [NodeId; 4] = [1, 2, 3, 4];

/// Membership changes a run made.
#[derive(Default)]
struct Changes {
    added: usize,
    promoted: usize,
    /// Removed (their commit answered), then wiped.
    wiped: usize,
}

/// The voters and the other members the node `id` knows of.
fn membership(c: &Cluster, id: NodeId) -> Option<(BTreeSet<NodeId>, BTreeSet<NodeId>)> {
    let r = c.replica(id)?;
    let m = r.raft().metrics();
    let m = m.borrow_watched();
    let membership = m.membership_config.membership();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let nodes = membership.nodes().map(|(id, _)| *id).collect();
    Some((voters, nodes))
}

fn member(id: NodeId) -> Member {
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
    let outsider = SLOTS.iter().copied().find(|id| !nodes.contains(id));
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
            // Out of the membership for good: its disks may go.
            c.crash(id).await;
            down.retain(|d| *d != id);
            let slot = c.slots.get_mut(&id).unwrap();
            let life = (done.wiped as u64 + 1) * 1_000;
            slot.log = Disk::new(life + id);
            slot.state = Disk::new(life + id + 5);
            c.start(id).await;
            done.wiped += 1;
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
            0..=39 => {
                n += 1;
                put(&mut c, &mut h, n).await;
            }
            40..=59 => receive_and_delete(&mut c, &mut h, &mut rng, &mut down).await,
            60..=65 if down.is_empty() => {
                let id = SLOTS[rng.below(4) as usize];
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
                let id = SLOTS[rng.below(4) as usize];
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
    c.net.heal();
    for id in down.drain(..) {
        c.start(id).await;
    }
    // The end: a blank entry after everything, applied by every member.
    let mut last = None;
    for _ in 0..600 {
        if let Some(e) = c.run(contents).await {
            let leader = c.replica(c.leader).unwrap();
            if let Ok(blank) = leader.raft().write_blank().await {
                last = Some((e, blank.log_id.index));
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (end, index) = last.unwrap_or_else(|| panic!("seed {seed}: no leader at the end"));
    let (_, members) = membership(&c, c.leader).unwrap();
    let mut images = Vec::new();
    for &id in &members {
        let r = c.replica(id).unwrap();
        r.raft()
            .wait(Some(Duration::from_secs(30)))
            .applied_index_at_least(Some(index), "catch up")
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: member {id} did not catch up: {e}"));
        images.push((id, normal(r.state().image().unwrap())));
    }
    for w in images.windows(2) {
        assert!(
            w[0].1 == w[1].1,
            "seed {seed}: members {} and {} differ",
            w[0].0,
            w[1].0
        );
    }
    check(seed, &h, &end);
    for id in SLOTS {
        c.crash(id).await;
    }
    (h, done)
}

#[test]
fn members_added_promoted_removed_and_wiped_among_faults_lose_nothing() {
    let seeds: u64 = std::env::var("FILA_SIM_MEMBER_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let mut total = Changes::default();
    let (mut acked, mut deleted) = (0, 0);
    let only: Option<u64> = std::env::var("FILA_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok());
    for seed in 1..=seeds {
        if only.is_some_and(|o| o != seed) {
            continue;
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let (h, done) = rt.block_on(churn(seed));
        acked += h.acked.len();
        deleted += h.deleted.len();
        total.added += done.added;
        total.promoted += done.promoted;
        total.wiped += done.wiped;
    }
    // The runs changed the members, more than once, and served meanwhile.
    assert!(total.added > seeds as usize / 2, "{} adds", total.added);
    assert!(total.promoted > 0 && total.wiped > 0);
    assert!(acked > 0 && deleted > 0);
    eprintln!(
        "{seeds} seeds: {} learners added, {} promoted, {} voters removed and wiped; {acked} puts and {deleted} deletes acknowledged",
        total.added, total.promoted, total.wiped
    );
}
