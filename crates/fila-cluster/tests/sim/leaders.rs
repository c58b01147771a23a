//! A leader's answers under pressure: many pipelined operations while it
//! is cut off part way, and a read on a leader that does not know it was
//! deposed.

use super::*;

/// Many clients at once on the leader: their operations are pipelined
/// (each runs on the engine and is submitted in turn, then waits for its
/// commit); the leader is cut off part way, so some fail. Every
/// acknowledged put is on every replica, under the sequence number it was
/// answered with, and nothing that failed before it was appended is.
#[test]
fn pipelined_operations_commit_in_the_order_the_engine_made_them() {
    for seed in 1..=5u64 {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut c = Cluster::new(seed).await;
            create_queue(&mut c, seed).await;
            let leader = c.replica(c.leader).unwrap();
            let mut tasks = Vec::new();
            for i in 0..200u64 {
                let leader = leader.clone();
                tasks.push(tokio::spawn(async move {
                    let body = format!("p{i}");
                    let b = body.clone();
                    let answer = leader
                        .execute(leader.shard_of(QUEUE), move |e| {
                            e.put(QUEUE, vec![NewMessage::new(b)])
                        })
                        .await;
                    (body, answer)
                }));
                if i == 120 {
                    // Let the first ones through, then cut the leader off.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    c.net.cut_off(c.leader);
                }
            }
            let mut acked = BTreeMap::new();
            let mut refused = 0;
            for t in tasks {
                let (body, answer) = tokio::time::timeout(Duration::from_secs(20), t)
                    .await
                    .expect("every operation ends")
                    .unwrap();
                match answer {
                    Ok(Ok(entries)) => {
                        acked.insert(entries[0].as_ref().unwrap().seq, body);
                    }
                    Err(ReplicaError::NotLeader { .. }) => refused += 1,
                    Err(_) => {}
                    Ok(Err(e)) => panic!("seed {seed}: {e}"),
                }
            }
            assert!(
                acked.len() >= 50,
                "seed {seed}: {} acknowledged",
                acked.len()
            );
            c.net.heal();
            let end = loop {
                if let Some(e) = c.run(contents).await {
                    break e;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            for (seq, body) in &acked {
                assert!(
                    end.contains_key(body),
                    "seed {seed}: {body} (seq {seq}) lost"
                );
            }
            let leader = c.replica(c.leader).unwrap();
            let image = normal(leader.state().image().unwrap());
            let q = image.queues.iter().find(|q| q.name == QUEUE).unwrap();
            for m in &q.messages {
                if let Some(body) = acked.get(&m.seq) {
                    assert_eq!(
                        m.payload.as_slice(),
                        body.as_bytes(),
                        "seed {seed}: seq {} holds another message",
                        m.seq
                    );
                }
            }
            if tracing() {
                eprintln!(
                    "seed {seed}: {} acknowledged, {refused} refused",
                    acked.len()
                );
            }
            for id in NODES {
                c.crash(id).await;
            }
        });
    }
}

