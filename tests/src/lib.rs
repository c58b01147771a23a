//! End-to-end test support: a real fila server on 127.0.0.1 with an
//! ephemeral port and a data directory of its own, stopped (and the
//! directory removed) when dropped; free ports for servers a test
//! configures itself (`free_port`).

pub mod pki;
mod ports;
pub use ports::free_port;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fila_client::{Client, ClientOptions};
use fila_core::Clock;
use fila_server::{Config, Server};

/// A directory under the system's temporary directory, removed when
/// dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new, empty directory named for `what`, this process and a counter.
    pub fn new(what: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "fila-{what}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        TempDir(dir)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A server for one test.
pub struct TestServer {
    server: Option<Server>,
    clock: Arc<dyn Clock>,
    config: Config,
    /// Its protocol address.
    pub addr: SocketAddr,
    /// Its data directory (declared last: removed after the server stops).
    pub data: TempDir,
}

impl TestServer {
    /// Defaults on 127.0.0.1:0, metrics on 127.0.0.1:0, two loops.
    pub fn start() -> TestServer {
        TestServer::with(|_| {})
    }

    /// Like [`TestServer::start`], with changes to the config (durable,
    /// `sync = always`, unless the change says otherwise).
    pub fn with(change: impl FnOnce(&mut Config)) -> TestServer {
        TestServer::with_clock(Arc::new(fila_core::SystemClock), change)
    }

    /// [`TestServer::with`] on a clock of the test's (a
    /// `fila_core::ManualClock`); restarts keep it.
    pub fn with_clock(clock: Arc<dyn Clock>, change: impl FnOnce(&mut Config)) -> TestServer {
        let data = TempDir::new("data");
        let mut config = Config {
            listen: "127.0.0.1:0".parse().expect("addr"),
            metrics_listen: Some("127.0.0.1:0".parse().expect("addr")),
            sqs_listen: Some("127.0.0.1:0".parse().expect("addr")),
            azure_listen: Some("127.0.0.1:0".parse().expect("addr")),
            console_listen: Some("127.0.0.1:0".parse().expect("addr")),
            shards: 2,
            event_loops: 2,
            log: "warn".into(),
            data_dir: data.path().to_owned(),
            ..Config::default()
        };
        change(&mut config);
        config.validate().expect("a valid test config");
        let server =
            Server::start_with_clock(config.clone(), clock.clone()).expect("the server starts");
        let addr = server.local_addr();
        TestServer {
            server: Some(server),
            clock,
            config,
            addr,
            data,
        }
    }

    /// Stops the server gracefully and starts a new one on the same data
    /// directory and config (its address may change).
    pub fn restart(&mut self) {
        self.halt();
        self.resume().expect("the server restarts");
    }

    /// Stops the server gracefully, keeping its data directory.
    pub fn halt(&mut self) {
        if let Some(s) = self.server.take() {
            s.stop();
        }
    }

    /// Starts a server again on the data directory and config (after
    /// [`TestServer::halt`]).
    pub fn resume(&mut self) -> Result<(), fila_server::StartError> {
        let server = Server::start_with_clock(self.config.clone(), self.clock.clone())?;
        self.addr = server.local_addr();
        self.server = Some(server);
        Ok(())
    }

    /// A connected client.
    pub fn client(&self) -> Client {
        Client::connect(ClientOptions::new(self.addr.to_string())).expect("connect")
    }

    /// A connected client presenting `token`.
    pub fn client_with_token(&self, token: &str) -> Result<Client, fila_client::ClientError> {
        Client::connect(ClientOptions::new(self.addr.to_string()).token(token))
    }

    /// Waits (at most 10 s) until `n` receives are parked on the server.
    pub fn wait_parked(&self, n: u64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let metrics = self.server().metrics();
        while metrics.parked.load(std::sync::atomic::Ordering::Acquire) < n {
            assert!(
                std::time::Instant::now() < deadline,
                "receives never parked"
            );
            std::thread::yield_now();
        }
    }

    /// Waits (at most 10 s) until at most `n` receives are parked.
    pub fn wait_parked_at_most(&self, n: u64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let metrics = self.server().metrics();
        while metrics.parked.load(std::sync::atomic::Ordering::Acquire) > n {
            assert!(
                std::time::Instant::now() < deadline,
                "parked receives never ended"
            );
            std::thread::yield_now();
        }
    }

    /// The server itself.
    pub fn server(&self) -> &Server {
        self.server.as_ref().expect("running")
    }

    /// What the server's metrics endpoint answers (the whole HTTP
    /// answer, head and body).
    pub fn metrics(&self) -> String {
        use std::io::{Read, Write};
        let addr = self.server().metrics_addr().expect("a metrics listener");
        let mut http = std::net::TcpStream::connect(addr).expect("the metrics listener");
        http.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("a request");
        let mut answer = String::new();
        http.read_to_string(&mut answer).expect("an answer");
        answer
    }

    /// Stops the server gracefully and waits for it.
    pub fn stop(mut self) {
        if let Some(s) = self.server.take() {
            s.stop();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.stop();
        }
    }
}

/// Puts `n` messages of `bytes` bytes each (of `fill`) into `queue`, in one
/// batch: a backlog whose answers take room.
pub fn put_filled(c: &mut Client, queue: &str, n: usize, bytes: usize, fill: u8) {
    let payload = bytes::Bytes::from(vec![fill; bytes]);
    let entries: Vec<fila_client::PutEntry> = (0..n)
        .map(|_| fila_client::PutEntry {
            payload: payload.clone(),
            ..Default::default()
        })
        .collect();
    for r in c.put(queue, entries).expect("the put") {
        r.expect("every entry stored");
    }
}
