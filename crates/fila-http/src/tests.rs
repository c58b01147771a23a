use proptest::prelude::*;

use crate::*;

const LIMITS: Limits = Limits {
    head_bytes: 1024,
    headers: 8,
    body_bytes: 4096,
};

/// Every request `input` frames into when fed in pieces cut at `cuts`, and
/// the bytes left over.
fn frame(input: &[u8], cuts: &[usize]) -> Result<(Vec<Request>, usize), HttpError> {
    let mut framer = Framer::new(LIMITS);
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut fed = 0;
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    points.push(input.len());
    points.sort_unstable();
    for to in points {
        buf.extend_from_slice(&input[fed..to.max(fed)]);
        fed = to.max(fed);
        loop {
            let p = framer.next(&buf)?;
            buf.drain(..p.consumed);
            let Some(r) = p.request else { break };
            out.push(r);
        }
    }
    Ok((out, buf.len()))
}

fn whole(input: &[u8]) -> Vec<Request> {
    let (requests, left) = frame(input, &[]).unwrap();
    assert_eq!(left, 0);
    requests
}

#[test]
fn headers_are_found_without_regard_to_case_and_in_order() {
    let h = Headers::new(vec![("X-Amz-Target", b"a"), ("x-amz-target", b"b")]);
    assert_eq!(h.text("x-AMZ-target"), Some("a"));
    assert_eq!(h.get_all("X-AMZ-TARGET").collect::<Vec<_>>(), [b"a", b"b"]);
    assert!(!h.contains("host"));
}

#[test]
fn a_request_with_a_length_is_framed_with_its_head() {
    let r = whole(b"POST /q/jobs?Action=SendMessage&x=1 HTTP/1.1\r\nHost: h\r\nX-Amz-Target: T\r\nContent-Length: 5\r\n\r\nhello");
    let [r] = &r[..] else { panic!("one request") };
    let head = r.head();
    assert_eq!(head.method, "POST");
    assert_eq!(head.path, "/q/jobs");
    assert_eq!(head.query, "Action=SendMessage&x=1");
    assert_eq!(head.headers.text("x-amz-target"), Some("T"));
    assert_eq!(head.headers.iter().count(), 3);
    assert_eq!(r.body, b"hello");
    assert!(r.keep_alive);
    assert_eq!(r.minor_version, 1);
}

#[test]
fn a_body_in_progress_is_bounded_by_its_length_or_the_limit() {
    let mut framer = Framer::new(LIMITS);
    assert_eq!(framer.body_bound(), None);
    let p = framer
        .next(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
        .unwrap();
    assert!(p.request.is_none());
    assert_eq!(framer.body_bound(), Some(10));
    let p = framer.next(b"defghij").unwrap();
    assert!(p.request.is_some());
    assert_eq!(framer.body_bound(), None);
    framer
        .next(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        .unwrap();
    assert_eq!(framer.body_bound(), Some(LIMITS.body_bytes));
}

#[test]
fn a_lent_buffer_takes_the_next_body_emptied() {
    let mut framer = Framer::new(LIMITS);
    let mut spare = Vec::with_capacity(512);
    spare.extend_from_slice(b"old bytes");
    let at = spare.as_ptr();
    let p = framer
        .next_with(
            b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
            &mut spare,
        )
        .unwrap();
    let body = p.request.expect("a request").body;
    assert_eq!(body, b"hello");
    assert_eq!(body.as_ptr(), at, "the lent buffer holds the body");
    assert!(spare.is_empty());
    // A request with no body leaves the buffer lent where it is.
    let mut spare = body;
    let p = framer
        .next_with(b"GET / HTTP/1.1\r\n\r\n", &mut spare)
        .unwrap();
    assert!(p.request.expect("a request").body.is_empty());
    assert_eq!(spare, b"hello");
}

#[test]
fn pipelined_requests_come_one_a_call_in_order() {
    let input = b"GET /a HTTP/1.1\r\n\r\nPOST /b HTTP/1.1\r\ncontent-length: 2\r\n\r\nhiGET /c HTTP/1.1\r\nConnection: close\r\n\r\n";
    let mut framer = Framer::new(LIMITS);
    let mut buf = input.to_vec();
    let mut paths = Vec::new();
    while !buf.is_empty() {
        let p = framer.next(&buf).unwrap();
        assert!(p.consumed > 0);
        buf.drain(..p.consumed);
        let r = p.request.expect("a whole request each call");
        paths.push((r.head().path.to_owned(), r.body.clone(), r.keep_alive));
    }
    assert_eq!(
        paths,
        [
            ("/a".to_owned(), vec![], true),
            ("/b".to_owned(), b"hi".to_vec(), true),
            ("/c".to_owned(), vec![], false),
        ]
    );
    assert!(framer.idle());
}

#[test]
fn a_chunked_body_is_decoded_with_extensions_and_trailers() {
    let input = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;name=v\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\nGET /next HTTP/1.1\r\n\r\n";
    let r = whole(input);
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].body, b"hello 0123456789");
    assert_eq!(r[1].head().path, "/next");
    // Fed a byte at a time, the same.
    let cuts: Vec<usize> = (0..input.len()).collect();
    let (again, left) = frame(input, &cuts).unwrap();
    assert_eq!(left, 0);
    assert_eq!(again[0].body, r[0].body);
    assert_eq!(again[1].head().path, "/next");
}

