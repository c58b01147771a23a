//! `fila cluster ...`: a cluster's status, its members, its leadership
//! (docs/cluster.md).

use std::time::{Duration, Instant};

use fila_client::{Client, ClusterChange};

use super::{connect, output, Args, Failure, Out};

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
                Some(catch_up(&mut c, id, started, wait)?)
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
            let s = c.cluster_status()?;
            let leader = s.leader.map_or("unknown".to_owned(), |l| l.to_string());
            if json {
                println!(
                    "{{\"leader\":{}}}",
                    s.leader.map_or("null".to_owned(), |l| l.to_string())
                );
            } else {
                println!("node {leader} leads now");
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

/// Waits until learner `id` holds the leader's log as it was when the
/// wait began; answers the entry it holds and how long it took since
/// `started`. `c` is connected to the leader (the change followed it).
fn catch_up(
    c: &mut Client,
    id: u64,
    started: Instant,
    wait: Duration,
) -> Result<(u64, Duration), Failure> {
    let target = c.cluster_status()?.last_log_index.unwrap_or(0);
    loop {
        let s = c.cluster_status()?;
        // Only a view that holds it as a learner counts: one taken before
        // the change (refreshed every 100 ms) may name an earlier member
        // under the same id and how far that one had taken the log.
        let matched = s
            .members
            .iter()
            .find(|m| m.id == id && !m.voter)
            .and_then(|m| m.matched_index);
        if let Some(m) = matched.filter(|m| *m >= target) {
            return Ok((m, started.elapsed()));
        }
        if started.elapsed() >= wait {
            return Err(Failure::Refused(format!(
                "node {id} was added as a learner but has not caught up within {} s (it holds {}, the leader {target}): is it running, with join = true and this cluster's secret? fila cluster status shows its progress",
                wait.as_secs(),
                matched.map_or("nothing".to_owned(), |m| m.to_string())
            )));
        }
        std::thread::sleep(POLL);
    }
}
