//! Metrics: counters and latency histograms kept with relaxed atomics on the
//! request path, rendered in the Prometheus text format on demand (the HTTP
//! endpoint that serves them is [`crate::scrape`]).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fila_core::{Engine, QueueStats, Totals};
use fila_proto::Opcode;

/// Upper bounds (µs) of the latency buckets.
const BUCKETS_US: [u64; 12] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 50_000, 250_000,
];

struct OpMetrics {
    requests: AtomicU64,
    errors: AtomicU64,
    sum_us: AtomicU64,
    buckets: [AtomicU64; BUCKETS_US.len()],
}

impl Default for OpMetrics {
    fn default() -> Self {
        OpMetrics {
            requests: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// One per-queue series: name, type, help, and how to read it from stats.
type QueueSeries = (
    &'static str,
    &'static str,
    &'static str,
    fn(&fila_core::QueueStats) -> u64,
);

/// Stripes of the per-operation counters: each event loop records into its
/// own (loop index modulo this), so loops never contend on a counter's
/// cache line; a scrape sums them.
pub const STRIPES: usize = 16;

/// One stripe of per-operation counters, on its own cache lines.
/// What a scrape reads of the engine: totals (atomics, no lock) and the
/// per-queue stats of the first queues by name (a server asks each shard's
/// owner for them; no lock that a request takes).
pub trait EngineView: Send + Sync {
    /// Engine-wide figures.
    fn totals(&self) -> Totals;
    /// The first `max` queues by name with their stats.
    fn queue_stats(&self, max: usize) -> Vec<(String, QueueStats)>;
    /// A cluster node's state (none on a single node).
    fn cluster(&self) -> Option<ClusterSeries> {
        None
    }
}

/// What `/metrics` shows of a cluster node.
pub struct ClusterSeries {
    /// Its view of its cluster.
    pub status: fila_proto::ClusterStatus,
    /// While it leads one: the first such partition's totals (the
    /// engine-wide series).
    pub partition: Option<Totals>,
}

impl EngineView for Engine {
    fn totals(&self) -> Totals {
        Engine::totals(self)
    }
    fn queue_stats(&self, max: usize) -> Vec<(String, QueueStats)> {
        let (names, _) = self.list_queues_page("", "", max.max(1));
        names
            .into_iter()
            .filter_map(|q| self.stats(&q).ok().map(|s| (q, s)))
            .collect()
    }
}

#[repr(align(128))]
struct Stripe {
    ops: [OpMetrics; Opcode::ALL.len()],
}

impl Default for Stripe {
    fn default() -> Stripe {
        Stripe {
            ops: std::array::from_fn(|_| OpMetrics::default()),
        }
    }
}

/// The server's metrics.
pub struct Metrics {
    started: Instant,
    stripes: Box<[Stripe]>,
    /// Open connections.
    pub connections: AtomicU64,
    /// Connections accepted since start.
    pub accepted: AtomicU64,
    /// Connections refused at max_connections.
    pub refused: AtomicU64,
    /// Frames refused as broken (malformed, too large, bad version).
    pub bad_frames: AtomicU64,
    /// TLS connections closed for a TLS error (a bad handshake, a wrong
    /// certificate, a broken record), and those closed for not finishing
    /// their handshake in time.
    pub tls_errors: AtomicU64,
    /// Reloads of tokens and TLS files that took effect.
    pub reloads: AtomicU64,
    /// Receives parked now.
    pub parked: AtomicU64,
    /// Connections moved to the event loop that owns the shard of the
    /// queue they use.
    pub moved: AtomicU64,
    /// The most answer bytes (buffered output plus room held for parked
    /// receives) any one connection has had at once since start: never
    /// above `max_output_bytes`.
    pub output_high_water: AtomicU64,
    /// The SQS API's requests.
    pub sqs: ApiMetrics,
    /// The Azure Queue API's requests.
    pub azure: ApiMetrics,
}

/// The operations of the SQS API, as its metrics name them.
pub const SQS_OPERATIONS: [&str; 23] = [
    "AddPermission",
    "CancelMessageMoveTask",
    "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch",
    "CreateQueue",
    "DeleteMessage",
    "DeleteMessageBatch",
    "DeleteQueue",
    "GetQueueAttributes",
    "GetQueueUrl",
    "ListDeadLetterSourceQueues",
    "ListMessageMoveTasks",
    "ListQueueTags",
    "ListQueues",
    "PurgeQueue",
    "ReceiveMessage",
    "RemovePermission",
    "SendMessage",
    "SendMessageBatch",
    "SetQueueAttributes",
    "StartMessageMoveTask",
    "TagQueue",
    "UntagQueue",
];

/// Counters of one HTTP API (the SQS API, the Azure Queue API): requests,
/// errors and time per operation (loops write them; relaxed).
pub struct ApiMetrics {
    /// The metrics' infix (`fila_<name>_requests_total`).
    name: &'static str,
    /// The API, as the help text names it.
    what: &'static str,
    operations: &'static [&'static str],
    requests: Vec<AtomicU64>,
    errors: Vec<AtomicU64>,
    sum_us: Vec<AtomicU64>,
    /// Requests naming no known operation.
    pub unknown: AtomicU64,
    /// Requests refused for their signature (or its absence).
    pub auth_failures: AtomicU64,
}

impl ApiMetrics {
    /// Counters for `operations` of the API `what`, named
    /// `fila_<name>_...`.
    pub fn new(
        name: &'static str,
        what: &'static str,
        operations: &'static [&'static str],
    ) -> ApiMetrics {
        let zeros = || (0..operations.len()).map(|_| AtomicU64::new(0)).collect();
        ApiMetrics {
            name,
            what,
            operations,
            requests: zeros(),
            errors: zeros(),
            sum_us: zeros(),
            unknown: AtomicU64::new(0),
            auth_failures: AtomicU64::new(0),
        }
    }

    /// Records one answered request of operation `op`.
    pub fn record(&self, op: &str, took: Duration, failed: bool) {
        let Some(i) = self.operations.iter().position(|o| *o == op) else {
            self.unknown.fetch_add(1, Ordering::Relaxed);
            return;
        };
        self.requests[i].fetch_add(1, Ordering::Relaxed);
        if failed {
            self.errors[i].fetch_add(1, Ordering::Relaxed);
        }
        self.sum_us[i].fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    /// Requests answered, every operation together.
    pub fn total(&self) -> u64 {
        self.requests
            .iter()
            .map(|r| r.load(Ordering::Relaxed))
            .sum()
    }

    /// Requests answered with an error, every operation together.
    pub fn total_errors(&self) -> u64 {
        self.errors.iter().map(|r| r.load(Ordering::Relaxed)).sum()
    }

    fn render(&self, o: &mut String) {
        let (name, what) = (self.name, self.what);
        let series: [(&str, String, &[AtomicU64], f64); 3] = [
            (
                "requests_total",
                format!("{what} requests answered, by operation."),
                &self.requests,
                1.0,
            ),
            (
                "request_errors_total",
                format!("{what} requests answered with an error, by operation."),
                &self.errors,
                1.0,
            ),
            (
                "request_seconds_total",
                format!(
                    "Time spent answering {what} requests (long polls included), by operation."
                ),
                &self.sum_us,
                1e6,
            ),
        ];
        for (metric, help, values, scale) in series {
            let _ = writeln!(
                o,
                "# HELP fila_{name}_{metric} {help}\n# TYPE fila_{name}_{metric} counter"
            );
            for (i, op) in self.operations.iter().enumerate() {
                let v = values[i].load(Ordering::Relaxed);
                if scale == 1.0 {
                    let _ = writeln!(o, "fila_{name}_{metric}{{operation=\"{op}\"}} {v}");
                } else {
                    let _ = writeln!(
                        o,
                        "fila_{name}_{metric}{{operation=\"{op}\"}} {}",
                        v as f64 / scale
                    );
                }
            }
        }
        let _ = writeln!(o, "# HELP fila_{name}_unknown_operations_total {what} requests naming no operation of the API.\n# TYPE fila_{name}_unknown_operations_total counter\nfila_{name}_unknown_operations_total {}", self.unknown.load(Ordering::Relaxed));
        let _ = writeln!(o, "# HELP fila_{name}_auth_failures_total {what} requests refused for their signature.\n# TYPE fila_{name}_auth_failures_total counter\nfila_{name}_auth_failures_total {}", self.auth_failures.load(Ordering::Relaxed));
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            started: Instant::now(),
            stripes: (0..STRIPES).map(|_| Stripe::default()).collect(),
            connections: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            bad_frames: AtomicU64::new(0),
            tls_errors: AtomicU64::new(0),
            reloads: AtomicU64::new(0),
            moved: AtomicU64::new(0),
            parked: AtomicU64::new(0),
            output_high_water: AtomicU64::new(0),
            sqs: ApiMetrics::new("sqs", "SQS API", &SQS_OPERATIONS),
            azure: ApiMetrics::new("azure", "Azure Queue API", &fila_azure::request::OPERATIONS),
        }
    }
}

fn op_name(op: Opcode) -> String {
    let mut out = String::new();
    for (i, c) in format!("{op:?}").chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

impl Metrics {
    /// Counter `field` of operation `i`, summed over the stripes.
    fn sum(&self, i: usize, field: impl Fn(&OpMetrics) -> &AtomicU64) -> u64 {
        self.stripes
            .iter()
            .map(|s| field(&s.ops[i]).load(Ordering::Relaxed))
            .sum()
    }

    /// Records one answered request, in the stripe of event loop `lane`.
    pub fn record(&self, lane: usize, op: Opcode, took: Duration, failed: bool) {
        let Some(i) = Opcode::ALL.iter().position(|o| *o == op) else {
            return;
        };
        let m = &self.stripes[lane % STRIPES].ops[i];
        let us = took.as_micros() as u64;
        m.requests.fetch_add(1, Ordering::Relaxed);
        if failed {
            m.errors.fetch_add(1, Ordering::Relaxed);
        }
        m.sum_us.fetch_add(us, Ordering::Relaxed);
        if let Some(i) = BUCKETS_US.iter().position(|b| us <= *b) {
            m.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Named counters for the server-stats request.
    pub fn server_stats(&self, engine: &Totals) -> Vec<(String, u64)> {
        let requests: u64 = (0..Opcode::ALL.len())
            .map(|i| self.sum(i, |m| &m.requests))
            .sum();
        vec![
            (
                "uptime_ms".into(),
                self.started.elapsed().as_millis() as u64,
            ),
            ("queues".into(), engine.queue_count()),
            ("max_queues".into(), engine.limits().max_queues),
            ("stored_bytes".into(), engine.stored_bytes()),
            ("stored_bytes_reserved".into(), engine.reserved_bytes()),
            (
                "puts_refused_disk".into(),
                u64::from(engine.disk() != fila_core::DiskState::Ok),
            ),
            ("max_stored_bytes".into(), engine.limits().max_stored_bytes),
            ("shards".into(), engine.shard_count() as u64),
            (
                "connections".into(),
                self.connections.load(Ordering::Relaxed),
            ),
            (
                "connections_accepted".into(),
                self.accepted.load(Ordering::Relaxed),
            ),
            (
                "connections_refused".into(),
                self.refused.load(Ordering::Relaxed),
            ),
            ("requests".into(), requests),
            (
                "receives_parked".into(),
                self.parked.load(Ordering::Relaxed),
            ),
        ]
    }

    /// Everything in the Prometheus text format.
    /// The Prometheus text: server-wide series, then per-queue series for
    /// the first `max_queues` queues by name (the number left out is
    /// `fila_metrics_queues_omitted`), so a scrape's size and cost stay
    /// bounded however many queues there are.
    pub fn render(&self, view: &dyn EngineView, max_queues: usize) -> String {
        let cluster = view.cluster();
        // A cluster node's queues are its partition's: their series are the
        // leader's (elsewhere the node's own engine's, which holds none).
        let engine = match cluster.as_ref().and_then(|c| c.partition.clone()) {
            Some(partition) => partition,
            None => view.totals(),
        };
        let mut o = String::new();
        let gauge = |o: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };
        gauge(
            &mut o,
            "fila_connections",
            "Open connections.",
            self.connections.load(Ordering::Relaxed),
        );
        gauge(
            &mut o,
            "fila_receives_parked",
            "Long-poll receives waiting.",
            self.parked.load(Ordering::Relaxed),
        );
        gauge(
            &mut o,
            "fila_uptime_seconds",
            "Seconds since the server started.",
            self.started.elapsed().as_secs(),
        );
        gauge(
            &mut o,
            "fila_connection_output_high_water_bytes",
            "The most answer bytes (buffered plus held for parked receives) one connection has had at once.",
            self.output_high_water.load(Ordering::Relaxed),
        );
        let _ = writeln!(o, "# HELP fila_connections_accepted_total Connections accepted.\n# TYPE fila_connections_accepted_total counter\nfila_connections_accepted_total {}", self.accepted.load(Ordering::Relaxed));
        let _ = writeln!(o, "# HELP fila_connections_refused_total Connections refused at max_connections.\n# TYPE fila_connections_refused_total counter\nfila_connections_refused_total {}", self.refused.load(Ordering::Relaxed));
        let _ = writeln!(o, "# HELP fila_bad_frames_total Frames refused as broken.\n# TYPE fila_bad_frames_total counter\nfila_bad_frames_total {}", self.bad_frames.load(Ordering::Relaxed));
        let _ = writeln!(o, "# HELP fila_tls_errors_total TLS connections closed for a TLS error or an unfinished handshake.\n# TYPE fila_tls_errors_total counter\nfila_tls_errors_total {}", self.tls_errors.load(Ordering::Relaxed));
        let _ = writeln!(o, "# HELP fila_reloads_total Reloads of tokens and TLS files that took effect.\n# TYPE fila_reloads_total counter\nfila_reloads_total {}", self.reloads.load(Ordering::Relaxed));
        let _ = writeln!(o, "# HELP fila_connections_moved_total Connections moved to the event loop that owns their queue's shard.\n# TYPE fila_connections_moved_total counter\nfila_connections_moved_total {}", self.moved.load(Ordering::Relaxed));
        let _ = writeln!(o, "# HELP fila_requests_total Requests answered, by operation.\n# TYPE fila_requests_total counter");
        for (i, op) in Opcode::ALL.iter().enumerate() {
            let _ = writeln!(
                o,
                "fila_requests_total{{op=\"{}\"}} {}",
                op_name(*op),
                self.sum(i, |m| &m.requests)
            );
        }
        self.sqs.render(&mut o);
        self.azure.render(&mut o);
        let _ = writeln!(o, "# HELP fila_request_errors_total Requests answered with an error, by operation.\n# TYPE fila_request_errors_total counter");
        for (i, op) in Opcode::ALL.iter().enumerate() {
            let _ = writeln!(
                o,
                "fila_request_errors_total{{op=\"{}\"}} {}",
                op_name(*op),
                self.sum(i, |m| &m.errors)
            );
        }
        let _ = writeln!(o, "# HELP fila_request_duration_seconds Time from decoding a request to its answer (parked receives: to parking).\n# TYPE fila_request_duration_seconds histogram");
        for (i, op) in Opcode::ALL.iter().enumerate() {
            let name = op_name(*op);
            let mut cumulative = 0;
            for (k, b) in BUCKETS_US.iter().enumerate() {
                cumulative += self.sum(i, |m| &m.buckets[k]);
                let _ = writeln!(
                    o,
                    "fila_request_duration_seconds_bucket{{op=\"{name}\",le=\"{}\"}} {cumulative}",
                    *b as f64 / 1e6
                );
            }
            let count = self.sum(i, |m| &m.requests);
            let _ = writeln!(
                o,
                "fila_request_duration_seconds_bucket{{op=\"{name}\",le=\"+Inf\"}} {count}"
            );
            let _ = writeln!(
                o,
                "fila_request_duration_seconds_sum{{op=\"{name}\"}} {}",
                self.sum(i, |m| &m.sum_us) as f64 / 1e6
            );
            let _ = writeln!(
                o,
                "fila_request_duration_seconds_count{{op=\"{name}\"}} {count}"
            );
        }
        gauge(
            &mut o,
            "fila_queues",
            "Queues on the server.",
            engine.queue_count(),
        );
        gauge(
            &mut o,
            "fila_stored_bytes",
            "Bytes held by stored messages: payloads, attributes, bookkeeping, dead-letter records, channels.",
            engine.stored_bytes(),
        );
        gauge(
            &mut o,
            "fila_stored_bytes_reserved",
            "Bytes counted against max_stored_bytes: stored, and room shards took ahead (at most 2 MiB a shard).",
            engine.reserved_bytes(),
        );
        gauge(
            &mut o,
            "fila_puts_refused_disk",
            "1 while puts are refused because the data directory's disk is short of room or not writable.",
            u64::from(engine.disk() != fila_core::DiskState::Ok),
        );
        gauge(
            &mut o,
            "fila_max_stored_bytes",
            "The server's budget for stored messages.",
            engine.limits().max_stored_bytes,
        );
        if let Some(c) = &cluster {
            render_cluster(&mut o, c);
        }
        let queues = if max_queues == 0 {
            Vec::new()
        } else {
            view.queue_stats(max_queues)
        };
        gauge(
            &mut o,
            "fila_metrics_queues_omitted",
            "Queues left out of the per-queue series (metrics_max_queues).",
            engine.queue_count().saturating_sub(queues.len() as u64),
        );
        let per_queue: [QueueSeries; 19] = [
            ("fila_queue_visible", "gauge", "Visible messages.", |s| {
                s.visible
            }),
            ("fila_queue_in_flight", "gauge", "Leased messages.", |s| {
                s.in_flight
            }),
            (
                "fila_queue_delayed",
                "gauge",
                "Delayed or scheduled messages.",
                |s| s.delayed,
            ),
            ("fila_queue_deferred", "gauge", "Deferred messages.", |s| {
                s.deferred
            }),
            (
                "fila_queue_dead_lettered",
                "gauge",
                "Messages in the DLQ.",
                |s| s.dead_lettered,
            ),
            ("fila_queue_bytes", "gauge", "Payload bytes held.", |s| {
                s.bytes
            }),
            (
                "fila_queue_oldest_age_seconds",
                "gauge",
                "Age of the oldest message.",
                |s| s.oldest_age_ms / 1000,
            ),
            ("fila_queue_puts_total", "counter", "Messages put.", |s| {
                s.puts
            }),
            (
                "fila_queue_deliveries_total",
                "counter",
                "Deliveries.",
                |s| s.deliveries,
            ),
            ("fila_queue_deletes_total", "counter", "Deletes.", |s| {
                s.deletes
            }),
            ("fila_queue_expiries_total", "counter", "Expiries.", |s| {
                s.expiries
            }),
            (
                "fila_queue_dead_letterings_total",
                "counter",
                "Dead-letterings.",
                |s| s.dead_letterings,
            ),
            (
                "fila_queue_redriven_total",
                "counter",
                "Messages redriven.",
                |s| s.redriven,
            ),
            (
                "fila_queue_receive_paused",
                "gauge",
                "1 while the queue's receiving is paused.",
                |s| u64::from(s.paused.receive),
            ),
            (
                "fila_queue_send_paused",
                "gauge",
                "1 while the queue's sending is paused.",
                |s| u64::from(s.paused.send),
            ),
            (
                "fila_queue_retries_total",
                "counter",
                "Leases ended without a delete that the retry policy held back.",
                |s| s.retries,
            ),
            (
                "fila_queue_dedup_entries",
                "gauge",
                "Deduplication ids the queue remembers.",
                |s| s.dedup_entries,
            ),
            (
                "fila_queue_groups",
                "gauge",
                "Message groups with messages.",
                |s| s.groups,
            ),
            (
                "fila_queue_groups_in_flight",
                "gauge",
                "Message groups with a leased message.",
                |s| s.groups_in_flight,
            ),
        ];
        for (name, kind, help, f) in per_queue {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (q, s) in &queues {
                let _ = writeln!(o, "{name}{{queue=\"{q}\"}} {}", f(s));
            }
        }
        o
    }
}

/// A cluster node's series: how many partitions it leads, and for each
/// group — the metadata group (`group="meta"`) and each partition (its
/// number) — the leader it knows, its term, its log's indexes and, on the
/// group's leader, how far each member has taken the log.
fn render_cluster(o: &mut String, c: &ClusterSeries) {
    let s = &c.status;
    let leads = s
        .partitions
        .iter()
        .filter(|p| p.leader == Some(s.node_id))
        .count();
    let _ = writeln!(o, "# HELP fila_cluster_leads The partitions this node leads (its queue series are theirs).\n# TYPE fila_cluster_leads gauge\nfila_cluster_leads {leads}");
    struct Group {
        name: String,
        leader: Option<u64>,
        term: u64,
        indexes: [(&'static str, Option<u64>); 3],
        matched: Vec<(u64, u64)>,
    }
    let group = |name: String,
                 leader,
                 term,
                 [last, committed, applied]: [Option<u64>; 3],
                 matched: &mut dyn Iterator<Item = (u64, Option<u64>)>| Group {
        name,
        leader,
        term,
        indexes: [
            ("last", last),
            ("committed", committed),
            ("applied", applied),
        ],
        matched: matched.filter_map(|(id, m)| Some((id, m?))).collect(),
    };
    let mut groups = vec![group(
        "meta".into(),
        s.leader,
        s.term,
        [s.last_log_index, s.committed_index, s.applied_index],
        &mut s.members.iter().map(|m| (m.id, m.matched_index)),
    )];
    groups.extend(s.partitions.iter().map(|p| {
        group(
            p.partition.to_string(),
            p.leader,
            p.term,
            [p.last_log_index, p.committed_index, p.applied_index],
            &mut p.replicas.iter().map(|r| (r.id, r.matched_index)),
        )
    }));
    let _ = writeln!(o, "# HELP fila_cluster_leader The node that leads the group (meta: the metadata group; else a partition), as this node knows it (0: none known).\n# TYPE fila_cluster_leader gauge");
    for g in &groups {
        let _ = writeln!(
            o,
            "fila_cluster_leader{{group=\"{}\"}} {}",
            g.name,
            g.leader.unwrap_or(0)
        );
    }
    let _ = writeln!(o, "# HELP fila_cluster_term The Raft term this node is in, in the group.\n# TYPE fila_cluster_term gauge");
    for g in &groups {
        let _ = writeln!(o, "fila_cluster_term{{group=\"{}\"}} {}", g.name, g.term);
    }
    let _ = writeln!(o, "# HELP fila_cluster_log_index This node's Raft log of the group: its last entry, the last committed, the last applied.\n# TYPE fila_cluster_log_index gauge");
    for g in &groups {
        for (kind, v) in g.indexes {
            if let Some(v) = v {
                let _ = writeln!(
                    o,
                    "fila_cluster_log_index{{group=\"{}\",index=\"{kind}\"}} {v}",
                    g.name
                );
            }
        }
    }
    let _ = writeln!(o, "# HELP fila_cluster_member_matched_index On the group's leader: the last entry each member holds.\n# TYPE fila_cluster_member_matched_index gauge");
    for g in &groups {
        for (member, v) in &g.matched {
            let _ = writeln!(
                o,
                "fila_cluster_member_matched_index{{group=\"{}\",member=\"{member}\"}} {v}",
                g.name
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_cluster_node_shows_each_group_and_the_partitions_it_leads() {
        use fila_proto::{ClusterMemberStatus, ClusterStatus, PartitionStatus, ReplicaStatus};
        let part = |n: u32, leader: u64| PartitionStatus {
            partition: n,
            leader: Some(leader),
            term: 3,
            last_log_index: Some(40 + u64::from(n)),
            committed_index: Some(40),
            applied_index: Some(39),
            replicas: vec![ReplicaStatus {
                id: 2,
                voter: true,
                matched_index: (leader == 1).then_some(38),
            }],
        };
        let status = ClusterStatus {
            node_id: 1,
            leader: Some(2),
            term: 7,
            last_log_index: Some(10),
            committed_index: None,
            applied_index: Some(9),
            members: vec![ClusterMemberStatus {
                id: 2,
                peer: "p".into(),
                client: "c".into(),
                voter: true,
                matched_index: None,
            }],
            partitions: vec![part(0, 1), part(1, 2), part(2, 1)],
        };
        let mut o = String::new();
        render_cluster(
            &mut o,
            &ClusterSeries {
                status,
                partition: None,
            },
        );
        for line in [
            "fila_cluster_leads 2",
            "fila_cluster_leader{group=\"meta\"} 2",
            "fila_cluster_leader{group=\"1\"} 2",
            "fila_cluster_term{group=\"meta\"} 7",
            "fila_cluster_term{group=\"2\"} 3",
            "fila_cluster_log_index{group=\"meta\",index=\"last\"} 10",
            "fila_cluster_log_index{group=\"2\",index=\"last\"} 42",
            "fila_cluster_member_matched_index{group=\"0\",member=\"2\"} 38",
        ] {
            assert!(o.lines().any(|l| l == line), "{line} in\n{o}");
        }
        // What a node does not know is not shown.
        assert!(!o.contains("group=\"meta\",index=\"committed\""), "{o}");
        assert!(!o.contains("matched_index{group=\"1\""), "{o}");
    }

    #[test]
    fn each_loop_records_in_its_own_stripe_and_a_scrape_sums_them() {
        let engine = Engine::new(1, Arc::new(fila_core::ManualClock::new(0)));
        let m = Metrics::default();
        for lane in 0..40 {
            m.record(lane, Opcode::Put, Duration::from_micros(50), lane % 10 == 0);
        }
        m.record(3, Opcode::Delete, Duration::from_micros(50), false);
        // Loops 0..40 wrapped onto the stripes; nothing lost in the sum.
        let put = Opcode::ALL.iter().position(|o| *o == Opcode::Put).unwrap();
        assert_eq!(m.stripes[0].ops[put].requests.load(Ordering::Relaxed), 3);
        let text = m.render(&engine, 0);
        assert!(
            text.contains("fila_requests_total{op=\"put\"} 40"),
            "{text}"
        );
        assert!(
            text.contains("fila_request_errors_total{op=\"put\"} 4"),
            "{text}"
        );
        assert!(text.contains("fila_request_duration_seconds_count{op=\"delete\"} 1"));
        let stats = m.server_stats(&engine.totals());
        assert!(stats.contains(&("requests".to_string(), 41)), "{stats:?}");
    }

    #[test]
    fn per_queue_series_stop_at_the_limit() {
        let engine = Engine::new(2, Arc::new(fila_core::ManualClock::new(0)));
        for i in 0..5 {
            engine
                .create_queue(&format!("q{i}"), fila_core::QueueSettings::default())
                .unwrap();
        }
        let text = Metrics::default().render(&engine, 3);
        assert_eq!(text.matches("fila_queue_visible{").count(), 3);
        assert!(text.contains("fila_metrics_queues_omitted 2"));
        assert!(text.contains("fila_queues 5"));
        let none = Metrics::default().render(&engine, 0);
        assert_eq!(none.matches("fila_queue_visible{").count(), 0);
        assert!(none.contains("fila_metrics_queues_omitted 5"));
    }
}
