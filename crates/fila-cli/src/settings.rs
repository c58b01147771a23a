//! A queue's settings from the command line: the flags `queue create` and
//! `queue update` take, as a patch.

use super::*;

pub(super) const SETTINGS_FLAGS: [&str; 23] = [
    "--visibility-timeout",
    "--max-deliveries",
    "--retention",
    "--max-message-bytes",
    "--receive-wait",
    "--dead-letter-on-expiration",
    "--dead-letter-target",
    "--max-messages",
    "--max-bytes",
    "--channel-capacity",
    "--queue-delay",
    "--tag",
    "--untag",
    "--dedup-window",
    "--content-dedup",
    "--ordered",
    "--priority-levels",
    "--priority-fairness",
    "--retry-initial",
    "--retry-multiplier",
    "--retry-max",
    "--retry-jitter",
    "--attempt-history",
];

/// `--retry-multiplier`: a factor (`2`, `1.5`, at most two decimals) as
/// the percent the protocol carries (`200`, `150`).
pub(super) fn multiplier(a: &Args) -> Result<Option<u32>, Failure> {
    let Some(v) = a.value("--retry-multiplier") else {
        return Ok(None);
    };
    let bad = || {
        Failure::Usage(format!(
            "--retry-multiplier: {v:?} is not a factor such as 2 or 1.5"
        ))
    };
    let (whole, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 2 || whole.is_empty() || !frac.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    let whole: u32 = whole.parse().map_err(|_| bad())?;
    let hundredths: u32 = format!("{frac:0<2}").parse().map_err(|_| bad())?;
    whole
        .checked_mul(100)
        .and_then(|w| w.checked_add(hundredths))
        .map(Some)
        .ok_or_else(bad)
}

/// A `true` / `false` flag's value.
pub(super) fn boolean(a: &Args, flag: &str) -> Result<Option<bool>, Failure> {
    a.value(flag)
        .map(|v| match v {
            "true" | "yes" | "1" => Ok(true),
            "false" | "no" | "0" => Ok(false),
            _ => Err(Failure::Usage(format!(
                "{flag}: {v:?} is not true or false"
            ))),
        })
        .transpose()
}

pub(super) fn patch(a: &Args) -> Result<SettingsPatch, Failure> {
    Ok(SettingsPatch {
        visibility_timeout_ms: a.number("--visibility-timeout")?,
        max_deliveries: a.number("--max-deliveries")?,
        retention_ms: a.number("--retention")?,
        max_message_bytes: a.number("--max-message-bytes")?,
        receive_wait_default_ms: a.number("--receive-wait")?,
        dead_letter_on_expiration: boolean(a, "--dead-letter-on-expiration")?,
        dead_letter_target: a.value("--dead-letter-target").map(|v| {
            if v == "none" {
                None
            } else {
                Some(v.to_owned())
            }
        }),
        max_messages: a.number("--max-messages")?,
        max_bytes: a.number("--max-bytes")?,
        channel_capacity_pct: a.number("--channel-capacity")?,
        delay_ms: a.number("--queue-delay")?,
        redrive_allow: None,
        tags_set: a
            .values("--tag")
            .into_iter()
            .map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .ok_or_else(|| Failure::Usage(format!("--tag: {kv:?} is not KEY=VALUE")))
            })
            .collect::<Result<_, _>>()?,
        tags_remove: a.values("--untag").into_iter().map(str::to_owned).collect(),
        dedup_window_ms: a.number("--dedup-window")?,
        content_dedup: boolean(a, "--content-dedup")?,
        ordered: boolean(a, "--ordered")?,
        priority_levels: a.number("--priority-levels")?,
        priority_fairness: a.number("--priority-fairness")?,
        retry_initial_ms: a.number("--retry-initial")?,
        retry_multiplier_pct: multiplier(a)?,
        retry_max_ms: a.number("--retry-max")?,
        retry_jitter_pct: a.number("--retry-jitter")?,
        attempt_history: a.number("--attempt-history")?,
    })
}
