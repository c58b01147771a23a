//! Message operations: send, receive, delete and change visibility, one
//! at a time and in batches. What each checks, asks and answers is
//! `fila_sqs::messages` (no I/O); here its steps' requests are run for the
//! caller and their answers handed back.

use fila_sqs::messages::{self, Step};
use serde_json::Value;

use super::Context;
use crate::dispatch::Answer;
use crate::server::sqs::error::SqsError;
use crate::server::sqs::gateway::Reply;

/// Runs message operation `op` (one of `messages::OPERATIONS`).
pub(super) async fn run(cx: &Context<'_>, op: &str, input: &Value) -> Result<Value, SqsError> {
    let (mut machine, mut step) = messages::start(op, input)?;
    loop {
        match step {
            Step::Done(output) => return Ok(output),
            Step::Call { request, room } => {
                let answer = match cx.call(request, room).await? {
                    Reply::Answer(Answer::Wire(r)) => messages::Answer::Wire(r),
                    Reply::Answer(Answer::Messages(_, ms)) | Reply::Late(Ok(ms)) => {
                        messages::Answer::Messages(ms)
                    }
                    Reply::Late(Err(e)) => messages::Answer::Engine(e),
                };
                step = machine.resume(answer)?;
            }
        }
    }
}
