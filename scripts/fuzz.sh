#!/usr/bin/env bash
# Runs a cargo-fuzz target on the machine's stable toolchain.
#   scripts/fuzz.sh <target> [seconds]     targets: frame_decode, request_decode, wal_recover, store_decode, engine_model, sqs_request, azure_request, http_frame
# Installs cargo-fuzz when missing. fuzz/ is its own workspace (the root
# Cargo.toml excludes it); corpora and crash artifacts stay under fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${1:?usage: scripts/fuzz.sh <target> [seconds]}"
seconds="${2:-60}"
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
cd fuzz
cargo fuzz run --sanitizer none "$target" -- -max_total_time="$seconds" -print_final_stats=1
