//! Hostile TLS clients: a handshake never finished, garbage instead of a
//! ClientHello, a client that stops reading, a thousand handshakes at
//! once — each meets its limit, and everyone else is served.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fila_client::{Client, ClientOptions, QueueRef, Request, SettingsPatch, TlsOptions};
use fila_tests::pki::TestCa;
use fila_tests::{TempDir, TestServer};

struct Setup {
    _dir: TempDir,
    ca: TestCa,
    server: TestServer,
}

fn setup(change: impl FnOnce(&mut fila_server::Config)) -> Setup {
    let dir = TempDir::new("tls-hostile");
    let ca = TestCa::new(dir.path(), "fila test CA");
    let cert = ca.server(dir.path(), "server");
    let server = TestServer::with(|c| {
        c.tls_cert = Some(cert.cert.clone());
        c.tls_key = Some(cert.key.clone());
        change(c);
    });
    Setup {
        _dir: dir,
        ca,
        server,
    }
}

fn client(s: &Setup) -> Client {
    Client::connect(
        ClientOptions::new(format!("localhost:{}", s.server.addr.port())).tls(TlsOptions {
            ca: Some(s.ca.cert.clone()),
            ..TlsOptions::default()
        }),
    )
    .expect("a TLS client connects")
}

/// Whether the server closes `raw` within `secs` (reading and dropping
/// whatever it sends first).
fn closed_within(raw: &mut TcpStream, secs: u64) -> bool {
    raw.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut b = [0u8; 4096];
    while Instant::now() < deadline {
        match raw.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => {}
        }
    }
    false
}

/// A ClientHello's bytes, as a rustls client would send them.
fn client_hello() -> Vec<u8> {
    let mut conn = fila_tests::pki::rustls_connection(None);
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    out
}

#[test]
fn a_handshake_never_finished_is_closed_at_its_deadline() {
    let s = setup(|c| c.tls_handshake_timeout_secs = 1);
    let metrics = s.server.server().metrics();
    let before = metrics.tls_errors.load(Ordering::Relaxed);
    // One sends nothing, one half a ClientHello.
    let mut silent = TcpStream::connect(s.server.addr).unwrap();
    let mut half = TcpStream::connect(s.server.addr).unwrap();
    let hello = client_hello();
    half.write_all(&hello[..hello.len() / 2]).unwrap();
    assert!(closed_within(&mut silent, 5), "closed at the deadline");
    assert!(closed_within(&mut half, 5), "closed at the deadline");
    assert!(metrics.tls_errors.load(Ordering::Relaxed) >= before + 2);
    // Meanwhile, and after, a real client is served.
    client(&s).hello().unwrap();
}

#[test]
fn garbage_instead_of_a_client_hello_gets_an_alert_and_the_close() {
    let s = setup(|_| {});
    for garbage in [
        &b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"[..],
        &[0xffu8; 300][..],
        &[0x16, 0x03, 0x01, 0xff, 0xff, 0x01, 0x00][..],
    ] {
        let mut raw = TcpStream::connect(s.server.addr).unwrap();
        raw.write_all(garbage).unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut answer = Vec::new();
        let _ = raw.read_to_end(&mut answer);
        // An alert record (content type 21), or nothing, then the close.
        assert!(
            answer.is_empty() || answer[0] == 0x15,
            "{garbage:?}: {answer:?}"
        );
    }
    client(&s).hello().unwrap();
}

#[test]
fn a_tls_client_that_stops_reading_holds_no_more_than_its_output_room() {
    let s = setup(|c| c.max_output_bytes = fila_server::OUTPUT_BYTES_MIN);
    let mut c = client(&s);
    c.create_queue("q", SettingsPatch::default()).unwrap();
    fila_tests::put_filled(&mut c, "q", 20, 10 << 10, 7);
    // 200 peeks of ~200 KiB each (~40 MiB of answers), never read.
    let mut stuck = Client::connect(
        ClientOptions::new(format!("localhost:{}", s.server.addr.port())).tls(TlsOptions {
            ca: Some(s.ca.cert.clone()),
            ..TlsOptions::default()
        }),
    )
    .unwrap();
    for _ in 0..200 {
        stuck
            .send(&Request::Peek {
                queue: QueueRef {
                    name: "q".into(),
                    dlq: false,
                },
                from_seq: 0,
                max_messages: 20,
                fields: fila_client::Fields::ALL,
            })
            .unwrap();
    }
    stuck.flush().unwrap();
    // Others are served while it holds its room (and no more).
    for i in 0..20 {
        c.put_one("q", format!("m{i}")).unwrap();
        assert!(c.stats("q").unwrap().visible >= 21);
    }
    let high = s
        .server
        .server()
        .metrics()
        .output_high_water
        .load(Ordering::Relaxed);
    assert!(
        high as usize <= fila_server::OUTPUT_BYTES_MIN,
        "{high} bytes held for one connection"
    );
}

#[test]
fn a_thousand_handshakes_at_once_and_others_are_still_served() {
    // Two descriptors a connection in this one process (client and
    // server side), within the open-files limit.
    let limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("Max open files"))?;
            line.split_whitespace().nth(3)?.parse::<usize>().ok()
        })
        .unwrap_or(1024);
    let n = 1000.min(limit.saturating_sub(200) / 2);
    if n < 1000 {
        eprintln!("open-files limit {limit}: {n} handshakes instead of 1000");
    }
    let s = setup(|_| {});
    let hello = client_hello();
    let mut socks = Vec::with_capacity(n);
    for _ in 0..n {
        let mut raw = TcpStream::connect(s.server.addr).unwrap();
        raw.write_all(&hello).unwrap();
        socks.push(raw);
    }
    // A client that finishes its handshake is served among them.
    let started = Instant::now();
    let mut c = client(&s);
    c.create_queue("q", SettingsPatch::default()).unwrap();
    for i in 0..20 {
        c.put_one("q", format!("m{i}")).unwrap();
    }
    assert_eq!(c.stats("q").unwrap().visible, 20);
    eprintln!(
        "{n} half-open handshakes: a client connected and made 22 calls in {:?}",
        started.elapsed()
    );
    // Each of them got its ServerHello (the server answered them all).
    let mut answered = 0;
    for raw in &mut socks {
        raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 1];
        if raw.read(&mut b).is_ok_and(|k| k == 1 && b[0] == 0x16) {
            answered += 1;
        }
    }
    assert_eq!(answered, n, "every handshake was answered");
}
