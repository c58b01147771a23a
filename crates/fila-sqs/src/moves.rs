//! Message move tasks: fila's move tasks as SQS shows them.

use fila_core::MoveStatus;
use fila_proto::{self as proto, Request, Response};
use serde_json::{json, Map, Value};

use crate::attrs;
use crate::error::{Kind, SqsError};
use crate::input::Input;
use crate::params::{number, required, text};
use crate::queues::dead_letter_sources;
use crate::{wire, Caller};

/// The most messages a second a move task may be asked for (SQS's).
const MOVE_RATE_MAX: u64 = 500;

/// A task's handle: its queue and number, opaque to the client.
fn task_handle(queue: &str, id: u64) -> String {
    attrs::receipt_handle(format!("{id}:{queue}").as_bytes())
}

fn task_of_handle(handle: &str) -> Result<(String, u64), SqsError> {
    let bad = || SqsError::new(Kind::ResourceNotFound, "The task handle is not valid.");
    let bytes = attrs::bytes_of_handle(handle).ok_or_else(bad)?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let (id, queue) = text.split_once(':').ok_or_else(bad)?;
    Ok((queue.to_owned(), id.parse().map_err(|_| bad())?))
}

/// The move tasks of `queue` (fila's own redrives aside), most recent first.
async fn move_tasks(cx: &impl Caller, queue: &str) -> Result<Vec<proto::MoveInfo>, SqsError> {
    match wire(
        cx,
        Request::ListMoves {
            queue: queue.to_owned(),
        },
    )
    .await?
    {
        Response::Moves(ms) => Ok(ms.into_iter().rev().filter(|m| !m.from_dlq).collect()),
        _ => Err(SqsError::unexpected()),
    }
}

/// StartMessageMoveTask: a move out of a dead-letter queue (to its sources, or a named queue), refused as SQS refuses it.
pub async fn start_move_task<I: Input>(cx: &impl Caller, input: &I) -> Result<Value, SqsError> {
    let source = attrs::name_of_arn(required(input, "SourceArn")?)?;
    let to = match text(input, "DestinationArn")? {
        Some(arn) => Some(attrs::name_of_arn(arn)?),
        None => None,
    };
    let rate = number(input, "MaxNumberOfMessagesPerSecond", 1, MOVE_RATE_MAX)?;
    // The errors the StartMessageMoveTask reference (and boto's model)
    // give for a source or destination that is not there:
    // ResourceNotFoundException, not QueueDoesNotExist.
    for (name, what) in [(Some(&source), "source"), (to.as_ref(), "destination")] {
        let Some(name) = name else { continue };
        wire(cx, Request::GetQueue { name: name.clone() })
            .await
            .map_err(|e| match e.kind {
                Kind::QueueDoesNotExist => SqsError::new(
                    Kind::ResourceNotFound,
                    format!("The {what} queue {name} does not exist."),
                ),
                _ => e,
            })?;
    }
    // "Only ARNs of dead-letter queues whose sources are other Amazon SQS
    // queues are accepted": a source no queue names as its dead-letter
    // target is refused as a resource that is not there (a scan of at
    // most 1 000 queues; past that it is let through).
    let (sources, more) = dead_letter_sources(cx, &source, 1, String::new()).await?;
    if sources.is_empty() && more.is_none() {
        return Err(SqsError::new(
            Kind::ResourceNotFound,
            format!("The queue {source} is not the dead-letter queue of any queue."),
        ));
    }
    if move_tasks(cx, &source)
        .await?
        .first()
        .is_some_and(|t| t.status == MoveStatus::Running.code())
    {
        return Err(SqsError::invalid(format!(
            "A message move task is already running on {source}."
        )));
    }
    let req = Request::StartMove {
        queue: source.clone(),
        to,
        max_messages: None,
        rate_per_second: rate.map(|r| r as u32),
        filter: Default::default(),
    };
    let Response::Move(task) = wire(cx, req).await? else {
        return Err(SqsError::unexpected());
    };
    Ok(json!({ "TaskHandle": task_handle(&source, task.id) }))
}

/// ListMessageMoveTasks: a dead-letter queue's move tasks, most recent first.
pub async fn list_move_tasks<I: Input>(cx: &impl Caller, input: &I) -> Result<Value, SqsError> {
    let source = attrs::name_of_arn(required(input, "SourceArn")?)?;
    let max = number(input, "MaxResults", 1, 10)?.unwrap_or(1) as usize;
    let results: Vec<Value> = move_tasks(cx, &source)
        .await?
        .into_iter()
        .take(max)
        .map(|t| {
            let status = MoveStatus::of_code(t.status).unwrap_or(MoveStatus::Failed);
            let mut out = Map::new();
            if status == MoveStatus::Running {
                out.insert(
                    "TaskHandle".into(),
                    Value::String(task_handle(&source, t.id)),
                );
            }
            out.insert("Status".into(), Value::String(status.name().into()));
            out.insert("SourceArn".into(), Value::String(attrs::queue_arn(&source)));
            if let Some(to) = &t.to {
                out.insert("DestinationArn".into(), Value::String(attrs::queue_arn(to)));
            }
            out.insert(
                "MaxNumberOfMessagesPerSecond".into(),
                json!(t.rate_per_second),
            );
            out.insert("ApproximateNumberOfMessagesMoved".into(), json!(t.moved));
            out.insert("ApproximateNumberOfMessagesToMove".into(), json!(t.to_move));
            if let Some(f) = &t.failure {
                out.insert("FailureReason".into(), Value::String(f.clone()));
            }
            out.insert("StartedTimestamp".into(), json!(t.started_at_ms));
            Value::Object(out)
        })
        .collect();
    Ok(json!({ "Results": results }))
}

/// CancelMessageMoveTask: a running task, by its handle.
pub async fn cancel_move_task<I: Input>(cx: &impl Caller, input: &I) -> Result<Value, SqsError> {
    let (queue, id) = task_of_handle(required(input, "TaskHandle")?)?;
    let running = move_tasks(cx, &queue)
        .await
        .ok()
        .and_then(|ts| ts.into_iter().find(|t| t.id == id))
        .is_some_and(|t| t.status == MoveStatus::Running.code());
    if !running {
        return Err(SqsError::new(
            Kind::ResourceNotFound,
            "The task does not exist or is not running.",
        ));
    }
    let Response::Move(task) = wire(cx, Request::CancelMove { queue, id }).await? else {
        return Err(SqsError::unexpected());
    };
    Ok(json!({ "ApproximateNumberOfMessagesMoved": task.moved }))
}
