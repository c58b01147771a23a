//! Reloading tokens and certificates under load: nobody is dropped, new
//! connections see the new certificate, a removed token is refused at its
//! next request, a broken file changes nothing.

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fila_client::{Client, ClientOptions, ErrorCode, SettingsPatch, TlsOptions};
use fila_tests::pki::{Minted, TestCa};
use fila_tests::{TempDir, TestServer};
use rustls::pki_types::pem::PemObject;

fn write_config(path: &Path, cert: &Minted, tokens: &[&str]) {
    let mut text = format!(
        "tls_cert = {:?}\ntls_key = {:?}\n",
        cert.cert.display().to_string(),
        cert.key.display().to_string()
    );
    for t in tokens {
        text.push_str(&format!(
            "[[tokens]]\ntoken = {t:?}\n[[tokens.grants]]\nqueues = \"*\"\npermissions = [\"send\", \"receive\", \"manage\"]\n"
        ));
    }
    // Written whole, then renamed: a reload never reads half a file.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The certificate a new TLS connection to `addr` is shown (DER).
fn served_certificate(addr: std::net::SocketAddr, ca: &Path) -> Vec<u8> {
    let mut conn = fila_tests::pki::rustls_connection(Some(ca));
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).unwrap();
    }
    let der = conn.peer_certificates().unwrap()[0].to_vec();
    let _ = tcp.flush();
    der
}

fn pem_der(path: &PathBuf) -> Vec<u8> {
    rustls::pki_types::CertificateDer::from_pem_file(path)
        .unwrap()
        .to_vec()
}

#[test]
fn a_reload_under_load_swaps_the_certificate_and_the_tokens_and_drops_nobody() {
    let dir = TempDir::new("tls-reload");
    let ca = TestCa::new(dir.path(), "fila test CA");
    let first = ca.server(dir.path(), "first");
    let file = dir.path().join("fila.toml");
    write_config(&file, &first, &["alpha", "beta"]);
    let s = TestServer::with(|c| {
        c.merge_file(&file).unwrap();
        c.args = vec!["--config".into(), file.display().to_string()];
    });
    let addr = format!("localhost:{}", s.addr.port());
    let opts = |token: &str| {
        ClientOptions::new(&addr)
            .tls(TlsOptions {
                ca: Some(ca.cert.clone()),
                ..TlsOptions::default()
            })
            .token(token)
    };
    Client::connect(opts("alpha"))
        .unwrap()
        .create_queue("jobs", SettingsPatch::default())
        .unwrap();
    assert_eq!(served_certificate(s.addr, &ca.cert), pem_der(&first.cert));
    let mut beta = Client::connect(opts("beta")).unwrap();
    beta.stats("jobs").unwrap();

    // 8 clients pipeline puts (10 at a time) until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (stop, done, opts) = (stop.clone(), done.clone(), opts("alpha"));
            std::thread::spawn(move || -> Result<(), String> {
                let mut c = Client::connect(opts).map_err(|e| e.to_string())?;
                // Bounded: the main thread stops them within seconds.
                for _ in 0..1_000_000 {
                    if stop.load(Ordering::Acquire) {
                        return Ok(());
                    }
                    let ids: Vec<u64> = (0..10)
                        .map(|i| {
                            c.send(&fila_client::Request::Put {
                                queue: "jobs".into(),
                                messages: vec![fila_client::PutEntry {
                                    payload: format!("m{i}").into(),
                                    ..Default::default()
                                }],
                            })
                        })
                        .collect::<Result<_, _>>()
                        .map_err(|e| e.to_string())?;
                    for id in ids {
                        c.wait(id, Duration::ZERO)
                            .map_err(|e| e.to_string())?
                            .into_result()
                            .map_err(|e| format!("{e:?}"))?;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(())
            })
        })
        .collect();
    let wait_done = |at_least: u64| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while done.load(Ordering::Relaxed) < at_least {
            assert!(std::time::Instant::now() < deadline, "the clients stalled");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    wait_done(200);

    // A new certificate (a new key) and beta removed.
    let second = ca.server(dir.path(), "second");
    write_config(&file, &second, &["alpha"]);
    let r = s.server().reload().expect("the reload takes effect");
    assert_eq!((r.generation, r.tokens, r.tls), (1, 1, true));
    let after = done.load(Ordering::Relaxed);
    wait_done(after + 200);
    assert_eq!(served_certificate(s.addr, &ca.cert), pem_der(&second.cert));
    // beta's connection is still open, and refused at its next request.
    let e = beta.stats("jobs").unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::UNAUTHENTICATED), "{e}");
    assert!(e.to_string().contains("removed by a reload"), "{e}");
    assert!(Client::connect(opts("beta"))
        .and_then(|mut c| c.stats("jobs"))
        .is_err());

    // A broken certificate file: the reload fails, nothing changes.
    std::fs::write(&second.cert, "-----BEGIN CERTIFICATE-----\nbroken\n").unwrap();
    let e = s.server().reload().unwrap_err().to_string();
    assert!(e.contains("tls_cert") && e.contains("kept"), "{e}");
    // A broken config file likewise, asked for over the protocol.
    std::fs::write(&file, "tokens = [").unwrap();
    let mut admin = Client::connect(opts("alpha")).expect("new connections still work");
    let e = admin.reload().unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::INVALID_ARGUMENT), "{e}");
    assert!(e.to_string().contains("fila.toml"), "{e}");
    let after = done.load(Ordering::Relaxed);
    wait_done(after + 200);

    stop.store(true, Ordering::Release);
    for w in workers {
        w.join()
            .unwrap()
            .expect("no pipelining client was dropped or refused");
    }
    let m = s.server().metrics();
    assert_eq!(m.reloads.load(Ordering::Relaxed), 1);
}

#[test]
fn a_reload_and_a_cluster_change_need_manage_on_every_queue() {
    let s = TestServer::with(|c| {
        c.tokens.add(
            "narrow".into(),
            vec![fila_server::auth::Grant::new(
                "jobs*",
                &[fila_server::auth::Permission::Manage],
            )],
        );
        c.tokens.add(
            "wide".into(),
            vec![fila_server::auth::Grant::new(
                "*",
                &[fila_server::auth::Permission::Manage],
            )],
        );
    });
    let e = s.client_with_token("narrow").unwrap().reload().unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::FORBIDDEN), "{e}");
    let r = s.client_with_token("wide").unwrap().reload().unwrap();
    assert_eq!((r.generation, r.tokens, r.tls), (1, 2, false));
    // So does a change of a cluster's members (this single node has none).
    let remove = fila_client::ClusterChange::Remove { id: 2 };
    let e = s
        .client_with_token("narrow")
        .unwrap()
        .change_cluster(remove.clone())
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::FORBIDDEN), "{e}");
    let e = s
        .client_with_token("wide")
        .unwrap()
        .change_cluster(remove)
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::INVALID_ARGUMENT), "{e}");
}
