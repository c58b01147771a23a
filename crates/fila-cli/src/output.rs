//! What `fila` prints: tables for people, JSON for scripts. Payloads that
//! are not UTF-8 are shown as base64, and JSON says which.

use fila_client::{ClientError, Message, Settings};

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

pub(crate) fn state_name(s: u8) -> &'static str {
    match s {
        1 => "visible",
        2 => "in_flight",
        3 => "delayed",
        4 => "deferred",
        5 => "dead_lettered",
        _ => "unknown",
    }
}

/// Standard base64 with padding (RFC 4648), for payloads that are not text.
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A payload as text when it is UTF-8, else as base64 (and which).
pub(crate) fn payload_text(payload: &[u8]) -> (String, &'static str) {
    match std::str::from_utf8(payload) {
        Ok(s) => (s.to_owned(), "utf8"),
        Err(_) => (base64(payload), "base64"),
    }
}

pub(crate) fn reason_name(reason: u8) -> &'static str {
    ["", "max_deliveries", "expired", "consumer"]
        .get(usize::from(reason))
        .copied()
        .unwrap_or("unknown")
}

pub(crate) fn message_json(m: &Message) -> String {
    let attrs: Vec<String> = m
        .attributes
        .iter()
        .map(|(k, v)| format!("{}:{}", json_str(k), json_str(v)))
        .collect();
    let dl = m.dead_letter.as_ref().map_or("null".to_owned(), |d| {
        format!(
            "{{\"source_queue\":{},\"at_ms\":{},\"reason\":{},\"consumer_reason\":{},\"description\":{},\"delivery_count\":{}}}",
            json_str(&d.source_queue),
            d.at_ms,
            json_str(reason_name(d.reason)),
            json_str(&d.consumer_reason),
            json_str(&d.description),
            d.delivery_count
        )
    });
    let attempts: Vec<String> = m
        .attempts
        .iter()
        .map(|a| {
            format!(
                "{{\"at_ms\":{},\"delivery\":{},\"ended\":{},\"reason\":{},\"description\":{}}}",
                a.at_ms,
                a.delivery,
                json_str(ended_name(a.end)),
                json_str(&a.reason),
                json_str(&a.description)
            )
        })
        .collect();
    let (payload, encoding) = payload_text(&m.payload);
    format!(
        "{{\"id\":\"{:032x}\",\"seq\":{},\"payload\":{},\"payload_encoding\":\"{encoding}\",\"payload_bytes\":{},\"attributes\":{{{}}},\"channel\":{},\"inserted_at_ms\":{},\"expires_at_ms\":{},\"next_visible_at_ms\":{},\"delivery_count\":{},\"state\":\"{}\",\"receipt\":{},\"dead_letter\":{},\"group\":{},\"priority\":{},\"attempts\":[{}]}}",
        m.id,
        m.seq,
        json_str(&payload),
        m.payload.len(),
        attrs.join(","),
        m.channel.as_deref().map_or("null".into(), json_str),
        m.inserted_at_ms,
        m.expires_at_ms,
        m.next_visible_at_ms,
        m.delivery_count,
        state_name(m.state),
        m.receipt.map_or("null".into(), |r| format!("\"{}\"", hex(&r))),
        dl,
        m.group.as_deref().map_or("null".into(), json_str),
        m.priority,
        attempts.join(","),
    )
}

/// How a failed attempt's lease ended, by its code.
fn ended_name(end: u8) -> &'static str {
    match end {
        1 => "expired",
        2 => "released",
        3 => "dead_lettered",
        _ => "unknown",
    }
}

