//! The SQS API's errors: each with the JSON protocol's `__type` (the
//! model's shape), the query protocol's code (sent in the
//! `x-amzn-query-error` header too, which the SDKs of a query-compatible
//! service read the code from), its HTTP status and whose fault it is.

use fila_core::{Error, ErrorKind};

/// What went wrong, as the SQS API names it: each variant is the error of
/// that name in the API's reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Kind {
    QueueDoesNotExist,
    InvalidAddress,
    QueueNameExists,
    PurgeQueueInProgress,
    ReceiptHandleIsInvalid,
    MessageNotInflight,
    TooManyEntriesInBatchRequest,
    EmptyBatchRequest,
    BatchEntryIdsNotDistinct,
    BatchRequestTooLong,
    InvalidBatchEntryId,
    UnsupportedOperation,
    InvalidAttributeName,
    InvalidAttributeValue,
    InvalidMessageContents,
    OverLimit,
    ResourceNotFound,
    InvalidParameterValue,
    MissingParameter,
    /// A query-protocol request with no `Action` (AWS's common errors:
    /// "The request is missing an action or a required parameter").
    MissingAction,
    InvalidAction,
    AccessDenied,
    InvalidClientTokenId,
    SignatureDoesNotMatch,
    IncompleteSignature,
    MissingAuthenticationToken,
    RequestExpired,
    RequestThrottled,
    RequestTooLarge,
    ServiceUnavailable,
    InternalError,
    /// fila's own: the queue is paused for sending (docs/sqs.md).
    QueuePaused,
}

impl Kind {
    /// The JSON protocol's shape name, the query protocol's code, the HTTP
    /// status, and whether the sender is at fault.
    fn names(self) -> (&'static str, &'static str, u16, bool) {
        use Kind::*;
        match self {
            QueueDoesNotExist => (
                "QueueDoesNotExist",
                "AWS.SimpleQueueService.NonExistentQueue",
                400,
                true,
            ),
            InvalidAddress => ("InvalidAddress", "InvalidAddress", 404, true),
            QueueNameExists => ("QueueNameExists", "QueueAlreadyExists", 400, true),
            PurgeQueueInProgress => (
                "PurgeQueueInProgress",
                "AWS.SimpleQueueService.PurgeQueueInProgress",
                403,
                true,
            ),
            ReceiptHandleIsInvalid => (
                "ReceiptHandleIsInvalid",
                "ReceiptHandleIsInvalid",
                404,
                true,
            ),
            MessageNotInflight => (
                "MessageNotInflight",
                "AWS.SimpleQueueService.MessageNotInflight",
                400,
                true,
            ),
            TooManyEntriesInBatchRequest => (
                "TooManyEntriesInBatchRequest",
                "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
                400,
                true,
            ),
            EmptyBatchRequest => (
                "EmptyBatchRequest",
                "AWS.SimpleQueueService.EmptyBatchRequest",
                400,
                true,
            ),
            BatchEntryIdsNotDistinct => (
                "BatchEntryIdsNotDistinct",
                "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
                400,
                true,
            ),
            BatchRequestTooLong => (
                "BatchRequestTooLong",
                "AWS.SimpleQueueService.BatchRequestTooLong",
                400,
                true,
            ),
            InvalidBatchEntryId => (
                "InvalidBatchEntryId",
                "AWS.SimpleQueueService.InvalidBatchEntryId",
                400,
                true,
            ),
            UnsupportedOperation => (
                "UnsupportedOperation",
                "AWS.SimpleQueueService.UnsupportedOperation",
                400,
                true,
            ),
            InvalidAttributeName => ("InvalidAttributeName", "InvalidAttributeName", 400, true),
            InvalidAttributeValue => ("InvalidAttributeValue", "InvalidAttributeValue", 400, true),
            InvalidMessageContents => (
                "InvalidMessageContents",
                "InvalidMessageContents",
                400,
                true,
            ),
            OverLimit => ("OverLimit", "OverLimit", 403, true),
            ResourceNotFound => (
                "ResourceNotFoundException",
                "ResourceNotFoundException",
                404,
                true,
            ),
            InvalidParameterValue => ("InvalidParameterValue", "InvalidParameterValue", 400, true),
            MissingParameter => ("MissingParameter", "MissingParameter", 400, true),
            MissingAction => ("MissingAction", "MissingAction", 400, true),
            InvalidAction => ("InvalidAction", "InvalidAction", 400, true),
            AccessDenied => ("AccessDeniedException", "AccessDenied", 403, true),
            InvalidClientTokenId => ("InvalidClientTokenId", "InvalidClientTokenId", 403, true),
            SignatureDoesNotMatch => ("SignatureDoesNotMatch", "SignatureDoesNotMatch", 403, true),
            IncompleteSignature => ("IncompleteSignature", "IncompleteSignature", 400, true),
            MissingAuthenticationToken => (
                "MissingAuthenticationToken",
                "MissingAuthenticationToken",
                403,
                true,
            ),
            RequestExpired => ("RequestExpired", "RequestExpired", 400, true),
            RequestThrottled => ("RequestThrottled", "RequestThrottled", 403, true),
            RequestTooLarge => ("RequestEntityTooLarge", "RequestEntityTooLarge", 413, true),
            ServiceUnavailable => ("ServiceUnavailable", "ServiceUnavailable", 503, false),
            InternalError => ("InternalError", "InternalError", 500, false),
            QueuePaused => ("QueuePaused", "QueuePaused", 400, true),
        }
    }
}

