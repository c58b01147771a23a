//! What the console changes on a queue: its settings, a pause or a resume
//! of its receiving or sending, a redrive of its DLQ (paced, with its
//! progress and a cancel; filtered, with a preview first), a purge (after
//! typing the queue's name). Each is a form with the session's CSRF token, runs as the
//! signed-in token (a grant it lacks refuses it), and comes back to the
//! queue's page saying how it went.

use fila_proto::{Halves, MoveFilter, QueueRef, Request, Response, Settings, SettingsPatch};

use crate::html::{url, Html};
use crate::page::{param, Backend, Outcome, Params, Permission, StatusCode, Visitor};
use crate::pages::when;

/// The settings the console edits: label, form name, and how each is read
/// from the settings and written into a patch.
struct Field {
    label: &'static str,
    name: &'static str,
    get: fn(&Settings) -> String,
    set: fn(&mut SettingsPatch, &str) -> Result<(), String>,
}

fn number<T: std::str::FromStr>(name: &str, v: &str) -> Result<T, String> {
    v.trim()
        .parse()
        .map_err(|_| format!("{name}: {v:?} is not a whole number in its range"))
}

fn boolean(name: &str, v: &str) -> Result<bool, String> {
    match v.trim() {
        "true" | "on" | "yes" | "1" => Ok(true),
        "false" | "off" | "no" | "0" => Ok(false),
        _ => Err(format!("{name}: {v:?} is not true or false")),
    }
}

macro_rules! field {
    ($label:literal, $name:ident, $parse:ident) => {
        Field {
            label: $label,
            name: stringify!($name),
            get: |s| s.$name.to_string(),
            set: |p, v| {
                p.$name = Some($parse(stringify!($name), v)?);
                Ok(())
            },
        }
    };
}

const FIELDS: [Field; 21] = [
    field!("Visibility timeout (ms)", visibility_timeout_ms, number),
    field!("Max deliveries (0: no limit)", max_deliveries, number),
    field!("Retention (ms)", retention_ms, number),
    field!("Max message bytes", max_message_bytes, number),
    field!("Receive wait default (ms)", receive_wait_default_ms, number),
    field!("Delay of every put (ms)", delay_ms, number),
    field!("Max messages", max_messages, number),
    field!("Max bytes", max_bytes, number),
    field!("Channel capacity (%)", channel_capacity_pct, number),
    field!(
        "Dead-letter on expiration",
        dead_letter_on_expiration,
        boolean
    ),
    field!("Dedup window (ms)", dedup_window_ms, number),
    field!("Content dedup", content_dedup, boolean),
    field!("Ordered (every put in a group)", ordered, boolean),
    field!("Priority levels", priority_levels, number),
    field!("Priority fairness (0: strict)", priority_fairness, number),
    field!(
        "Retry: first wait after a failed lease (ms; 0: off)",
        retry_initial_ms,
        number
    ),
    field!(
        "Retry: each wait, % of the one before",
        retry_multiplier_pct,
        number
    ),
    field!("Retry: longest wait (ms)", retry_max_ms, number),
    field!("Retry: jitter (% of a wait)", retry_jitter_pct, number),
    field!(
        "Failed attempts each message keeps (0-32)",
        attempt_history,
        number
    ),
    Field {
        label: "Dead-letter target (empty: its own DLQ)",
        name: "dead_letter_target",
        get: |s| s.dead_letter_target.clone().unwrap_or_default(),
        set: |p, v| {
            let v = v.trim();
            p.dead_letter_target = Some((!v.is_empty()).then(|| v.to_owned()));
            Ok(())
        },
    },
];

/// The queue's settings: a form with the manage grant, a table without.
pub(crate) async fn settings_section(
    console: &impl Backend,
    v: &Visitor,
    name: &str,
    h: &mut Html,
) {
    h.raw("<section id=\"settings\"><h2>Settings</h2>");
    let s = match console
        .call(v, Request::GetQueue { name: name.into() })
        .await
    {
        Ok(Response::Queue(s)) => s,
        Ok(_) => {
            h.el("p", "error", "an unexpected answer").raw("</section>");
            return;
        }
        Err(e) => {
            h.el("p", "muted", &e).raw("</section>");
            return;
        }
    };
    let manage = v.may(name, Permission::Manage);
    if manage {
        h.form(&format!("/queues/{}/settings", url(name)), &v.csrf);
    }
    h.raw("<table class=\"kv settings\">");
    for f in &FIELDS {
        h.raw("<tr>").el("th", "", f.label).raw("<td>");
        if manage {
            h.field("", f.name, &(f.get)(&s));
        } else {
            h.text(&(f.get)(&s));
        }
        h.raw("</td></tr>");
    }
    if !s.tags.is_empty() {
        let tags: Vec<String> = s.tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
        h.raw("<tr>")
            .el("th", "", "Tags")
            .el("td", "", &tags.join(", "))
            .raw("</tr>");
    }
    h.raw("</table>");
    if manage {
        h.button("Save settings", false).raw("</form>");
    }
    h.raw("</section>");
}

