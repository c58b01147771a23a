#!/usr/bin/env bash
# Where a cluster's syncs go (docs/benchmarks.md, "A cluster node's syncs"):
# starts 3 nodes of PARTITIONS partitions (scripts/cluster.sh, 4 MiB
# segments), runs the load generator's lifecycle over them — 3 queues with
# 32 consumers (`--scenario many-queues`) for 3 partitions, one queue for
# one — and counts the nodes' fdatasync calls and context switches (`perf
# stat`) and their samples by thread (`perf record`) over the run; then the
# same on one durable node (`--sync always`):
#   scripts/cluster-syncs.sh [BIN] [PARTITIONS]
# Needs perf (and the syscall tracepoints: run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-target/release/fila-server}"); PARTS=${2:-3}
[ -n "${FILA_LOADGEN:-}" ] || cargo build --release -q -p fila-loadgen
LOADGEN=$(realpath "${FILA_LOADGEN:-target/release/fila-loadgen}")
tmp=$(mktemp -d /tmp/fila-cluster-syncs.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
if [ "$PARTS" = 3 ]; then
  ARGS=(--scenario many-queues --queues 3 --consumers 32 --messages 300000)
else
  ARGS=(--queues 1 --consumers 32 --messages 300000)
fi

# One measured run: LABEL PIDS(comma-separated) ADDR.
measure() {
  local label=$1 of=$2 addr=$3
  perf stat -e syscalls:sys_enter_fdatasync,context-switches -p "$of" -o "$tmp/stat" &
  local stat=$!
  perf record -F 499 -o "$tmp/perf.data" -p "$of" > /dev/null 2>&1 &
  local rec=$!
  sleep 0.5
  local report; report=$("$LOADGEN" --addr "$addr" --json --quiet "${ARGS[@]}")
  kill -INT "$stat" "$rec"; wait "$stat" "$rec" 2>/dev/null || true
  local syncs; syncs=$(awk '/fdatasync/ {gsub(",", "", $1); print $1}' "$tmp/stat")
  local switches; switches=$(awk '/context-switches/ {gsub(",", "", $1); print $1}' "$tmp/stat")
  echo "$report" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
n = r["consumed"]
print("%-22s %8.0f msg/s  fdatasync %6d (%.4f a message)  context switches %6d (%.2f a message)" % (
    sys.argv[1], r["messages_per_s"], int(sys.argv[2]), int(sys.argv[2]) / n,
    int(sys.argv[3]), int(sys.argv[3]) / n))' "$label" "$syncs" "$switches"
  perf report -i "$tmp/perf.data" --sort comm --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -6
}

FILA_PARTITIONS=$PARTS FILA_SERVER="$BIN" FILA_ARGS="--segment-bytes 4194304 --log warn" \
    scripts/cluster.sh "$tmp/cluster" > /dev/null 2>&1 &
pids+=("$!")
NODES=127.0.0.1:7710,127.0.0.1:7720,127.0.0.1:7730
# Until the cluster serves (its metadata leader elected, the map made).
for _ in $(seq 1 60); do
  "$LOADGEN" --addr "$NODES" --queue warm --messages 100 --quiet > /dev/null 2>&1 && break
  sleep 0.5
done
nodes=$(pgrep -f "$tmp/cluster/node-" | paste -sd,)
measure "3 nodes, $PARTS partition(s)" "$nodes" "$NODES"
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true
pids=()

"$BIN" --listen 127.0.0.1:7790 --sync always --data-dir "$tmp/node" --segment-bytes 4194304 \
    --metrics-listen off --sqs-listen off --azure-listen off --console-listen off --log warn &
pids+=("$!")
for _ in $(seq 1 100); do ss -ltn | grep -q ':7790 ' && break; sleep 0.1; done
measure "one durable node" "${pids[0]}" 127.0.0.1:7790
