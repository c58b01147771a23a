//! What `fila redrive` and `fila move` read besides their queue: a
//! filter from `--attr`, `--reason`, `--text`, `--since`, `--until`, and
//! `--preview`, which counts a page at a time.

use super::*;

/// Pages of a preview the CLI asks for at most (10 000 entries each: a
/// queue of 10 million messages).
pub(super) const PREVIEW_PAGES_MAX: u32 = 1_000;

/// The attributes `--attr K=V` names.
pub(super) fn attrs(a: &Args) -> Result<Vec<(String, String)>, Failure> {
    a.values("--attr")
        .into_iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| Failure::Usage(format!("--attr {kv:?} is not KEY=VALUE")))
        })
        .collect()
}

/// A time option: ms since the epoch, or an age (`90s`, `30m`, `2h`, `7d`)
/// counted back from now.
pub(super) fn time_option(a: &Args, name: &str) -> Result<Option<u64>, Failure> {
    let Some(v) = a.value(name) else {
        return Ok(None);
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    MoveFilter::time_of(v, now).map(Some).ok_or_else(|| {
        Failure::Usage(format!(
            "{name}: {v:?} is neither ms since the epoch nor an age like 30m"
        ))
    })
}

/// The filter the options name (empty: every message).
pub(super) fn move_filter(a: &Args) -> Result<MoveFilter, Failure> {
    Ok(MoveFilter {
        attributes: attrs(a)?,
        reason: a.value("--reason").map(str::to_owned),
        text: a.value("--text").map(str::to_owned),
        since_ms: time_option(a, "--since")?,
        until_ms: time_option(a, "--until")?,
    })
}

/// Counts what a redrive (`dlq`) or a move would take, a page at a time,
/// and shows the first 20; moves nothing.
pub(super) fn preview(
    c: &mut Client,
    json: bool,
    queue: &str,
    dlq: bool,
    to: Option<&str>,
    filter: &MoveFilter,
) -> Result<(), Failure> {
    let mut matched = 0;
    let mut first = Vec::new();
    let mut from = 0;
    let mut complete = false;
    for _ in 0..PREVIEW_PAGES_MAX {
        let page = c.preview_move(queue, dlq, to, filter, from)?;
        matched += page.matched;
        let room = 20usize.saturating_sub(first.len());
        first.extend(page.messages.into_iter().take(room));
        match page.next {
            Some(next) => from = next,
            None => {
                complete = true;
                break;
            }
        }
    }
    if json {
        println!(
            "{{\"matched\":{matched},\"complete\":{complete},\"messages\":[{}]}}",
            first
                .iter()
                .map(output::message_json)
                .collect::<Vec<_>>()
                .join(",")
        );
        return Ok(());
    }
    let more = if complete {
        ""
    } else {
        " (at least: the count stopped)"
    };
    println!("{matched} messages would move{more}; nothing moved");
    if !first.is_empty() {
        println!("the first {}:", first.len());
        print_messages(false, &first);
    }
    Ok(())
}
