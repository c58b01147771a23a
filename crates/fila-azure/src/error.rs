//! The Queue service's errors: a code, its HTTP status, a message, and
//! the XML body that carries them.

use crate::xml;

/// An error code of the Queue service REST API, with its status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// 403: the signature, the key or the SAS did not check.
    AuthenticationFailed,
    /// 403: the SAS does not allow this operation.
    AuthorizationPermissionMismatch,
    /// 403: the SAS does not reach this resource, or the token's grants
    /// refuse it.
    AuthorizationFailure,
    /// 403: a SAS's resource types do not cover the operation.
    AuthorizationResourceTypeMismatch,
    /// 400: a header's value is not valid.
    InvalidHeaderValue,
    /// 400: a query parameter's value is not valid.
    InvalidQueryParameterValue,
    /// 400: a query parameter's value is out of its range.
    OutOfRangeQueryParameterValue,
    /// 400: an input is out of its range (a metadata's size).
    OutOfRangeInput,
    /// 400: a required header is missing.
    MissingRequiredHeader,
    /// 400: a required query parameter is missing.
    MissingRequiredQueryParameter,
    /// 400: the body is not the XML the operation takes.
    InvalidXmlDocument,
    /// 400: an element of the body has a value not valid.
    InvalidXmlNodeValue,
    /// 400: a required element of the body is missing.
    MissingRequiredXmlNode,
    /// 400: the name of a queue is not valid.
    InvalidResourceName,
    /// 400: a metadata name is not valid.
    InvalidMetadata,
    /// 400: the URI names nothing the service has.
    InvalidUri,
    /// 400: an input other than those above is not valid.
    InvalidInput,
    /// 400: the pop receipt names another message or delivery.
    PopReceiptMismatch,
    /// 400: the queue is paused, or the request cannot be done now.
    OperationNotAllowed,
    /// 404: no such queue.
    QueueNotFound,
    /// 404: no such message (or its pop receipt has been replaced).
    MessageNotFound,
    /// 404: a resource the URI names does not exist.
    ResourceNotFound,
    /// 405: the method is not one the resource takes.
    UnsupportedHttpVerb,
    /// 409: the queue exists with other metadata.
    QueueAlreadyExists,
    /// 409: the queue is being deleted.
    QueueBeingDeleted,
    /// 413: the body (a message) is larger than the service takes.
    RequestBodyTooLarge,
    /// 500: the server failed.
    InternalError,
    /// 503: the server is busy or stopping; try again.
    ServerBusy,
}

impl Code {
    /// Its HTTP status.
    pub fn status(self) -> u16 {
        use Code::*;
        match self {
            AuthenticationFailed
            | AuthorizationPermissionMismatch
            | AuthorizationFailure
            | AuthorizationResourceTypeMismatch => 403,
            QueueNotFound | MessageNotFound | ResourceNotFound => 404,
            UnsupportedHttpVerb => 405,
            QueueAlreadyExists | QueueBeingDeleted => 409,
            RequestBodyTooLarge => 413,
            InternalError => 500,
            ServerBusy => 503,
            _ => 400,
        }
    }

    /// Its name, as `x-ms-error-code` and the body's `<Code>` carry it.
    pub fn as_str(self) -> &'static str {
        use Code::*;
        match self {
            AuthenticationFailed => "AuthenticationFailed",
            AuthorizationPermissionMismatch => "AuthorizationPermissionMismatch",
            AuthorizationFailure => "AuthorizationFailure",
            AuthorizationResourceTypeMismatch => "AuthorizationResourceTypeMismatch",
            InvalidHeaderValue => "InvalidHeaderValue",
            InvalidQueryParameterValue => "InvalidQueryParameterValue",
            OutOfRangeQueryParameterValue => "OutOfRangeQueryParameterValue",
            OutOfRangeInput => "OutOfRangeInput",
            MissingRequiredHeader => "MissingRequiredHeader",
            MissingRequiredQueryParameter => "MissingRequiredQueryParameter",
            InvalidXmlDocument => "InvalidXmlDocument",
            InvalidXmlNodeValue => "InvalidXmlNodeValue",
            MissingRequiredXmlNode => "MissingRequiredXmlNode",
            InvalidResourceName => "InvalidResourceName",
            InvalidMetadata => "InvalidMetadata",
            InvalidUri => "InvalidUri",
            InvalidInput => "InvalidInput",
            PopReceiptMismatch => "PopReceiptMismatch",
            OperationNotAllowed => "OperationNotAllowed",
            QueueNotFound => "QueueNotFound",
            MessageNotFound => "MessageNotFound",
            ResourceNotFound => "ResourceNotFound",
            UnsupportedHttpVerb => "UnsupportedHttpVerb",
            QueueAlreadyExists => "QueueAlreadyExists",
            QueueBeingDeleted => "QueueBeingDeleted",
            RequestBodyTooLarge => "RequestBodyTooLarge",
            InternalError => "InternalError",
            ServerBusy => "ServerBusy",
        }
    }
}

