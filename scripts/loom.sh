#!/usr/bin/env bash
# Runs the loom model of the doorbell the event loops wake each other with
# (the hand-off queues themselves are crossbeam's ArrayQueue), in
# release mode and in their own target directory (loom changes what the
# crate's atomics are). LOOM_MAX_PREEMPTIONS bounds the search so that the
# run takes about a minute on two cores; raise it for a deeper search.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="--cfg loom ${RUSTFLAGS:-}"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
cargo test -p fila-core --release --locked --target-dir target/loom \
  --test loom_doorbell
