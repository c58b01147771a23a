//! TLS on every listener, with certificates minted here: server auth,
//! client certificates standing for tokens, and the refusals (a wrong CA,
//! a wrong name, an expired certificate) seen on both sides.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use fila_client::{Client, ClientError, ClientOptions, ErrorCode, SettingsPatch, TlsOptions};
use fila_server::auth::{Grant, Permission};
use fila_server::tls::ClientAuth;
use fila_tests::pki::{Leaf, Minted, TestCa};
use fila_tests::{TempDir, TestServer};

/// A CA, a server certificate it signed, and a server using them.
struct Setup {
    dir: TempDir,
    ca: TestCa,
    server: TestServer,
}

fn setup(change: impl FnOnce(&mut fila_server::Config, &TestCa, &std::path::Path)) -> Setup {
    let dir = TempDir::new("tls");
    let ca = TestCa::new(dir.path(), "fila test CA");
    let cert = ca.server(dir.path(), "server");
    let server = TestServer::with(|c| {
        c.tls_cert = Some(cert.cert.clone());
        c.tls_key = Some(cert.key.clone());
        change(c, &ca, dir.path());
    });
    Setup { dir, ca, server }
}

fn tls(ca: &std::path::Path) -> TlsOptions {
    TlsOptions {
        ca: Some(ca.to_owned()),
        ..TlsOptions::default()
    }
}

fn with_cert(ca: &std::path::Path, m: &Minted) -> TlsOptions {
    TlsOptions {
        ca: Some(ca.to_owned()),
        cert: Some(m.cert.clone()),
        key: Some(m.key.clone()),
        server_name: None,
    }
}

/// `localhost:PORT` of the server (the name its certificate carries).
fn named(s: &TestServer) -> String {
    format!("localhost:{}", s.addr.port())
}

