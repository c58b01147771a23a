//! Shared set-up for fila's criterion benches and measurement examples.
//!
//! The benches live in `benches/` (one file per component: `ring`, `wheel`,
//! `engine`); `examples/memory.rs` reports bytes per resident message.
//! Figures, commands and machines are recorded in `docs/benchmarks.md`.

use std::sync::Arc;

use bytes::Bytes;
use fila_core::{Engine, ManualClock, QueueSettings};

/// A 100-byte payload shared by every put, as payloads sliced from one
/// network read buffer would be.
pub fn payload_100() -> Bytes {
    Bytes::from(vec![0xA5u8; 100])
}

/// Queue names that hash to distinct shards of `engine`, one per shard.
pub fn queue_per_shard(engine: &Engine) -> Vec<String> {
    let mut names = vec![String::new(); engine.shard_count()];
    let mut found = 0;
    for i in 0.. {
        let name = format!("bench-{i}");
        let shard = engine.shard_of(&name);
        if names[shard].is_empty() {
            names[shard] = name;
            found += 1;
            if found == names.len() {
                break;
            }
        }
    }
    names
}

/// An engine on a manual clock with `shards` shards and one roomy queue per
/// shard; returns the engine and the queue names.
pub fn engine_with_queues(shards: usize) -> (Engine, Vec<String>) {
    let engine = Engine::new(shards, Arc::new(ManualClock::new(1_700_000_000_000)));
    let names = queue_per_shard(&engine);
    for name in &names {
        let settings = QueueSettings {
            max_messages: 1 << 32,
            max_bytes: 64 << 30,
            ..QueueSettings::default()
        };
        engine.create_queue(name, settings).expect("queue");
    }
    (engine, names)
}
