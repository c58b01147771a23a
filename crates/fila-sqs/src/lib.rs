//! The SQS dialect of fila, with no I/O: what the SQS API's requests and
//! answers are, apart from how they travel.
//!
//! This crate owns, for a request whose head and body have arrived whole:
//! which of the two protocols it speaks (AWS JSON 1.0 or the query
//! protocol) and its operation and input ([`read`]); its SigV4 signature
//! ([`sigv4`]); queue URLs, ARNs, message ids, receipt handles, message
//! attributes and their MD5 digests ([`attrs`]); the form encoding and the
//! query protocol's XML answers ([`query`]); the API's errors with their
//! codes, types and statuses ([`error`]); parameters ([`params`]); FIFO
//! rules ([`fifo`]); every operation ([`run`]: the message operations as
//! steps of fila requests and answers, [`messages`]; the queue operations
//! and move tasks as `async fn`s over a [`Caller`], [`queues`], [`moves`]),
//! which the server runs by answering their fila requests; and the bodies
//! of answers ([`answer_body`], [`error_body`]). Heads and bodies are framed by
//! `fila-http` ([`Head`] is its); the server (`fila-server`) owns the
//! sockets, the limits on what a connection may send, and running the
//! operations against the engine; docs/sqs.md is the user's reference.

#![forbid(unsafe_code)]

pub mod attrs;
pub mod error;
pub mod fifo;
#[cfg(test)]
mod hostile_input;
pub mod input;
pub mod messages;
pub mod moves;
pub mod params;
pub mod query;
pub mod queues;
pub mod sigv4;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

pub use fila_http::{Head, Headers};
use fila_proto::{Request, Response};
pub use input::{Doc, Input};
pub use messages::Answer;
use serde_json::Value;

use error::{Kind, SqsError};

/// The protocol a request speaks: the JSON protocol names its operation
/// in `X-Amz-Target`; anything else is the query protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// AWS JSON 1.0 (`POST /`, `X-Amz-Target: AmazonSQS.<Operation>`).
    Json,
    /// The query protocol (a form in the body or the query string).
    Query,
}

impl Protocol {
    /// The protocol of a request with `headers`.
    pub fn of(headers: &Headers<'_>) -> Protocol {
        if headers.contains("x-amz-target") {
            Protocol::Json
        } else {
            Protocol::Query
        }
    }

    /// The `content-type` of its answers.
    pub fn content_type(self) -> &'static str {
        match self {
            Protocol::Json => "application/x-amz-json-1.0",
            Protocol::Query => "text/xml",
        }
    }
}

/// Whether a request of `protocol` may use `method`: the API takes POST,
/// and GET with the query protocol (checked before its body is read).
pub fn check_method(method: &str, protocol: Protocol) -> Result<(), SqsError> {
    if method == "POST" || (method == "GET" && protocol == Protocol::Query) {
        Ok(())
    } else {
        Err(SqsError::new(
            Kind::InvalidAction,
            "The SQS API takes POST requests (or GET with the query protocol).",
        ))
    }
}

/// A request read: its operation and its input as the JSON protocol's (a
/// query request's form made into the same shape).
#[derive(Debug)]
pub struct Read {
    /// The operation's name (`SendMessage`, ...).
    pub operation: String,
    /// Its input, a JSON object.
    pub input: Value,
}

/// Reads a whole request of `protocol`: its operation and input.
pub fn read(head: &Head<'_>, protocol: Protocol, body: &[u8]) -> Result<Read, SqsError> {
    check_method(head.method, protocol)?;
    let (operation, input) = match protocol {
        Protocol::Json => json_input(&head.headers, body)?,
        Protocol::Query => {
            let mut params = query::parse_form(head.query.as_bytes())?;
            if head.method != "GET" {
                params.extend(query::parse_form(body)?);
            }
            query::input(&params, head.path)?
        }
    };
    Ok(Read { operation, input })
}

/// [`read`] for a JSON protocol request of a message operation
/// ([`messages::OPERATIONS`]): its input as a [`Doc`] whose text borrows
/// from the body, for [`messages::start`] (no `Value` tree, no `String` per
/// field). `None` for any other request: read it with [`read`].
pub fn read_message<'a>(
    head: &Head<'_>,
    protocol: Protocol,
    body: &'a [u8],
) -> Option<Result<(String, Doc<'a>), SqsError>> {
    if protocol != Protocol::Json {
        return None;
    }
    let operation = json_operation(&head.headers).ok()?;
    if !messages::OPERATIONS.contains(&operation) {
        return None;
    }
    let read = check_method(head.method, protocol)
        .and_then(|()| Ok((operation.to_owned(), json_doc(body)?)));
    Some(read)
}

