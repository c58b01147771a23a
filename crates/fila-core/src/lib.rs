//! # fila-core: the engine
//!
//! fila-core owns queues, messages, receipts, shards, the timing wheel, the
//! visible ring and the clock. It knows nothing of sockets or wire formats:
//! tests, benches and embedders call the typed API of [`Engine`]; a server
//! splits the engine into [`Owner`]s, one per thread, and calls the same
//! API on them with no lock.
//!
//! ## Shape
//!
//! * [`Engine`] hashes each queue name to one [`Shard`]. A call locks only
//!   that shard; there is no global lock.
//! * An [`Owner`] holds the shards one thread owns ([`Engine::into_owners`]):
//!   its calls take `&mut self`, run at most a budget of due timers first
//!   ([`Owner::advance`] runs the rest between turns), leave dead
//!   letters for other owners' shards in [`Owner::take_transit`] and
//!   completed parked receives in [`Owner::take_completions`], and count
//!   the changes they logged ([`Owner::changes`]: an answer waits for the
//!   log exactly when its call made one).
//! * A [`Shard`] keeps its messages in a slab of compact records, each with a
//!   [`lease::StateWord`] (state, lease generation, delivery count) that only
//!   its transitions change. A [`Receipt`] carries the generation, so a
//!   receipt whose lease ended never wins again, and a SipHash tag under the
//!   engine's secret [`ReceiptKey`], so no client can forge one.
//! * [`EngineLimits`] bound the stored bytes and the number of queues of the
//!   whole engine; shards reserve against them without a lock.
//! * Visible messages wait in [`ring::ReadyRing`]s, one per channel, served
//!   round-robin across channels. One thread at a time touches a shard, so
//!   the ring and the state word are plain data; the only lock-free protocol
//!   of the crate is the [`doorbell::Doorbell`] event loops wake each other
//!   by (loom-checked). [`sync`] is the one switch between `std` and `loom`
//!   for what other crates share between threads too (the store's journal,
//!   the server's mailboxes).
//! * [`commits`] holds a cluster node's answers until their Raft entries
//!   commit: the board a leadership's committer notes outcomes on, and the
//!   flags that tell the loops holding answers (loom-checked through the
//!   server's loops).
//! * One [`wheel::TimingWheel`] per shard holds lease ends, delays and
//!   schedules, expiries, move-task ticks (redrives and moves out of a
//!   dead-letter target, [`MoveTask`]) and long-poll deadlines.
//! * Time comes from a [`Clock`]; tests use [`ManualClock`] and never sleep.
//! * Every durable state change is an [`event::Event`] given to an optional
//!   [`event::EventSink`], the hook for a write-ahead log;
//!   [`Engine::export`] and [`Engine::restore`] save and rebuild the whole
//!   state as [`event::QueueImage`]s (snapshots, recovery).
//!
//! ## Example
//!
//! ```
//! use std::sync::Arc;
//! use fila_core::{Address, Engine, ManualClock, NewMessage, QueueSettings, ReceiveOptions};
//!
//! let clock = ManualClock::new(1_700_000_000_000);
//! let engine = Engine::new(2, Arc::new(clock.clone()));
//! engine.create_queue("jobs", QueueSettings::default()).unwrap();
//! engine.put("jobs", vec![NewMessage::new("hello")]).unwrap();
//! let got = engine.receive_now(Address::queue("jobs"), &ReceiveOptions::now(10)).unwrap();
//! assert_eq!(&got[0].payload[..], b"hello");
//! let receipt = got[0].receipt.unwrap();
//! engine.delete(Address::queue("jobs"), &[receipt]).unwrap()[0].as_ref().unwrap();
//! ```
#![cfg_attr(not(loom), forbid(unsafe_code))]

mod budget;
mod clock;
pub mod commits;
pub mod doorbell;
mod engine;
mod error;
pub mod event;
pub mod lease;
pub mod limits;
mod move_task;
mod owner;
pub mod payload;
mod receipt;
mod retry;
pub mod ring;
mod settings;
mod shard;
pub mod sync;
mod types;
pub mod wheel;

pub use budget::{
    DiskState, EngineLimits, CHANNEL_OVERHEAD_BYTES, DEAD_LETTER_OVERHEAD_BYTES,
    MESSAGE_OVERHEAD_BYTES,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use engine::{page_of, Engine};
pub use error::{Error, ErrorKind};
pub use owner::{
    check_batch, owner_of_shard, precheck_create, precheck_update, shard_of, Owner, Totals,
    Transit, EARLY_MOVES_PER_TURN,
};
pub use payload::Payload;
pub use receipt::{Receipt, ReceiptKey, RECEIPT_LEN};
pub use shard::{
    content_key, dedup_key, Completion, Notify, Received, Shard, WaitId, Wake, DEDUP_ENTRY_BYTES,
    GROUPED_MESSAGE_BYTES, GROUP_OVERHEAD_BYTES,
};
pub use types::*;

/// The README's examples compile and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
