//! What the journal shares between a shard's thread and the log writer,
//! from `fila_core::sync` (so that the journal's own code runs under the
//! loom model checker with `RUSTFLAGS="--cfg loom"`: `journal::loom_model`),
//! and the writer's handle, set once.

pub(crate) use fila_core::sync::{AtomicBool, AtomicU64, Bounded, Fifo, Ordering, Thread};

/// The writer's thread, set once.
#[cfg(not(loom))]
pub(crate) type WriterCell = std::sync::OnceLock<Thread>;

/// The writer's thread, set once (before any shard publishes).
#[cfg(loom)]
pub(crate) struct WriterCell(std::sync::Mutex<Option<Thread>>);

#[cfg(loom)]
impl WriterCell {
    pub(crate) fn new() -> WriterCell {
        WriterCell(std::sync::Mutex::new(None))
    }

    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn set(&self, thread: Thread) -> Result<(), Thread> {
        let mut cell = self.0.lock().unwrap();
        if cell.is_some() {
            return Err(thread);
        }
        *cell = Some(thread);
        Ok(())
    }

    pub(crate) fn get(&self) -> Option<Thread> {
        self.0.lock().unwrap().clone()
    }
}
