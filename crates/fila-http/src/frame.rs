//! Requests framed from a connection's bytes: the head once its blank line
//! came, then the body by `Content-Length` or chunked, within [`Limits`].

use std::ops::Range;

use crate::head::{Head, Headers};

/// What one request may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of a head, its blank line included (and of a chunked body's
    /// trailers).
    pub head_bytes: usize,
    /// Headers of a head.
    pub headers: usize,
    /// Bytes of a body, decoded.
    pub body_bytes: usize,
}

/// Why a request could not be framed: the connection answers
/// [`HttpError::status`] and closes, since what follows cannot be found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// The head did not end within the limit.
    #[error("the request head is over {0} bytes")]
    HeadTooLarge(usize),
    /// More headers than the limit.
    #[error("the request has over {0} headers")]
    TooManyHeaders(usize),
    /// Not an HTTP/1.x request head.
    #[error("the request head is not valid HTTP/1.1: {0}")]
    BadHead(&'static str),
    /// `Content-Length` is not a number, or its values differ.
    #[error("Content-Length is not a number, or its values differ")]
    BadLength,
    /// A body over the limit (declared, or decoded so far).
    #[error("a body of {0} bytes or more is over the limit of {1} bytes")]
    BodyTooLarge(u64, usize),
    /// A transfer coding other than `chunked` alone.
    #[error("Transfer-Encoding {0:?} is not supported (only chunked)")]
    UnsupportedEncoding(String),
    /// Both `Transfer-Encoding` and `Content-Length`.
    #[error("a request may not carry both Transfer-Encoding and Content-Length")]
    Ambiguous,
    /// A chunked body that breaks its format.
    #[error("the chunked body is not valid: {0}")]
    BadChunk(&'static str),
}

impl HttpError {
    /// The status of the answer that refuses it.
    pub fn status(&self) -> u16 {
        match self {
            HttpError::HeadTooLarge(_) | HttpError::TooManyHeaders(_) => 431,
            HttpError::BodyTooLarge(..) => 413,
            HttpError::UnsupportedEncoding(_) => 501,
            _ => 400,
        }
    }
}

/// A whole request: its head (kept as it came) and its body (decoded).
#[derive(Debug)]
pub struct Request {
    bytes: Vec<u8>,
    method: Range<usize>,
    path: Range<usize>,
    query: Range<usize>,
    headers: Vec<(Range<usize>, Range<usize>)>,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// Whether the connection stays open after its answer (HTTP/1.1
    /// unless `Connection: close`; HTTP/1.0 with `Connection: keep-alive`).
    pub keep_alive: bool,
    /// The body, decoded.
    pub body: Vec<u8>,
}

impl Request {
    /// Its head, borrowed.
    pub fn head(&self) -> Head<'_> {
        let text = |r: &Range<usize>| std::str::from_utf8(&self.bytes[r.clone()]).unwrap_or("");
        Head {
            method: text(&self.method),
            path: text(&self.path),
            query: text(&self.query),
            headers: Headers::new(
                self.headers
                    .iter()
                    .map(|(n, v)| (text(n), &self.bytes[v.clone()]))
                    .collect(),
            ),
        }
    }
}

/// What a call of [`Framer::next`] did.
#[derive(Debug, Default)]
pub struct Progress {
    /// Bytes of the front of the buffer it took: the caller drains them.
    pub consumed: usize,
    /// A request it finished, if any (at most one a call).
    pub request: Option<Request>,
    /// A head asking `Expect: 100-continue` was taken and its body is still
    /// to come: the caller sends `HTTP/1.1 100 Continue` now.
    pub send_continue: bool,
}

/// Frames one connection's requests, one after the other.
#[derive(Debug)]
pub struct Framer {
    limits: Limits,
    state: State,
}

#[derive(Debug)]
enum State {
    /// Waiting for a head's blank line; the front `scanned` bytes of the
    /// buffer do not end one.
    Head { scanned: usize },
    /// A head taken, its body coming.
    Body { request: Request, body: Body },
}

#[derive(Debug)]
enum Body {
    /// Bytes left of a `Content-Length` body.
    Length(u64),
    Chunked(Chunk),
}

