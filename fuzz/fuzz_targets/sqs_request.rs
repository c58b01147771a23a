//! SQS requests on any bytes: the input is read as a request line
//! (`METHOD /path?query`), header lines (`name: value`) up to an empty
//! line, and a body. Reading it, checking its signature and writing an
//! answer of its input never panic; whatever reads has a JSON object as
//! its input and a named operation.
#![no_main]

use fila_sqs::{answer_body, error_body, read, sigv4, Head, Headers, Protocol};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (head_bytes, body) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (data, &[][..]),
    };
    let Ok(head_text) = std::str::from_utf8(head_bytes) else {
        return;
    };
    let mut lines = head_text.split('\n');
    let first = lines.next().unwrap_or("");
    let (method, target) = first.split_once(' ').unwrap_or((first, "/"));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let pairs = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim(), v.trim().as_bytes()))
        .collect();
    let head = Head {
        method,
        path,
        query,
        headers: Headers::new(pairs),
    };
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
    let _ = sigv4::check(&head, body, 1_796_000_000, |id| {
        (id == "fila-app").then_some(((), "s3cret"))
    });
});
