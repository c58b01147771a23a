//! The pages that show: the overview (queues, paged and filtered by
//! prefix, with their counts and rates; the server), and a queue (its
//! figures and charts, settings, channels, move tasks, and what may be
//! done to it).

use std::time::Instant;

use fila_proto::{Request, Response};

use crate::actions;
use crate::history::{Sample, SPAN};
use crate::html::{url, Html};
use crate::page::{param, Backend, Outcome, Params, Permission, StatusCode, Visitor};

/// Queues on one page of the overview.
pub(crate) const QUEUES_PER_PAGE: u16 = 20;
/// Channels on one page of a queue.
const CHANNELS_PER_PAGE: u16 = 20;

/// `ms` as a short duration.
pub(crate) fn age(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 if ms == 0 => "—".into(),
        0 => format!("{ms} ms"),
        1..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        _ => format!("{} h", s / 3600),
    }
}

/// A time, ms since the epoch, as UTC.
pub(crate) fn when(ms: u64) -> String {
    if ms == 0 {
        return "—".into();
    }
    let secs = ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        ms % 1000
    )
}

fn rate(r: Option<(f64, f64, f64)>, pick: fn((f64, f64, f64)) -> f64) -> String {
    r.map_or("—".into(), |r| format!("{:.1}", pick(r)))
}

/// Bytes in a short unit.
pub fn bytes(n: u64) -> String {
    match n {
        0..=9_999 => format!("{n} B"),
        10_000..=9_999_999 => format!("{} KiB", n >> 10),
        10_000_000..=9_999_999_999 => format!("{} MiB", n >> 20),
        _ => format!("{} GiB", n >> 30),
    }
}

/// The overview: the queues (a page, by prefix) and the server.
pub(crate) async fn overview(console: &impl Backend, v: &Visitor, query: &Params) -> Outcome {
    let prefix = param(query, "prefix").unwrap_or("");
    let after = param(query, "after").unwrap_or("");
    let mut h = Html::default();
    h.el("h1", "", "Queues");
    h.raw("<form method=\"get\" action=\"/\" class=\"filter\">");
    h.field("Prefix", "prefix", prefix);
    h.button("Filter", false).raw("</form>");
    let list = Request::ListQueues {
        prefix: prefix.into(),
        after: after.into(),
        limit: QUEUES_PER_PAGE,
    };
    h.raw("<section id=\"queues\" data-live>");
    match console.call(v, list).await {
        Ok(Response::Queues { names, next }) => {
            h.raw("<table class=\"queues\"><thead>");
            h.head_row(&[
                "Queue",
                "Visible",
                "In flight",
                "Delayed",
                "Deferred",
                "DLQ",
                "Oldest",
                "Put/s",
                "Deliver/s",
                "Delete/s",
                "Depth",
            ]);
            h.raw("</thead><tbody>");
            if names.is_empty() {
                h.raw("<tr><td colspan=\"11\" class=\"muted\">No queues")
                    .raw(if prefix.is_empty() {
                        ""
                    } else {
                        " with that prefix"
                    })
                    .raw(".</td></tr>");
            }
            for name in &names {
                let stats = console
                    .call(v, Request::QueueStats { name: name.clone() })
                    .await;
                console.history().borrow_mut().show(name, Instant::now());
                h.raw("<tr><td>")
                    .link(&format!("/queues/{}", url(name)), name)
                    .raw("</td>");
                match stats {
                    Ok(Response::Stats(s)) => {
                        let r = console.history().borrow().rates(name);
                        for cell in [
                            s.visible.to_string(),
                            s.in_flight.to_string(),
                            s.delayed.to_string(),
                            s.deferred.to_string(),
                            s.dead_lettered.to_string(),
                            age(s.oldest_age_ms),
                            rate(r, |r| r.0),
                            rate(r, |r| r.1),
                            rate(r, |r| r.2),
                        ] {
                            h.el("td", "num", &cell);
                        }
                        // Its depth (visible and in flight) since sampled.
                        let depth: Vec<u64> =
                            console
                                .history()
                                .borrow()
                                .samples(name)
                                .map_or(Vec::new(), |s| {
                                    s.iter()
                                        .map(|s| u64::from(s.visible) + u64::from(s.in_flight))
                                        .collect()
                                });
                        h.raw("<td>");
                        h.spark("s1", span(depth.len()), &depth);
                        h.raw("</td>");
                    }
                    Ok(_) | Err(_) => {
                        h.raw("<td colspan=\"10\" class=\"muted\">")
                            .text("no stats: this token may not manage it")
                            .raw("</td>");
                    }
                }
                h.raw("</tr>");
            }
            h.raw("</tbody></table>");
            if let Some(next) = next {
                h.raw("<p class=\"pager\">").link(
                    &format!("/?prefix={}&after={}", url(prefix), url(&next)),
                    "Next page →",
                );
                h.raw("</p>");
            }
        }
        Ok(_) => {
            h.el("p", "error", "an unexpected answer");
        }
        Err(e) => {
            h.el("p", "error", &e);
        }
    }
    h.raw("</section>");
    server(console, &mut h);
    Outcome::page("Queues", h.finish())
}