/// A leader cut off from the others does not know it was deposed: a read
/// through the read index is refused there (not answered from its old
/// state), while the new leader answers it with what was committed since.
#[test]
fn a_cut_off_leader_does_not_answer_from_its_old_state() {
    each_seed(3, |seed| async move {
        let mut c = Cluster::new(seed).await;
        create_queue(&mut c, seed).await;
        let old = c.leader;
        let old_replica = c.replica(old).unwrap();
        assert_eq!(
            old_replica
                .read(old_replica.shard_of(QUEUE), |o| o
                    .stats(QUEUE)
                    .unwrap()
                    .visible)
                .await
                .unwrap(),
            0
        );
        c.net.cut_off(old);
        // The others elect a leader and take a put.
        let mut put = None;
        for _ in 0..100 {
            for id in NODES.iter().filter(|&&n| n != old) {
                let r = c.replica(*id).unwrap();
                if let Ok(Ok(_)) = r
                    .execute(r.shard_of(QUEUE), |o| {
                        o.put(QUEUE, vec![NewMessage::new("new")])
                    })
                    .await
                {
                    put = Some(*id);
                }
            }
            if put.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let new = put.unwrap_or_else(|| panic!("seed {seed}: no new leader"));
        // The old one still thinks it leads; its read is refused, and so
        // is any operation whose answer rests on its old state without a
        // change of its own to commit (a receive finding nothing, a
        // receipt refused as stale).
        let stale = old_replica
            .read(old_replica.shard_of(QUEUE), |o| {
                o.stats(QUEUE).unwrap().visible
            })
            .await;
        assert!(
            matches!(stale, Err(ReplicaError::NotLeader { .. })),
            "seed {seed}: {stale:?}"
        );
        let stale = old_replica
            .execute(old_replica.shard_of(QUEUE), |o| {
                o.stats(QUEUE).unwrap().visible
            })
            .await;
        assert!(
            matches!(stale, Err(ReplicaError::NotLeader { .. })),
            "seed {seed}: a no-op write answered from the old state: {stale:?}"
        );
        let fresh = c
            .replica(new)
            .unwrap()
            .read(c.replica(new).unwrap().shard_of(QUEUE), |o| {
                o.stats(QUEUE).unwrap().visible
            })
            .await;
        assert_eq!(fresh.unwrap(), 1, "seed {seed}");
        c.net.heal();
        for id in NODES {
            c.crash(id).await;
        }
    });
}

/// A leader says when its engine's next timer is due: a receive waiting
/// there for a lease to end sleeps until then (a server's waiting receives
/// look again at that time, not on a fixed period), and a look at that
/// time finds the message the lease held.
#[test]
fn the_leader_says_when_a_lease_it_gave_ends() {
    each_seed(2, |seed| async move {
        let mut c = Cluster::new(seed).await;
        create_queue(&mut c, seed).await;
        c.run_patiently(|e| e.put(QUEUE, vec![NewMessage::new("m")]))
            .await
            .unwrap()
            .unwrap();
        let leased = ReceiveOptions {
            visibility_ms: Some(LEASE_MS),
            wait_ms: Some(0),
            ..ReceiveOptions::default()
        };
        let got = c
            .run_patiently({
                let leased = leased.clone();
                move |e| receive_now(e, &leased)
            })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.len(), 1, "seed {seed}");
        let leader = c.replica(c.leader).unwrap();
        let due = leader
            .next_due(leader.shard_of(QUEUE))
            .await
            .expect("the lease's timer");
        assert!(
            due <= Duration::from_millis(LEASE_MS) && due > Duration::ZERO,
            "seed {seed}: next timer in {due:?}"
        );
        // Before the lease ends the message is not there; at the timer it is.
        let none = leader
            .execute(leader.shard_of(QUEUE), receive_with(&leased))
            .await
            .unwrap();
        assert!(none.unwrap().is_empty(), "seed {seed}");
        let mut slept = Duration::ZERO;
        let again = loop {
            let due = leader
                .next_due(leader.shard_of(QUEUE))
                .await
                .expect("a timer until it ends");
            tokio::time::sleep(due.max(Duration::from_millis(1))).await;
            slept += due;
            let got = leader
                .execute(leader.shard_of(QUEUE), receive_with(&leased))
                .await
                .unwrap();
            if !got.as_ref().unwrap().is_empty() {
                break got.unwrap();
            }
            assert!(slept < Duration::from_millis(2 * LEASE_MS), "seed {seed}");
        };
        assert_eq!(again[0].delivery_count, 2, "seed {seed}");
        for id in NODES {
            c.crash(id).await;
        }
    });
}

/// A receive with `options`, to run on the engine's home.
fn receive_with(
    options: &ReceiveOptions,
) -> impl FnOnce(&mut Owner) -> Result<Vec<fila_core::Message>, fila_core::Error> + Send + 'static {
    let options = options.clone();
    move |e| receive_now(e, &options)
}
