//! Messages in the console: browsed by state and sequence number (the
//! queue's or its DLQ's, a page at a time), one message whole (payload as
//! text, pretty-printed JSON or hex; attributes; deliveries; times; a dead
//! letter's source, reason and description), and an operator's delete or
//! dead-letter of it by sequence number.

use fila_core::{DeadLetterReason, Message, State};
use fila_proto::{QueueRef, Request};

use crate::html::{url, Html};
use crate::page::{param, Backend, Outcome, Params, Permission, StatusCode, Visitor};
use crate::pages::{bytes, when};

/// Messages on one page.
const PAGE: usize = 50;
/// Peeks one page may make (each of at most 100 messages): a page skips at
/// most this many hundred messages of other states.
const PEEKS_MAX: usize = 10;
/// Payload bytes a message's page shows.
const SHOWN_MAX: usize = 256 << 10;
/// Characters of a payload's preview in a list.
const PREVIEW: usize = 80;

fn state_name(s: State) -> &'static str {
    match s {
        State::Visible => "visible",
        State::InFlight => "in_flight",
        State::Delayed => "delayed",
        State::Deferred => "deferred",
        State::DeadLettered => "dead-lettered",
    }
}

/// A payload's first characters as text (what is not UTF-8 replaced,
/// control characters shown as `·`).
pub(crate) fn preview(payload: &[u8]) -> String {
    let text = String::from_utf8_lossy(&payload[..payload.len().min(PREVIEW * 4)]);
    let mut out: String = text
        .chars()
        .take(PREVIEW)
        .map(|c| if c.is_control() { '·' } else { c })
        .collect();
    if text.chars().count() > PREVIEW {
        out.push('…');
    }
    out
}

/// A dead letter's reason in words.
fn reason(m: &Message) -> (String, String, String) {
    match m.dead_letter.as_deref() {
        None => Default::default(),
        Some(d) => {
            let (why, desc) = match &d.reason {
                DeadLetterReason::Consumer {
                    reason,
                    description,
                } => (format!("consumer: {reason}"), description.clone()),
                r => (r.as_str().to_owned(), String::new()),
            };
            (d.source_queue.to_string(), why, desc)
        }
    }
}

fn seq_of(seq: &str) -> Option<u64> {
    seq.parse().ok()
}

/// A page of messages of one state (or all), from a sequence number.
pub(crate) async fn browse(
    console: &impl Backend,
    v: &Visitor,
    name: &str,
    query: &Params,
) -> Outcome {
    let dlq = param(query, "dlq") == Some("1");
    let state = param(query, "state").unwrap_or("all");
    let wanted: Option<State> = match (dlq, state) {
        (true, _) | (false, "all") => None,
        (false, "visible") => Some(State::Visible),
        (false, "in_flight") => Some(State::InFlight),
        (false, "delayed") => Some(State::Delayed),
        (false, "deferred") => Some(State::Deferred),
        _ => return Outcome::refused(StatusCode::BAD_REQUEST, "No such state."),
    };
    let from = param(query, "from").and_then(seq_of).unwrap_or(0);
    let mut found: Vec<Message> = Vec::new();
    let mut kept = 0usize;
    let mut next = Some(from);
    for _ in 0..PEEKS_MAX {
        let Some(at) = next else { break };
        let got = match console.peek(v, name, dlq, at, 100).await {
            Ok(got) => got,
            Err(e) => return Outcome::failed(&e),
        };
        next = got.last().map(|m| m.seq + 1);
        let ended = got.is_empty();
        for m in got {
            if wanted.is_none_or(|w| m.state == w) && found.len() < PAGE {
                next = Some(m.seq + 1);
                kept += m.payload.len();
                found.push(m);
            }
        }
        // A page holds at most about two answers' room of messages.
        if ended || found.len() >= PAGE || kept >= crate::page::ANSWER_ROOM {
            break;
        }
    }
    let q = url(name);
    let mut h = Html::default();
    h.raw("<p class=\"crumbs\"><a href=\"/\">Queues</a> / ");
    h.link(&format!("/queues/{q}"), name).raw("</p>");
    let title = if dlq {
        format!("Dead letters of {name}")
    } else {
        format!("Messages of {name}: {}", state.replace('_', " "))
    };
    h.el("h1", "", &title);
    h.raw("<form method=\"get\" class=\"filter\">");
    if dlq {
        h.hidden("dlq", "1");
    } else {
        h.hidden("state", state);
    }
    h.field("From sequence number", "from", &from.to_string());
    h.button("Go", false).raw("</form>");
    h.raw("<section id=\"messages\" data-live><table class=\"messages\"><thead>");
    if dlq {
        h.head_row(&[
            "Seq",
            "Source",
            "Reason",
            "Description",
            "Dead-lettered",
            "Payload",
        ]);
    } else {
        h.head_row(&["Seq", "State", "Deliveries", "Size", "Put", "Payload"]);
    }
    h.raw("</thead><tbody>");
    if found.is_empty() {
        h.raw("<tr><td colspan=\"6\" class=\"muted\">None from here.</td></tr>");
    }
    for m in &found {
        let link = format!(
            "/queues/{q}/messages/{}{}",
            m.seq,
            if dlq { "?dlq=1" } else { "" }
        );
        h.raw("<tr><td>")
            .link(&link, &m.seq.to_string())
            .raw("</td>");
        if dlq {
            let (source, why, desc) = reason(m);
            let at = m.dead_letter.as_ref().map_or(0, |d| d.at_ms);
            for cell in [source, why, desc, when(at)] {
                h.el("td", "", &cell);
            }
        } else {
            for cell in [
                state_name(m.state).to_owned(),
                m.delivery_count.to_string(),
                bytes(m.payload.len() as u64),
                when(m.inserted_at_ms),
            ] {
                h.el("td", "", &cell);
            }
        }
        h.el("td", "payload", &preview(&m.payload));
        h.raw("</tr>");
    }
    h.raw("</tbody></table>");
    // `next` is none once a peek came back empty: nothing is left.
    if let Some(n) = next {
        let mut more = format!("/queues/{q}/messages?from={n}");
        if dlq {
            more.push_str("&dlq=1");
        } else {
            more.push_str(&format!("&state={}", url(state)));
        }
        h.raw("<p class=\"pager\">")
            .link(&more, "Later messages →")
            .raw("</p>");
    }
    h.raw("</section>");
    Outcome::page(title, h.finish())
}