/// The server's figures and charts.
fn server(console: &impl Backend, h: &mut Html) {
    let rows = console.server_rows();
    h.raw("<section id=\"server\" data-live><h2>Server</h2><table class=\"kv\">");
    for (k, v) in rows {
        h.raw("<tr>").el("th", "", k).el("td", "", &v).raw("</tr>");
    }
    h.raw("</table><div class=\"row\">");
    let history = console.history().borrow();
    let server = history.server();
    h.chart(
        &format!(
            "Connections and requests a second, {}",
            window(server.len())
        ),
        span(server.len()),
        &[
            (
                "connections",
                "s1",
                server.iter().map(|s| u64::from(s.connections)).collect(),
            ),
            (
                "requests/s",
                "s2",
                server.iter().map(|s| u64::from(s.requests)).collect(),
            ),
        ],
    );
    h.chart(
        &format!("Stored bytes, {}", window(server.len())),
        span(server.len()),
        &[(
            "stored bytes",
            "s3",
            server.iter().map(|s| s.stored_bytes).collect(),
        )],
    );
    h.raw("</div></section>");
}

/// The seconds a chart of `n` samples spans: the samples there are, at
/// least two minutes, at most the hour kept.
fn span(n: usize) -> usize {
    n.clamp(120, SPAN)
}

/// What a chart of `n` samples shows, in words.
fn window(n: usize) -> String {
    match span(n) {
        SPAN => "the last hour".into(),
        s => format!("the last {} min", s.div_ceil(60)),
    }
}

/// A queue's charts from its history.
fn charts(h: &mut Html, samples: &[Sample]) {
    let series = |f: fn(&Sample) -> u32| samples.iter().map(|s| u64::from(f(s))).collect();
    h.chart(
        &format!("Depth, {}", window(samples.len())),
        span(samples.len()),
        &[
            ("visible", "s1", series(|s| s.visible)),
            ("in flight", "s2", series(|s| s.in_flight)),
            (
                "delayed + deferred",
                "s3",
                series(|s| s.delayed + s.deferred),
            ),
            ("DLQ", "s4", series(|s| s.dead_lettered)),
        ],
    );
    h.chart(
        &format!("A second, {}", window(samples.len())),
        span(samples.len()),
        &[
            ("puts", "s1", series(|s| s.puts)),
            ("deliveries", "s2", series(|s| s.deliveries)),
            ("deletes", "s3", series(|s| s.deletes)),
        ],
    );
}

