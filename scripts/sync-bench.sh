#!/usr/bin/env bash
# Two builds of fila-server side by side where a log's sync is the cost: one
# durable node (`--sync always`) running the lifecycle and a fixed rate, and a
# 3-node cluster of one partition running the lifecycle, the two builds
# interleaved round by round, with one put at a time too (each waits for its
# sync); prints one line a run (msg/s, put and end-to-end p50/p99 in µs,
# server CPU µs a message where measured):
#
#   scripts/sync-bench.sh BIN_A BIN_B [ROUNDS] [SEGMENT_BYTES]
#
# BIN_A, BIN_B: fila-server binaries (say one built from the commit before a
# change, one after). SEGMENT_BYTES (default 4 MiB, --segment-bytes) is small
# so that a run spends most of its time past its log's first segment.
# MESSAGES (300000) and CLUSTER_MESSAGES (100000) size the lifecycles.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n 2,14p "$0"; exit 2; }
A=$(realpath "$1"); B=$(realpath "$2"); ROUNDS=${3:-3}; SEG=${4:-4194304}
MESSAGES=${MESSAGES:-300000}; CLUSTER_MESSAGES=${CLUSTER_MESSAGES:-100000}
[ -n "${FILA_LOADGEN:-}" ] || cargo build --release -q -p fila-loadgen
LOADGEN=$(realpath "${FILA_LOADGEN:-target/release/fila-loadgen}")
tmp=$(mktemp -d /tmp/fila-sync-bench.XXXXXX)
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh


# One JSON report as a line: msg/s, put and end-to-end p50/p99, server CPU.
line() {
  python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
s = r.get("server") or {}
p, e = r["put_us"], r["end_to_end_us"]
print("%-3s %-10s %9.0f msg/s  put p50 %6d p99 %6d µs  end-to-end p50 %6d p99 %6d µs  cpu %s µs/msg" % (
    sys.argv[1], sys.argv[2], r["messages_per_s"], p["p50"], p["p99"], e["p50"], e["p99"],
    "%.2f" % s["cpu_us_per_message"] if s else "-"))' "$@"
}

one_node() { # BIN LABEL
  rm -rf "$tmp/node"
  "$1" --listen 127.0.0.1:7790 --sync always --data-dir "$tmp/node" --segment-bytes "$SEG" \
      --metrics-listen off --sqs-listen off --azure-listen off --console-listen off --log warn &
  local pid=$!; pids+=("$pid")
  wait_port 7790
  "$LOADGEN" --addr 127.0.0.1:7790 --messages "$MESSAGES" --server-pid "$pid" --json --quiet \
      | line "$2" lifecycle
  # One put at a time, each answered after its sync: the sync's latency.
  "$LOADGEN" --addr 127.0.0.1:7790 --server-pid "$pid" --json --quiet --queue serial \
      --producers 1 --consumers 1 --depth 1 --batch 1 --messages 10000 | line "$2" one-by-one
  "$LOADGEN" --addr 127.0.0.1:7790 --server-pid "$pid" --json --quiet --queue fixed \
      --scenario fixed-rate --rate 5000 --size 4096 --producers 4 --consumers 4 \
      --batch 1 --messages 50000 --duration 10 | line "$2" rate-5000
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

cluster() { # BIN LABEL
  rm -rf "$tmp/cluster"
  FILA_SERVER="$1" FILA_ARGS="--segment-bytes $SEG --log warn" scripts/cluster.sh "$tmp/cluster" \
      > /dev/null 2>&1 &
  local pid=$!; pids+=("$pid")
  for port in 7710 7720 7730; do wait_port "$port"; done
  # The three nodes' CPU (user + system ticks) over the run, per message.
  local nodes; nodes=$(pgrep -f "$tmp/cluster/node-" | tr '\n' ' ')
  local before; before=$(cpu_ticks $nodes)
  local report; report=$("$LOADGEN" --addr 127.0.0.1:7710,127.0.0.1:7720,127.0.0.1:7730 \
      --messages "$CLUSTER_MESSAGES" --json --quiet)
  local after; after=$(cpu_ticks $nodes)
  echo "$report" | line "$2" cluster
  echo "$2   cluster    nodes' CPU $(python3 -c "import sys; t=($after-$before)/$(getconf CLK_TCK); print('%.2f s, %.2f µs/msg' % (t, t*1e6/$CLUSTER_MESSAGES))")"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}


for round in $(seq 1 "$ROUNDS"); do
  echo "round $round"
  one_node "$A" A; one_node "$B" B
  cluster "$A" A; cluster "$B" B
done