/// `payload` as `view` shows it: text, pretty JSON (text when it is not
/// JSON), or hex; at most [`SHOWN_MAX`] bytes.
fn render(payload: &[u8], view: &str) -> (String, bool) {
    let cut = payload.len() > SHOWN_MAX;
    let shown = &payload[..payload.len().min(SHOWN_MAX)];
    let out = match view {
        "hex" => shown
            .chunks(16)
            .enumerate()
            .map(|(i, row)| {
                let hex: Vec<String> = row.iter().map(|b| format!("{b:02x}")).collect();
                let text: String = row
                    .iter()
                    .map(|&b| {
                        if b.is_ascii_graphic() || b == b' ' {
                            b as char
                        } else {
                            '.'
                        }
                    })
                    .collect();
                format!("{:08x}  {:<47}  {text}\n", i * 16, hex.join(" "))
            })
            .collect(),
        "json" => serde_json::from_slice::<serde_json::Value>(payload)
            .ok()
            .filter(|_| !cut)
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
            .unwrap_or_else(|| String::from_utf8_lossy(shown).into_owned()),
        _ => String::from_utf8_lossy(shown).into_owned(),
    };
    (out, cut)
}

/// One message, whole.
pub(crate) async fn detail(
    console: &impl Backend,
    v: &Visitor,
    name: &str,
    seq: &str,
    query: &Params,
) -> Outcome {
    let dlq = param(query, "dlq") == Some("1");
    let Some(seq) = seq_of(seq) else {
        return Outcome::refused(StatusCode::NOT_FOUND, "No such message.");
    };
    let m = match console.peek(v, name, dlq, seq, 1).await {
        Ok(ms) => match ms.into_iter().next().filter(|m| m.seq == seq) {
            Some(m) => m,
            None => {
                return Outcome::refused(
                    StatusCode::NOT_FOUND,
                    &format!(
                        "No message {seq} in {name}{}.",
                        if dlq { "'s DLQ" } else { "" }
                    ),
                )
            }
        },
        Err(e) => return Outcome::refused(StatusCode::FORBIDDEN, &e),
    };
    let is_json = serde_json::from_slice::<serde_json::Value>(&m.payload).is_ok();
    let view = param(query, "view").unwrap_or(if is_json { "json" } else { "text" });
    let q = url(name);
    let here = format!("/queues/{q}/messages/{seq}");
    let d = if dlq { "&dlq=1" } else { "" };
    let mut h = Html::default();
    h.raw("<p class=\"crumbs\"><a href=\"/\">Queues</a> / ");
    h.link(&format!("/queues/{q}"), name).raw(" / ");
    h.link(
        &format!("/queues/{q}/messages{}", if dlq { "?dlq=1" } else { "" }),
        if dlq { "dead letters" } else { "messages" },
    );
    h.raw("</p>");
    h.el("h1", "", &format!("Message {seq}"));
    h.raw("<table class=\"kv\">");
    let mut rows = vec![
        ("Id", m.id.to_string()),
        ("State", state_name(m.state).to_owned()),
        ("Deliveries", m.delivery_count.to_string()),
        ("Size", bytes(m.payload.len() as u64)),
        (
            "Channel",
            m.channel.as_deref().unwrap_or("(default)").to_owned(),
        ),
        ("Group", m.group.as_deref().unwrap_or("—").to_owned()),
        ("Priority", m.priority.to_string()),
        ("Put", when(m.inserted_at_ms)),
        ("Visible at", when(m.next_visible_at_ms)),
        ("Expires", when(m.expires_at_ms)),
    ];
    if let Some(dl) = m.dead_letter.as_deref() {
        let (source, why, desc) = reason(&m);
        rows.push(("Dead-lettered from", source));
        rows.push(("Reason", why));
        rows.push(("Description", desc));
        rows.push(("Dead-lettered at", when(dl.at_ms)));
        rows.push(("Deliveries in the source", dl.delivery_count.to_string()));
    }
    for (k, val) in rows {
        h.raw("<tr>")
            .el("th", "", k)
            .el("td", "", &val)
            .raw("</tr>");
    }
    h.raw("</table><h2>Failed attempts</h2>");
    match m.attempts.as_deref().map(Vec::as_slice) {
        None | Some([]) => {
            h.el("p", "muted", "None kept.");
        }
        Some(attempts) => {
            h.raw("<table class=\"attempts\"><thead>");
            h.head_row(&["Delivery", "Ended", "At", "Reason", "Description"]);
            h.raw("</thead><tbody>");
            for a in attempts {
                h.row(&[
                    a.delivery.to_string().as_str(),
                    a.end.as_str(),
                    when(a.at_ms).as_str(),
                    a.reason.as_str(),
                    a.description.as_str(),
                ]);
            }
            h.raw("</tbody></table>");
        }
    }
    h.raw("<h2>Attributes</h2>");
    match m.attributes.as_deref() {
        None | Some([]) => {
            h.el("p", "muted", "None.");
        }
        Some(attrs) => {
            h.raw("<table class=\"attrs\"><thead>");
            h.head_row(&["Key", "Value"]);
            h.raw("</thead><tbody>");
            for (k, val) in attrs {
                h.row(&[k.as_ref(), val.as_ref()]);
            }
            h.raw("</tbody></table>");
        }
    }
    h.raw("<h2>Payload</h2><nav class=\"tabs\">");
    for (label, key) in [("Text", "text"), ("JSON", "json"), ("Hex", "hex")] {
        h.link(&format!("{here}?view={key}{d}"), label);
    }
    h.raw("</nav>");
    let (shown, cut) = render(&m.payload, view);
    h.el("pre", "payload", &shown);
    if cut {
        h.el(
            "p",
            "muted",
            &format!("The first {} shown.", bytes(SHOWN_MAX as u64)),
        );
    }
    if v.may(name, Permission::Manage) {
        h.raw("<section class=\"actions\"><h2>Act on it</h2>");
        if !dlq {
            h.form(&format!("{here}/dead-letter"), &v.csrf);
            h.field("Reason", "reason", "console");
            h.field("Description", "description", "");
            h.button("Dead-letter", true).raw("</form>");
        }
        h.form(&format!("{here}/delete"), &v.csrf);
        if dlq {
            h.hidden("dlq", "1");
        }
        h.button("Delete", true).raw("</form></section>");
    }
    Outcome::page(format!("Message {seq} of {name}"), h.finish())
}

