//! Free ports on loopback for the processes and servers tests start, shared
//! by `fila-tests` and fila-server's cluster harness (which includes this
//! file by path: fila-server cannot depend on `fila-tests`, which depends
//! on it).

use std::sync::atomic::{AtomicU16, Ordering};

/// A port free on loopback now, below the system's ephemeral range (32768
/// and up on Linux): a port the system handed out and took back could go
/// to another test's listener or outgoing connection before the server
/// meant to have it binds it ("node 3 did not start", seen under load).
/// Ports 20000..32000, from a place of this process's own; each call
/// answers another port.
pub fn free_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let offset = (std::process::id() % 1_200) as u16 * 10;
    for _ in 0..2_000 {
        let port = 20_000 + (offset + NEXT.fetch_add(1, Ordering::Relaxed) % 12_000) % 12_000;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port below the ephemeral range");
}
