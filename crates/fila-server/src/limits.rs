//! The connection limits of the front end that the configuration checks
//! against (a module of its own, so neither the configuration nor the
//! event loops import the other for them).

/// Bytes read from a socket at a time.
pub(crate) const READ_CHUNK: usize = 64 << 10;
/// Frames one connection may have answered in one turn of its loop.
pub const FRAMES_PER_TURN: usize = 32;
/// Bytes read from one connection in one turn of its loop.
pub const READ_BYTES_PER_TURN: usize = 4 * READ_CHUNK;
/// Output room a connection must have free before a request of it is
/// handled: more than any one answer that is not a receive or a peek, and
/// more than one largest message in a receive or peek answer.
pub const ANSWER_ROOM_MIN: usize = 2 << 20;
/// Output room a connection must have free before a request whose answer
/// carries no messages (anything but receive, peek, receive-deferred) is
/// handled: more than the largest such answer (a list page of 1 000 names).
pub const SMALL_ANSWER_ROOM: usize = 256 << 10;
/// The least `max_output_bytes` a config may set.
pub const OUTPUT_BYTES_MIN: usize = 2 * ANSWER_ROOM_MIN;
/// The largest frame accepted before a connection has authenticated.
pub const PREAUTH_FRAME_MAX: usize = 4 << 10;
/// Failed auths after which a connection is closed.
pub const AUTH_FAILURES_MAX: u32 = 3;