/// Deletes one message by sequence number.
pub(crate) async fn delete(
    console: &impl Backend,
    v: &Visitor,
    name: &str,
    seq: &str,
    form: &Params,
) -> Outcome {
    let Some(seq) = seq_of(seq) else {
        return Outcome::refused(StatusCode::NOT_FOUND, "No such message.");
    };
    let dlq = param(form, "dlq") == Some("1");
    let req = Request::DeleteSeq {
        queue: QueueRef {
            name: name.into(),
            dlq,
        },
        seq,
    };
    let back = format!(
        "/queues/{}/messages{}",
        url(name),
        if dlq { "?dlq=1" } else { "" }
    );
    let result = console
        .call(v, req)
        .await
        .map(|_| format!("Message {seq} deleted."));
    Outcome::done(back, result)
}

/// Dead-letters one message by sequence number, with the form's reason.
pub(crate) async fn dead_letter(
    console: &impl Backend,
    v: &Visitor,
    name: &str,
    seq: &str,
    form: &Params,
) -> Outcome {
    let Some(seq) = seq_of(seq) else {
        return Outcome::refused(StatusCode::NOT_FOUND, "No such message.");
    };
    let req = Request::DeadLetterSeq {
        queue: name.into(),
        seq,
        reason: param(form, "reason").unwrap_or("console").into(),
        description: param(form, "description").unwrap_or("").into(),
    };
    let back = format!("/queues/{}/messages", url(name));
    let result = console
        .call(v, req)
        .await
        .map(|_| format!("Message {seq} dead-lettered."));
    Outcome::done(back, result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_render_as_text_json_or_hex() {
        let (t, cut) = render(b"{\"a\":[1,2]}", "json");
        assert_eq!(t, "{\n  \"a\": [\n    1,\n    2\n  ]\n}");
        assert!(!cut);
        assert_eq!(
            render(b"<script>", "json").0,
            "<script>",
            "not JSON: as text"
        );
        let (hex, _) = render(b"AB\x00", "hex");
        assert_eq!(hex, format!("00000000  {:<47}  AB.\n", "41 42 00"));
        let big = vec![b'x'; SHOWN_MAX + 1];
        assert!(render(&big, "text").1, "cut");
        assert_eq!(preview(b"a\nb"), "a·b");
        assert_eq!(
            preview("é".repeat(100).as_bytes()).chars().count(),
            PREVIEW + 1
        );
    }
}
