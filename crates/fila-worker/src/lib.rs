//! # fila-worker: the queue trigger
//!
//! fila-worker owns the consumer side that the Azure Functions queue
//! trigger gives its users (SPEC §4): write one async handler, and the
//! runtime fetches messages in batches, runs handlers concurrently (at most
//! `batch_size + new_batch_threshold` at once, never one message twice at
//! once), renews their leases from a thread of its own while they run,
//! deletes a message when its handler succeeds (after putting the
//! handler's outputs), releases it as failed when it fails (the queue's
//! retry policy decides when it comes back), sends it to
//! `<queue>-poison` when it failed `max_dequeue_count` times or cannot be
//! decoded, backs off when polls fail, and drains on shutdown.
//!
//! ```no_run
//! use fila_client::ClientOptions;
//! use fila_worker::{Delivery, HandlerError, Json, Outputs, Settings, Worker};
//!
//! #[derive(serde::Deserialize)]
//! struct Resize { width: u32 }
//!
//! async fn resize(msg: Delivery, Json(job): Json<Resize>) -> Result<Outputs, HandlerError> {
//!     let mut out = Outputs::new();
//!     out.push("resized", format!("{} -> {}", msg.id_hex(), job.width));
//!     Ok(out)
//! }
//!
//! # async fn main_() -> Result<(), fila_worker::WorkerError> {
//! Worker::new(ClientOptions::new("127.0.0.1:7700"))
//!     .queue("resize", Settings::default(), resize)
//!     .run() // until SIGINT or SIGTERM
//!     .await
//! # }
//! ```
//!
//! docs/worker.md is the tour.

mod backoff;
mod groups;
mod handler;
mod renew;
mod settings;
mod stats;
mod worker;

pub use backoff::{Backoff, Jitter};
pub use handler::{
    DecodeError, Delivery, FromDelivery, Handler, HandlerError, IntoOutputs, Json, Outputs,
    INPUT_ID_ATTRIBUTE,
};
pub use settings::{Encoding, Settings};
pub use stats::{StatsHandle, WorkerStats};
pub use worker::{output_entries, Worker};

/// Why a worker could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A setting is out of range.
    #[error("setting {field}: {why}")]
    Setting {
        /// Which.
        field: &'static str,
        /// Why.
        why: String,
    },
    /// A config file could not be read.
    #[error("config {path}: {why}")]
    Config {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
    /// A queue could not be prepared (it does not exist, or its poison
    /// queue could not be set up).
    #[error("queue {queue}: {why}")]
    Queue {
        /// Which.
        queue: String,
        /// Why.
        why: String,
    },
    /// The server could not be reached or refused.
    #[error(transparent)]
    Client(#[from] fila_client::ClientError),
}