/// Saves the settings the form changed.
pub(crate) async fn settings(
    console: &impl Backend,
    v: &Visitor,
    name: &str,
    form: &Params,
) -> Outcome {
    let back = format!("/queues/{}", url(name));
    let current = match console
        .call(v, Request::GetQueue { name: name.into() })
        .await
    {
        Ok(Response::Queue(s)) => s,
        Ok(_) => return Outcome::done(back, Err("an unexpected answer".into())),
        Err(e) => return Outcome::done(back, Err(e)),
    };
    let mut patch = SettingsPatch::default();
    let mut changed = Vec::new();
    for f in &FIELDS {
        let Some(value) = param(form, f.name) else {
            continue;
        };
        if value.trim() == (f.get)(&current) {
            continue;
        }
        if let Err(e) = (f.set)(&mut patch, value) {
            return Outcome::done(back, Err(e));
        }
        changed.push(f.name);
    }
    if changed.is_empty() {
        return Outcome::done(back, Ok("Nothing changed.".into()));
    }
    let req = Request::UpdateQueue {
        name: name.into(),
        settings: patch,
    };
    let result = console
        .call(v, req)
        .await
        .map(|_| format!("Saved: {}.", changed.join(", ")));
    Outcome::done(back, result)
}

fn status(s: u8) -> &'static str {
    match s {
        0 => "running",
        1 => "completed",
        2 => "cancelled",
        3 => "failed",
        _ => "unknown",
    }
}

/// The queue's move tasks (redrives among them) with their progress, and
/// the redrive form.
pub(crate) async fn moves_section(
    console: &impl Backend,
    v: &Visitor,
    name: &str,
    dead_lettered: u64,
    h: &mut Html,
) {
    let q = url(name);
    h.raw("<section id=\"moves\" data-live><h2>Redrive and move tasks</h2>");
    match console
        .call(v, Request::ListMoves { queue: name.into() })
        .await
    {
        Ok(Response::Moves(tasks)) if !tasks.is_empty() => {
            h.raw("<table class=\"moves\"><thead>");
            h.head_row(&[
                "#", "What", "Status", "Moved", "To move", "Rate/s", "Started", "",
            ]);
            h.raw("</thead><tbody>");
            for t in tasks.iter().rev() {
                let mut what = match (&t.to, t.from_dlq) {
                    (_, true) => "redrive of the DLQ".to_owned(),
                    (Some(to), false) => format!("move to {to}"),
                    (None, false) => "move back to the sources".to_owned(),
                };
                if !t.filter.is_empty() {
                    what.push_str(&format!(" (only: {})", t.filter));
                }
                let mut state = status(t.status).to_owned();
                if let Some(f) = &t.failure {
                    state.push_str(": ");
                    state.push_str(f);
                }
                h.raw("<tr>");
                for cell in [
                    t.id.to_string(),
                    what,
                    state,
                    t.moved.to_string(),
                    t.to_move.to_string(),
                    t.rate_per_second.to_string(),
                    when(t.started_at_ms),
                ] {
                    h.el("td", "", &cell);
                }
                h.raw("<td>");
                if t.status == 0 && v.may(name, Permission::Manage) {
                    h.form(&format!("/queues/{q}/moves/{}/cancel", t.id), &v.csrf)
                        .button("Cancel", true)
                        .raw("</form>");
                }
                h.raw("</td></tr>");
            }
            h.raw("</tbody></table>");
        }
        Ok(_) => {
            h.el("p", "muted", "No move tasks yet.");
        }
        Err(e) => {
            h.el("p", "muted", &e);
        }
    }
    h.raw("</section>");
    if v.may(name, Permission::Manage) {
        h.raw("<section><h3>Redrive the DLQ</h3>");
        h.el(
            "p",
            "muted",
            &format!(
                "{dead_lettered} dead letters: each goes back to the queue, its delivery count reset."
            ),
        );
        h.form(&format!("/queues/{q}/redrive"), &v.csrf);
        h.field("A second (1–10000)", "rate", "100");
        h.field("At most (empty: all)", "max", "");
        filter_fields(h, &Params::new());
        // The first button, what Enter does: a look, nothing moved.
        h.raw("<button type=\"submit\" formmethod=\"get\" formaction=\"")
            .text(&format!("/queues/{q}/redrive-preview"))
            .raw("\">Preview</button>");
        h.button("Redrive", false).raw("</form></section>");
    }
}

