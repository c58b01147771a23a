//! HTTP/1.1 as fila's HTTP dialects (the SQS API, and others to come)
//! share it, with no I/O: requests framed from the bytes a connection
//! read, within limits ([`Framer`]), their heads read without regard to
//! the case of header names ([`Head`], [`Headers`]), and answer heads
//! written into an output buffer ([`write_head`]).
//!
//! Whoever owns the socket appends what it read to a buffer, asks the
//! framer for progress, drains what the framer consumed, and writes
//! answers in the order their requests came (pipelining). A request's head
//! is parsed once its blank line has arrived (so a head dripped a byte at
//! a time costs one parse); its body is taken as it arrives, by
//! `Content-Length` or chunked, and held decoded.

#![forbid(unsafe_code)]

mod frame;
mod head;
#[cfg(test)]
mod tests;

pub use frame::{Framer, HttpError, Limits, Progress, Request};
pub use head::{percent_decode, reason, write_head, Head, Headers};
