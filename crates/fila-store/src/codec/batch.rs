//! A batch: records one after the other, each its kind (`u8`), its body's
//! length (`u32`, big-endian) and its body. The shards' journal buffers
//! are batches, and so is a cluster's Raft entry: the records one
//! operation (or a run of them) made, applied together by every replica.

use fila_core::event::Event;

use super::{bad, encode_event, CodecError};

/// Appends `event` to the batch `out` as one record; answers its kind.
pub fn batch_push(event: &Event<'_>, out: &mut Vec<u8>) -> u8 {
    let start = out.len();
    out.extend_from_slice(&[0; 5]);
    let kind = encode_event(event, out);
    let len = u32::try_from(out.len() - start - 5).expect("a record is below 4 GiB");
    out[start] = kind;
    out[start + 1..start + 5].copy_from_slice(&len.to_be_bytes());
    kind
}

/// The records of a batch as (kind, body), in order; a batch cut short
/// ends with an error (nothing after it is read).
pub fn batch_records(data: &[u8]) -> impl Iterator<Item = Result<(u8, &[u8]), CodecError>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= data.len() {
            return None;
        }
        let head = data.get(at..at + 5);
        let Some(&[kind, a, b, c, d]) = head else {
            at = data.len();
            return Some(Err(bad("a batch record's header is cut short")));
        };
        let len = u32::from_be_bytes([a, b, c, d]) as usize;
        let Some(body) = data.get(at + 5..).and_then(|rest| rest.get(..len)) else {
            at = data.len();
            return Some(Err(bad("a batch record's body is cut short")));
        };
        at += 5 + len;
        Some(Ok((kind, body)))
    })
}
