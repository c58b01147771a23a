//! The server's figures as the console's overview shows them (the
//! `Backend::server_rows` of the server's console): connections, parked
//! receives, the engine's or the partition's totals and limits, the log,
//! the disk, memory, the console's own sessions and history.

use std::sync::atomic::Ordering;

use fila_console::pages::bytes;

use super::Console;

/// The overview's rows of the server: each a label and its value.
pub(super) fn rows(console: &Console) -> Vec<(&'static str, String)> {
    let shared = &console.shared;
    let config = &shared.config;
    let figures = Figures::of(console);
    vec![
        (
            "Connections",
            format!(
                "{} of {}",
                shared.connections.load(Ordering::Relaxed),
                config.max_connections
            ),
        ),
        (
            "HTTP API requests",
            [
                ("SQS", &shared.metrics.sqs),
                ("Azure", &shared.metrics.azure),
            ]
            .iter()
            .map(|(api, m)| {
                format!(
                    "{api}: {} answered, {} with an error, {} unauthenticated",
                    m.total(),
                    m.total_errors(),
                    m.auth_failures.load(Ordering::Relaxed)
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
        ),
        (
            "Receives parked",
            format!(
                "{} of {}",
                shared.parked.load(Ordering::Relaxed),
                config.max_parked
            ),
        ),
        (
            "Event loops, shards",
            format!("{}, {}", config.event_loops, config.shards),
        ),
        (
            "Queues",
            match &figures {
                Some(f) => format!("{} of {}", f.queues, f.max_queues),
                None => "unknown (no leader answered)".into(),
            },
        ),
        (
            "Stored",
            match &figures {
                Some(f) => format!("{} of {}", bytes(f.stored), bytes(f.max_stored)),
                None => "unknown (no leader answered)".into(),
            },
        ),
        ("Log", log_state(console)),
        (
            "Disk free",
            match console.disk.as_ref().map(fila_wal::Storage::free_bytes) {
                Some(Ok(Some(free))) => format!(
                    "{} ({} kept in reserve)",
                    bytes(free),
                    bytes(config.disk_reserve_bytes)
                ),
                Some(_) => "unknown".into(),
                None => "no data directory (sync = none)".into(),
            },
        ),
        (
            "Puts",
            match &figures {
                Some(f) if !f.puts_refused => "taken".into(),
                Some(_) => "refused: the disk is short of room or not writable".into(),
                None => "unknown (no leader answered)".into(),
            },
        ),
        (
            "Resident memory",
            resident().map_or("unknown".into(), bytes),
        ),
        (
            "Console",
            format!(
                "{} sessions, {} queues sampled",
                console.sessions.borrow().len(),
                console.history.borrow().len()
            ),
        ),
    ]
}

/// The figures of the queues the server holds: its engine's, or on a
/// cluster node its partition's as the leader answered them last.
struct Figures {
    queues: u64,
    max_queues: u64,
    stored: u64,
    max_stored: u64,
    puts_refused: bool,
}

impl Figures {
    fn of(console: &Console) -> Option<Figures> {
        let shared = &console.shared;
        if shared.cluster.is_none() {
            let t = &shared.totals;
            return Some(Figures {
                queues: t.queue_count(),
                max_queues: t.limits().max_queues,
                stored: t.stored_bytes(),
                max_stored: t.limits().max_stored_bytes,
                puts_refused: t.disk() != fila_core::DiskState::Ok,
            });
        }
        let partition = console.partition.borrow();
        let stats = partition.as_deref()?;
        let stat = |name: &str| stats.iter().find(|(k, _)| k == name).map_or(0, |(_, v)| *v);
        Some(Figures {
            queues: stat("queues"),
            max_queues: stat("max_queues"),
            stored: stat("stored_bytes"),
            max_stored: stat("max_stored_bytes"),
            puts_refused: stat("puts_refused_disk") != 0,
        })
    }
}

/// The log's state in words (a cluster node's: the Raft group's).
fn log_state(console: &Console) -> String {
    let shared = &console.shared;
    if shared.cluster.is_some() {
        let view = shared
            .published
            .view
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let show = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
        return match view.as_ref() {
            Some(v) => {
                let leaders: Vec<String> = v
                    .partitions
                    .iter()
                    .map(|p| format!("partition {}: leader {}", p.partition, show(p.leader)))
                    .collect();
                format!(
                    "cluster node {} of {}, metadata leader {}, term {}; log {} (committed {}, applied {}); {}",
                    v.node_id,
                    v.members.len(),
                    show(v.leader),
                    v.term,
                    show(v.last_log_index),
                    show(v.committed_index),
                    show(v.applied_index),
                    leaders.join(", ")
                )
            }
            None => "cluster node starting or stopping".into(),
        };
    }
    match &shared.marks {
        None => "none (sync = none: nothing is kept across a restart)".into(),
        Some(m) if m.failed() => "FAILED: nothing more is acknowledged".into(),
        Some(m) => format!(
            "sync = {}; {} batches durable, {} waiting, {} snapshots since start",
            format!("{:?}", shared.config.sync).to_lowercase(),
            m.durable(),
            bytes(m.backlog_bytes()),
            m.snapshots()
        ),
    }
}

/// The process's resident memory (Linux: /proc/self/statm).
fn resident() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}
