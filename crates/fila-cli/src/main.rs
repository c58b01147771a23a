//! `fila`: the command-line tool (in progress).
fn main() {}