/// Where a chunked body's decoder is.
#[derive(Debug)]
enum Chunk {
    /// Reading a size line: the size so far, its digits, the line's bytes,
    /// whether in an extension, whether its `\r` came.
    Size {
        size: u64,
        digits: u32,
        line: usize,
        ext: bool,
        cr: bool,
    },
    /// Data bytes left of a chunk.
    Data(u64),
    /// The `\r\n` after a chunk's data: whether its `\r` came.
    DataEnd { cr: bool },
    /// Trailer lines after the last chunk: this line's bytes, whether its
    /// `\r` came, the trailers' bytes so far.
    Trailer { line: usize, cr: bool, total: usize },
}

/// Header slots a head is parsed into on the stack; a framer whose limit
/// is higher takes them from the heap.
const STACK_HEADERS: usize = 64;

/// The longest chunk size line (size and extensions).
const CHUNK_LINE_MAX: usize = 1024;

impl Framer {
    /// A framer for a new connection.
    pub fn new(limits: Limits) -> Framer {
        Framer {
            limits,
            state: State::Head { scanned: 0 },
        }
    }

    /// Whether it is between requests (no byte of the next one taken).
    pub fn idle(&self) -> bool {
        matches!(self.state, State::Head { scanned: 0 })
    }

    /// Whether a request's head was taken and its body is still coming.
    pub fn in_body(&self) -> bool {
        matches!(self.state, State::Body { .. })
    }

    /// The most bytes the body being taken may come to, decoded: what came
    /// and what its `Content-Length` says is left, or the limit when it
    /// is chunked; `None` between bodies. (A server that bounds the bodies
    /// all its connections hold counts this.)
    pub fn body_bound(&self) -> Option<usize> {
        match &self.state {
            State::Head { .. } => None,
            State::Body {
                request,
                body: Body::Length(left),
            } => Some(request.body.len().saturating_add(*left as usize)),
            State::Body {
                body: Body::Chunked(_),
                ..
            } => Some(self.limits.body_bytes),
        }
    }

    /// Takes what it can of `buf` (the connection's unread bytes, the
    /// front of which it has not taken before): at most one whole request.
    /// The caller drains `consumed` bytes from the front of its buffer
    /// and calls again while a request came and bytes are left. After an
    /// error the connection cannot go on.
    pub fn next(&mut self, buf: &[u8]) -> Result<Progress, HttpError> {
        self.next_with(buf, &mut Vec::new())
    }

    /// [`Framer::next`], with a buffer to decode the next body into
    /// (emptied first): a server that serves many connections in turn
    /// lends one it keeps, so that a body costs no allocation of its own
    /// (it takes it back from the request once done with it).
    pub fn next_with(&mut self, buf: &[u8], spare: &mut Vec<u8>) -> Result<Progress, HttpError> {
        let mut progress = Progress::default();
        if let State::Head { scanned } = self.state {
            let from = scanned.saturating_sub(3).min(buf.len());
            let Some(end) = find_blank_line(&buf[from..]).map(|at| from + at + 4) else {
                self.state = State::Head { scanned: buf.len() };
                if buf.len() > self.limits.head_bytes {
                    return Err(HttpError::HeadTooLarge(self.limits.head_bytes));
                }
                return Ok(progress);
            };
            if end > self.limits.head_bytes {
                return Err(HttpError::HeadTooLarge(self.limits.head_bytes));
            }
            let (mut request, body, expects) = self.head(&buf[..end])?;
            if !matches!(body, Body::Length(0)) {
                request.body = std::mem::take(spare);
                request.body.clear();
            }
            progress.consumed = end;
            progress.send_continue = expects && !matches!(body, Body::Length(0));
            self.state = State::Body { request, body };
        }
        let State::Body { request, body } = &mut self.state else {
            unreachable!("a head was taken above")
        };
        let rest = &buf[progress.consumed..];
        let (took, done) = match body {
            Body::Length(left) => {
                let take = (*left).min(rest.len() as u64) as usize;
                request.body.extend_from_slice(&rest[..take]);
                *left -= take as u64;
                (take, *left == 0)
            }
            Body::Chunked(chunk) => decode_chunks(chunk, rest, &mut request.body, &self.limits)?,
        };
        progress.consumed += took;
        if done {
            let State::Body { request, .. } =
                std::mem::replace(&mut self.state, State::Head { scanned: 0 })
            else {
                unreachable!("in a body")
            };
            progress.send_continue = false;
            progress.request = Some(request);
        }
        Ok(progress)
    }

