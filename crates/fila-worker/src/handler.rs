//! What a handler is: an async function whose arguments are taken from the
//! message (extractors, the way axum takes them from a request) and whose
//! result says success, with messages to put, or failure.
//!
//! ```
//! use fila_worker::{Delivery, HandlerError, Json, Outputs};
//!
//! #[derive(serde::Deserialize)]
//! struct Resize { width: u32 }
//!
//! async fn resize(msg: Delivery, Json(job): Json<Resize>) -> Result<Outputs, HandlerError> {
//!     let mut out = Outputs::new();
//!     out.push("thumbnails", format!("{} resized to {}", msg.id_hex(), job.width));
//!     Ok(out)
//! }
//! ```

use std::fmt::Display;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use fila_client::{PutEntry, Receipt};
use serde::de::DeserializeOwned;

/// A message as a handler gets it: its payload (decoded from base64 first
/// when the queue's settings say so) and its metadata.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// The queue it came from.
    pub queue: Arc<str>,
    /// Unique on the server.
    pub id: u128,
    /// Sequence number in its queue.
    pub seq: u64,
    /// Deliveries so far, this one included.
    pub dequeue_count: u32,
    /// When it was put.
    pub inserted_at: SystemTime,
    /// When it expires.
    pub expires_at: SystemTime,
    /// When its lease ends if not renewed (the runtime renews it while the
    /// handler runs).
    pub next_visible_at: SystemTime,
    /// The lease's receipt (the runtime deletes or releases with it; a
    /// handler need not).
    pub receipt: Receipt,
    /// Key/value pairs.
    pub attributes: Vec<(String, String)>,
    /// The channel.
    pub channel: Option<String>,
    /// Its message group: the runtime runs one message of a group at a
    /// time on this host (and the server leases one at a time).
    pub group: Option<String>,
    /// Its priority level (1 when its queue has none).
    pub priority: u8,
    /// The body.
    pub payload: Bytes,
}

impl Delivery {
    /// The id as 32 hex digits, as the CLI prints it.
    pub fn id_hex(&self) -> String {
        format!("{:032x}", self.id)
    }

    /// An attribute's value.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

pub(crate) fn time_of(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// Why a message could not become a handler's arguments. The message goes
/// to the poison queue at once with this text: retrying would not help.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DecodeError(pub String);

/// A handler argument taken from the message.
pub trait FromDelivery: Sized + Send + 'static {
    /// The argument, or why the message cannot give it.
    fn from_delivery(d: &Delivery) -> Result<Self, DecodeError>;
}

impl FromDelivery for Delivery {
    fn from_delivery(d: &Delivery) -> Result<Self, DecodeError> {
        Ok(d.clone())
    }
}

impl FromDelivery for Bytes {
    fn from_delivery(d: &Delivery) -> Result<Self, DecodeError> {
        Ok(d.payload.clone())
    }
}

impl FromDelivery for String {
    fn from_delivery(d: &Delivery) -> Result<Self, DecodeError> {
        std::str::from_utf8(&d.payload)
            .map(str::to_owned)
            .map_err(|e| DecodeError(format!("the payload is not UTF-8: {e}")))
    }
}

/// The payload decoded from JSON into `T`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Json<T>(pub T);

impl<T: DeserializeOwned + Send + 'static> FromDelivery for Json<T> {
    fn from_delivery(d: &Delivery) -> Result<Self, DecodeError> {
        serde_json::from_slice(&d.payload)
            .map(Json)
            .map_err(|e| DecodeError(format!("the payload is not the JSON expected: {e}")))
    }
}

/// Messages a handler asks to put when it succeeds: they are put before
/// its message is deleted, each with the attribute `fila-input-id` (the
/// input's id in hex) and a deduplication id made of the input's id and
/// the output's place (unless the entry names its own), so a handler run
/// again after a crash between the two — its input back after its lease —
/// stores no output twice within the target queue's dedup window.
#[derive(Clone, Debug, Default)]
pub struct Outputs {
    pub(crate) items: Vec<(String, PutEntry)>,
}

/// The attribute every output carries: the id of the message that made it.
pub const INPUT_ID_ATTRIBUTE: &str = "fila-input-id";

impl Outputs {
    /// None yet.
    pub fn new() -> Outputs {
        Outputs::default()
    }

    /// A payload for `queue`.
    pub fn push(&mut self, queue: impl Into<String>, payload: impl Into<Bytes>) -> &mut Self {
        self.push_entry(
            queue,
            PutEntry {
                payload: payload.into(),
                ..PutEntry::default()
            },
        )
    }

    /// `value` as JSON for `queue`.
    pub fn push_json<T: serde::Serialize>(
        &mut self,
        queue: impl Into<String>,
        value: &T,
    ) -> Result<&mut Self, HandlerError> {
        let json = serde_json::to_vec(value).map_err(HandlerError::from)?;
        Ok(self.push(queue, json))
    }

