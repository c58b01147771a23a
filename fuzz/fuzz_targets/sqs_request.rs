//! SQS requests on any bytes: the input is read as a request line
//! (`METHOD /path?query`), header lines (`name: value`) up to an empty
//! line, and a body. Reading it, checking its signature and writing an
//! answer of its input never panic; whatever reads has a JSON object as
//! its input and a named operation. A message operation's JSON input read
//! as a borrowing `Doc` (the server's way) reads as `read`'s `Value` does,
//! and starts the operation the same way.
#![no_main]

use fila_sqs::{answer_body, error_body, messages, read, read_message, sigv4, Protocol};
use libfuzzer_sys::fuzz_target;

#[path = "shared/http_head.rs"]
mod http_head;

fuzz_target!(|data: &[u8]| {
    let Some((head_text, body)) = http_head::split(data) else {
        return;
    };
    let head = http_head::head(head_text);
    let protocol = Protocol::of(&head.headers);
    match read(&head, protocol, body) {
        Ok(r) => {
            assert!(r.input.is_object());
            assert!(!r.operation.is_empty());
            let _ = answer_body(Protocol::Query, &r.operation, &r.input, "id");
            let _ = answer_body(Protocol::Json, &r.operation, &r.input, "id");
        }
        Err(e) => {
            let _ = error_body(protocol, &e, "id");
        }
    }
    if let Some(borrowed) = read_message(&head, protocol, body) {
        let by_value = read(&head, protocol, body);
        match (borrowed, by_value) {
            (Ok((op, doc)), Ok(r)) => {
                assert_eq!(op, r.operation);
                assert_eq!(doc.to_value(), r.input);
                let a = messages::start(&op, &doc);
                let b = messages::start(&op, &r.input);
                assert_eq!(
                    format!("{:?}", a.as_ref().map(|(_, s)| s)),
                    format!("{:?}", b.as_ref().map(|(_, s)| s))
                );
            }
            (Err(a), Err(b)) => assert_eq!(a.message, b.message),
            (a, b) => panic!("borrowed {:?} but by value {:?}", a.map(|r| r.0), b.map(|r| r.operation)),
        }
    }
    let _ = sigv4::check(&head, body, 1_796_000_000, |id| {
        (id == "fila-app").then_some(((), "s3cret"))
    });
});
