//! Request bodies on any bytes, for every opcode: decoding never panics, and
//! whatever decodes encodes back to a frame that decodes to the same request.
#![no_main]

use bytes::{Bytes, BytesMut};
use fila_proto::{split_frame, FrameHeader, Request, FRAME_LEN_DEFAULT, VERSION};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&opcode, body)) = data.split_first() else {
        return;
    };
    let header = FrameHeader {
        version: VERSION,
        opcode,
        flags: 0,
        request_id: 42,
    };
    if let Ok(req) = Request::decode(&header, Bytes::copy_from_slice(body)) {
        let mut buf = BytesMut::new();
        req.encode(42, &mut buf);
        let (h, b) = split_frame(&mut buf, FRAME_LEN_DEFAULT)
            .expect("our own frame")
            .expect("a whole frame");
        assert_eq!(h.opcode, opcode);
        assert_eq!(Request::decode(&h, b).expect("round trip"), req);
    }
});
