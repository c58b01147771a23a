//! What the server's HTTP front ends (the SQS API, the web console) share:
//! a thread that runs a single-threaded tokio runtime, and a TLS handshake
//! within the configured time (counted and logged as the binary
//! protocol's are).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tracing::{debug, warn};

use super::Shared;

/// Spawns thread `name`, which runs `serve()` on a current-thread tokio
/// runtime (I/O and time) inside a `LocalSet`, so its tasks may share
/// `Rc`s.
pub(super) fn spawn_runtime<F, Fut>(
    name: String,
    serve: F,
) -> io::Result<std::thread::JoinHandle<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    warn!(thread = name, error = %e, "a listener's runtime did not start");
                    return;
                }
            };
            tokio::task::LocalSet::new().block_on(&rt, serve());
        })
}

/// The TLS side of an accepted connection: the handshake with the
/// certificate of the last reload, within `tls_handshake_timeout_secs`;
/// `None` (counted in `fila_tls_errors_total`, logged at most once a
/// second) when it fails or takes too long. `what` names the listener in
/// the logs.
pub(super) async fn tls_accept(
    shared: &Shared,
    config: std::sync::Arc<rustls::ServerConfig>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    what: &str,
) -> Option<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let limit = Duration::from_secs(shared.config.tls_handshake_timeout_secs);
    match tokio::time::timeout(limit, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => return Some(tls),
        Ok(Err(e)) => {
            let second = shared.totals.now_ms() / 1000;
            if let Some(unlogged) = shared.tls_warn.allow(second) {
                warn!(%peer, error = %e, unlogged_since_last = unlogged, "{what} TLS connection refused");
            } else {
                debug!(%peer, error = %e, "{what} TLS connection refused");
            }
        }
        Err(_) => debug!(%peer, "{what} TLS handshake not finished in time"),
    }
    shared.metrics.tls_errors.fetch_add(1, Ordering::Relaxed);
    None
}
