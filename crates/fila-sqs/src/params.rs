//! An operation's parameters as SQS checks them, read from its input (the
//! JSON protocol's object, or a query form made into one), and the
//! API's bounds on them.

use crate::error::SqsError;
use crate::input::Input;

/// Entries of one batch request.
pub const BATCH_MAX: usize = 10;
/// Messages one receive takes at most.
pub const RECEIVE_MAX: u64 = 10;
/// The longest wait of a receive, in seconds.
pub const WAIT_SECS_MAX: u64 = 20;
/// The longest visibility timeout, in seconds (12 h).
pub const VISIBILITY_SECS_MAX: u64 = 43_200;
/// The longest delay, in seconds (15 min).
pub const DELAY_SECS_MAX: u64 = 900;
/// A batch's entries together are at most this many bytes (body and
/// attributes).
pub const BATCH_BYTES_MAX: usize = 1 << 20;

/// A text parameter, when given.
pub fn text<'a, I: Input>(input: &'a I, name: &str) -> Result<Option<&'a str>, SqsError> {
    match input.get(name) {
        None => Ok(None),
        Some(v) if v.is_null() => Ok(None),
        Some(v) => v
            .as_str()
            .map(Some)
            .ok_or_else(|| SqsError::invalid(format!("{name} must be a string."))),
    }
}

/// A text parameter that must be given.
pub fn required<'a, I: Input>(input: &'a I, name: &str) -> Result<&'a str, SqsError> {
    text(input, name)?.ok_or_else(|| SqsError::missing(name))
}

/// A whole number parameter (a JSON number, or its text as the query
/// protocol sends it) within `min..=max`.
pub fn number<I: Input>(
    input: &I,
    name: &str,
    min: u64,
    max: u64,
) -> Result<Option<u64>, SqsError> {
    let Some(given) = input.get(name).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let v = match given.as_str() {
        Some(s) => s.trim().parse::<u64>().ok(),
        None => given.as_u64(),
    };
    match v {
        Some(v) if (min..=max).contains(&v) => Ok(Some(v)),
        _ => Err(SqsError::invalid(format!(
            "Value {} for parameter {name} is invalid. Reason: must be between {min} and {max}.",
            given.shown()
        ))),
    }
}

/// A list of text parameters (none when not given).
pub fn strings<I: Input>(input: &I, name: &str) -> Result<Vec<String>, SqsError> {
    let Some(given) = input.get(name).filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let bad = || SqsError::invalid(format!("{name} must be a list of strings."));
    given
        .as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|v| v.as_str().map(str::to_owned).ok_or_else(bad))
        .collect()
}

/// The queue a `QueueUrl` parameter names.
pub fn queue_of<I: Input>(input: &I) -> Result<String, SqsError> {
    crate::attrs::name_of_url(required(input, "QueueUrl")?)
}