/// The redrive form's filter fields: label and name.
const FILTER_FIELDS: [(&str, &str); 5] = [
    ("Only with attribute (key=value)", "attr"),
    ("Only failed for reason", "reason"),
    ("Only with text (in a reason or description)", "text"),
    (
        "Failed since (ms since the epoch, or an age: 30m, 2h, 7d)",
        "since",
    ),
    ("Failed before (the same)", "until"),
];

/// Pages of a preview the console asks for at most (10 000 entries each).
const PREVIEW_PAGES_MAX: usize = 100;

/// Dead letters a preview shows, at most.
const PREVIEW_SHOWN: usize = 20;

fn filter_fields(h: &mut Html, values: &Params) {
    for (label, name) in FILTER_FIELDS {
        h.field(label, name, param(values, name).unwrap_or(""));
    }
}

/// The filter a form or a query names (an empty field: no condition).
fn filter_of(p: &Params) -> Result<MoveFilter, String> {
    let given = |name: &'static str| param(p, name).map(str::trim).filter(|v| !v.is_empty());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let time = |name: &'static str| {
        given(name)
            .map(|v| {
                MoveFilter::time_of(v, now).ok_or_else(|| {
                    format!("{name}: {v:?} is neither ms since the epoch nor an age like 30m")
                })
            })
            .transpose()
    };
    let attributes = match given("attr") {
        None => Vec::new(),
        Some(kv) => {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("attr: {kv:?} is not key=value"))?;
            vec![(k.trim().to_owned(), v.trim().to_owned())]
        }
    };
    Ok(MoveFilter {
        attributes,
        reason: given("reason").map(str::to_owned),
        text: given("text").map(str::to_owned),
        since_ms: time("since")?,
        until_ms: time("until")?,
    })
}

/// The form fields that say `f` again, its times as ms (so that a redrive
/// started from a preview takes what the preview counted).
fn filter_params(f: &MoveFilter) -> Vec<(&'static str, String)> {
    let mut p = Vec::new();
    if let Some((k, v)) = f.attributes.first() {
        p.push(("attr", format!("{k}={v}")));
    }
    for (name, v) in [("reason", &f.reason), ("text", &f.text)] {
        if let Some(v) = v {
            p.push((name, v.clone()));
        }
    }
    for (name, v) in [("since", f.since_ms), ("until", f.until_ms)] {
        if let Some(v) = v {
            p.push((name, v.to_string()));
        }
    }
    p
}

