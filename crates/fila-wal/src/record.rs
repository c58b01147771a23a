//! One log record on disk:
//!
//! ```text
//! u32 len | u32 crc32c | u64 lsn | u8 kind | body …
//! ```
//!
//! `len` counts the bytes after it (crc, lsn, kind, body); the CRC32C covers
//! the lsn, the kind and the body. All integers are big-endian. Decoding
//! never panics and never allocates: it answers a record borrowed from the
//! buffer, "incomplete" (the buffer ends inside the record), or "bad" (the
//! length is impossible or the checksum does not match).

/// Bytes before a record's body.
pub const RECORD_HEADER: usize = 4 + 4 + 8 + 1;

/// The largest body a record may have (a put of 20 messages of 1 MiB fits
/// many times over).
pub const RECORD_BODY_MAX: usize = 64 << 20;

/// A decoded record, borrowing its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// Log sequence number: one more than the record before it.
    pub lsn: u64,
    /// What the body holds (the log's user decides).
    pub kind: u8,
    /// The body.
    pub body: &'a [u8],
}

/// What [`decode`] found at the start of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A whole, valid record and the bytes it took.
    Record(Record<'a>, usize),
    /// The buffer ends inside a record (or is empty).
    Incomplete,
    /// Not a valid record: the reason.
    Bad(&'static str),
}

fn checksum(lsn: u64, kind: u8, body: &[u8]) -> u32 {
    let mut head = [0u8; 9];
    head[..8].copy_from_slice(&lsn.to_be_bytes());
    head[8] = kind;
    crc32c::crc32c_append(crc32c::crc32c(&head), body)
}

/// Appends one record to `out`.
///
/// # Panics
/// When `body` is longer than [`RECORD_BODY_MAX`]: callers bound what they
/// log, so a longer body is a bug.
pub fn encode(lsn: u64, kind: u8, body: &[u8], out: &mut Vec<u8>) {
    assert!(
        body.len() <= RECORD_BODY_MAX,
        "a log record body of {} bytes is over the {RECORD_BODY_MAX}-byte limit",
        body.len()
    );
    let len = (RECORD_HEADER - 4 + body.len()) as u32;
    out.reserve(RECORD_HEADER + body.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&checksum(lsn, kind, body).to_be_bytes());
    out.extend_from_slice(&lsn.to_be_bytes());
    out.push(kind);
    out.extend_from_slice(body);
}

/// Bytes [`encode`] writes for a body of `body_len` bytes.
pub fn encoded_len(body_len: usize) -> usize {
    RECORD_HEADER + body_len
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Reads the record at the start of `buf`.
pub fn decode(buf: &[u8]) -> Decoded<'_> {
    if buf.len() < 4 {
        return Decoded::Incomplete;
    }
    let len = be32(buf) as usize;
    if len < RECORD_HEADER - 4 {
        return Decoded::Bad("record length under the header size");
    }
    if len - (RECORD_HEADER - 4) > RECORD_BODY_MAX {
        return Decoded::Bad("record length over the limit");
    }
    if buf.len() < 4 + len {
        return Decoded::Incomplete;
    }
    let crc = be32(&buf[4..]);
    let lsn = be64(&buf[8..]);
    let kind = buf[16];
    let body = &buf[RECORD_HEADER..4 + len];
    if checksum(lsn, kind, body) != crc {
        return Decoded::Bad("record checksum does not match");
    }
    Decoded::Record(Record { lsn, kind, body }, 4 + len)
}
