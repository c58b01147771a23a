//! # fila-proto: the wire protocol
//!
//! fila-proto owns the frame format and every request and answer type, with
//! their encoding. It does no I/O and knows nothing of queues beyond their
//! shapes on the wire; docs/protocol.md is the reference a client in another
//! language is written from.
//!
//! ```text
//!  0        4        5        6        8                        16
//! +--------+--------+--------+--------+------------------------+--------
//! | length | version| opcode | flags  |       request id       | body …
//! | u32 BE |   u8   |   u8   | u16 BE |         u64 BE         |
//! +--------+--------+--------+--------+------------------------+--------
//! ```
//!
//! Encoding appends a whole frame to the caller's `BytesMut`. Decoding is two
//! steps: [`decode_frame`] finds a frame in any bytes (asking for more,
//! answering the frame, or an error; it never panics and never allocates),
//! then [`Request::decode`] / [`Response::decode`] read its body, whose
//! payloads stay slices of the frame's `Bytes`.
//!
//! ```
//! use bytes::BytesMut;
//! use fila_proto::*;
//!
//! let mut buf = BytesMut::new();
//! let list = Request::ListQueues { prefix: "orders-".into(), after: String::new(), limit: 100 };
//! list.encode(7, &mut buf);
//! let Ok(Decoded::Frame { header, body, consumed }) = decode_frame(&buf, FRAME_LEN_DEFAULT) else {
//!     panic!("one whole frame")
//! };
//! assert_eq!((header.request_id, consumed), (7, buf.len()));
//! let body = bytes::Bytes::copy_from_slice(body);
//! assert_eq!(Request::decode(&header, body).unwrap(), list);
//! ```
#![forbid(unsafe_code)]

mod error;
mod frame;
pub mod limits;
mod message;
mod wire;

pub use error::{ErrorCode, ProtoError};
pub use frame::{
    begin_frame, begin_frame_in, check_header, decode_frame, end_frame, flags, speaks, split_frame,
    Decoded, FrameHeader, FRAME_LEN_DEFAULT, FRAME_LEN_LIMIT, HEADER_LEN, LEN_PREFIX,
    OLDEST_VERSION, VERSION,
};
pub use message::*;
