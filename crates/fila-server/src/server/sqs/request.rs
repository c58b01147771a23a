//! One HTTP request: its body read within the limits, its sender
//! authenticated, its protocol (JSON 1.0 or query) read, the operation run,
//! the answer written as that protocol writes it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Method, Request, Response, StatusCode};
use tracing::debug;

use super::auth::authenticate;
use super::error::{Kind, SqsError};
use super::gateway::Gateway;
use super::{actions, query, Common, BODIES_BYTES_MAX, BODY_BYTES_MAX, BODY_SECS};

/// The protocol a request speaks: the JSON protocol names its operation
/// in `X-Amz-Target`; anything else is the query protocol.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Json,
    Query,
}

impl Protocol {
    fn of(parts: &hyper::http::request::Parts) -> Protocol {
        if parts.headers.contains_key("x-amz-target") {
            Protocol::Json
        } else {
            Protocol::Query
        }
    }

    fn error(self, e: &SqsError) -> Response<Full<Bytes>> {
        let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
        match self {
            Protocol::Json => json_response(status, error_body(e), Some(e.query_header())),
            Protocol::Query => {
                let id = request_id();
                xml_response(status, query::error(e, &id).into_bytes(), &id)
            }
        }
    }
}

/// A request id for the answer's `x-amzn-requestid` (unique per process
/// run; UUID-shaped as the SDKs log it).
fn request_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("00000000-0000-4000-8000-{n:012x}")
}

/// One HTTP request: read within the limits, authenticated, dispatched by
/// protocol, answered.
pub(super) async fn handle(
    gateway: &Gateway,
    common: &Common,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let protocol = Protocol::of(&parts);
    let get = parts.method == Method::GET && protocol == Protocol::Query;
    if parts.method != Method::POST && !get {
        return protocol.error(&SqsError::new(
            Kind::InvalidAction,
            "The SQS API takes POST requests (or GET with the query protocol).",
        ));
    }
    // The body's room first: its declared length (refused at once past the
    // limit), or the most a chunked one may be.
    let declared = match parts.headers.get(hyper::header::CONTENT_LENGTH) {
        Some(v) => match v.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()) {
            Some(n) if n > BODY_BYTES_MAX as u64 => {
                return protocol.error(&SqsError::new(
                    Kind::RequestTooLarge,
                    format!("A request body is at most {BODY_BYTES_MAX} bytes."),
                ))
            }
            Some(n) => n as usize,
            None => return protocol.error(&SqsError::invalid("Content-Length is not a number.")),
        },
        None if parts.headers.contains_key(hyper::header::TRANSFER_ENCODING) => BODY_BYTES_MAX,
        None => 0,
    };
    let Some(_room) = common.body_room(declared) else {
        return protocol.error(&SqsError::new(
            Kind::ServiceUnavailable,
            format!(
                "The server holds {BODIES_BYTES_MAX} bytes of request bodies at most, and has them now; try again."
            ),
        ));
    };
    let guard = &common.guard;
    let body = match tokio::time::timeout(
        Duration::from_secs(BODY_SECS),
        Limited::new(body, BODY_BYTES_MAX).collect(),
    )
    .await
    {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return protocol.error(&SqsError::new(
                Kind::RequestTooLarge,
                format!("A request body is at most {BODY_BYTES_MAX} bytes."),
            ))
        }
        Ok(Err(e)) => {
            debug!(%peer, error = %e, "SQS request body failed");
            return protocol.error(&SqsError::invalid("The request body could not be read."));
        }
        Err(_) => {
            return protocol.error(&SqsError::new(
                Kind::RequestExpired,
                format!("The request body was not sent within {BODY_SECS} s."),
            ))
        }
    };
    // One reload's tokens for the whole request.
    let access = gateway.shared.live.load();
    let token = match authenticate(gateway, &access, guard, &parts, &body, peer) {
        Ok(t) => t,
        Err(e) => return protocol.error(&e),
    };
    let host = parts
        .headers
        .get(hyper::header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("localhost");
    let parsed = match protocol {
        Protocol::Json => json_input(&parts, &body),
        Protocol::Query => {
            let mut params = match query::parse_form(parts.uri.query().unwrap_or("").as_bytes()) {
                Ok(p) => p,
                Err(e) => return protocol.error(&e),
            };
            if !get {
                match query::parse_form(&body) {
                    Ok(p) => params.extend(p),
                    Err(e) => return protocol.error(&e),
                }
            }
            query::input(&params, parts.uri.path())
        }
    };
    let (operation, input) = match parsed {
        Ok(p) => p,
        Err(e) => return protocol.error(&e),
    };
    let started = Instant::now();
    let context = actions::Context {
        gateway,
        tokens: &access.tokens,
        token,
        host,
    };
    let result = actions::run(&context, &operation, &input).await;
    gateway
        .shared
        .metrics
        .sqs
        .record(&operation, started.elapsed(), result.is_err());
    debug!(%peer, operation, elapsed_us = started.elapsed().as_micros() as u64, ok = result.is_ok(), "SQS request");
    match (result, protocol) {
        (Ok(output), Protocol::Json) => {
            json_response(StatusCode::OK, output.to_string().into_bytes(), None)
        }
        (Ok(output), Protocol::Query) => {
            let id = request_id();
            xml_response(
                StatusCode::OK,
                query::answer(&operation, &output, &id).into_bytes(),
                &id,
            )
        }
        (Err(e), protocol) => protocol.error(&e),
    }
}

/// The operation and input of a JSON protocol request.
fn json_input(
    parts: &hyper::http::request::Parts,
    body: &[u8],
) -> Result<(String, serde_json::Value), SqsError> {
    let target = parts
        .headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok());
    let Some(operation) = target.and_then(|t| t.strip_prefix("AmazonSQS.")) else {
        return Err(SqsError::new(
            Kind::InvalidAction,
            "The request names no operation (X-Amz-Target: AmazonSQS.<Operation>).",
        ));
    };
    let input: serde_json::Value = if body.is_empty() {
        serde_json::Value::Object(Default::default())
    } else {
        match serde_json::from_slice(body) {
            Ok(v @ serde_json::Value::Object(_)) => v,
            Ok(_) => return Err(SqsError::invalid("The request body must be a JSON object.")),
            Err(e) => {
                return Err(SqsError::invalid(format!(
                    "The request body is not valid JSON: {e}"
                )))
            }
        }
    };
    Ok((operation.to_owned(), input))
}

pub(super) fn error_body(e: &SqsError) -> Vec<u8> {
    serde_json::json!({ "__type": e.json_type(), "message": e.message })
        .to_string()
        .into_bytes()
}

fn json_response(
    status: StatusCode,
    body: Vec<u8>,
    query_error: Option<String>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-amz-json-1.0"),
    );
    if let Ok(id) = HeaderValue::from_str(&request_id()) {
        h.insert("x-amzn-requestid", id);
    }
    if let Some(q) = query_error.and_then(|q| HeaderValue::from_str(&q).ok()) {
        h.insert("x-amzn-query-error", q);
    }
    r
}

fn xml_response(status: StatusCode, body: Vec<u8>, id: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/xml"),
    );
    if let Ok(id) = HeaderValue::from_str(id) {
        h.insert("x-amzn-requestid", id);
    }
    r
}