/// A JSON protocol request's body as a [`Doc`] borrowing from it (an
/// empty body is an empty object); an error when it is not a JSON
/// object, as [`read`] answers it.
pub fn json_doc(body: &[u8]) -> Result<Doc<'_>, SqsError> {
    if body.is_empty() {
        return Ok(Doc::Object(Vec::new()));
    }
    match Doc::parse(body) {
        Ok(d @ Doc::Object(_)) => Ok(d),
        Ok(_) => Err(not_an_object()),
        Err(e) => Err(not_json(&e)),
    }
}

/// The operation a JSON protocol request names (`X-Amz-Target`).
pub fn json_operation<'h>(headers: &Headers<'h>) -> Result<&'h str, SqsError> {
    let target = headers.text("x-amz-target");
    let operation = target.and_then(|t| t.strip_prefix("AmazonSQS."));
    operation.filter(|op| !op.is_empty()).ok_or_else(|| {
        SqsError::new(
            Kind::InvalidAction,
            "The request names no operation (X-Amz-Target: AmazonSQS.<Operation>).",
        )
    })
}

fn not_an_object() -> SqsError {
    SqsError::invalid("The request body must be a JSON object.")
}

fn not_json(e: &serde_json::Error) -> SqsError {
    SqsError::invalid(format!("The request body is not valid JSON: {e}"))
}

/// The operation and input of a JSON protocol request.
fn json_input(headers: &Headers<'_>, body: &[u8]) -> Result<(String, Value), SqsError> {
    let operation = json_operation(headers)?;
    let input: Value = if body.is_empty() {
        Value::Object(Default::default())
    } else {
        match serde_json::from_slice(body) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => return Err(not_an_object()),
            Err(e) => return Err(not_json(&e)),
        }
    };
    Ok((operation.to_owned(), input))
}

/// What runs an operation's fila requests: the server, for the client that
/// sent the SQS request (each request checked against its grants first).
pub trait Caller {
    /// Runs `request` (a receive's answer within `room` bytes of
    /// messages); an error is the SQS error that ends the operation (its
    /// grants refuse it, the server is stopping).
    fn call(&self, request: Request, room: usize)
        -> impl Future<Output = Result<Answer, SqsError>>;
    /// The host the request was sent to (queue URLs name it).
    fn host(&self) -> &str;
    /// Takes note of a purge of `queue` about to start, or refuses it
    /// (`PurgeQueueInProgress`) when one started within the last minute,
    /// as SQS does.
    fn begin_purge(&self, queue: &str) -> Result<(), SqsError>;
    /// Forgets a purge of `queue` that failed.
    fn forget_purge(&self, queue: &str);
}

/// Runs `request`, whose answer is a wire response; an error answer is
/// the SQS error it maps to.
pub(crate) async fn wire(cx: &impl Caller, request: Request) -> Result<Response, SqsError> {
    match cx.call(request, 0).await? {
        Answer::Wire(Response::Error(e)) => Err(SqsError::of_wire(&e)),
        Answer::Wire(r) => Ok(r),
        _ => Err(SqsError::unexpected()),
    }
}

