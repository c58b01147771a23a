//! The frame decoder on any bytes, whole and fed in two pieces: it must
//! never panic, never read past its input, and find the same frames however
//! the input is cut.
#![no_main]

use bytes::BytesMut;
use fila_proto::{decode_frame, split_frame, Decoded, ProtoError, Request, Response, HEADER_LEN, LEN_PREFIX};
use libfuzzer_sys::fuzz_target;

const MAX: usize = 1 << 16;

/// Every frame in `data` fed at once, then fed cut at `cut`.
fn frames(data: &[u8], cut: usize) -> (Vec<Vec<u8>>, Option<ProtoError>) {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in [&data[..cut], &data[cut..]] {
        buf.extend_from_slice(piece);
        loop {
            match split_frame(&mut buf, MAX) {
                Ok(Some((header, body))) => {
                    out.push(body.to_vec());
                    let _ = Request::decode(&header, body.clone());
                    let _ = Response::decode(&header, body);
                }
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

fuzz_target!(|data: &[u8]| {
    match decode_frame(data, MAX) {
        Ok(Decoded::Frame { body, consumed, .. }) => {
            assert!(consumed <= data.len());
            assert_eq!(body.len() + LEN_PREFIX + HEADER_LEN, consumed);
        }
        Ok(Decoded::NeedMore(n)) => assert!(n > data.len()),
        Err(_) => {}
    }
    let cut = if data.is_empty() { 0 } else { usize::from(data[0]) % (data.len() + 1) };
    let whole = frames(data, data.len());
    let split = frames(data, cut);
    assert_eq!(whole, split, "frames do not depend on how the bytes arrive");
});