pub(crate) fn print_messages(json: bool, ms: &[Message]) {
    if json {
        let items: Vec<String> = ms.iter().map(message_json).collect();
        println!("[{}]", items.join(","));
        return;
    }
    if ms.is_empty() {
        println!("(no messages)");
        return;
    }
    println!(
        "{:>8}  {:<13}  {:>5}  {:<32}  {:<10}  payload",
        "seq", "state", "count", "id", "channel"
    );
    for m in ms {
        let (text, encoding) = payload_text(&m.payload);
        let mut shown: String = text
            .chars()
            .take(60)
            .map(|c| if c.is_control() { '.' } else { c })
            .collect();
        if encoding == "base64" {
            shown = format!("base64:{shown}");
        }
        if text.chars().count() > 60 {
            shown.push('…');
        }
        println!(
            "{:>8}  {:<13}  {:>5}  {:032x}  {:<10}  {}",
            m.seq,
            state_name(m.state),
            m.delivery_count,
            m.id,
            m.channel.as_deref().unwrap_or("-"),
            shown
        );
        if let Some(r) = m.receipt {
            println!("{:>10}receipt {}", "", hex(&r));
        }
        if let Some(g) = &m.group {
            println!("{:>10}group {g}", "");
        }
        if m.priority > 1 {
            println!("{:>10}priority {}", "", m.priority);
        }
        for (k, v) in &m.attributes {
            println!("{:>10}attribute {k}={v}", "");
        }
        if let Some(d) = &m.dead_letter {
            let mut line = format!(
                "{:>10}dead-lettered from {} at {} ms: {} (after {} deliveries)",
                "",
                d.source_queue,
                d.at_ms,
                reason_name(d.reason),
                d.delivery_count
            );
            if d.reason == 3 {
                line.push_str(&format!(
                    ", consumer reason {:?}: {:?}",
                    d.consumer_reason, d.description
                ));
            }
            println!("{line}");
        }
        for a in &m.attempts {
            let mut line = format!(
                "{:>10}failed delivery {} at {} ms: {}",
                "",
                a.delivery,
                a.at_ms,
                ended_name(a.end)
            );
            if !a.reason.is_empty() || !a.description.is_empty() {
                line.push_str(&format!(", {:?}: {:?}", a.reason, a.description));
            }
            println!("{line}");
        }
    }
}

pub(crate) fn print_settings(json: bool, name: &str, s: &Settings) {
    let rows: [(&str, String); 24] = [
        ("visibility_timeout_ms", s.visibility_timeout_ms.to_string()),
        ("max_deliveries", s.max_deliveries.to_string()),
        ("retention_ms", s.retention_ms.to_string()),
        ("max_message_bytes", s.max_message_bytes.to_string()),
        (
            "receive_wait_default_ms",
            s.receive_wait_default_ms.to_string(),
        ),
        (
            "dead_letter_on_expiration",
            s.dead_letter_on_expiration.to_string(),
        ),
        (
            "dead_letter_target",
            s.dead_letter_target.clone().unwrap_or_default(),
        ),
        ("max_messages", s.max_messages.to_string()),
        ("max_bytes", s.max_bytes.to_string()),
        ("channel_capacity_pct", s.channel_capacity_pct.to_string()),
        ("delay_ms", s.delay_ms.to_string()),
        ("dedup_window_ms", s.dedup_window_ms.to_string()),
        ("content_dedup", s.content_dedup.to_string()),
        ("ordered", s.ordered.to_string()),
        ("priority_levels", s.priority_levels.to_string()),
        ("priority_fairness", s.priority_fairness.to_string()),
        ("retry_initial_ms", s.retry_initial_ms.to_string()),
        ("retry_multiplier_pct", s.retry_multiplier_pct.to_string()),
        ("retry_max_ms", s.retry_max_ms.to_string()),
        ("retry_jitter_pct", s.retry_jitter_pct.to_string()),
        ("attempt_history", s.attempt_history.to_string()),
        ("receive_paused", s.paused.receive.to_string()),
        ("send_paused", s.paused.send.to_string()),
        (
            "tags",
            s.tags
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(","),
        ),
    ];
    if json {
        let fields: Vec<String> = rows
            .iter()
            .map(|(k, v)| match *k {
                "dead_letter_target" => format!(
                    "\"{k}\":{}",
                    s.dead_letter_target
                        .as_deref()
                        .map_or("null".into(), json_str)
                ),
                "dead_letter_on_expiration" => format!("\"{k}\":{v}"),
                "tags" => format!(
                    "\"{k}\":{{{}}}",
                    s.tags
                        .iter()
                        .map(|(k, v)| format!("{}:{}", json_str(k), json_str(v)))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                _ => format!("\"{k}\":{v}"),
            })
            .collect();
        println!("{{\"name\":{},{}}}", json_str(name), fields.join(","));
    } else {
        println!("queue {name}");
        for (k, v) in rows {
            println!(
                "  {k:<26} {}",
                match (k, v.is_empty()) {
                    ("dead_letter_target", true) => "(built-in DLQ)".into(),
                    ("tags", true) => "(none)".into(),
                    _ => v,
                }
            );
        }
    }
}

pub(crate) fn print_pairs(json: bool, pairs: &[(String, u64)]) {
    if json {
        let f: Vec<String> = pairs
            .iter()
            .map(|(k, v)| format!("{}:{v}", json_str(k)))
            .collect();
        println!("{{{}}}", f.join(","));
    } else {
        for (k, v) in pairs {
            println!("{k:<22} {v}");
        }
    }
}

/// Prints per-entry results; returns whether all succeeded.
pub(crate) fn print_entries<T>(
    json: bool,
    label: &str,
    entries: &[Result<T, ClientError>],
    show: impl Fn(&T) -> String,
) -> bool {
    let mut ok = true;
    let mut items = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        match e {
            Ok(v) => {
                if json {
                    items.push(format!("{{\"ok\":true,{}}}", show(v)));
                } else {
                    // `show` gives JSON pairs; people see `key value`.
                    let fields = show(v)
                        .replace('"', "")
                        .replace(':', " ")
                        .replace(',', ", ");
                    println!("{label} {i}: ok, {fields}");
                }
            }
            Err(err) => {
                ok = false;
                let code = err.code().map_or("error".into(), |c| c.as_str().to_owned());
                if json {
                    items.push(format!(
                        "{{\"ok\":false,\"error\":{},\"message\":{}}}",
                        json_str(&code),
                        json_str(&err.to_string())
                    ));
                } else {
                    println!("{label} {i}: {err}");
                }
            }
        }
    }
    if json {
        println!("[{}]", items.join(","));
    }
    ok
}

