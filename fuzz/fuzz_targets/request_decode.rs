//! Request bodies on any bytes, for every opcode and every protocol version
//! spoken: decoding never panics, and whatever decodes encodes back (in the
//! newest version) to a frame that decodes to the same request.
#![no_main]

use bytes::{Bytes, BytesMut};
use fila_proto::{split_frame, FrameHeader, Request, FRAME_LEN_DEFAULT, OLDEST_VERSION, VERSION};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [pick, opcode, body @ ..] = data else {
        return;
    };
    let opcode = *opcode;
    let version = OLDEST_VERSION + pick % (VERSION - OLDEST_VERSION + 1);
    let header = FrameHeader {
        version,
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
