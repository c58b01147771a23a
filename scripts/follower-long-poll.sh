#!/usr/bin/env bash
# A waiting SQS ReceiveMessage on a cluster's follower (docs/benchmarks.md,
# "A follower's long poll, held by the leader"): starts scripts/cluster.sh with
# BIN, then runs scripts/follower_long_poll.py against the leader's and a
# follower's SQS endpoints (how late a follower's long poll gets a message sent
# through the leader; the three nodes' CPU while 50 idle long polls wait):
#
#   scripts/follower-long-poll.sh [BIN]
#
# Needs the venv of scripts/sqs-tests.sh (target/sqs-venv, with boto3) and the
# release load generator.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-target/release/fila-server}")
[ -x target/sqs-venv/bin/python ] || { echo "run scripts/sqs-tests.sh once first (target/sqs-venv)" >&2; exit 2; }
[ -x target/release/fila-loadgen ] || cargo build --release -q -p fila-loadgen
tmp=$(mktemp -d /tmp/fila-long-poll.XXXXXX)
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
FILA_SERVER="$BIN" FILA_ARGS="--log warn" scripts/cluster.sh "$tmp/cluster" > "$tmp/out.log" 2>&1 &
pids+=("$!")
for port in 7710 7720 7730; do wait_port "$port"; done
# Until the cluster serves; the load generator names the leader when it is
# not the first node it was given.
leader=""
for _ in $(seq 1 60); do
  if out=$(target/release/fila-loadgen --addr 127.0.0.1:7710,127.0.0.1:7720,127.0.0.1:7730 \
      --queue warm --messages 100 --json --quiet 2>&1); then
    leader=$(echo "$out" | grep -o "node [0-9] leads" | grep -o "[0-9]" || true)
    break
  fi
  sleep 0.5
done
leader=${leader:-1}
follower=$((leader % 3 + 1))
nodes=$(pgrep -f "$tmp/cluster/node-" | tr '\n' ',' | sed 's/,$//')
echo "leader node $leader, follower node $follower"
target/sqs-venv/bin/python scripts/follower_long_poll.py "77${leader}2" "77${follower}2" "$nodes"