fn tls_errors(s: &TestServer) -> u64 {
    s.server()
        .metrics()
        .tls_errors
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// Waits (at most 5 s) until the server has counted more than `before`
/// TLS errors.
fn wait_tls_error(s: &TestServer, before: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while tls_errors(s) <= before {
        assert!(
            std::time::Instant::now() < deadline,
            "the server counted no TLS error"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn lower(e: &ClientError) -> String {
    e.to_string().to_lowercase()
}

#[test]
fn clients_speak_tls_and_a_clear_text_client_gets_nothing() {
    let s = setup(|_, _, _| {});
    let opts = ClientOptions::new(format!("filas://{}", named(&s.server))).tls(tls(&s.ca.cert));
    let mut c = Client::connect(opts.clone()).expect("a TLS client connects");
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    c.put_one("jobs", "over tls").unwrap();
    let got = c.receive("jobs", 10, Some(0)).unwrap();
    assert_eq!(&got[0].payload[..], b"over tls");
    // The name may be the IP address the certificate also carries.
    let by_ip = ClientOptions::new(s.server.addr.to_string()).tls(tls(&s.ca.cert));
    Client::connect(by_ip).unwrap().hello().unwrap();
    // The async client too.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let a = fila_client::AsyncClient::connect(opts).await.unwrap();
        a.put_one("jobs", "async over tls").await.unwrap();
        assert_eq!(a.stats("jobs").await.unwrap().visible, 1);
    });
    // A clear-text client's hello is not a ClientHello: no answer, closed.
    let before = tls_errors(&s.server);
    let plain = Client::connect(ClientOptions::new(s.server.addr.to_string()))
        .and_then(|mut c| c.hello().map(|_| ()));
    assert!(plain.is_err(), "a clear-text hello is not answered");
    wait_tls_error(&s.server, before);
}

#[test]
fn a_wrong_ca_a_wrong_name_and_an_expired_certificate_are_refused_on_both_sides() {
    let s = setup(|_, _, _| {});
    let other = TestCa::new(s.dir.path(), "another CA");
    let addr = named(&s.server);
    // A CA that did not sign the server's certificate.
    let before = tls_errors(&s.server);
    let e = Client::connect(ClientOptions::new(&addr).tls(tls(&other.cert)))
        .err()
        .expect("refused");
    assert!(lower(&e).contains("unknownissuer"), "{e}");
    wait_tls_error(&s.server, before);
    // A name the certificate does not carry.
    let before = tls_errors(&s.server);
    let mut wrong_name = tls(&s.ca.cert);
    wrong_name.server_name = Some("queue.example".into());
    let e = Client::connect(ClientOptions::new(&addr).tls(wrong_name))
        .err()
        .expect("refused");
    assert!(lower(&e).contains("not valid for name"), "{e}");
    wait_tls_error(&s.server, before);
    // An expired server certificate.
    let expired = s.ca.mint(
        s.dir.path(),
        "expired",
        Leaf {
            names: &["localhost"],
            common_name: "expired",
            client: false,
            expired: true,
        },
    );
    let old = TestServer::with(|c| {
        c.tls_cert = Some(expired.cert.clone());
        c.tls_key = Some(expired.key.clone());
    });
    let before = tls_errors(&old);
    let e = Client::connect(ClientOptions::new(named(&old)).tls(tls(&s.ca.cert)))
        .err()
        .expect("refused");
    assert!(lower(&e).contains("expired"), "{e}");
    wait_tls_error(&old, before);
}

#[test]
fn a_client_certificate_stands_for_its_token() {
    let s = setup(|c, ca, _| {
        c.tls_client_ca = Some(ca.cert.clone());
        c.tokens.add_entry(
            None,
            None,
            vec!["worker-1".into()],
            vec![Grant::new("jobs", &[Permission::Send, Permission::Manage])],
        );
        c.tokens.add(
            "admin-secret".into(),
            vec![Grant::new("*", &[Permission::Manage])],
        );
    });
    let dir = s.dir.path();
    let addr = named(&s.server);
    let worker = s.ca.client(dir, "worker-1");
    // No auth frame: the certificate is the credential.
    let mut c = Client::connect(ClientOptions::new(&addr).tls(with_cert(&s.ca.cert, &worker)))
        .expect("connects with a certificate");
    c.create_queue("jobs", SettingsPatch::default()).unwrap();
    c.put_one("jobs", "by certificate").unwrap();
    let e = c
        .create_queue("other", SettingsPatch::default())
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::FORBIDDEN), "{e}");
    // A certificate this CA signed for a name no token carries: it may
    // still authenticate with a token; without one it is refused.
    let stranger = s.ca.client(dir, "stranger");
    let mut c =
        Client::connect(ClientOptions::new(&addr).tls(with_cert(&s.ca.cert, &stranger))).unwrap();
    let e = c.stats("jobs").unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::UNAUTHENTICATED), "{e}");
    // Optional client certificates: a token alone works.
    let mut c = Client::connect(
        ClientOptions::new(&addr)
            .tls(tls(&s.ca.cert))
            .token("admin-secret"),
    )
    .unwrap();
    assert_eq!(c.stats("jobs").unwrap().visible, 1);
    // A client certificate of another CA, and an expired one: refused in
    // the handshake (TLS 1.3: the client learns it at its first read).
    let other = TestCa::new(dir, "another CA");
    let forged = other.client(dir, "worker-1");
    let expired = s.ca.mint(
        dir,
        "expired-worker",
        Leaf {
            names: &[],
            common_name: "worker-1",
            client: true,
            expired: true,
        },
    );
    for (what, m) in [("another CA's", &forged), ("an expired", &expired)] {
        let before = tls_errors(&s.server);
        let r = Client::connect(ClientOptions::new(&addr).tls(with_cert(&s.ca.cert, m)))
            .and_then(|mut c| c.hello());
        let e = r
            .err()
            .unwrap_or_else(|| panic!("{what} certificate is refused"));
        let text = lower(&e);
        assert!(
            text.contains("alert") || text.contains("certificate"),
            "{what}: {e}"
        );
        wait_tls_error(&s.server, before);
    }
}

#[test]
fn required_client_certificates_refuse_a_client_without_one() {
    let s = setup(|c, ca, _| {
        c.tls_client_ca = Some(ca.cert.clone());
        c.tls_client_auth = ClientAuth::Required;
        c.tokens
            .add("t".into(), vec![Grant::new("*", &[Permission::Manage])]);
    });
    let before = tls_errors(&s.server);
    let r = Client::connect(
        ClientOptions::new(named(&s.server))
            .tls(tls(&s.ca.cert))
            .token("t"),
    );
    let e = r.err().expect("no certificate, no connection");
    assert!(lower(&e).contains("certificate"), "{e}");
    wait_tls_error(&s.server, before);
}

