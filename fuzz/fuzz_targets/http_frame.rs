//! HTTP/1.1 framing on any bytes: the first byte chooses where the rest is
//! cut into the reads a connection would make. Framing never panics, never
//! takes more than it was given, and every request it gives has a body
//! within the limit; fed whole, the same bytes give the same requests (or
//! the same refusal).
#![no_main]

use fila_http::{Framer, HttpError, Limits};
use libfuzzer_sys::fuzz_target;

const LIMITS: Limits = Limits {
    head_bytes: 2048,
    headers: 16,
    body_bytes: 4096,
};

/// The bodies and paths of the requests `input` frames into, read in
/// pieces of `step` bytes, or the error that ended it.
fn frame(input: &[u8], step: usize) -> (Vec<(String, Vec<u8>)>, Option<HttpError>) {
    let mut framer = Framer::new(LIMITS);
    let (mut buf, mut out) = (Vec::new(), Vec::new());
    for piece in input.chunks(step.max(1)) {
        buf.extend_from_slice(piece);
        loop {
            match framer.next(&buf) {
                Ok(p) => {
                    assert!(p.consumed <= buf.len());
                    buf.drain(..p.consumed);
                    let Some(r) = p.request else { break };
                    assert!(r.body.len() <= LIMITS.body_bytes);
                    out.push((r.head().path.to_owned(), r.body));
                }
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

fuzz_target!(|data: &[u8]| {
    let [step, input @ ..] = data else {
        return;
    };
    let (cut, cut_err) = frame(input, usize::from(*step % 64) + 1);
    let (whole, whole_err) = frame(input, input.len());
    // Fed whole, a request the pieces framed before an error may be
    // refused with that error; otherwise both agree.
    match (&cut_err, &whole_err) {
        (None, None) => assert_eq!(cut, whole),
        (Some(a), Some(b)) => {
            assert_eq!(a.status(), b.status());
            assert_eq!(cut, whole);
        }
        _ => {}
    }
});