#[test]
fn http_1_0_closes_unless_asked_to_keep_alive() {
    let r = whole(b"GET / HTTP/1.0\r\n\r\nGET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\nGET / HTTP/1.1\r\nConnection: foo, close\r\n\r\n");
    let kept: Vec<bool> = r.iter().map(|r| r.keep_alive).collect();
    assert_eq!(kept, [false, true, false]);
    assert_eq!(r[0].minor_version, 0);
}

#[test]
fn expect_100_continue_is_signalled_while_the_body_is_to_come() {
    let head = b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n";
    let mut framer = Framer::new(LIMITS);
    let p = framer.next(head).unwrap();
    assert!(p.send_continue);
    assert_eq!(p.consumed, head.len());
    assert!(p.request.is_none() && framer.in_body());
    let p = framer.next(b"abc").unwrap();
    assert!(!p.send_continue);
    assert_eq!(p.request.unwrap().body, b"abc");
    // The body already here: nothing to ask for.
    let mut framer = Framer::new(LIMITS);
    let mut whole = head.to_vec();
    whole.extend_from_slice(b"abc");
    let p = framer.next(&whole).unwrap();
    assert!(!p.send_continue && p.request.is_some());
}

#[test]
fn what_breaks_a_limit_or_the_format_is_refused_with_its_status() {
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (
            [b"GET / HTTP/1.1\r\nA: ".to_vec(), vec![b'a'; 2000]].concat(),
            431,
        ),
        (
            (0..9)
                .fold(b"GET / HTTP/1.1\r\n".to_vec(), |mut h, i| {
                    h.extend_from_slice(format!("h{i}: v\r\n").as_bytes());
                    h
                })
                .into_iter()
                .chain(*b"\r\n")
                .collect(),
            431,
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 4097\r\n\r\n".to_vec(),
            413,
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n".to_vec(),
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n".to_vec(),
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab".to_vec(),
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 1, 2\r\n\r\nab".to_vec(),
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n".to_vec(),
            501,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nz\r\n".to_vec(),
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\r\n".to_vec(),
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX".to_vec(),
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1001\r\n".to_vec(),
            413,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\n".to_vec(),
            400,
        ),
        (b"GET / HTTP/2.0\r\n\r\n".to_vec(), 400),
        (b"G\x01T / HTTP/1.1\r\n\r\n".to_vec(), 400),
    ];
    for (input, status) in cases {
        let e = frame(&input, &[]).expect_err(&String::from_utf8_lossy(&input));
        assert_eq!(
            e.status(),
            status,
            "{e} for {:?}",
            String::from_utf8_lossy(&input)
        );
    }
}

