//! # fila-server: the network front end
//!
//! fila-server owns the mio event loops — each the front end (connections
//! as state machines), the shard host (the shards it owns) and the log wait
//! (answers held for the log), reached by other threads only through its
//! one bounded mailbox — and the table of operations (`ops.rs`),
//! the configuration (embedded defaults, a TOML file, flags), access control
//! (tokens with send / receive / manage permissions per queue name or
//! prefix), the Prometheus metrics endpoint, the SQS-compatible HTTP API
//! (`server/sqs/`: AWS JSON 1.0 and the query protocol on hyper, each of its
//! threads one more endpoint of the loops' mailboxes, docs/sqs.md), and the
//! `fila-server` binary; TLS on every listener (`tls.rs`: rustls with the
//! ring provider, a readiness-driven stream on the mio loops, client
//! certificates standing for tokens) and reloading tokens and certificates
//! while running (`live.rs`).
//! It speaks `fila-proto` to clients and runs `fila-core`'s engine split
//! into owners: each event loop owns some shards and is the only thread that
//! touches them; a request for another loop's shard is handed to that loop
//! through a bounded lock-free queue, and its answer comes back the same
//! way. No request takes a mutex on a shard.
//!
//! With a log (`sync = always` or `interval`, docs/durability.md) it opens
//! and locks the data directory, recovers it into the engine before it
//! listens, and (with `always`) holds each answer whose call logged a change
//! until the log is durable up to it (`fila-store` does the logging).
//!
//! It also owns every limit a client meets on the way in: connections,
//! frame size (smaller before authentication), work per turn of an event
//! loop, output room per connection (including the room parked receives
//! hold), parked receives per connection and per server, failed
//! authentications, and the engine's server-wide limits (stored bytes,
//! queues) set from the configuration.
//!
//! ```no_run
//! use fila_server::{Config, Server};
//!
//! let server = Server::start(Config::default()).unwrap();
//! println!("listening on {}", server.local_addr());
//! server.stop();
//! ```

pub mod auth;
pub mod config;
mod dispatch;
pub mod guard;
mod limits;
pub mod live;
pub mod metrics;
mod ops;
pub mod scrape;
mod server;
pub mod tls;

pub use config::{
    default_data_dir, ClusterConfig, ClusterMember, Config, ConfigError, LogFormat, Sync, HELP,
};
pub use live::{ReloadError, Reloaded};
pub use server::{
    Server, StartError, StopHandle, ANSWER_ROOM_MIN, AUTH_FAILURES_MAX, FRAMES_PER_TURN,
    IN_FLIGHT_MAX, LOG_BACKLOG_MAX, MAILBOX_CAPACITY, MESSAGES_PER_TURN, MOVE_AFTER,
    OUTPUT_BYTES_MIN, PREAUTH_FRAME_MAX, READ_BYTES_PER_TURN, SMALL_ANSWER_ROOM, TIMERS_PER_TURN,
};

/// The web console's limits and policy (docs/console.md).
pub mod console {
    pub use crate::server::console::{
        ANSWER_ROOM, BODY_BYTES_MAX, BODY_SECS, CONNECTIONS_MAX, CSP, HEAD_SECS,
    };
}

/// Checks a data directory without starting a server or changing it:
/// answers what a start would recover, or why it would refuse.
pub fn check_data(dir: &std::path::Path) -> Result<fila_store::Recovery, String> {
    if !dir.is_dir() {
        return Err(format!("{}: not a directory", dir.display()));
    }
    let storage = fila_wal::FsStorage::existing(dir);
    fila_store::check(storage).map_err(|e| format!("{}: {e}", dir.display()))
}