/// Move tasks, a line each (or JSON).
pub(crate) fn print_moves(json: bool, tasks: &[fila_client::MoveInfo]) {
    let status = |s: u8| match s {
        0 => "running",
        1 => "completed",
        2 => "cancelled",
        3 => "failed",
        _ => "unknown",
    };
    if json {
        let items: Vec<String> = tasks
            .iter()
            .map(|t| {
                format!(
                    "{{\"id\":{},\"from_dlq\":{},\"to\":{},\"rate_per_second\":{},\"started_at_ms\":{},\"moved\":{},\"to_move\":{},\"max\":{},\"status\":\"{}\",\"failure\":{},\"filter\":{}}}",
                    t.id,
                    t.from_dlq,
                    t.to.as_deref().map_or("null".into(), json_str),
                    t.rate_per_second,
                    t.started_at_ms,
                    t.moved,
                    t.to_move,
                    t.max_messages.map_or("null".into(), |m| m.to_string()),
                    status(t.status),
                    t.failure.as_deref().map_or("null".into(), json_str),
                    filter_json(&t.filter),
                )
            })
            .collect();
        println!("[{}]", items.join(","));
        return;
    }
    if tasks.is_empty() {
        println!("(no move tasks)");
    }
    for t in tasks {
        let what = if t.from_dlq {
            "redrive from the DLQ".to_owned()
        } else {
            match &t.to {
                Some(q) => format!("move to {q}"),
                None => "move back to the sources".to_owned(),
            }
        };
        println!(
            "task {}: {what}, {} ({} of {} moved, {}/s, started at {} ms){}",
            t.id,
            status(t.status),
            t.moved,
            t.to_move,
            t.rate_per_second,
            t.started_at_ms,
            t.failure
                .as_deref()
                .map_or(String::new(), |f| format!(": {f}"))
        );
        if !t.filter.is_empty() {
            println!("  only: {}", t.filter);
        }
    }
}

/// A move filter as JSON (`null` when it has no condition).
fn filter_json(f: &fila_client::MoveFilter) -> String {
    if f.is_empty() {
        return "null".into();
    }
    let opt_str = |v: &Option<String>| v.as_deref().map_or("null".into(), json_str);
    let opt_num = |v: Option<u64>| v.map_or("null".into(), |n| n.to_string());
    let attributes: Vec<String> = f
        .attributes
        .iter()
        .map(|(k, v)| format!("{}:{}", json_str(k), json_str(v)))
        .collect();
    format!(
        "{{\"attributes\":{{{}}},\"reason\":{},\"text\":{},\"since_ms\":{},\"until_ms\":{}}}",
        attributes.join(","),
        opt_str(&f.reason),
        opt_str(&f.text),
        opt_num(f.since_ms),
        opt_num(f.until_ms),
    )
}