/// What a redrive with the query's filter would take: how many, the first
/// 20, and a form that starts it. Moves nothing.
pub(crate) async fn redrive_preview(
    console: &impl Backend,
    v: &Visitor,
    name: &str,
    query: &Params,
) -> Outcome {
    let filter = match filter_of(query) {
        Ok(f) => f,
        Err(e) => return Outcome::refused(StatusCode::BAD_REQUEST, &e),
    };
    let (mut matched, mut first, mut from, mut complete) = (0, Vec::new(), 0, false);
    for _ in 0..PREVIEW_PAGES_MAX {
        let req = Request::PreviewMove {
            queue: name.into(),
            dlq: true,
            back_to_source: false,
            filter: filter.clone(),
            from_seq: from,
        };
        match console.call(v, req).await {
            Ok(Response::Preview {
                matched: m,
                next,
                messages,
            }) => {
                matched += m;
                let room = PREVIEW_SHOWN.saturating_sub(first.len());
                first.extend(messages.into_iter().take(room));
                match next {
                    Some(n) => from = n,
                    None => {
                        complete = true;
                        break;
                    }
                }
            }
            Ok(_) => return Outcome::failed("an unexpected answer"),
            Err(e) => return Outcome::failed(&e),
        }
    }
    let q = url(name);
    let mut h = Html::default();
    h.raw("<p class=\"crumbs\"><a href=\"/\">Queues</a> / ");
    h.link(&format!("/queues/{q}"), name).raw("</p>");
    let title = format!("Redrive preview of {name}");
    h.el("h1", "", &title);
    let only = if filter.is_empty() {
        "every dead letter".to_owned()
    } else {
        format!("only: {filter}")
    };
    let count = if complete {
        format!("{matched} dead letters would go back ({only}). Nothing has moved.")
    } else {
        format!("At least {matched} dead letters would go back ({only}): the count stopped. Nothing has moved.")
    };
    h.el("p", "preview-count", &count);
    h.raw("<table class=\"messages\"><thead>");
    h.head_row(&[
        "Seq",
        "Reason",
        "Description",
        "Dead-lettered",
        "Attributes",
        "Payload",
    ]);
    h.raw("</thead><tbody>");
    for m in &first {
        let (why, desc, at) = m.dead_letter.as_ref().map_or_else(Default::default, |d| {
            let why = match d.reason {
                1 => "max_deliveries".to_owned(),
                2 => "expired".to_owned(),
                _ => format!("consumer: {}", d.consumer_reason),
            };
            (why, d.description.clone(), when(d.at_ms))
        });
        let attributes: Vec<String> = m
            .attributes
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        h.raw("<tr><td>")
            .link(
                &format!("/queues/{q}/messages/{}?dlq=1", m.seq),
                &m.seq.to_string(),
            )
            .raw("</td>");
        for cell in [why, desc, at, attributes.join(", ")] {
            h.el("td", "", &cell);
        }
        h.el("td", "payload", &crate::messages::preview(&m.payload));
        h.raw("</tr>");
    }
    h.raw("</tbody></table>");
    if v.may(name, Permission::Manage) && matched > 0 {
        h.form(&format!("/queues/{q}/redrive"), &v.csrf);
        for (k, value) in filter_params(&filter) {
            h.hidden(k, &value);
        }
        h.field(
            "A second (1–10000)",
            "rate",
            param(query, "rate").unwrap_or("100"),
        );
        h.field(
            "At most (empty: all)",
            "max",
            param(query, "max").unwrap_or(""),
        );
        h.button("Redrive these", false).raw("</form>");
    }
    Outcome::page(title, h.finish())
}

/// Starts a redrive of the DLQ at the form's rate.
pub(crate) async fn redrive(
    console: &impl Backend,
    v: &Visitor,
    name: &str,
    form: &Params,
) -> Outcome {
    let back = format!("/queues/{}", url(name));
    let rate = match param(form, "rate").map(str::trim).filter(|r| !r.is_empty()) {
        None => None,
        Some(r) => match r.parse::<u32>() {
            Ok(r) => Some(r),
            Err(_) => {
                return Outcome::done(back, Err(format!("rate: {r:?} is not a whole number")))
            }
        },
    };
    let max = match param(form, "max").map(str::trim).filter(|r| !r.is_empty()) {
        None => None,
        Some(m) => match m.parse::<u64>() {
            Ok(m) => Some(m),
            Err(_) => return Outcome::done(back, Err(format!("max: {m:?} is not a whole number"))),
        },
    };
    let filter = match filter_of(form) {
        Ok(f) => f,
        Err(e) => return Outcome::done(back, Err(e)),
    };
    let only = if filter.is_empty() {
        String::new()
    } else {
        format!(" (only: {filter})")
    };
    let req = Request::Redrive {
        queue: name.into(),
        max_messages: max,
        rate_per_second: rate,
        filter,
    };
    let result = match console.call(v, req).await {
        Ok(Response::Redrive { moved, scheduled }) => Ok(format!(
            "Redrive started{only}: {moved} moved now, at most {scheduled} more at the rate."
        )),
        Ok(_) => Err("an unexpected answer".into()),
        Err(e) => Err(e),
    };
    Outcome::done(back, result)
}

/// Cancels a running move task.
pub(crate) async fn cancel_move(
    console: &impl Backend,
    v: &Visitor,
    name: &str,
    id: &str,
) -> Outcome {
    let back = format!("/queues/{}", url(name));
    let Ok(id) = id.parse::<u64>() else {
        return Outcome::refused(StatusCode::NOT_FOUND, "No such task.");
    };
    let req = Request::CancelMove {
        queue: name.into(),
        id,
    };
    let result = console
        .call(v, req)
        .await
        .map(|_| format!("Task {id} cancelled."));
    Outcome::done(back, result)
}

