//! The SQS listener of the `fila-server` binary against hostile HTTP
//! clients: slow heads, huge bodies, malformed JSON, too many headers,
//! pipelined requests and ten thousand idle keep-alive connections. None
//! of them grows the server past its limits or stalls a binary-protocol
//! client.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::spawn;
use fila_client::{Client, ClientOptions, SettingsPatch};

/// One HTTP answer: status, headers (lower-case names), body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one answer (with a Content-Length body) from `s`, 10 s at most;
/// `buf` keeps what came after it.
fn read_answer(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Answer> {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let mut lines = head.split("\r\n");
            let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
            let headers: Vec<(String, String)> = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
                .collect();
            let len: usize = headers
                .iter()
                .find(|(n, _)| n == "content-length")
                .map_or(0, |(_, v)| v.parse().unwrap());
            while buf.len() < end + 4 + len {
                let mut chunk = [0u8; 4096];
                let n = s.read(&mut chunk).ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned();
            buf.drain(..end + 4 + len);
            return Some(Answer {
                status,
                headers,
                body,
            });
        }
        if Instant::now() > deadline {
            return None;
        }
        let mut chunk = [0u8; 4096];
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A JSON 1.0 request's bytes.
fn request(op: &str, body: &str) -> Vec<u8> {
    format!(
        "POST / HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/x-amz-json-1.0\r\nx-amz-target: AmazonSQS.{op}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

fn call(addr: &str, op: &str, body: &str) -> Answer {
    let mut s = connect(addr);
    s.write_all(&request(op, body)).unwrap();
    read_answer(&mut s, &mut Vec::new()).expect("an answer")
}

/// A binary-protocol client's put and receive, timed.
fn binary_round_trip(addr: &str) -> Duration {
    let started = Instant::now();
    let mut c = Client::connect(ClientOptions::new(addr)).unwrap();
    c.create_queue("binary", SettingsPatch::default()).unwrap();
    c.put_one("binary", b"x".to_vec()).unwrap();
    let got = c.receive("binary", 1, Some(0)).unwrap();
    assert_eq!(got.len(), 1);
    c.delete("binary", &[got[0].receipt.unwrap()]).unwrap();
    started.elapsed()
}

#[test]
fn malformed_requests_get_clear_errors_with_the_sdk_error_shape() {
    let server = spawn("", &[], &[]);
    let a = call(&server.sqs, "ListQueues", "{not json");
    assert_eq!(a.status, 400);
    assert!(
        a.body.contains("com.amazonaws.sqs#InvalidParameterValue"),
        "{}",
        a.body
    );
    assert_eq!(
        a.header("x-amzn-query-error"),
        Some("InvalidParameterValue;Sender")
    );
    let a = call(&server.sqs, "ListQueues", "[1, 2]");
    assert_eq!(a.status, 400);
    let a = call(&server.sqs, "NoSuchThing", "{}");
    assert_eq!(a.status, 400);
    assert!(a.body.contains("InvalidAction"), "{}", a.body);
    let a = call(&server.sqs, "SendMessage", r#"{"QueueUrl": 5}"#);
    assert_eq!(a.status, 400);
    assert!(a.body.contains("QueueUrl must be a string"), "{}", a.body);
    let a = call(&server.sqs, "GetQueueUrl", r#"{"QueueName": "missing"}"#);
    assert_eq!(a.status, 400);
    assert!(
        a.body.contains("com.amazonaws.sqs#QueueDoesNotExist"),
        "{}",
        a.body
    );
    assert_eq!(
        a.header("x-amzn-query-error"),
        Some("AWS.SimpleQueueService.NonExistentQueue;Sender")
    );
    // A GET without an action is a query-protocol request missing one; a
    // DELETE is no SQS request.
    let mut s = connect(&server.sqs);
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
    let a = read_answer(&mut s, &mut Vec::new()).unwrap();
    assert_eq!(a.status, 400);
    assert_eq!(a.header("content-type"), Some("text/xml"));
    assert!(a.body.contains("<Code>MissingAction</Code>"), "{}", a.body);
    s.write_all(b"DELETE / HTTP/1.1\r\nhost: x\r\nx-amz-target: AmazonSQS.ListQueues\r\n\r\n")
        .unwrap();
    let a = read_answer(&mut s, &mut Vec::new()).unwrap();
    assert_eq!(a.status, 400);
    assert!(a.body.contains("InvalidAction"), "{}", a.body);
}

#[test]
fn a_huge_body_is_refused_at_the_limit_without_being_read_whole() {
    let server = spawn("", &[], &[]);
    // A declared body past the limit.
    let mut s = connect(&server.sqs);
    s.write_all(
        b"POST / HTTP/1.1\r\nhost: x\r\nx-amz-target: AmazonSQS.ListQueues\r\ncontent-length: 1000000000\r\n\r\n",
    )
    .unwrap();
    let filler = vec![b' '; 1 << 20];
    for _ in 0..5 {
        if s.write_all(&filler).is_err() {
            break;
        }
    }
    let a = read_answer(&mut s, &mut Vec::new()).expect("an answer");
    assert_eq!(a.status, 413);
    assert!(a.body.contains("RequestEntityTooLarge"), "{}", a.body);
    // A chunked one that never ends.
    let mut s = connect(&server.sqs);
    s.write_all(
        b"POST / HTTP/1.1\r\nhost: x\r\nx-amz-target: AmazonSQS.ListQueues\r\ntransfer-encoding: chunked\r\n\r\n",
    )
    .unwrap();
    let chunk = format!("{:x}\r\n{}\r\n", 1 << 20, " ".repeat(1 << 20));
    for _ in 0..5 {
        if s.write_all(chunk.as_bytes()).is_err() {
            break;
        }
    }
    let a = read_answer(&mut s, &mut Vec::new()).expect("an answer");
    assert_eq!(a.status, 413);
}

#[test]
fn too_many_or_too_long_headers_are_refused() {
    let server = spawn("", &[], &[]);
    let mut head = String::from("POST / HTTP/1.1\r\nhost: x\r\n");
    for i in 0..100 {
        head.push_str(&format!("x-h{i}: v\r\n"));
    }
    head.push_str("\r\n");
    let mut s = connect(&server.sqs);
    s.write_all(head.as_bytes()).unwrap();
    let a = read_answer(&mut s, &mut Vec::new()).expect("an answer");
    assert_eq!(a.status, 431);
    let long = format!(
        "POST / HTTP/1.1\r\nhost: x\r\nx-long: {}\r\n\r\n",
        "v".repeat(64 << 10)
    );
    let mut s = connect(&server.sqs);
    let _ = s.write_all(long.as_bytes());
    let a = read_answer(&mut s, &mut Vec::new()).expect("an answer");
    assert_eq!(a.status, 431);
}

#[test]
fn a_slow_head_is_cut_off_and_binary_clients_are_not_stalled() {
    let server = spawn("", &[], &[]);
    let mut slow: Vec<TcpStream> = (0..50)
        .map(|_| {
            let mut s = connect(&server.sqs);
            s.write_all(b"POST / HTTP/1.1\r\nhost: x\r\n").unwrap();
            s
        })
        .collect();
    // A keep-alive connection that made a request and now waits.
    let mut kept = connect(&server.sqs);
    kept.write_all(&request("ListQueues", "{}")).unwrap();
    assert_eq!(read_answer(&mut kept, &mut Vec::new()).unwrap().status, 200);
    // While they dribble, the binary protocol answers at once.
    assert!(binary_round_trip(&server.addr) < Duration::from_secs(5));
    // And a well-formed SQS request on another connection too.
    assert_eq!(call(&server.sqs, "ListQueues", "{}").status, 200);
    // The server closes each within its head deadline (10 s), answering
    // 408 or closing.
    let started = Instant::now();
    for s in &mut slow {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        let text = String::from_utf8_lossy(&rest);
        assert!(
            rest.is_empty() || text.starts_with("HTTP/1.1 408"),
            "{text}"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(15));
    // The idle keep-alive connection outlived the head deadline: it is
    // closed only after 60 s without a request.
    kept.write_all(&request("ListQueues", "{}")).unwrap();
    assert_eq!(read_answer(&mut kept, &mut Vec::new()).unwrap().status, 200);
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let server = spawn("", &[], &[]);
    let mut s = connect(&server.sqs);
    let mut bytes = request("CreateQueue", r#"{"QueueName": "piped"}"#);
    for i in 0..5 {
        bytes.extend(request(
            "SendMessage",
            &format!(r#"{{"QueueUrl": "http://x/000000000000/piped", "MessageBody": "m{i}"}}"#),
        ));
    }
    bytes.extend(request(
        "GetQueueAttributes",
        r#"{"QueueUrl": "http://x/000000000000/piped", "AttributeNames": ["ApproximateNumberOfMessages"]}"#,
    ));
    s.write_all(&bytes).unwrap();
    let mut buf = Vec::new();
    let answers: Vec<Answer> = (0..7)
        .map(|_| read_answer(&mut s, &mut buf).expect("an answer"))
        .collect();
    assert!(answers.iter().all(|a| a.status == 200));
    assert!(answers[0].body.contains("/000000000000/piped"));
    for a in &answers[1..6] {
        assert!(a.body.contains("MessageId"), "{}", a.body);
    }
    assert!(
        answers[6]
            .body
            .contains(r#""ApproximateNumberOfMessages":"5""#),
        "{}",
        answers[6].body
    );
}

/// The soft limit of open files of this process.
fn open_files_limit() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024)
}

/// The resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

#[test]
fn ten_thousand_idle_keep_alive_connections_are_held_within_bounds() {
    // As many as the open-files limit allows here, up to 10 000 (and
    // max_connections one more than that).
    let n = 10_000.min(open_files_limit().saturating_sub(200));
    assert!(n >= 900, "too few descriptors for this test ({n})");
    let max = (n + 1).to_string();
    let server = spawn("", &["--max-connections", &max], &[]);
    let pid = server.child.id();
    let before = rss(pid);
    // One binary client first, so it is within max_connections.
    let mut binary = Client::connect(ClientOptions::new(server.addr.clone())).unwrap();
    binary.create_queue("b", SettingsPatch::default()).unwrap();
    let mut idle = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = connect(&server.sqs);
        s.write_all(&request("ListQueues", "{}")).unwrap();
        let a = read_answer(&mut s, &mut Vec::new()).expect("an answer");
        assert_eq!(a.status, 200);
        idle.push(s);
    }
    // One more is refused with a clear error.
    let a = call(&server.sqs, "ListQueues", "{}");
    assert_eq!(a.status, 503);
    assert!(a.body.contains("max_connections"), "{}", a.body);
    // The binary client is served as before.
    let started = Instant::now();
    binary.put_one("b", b"x".to_vec()).unwrap();
    assert_eq!(binary.receive("b", 1, Some(0)).unwrap().len(), 1);
    assert!(started.elapsed() < Duration::from_secs(5));
    // Each idle connection holds little.
    let per = rss(pid).saturating_sub(before) / n as u64;
    eprintln!("{n} idle connections: {per} bytes each");
    assert!(per < 32 << 10, "{per} bytes per idle connection");
    // Once some close, others get in.
    idle.truncate(n - 10);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if call(&server.sqs, "ListQueues", "{}").status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "closed connections were not counted off"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn request_bodies_held_at_once_are_bounded_across_connections() {
    let server = spawn("", &[], &[]);
    // Heads that declare the largest body and send none of it: each holds
    // its room until it ends.
    let declared = 4 << 20;
    let head = format!(
        "POST / HTTP/1.1\r\nhost: x\r\nx-amz-target: AmazonSQS.ListQueues\r\ncontent-length: {declared}\r\n\r\n"
    );
    let hold = || {
        let mut s = connect(&server.sqs);
        s.write_all(head.as_bytes()).unwrap();
        s
    };
    let mut holding: Vec<TcpStream> = (0..(256 << 20) / declared).map(|_| hold()).collect();
    // One more body does not fit, whatever its size: a clear 503 at once.
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        // The room is exactly that of the heads above: one whose head
        // came while a request below held its (small) body was refused
        // and closed; it is sent again.
        for h in &mut holding {
            h.set_nonblocking(true).unwrap();
            let gone = !matches!(h.read(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
            h.set_nonblocking(false).unwrap();
            if gone {
                *h = hold();
            }
        }
        let a = call(&server.sqs, "ListQueues", "{}");
        if a.status == 503 {
            break a;
        }
        // The heads above may not all be read yet.
        assert!(Instant::now() < deadline, "never refused: {}", a.body);
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(refused.body.contains("request bodies"), "{}", refused.body);
    // The binary protocol is not affected.
    assert!(binary_round_trip(&server.addr) < Duration::from_secs(5));
    // Once a holder goes away, its room is given back.
    holding.truncate(holding.len() - 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    while call(&server.sqs, "ListQueues", "{}").status != 200 {
        assert!(Instant::now() < deadline, "the room was not given back");
        std::thread::sleep(Duration::from_millis(20));
    }
}
