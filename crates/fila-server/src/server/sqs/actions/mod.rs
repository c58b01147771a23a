//! The SQS operations: each request's parameters checked as SQS checks
//! them, turned into fila requests, run through the gateway, and the
//! answers turned into SQS's. docs/sqs.md lists what differs.

use fila_proto::{Request, Response};
use serde_json::Value;

use super::attrs;
use super::error::{Kind, SqsError};
use super::gateway::{Gateway, Reply};
use crate::auth::TokenId;
use crate::dispatch::{self, Answer, Caller};

mod fifo;
mod messages;
mod moves;
mod queues;

use messages::{
    change_visibility, change_visibility_batch, delete_message, delete_message_batch,
    receive_message, send_message, send_message_batch,
};
use moves::{cancel_move_task, list_move_tasks, start_move_task};
use queues::{
    create_queue, delete_queue, get_queue_attributes, get_queue_url,
    list_dead_letter_source_queues, list_queue_tags, list_queues, purge_queue,
    set_queue_attributes, tag_queue, untag_queue,
};

/// Entries of one batch request.
pub(in crate::server) const BATCH_MAX: usize = 10;
/// Messages one receive takes at most.
const RECEIVE_MAX: u64 = 10;
/// The longest wait of a receive, in seconds.
const WAIT_SECS_MAX: u64 = 20;
/// The longest visibility timeout, in seconds (12 h).
const VISIBILITY_SECS_MAX: u64 = 43_200;
/// The longest delay, in seconds (15 min).
const DELAY_SECS_MAX: u64 = 900;
/// A batch's entries together are at most this many bytes (body and
/// attributes).
const BATCH_BYTES_MAX: usize = 1 << 20;

/// The defaults of a queue created through the SQS API (SQS's, where they
/// differ from fila's own).
const SQS_RETENTION_MS: u64 = 4 * 86_400_000;
const SQS_MAX_MESSAGE_BYTES: u32 = 1 << 20;

/// Who asks, and where the request was sent (for queue URLs).
pub(in crate::server) struct Context<'a> {
    pub(in crate::server) gateway: &'a Gateway,
    /// The tokens `token` was found in (one reload's).
    pub(in crate::server) tokens: &'a crate::auth::TokenTable,
    pub(in crate::server) token: Option<TokenId>,
    pub(in crate::server) host: &'a str,
}

impl Context<'_> {
    /// Runs a fila request the caller may make.
    async fn call(&self, req: Request, room: usize) -> Result<Reply, SqsError> {
        let caller = Caller {
            tokens: self.tokens,
            token: self.token,
        };
        if let Some(Response::Error(e)) = dispatch::authorize(&caller, &req) {
            return Err(SqsError::new(Kind::AccessDenied, e.message));
        }
        let token = self.token.map(|t| (self.tokens, t));
        self.gateway.call(req, token, room).await
    }

    /// Runs a fila request whose answer is a wire response; an error
    /// answer is the SQS error it maps to.
    async fn wire(&self, req: Request) -> Result<Response, SqsError> {
        match self.call(req, 0).await? {
            Reply::Answer(Answer::Wire(Response::Error(e))) => Err(SqsError::of_wire(&e)),
            Reply::Answer(Answer::Wire(r)) => Ok(r),
            _ => Err(SqsError::unexpected()),
        }
    }
}

/// Runs SQS operation `op` with its JSON input.
pub(in crate::server) async fn run(
    cx: &Context<'_>,
    op: &str,
    input: &Value,
) -> Result<Value, SqsError> {
    match op {
        "CreateQueue" => create_queue(cx, input).await,
        "GetQueueUrl" => get_queue_url(cx, input).await,
        "ListQueues" => list_queues(cx, input).await,
        "DeleteQueue" => delete_queue(cx, input).await,
        "PurgeQueue" => purge_queue(cx, input).await,
        "GetQueueAttributes" => get_queue_attributes(cx, input).await,
        "SetQueueAttributes" => set_queue_attributes(cx, input).await,
        "SendMessage" => send_message(cx, input).await,
        "SendMessageBatch" => send_message_batch(cx, input).await,
        "ReceiveMessage" => receive_message(cx, input).await,
        "DeleteMessage" => delete_message(cx, input).await,
        "DeleteMessageBatch" => delete_message_batch(cx, input).await,
        "ChangeMessageVisibility" => change_visibility(cx, input).await,
        "ChangeMessageVisibilityBatch" => change_visibility_batch(cx, input).await,
        "AddPermission" | "RemovePermission" => Err(SqsError::new(
            Kind::UnsupportedOperation,
            format!("{op} is not supported: fila grants access with tokens (docs/sqs.md)."),
        )),
        "TagQueue" => tag_queue(cx, input).await,
        "UntagQueue" => untag_queue(cx, input).await,
        "ListQueueTags" => list_queue_tags(cx, input).await,
        "ListDeadLetterSourceQueues" => list_dead_letter_source_queues(cx, input).await,
        "StartMessageMoveTask" => start_move_task(cx, input).await,
        "ListMessageMoveTasks" => list_move_tasks(cx, input).await,
        "CancelMessageMoveTask" => cancel_move_task(cx, input).await,
        _ => Err(SqsError::new(
            Kind::InvalidAction,
            format!("{op} is not an operation of the SQS API."),
        )),
    }
}

// ----- parameters -----------------------------------------------------------

fn text<'a>(input: &'a Value, name: &str) -> Result<Option<&'a str>, SqsError> {
    match input.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(SqsError::invalid(format!("{name} must be a string."))),
    }
}

fn required<'a>(input: &'a Value, name: &str) -> Result<&'a str, SqsError> {
    text(input, name)?.ok_or_else(|| SqsError::missing(name))
}

/// A whole number parameter (a JSON number, or its text as the query
/// protocol sends it) within `min..=max`.
fn number(input: &Value, name: &str, min: u64, max: u64) -> Result<Option<u64>, SqsError> {
    let v = match input.get(name) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.trim().parse::<u64>().ok(),
        Some(_) => None,
    };
    match v {
        Some(v) if (min..=max).contains(&v) => Ok(Some(v)),
        _ => Err(SqsError::invalid(format!(
            "Value {} for parameter {name} is invalid. Reason: must be between {min} and {max}.",
            input.get(name).map_or(String::new(), |v| v.to_string())
        ))),
    }
}

fn strings(input: &Value, name: &str) -> Result<Vec<String>, SqsError> {
    match input.get(name) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| SqsError::invalid(format!("{name} must be a list of strings.")))
            })
            .collect(),
        Some(_) => Err(SqsError::invalid(format!(
            "{name} must be a list of strings."
        ))),
    }
}

fn queue_of(input: &Value) -> Result<String, SqsError> {
    attrs::name_of_url(required(input, "QueueUrl")?)
}
