//! The SQS operations: each request's parameters checked as SQS checks
//! them, turned into fila requests, run through the gateway, and the
//! answers turned into SQS's. docs/sqs.md lists what differs.

use fila_proto::{Request, Response};
use serde_json::Value;

use super::error::{Kind, SqsError};
use super::gateway::{Gateway, Reply};
use crate::auth::TokenId;
use crate::dispatch::{self, Answer, Caller};

mod messages;
mod moves;
mod queues;

use fila_sqs::fifo;
use fila_sqs::params::{
    number, queue_of, required, strings, text, DELAY_SECS_MAX, VISIBILITY_SECS_MAX, WAIT_SECS_MAX,
};
use moves::{cancel_move_task, list_move_tasks, start_move_task};
use queues::{
    create_queue, delete_queue, get_queue_attributes, get_queue_url,
    list_dead_letter_source_queues, list_queue_tags, list_queues, purge_queue,
    set_queue_attributes, tag_queue, untag_queue,
};

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
        op if fila_sqs::messages::OPERATIONS.contains(&op) => messages::run(cx, op, input).await,
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