    /// A head (its blank line included) read into a request with no body
    /// yet, how its body comes, and whether it asks `Expect: 100-continue`
    /// (HTTP/1.1 only).
    fn head(&self, bytes: &[u8]) -> Result<(Request, Body, bool), HttpError> {
        // The header slots on the stack (a head costs no allocation for
        // them) unless the limit is past what the stack holds.
        let mut stack = [httparse::EMPTY_HEADER; STACK_HEADERS];
        let mut heap = Vec::new();
        let slots = if self.limits.headers <= STACK_HEADERS {
            &mut stack[..self.limits.headers]
        } else {
            heap.resize(self.limits.headers, httparse::EMPTY_HEADER);
            &mut heap[..]
        };
        let mut parsed = httparse::Request::new(slots);
        match parsed.parse(bytes) {
            Ok(httparse::Status::Complete(_)) => {}
            Ok(httparse::Status::Partial) => return Err(HttpError::BadHead("the head is cut")),
            Err(httparse::Error::TooManyHeaders) => {
                return Err(HttpError::TooManyHeaders(self.limits.headers))
            }
            Err(e) => return Err(HttpError::BadHead(describe(e))),
        }
        // Where a slice httparse gave lies in `bytes` (an empty one
        // anywhere: it may not point into them).
        let at = |s: &[u8]| {
            if s.is_empty() {
                return 0..0;
            }
            let start = s.as_ptr() as usize - bytes.as_ptr() as usize;
            start..start + s.len()
        };
        let method = at(parsed.method.unwrap_or("").as_bytes());
        let target = parsed.path.unwrap_or("");
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let (path, query) = (at(path.as_bytes()), at(query.as_bytes()));
        let minor_version = parsed.version.unwrap_or(1);
        let headers: Vec<_> = parsed
            .headers
            .iter()
            .map(|h| (at(h.name.as_bytes()), at(h.value)))
            .collect();
        let mut request = Request {
            bytes: bytes.to_vec(),
            method,
            path,
            query,
            headers,
            minor_version,
            keep_alive: false,
            body: Vec::new(),
        };
        let head = request.head();
        let has_token = |name: &str, token: &str| {
            head.headers.get_all(name).any(|v| {
                v.split(|b| *b == b',')
                    .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
            })
        };
        let keep_alive = if minor_version == 0 {
            has_token("connection", "keep-alive")
        } else {
            !has_token("connection", "close")
        };
        let expects = minor_version == 1
            && head
                .headers
                .get_all("expect")
                .any(|v| v.eq_ignore_ascii_case(b"100-continue"));
        let body = self.framing(&head.headers)?;
        request.keep_alive = keep_alive;
        if let Body::Length(n) = body {
            request.body.reserve(n.min(64 << 10) as usize);
        }
        Ok((request, body, expects))
    }

    /// How a body with these headers comes.
    fn framing(&self, headers: &Headers<'_>) -> Result<Body, HttpError> {
        let codings: Vec<&[u8]> = headers
            .get_all("transfer-encoding")
            .flat_map(|v| v.split(|b| *b == b','))
            .map(|t| t.trim_ascii())
            .filter(|t| !t.is_empty())
            .collect();
        let mut lengths = headers
            .get_all("content-length")
            .flat_map(|v| v.split(|b| *b == b','))
            .map(|t| t.trim_ascii());
        if !codings.is_empty() {
            if headers.contains("content-length") {
                return Err(HttpError::Ambiguous);
            }
            if codings.len() != 1 || !codings[0].eq_ignore_ascii_case(b"chunked") {
                let all: Vec<String> = codings
                    .iter()
                    .map(|c| String::from_utf8_lossy(c).into_owned())
                    .collect();
                return Err(HttpError::UnsupportedEncoding(all.join(", ")));
            }
            return Ok(Body::Chunked(Chunk::Size {
                size: 0,
                digits: 0,
                line: 0,
                ext: false,
                cr: false,
            }));
        }
        let Some(first) = lengths.next() else {
            return Ok(Body::Length(0));
        };
        let n = number(first).ok_or(HttpError::BadLength)?;
        if lengths.any(|other| number(other) != Some(n)) {
            return Err(HttpError::BadLength);
        }
        if n > self.limits.body_bytes as u64 {
            return Err(HttpError::BodyTooLarge(n, self.limits.body_bytes));
        }
        Ok(Body::Length(n))
    }
}