/// Runs SQS operation `op` with its input (as [`read`] gives it): its
/// parameters checked as SQS checks them, its fila requests run by `cx`,
/// its output as the JSON protocol's object. docs/sqs.md lists what
/// differs from SQS.
pub async fn run<I: Input>(cx: &impl Caller, op: &str, input: &I) -> Result<Value, SqsError> {
    use moves::{cancel_move_task, list_move_tasks, start_move_task};
    use queues::{
        create_queue, delete_queue, get_queue_attributes, get_queue_url,
        list_dead_letter_source_queues, list_queue_tags, list_queues, purge_queue,
        set_queue_attributes, tag_queue, untag_queue,
    };
    match op {
        "CreateQueue" => create_queue(cx, input).await,
        "GetQueueUrl" => get_queue_url(cx, input).await,
        "ListQueues" => list_queues(cx, input).await,
        "DeleteQueue" => delete_queue(cx, input).await,
        "PurgeQueue" => purge_queue(cx, input).await,
        "GetQueueAttributes" => get_queue_attributes(cx, input).await,
        "SetQueueAttributes" => set_queue_attributes(cx, input).await,
        op if messages::OPERATIONS.contains(&op) => messages::run(cx, op, input).await,
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

/// A request id for an answer's `x-amzn-requestid` (unique per process
/// run; UUID-shaped as the SDKs log it).
pub fn request_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("00000000-0000-4000-8000-{n:012x}")
}

/// The body of operation `op`'s answer `output`, as `protocol` writes it
/// (`request_id` goes into the query protocol's XML).
pub fn answer_body(protocol: Protocol, op: &str, output: &Value, request_id: &str) -> Vec<u8> {
    match protocol {
        Protocol::Json => output.to_string().into_bytes(),
        Protocol::Query => query::answer(op, output, request_id).into_bytes(),
    }
}

/// The body of a message operation's answer, as `protocol` writes it:
/// JSON straight from the typed output, the query protocol's XML through
/// a `Value`.
pub fn output_body(
    protocol: Protocol,
    op: &str,
    output: &messages::Output,
    request_id: &str,
) -> Vec<u8> {
    let mut out = Vec::new();
    write_output(protocol, op, output, request_id, &mut out);
    out
}

/// [`output_body`], appended to `out`.
pub fn write_output(
    protocol: Protocol,
    op: &str,
    output: &messages::Output,
    request_id: &str,
    out: &mut Vec<u8>,
) {
    match protocol {
        Protocol::Json => output.write_json(out),
        Protocol::Query => {
            out.extend_from_slice(query::answer(op, &output.to_value(), request_id).as_bytes())
        }
    }
}

/// The body of error `e`'s answer, as `protocol` writes it.
pub fn error_body(protocol: Protocol, e: &SqsError, request_id: &str) -> Vec<u8> {
    match protocol {
        Protocol::Json => serde_json::json!({ "__type": e.json_type(), "message": e.message })
            .to_string()
            .into_bytes(),
        Protocol::Query => query::error(e, request_id).into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head<'a>(method: &'a str, target: &'a str, headers: &[(&'a str, &'a str)]) -> Head<'a> {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        Head {
            method,
            path,
            query,
            headers: Headers::new(headers.iter().map(|(n, v)| (*n, v.as_bytes())).collect()),
        }
    }

    #[test]
    fn the_protocol_is_json_when_a_target_is_named() {
        let h = head("POST", "/", &[("X-Amz-Target", "a")]);
        assert_eq!(Protocol::of(&h.headers), Protocol::Json);
        assert_eq!(
            Protocol::of(&head("POST", "/", &[]).headers),
            Protocol::Query
        );
    }

    #[test]
    fn a_json_request_reads_to_its_operation_and_object() {
        let h = head("POST", "/", &[("x-amz-target", "AmazonSQS.SendMessage")]);
        let r = read(
            &h,
            Protocol::of(&h.headers),
            br#"{"QueueUrl":"u","MessageBody":"hi"}"#,
        )
        .unwrap();
        assert_eq!(r.operation, "SendMessage");
        assert_eq!(r.input["MessageBody"], "hi");
        // An empty body is an empty input.
        let r = read(&h, Protocol::Json, b"").unwrap();
        assert_eq!(r.input, serde_json::json!({}));
        for (body, what) in [
            (&b"[1]"[..], "must be a JSON object"),
            (b"{", "not valid JSON"),
        ] {
            let e = read(&h, Protocol::Json, body).unwrap_err();
            assert_eq!(e.kind, Kind::InvalidParameterValue);
            assert!(e.message.contains(what), "{}", e.message);
        }
        for target in ["AmazonSQS.", "Other.SendMessage"] {
            let h = head("POST", "/", &[("x-amz-target", target)]);
            assert_eq!(
                read(&h, Protocol::Json, b"{}").unwrap_err().kind,
                Kind::InvalidAction
            );
        }
    }

    #[test]
    fn a_query_request_reads_from_its_query_string_and_its_form() {
        let h = head("POST", "/000000000000/jobs?Action=SendMessage", &[]);
        let r = read(&h, Protocol::of(&h.headers), b"MessageBody=a+b%21").unwrap();
        assert_eq!(r.operation, "SendMessage");
        assert_eq!(r.input["MessageBody"], "a b!");
        assert!(r.input["QueueUrl"].as_str().unwrap().ends_with("/jobs"));
        // A GET's body is not read.
        let h = head("GET", "/?Action=ListQueues", &[]);
        let r = read(&h, Protocol::Query, b"Action=DeleteQueue").unwrap();
        assert_eq!(r.operation, "ListQueues");
        let h = head("POST", "/", &[]);
        assert_eq!(
            read(&h, Protocol::Query, b"QueueUrl=u").unwrap_err().kind,
            Kind::MissingAction
        );
    }

    #[test]
    fn methods_other_than_post_and_a_query_get_are_refused() {
        assert!(check_method("POST", Protocol::Json).is_ok());
        assert!(check_method("GET", Protocol::Query).is_ok());
        for (m, p) in [
            ("GET", Protocol::Json),
            ("PUT", Protocol::Query),
            ("DELETE", Protocol::Json),
        ] {
            assert_eq!(check_method(m, p).unwrap_err().kind, Kind::InvalidAction);
        }
        let h = head("PUT", "/?Action=ListQueues", &[]);
        assert_eq!(
            read(&h, Protocol::Query, b"").unwrap_err().kind,
            Kind::InvalidAction
        );
    }

    #[test]
    fn answers_and_errors_are_written_as_their_protocol_writes_them() {
        let out = serde_json::json!({"QueueUrl": "http://h/000000000000/q"});
        let json = answer_body(Protocol::Json, "GetQueueUrl", &out, "id-1");
        assert_eq!(serde_json::from_slice::<Value>(&json).unwrap(), out);
        let xml =
            String::from_utf8(answer_body(Protocol::Query, "GetQueueUrl", &out, "id-1")).unwrap();
        assert!(
            xml.contains("<GetQueueUrlResult><QueueUrl>http://h/000000000000/q</QueueUrl>"),
            "{xml}"
        );
        assert!(xml.contains("<RequestId>id-1</RequestId>"), "{xml}");
        let e = SqsError::new(Kind::QueueDoesNotExist, "no <such> queue");
        let body: Value = serde_json::from_slice(&error_body(Protocol::Json, &e, "id-2")).unwrap();
        assert_eq!(body["__type"], "com.amazonaws.sqs#QueueDoesNotExist");
        assert_eq!(body["message"], "no <such> queue");
        let xml = String::from_utf8(error_body(Protocol::Query, &e, "id-2")).unwrap();
        assert!(
            xml.contains("<Code>AWS.SimpleQueueService.NonExistentQueue</Code>"),
            "{xml}"
        );
        assert!(xml.contains("no &lt;such&gt; queue"), "{xml}");
        assert_ne!(request_id(), request_id());
    }
    /// A caller that answers from a script and keeps what it was asked.
    struct Script {
        answers: std::cell::RefCell<std::collections::VecDeque<Answer>>,
        asked: std::cell::RefCell<Vec<Request>>,
        purging: std::cell::Cell<bool>,
    }

    impl Script {
        fn new(answers: Vec<Response>) -> Script {
            Script {
                answers: std::cell::RefCell::new(answers.into_iter().map(Answer::Wire).collect()),
                asked: Default::default(),
                purging: Default::default(),
            }
        }
    }

    impl Caller for Script {
        async fn call(&self, request: Request, _room: usize) -> Result<Answer, SqsError> {
            self.asked.borrow_mut().push(request);
            self.answers
                .borrow_mut()
                .pop_front()
                .ok_or_else(SqsError::unexpected)
        }
        fn host(&self) -> &str {
            "h:9324"
        }
        fn begin_purge(&self, _: &str) -> Result<(), SqsError> {
            if self.purging.replace(true) {
                return Err(SqsError::new(Kind::PurgeQueueInProgress, "again"));
            }
            Ok(())
        }
        fn forget_purge(&self, _: &str) {
            self.purging.set(false);
        }
    }

    /// Runs a future whose every wait is already over (the script's).
    fn now<F: Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("a scripted call never waits"),
        }
    }

    fn missing_queue() -> Response {
        Response::Error(fila_proto::WireError {
            code: fila_proto::ErrorCode::QUEUE_NOT_FOUND,
            message: "no such queue".into(),
        })
    }

    #[test]
    fn an_operation_runs_its_requests_through_the_caller_in_order() {
        // A dead-letter target is looked up before the queue is made.
        let cx = Script::new(vec![missing_queue()]);
        let input = serde_json::json!({"QueueName": "jobs", "Attributes": {
            "RedrivePolicy": "{\"deadLetterTargetArn\":\"arn:aws:sqs:us-east-1:000000000000:dlq\",\"maxReceiveCount\":3}"}});
        let e = now(run(&cx, "CreateQueue", &input)).unwrap_err();
        assert!(
            e.message.contains("Dead letter target does not exist"),
            "{}",
            e.message
        );
        assert!(matches!(&cx.asked.borrow()[..], [Request::GetQueue { name }] if name == "dlq"));
        // Found, it is made, and the answer names this host.
        let cx = Script::new(vec![
            Response::Queue(Box::default()),
            Response::Created(true),
        ]);
        let out = now(run(&cx, "CreateQueue", &input)).unwrap();
        assert_eq!(out["QueueUrl"], "http://h:9324/000000000000/jobs");
        assert!(
            matches!(&cx.asked.borrow()[1], Request::CreateQueue { name, .. } if name == "jobs")
        );
    }

    #[test]
    fn an_operation_reads_a_borrowed_doc_as_it_reads_a_value() {
        let q = "http://h/000000000000/jobs";
        let cases: Vec<(&str, Value, Vec<Response>)> = vec![
            (
                "CreateQueue",
                serde_json::json!({"QueueName": "jobs", "Attributes": {"VisibilityTimeout": "45",
                    "DelaySeconds": 3, "MaximumMessageSize": "x"}, "tags": {"team": "a"}}),
                vec![Response::Created(true)],
            ),
            (
                "CreateQueue",
                serde_json::json!({"QueueName": "jobs", "Attributes": {"VisibilityTimeout": "45"},
                    "tags": {"team": "a", "env": "b\"q"}}),
                vec![Response::Created(true)],
            ),
            (
                "SetQueueAttributes",
                serde_json::json!({"QueueUrl": q, "Attributes": {"ReceiveMessageWaitTimeSeconds": "20"}}),
                vec![Response::Ok],
            ),
            (
                "TagQueue",
                serde_json::json!({"QueueUrl": q, "Tags": {"a": "1", "b": 2}}),
                vec![Response::Ok],
            ),
            (
                "ListQueues",
                serde_json::json!({"QueueNamePrefix": "jo", "MaxResults": 1001}),
                vec![],
            ),
            (
                "UntagQueue",
                serde_json::json!({"QueueUrl": q, "TagKeys": ["a", 1]}),
                vec![],
            ),
        ];
        for (op, input, answers) in cases {
            let body = serde_json::to_vec(&input).unwrap();
            let doc = json_doc(&body).unwrap();
            let (a, b) = (Script::new(answers.clone()), Script::new(answers));
            let by_value = now(run(&a, op, &input));
            let by_doc = now(run(&b, op, &doc));
            assert_eq!(
                format!("{by_value:?}"),
                format!("{by_doc:?}"),
                "{op} {input}"
            );
            assert_eq!(
                format!("{:?}", a.asked.borrow()),
                format!("{:?}", b.asked.borrow())
            );
        }
    }

    #[test]
    fn a_purge_is_refused_within_a_minute_of_the_last_and_forgotten_when_it_fails() {
        let input = serde_json::json!({"QueueUrl": "http://h/000000000000/jobs"});
        let cx = Script::new(vec![missing_queue(), Response::Ok]);
        assert_eq!(
            now(run(&cx, "PurgeQueue", &input)).unwrap_err().kind,
            Kind::QueueDoesNotExist
        );
        assert!(now(run(&cx, "PurgeQueue", &input)).is_ok());
        assert_eq!(
            now(run(&cx, "PurgeQueue", &input)).unwrap_err().kind,
            Kind::PurgeQueueInProgress
        );
        assert_eq!(cx.asked.borrow().len(), 2);
    }

    #[test]
    fn unknown_and_unsupported_operations_ask_nothing() {
        let cx = Script::new(vec![]);
        let input = serde_json::json!({});
        assert_eq!(
            now(run(&cx, "Nope", &input)).unwrap_err().kind,
            Kind::InvalidAction
        );
        assert_eq!(
            now(run(&cx, "AddPermission", &input)).unwrap_err().kind,
            Kind::UnsupportedOperation
        );
        assert!(cx.asked.borrow().is_empty());
    }
}
