//! The store's decoders on any bytes: a record body of any kind, or a
//! snapshot body (the first format whole, the frames of the second read as
//! a stream). Decoding never panics and never allocates past the input (a
//! frame past the limit is refused before it is read); whatever decodes is
//! replayed (which never panics either), and a snapshot of the first
//! format that decodes encodes back to the same bytes.
#![no_main]

use fila_store::codec::{decode, decode_snapshot, encode_snapshot, read_snapshot};
use fila_store::replay::Replay;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    if kind == 0xFE {
        let mut replay = Replay::default();
        if read_snapshot(&mut &body[..], &mut replay).is_ok() {
            let _ = replay.into_image();
        }
        return;
    }
    if kind == 0xFF {
        if let Ok(image) = decode_snapshot(body) {
            assert_eq!(encode_snapshot(&image), body, "a snapshot round-trips");
            let replay = Replay::from_image(image);
            let _ = replay.message_count();
        }
        return;
    }
    if let Ok(op) = decode(kind, body) {
        let mut replay = Replay::default();
        replay.apply(op.clone());
        replay.apply(op);
        let _ = replay.into_image();
    }
});