/// A rustls client over a blocking socket (what an HTTPS client does).
fn rustls_client(
    addr: std::net::SocketAddr,
    ca: &std::path::Path,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let conn = fila_tests::pki::rustls_connection(Some(ca));
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    rustls::StreamOwned::new(conn, tcp)
}

/// One HTTP/1.1 request over TLS; the whole answer.
fn https(addr: std::net::SocketAddr, ca: &std::path::Path, request: &str) -> String {
    let mut s = rustls_client(addr, ca);
    s.write_all(request.as_bytes()).unwrap();
    s.flush().unwrap();
    let mut out = Vec::new();
    // The server may close without waiting for our close_notify.
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn the_sqs_api_the_console_and_metrics_speak_tls_with_the_same_certificate() {
    let s = setup(|_, _, _| {});
    let sqs = s.server.server().sqs_addr().unwrap();
    let body = "{}";
    let answer = https(
        sqs,
        &s.ca.cert,
        &format!(
            "POST / HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/x-amz-json-1.0\r\n\
             x-amz-target: AmazonSQS.ListQueues\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // The console too: the session cookie is then Secure.
    let console = s.server.server().console_addr().unwrap();
    let answer = https(
        console,
        &s.ca.cert,
        "GET / HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains("HttpOnly; SameSite=Strict; Secure"),
        "{answer}"
    );
    let metrics = s.server.server().metrics_addr().unwrap();
    let answer = https(
        metrics,
        &s.ca.cert,
        "GET /metrics HTTP/1.1\r\nhost: localhost\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("fila_tls_errors_total"), "{answer}");
    // Clear text to the SQS port is not HTTP to it.
    let mut plain = TcpStream::connect(sqs).unwrap();
    plain
        .write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut got = Vec::new();
    let _ = plain.read_to_end(&mut got);
    assert!(!got.starts_with(b"HTTP"), "no clear-text answer");
}

#[test]
fn openssl_s_client_completes_a_handshake_and_a_hello() {
    if std::process::Command::new("openssl")
        .arg("version")
        .output()
        .is_err()
    {
        eprintln!("skipped: openssl is not installed");
        return;
    }
    let s = setup(|_, _, _| {});
    let mut child = std::process::Command::new("openssl")
        .args(["s_client", "-quiet", "-verify_return_error", "-CAfile"])
        .arg(&s.ca.cert)
        .args(["-servername", "localhost", "-connect"])
        .arg(s.server.addr.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("openssl runs");
    let mut frame = bytes::BytesMut::new();
    fila_client::Request::Hello {
        client: "openssl".into(),
        max_version: None,
    }
    .encode(7, &mut frame);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&frame).unwrap();
    stdin.flush().unwrap();
    // Read until the answer's text shows, for 10 s at most.
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let reader = std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut chunk) {
            if n == 0 || tx.send(chunk[..n].to_vec()).is_err() {
                return;
            }
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("fila-server/") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(bytes) => seen.extend_from_slice(&bytes),
            Err(_) => break,
        }
    }
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    assert!(
        String::from_utf8_lossy(&seen).contains("fila-server/"),
        "openssl got the hello answer: {:?}",
        String::from_utf8_lossy(&seen)
    );
}

#[test]
fn the_mint_script_makes_certificates_the_server_and_clients_take() {
    if std::process::Command::new("openssl")
        .arg("version")
        .output()
        .is_err()
    {
        eprintln!("skipped: openssl is not installed");
        return;
    }
    let dir = TempDir::new("mint");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/mint-certs.sh");
    let o = std::process::Command::new(script)
        .arg(dir.path())
        .args(["--client", "worker-1"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let p = |f: &str| dir.path().join(f);
    let s = TestServer::with(|c| {
        c.tls_cert = Some(p("server.crt"));
        c.tls_key = Some(p("server.key"));
        c.tls_client_ca = Some(p("ca.crt"));
        c.tokens.add_entry(
            None,
            None,
            vec!["worker-1".into()],
            vec![Grant::new("*", &[Permission::Manage])],
        );
    });
    let opts = ClientOptions::new(named(&s)).tls(TlsOptions {
        ca: Some(p("ca.crt")),
        cert: Some(p("client-worker-1.crt")),
        key: Some(p("client-worker-1.key")),
        server_name: None,
    });
    let mut c = Client::connect(opts).unwrap();
    assert!(c.create_queue("minted", SettingsPatch::default()).unwrap());
}
