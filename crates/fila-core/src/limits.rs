//! Every limit of SPEC §1–3 as a named constant (defined in `fila-limits`,
//! which the protocol publishes too).

pub use fila_limits::*;