/// What of the queue is paused, with a button to pause or resume each
/// half (for a token that may manage it).
pub(crate) async fn pause_section(console: &impl Backend, v: &Visitor, name: &str, h: &mut Html) {
    if !v.may(name, Permission::Manage) {
        return;
    }
    let Ok(Response::Queue(s)) = console
        .call(v, Request::GetQueue { name: name.into() })
        .await
    else {
        return;
    };
    h.raw("<section id=\"pause\"><h2>Pause</h2><table class=\"kv\">");
    for (label, half, paused) in [
        ("Receiving", "receive", s.paused.receive),
        ("Sending", "send", s.paused.send),
    ] {
        h.raw("<tr>")
            .el("th", "", label)
            .el("td", "", if paused { "paused" } else { "running" })
            .raw("<td>");
        h.form(&format!("/queues/{}/pause", url(name)), &v.csrf);
        h.hidden("half", half);
        h.hidden("to", if paused { "resume" } else { "pause" });
        h.button(if paused { "Resume" } else { "Pause" }, !paused)
            .raw("</form></td></tr>");
    }
    h.raw("</table></section>");
}

/// Pauses or resumes the half of the queue the form names.
pub(crate) async fn pause(
    console: &impl Backend,
    v: &Visitor,
    name: &str,
    form: &Params,
) -> Outcome {
    let back = format!("/queues/{}", url(name));
    let (halves, what) = match param(form, "half") {
        Some("receive") => (
            Halves {
                receive: true,
                send: false,
            },
            "Receiving",
        ),
        Some("send") => (
            Halves {
                receive: false,
                send: true,
            },
            "Sending",
        ),
        _ => return Outcome::done(back, Err("Pause what? (receive or send)".into())),
    };
    let name = name.to_owned();
    let (req, done) = match param(form, "to") {
        Some("pause") => (Request::PauseQueue { name, halves }, "paused"),
        Some("resume") => (Request::ResumeQueue { name, halves }, "resumed"),
        _ => return Outcome::done(back, Err("Pause or resume? (to)".into())),
    };
    let result = console
        .call(v, req)
        .await
        .map(|_| format!("{what} {done}."));
    Outcome::done(back, result)
}

/// The purge's confirmation: type the queue's name.
pub(crate) fn purge_confirm(v: &Visitor, name: &str, query: &Params) -> Outcome {
    if !v.may(name, Permission::Manage) {
        return Outcome::refused(
            StatusCode::FORBIDDEN,
            &format!("forbidden: this token may not manage queue {name:?}"),
        );
    }
    let dlq = param(query, "dlq") == Some("1");
    let what = if dlq { "its DLQ" } else { "the queue" };
    let mut h = Html::default();
    h.el("h1", "", &format!("Purge {what}: {name}"));
    h.el(
        "p",
        "warning",
        &format!(
            "Every message of {what} goes, in every state, now and for good. Type the queue's name to confirm."
        ),
    );
    h.form(&format!("/queues/{}/purge", url(name)), &v.csrf);
    if dlq {
        h.hidden("dlq", "1");
    }
    h.field("Queue name", "confirm", "");
    h.button("Purge", true).raw("</form><p>");
    h.link(&format!("/queues/{}", url(name)), "Cancel");
    h.raw("</p>");
    Outcome::page(format!("Purge {name}"), h.finish())
}

/// Purges the queue or its DLQ once the form names it.
pub(crate) async fn purge(
    console: &impl Backend,
    v: &Visitor,
    name: &str,
    form: &Params,
) -> Outcome {
    let back = format!("/queues/{}", url(name));
    let dlq = param(form, "dlq") == Some("1");
    if param(form, "confirm").map(str::trim) != Some(name) {
        return Outcome::done(
            format!(
                "/queues/{}/purge{}",
                url(name),
                if dlq { "?dlq=1" } else { "" }
            ),
            Err("Not purged: the name typed is not the queue's.".into()),
        );
    }
    let req = Request::Purge {
        queue: QueueRef {
            name: name.into(),
            dlq,
        },
    };
    let what = if dlq { "Its DLQ" } else { "The queue" };
    let result = console
        .call(v, req)
        .await
        .map(|_| format!("{what} was purged."));
    Outcome::done(back, result)
}
