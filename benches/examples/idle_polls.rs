//! Holds N connections, each with a long-polling receive parked on an empty
//! queue, against a running server, and reports the server's CPU and
//! resident memory over a quiet interval (read from /proc/PID).
//!
//! ```sh
//! cargo build --release -p fila-server -p fila-benches --examples
//! target/release/fila-server --metrics-listen off --sqs-listen off --console-listen off & SERVER=$!
//! target/release/examples/idle_polls 127.0.0.1:7700 $SERVER 10000 20
//! kill $SERVER
//! ```

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use fila_proto::{QueueRef, Receive, Request, Response, SettingsPatch};

fn ticks(pid: &str) -> u64 {
    let stat =
        std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the server's /proc entry");
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15 of stat; 12 and 13 after the name.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn rss_kib(pid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn call(s: &mut TcpStream, req: Request) -> Response {
    let mut buf = BytesMut::new();
    req.encode(1, &mut buf);
    s.write_all(&buf).unwrap();
    let mut input = BytesMut::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some((h, b)) = fila_proto::split_frame(&mut input, 1 << 20).unwrap() {
            return Response::decode(&h, b).unwrap();
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "server closed");
        input.extend_from_slice(&chunk[..n]);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = args
        .first()
        .map_or("127.0.0.1:7700", String::as_str)
        .to_owned();
    let pid = args.get(1).expect("the server's pid").clone();
    let n: usize = args.get(2).map_or(10_000, |v| v.parse().unwrap());
    let quiet_secs: u64 = args.get(3).map_or(20, |v| v.parse().unwrap());

    let mut admin = TcpStream::connect(&addr).unwrap();
    let _ = call(
        &mut admin,
        Request::CreateQueue {
            name: "idle".into(),
            settings: SettingsPatch::default(),
        },
    );
    let rss_before = rss_kib(&pid);
    let mut poll = BytesMut::new();
    Request::Receive(Receive {
        queue: QueueRef {
            name: "idle".into(),
            dlq: false,
        },
        max_messages: 10,
        visibility_ms: None,
        wait_ms: Some(30_000),
        channel: None,
        fields: Default::default(),
    })
    .encode(1, &mut poll);
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(&poll).unwrap();
        conns.push(s);
    }
    // Let every receive park.
    std::thread::sleep(Duration::from_secs(2));
    let parked = match call(&mut admin, Request::ServerStats) {
        Response::ServerStats(v) => v
            .into_iter()
            .find(|(k, _)| k == "receives_parked")
            .map_or(0, |(_, v)| v),
        other => panic!("{other:?}"),
    };
    let hz = 100.0; // USER_HZ on Linux
    let t0 = ticks(&pid);
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(quiet_secs));
    let cpu = (ticks(&pid) - t0) as f64 / hz / start.elapsed().as_secs_f64() * 100.0;
    let rss = rss_kib(&pid);
    println!("connections {n}, receives parked {parked}");
    println!("server CPU over {quiet_secs} s: {cpu:.2} % of one core");
    println!(
        "server RSS: {:.1} MiB ({:.1} MiB before the connections)",
        rss as f64 / 1024.0,
        rss_before as f64 / 1024.0
    );
    drop(conns);
}
