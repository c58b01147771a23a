//! `fila cluster ...`: a cluster's status, its members, its leadership
//! (docs/cluster.md).

use std::time::{Duration, Instant};

use fila_client::{Client, ClientOptions, ClusterChange, ClusterStatus};

use super::{client_options, connect, output, Args, Failure, Out};

/// How often `cluster add` looks at the new learner's progress.
const POLL: Duration = Duration::from_millis(100);

const SUBCOMMANDS: &str = "status, add, promote, remove, transfer, move";

fn node_id(a: &Args, i: usize) -> Result<u64, Failure> {
    let v = a.pos(i, "a node id")?;
    v.parse()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| Failure::Usage(format!("{v:?} is not a node id (1 or more)")))
}

pub(super) fn run(a: &Args, json: bool) -> Out {
    let sub = a.pos(1, &format!("a cluster subcommand ({SUBCOMMANDS})"))?;
    match sub {
        "status" => {
            a.check_known(&[])?;
            let s = connect(a)?.cluster_status()?;
            output::cluster_status(json, &s);
        }
        "add" => {
            a.check_known(&["--peer", "--client", "--wait"])?;
            let id = node_id(a, 2)?;
            let addr = |flag: &str| {
                a.value(flag)
                    .map(str::to_owned)
                    .ok_or_else(|| Failure::Usage(format!("cluster add needs {flag} HOST:PORT")))
            };
            let (peer, client) = (addr("--peer")?, addr("--client")?);
            let wait = Duration::from_secs(a.number("--wait")?.unwrap_or(60));
            let mut c = connect(a)?;
            let started = Instant::now();
            c.change_cluster(ClusterChange::AddLearner { id, peer, client })?;
            let caught_up = if wait.is_zero() {
                None
            } else {
                Some(catch_up(&mut c, &client_options(a)?, id, started, wait)?)
            };
            match (json, caught_up) {
                (true, Some((index, took))) => println!(
                    "{{\"id\":{id},\"caught_up_index\":{index},\"caught_up_ms\":{}}}",
                    took.as_millis()
                ),
                (true, None) => println!("{{\"id\":{id}}}"),
                (false, Some((index, took))) => println!(
                    "node {id} added as a learner; it holds the log up to entry {index} ({:.2} s); promote it with: fila cluster promote {id}",
                    took.as_secs_f64()
                ),
                (false, None) => println!("node {id} added as a learner"),
            }
        }
        "promote" | "remove" => {
            a.check_known(&[])?;
            let id = node_id(a, 2)?;
            let change = if sub == "promote" {
                ClusterChange::Promote { id }
            } else {
                ClusterChange::Remove { id }
            };
            connect(a)?.change_cluster(change)?;
            if !json {
                let done = if sub == "promote" {
                    "is a voter"
                } else {
                    "is no longer a member"
                };
                println!("node {id} {done}");
            }
        }
        "move" => {
            a.check_known(&["--peer", "--client"])?;
            let (from, to) = (node_id(a, 2)?, node_id(a, 3)?);
            let addr = |flag: &str| {
                a.value(flag)
                    .map(str::to_owned)
                    .ok_or_else(|| Failure::Usage(format!("cluster move needs {flag} HOST:PORT")))
            };
            let (peer, client) = (addr("--peer")?, addr("--client")?);
            let started = Instant::now();
            connect(a)?.change_cluster(ClusterChange::Move {
                from,
                to,
                peer,
                client,
            })?;
            let took = started.elapsed();
            if json {
                println!(
                    "{{\"from\":{from},\"to\":{to},\"took_ms\":{}}}",
                    took.as_millis()
                );
            } else {
                println!(
                    "node {from}'s replica moved to node {to} ({:.2} s): node {to} is a voter, node {from} no longer a member",
                    took.as_secs_f64()
                );
            }
        }
        "transfer" => {
            a.check_known(&["--to"])?;
            let to = a.number("--to")?;
            let mut c = connect(a)?;
            c.change_cluster(ClusterChange::TransferLeader { to })?;
            // The node's view is refreshed every 100 ms: until it names a
            // leader of every group (3 s at most).
            let asked = Instant::now();
            let mut s = c.cluster_status()?;
            while (s.leader.is_none() || s.partitions.iter().any(|p| p.leader.is_none()))
                && asked.elapsed() < Duration::from_secs(3)
            {
                std::thread::sleep(POLL);
                s = c.cluster_status()?;
            }
            let show = |l: Option<u64>, none: &str| l.map_or(none.to_owned(), |l| l.to_string());
            if json {
                let partitions: Vec<String> = s
                    .partitions
                    .iter()
                    .map(|p| show(p.leader, "null"))
                    .collect();
                println!(
                    "{{\"leader\":{},\"partition_leaders\":[{}]}}",
                    show(s.leader, "null"),
                    partitions.join(",")
                );
            } else {
                let partitions: Vec<String> = s
                    .partitions
                    .iter()
                    .map(|p| {
                        format!(
                            "partition {}: node {}",
                            p.partition,
                            show(p.leader, "unknown")
                        )
                    })
                    .collect();
                println!(
                    "node {} leads the metadata group; {}",
                    show(s.leader, "unknown"),
                    partitions.join(", ")
                );
            }
        }
        other => {
            return Err(Failure::Usage(format!(
                "unknown cluster subcommand {other:?} ({SUBCOMMANDS})"
            )))
        }
    }
    Ok(true)
}