/// An error answer of the SQS API.
#[derive(Clone, Debug)]
pub struct SqsError {
    /// Which error.
    pub kind: Kind,
    /// What the answer's message says.
    pub message: String,
}

impl SqsError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: Kind, message: impl Into<String>) -> SqsError {
        SqsError {
            kind,
            message: message.into(),
        }
    }

    /// The JSON protocol's `__type`.
    pub fn json_type(&self) -> String {
        format!("com.amazonaws.sqs#{}", self.kind.names().0)
    }

    /// The query protocol's code.
    pub fn code(&self) -> &'static str {
        self.kind.names().1
    }

    /// The HTTP status of its answer.
    pub fn status(&self) -> u16 {
        self.kind.names().2
    }

    /// `Sender` or `Receiver`, as the query protocol says whose fault it is.
    pub fn fault(&self) -> &'static str {
        if self.kind.names().3 {
            "Sender"
        } else {
            "Receiver"
        }
    }

    /// The `x-amzn-query-error` header's value.
    pub fn query_header(&self) -> String {
        format!("{};{}", self.code(), self.fault())
    }

    /// A required parameter `name` is missing.
    pub fn missing(name: &str) -> SqsError {
        SqsError::new(
            Kind::MissingParameter,
            format!("The request must contain the parameter {name}."),
        )
    }

    /// An answer of the shards' owners of another kind than its request's
    /// (a bug).
    pub fn unexpected() -> SqsError {
        SqsError::new(Kind::InternalError, "an unexpected answer")
    }

    /// A parameter's value is not valid (`InvalidParameterValue`).
    pub fn invalid(message: impl Into<String>) -> SqsError {
        SqsError::new(Kind::InvalidParameterValue, message)
    }

    /// The SQS error of an engine error about queue `queue`.
    pub fn of_engine(e: &Error) -> SqsError {
        let kind = match e.kind() {
            ErrorKind::QueueNotFound | ErrorKind::QueueDeleted => Kind::QueueDoesNotExist,
            ErrorKind::QueueExists => Kind::QueueNameExists,
            ErrorKind::QueueFull | ErrorKind::ResourceExhausted => Kind::OverLimit,
            ErrorKind::MessageTooLarge => Kind::InvalidParameterValue,
            ErrorKind::ReceiptStale | ErrorKind::ReceiptInvalid => Kind::ReceiptHandleIsInvalid,
            ErrorKind::NotFound | ErrorKind::Expired => Kind::InvalidParameterValue,
            ErrorKind::InvalidArgument => Kind::InvalidParameterValue,
            ErrorKind::QueuePaused => Kind::QueuePaused,
        };
        let message = match kind {
            Kind::QueueDoesNotExist => "The specified queue does not exist.".to_owned(),
            _ => e.to_string(),
        };
        SqsError::new(kind, message)
    }

    /// The SQS error of an error answer of the binary protocol's codes.
    pub fn of_wire(e: &fila_proto::WireError) -> SqsError {
        use fila_proto::ErrorCode as C;
        let kind = match e.code {
            C::QUEUE_NOT_FOUND | C::QUEUE_DELETED => Kind::QueueDoesNotExist,
            C::QUEUE_EXISTS => Kind::QueueNameExists,
            C::QUEUE_FULL | C::RESOURCE_EXHAUSTED => Kind::OverLimit,
            C::RECEIPT_STALE | C::RECEIPT_INVALID => Kind::ReceiptHandleIsInvalid,
            C::FORBIDDEN => Kind::AccessDenied,
            C::UNAUTHENTICATED => Kind::InvalidClientTokenId,
            // A cluster between leaders, or a forward to the leader that
            // failed: SDKs try again.
            C::SHUTTING_DOWN | C::NOT_LEADER | C::OUTCOME_UNKNOWN => Kind::ServiceUnavailable,
            C::INTERNAL => Kind::InternalError,
            C::QUEUE_PAUSED => Kind::QueuePaused,
            _ => Kind::InvalidParameterValue,
        };
        let message = match (kind, e.code) {
            (Kind::QueueDoesNotExist, _) => "The specified queue does not exist.".to_owned(),
            // The binary protocol's answer names the leader's address for
            // the binary protocol: of no use to an SQS client, which sends
            // the same call again (to this node or another).
            (_, C::NOT_LEADER) => {
                "The cluster is choosing a leader for this queue (or making its partitions); \
                 try again in a moment."
                    .to_owned()
            }
            (_, C::OUTCOME_UNKNOWN) => {
                "The leader stopped answering before the call was acknowledged: it may or may \
                 not have been done; try again (a send with a deduplication id is stored once)."
                    .to_owned()
            }
            _ => e.message.clone(),
        };
        SqsError::new(kind, message)
    }
}
