//! What the rule tests of one feature share: an engine on a manual clock
//! with queue `q`.

use std::sync::Arc;

use fila_core::{Engine, ManualClock, QueueSettings};

/// The manual clock's start.
pub const T0: u64 = 1_700_000_000_000;

/// An engine of two shards at [`T0`] with queue `q` made with `settings`,
/// and the clock that drives it.
pub fn engine(settings: QueueSettings) -> (ManualClock, Engine) {
    let clock = ManualClock::new(T0);
    let engine = Engine::new(2, Arc::new(clock.clone()));
    assert!(engine.create_queue("q", settings).unwrap());
    (clock, engine)
}
