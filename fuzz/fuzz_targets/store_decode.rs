//! The store's decoders on any bytes: a record body of any kind, or a
//! snapshot body. Decoding never panics and never allocates past the
//! input; whatever decodes is replayed (which never panics either), and a
//! snapshot that decodes encodes back to the same bytes.
#![no_main]

use fila_store::codec::{decode, decode_snapshot, encode_snapshot};
use fila_store::replay::Replay;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    if kind == 0xFF {
        if let Ok(image) = decode_snapshot(body) {
            assert_eq!(encode_snapshot(&image), body, "a snapshot round-trips");
            let mut replay = Replay::from_image(image);
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
