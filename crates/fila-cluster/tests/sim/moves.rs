//! A partition's replicas move among the faults: from nodes {1, 2, 3} to
//! {1, 2, 4}, then to {2, 4, 5}, then back to {1, 3, 4} — each move a
//! learner added, promoted once caught up, the old replica removed (the
//! leader itself handing over first); the last takes back nodes 1 and 3,
//! which kept their replica's log and vote since they were removed (ids
//! below the group's highest: `Members::rejoining`) — by `move_step`
//! called on whichever node leads, as
//! the node holding a partition's leadership follows the cluster's map,
//! while clients put, receive and delete and nodes crash, restart and are
//! cut off. At the end the partition's members are the last ones wanted,
//! every one a voter, each holds the same state, and the history checker
//! holds the state to what clients were told.

use fila_cluster::membership::MoveStep;

use super::members::{member, membership};
use super::*;

/// Five nodes: the first three hold the partition at first.
const SLOTS: [NodeId; 5] = [1, 2, 3, 4, 5];

/// What the moves did.
#[derive(Default)]
struct Moved {
    added: usize,
    promoted: usize,
    removed: usize,
    handed_over: usize,
    /// Moves finished among the faults (the members were the ones
    /// wanted before the end).
    finished: usize,
}

/// One step towards `want` on the node that led last (or any, when it
/// does not lead).
async fn step(c: &mut Cluster, want: &BTreeSet<NodeId>, moved: &mut Moved) -> Option<MoveStep> {
    let members_at = SLOTS.iter().map(|&id| (id, member(id))).collect();
    let mut order: Vec<NodeId> = vec![c.leader];
    order.extend(c.slots.keys().filter(|&&n| n != c.leader));
    for id in order {
        let Some(replica) = c.replica(id) else {
            continue;
        };
        // Every node keeps its disks here: one that held a replica may
        // take one again.
        let kept = SLOTS.iter().copied().collect();
        let members = replica.members().rejoining(kept);
        let r = tokio::time::timeout(
            Duration::from_secs(15),
            members.move_step(want, &members_at),
        )
        .await;
        if tracing() {
            eprintln!("move to {want:?} -> {r:?} via {id}");
        }
        match r {
            Ok(Ok(s)) => {
                // A replica moves learner → voter → the old one removed:
                // never fewer voters than wanted.
                if let Some((voters, _)) = membership(c, id) {
                    assert!(
                        voters.len() >= want.len(),
                        "{s:?} left the voters {voters:?} (wanted {want:?})"
                    );
                }
                c.leader = id;
                match s {
                    MoveStep::Added(_) => moved.added += 1,
                    MoveStep::Promoted(_) => moved.promoted += 1,
                    MoveStep::Removed(_) => moved.removed += 1,
                    MoveStep::HandedOver(to) => {
                        moved.handed_over += 1;
                        c.leader = to;
                    }
                    MoveStep::CatchingUp(_) | MoveStep::Settling | MoveStep::Done => {}
                }
                return Some(s);
            }
            Ok(Err(ReplicaError::NotLeader { leader: Some(l) })) => c.leader = l,
            Ok(Err(ReplicaError::NotLeader { .. })) => {}
            // Refused or unknown: tried again later.
            _ => return None,
        }
    }
    None
}

async fn moving(seed: u64) -> (History, Moved) {
    let mut rng = Rng(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1);
    let mut c = Cluster::with(seed, &SLOTS).await;
    let mut h = History::default();
    let mut moved = Moved::default();
    let wants: [BTreeSet<NodeId>; 3] = [
        BTreeSet::from([1, 2, 4]),
        BTreeSet::from([2, 4, 5]),
        BTreeSet::from([1, 3, 4]),
    ];
    let mut stage = 0;
    create_queue(&mut c, seed).await;
    let mut n = 0;
    let mut down: Vec<NodeId> = Vec::new();
    for _ in 0..150 {
        match rng.below(100) {
            0..=24 => {
                n += 1;
                put(&mut c, &mut h, n).await;
            }
            25..=44 => receive_and_delete(&mut c, &mut h, &mut rng, &mut down).await,
            45..=49 if down.is_empty() => {
                let id = SLOTS[rng.below(5) as usize];
                if tracing() {
                    eprintln!("crash {id}");
                }
                c.crash(id).await;
                down.push(id);
            }
            50..=55 => {
                for id in down.drain(..) {
                    c.start(id).await;
                }
            }
            56..=58 => c.net.cut_off(SLOTS[rng.below(5) as usize]),
            59..=63 => c.net.heal(),
            64..=89 if stage < wants.len() => {
                let done = step(&mut c, &wants[stage], &mut moved).await == Some(MoveStep::Done);
                if done && stage < wants.len() {
                    moved.finished += 1;
                    stage += 1;
                }
            }
            _ => tokio::time::sleep(Duration::from_millis(rng.below(800))).await,
        }
    }
    // The end: everything up and reachable, the moves finished.
    c.net.heal();
    for id in down.drain(..) {
        c.start(id).await;
    }
    for want in wants.iter().skip(stage) {
        let mut done = false;
        for _ in 0..200 {
            if step(&mut c, want, &mut moved).await == Some(MoveStep::Done) {
                done = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(done, "seed {seed}: the move to {want:?} did not finish");
    }
    let want = &wants[wants.len() - 1];
    let (end, index) = c.settle(seed, &mut down).await;
    let (voters, nodes) = membership(&c, c.leader).unwrap();
    assert_eq!(&voters, want, "seed {seed}: the voters");
    assert_eq!(&nodes, want, "seed {seed}: the members");
    c.agree(seed, want, index).await;
    check(seed, &h, &end);
    for id in SLOTS {
        c.crash(id).await;
    }
    (h, moved)
}

#[test]
fn a_partitions_replicas_move_learner_voter_removed_among_faults_losing_nothing() {
    let seeds = (seeds() / 4).max(2);
    let only = only_seed();
    let mut total = Moved::default();
    let (mut acked, mut deleted) = (0, 0);
    for (h, moved) in each_seed(seeds, moving) {
        acked += h.acked.len();
        deleted += h.deleted.len();
        total.added += moved.added;
        total.promoted += moved.promoted;
        total.removed += moved.removed;
        total.handed_over += moved.handed_over;
        total.finished += moved.finished;
    }
    eprintln!(
        "{seeds} seeds: {} replicas added, {} promoted, {} removed, {} hand-overs by a leader moving away, {} moves finished among the faults; {acked} puts and {deleted} deletes acknowledged",
        total.added, total.promoted, total.removed, total.handed_over, total.finished
    );
    if only.is_none() {
        // Every run ends with the three moves made (checked above); most of
        // them were made among the faults, and some moved the leader away.
        assert!(total.finished > seeds as usize, "{} moves", total.finished);
        assert!(total.added > 0 && total.promoted > 0 && total.removed > 0);
        assert!(total.handed_over > 0, "no leader moved away");
        assert!(acked > 0 && deleted > 0);
    }
}
