//! One HTTP request: its body read within the limits, its sender
//! authenticated, its protocol (JSON 1.0 or query) read, the operation run,
//! the answer written as that protocol writes it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fila_sqs::{Head, Protocol, Read};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Request, Response, StatusCode};
use tracing::debug;

use super::auth::authenticate;
use super::error::{Kind, SqsError};
use super::gateway::Gateway;
use super::{actions, Common, BODIES_BYTES_MAX, BODY_BYTES_MAX, BODY_SECS};

/// The answer of error `e` as `protocol` writes it.
fn error_answer(protocol: Protocol, e: &SqsError) -> Response<Full<Bytes>> {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
    let id = fila_sqs::request_id();
    let query_error = (protocol == Protocol::Json).then(|| e.query_header());
    response(
        protocol,
        status,
        fila_sqs::error_body(protocol, e, &id),
        &id,
        query_error,
    )
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
    let head = Head {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        query: parts.uri.query().unwrap_or(""),
        headers: crate::server::headers_of(&parts),
    };
    let protocol = Protocol::of(&head.headers);
    if let Err(e) = fila_sqs::check_method(head.method, protocol) {
        return error_answer(protocol, &e);
    }
    // The body's room first: its declared length (refused at once past the
    // limit), or the most a chunked one may be.
    let declared = match parts.headers.get(hyper::header::CONTENT_LENGTH) {
        Some(v) => match v.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()) {
            Some(n) if n > BODY_BYTES_MAX as u64 => {
                return error_answer(
                    protocol,
                    &SqsError::new(
                        Kind::RequestTooLarge,
                        format!("A request body is at most {BODY_BYTES_MAX} bytes."),
                    ),
                )
            }
            Some(n) => n as usize,
            None => {
                return error_answer(
                    protocol,
                    &SqsError::invalid("Content-Length is not a number."),
                )
            }
        },
        None if parts.headers.contains_key(hyper::header::TRANSFER_ENCODING) => BODY_BYTES_MAX,
        None => 0,
    };
    let Some(_room) = common.body_room(declared) else {
        return error_answer(protocol, &SqsError::new(
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
            return error_answer(
                protocol,
                &SqsError::new(
                    Kind::RequestTooLarge,
                    format!("A request body is at most {BODY_BYTES_MAX} bytes."),
                ),
            )
        }
        Ok(Err(e)) => {
            debug!(%peer, error = %e, "SQS request body failed");
            return error_answer(
                protocol,
                &SqsError::invalid("The request body could not be read."),
            );
        }
        Err(_) => {
            return error_answer(
                protocol,
                &SqsError::new(
                    Kind::RequestExpired,
                    format!("The request body was not sent within {BODY_SECS} s."),
                ),
            )
        }
    };
    // One reload's tokens for the whole request.
    let access = gateway.shared.live.load();
    let token = match authenticate(gateway, &access, guard, &head, &body, peer) {
        Ok(t) => t,
        Err(e) => return error_answer(protocol, &e),
    };
    let host = head.headers.text("host").unwrap_or("localhost");
    let Read { operation, input } = match fila_sqs::read(&head, protocol, &body) {
        Ok(r) => r,
        Err(e) => return error_answer(protocol, &e),
    };
    let started = Instant::now();
    let context = actions::Context {
        gateway,
        tokens: &access.tokens,
        token,
        host,
    };
    let result = fila_sqs::run(&context, &operation, &input).await;
    gateway
        .shared
        .metrics
        .sqs
        .record(&operation, started.elapsed(), result.is_err());
    debug!(%peer, operation, elapsed_us = started.elapsed().as_micros() as u64, ok = result.is_ok(), "SQS request");
    match result {
        Ok(output) => {
            let id = fila_sqs::request_id();
            let body = fila_sqs::answer_body(protocol, &operation, &output, &id);
            response(protocol, StatusCode::OK, body, &id, None)
        }
        Err(e) => error_answer(protocol, &e),
    }
}

/// An answer of `protocol` with `status` and `body`.
fn response(
    protocol: Protocol,
    status: StatusCode,
    body: Vec<u8>,
    id: &str,
    query_error: Option<String>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static(protocol.content_type()),
    );
    if let Ok(id) = HeaderValue::from_str(id) {
        h.insert("x-amzn-requestid", id);
    }
    if let Some(q) = query_error.and_then(|q| HeaderValue::from_str(&q).ok()) {
        h.insert("x-amzn-query-error", q);
    }
    r
}
