//! One switch between `std` and `loom` atomics.
//!
//! Everything in the crate that is shared between threads takes its atomics
//! from here, so that `RUSTFLAGS="--cfg loom"` puts the whole lock-free part of
//! the engine (the visible ring, the lease state word, the doorbell) under the
//! loom model checker without touching the code that uses it.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
