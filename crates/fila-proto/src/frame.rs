//! Frames: a length prefix, a 12-byte header, a body.
//!
//! ```text
//!  0        4        5        6        8                        16
//! +--------+--------+--------+--------+------------------------+--------
//! | length | version| opcode | flags  |       request id       | body …
//! | u32 BE |   u8   |   u8   | u16 BE |         u64 BE         |
//! +--------+--------+--------+--------+------------------------+--------
//! ```
//!
//! `length` counts the bytes after itself (header and body), so a frame is
//! `4 + length` bytes. A reader checks `length` against its limit before it
//! buffers the frame.

use bytes::{BufMut, BytesMut};

use crate::error::ProtoError;

/// Bytes of the length prefix.
pub const LEN_PREFIX: usize = 4;
/// Bytes of the header after the length prefix.
pub const HEADER_LEN: usize = 12;
/// The newest protocol version this crate speaks (what its encoders write
/// unless told otherwise).
pub const VERSION: u8 = 6;
/// The oldest protocol version this crate still decodes and answers in:
/// every version from it to [`VERSION`] is spoken (docs/protocol.md,
/// "Versions").
pub const OLDEST_VERSION: u8 = 1;

/// Whether this crate speaks protocol version `version`.
pub fn speaks(version: u8) -> bool {
    (OLDEST_VERSION..=VERSION).contains(&version)
}
/// No frame may be longer than this, whatever a peer's configured limit.
pub const FRAME_LEN_LIMIT: usize = 64 << 20;
/// The default frame limit: a put of 20 messages of 1 MiB with attributes
/// fits.
pub const FRAME_LEN_DEFAULT: usize = 24 << 20;

/// Frame flags.
pub mod flags {
    /// The frame answers a request (same request id, same opcode).
    pub const RESPONSE: u16 = 1 << 0;
    /// The answer is an error: its body is an error body.
    pub const ERROR: u16 = 1 << 1;
    /// A receive's answer whose messages carry only some fields: the body
    /// starts with the fields' `u8` mask (see `Fields`).
    pub const FIELDS: u16 = 1 << 2;
    /// Every flag this version defines; others must be zero.
    pub const KNOWN: u16 = RESPONSE | ERROR | FIELDS;
}

/// A frame's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Protocol version.
    pub version: u8,
    /// What the frame is (see [`crate::Opcode`]).
    pub opcode: u8,
    /// [`flags`].
    pub flags: u16,
    /// Chosen by the client, echoed by the answer.
    pub request_id: u64,
}

impl FrameHeader {
    /// Whether this frame is an answer.
    pub fn is_response(&self) -> bool {
        self.flags & flags::RESPONSE != 0
    }

    /// Whether this frame is an error answer.
    pub fn is_error(&self) -> bool {
        self.flags & flags::ERROR != 0
    }
}

/// What [`decode_frame`] found at the start of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// Not a whole frame yet: at least this many bytes are needed in all.
    NeedMore(usize),
    /// A whole frame: its header, its body and the bytes it took.
    Frame {
        /// The header.
        header: FrameHeader,
        /// The body (a slice of the input).
        body: &'a [u8],
        /// Bytes of the input the frame took (`4 + length`).
        consumed: usize,
    },
}

/// Finds the first frame in `buf`. `max_len` bounds the length prefix (it is
/// clamped to [`FRAME_LEN_LIMIT`]). Never panics, never allocates.
pub fn decode_frame(buf: &[u8], max_len: usize) -> Result<Decoded<'_>, ProtoError> {
    let max_len = max_len.min(FRAME_LEN_LIMIT);
    if buf.len() < LEN_PREFIX {
        return Ok(Decoded::NeedMore(LEN_PREFIX + HEADER_LEN));
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > max_len {
        return Err(ProtoError::FrameTooLarge { len, max: max_len });
    }
    if len < HEADER_LEN {
        return Err(ProtoError::Malformed("a frame is shorter than its header"));
    }
    let total = LEN_PREFIX + len;
    if buf.len() < total {
        return Ok(Decoded::NeedMore(total));
    }
    let h = &buf[LEN_PREFIX..LEN_PREFIX + HEADER_LEN];
    let header = FrameHeader {
        version: h[0],
        opcode: h[1],
        flags: u16::from_be_bytes([h[2], h[3]]),
        request_id: u64::from_be_bytes([h[4], h[5], h[6], h[7], h[8], h[9], h[10], h[11]]),
    };
    Ok(Decoded::Frame {
        header,
        body: &buf[LEN_PREFIX + HEADER_LEN..total],
        consumed: total,
    })
}

/// Checks what every frame must satisfy beyond its length: the version and
/// the known flags.
pub fn check_header(header: &FrameHeader) -> Result<(), ProtoError> {
    if !speaks(header.version) {
        return Err(ProtoError::UnsupportedVersion(header.version));
    }
    if header.flags & !flags::KNOWN != 0 {
        return Err(ProtoError::Malformed("unknown flags are set"));
    }
    Ok(())
}

/// Writes a frame header of the newest version with a placeholder length;
/// returns where the frame starts, for [`end_frame`].
pub fn begin_frame(buf: &mut BytesMut, opcode: u8, flags: u16, request_id: u64) -> usize {
    begin_frame_in(VERSION, buf, opcode, flags, request_id)
}

/// [`begin_frame`] of protocol version `version`.
pub fn begin_frame_in(
    version: u8,
    buf: &mut BytesMut,
    opcode: u8,
    flags: u16,
    request_id: u64,
) -> usize {
    let start = buf.len();
    buf.put_u32(0);
    buf.put_u8(version);
    buf.put_u8(opcode);
    buf.put_u16(flags);
    buf.put_u64(request_id);
    start
}

/// Fills in the length of the frame that [`begin_frame`] started.
pub fn end_frame(buf: &mut BytesMut, start: usize) {
    let len = buf.len() - start - LEN_PREFIX;
    let len = u32::try_from(len).expect("frames are under 4 GiB");
    buf[start..start + LEN_PREFIX].copy_from_slice(&len.to_be_bytes());
}

/// Takes the first whole frame off the front of a connection's read buffer:
/// its header and its body as shared `Bytes` (no copy), or `None` when more
/// bytes are needed. On an error nothing is taken.
pub fn split_frame(
    buf: &mut BytesMut,
    max_len: usize,
) -> Result<Option<(FrameHeader, bytes::Bytes)>, ProtoError> {
    let (header, consumed) = match decode_frame(buf, max_len)? {
        Decoded::NeedMore(_) => return Ok(None),
        Decoded::Frame {
            header, consumed, ..
        } => (header, consumed),
    };
    let frame = buf.split_to(consumed).freeze();
    Ok(Some((header, frame.slice(LEN_PREFIX + HEADER_LEN..))))
}
