//! Error codes shared by every layer, and the codec's own errors.

/// A stable error code. Codes are never reused; a retired code stays
/// reserved. Unknown codes from a newer peer are kept as they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u16);

impl ErrorCode {
    /// A field is out of range or malformed.
    pub const INVALID_ARGUMENT: ErrorCode = ErrorCode(1);
    /// No queue has that name.
    pub const QUEUE_NOT_FOUND: ErrorCode = ErrorCode(2);
    /// Create named an existing queue with other settings.
    pub const QUEUE_EXISTS: ErrorCode = ErrorCode(3);
    /// The queue or channel is at a capacity limit.
    pub const QUEUE_FULL: ErrorCode = ErrorCode(4);
    /// The queue was deleted while the request waited.
    pub const QUEUE_DELETED: ErrorCode = ErrorCode(5);
    /// The payload is over the queue's max_message_bytes.
    pub const MESSAGE_TOO_LARGE: ErrorCode = ErrorCode(6);
    /// The receipt's lease has ended.
    pub const RECEIPT_STALE: ErrorCode = ErrorCode(7);
    /// The receipt was not issued by this server.
    pub const RECEIPT_INVALID: ErrorCode = ErrorCode(8);
    /// No message with that sequence number (in the state asked for).
    pub const NOT_FOUND: ErrorCode = ErrorCode(9);
    /// The message expired.
    pub const EXPIRED: ErrorCode = ErrorCode(10);
    /// The connection has not authenticated (or the token is unknown).
    pub const UNAUTHENTICATED: ErrorCode = ErrorCode(11);
    /// The token lacks the permission for this queue.
    pub const FORBIDDEN: ErrorCode = ErrorCode(12);
    /// A server or connection limit is reached (stored bytes, queues,
    /// parked receives, connections, failed authentications); nothing
    /// was changed.
    pub const RESOURCE_EXHAUSTED: ErrorCode = ErrorCode(13);
    /// The queue is paused for what was asked (a put while its sending is
    /// paused, a receive-deferred while its receiving is).
    pub const QUEUE_PAUSED: ErrorCode = ErrorCode(14);
    /// The frame is over the receiver's frame limit.
    pub const FRAME_TOO_LARGE: ErrorCode = ErrorCode(100);
    /// The frame or its body does not parse.
    pub const MALFORMED_FRAME: ErrorCode = ErrorCode(101);
    /// The frame's protocol version is not spoken here.
    pub const UNSUPPORTED_VERSION: ErrorCode = ErrorCode(102);
    /// The opcode is not known.
    pub const UNKNOWN_OPCODE: ErrorCode = ErrorCode(103);
    /// The server failed in a way that is not the request's fault.
    pub const INTERNAL: ErrorCode = ErrorCode(200);
    /// The server is shutting down and takes no new work.
    pub const SHUTTING_DOWN: ErrorCode = ErrorCode(201);
    /// A cluster's node that does not lead the queue's partition: nothing
    /// was done; the message names the leader (`leader <id> at
    /// <host:port>`) when it is known. Retry there.
    pub const NOT_LEADER: ErrorCode = ErrorCode(202);
    /// A cluster's leader lost its leadership before the change was
    /// committed: it may or may not have been made (a put retried with its
    /// deduplication id is stored once).
    pub const OUTCOME_UNKNOWN: ErrorCode = ErrorCode(203);

    /// Every code this version knows, with its name.
    pub const ALL: [(ErrorCode, &'static str); 22] = [
        (ErrorCode::INVALID_ARGUMENT, "invalid_argument"),
        (ErrorCode::QUEUE_NOT_FOUND, "queue_not_found"),
        (ErrorCode::QUEUE_EXISTS, "queue_exists"),
        (ErrorCode::QUEUE_FULL, "queue_full"),
        (ErrorCode::QUEUE_DELETED, "queue_deleted"),
        (ErrorCode::MESSAGE_TOO_LARGE, "message_too_large"),
        (ErrorCode::RECEIPT_STALE, "receipt_stale"),
        (ErrorCode::RECEIPT_INVALID, "receipt_invalid"),
        (ErrorCode::NOT_FOUND, "not_found"),
        (ErrorCode::EXPIRED, "expired"),
        (ErrorCode::UNAUTHENTICATED, "unauthenticated"),
        (ErrorCode::FORBIDDEN, "forbidden"),
        (ErrorCode::RESOURCE_EXHAUSTED, "resource_exhausted"),
        (ErrorCode::QUEUE_PAUSED, "queue_paused"),
        (ErrorCode::FRAME_TOO_LARGE, "frame_too_large"),
        (ErrorCode::MALFORMED_FRAME, "malformed_frame"),
        (ErrorCode::UNSUPPORTED_VERSION, "unsupported_version"),
        (ErrorCode::UNKNOWN_OPCODE, "unknown_opcode"),
        (ErrorCode::INTERNAL, "internal"),
        (ErrorCode::SHUTTING_DOWN, "shutting_down"),
        (ErrorCode::NOT_LEADER, "not_leader"),
        (ErrorCode::OUTCOME_UNKNOWN, "outcome_unknown"),
    ];

    /// The snake_case name, or `unknown` for a code this version lacks.
    pub fn as_str(self) -> &'static str {
        ErrorCode::ALL
            .iter()
            .find(|(code, _)| *code == self)
            .map_or("unknown", |(_, name)| name)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.as_str(), self.0)
    }
}

/// Why bytes could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// The length prefix is over the frame limit.
    #[error("frame_too_large: a frame of {len} bytes is over the limit of {max}")]
    FrameTooLarge {
        /// The length the prefix announced.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The frame or its body does not parse.
    #[error("malformed_frame: {0}")]
    Malformed(&'static str),
    /// A protocol version this codec does not speak.
    #[error(
        "unsupported_version: version {0} (this side speaks versions {oldest} to {newest})",
        oldest = crate::frame::OLDEST_VERSION,
        newest = crate::frame::VERSION
    )]
    UnsupportedVersion(u8),
    /// An opcode this codec does not know.
    #[error("unknown_opcode: {0:#04x}")]
    UnknownOpcode(u8),
}

impl ProtoError {
    /// The wire code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            ProtoError::FrameTooLarge { .. } => ErrorCode::FRAME_TOO_LARGE,
            ProtoError::Malformed(_) => ErrorCode::MALFORMED_FRAME,
            ProtoError::UnsupportedVersion(_) => ErrorCode::UNSUPPORTED_VERSION,
            ProtoError::UnknownOpcode(_) => ErrorCode::UNKNOWN_OPCODE,
        }
    }

    /// Whether the byte stream can go on after this error: the frame's
    /// length was sound, so the next frame starts where this one ends.
    pub fn is_recoverable(&self) -> bool {
        matches!(
            self,
            ProtoError::Malformed(_) | ProtoError::UnknownOpcode(_)
        )
    }
}