/// How old a node's view of the cluster may be (it is refreshed every
/// 100 ms).
const VIEW_AGE_MAX: Duration = Duration::from_millis(250);

/// Waits until learner `id` holds, in every group of the cluster it is a
/// member of (the metadata group, and each partition whose replica the
/// map gave it), the log that group's leader held
/// when the wait began; answers the least entry it holds of them and how
/// long it took since `started`. Each group's leader is asked (it alone
/// knows how far a member has taken its log): every member is reached
/// through `options`, once.
fn catch_up(
    c: &mut Client,
    options: &ClientOptions,
    id: u64,
    started: Instant,
    wait: Duration,
) -> Result<(u64, Duration), Failure> {
    let changed = Instant::now();
    // By group (`None`: the metadata group): the leader's last entry when
    // first seen, and the learner's last one.
    let mut targets: std::collections::BTreeMap<Option<u32>, u64> = Default::default();
    let mut nodes: Vec<(String, Option<Client>)> = Vec::new();
    loop {
        let s = c.cluster_status()?;
        for m in s.members.iter().filter(|m| m.id != id) {
            if !nodes.iter().any(|(a, _)| *a == m.client) {
                let mut o = options.clone();
                o.addr = m.client.clone();
                o.follow_leader = false;
                nodes.push((m.client.clone(), Client::connect(o).ok()));
            }
        }
        let views: Vec<ClusterStatus> = nodes
            .iter_mut()
            .filter_map(|(_, c)| c.as_mut()?.cluster_status().ok())
            .collect();
        let mut held: std::collections::BTreeMap<Option<u32>, Option<u64>> = Default::default();
        let mut elsewhere = std::collections::BTreeSet::new();
        for v in views.iter().chain([&s]) {
            let learner =
                |m: Option<(bool, Option<u64>)>| m.and_then(|(voter, i)| i.filter(|_| !voter));
            if v.leader == Some(v.node_id) {
                let m = v
                    .members
                    .iter()
                    .find(|m| m.id == id)
                    .map(|m| (m.voter, m.matched_index));
                targets.entry(None).or_insert(v.last_log_index.unwrap_or(0));
                held.insert(None, learner(m));
            }
            for p in v.partitions.iter().filter(|p| p.leader == Some(v.node_id)) {
                let m = p
                    .replicas
                    .iter()
                    .find(|r| r.id == id)
                    .map(|r| (r.voter, r.matched_index));
                // A partition whose leader does not list the node: the
                // map gave it no replica there (trusted once the view is
                // younger than the change).
                if m.is_none() && changed.elapsed() >= VIEW_AGE_MAX {
                    elsewhere.insert(p.partition);
                    continue;
                }
                targets
                    .entry(Some(p.partition))
                    .or_insert(p.last_log_index.unwrap_or(0));
                held.insert(Some(p.partition), learner(m));
            }
        }
        // Only a view that holds it as a learner counts: one taken before
        // the change (refreshed every 100 ms) may name an earlier member
        // under the same id and how far that one had taken the log.
        let groups = 1 + s.partitions.len() - elsewhere.len();
        let caught_up: Vec<u64> = held
            .iter()
            .filter(|(g, _)| g.is_none_or(|p| !elsewhere.contains(&p)))
            .filter_map(|(g, m)| m.filter(|m| *m >= targets[g]))
            .collect();
        if caught_up.len() == groups {
            return Ok((caught_up.into_iter().min().unwrap_or(0), started.elapsed()));
        }
        if started.elapsed() >= wait {
            return Err(Failure::Refused(format!(
                "node {id} was added as a learner but has not caught up within {} s (in {} of {groups} groups): is it running, with join = true and this cluster's secret? fila cluster status shows its progress",
                wait.as_secs(),
                caught_up.len()
            )));
        }
        std::thread::sleep(POLL);
    }
}
