//! The engine's one error type. Every failure has a stable [`ErrorKind`],
//! the same in the engine, on the wire and in the client.

/// The stable kind of a failure (SPEC §3 "Errors").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A field is out of its range or malformed.
    InvalidArgument,
    /// No queue has that name.
    QueueNotFound,
    /// A create named an existing queue with different settings.
    QueueExists,
    /// The queue or channel is at max_messages or max_bytes.
    QueueFull,
    /// The queue was deleted while the request waited.
    QueueDeleted,
    /// The payload is over the queue's max_message_bytes.
    MessageTooLarge,
    /// The receipt's lease is over.
    ReceiptStale,
    /// The receipt is not one this server issued.
    ReceiptInvalid,
    /// No message has that sequence number (in the state asked for).
    NotFound,
    /// The message expired.
    Expired,
    /// A server-wide limit is reached (stored bytes, queues, parked
    /// receives, connections); nothing was changed.
    ResourceExhausted,
    /// The queue is paused for what was asked (a put while sending is
    /// paused, a receive-deferred while receiving is).
    QueuePaused,
}

impl ErrorKind {
    /// The snake_case name used on the wire and in the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::QueueNotFound => "queue_not_found",
            ErrorKind::QueueExists => "queue_exists",
            ErrorKind::QueueFull => "queue_full",
            ErrorKind::QueueDeleted => "queue_deleted",
            ErrorKind::MessageTooLarge => "message_too_large",
            ErrorKind::ReceiptStale => "receipt_stale",
            ErrorKind::ReceiptInvalid => "receipt_invalid",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Expired => "expired",
            ErrorKind::ResourceExhausted => "resource_exhausted",
            ErrorKind::QueuePaused => "queue_paused",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed operation, or one failed entry of a batch.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// `field` broke its limit.
    #[error("invalid_argument: {field} {limit}")]
    InvalidArgument {
        /// The request field at fault.
        field: &'static str,
        /// What the field must be, and what it was.
        limit: String,
    },
    /// No queue has that name.
    #[error("queue_not_found: no queue named {0:?}")]
    QueueNotFound(String),
    /// The queue exists with other settings.
    #[error("queue_exists: queue {name:?} exists with a different {field}")]
    QueueExists {
        /// The queue.
        name: String,
        /// The first setting that differs.
        field: &'static str,
    },
    /// A put would take the queue or a channel past a limit.
    #[error("queue_full: queue {name:?} is at its {limit} of {max}")]
    QueueFull {
        /// The queue.
        name: String,
        /// `max_messages`, `max_bytes`, or the channel share of one of them.
        limit: &'static str,
        /// The limit's value.
        max: u64,
    },
    /// The queue was deleted while this receive waited.
    #[error("queue_deleted: queue {0:?} was deleted")]
    QueueDeleted(String),
    /// The queue is paused for `what` ("sending", "receiving").
    #[error("queue_paused: {what} is paused on queue {name:?} (an operator resumes it)")]
    QueuePaused {
        /// The queue.
        name: String,
        /// What is paused.
        what: &'static str,
    },
    /// The payload is over the queue's limit.
    #[error("message_too_large: payload of {size} bytes is over max_message_bytes {max}")]
    MessageTooLarge {
        /// The payload's length.
        size: usize,
        /// The queue's max_message_bytes.
        max: u32,
    },
    /// The receipt's lease has ended.
    #[error("receipt_stale: the lease this receipt names has ended")]
    ReceiptStale,
    /// The receipt was not issued by this server.
    #[error("receipt_invalid: {0}")]
    ReceiptInvalid(&'static str),
    /// No message with that sequence number is in the state asked for.
    #[error("not_found: no {what} message with sequence number {seq}")]
    NotFound {
        /// The sequence number asked for.
        seq: u64,
        /// The state it was looked for in (`deferred`, `scheduled`, ...).
        what: &'static str,
    },
    /// A deferred message whose group has another message leased: it can
    /// be received once that lease ends (one message of a group at a time).
    #[error("not_found: deferred message {seq} cannot be received now: another message of its group is leased (try again once that lease ends)")]
    GroupBusy {
        /// The sequence number asked for.
        seq: u64,
    },
    /// The queue keeps no move task of that number.
    #[error("not_found: the queue keeps no move task {0}")]
    MoveTaskNotFound(u64),
    /// The message expired before it could be taken.
    #[error("expired: message {seq} expired")]
    Expired {
        /// Its sequence number.
        seq: u64,
    },
    /// A server-wide limit would be passed.
    #[error("resource_exhausted: {limit} of {max} reached")]
    ResourceExhausted {
        /// `max_stored_bytes`, `max_queues`, ...
        limit: &'static str,
        /// The limit's value.
        max: u64,
    },
    /// The disk the log is on cannot take more messages now.
    #[error("resource_exhausted: {0}; puts are refused until there is room again (receives, deletes and other changes go on)")]
    Disk(crate::budget::DiskState),
}

impl Error {
    /// The stable kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            Error::QueueNotFound(_) => ErrorKind::QueueNotFound,
            Error::QueueExists { .. } => ErrorKind::QueueExists,
            Error::QueueFull { .. } => ErrorKind::QueueFull,
            Error::QueueDeleted(_) => ErrorKind::QueueDeleted,
            Error::QueuePaused { .. } => ErrorKind::QueuePaused,
            Error::MessageTooLarge { .. } => ErrorKind::MessageTooLarge,
            Error::ReceiptStale => ErrorKind::ReceiptStale,
            Error::ReceiptInvalid(_) => ErrorKind::ReceiptInvalid,
            Error::NotFound { .. } | Error::GroupBusy { .. } | Error::MoveTaskNotFound(_) => {
                ErrorKind::NotFound
            }
            Error::Expired { .. } => ErrorKind::Expired,
            Error::ResourceExhausted { .. } | Error::Disk(_) => ErrorKind::ResourceExhausted,
        }
    }

    pub(crate) fn invalid(field: &'static str, limit: impl Into<String>) -> Error {
        Error::InvalidArgument {
            field,
            limit: limit.into(),
        }
    }
}

/// Checks `value` against an inclusive range, naming the field.
pub(crate) fn check_range(
    field: &'static str,
    value: u64,
    min: u64,
    max: u64,
    unit: &str,
) -> Result<(), Error> {
    if value < min || value > max {
        return Err(Error::invalid(
            field,
            format!("must be {min}..={max}{unit} (got {value}{unit})"),
        ));
    }
    Ok(())
}
