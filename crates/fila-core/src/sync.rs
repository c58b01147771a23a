//! One switch between `std` and `loom` atomics.
//!
//! What in the crate is shared between threads without a lock takes its
//! atomics from here, so that `RUSTFLAGS="--cfg loom"` puts it (the
//! doorbell event loops wake each other with) under the loom model checker
//! without touching the code that uses it.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, Ordering};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, Ordering};
