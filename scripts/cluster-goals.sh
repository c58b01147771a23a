#!/usr/bin/env bash
# Issue 41's cluster figures against one durable node, the runs interleaved
# round by round (docs/benchmarks.md, "Issue 41's figures"): prints one line
# a run (msg/s, end-to-end p50/p99 in µs, the servers' CPU a message):
#
#   scripts/cluster-goals.sh [BIN] [ROUNDS] [BEFORE]
#
# - aggregate: 3 queues, 32 consumers (`--scenario many-queues`) on one
#   durable node (`--sync always`) and on 3 nodes of 3 partitions, each
#   partition of 3 replicas and led by its own node where the map placed it;
# - rate-5000: a fixed 5 000 msg/s of 4 KiB messages on one durable node and
#   on 3 nodes of one partition: the end-to-end p99 is the figure.
# BIN: a fila-server release binary (default target/release/fila-server).
# MESSAGES (300000) sizes the aggregate runs; SEGMENT_BYTES (4 MiB) the logs.
#
# With BEFORE (an earlier build's binary), each round compares the two
# instead ("A request that finds the engine taken waits on its loop"): one
# durable node (BEFORE) for the ratio, then the lifecycle of 600 000
# messages on 3 nodes of one partition (`--queues 1 --consumers 32`) and
# the aggregate above, each on BEFORE and on BIN, which first alternating
# round by round.
#
# MODE=rate: the rate-5000 run on 3 nodes of one partition only, on BIN,
# BEFORE and the binaries in EXTRA (space-separated), their order rotating
# round by round ("One Raft log per node", the p99 comparison).
# MODE=six: one durable node and 3 nodes of 3 and of 6 partitions, each
# with 6 queues (`--queues 6`), the two cluster shapes alternating ("What
# using both of a node's loops would give").
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-target/release/fila-server}"); ROUNDS=${2:-2}
BEFORE=${3:+$(realpath "$3")}
MESSAGES=${MESSAGES:-300000}; SEG=${SEGMENT_BYTES:-4194304}
[ -n "${FILA_LOADGEN:-}" ] || cargo build --release -q -p fila-loadgen
LOADGEN=$(realpath "${FILA_LOADGEN:-target/release/fila-loadgen}")
tmp=$(mktemp -d /tmp/fila-cluster-goals.XXXXXX)
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
NODES=127.0.0.1:7710,127.0.0.1:7720,127.0.0.1:7730
AGGREGATE=(--scenario many-queues --queues 3 --consumers 32 --messages "$MESSAGES")
LIFECYCLE=(--queues 1 --messages 600000 --consumers 32)
RATE=(--queue fixed --scenario fixed-rate --rate 5000 --size 4096 --producers 4 --consumers 4
      --batch 1 --messages 50000 --duration 10)


# One run: LABEL PIDS ADDR ARGS...; the servers' CPU over it, per message.
run() {
  local label=$1 pids_of=$2 addr=$3; shift 3
  local before; before=$(cpu_ticks $pids_of)
  local report; report=$("$LOADGEN" --addr "$addr" --json --quiet "$@")
  local after; after=$(cpu_ticks $pids_of)
  echo "$report" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
e = r["end_to_end_us"]
cpu = (int(sys.argv[3]) - int(sys.argv[2])) / int(sys.argv[4]) * 1e6 / r["consumed"]
print("%-28s %9.0f msg/s  end-to-end p50 %7d p99 %7d µs  cpu %.2f µs/msg" % (
    sys.argv[1], r["messages_per_s"], e["p50"], e["p99"], cpu))' "$label" "$before" "$after" "$(getconf CLK_TCK)"
}

# Waits until nothing listens on the cluster's ports (the last run's nodes
# are gone).
ports_free() {
  for _ in $(seq 1 100); do
    ss -ltn | grep -q ':77[123][0-3] ' || return 0
    sleep 0.2
  done
  echo "the cluster's ports stayed taken" >&2; return 1
}

one_node() { # LABEL ARGS...
  rm -rf "$tmp/node"
  "$BIN" --listen 127.0.0.1:7790 --sync always --data-dir "$tmp/node" --segment-bytes "$SEG" \
      --metrics-listen off --sqs-listen off --azure-listen off --console-listen off --log warn &
  local pid=$!; pids+=("$pid")
  wait_port 7790
  local label=$1; shift
  run "$label" "$pid" 127.0.0.1:7790 "$@"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

cluster() { # PARTITIONS LABEL ARGS...
  ports_free
  rm -rf "$tmp/cluster"
  FILA_PARTITIONS=$1 FILA_SERVER="$BIN" FILA_ARGS="--segment-bytes $SEG --log warn" \
      scripts/cluster.sh "$tmp/cluster" > /dev/null 2>&1 &
  local pid=$!; pids+=("$pid")
  for port in 7710 7720 7730; do wait_port "$port"; done
  # Until the cluster serves (its metadata leader elected, the map made).
  for _ in $(seq 1 60); do
    "$LOADGEN" --addr "$NODES" --queue warm --messages 100 --quiet > /dev/null 2>&1 && break
    sleep 0.5
  done
  local nodes; nodes=$(pgrep -f "$tmp/cluster/node-" | tr '\n' ' ')
  local label=$2; shift 2
  run "$label" "$nodes" "$NODES" "$@"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

if [ "${MODE:-}" = rate ]; then
  # shellcheck disable=SC2206
  bins=("$BIN" ${BEFORE:+"$BEFORE"} ${EXTRA:-})
  for round in $(seq 1 "$ROUNDS"); do
    echo "round $round"
    for k in "${!bins[@]}"; do
      BIN=${bins[$(( (k + round - 1) % ${#bins[@]} ))]}
      cluster 1 "$(basename "$BIN"): 1 partition, 5000" "${RATE[@]}"
    done
  done
  exit 0
fi

if [ "${MODE:-}" = six ]; then
  SIX=(--scenario many-queues --queues 6 --consumers 32 --messages "$MESSAGES")
  for round in $(seq 1 "$ROUNDS"); do
    echo "round $round"
    one_node "one node, 6 queues" "${SIX[@]}"
    order=(3 6); [ $((round % 2)) -eq 0 ] && order=(6 3)
    for parts in "${order[@]}"; do
      cluster "$parts" "3 nodes × $parts partitions, 6 queues" "${SIX[@]}"
    done
  done
  exit 0
fi

if [ -n "$BEFORE" ]; then
  AFTER=$BIN
  for round in $(seq 1 "$ROUNDS"); do
    echo "round $round"
    BIN=$BEFORE; one_node "one node, lifecycle" "${LIFECYCLE[@]}"
    # Which goes first alternates: a run right after another measured up
    # to a quarter faster with the same binary both times.
    order=(before after); [ $((round % 2)) -eq 0 ] && order=(after before)
    for parts in 1 3; do
      args=("${LIFECYCLE[@]}"); [ "$parts" = 3 ] && args=("${AGGREGATE[@]}")
      for which in "${order[@]}"; do
        if [ "$which" = before ]; then BIN=$BEFORE; else BIN=$AFTER; fi
        cluster "$parts" "$which: $parts partition(s)" "${args[@]}"
      done
    done
  done
  exit 0
fi

for round in $(seq 1 "$ROUNDS"); do
  echo "round $round"
  one_node "one node, aggregate" "${AGGREGATE[@]}"
  cluster 3 "3 nodes × 3 partitions" "${AGGREGATE[@]}"
  one_node "one node, rate-5000" "${RATE[@]}"
  cluster 1 "3 nodes × 1 partition, 5000" "${RATE[@]}"
done