/// An error of the Queue service API: what the client is answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AzureError {
    /// Its code (and status).
    pub code: Code,
    /// What went wrong, for a person.
    pub message: String,
}

impl AzureError {
    /// An error with this code and message.
    pub fn new(code: Code, message: impl Into<String>) -> AzureError {
        AzureError {
            code,
            message: message.into(),
        }
    }

    /// Its HTTP status.
    pub fn status(&self) -> u16 {
        self.code.status()
    }

    /// `InvalidQueryParameterValue` naming `name`.
    pub fn query(name: &str, why: impl std::fmt::Display) -> AzureError {
        AzureError::new(
            Code::InvalidQueryParameterValue,
            format!("Value for one of the query parameters specified in the request URI is invalid: {name}: {why}"),
        )
    }

    /// `OutOfRangeQueryParameterValue` naming `name` and its bounds.
    pub fn query_range(name: &str, min: i64, max: i64) -> AzureError {
        AzureError::new(
            Code::OutOfRangeQueryParameterValue,
            format!(
                "One of the query parameters specified in the request URI is outside the permissible range: {name} must be {min} to {max}."
            ),
        )
    }

    /// The error of a fila answer's error.
    pub fn of_wire(e: &fila_proto::WireError) -> AzureError {
        use fila_proto::ErrorCode as E;
        let code = match e.code {
            E::QUEUE_NOT_FOUND | E::QUEUE_DELETED => Code::QueueNotFound,
            E::QUEUE_EXISTS => Code::QueueAlreadyExists,
            E::RECEIPT_STALE | E::NOT_FOUND | E::EXPIRED => Code::MessageNotFound,
            E::RECEIPT_INVALID => Code::PopReceiptMismatch,
            E::FORBIDDEN | E::UNAUTHENTICATED => Code::AuthorizationFailure,
            E::MESSAGE_TOO_LARGE | E::FRAME_TOO_LARGE => Code::RequestBodyTooLarge,
            E::QUEUE_FULL | E::RESOURCE_EXHAUSTED | E::SHUTTING_DOWN | E::NOT_LEADER => {
                Code::ServerBusy
            }
            E::QUEUE_PAUSED => Code::OperationNotAllowed,
            E::INVALID_ARGUMENT => Code::InvalidInput,
            _ => Code::InternalError,
        };
        AzureError::with_detail(code, &e.message)
    }

    /// An error of `code` whose message is the service's own for the
    /// common ones, else fila's `detail`.
    fn with_detail(code: Code, detail: &str) -> AzureError {
        let message = match code {
            Code::QueueNotFound => "The specified queue does not exist.",
            Code::QueueAlreadyExists => "The specified queue already exists.",
            Code::MessageNotFound => "The specified message does not exist.",
            _ => detail,
        };
        AzureError::new(code, message)
    }

    /// The error of an engine error (a parked receive's).
    pub fn of_engine(e: &fila_core::Error) -> AzureError {
        use fila_core::ErrorKind as K;
        let code = match e.kind() {
            K::QueueNotFound | K::QueueDeleted => Code::QueueNotFound,
            K::QueueExists => Code::QueueAlreadyExists,
            K::QueueFull | K::ResourceExhausted => Code::ServerBusy,
            K::MessageTooLarge => Code::RequestBodyTooLarge,
            K::ReceiptStale | K::NotFound | K::Expired => Code::MessageNotFound,
            K::ReceiptInvalid => Code::PopReceiptMismatch,
            K::InvalidArgument => Code::InvalidInput,
            K::QueuePaused => Code::OperationNotAllowed,
        };
        AzureError::with_detail(code, &e.to_string())
    }

    /// The body of its answer (`request_id` and `time`, RFC 1123, go into
    /// the message as the service writes them).
    pub fn body(&self, request_id: &str, time: &str) -> Vec<u8> {
        let mut out = String::with_capacity(160 + self.message.len());
        out.push_str(xml::DECLARATION);
        out.push_str("<Error><Code>");
        out.push_str(self.code.as_str());
        out.push_str("</Code><Message>");
        xml::escape_into(&self.message, &mut out);
        out.push_str("\nRequestId:");
        xml::escape_into(request_id, &mut out);
        out.push_str("\nTime:");
        out.push_str(time);
        out.push_str("</Message></Error>");
        out.into_bytes()
    }
}

impl std::fmt::Display for AzureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for AzureError {}
