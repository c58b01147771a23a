//! The protocol's limits, so that no client hard-codes them: the server
//! refuses anything past them with `invalid_argument` (docs/contract.md).
//! They are the engine's own (`fila-limits`).

pub use fila_limits::*;