/// A queue: figures, charts, channels, move tasks, settings, actions.
pub(crate) async fn queue(
    console: &impl Backend,
    v: &Visitor,
    name: &str,
    query: &Params,
) -> Outcome {
    let stats = match console
        .call(v, Request::QueueStats { name: name.into() })
        .await
    {
        Ok(Response::Stats(s)) => s,
        Ok(_) => return Outcome::refused(StatusCode::INTERNAL_SERVER_ERROR, "unexpected answer"),
        Err(e) => return Outcome::failed(&e),
    };
    console.history().borrow_mut().show(name, Instant::now());
    let q = url(name);
    let mut h = Html::default();
    h.raw("<p class=\"crumbs\"><a href=\"/\">Queues</a> /</p>");
    h.el("h1", "", name);
    h.raw("<nav class=\"tabs\">");
    for (label, state) in [
        ("Visible", "visible"),
        ("In flight", "in_flight"),
        ("Delayed", "delayed"),
        ("Deferred", "deferred"),
        ("All messages", "all"),
    ] {
        h.link(&format!("/queues/{q}/messages?state={state}"), label);
    }
    h.link(&format!("/queues/{q}/messages?dlq=1"), "Dead letters");
    h.raw("</nav>");
    h.raw("<section id=\"figures\" data-live><table class=\"kv\">");
    for (k, val) in [
        ("Visible", stats.visible.to_string()),
        ("In flight", stats.in_flight.to_string()),
        ("Delayed", stats.delayed.to_string()),
        ("Deferred", stats.deferred.to_string()),
        ("In the DLQ", stats.dead_lettered.to_string()),
        ("Oldest", age(stats.oldest_age_ms)),
        ("Payload bytes", bytes(stats.bytes)),
        (
            "Since start: put, delivered, deleted",
            format!("{}, {}, {}", stats.puts, stats.deliveries, stats.deletes),
        ),
        (
            "Since start: expired, dead-lettered, redriven",
            format!(
                "{}, {}, {}",
                stats.expiries, stats.dead_letterings, stats.redriven
            ),
        ),
        (
            "Since start: leases ended, waiting for a retry",
            stats.retries.to_string(),
        ),
        (
            "Groups (with a lease)",
            format!("{} ({})", stats.groups, stats.groups_in_flight),
        ),
        ("Created", super::pages::when(stats.created_at_ms)),
    ] {
        h.raw("<tr>")
            .el("th", "", k)
            .el("td", "", &val)
            .raw("</tr>");
    }
    h.raw("</table><div class=\"charts\">");
    {
        let history = console.history().borrow();
        let samples: Vec<Sample> = history
            .samples(name)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        charts(&mut h, &samples);
    }
    h.raw("</div></section>");
    channels(console, v, name, query, &mut h).await;
    actions::moves_section(console, v, name, stats.dead_lettered, &mut h).await;
    actions::settings_section(console, v, name, &mut h).await;
    actions::pause_section(console, v, name, &mut h).await;
    if v.may(name, Permission::Manage) {
        h.raw("<section><h2>Purge</h2><p>");
        h.link(&format!("/queues/{q}/purge"), "Purge the queue…");
        h.raw(" · ");
        h.link(&format!("/queues/{q}/purge?dlq=1"), "Purge its DLQ…");
        h.raw("</p></section>");
    }
    Outcome::page(name, h.finish())
}

/// A queue's channels with their backlog, a page at a time.
async fn channels(console: &impl Backend, v: &Visitor, name: &str, query: &Params, h: &mut Html) {
    let after = param(query, "channels_after").unwrap_or("");
    h.raw("<section id=\"channels\" data-live><h2>Channels with messages ready</h2>");
    let req = Request::Channels {
        queue: name.into(),
        after: after.into(),
        limit: CHANNELS_PER_PAGE,
    };
    match console.call(v, req).await {
        Ok(Response::Channels { channels, next }) => {
            h.raw("<table><thead>");
            h.head_row(&["Channel", "Visible", "Held (every state)"]);
            h.raw("</thead><tbody>");
            for c in &channels {
                h.row(&[
                    c.name.clone().unwrap_or_else(|| "(default)".into()),
                    c.visible.to_string(),
                    c.held.to_string(),
                ]);
            }
            h.raw("</tbody></table>");
            if let Some(next) = next {
                h.raw("<p class=\"pager\">").link(
                    &format!("/queues/{}?channels_after={}", url(name), url(&next)),
                    "More channels →",
                );
                h.raw("</p>");
            }
        }
        Ok(_) => {
            h.el("p", "error", "an unexpected answer");
        }
        Err(e) => {
            h.el("p", "muted", &e);
        }
    }
    h.raw("</section>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_sizes_read_as_people_write_them() {
        assert_eq!(when(0), "—");
        assert_eq!(when(1_700_000_000_123), "2023-11-14 22:13:20.123 UTC");
        assert_eq!(when(951_782_400_000), "2000-02-29 00:00:00.000 UTC");
        assert_eq!(age(0), "—");
        assert_eq!(age(250), "250 ms");
        assert_eq!(age(90_000), "90 s");
        assert_eq!(age(3_600_000), "60 min");
        assert_eq!(bytes(12_345), "12 KiB");
    }
}
