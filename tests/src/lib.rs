//! End-to-end test support: a real fila server on 127.0.0.1 with an
//! ephemeral port, stopped when dropped.

use std::net::SocketAddr;

use fila_client::{Client, ClientOptions};
use fila_server::{Config, Server};

/// A server for one test.
pub struct TestServer {
    server: Option<Server>,
    /// Its protocol address.
    pub addr: SocketAddr,
}

impl TestServer {
    /// Defaults on 127.0.0.1:0, metrics on 127.0.0.1:0, two loops.
    pub fn start() -> TestServer {
        TestServer::with(|_| {})
    }

    /// Like [`TestServer::start`], with changes to the config.
    pub fn with(change: impl FnOnce(&mut Config)) -> TestServer {
        let mut config = Config {
            listen: "127.0.0.1:0".parse().expect("addr"),
            metrics_listen: Some("127.0.0.1:0".parse().expect("addr")),
            shards: 2,
            event_loops: 2,
            log: "warn".into(),
            ..Config::default()
        };
        change(&mut config);
        config.validate().expect("a valid test config");
        let server = Server::start(config).expect("the server starts");
        let addr = server.local_addr();
        TestServer {
            server: Some(server),
            addr,
        }
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

    /// The server itself.
    pub fn server(&self) -> &Server {
        self.server.as_ref().expect("running")
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