/// Where `\r\n\r\n` starts in `bytes`.
fn find_blank_line(bytes: &[u8]) -> Option<usize> {
    bytes.windows(4).position(|w| w == b"\r\n\r\n")
}

/// A `Content-Length` value: decimal digits only, at most 19.
fn number(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

fn describe(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "a header name is not a token",
        httparse::Error::HeaderValue => "a header value holds a forbidden byte",
        httparse::Error::NewLine => "a line does not end with CRLF",
        httparse::Error::Status => "the status is not valid",
        httparse::Error::Token => "the method is not a token",
        httparse::Error::TooManyHeaders => "too many headers",
        httparse::Error::Version => "the version is not HTTP/1.0 or HTTP/1.1",
    }
}

/// Decodes what it can of a chunked body from `bytes` into `body`: the
/// bytes taken, and whether the body ended.
fn decode_chunks(
    chunk: &mut Chunk,
    bytes: &[u8],
    body: &mut Vec<u8>,
    limits: &Limits,
) -> Result<(usize, bool), HttpError> {
    let mut i = 0;
    while i < bytes.len() {
        match chunk {
            Chunk::Data(left) => {
                let take = (*left).min((bytes.len() - i) as u64) as usize;
                body.extend_from_slice(&bytes[i..i + take]);
                i += take;
                *left -= take as u64;
                if *left == 0 {
                    *chunk = Chunk::DataEnd { cr: false };
                }
                continue;
            }
            Chunk::DataEnd { cr } => {
                let b = bytes[i];
                i += 1;
                match (*cr, b) {
                    (false, b'\r') => *cr = true,
                    (true, b'\n') => {
                        *chunk = Chunk::Size {
                            size: 0,
                            digits: 0,
                            line: 0,
                            ext: false,
                            cr: false,
                        }
                    }
                    _ => return Err(HttpError::BadChunk("a chunk's data does not end with CRLF")),
                }
            }
            Chunk::Size {
                size,
                digits,
                line,
                ext,
                cr,
            } => {
                let b = bytes[i];
                i += 1;
                *line += 1;
                if *line > CHUNK_LINE_MAX {
                    return Err(HttpError::BadChunk("a chunk size line is too long"));
                }
                if *cr {
                    if b != b'\n' {
                        return Err(HttpError::BadChunk(
                            "a chunk size line does not end with CRLF",
                        ));
                    }
                    if *digits == 0 {
                        return Err(HttpError::BadChunk("a chunk size has no digits"));
                    }
                    let n = *size;
                    *chunk = if n == 0 {
                        Chunk::Trailer {
                            line: 0,
                            cr: false,
                            total: 0,
                        }
                    } else {
                        let total = body.len() as u64 + n;
                        if total > limits.body_bytes as u64 {
                            return Err(HttpError::BodyTooLarge(total, limits.body_bytes));
                        }
                        Chunk::Data(n)
                    };
                    continue;
                }
                match b {
                    b'\r' => *cr = true,
                    _ if *ext => {}
                    b';' if *digits > 0 => *ext = true,
                    _ => {
                        let Some(d) = (b as char).to_digit(16) else {
                            return Err(HttpError::BadChunk("a chunk size is not hexadecimal"));
                        };
                        if *digits >= 15 {
                            return Err(HttpError::BadChunk("a chunk size is too large"));
                        }
                        *size = *size * 16 + u64::from(d);
                        *digits += 1;
                    }
                }
            }
            Chunk::Trailer { line, cr, total } => {
                let b = bytes[i];
                i += 1;
                *total += 1;
                if *total > limits.head_bytes {
                    return Err(HttpError::HeadTooLarge(limits.head_bytes));
                }
                match (*cr, b) {
                    (true, b'\n') if *line == 0 => return Ok((i, true)),
                    (true, b'\n') => {
                        *line = 0;
                        *cr = false;
                    }
                    (true, _) => {
                        return Err(HttpError::BadChunk("a trailer line does not end with CRLF"))
                    }
                    (false, b'\r') => *cr = true,
                    (false, b'\n') => {
                        return Err(HttpError::BadChunk("a trailer line does not end with CRLF"))
                    }
                    (false, _) => *line += 1,
                }
            }
        }
    }
    Ok((i, false))
}
