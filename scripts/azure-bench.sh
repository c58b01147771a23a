#!/usr/bin/env bash
# The Azure Queue API's lifecycle against the binary protocol on the same
# server (docs/benchmarks.md, "The Azure Queue API's lifecycle"): three
# rounds alternating the binary lifecycle (puts of 20), the binary
# lifecycle with puts of one, and the Azure lifecycle (Put Message, Get
# Messages of 32, Delete Message), each on a fresh server with
# --sync always. Release builds first:
#
#   cargo build --release -p fila-server -p fila-loadgen
#   scripts/azure-bench.sh [rounds]
set -u
cd "$(dirname "$0")/.."
SERVER=target/release/fila-server
LOADGEN=target/release/fila-loadgen
DATA=$(mktemp -d)
trap 'rm -rf "$DATA"' EXIT
for r in $(seq 1 "${1:-3}"); do
  for door in binary binary1 azure; do
    rm -rf "$DATA/data"
    $SERVER --listen 127.0.0.1:7851 --metrics-listen off --sqs-listen off --console-listen off \
      --azure-listen 127.0.0.1:10051 --sync always --data-dir "$DATA/data" --log warn \
      > "$DATA/server.log" 2>&1 &
    PID=$!
    sleep 1
    case $door in
      binary) args=(--addr 127.0.0.1:7851 --messages 3000000);;
      binary1) args=(--addr 127.0.0.1:7851 --batch 1 --messages 300000);;
      azure) args=(--system azure --addr 127.0.0.1:10051 --messages 300000);;
    esac
    out=$($LOADGEN "${args[@]}" --duration 20 --server-pid $PID --quiet --scenario lifecycle \
      --size 100 --producers 4 --consumers 4 2>&1)
    echo "round $r $door: $(echo "$out" | grep -E 'msg/s' | head -1) | $(echo "$out" | grep -E '^server:')"
    kill $PID; wait $PID 2>/dev/null
  done
done
