#!/usr/bin/env bash
# Runs the loom models where threads meet, through the code that runs:
#   - fila-core: the doorbell the event loops wake each other with;
#   - fila-store: the journal's publish / take / give-back and the writer's
#     wake-up signal, and the wait for the log (an answer let go at its
#     mark had its record synced);
#   - fila-server: the hand-off between loops, receipt operations on one
#     lease from two loops against the lease's end, through the posts, the
#     mailbox and the shard host; and a cluster node's answers held on a
#     loop until their entries commit, against the partition's committer
#     (fila_core::commits, server/held.rs, the mailbox's commit flag).
# In release mode and in their own target directory (loom changes what the
# crates' atomics and queues are: fila_core::sync). LOOM_MAX_PREEMPTIONS
# bounds the search so that the run takes a minute or two on two cores;
# raise it for a deeper search.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="--cfg loom ${RUSTFLAGS:-}"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
common=(--release --locked --target-dir target/loom)
cargo test -p fila-core "${common[@]}" --test loom_doorbell
cargo test -p fila-store "${common[@]}" --lib loom_model
cargo test -p fila-server "${common[@]}" --lib loom_model
