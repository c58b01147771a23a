//! A request's head as a dialect reads it, and an answer's head written.

/// A request's headers as they arrived: names compared without regard to
/// case, values as bytes, repeated names kept in order.
#[derive(Debug, Default)]
pub struct Headers<'a> {
    pairs: Vec<(&'a str, &'a [u8])>,
}

impl<'a> Headers<'a> {
    /// Headers of `pairs` (name, value), in the order they came.
    pub fn new(pairs: Vec<(&'a str, &'a [u8])>) -> Headers<'a> {
        Headers { pairs }
    }

    /// Every value of header `name`, in order.
    pub fn get_all<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'a [u8]> + 's {
        self.pairs
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }

    /// The first value of header `name`.
    pub fn get(&self, name: &str) -> Option<&'a [u8]> {
        self.get_all(name).next()
    }

    /// The first value of header `name`, when it is text.
    pub fn text(&self, name: &str) -> Option<&'a str> {
        self.get(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// Whether header `name` came.
    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Every (name, value), in order.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &'a [u8])> + '_ {
        self.pairs.iter().copied()
    }
}

/// A request's head: method, target split at `?`, headers.
#[derive(Debug)]
pub struct Head<'a> {
    /// `POST`, `GET`, ...
    pub method: &'a str,
    /// The path as sent (percent-encoded).
    pub path: &'a str,
    /// The query as sent, without `?` (empty when none).
    pub query: &'a str,
    /// The headers.
    pub headers: Headers<'a>,
}

/// The reason phrase of an HTTP status.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Status",
    }
}

/// Appends an answer's head to `out`: the status line, `headers` (names
/// and values as given; a value with a line break is left out), its
/// `content-length`, and `connection: close` when `close`.
pub fn write_head(
    out: &mut Vec<u8>,
    status: u16,
    headers: &[(&str, &str)],
    content_length: usize,
    close: bool,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_number(out, u64::from(status));
    out.push(b' ');
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        if name.contains(['\r', '\n', ':']) || value.contains(['\r', '\n']) {
            continue;
        }
        for part in [name.as_bytes(), b": ", value.as_bytes(), b"\r\n"] {
            out.extend_from_slice(part);
        }
    }
    out.extend_from_slice(b"content-length: ");
    push_number(out, content_length as u64);
    out.extend_from_slice(b"\r\n");
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends `n` in decimal.
fn push_number(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Decodes `%XX` in `s` (a `%` not followed by two hex digits stays as
/// it is), and `+` as a space when `plus_is_space` (the form encoding).
pub fn percent_decode(s: &str, plus_is_space: bool) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' if plus_is_space => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    out
}