pub(crate) fn print_channels(
    json: bool,
    channels: &[fila_client::ChannelInfo],
    next: Option<&str>,
) {
    if json {
        let items: Vec<String> = channels
            .iter()
            .map(|c| {
                format!(
                    "{{\"name\":{},\"visible\":{},\"held\":{}}}",
                    c.name.as_deref().map_or("null".into(), json_str),
                    c.visible,
                    c.held
                )
            })
            .collect();
        println!(
            "{{\"channels\":[{}],\"next\":{}}}",
            items.join(","),
            next.map_or("null".into(), json_str)
        );
        return;
    }
    for c in channels {
        let name = c.name.as_deref().unwrap_or("(default)");
        println!("{name}\t{} visible\t{} held", c.visible, c.held);
    }
    if let Some(next) = next {
        println!("more: --after {next}");
    }
}

/// A cluster node's view: the node, the metadata group's leader and log's
/// indexes, one line a member (the leader knows how far each has taken
/// the log), then one line a partition: its leader, log, and each
/// replica's lag as its leader knows it.
pub fn cluster_status(json: bool, s: &fila_client::ClusterStatus) {
    let opt = |v: Option<u64>| v.map_or("null".to_owned(), |v| v.to_string());
    let last = s.last_log_index;
    if json {
        let members: Vec<String> = s
            .members
            .iter()
            .map(|m| {
                format!(
                    "{{\"id\":{},\"peer\":{},\"client\":{},\"voter\":{},\"matched_index\":{}}}",
                    m.id,
                    json_str(&m.peer),
                    json_str(&m.client),
                    m.voter,
                    opt(m.matched_index)
                )
            })
            .collect();
        let partitions: Vec<String> = s
            .partitions
            .iter()
            .map(|p| {
                let replicas: Vec<String> = p
                    .replicas
                    .iter()
                    .map(|r| {
                        format!(
                            "{{\"id\":{},\"voter\":{},\"matched_index\":{}}}",
                            r.id,
                            r.voter,
                            opt(r.matched_index)
                        )
                    })
                    .collect();
                format!(
                    "{{\"partition\":{},\"leader\":{},\"term\":{},\"last_log_index\":{},\"committed_index\":{},\"applied_index\":{},\"replicas\":[{}]}}",
                    p.partition,
                    opt(p.leader),
                    p.term,
                    opt(p.last_log_index),
                    opt(p.committed_index),
                    opt(p.applied_index),
                    replicas.join(",")
                )
            })
            .collect();
        println!(
            "{{\"node_id\":{},\"leader\":{},\"term\":{},\"last_log_index\":{},\"committed_index\":{},\"applied_index\":{},\"members\":[{}],\"partitions\":[{}]}}",
            s.node_id,
            opt(s.leader),
            s.term,
            opt(last),
            opt(s.committed_index),
            opt(s.applied_index),
            members.join(","),
            partitions.join(",")
        );
        return;
    }
    let show = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
    println!(
        "node {}, leader {}, term {}; log {} (committed {}, applied {})",
        s.node_id,
        show(s.leader),
        s.term,
        show(last),
        show(s.committed_index),
        show(s.applied_index)
    );
    println!(
        "{:<6} {:<8} {:<24} {:<24} {:>10} {:>8}",
        "id", "role", "client", "peer", "matched", "lag"
    );
    for m in &s.members {
        let role = if Some(m.id) == s.leader {
            "leader"
        } else if m.voter {
            "voter"
        } else {
            "learner"
        };
        let lag = match (last, m.matched_index) {
            (Some(l), Some(mi)) => l.saturating_sub(mi).to_string(),
            _ => "-".to_owned(),
        };
        println!(
            "{:<6} {:<8} {:<24} {:<24} {:>10} {:>8}",
            m.id,
            role,
            m.client,
            m.peer,
            show(m.matched_index),
            lag
        );
    }
    if s.partitions.is_empty() {
        return;
    }
    println!(
        "{:<10} {:<7} {:>6} {:>10} {:>10}  replicas (id:lag, * learner)",
        "partition", "leader", "term", "log", "applied"
    );
    for p in &s.partitions {
        let replicas: Vec<String> = p
            .replicas
            .iter()
            .map(|r| {
                let lag = match (p.last_log_index, r.matched_index) {
                    (Some(l), Some(mi)) => l.saturating_sub(mi).to_string(),
                    _ => "-".to_owned(),
                };
                let learner = if r.voter { "" } else { "*" };
                format!("{}{learner}:{lag}", r.id)
            })
            .collect();
        println!(
            "{:<10} {:<7} {:>6} {:>10} {:>10}  {}",
            p.partition,
            show(p.leader),
            p.term,
            show(p.last_log_index),
            show(p.applied_index),
            replicas.join(" ")
        );
    }
}
