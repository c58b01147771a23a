//! A request made of any bytes, for the HTTP dialects' targets: a request
//! line (`METHOD /path?query`), header lines (`name: value`) up to an empty
//! line (`\n\n`), and a body.

use fila_http::{Head, Headers};

/// The head's text and the body, or `None` when the head is not UTF-8.
pub fn split(data: &[u8]) -> Option<(&str, &[u8])> {
    let (head, body) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (data, &[][..]),
    };
    Some((std::str::from_utf8(head).ok()?, body))
}

/// The head that text reads as.
pub fn head(text: &str) -> Head<'_> {
    let mut lines = text.split('\n');
    let first = lines.next().unwrap_or("");
    let (method, target) = first.split_once(' ').unwrap_or((first, "/"));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let pairs = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim(), v.trim().as_bytes()))
        .collect();
    Head {
        method,
        path,
        query,
        headers: Headers::new(pairs),
    }
}
