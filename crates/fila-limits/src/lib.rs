//! # fila-limits: the limits of the contract
//!
//! Every limit of SPEC §1–3 (docs/contract.md) as a named constant, in one
//! place: the engine enforces them (`fila_core::limits`) and the protocol
//! publishes them to clients (`fila_proto::limits`), so no client
//! hard-codes them and the two can never disagree.
#![forbid(unsafe_code)]

/// Longest queue name.
pub const QUEUE_NAME_LEN_MAX: usize = 80;
/// Entries in one batch request.
pub const BATCH_LEN_MAX: usize = 20;
/// Messages one receive may return.
pub const RECEIVE_MAX: u32 = 20;
/// Longest visibility timeout: 12 hours.
pub const VISIBILITY_MS_MAX: u64 = 12 * 3_600_000;
/// Longest long-poll wait.
pub const WAIT_MS_MAX: u64 = 30_000;
/// Highest max_deliveries (0 means unlimited).
pub const MAX_DELIVERIES_MAX: u32 = 1_000;
/// Shortest retention: one minute.
pub const RETENTION_MS_MIN: u64 = 60_000;
/// Longest retention: fourteen days.
pub const RETENTION_MS_MAX: u64 = 14 * 86_400_000;
/// Largest max_message_bytes: 1 MiB.
pub const MESSAGE_BYTES_MAX: u32 = 1 << 20;
/// Highest max_messages: 2^32.
pub const MAX_MESSAGES_MAX: u64 = 1 << 32;
/// Smallest max_bytes: 1 KiB.
pub const MAX_BYTES_MIN: u64 = 1 << 10;
/// Largest max_bytes: 64 GiB.
pub const MAX_BYTES_MAX: u64 = 64 << 30;
/// Longest delay of a put: 15 minutes.
pub const DELAY_MS_MAX: u64 = 15 * 60_000;
/// Tags one queue may carry.
pub const TAGS_MAX: usize = 50;
/// The longest tag key, in bytes.
pub const TAG_KEY_LEN_MAX: usize = 128;
/// The longest tag value, in bytes.
pub const TAG_VALUE_LEN_MAX: usize = 256;
/// The longest redrive-allow policy a queue keeps, in bytes.
pub const REDRIVE_ALLOW_LEN_MAX: usize = 8 << 10;
/// Attributes on one message.
pub const ATTRIBUTES_MAX: usize = 16;
/// Bytes of all attribute keys and values of one message.
pub const ATTRIBUTES_BYTES_MAX: usize = 8 << 10;
/// Longest attribute key.
pub const ATTRIBUTE_KEY_LEN_MAX: usize = 128;
/// Longest channel name.
pub const CHANNEL_LEN_MAX: usize = 128;
/// Longest dead-letter reason given by a consumer.
pub const DEAD_LETTER_REASON_LEN_MAX: usize = 256;
/// Longest dead-letter description given by a consumer.
pub const DEAD_LETTER_DESCRIPTION_LEN_MAX: usize = 4_096;
/// Messages one peek may return.
pub const PEEK_MAX: u32 = 100;
/// Channels one channels request may return.
pub const CHANNELS_PAGE_MAX: u16 = 100;
/// Dead letters a redrive moves at once, and a second at most: a redrive
/// without a rate moves this many now and the rest at this rate, so no
/// request moves an unbounded DLQ in one go. Also the highest rate a
/// redrive may ask for.
pub const REDRIVE_BATCH_MAX: u32 = 10_000;

/// A deduplication id, in bytes.
pub const DEDUP_ID_LEN_MAX: usize = 128;
/// A group key's length in bytes, at most.
pub const GROUP_LEN_MAX: usize = 128;
/// Priority levels a queue may have (a put's level is 1 ..= the queue's
/// `priority_levels`; higher is served first).
pub const PRIORITY_LEVELS_MAX: u8 = 10;
/// The most deliveries of a channel between two taken from a lower
/// priority level (`priority_fairness`; 0 = strict priority).
pub const PRIORITY_FAIRNESS_MAX: u32 = 1_000;
/// A queue's deduplication window at least (1 s) and at most (24 h).
pub const DEDUP_WINDOW_MS_MIN: u64 = 1_000;
/// See [`DEDUP_WINDOW_MS_MIN`].
pub const DEDUP_WINDOW_MS_MAX: u64 = 86_400_000;
/// The deduplication window of a queue that names none (5 min, as SQS).
pub const DEDUP_WINDOW_MS_DEFAULT: u64 = 300_000;
/// Deduplication ids one queue remembers at once (a put with a new id past
/// it is refused until some expire).
pub const DEDUP_ENTRIES_MAX: u64 = 1 << 22;

/// A retry policy's delays (`retry_initial_ms`, `retry_max_ms`) at most:
/// 12 hours, as a visibility timeout.
pub const RETRY_MS_MAX: u64 = 12 * 3_600_000;
/// A retry policy's multiplier, in percent: ×1.00 at least ...
pub const RETRY_MULTIPLIER_PCT_MIN: u32 = 100;
/// ... and ×10.00 at most.
pub const RETRY_MULTIPLIER_PCT_MAX: u32 = 1_000;
/// The multiplier of a queue that names none: each retry waits twice the
/// one before.
pub const RETRY_MULTIPLIER_PCT_DEFAULT: u32 = 200;
/// The longest retry delay of a queue that names none: 15 minutes.
pub const RETRY_MAX_MS_DEFAULT: u64 = 15 * 60_000;

/// Failed attempts a message keeps at most (`attempt_history`).
pub const ATTEMPT_HISTORY_MAX: u32 = 32;
/// Failed attempts a message keeps when its queue names no number.
pub const ATTEMPT_HISTORY_DEFAULT: u32 = 10;
/// The bytes of one message's failed attempts at most (each counts its
/// reason, its description and [`ATTEMPT_OVERHEAD_BYTES`]): past it the
/// oldest go first.
pub const ATTEMPT_HISTORY_BYTES_MAX: usize = 16 << 10;
/// What one failed attempt counts besides its reason and description
/// (what it takes in memory, measured: docs/benchmarks.md).
pub const ATTEMPT_OVERHEAD_BYTES: usize = 64;
/// What a message's history of failed attempts counts besides its
/// attempts (the record's optional parts and the list, measured).
pub const ATTEMPT_HISTORY_OVERHEAD_BYTES: usize = 176;