    /// A whole entry (attributes, channel, delay) for `queue`.
    pub fn push_entry(&mut self, queue: impl Into<String>, entry: PutEntry) -> &mut Self {
        self.items.push((queue.into(), entry));
        self
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// What a successful handler may return.
pub trait IntoOutputs {
    /// The messages to put.
    fn into_outputs(self) -> Outputs;
}

impl IntoOutputs for () {
    fn into_outputs(self) -> Outputs {
        Outputs::new()
    }
}

impl IntoOutputs for Outputs {
    fn into_outputs(self) -> Outputs {
        self
    }
}

/// A handler's failure: any error converts into it with `?`. Its text
/// becomes the dead-letter description when the message goes to the poison
/// queue.
#[derive(Debug)]
pub struct HandlerError(String);

impl HandlerError {
    /// A failure with this text.
    pub fn msg(text: impl Display) -> HandlerError {
        HandlerError(text.to_string())
    }
}

impl Display for HandlerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl<E: std::error::Error> From<E> for HandlerError {
    fn from(e: E) -> HandlerError {
        HandlerError(e.to_string())
    }
}

/// How a run of a handler ended, for the runtime (not nameable outside
/// this crate: `Handler` is implemented for functions only).
#[doc(hidden)]
pub enum Failure {
    /// The message could not become the handler's arguments.
    Decode(String),
    /// The handler failed with this text.
    Handler(String),
}

#[doc(hidden)]
pub type Run = Pin<Box<dyn Future<Output = Result<Outputs, Failure>> + Send>>;

/// An async function the runtime can call for a message: `Fn(A) -> Fut`
/// or `Fn(A, B) -> Fut` where every argument is [`FromDelivery`] and `Fut`
/// resolves to `Result<O, E>` with `O` [`IntoOutputs`] (`()` or
/// [`Outputs`]) and `E` any `Display` ([`HandlerError`], `String`, an
/// `anyhow::Error` ...). `Args` only tells the implementations apart.
pub trait Handler<Args>: Clone + Send + Sync + 'static {
    /// Runs the handler for `d`.
    #[doc(hidden)]
    fn call(&self, d: Delivery) -> Run;
}

fn finish<O: IntoOutputs, E: Display>(r: Result<O, E>) -> Result<Outputs, Failure> {
    r.map(IntoOutputs::into_outputs)
        .map_err(|e| Failure::Handler(e.to_string()))
}

impl<F, Fut, O, E, A> Handler<(A,)> for F
where
    F: Fn(A) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<O, E>> + Send + 'static,
    O: IntoOutputs,
    E: Display,
    A: FromDelivery,
{
    fn call(&self, d: Delivery) -> Run {
        match A::from_delivery(&d) {
            Ok(a) => {
                let fut = self(a);
                Box::pin(async move { finish(fut.await) })
            }
            Err(e) => Box::pin(async move { Err(Failure::Decode(e.0)) }),
        }
    }
}

impl<F, Fut, O, E, A, B> Handler<(A, B)> for F
where
    F: Fn(A, B) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<O, E>> + Send + 'static,
    O: IntoOutputs,
    E: Display,
    A: FromDelivery,
    B: FromDelivery,
{
    fn call(&self, d: Delivery) -> Run {
        match (A::from_delivery(&d), B::from_delivery(&d)) {
            (Ok(a), Ok(b)) => {
                let fut = self(a, b);
                Box::pin(async move { finish(fut.await) })
            }
            (Err(e), _) | (_, Err(e)) => Box::pin(async move { Err(Failure::Decode(e.0)) }),
        }
    }
}

/// A handler with its argument types forgotten, for the runtime.
pub(crate) trait Erased: Send + Sync {
    fn call(&self, d: Delivery) -> Run;
}

pub(crate) struct Typed<H, Args>(pub(crate) H, pub(crate) PhantomData<fn(Args)>);

impl<H: Handler<Args>, Args> Erased for Typed<H, Args> {
    fn call(&self, d: Delivery) -> Run {
        self.0.call(d)
    }
}

/// Decodes standard base64 (padding optional, whitespace not allowed).
pub(crate) fn base64_decode(text: &[u8]) -> Result<Bytes, DecodeError> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let body = text
        .strip_suffix(b"==")
        .or_else(|| text.strip_suffix(b"="))
        .unwrap_or(text);
    if body.len() % 4 == 1 {
        return Err(DecodeError("the payload is not base64: bad length".into()));
    }
    let mut out = Vec::with_capacity(body.len() * 3 / 4);
    for chunk in body.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            let v = value(c)
                .ok_or_else(|| DecodeError(format!("the payload is not base64: byte {c:#04x}")))?;
            acc |= v << (18 - 6 * i);
        }
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_with_and_without_padding_and_refuses_garbage() {
        assert_eq!(&base64_decode(b"aGVsbG8=").unwrap()[..], b"hello");
        assert_eq!(&base64_decode(b"aGVsbG8").unwrap()[..], b"hello");
        assert_eq!(&base64_decode(b"aGk=").unwrap()[..], b"hi");
        assert_eq!(&base64_decode(b"").unwrap()[..], b"");
        assert!(base64_decode(b"aGVs*G8=").is_err());
        assert!(base64_decode(b"a").is_err());
    }
}