#[test]
fn a_chunked_body_over_the_limit_in_many_chunks_is_refused() {
    let mut input = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..5 {
        input.extend_from_slice(b"400\r\n");
        input.extend_from_slice(&[b'x'; 0x400]);
        input.extend_from_slice(b"\r\n");
    }
    assert_eq!(frame(&input, &[]).unwrap_err().status(), 413);
}

#[test]
fn a_head_waits_for_its_blank_line_and_is_read_once() {
    let mut framer = Framer::new(LIMITS);
    let mut buf = Vec::new();
    for b in b"GET /drip HTTP/1.1\r\nHost: h\r\n\r" {
        buf.push(*b);
        let p = framer.next(&buf).unwrap();
        assert_eq!(p.consumed, 0);
        assert!(p.request.is_none());
    }
    assert!(!framer.idle());
    buf.push(b'\n');
    let p = framer.next(&buf).unwrap();
    assert_eq!(p.consumed, buf.len());
    assert_eq!(p.request.unwrap().head().path, "/drip");
}

#[test]
fn an_answer_head_is_written_with_its_length_and_no_injected_line() {
    let mut out = Vec::new();
    write_head(
        &mut out,
        200,
        &[
            ("content-type", "text/xml"),
            ("x-bad", "a\r\nset-cookie: x"),
            ("x-amzn-requestid", "id"),
        ],
        12,
        false,
    );
    assert_eq!(
        out,
        b"HTTP/1.1 200 OK\r\ncontent-type: text/xml\r\nx-amzn-requestid: id\r\ncontent-length: 12\r\n\r\n"
    );
    out.clear();
    write_head(&mut out, 413, &[], 0, true);
    assert_eq!(
        out,
        b"HTTP/1.1 413 Content Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    );
}

/// A request of random shape: method, path, headers, a body by length or
/// chunked.
fn request() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    (
        prop_oneof![Just("GET"), Just("POST")],
        "/[a-z0-9/]{0,12}",
        proptest::collection::vec(("[a-z-]{1,8}", "[ -~]{0,16}"), 0..4),
        proptest::collection::vec(any::<u8>(), 0..300),
        any::<bool>(),
        proptest::collection::vec(1usize..64, 1..6),
    )
        .prop_map(|(method, path, headers, body, chunked, sizes)| {
            let mut out = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
            for (n, v) in headers {
                if n.eq_ignore_ascii_case("content-length")
                    || n.eq_ignore_ascii_case("transfer-encoding")
                {
                    continue;
                }
                out.extend_from_slice(format!("x-{n}: {}\r\n", v.trim()).as_bytes());
            }
            if chunked {
                out.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
                let mut rest = &body[..];
                for s in sizes.iter().cycle() {
                    if rest.is_empty() {
                        break;
                    }
                    let n = (*s).min(rest.len());
                    out.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                    out.extend_from_slice(&rest[..n]);
                    out.extend_from_slice(b"\r\n");
                    rest = &rest[n..];
                }
                out.extend_from_slice(b"0\r\n\r\n");
            } else {
                out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
                out.extend_from_slice(&body);
            }
            (out, body)
        })
}

proptest! {
    #[test]
    fn requests_frame_the_same_however_the_bytes_are_cut(
        requests in proptest::collection::vec(request(), 1..4),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let input: Vec<u8> = requests.iter().flat_map(|(bytes, _)| bytes.clone()).collect();
        let (framed, left) = frame(&input, &cuts).unwrap();
        prop_assert_eq!(left, 0);
        let bodies: Vec<Vec<u8>> = framed.iter().map(|r| r.body.clone()).collect();
        let expected: Vec<Vec<u8>> = requests.into_iter().map(|(_, b)| b).collect();
        prop_assert_eq!(bodies, expected);
    }

    #[test]
    fn any_bytes_are_framed_or_refused_without_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
        cuts in proptest::collection::vec(any::<usize>(), 0..6),
    ) {
        let _ = frame(&bytes, &cuts);
    }
}
