#!/usr/bin/env bash
# The side-by-side comparison: fila and its peers (Redis Streams, beanstalkd,
# NATS JetStream), each in memory and in its persistent configurations, on
# 127.0.0.1 of this machine, with the same load generator (fila-loadgen),
# interleaved (every system once, then again) so drift shows. Writes the
# tables into docs/benchmarks.md between the "compare" markers and keeps the
# raw JSON under target/compare/.
#
#   scripts/compare.sh            # the full run (about 30 minutes)
#   scripts/compare.sh --quick    # a short one, to see that it works
#
# Installs the peers from Debian packages when they are missing (apt-get,
# as root or through sudo). Stops everything it started, also on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=false
[ "${1:-}" = "--quick" ] && quick=true
if $quick; then
  MESSAGES=50000; DURATION=10; RATE_SECS=3; ROUNDS=1; QUEUES=1000; SECS=3
else
  MESSAGES=500000; DURATION=60; RATE_SECS=10; ROUNDS=2; QUEUES=10000; SECS=10
fi
RATE=10000

need() { command -v "$1" >/dev/null 2>&1; }
if ! need redis-server || ! need beanstalkd || ! { need nats-server || [ -x /usr/sbin/nats-server ]; } || ! need python3; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q redis-server beanstalkd nats-server python3
fi
NATS=$(command -v nats-server || echo /usr/sbin/nats-server)

cargo build --release -q -p fila-server -p fila-loadgen
LOADGEN=target/release/fila-loadgen

tmp=$(mktemp -d /tmp/fila-compare.XXXXXX)
out=target/compare
mkdir -p "$out"
results="$out/results.jsonl"
: > "$results"
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}


# start SYSTEM MODE: starts one server; sets PORT, PID, ARGS (for the loadgen)
start() {
  local system=$1 mode=$2 dir="$tmp/$1-$2"
  rm -rf "$dir"; mkdir -p "$dir"
  PORT=$(free_port)
  case "$system" in
    fila)
      target/release/fila-server --listen "127.0.0.1:$PORT" --metrics-listen off --sqs-listen off --azure-listen off --console-listen off \
        --sync "$mode" --data-dir "$dir" --log warn >"$dir/log" 2>&1 &
      ARGS=(--system fila --label "$mode") ;;
    redis)
      local persist=(--save "" --appendonly no)
      [ "$mode" != none ] && persist=(--save "" --appendonly yes --appendfsync "$mode")
      redis-server --port "$PORT" --bind 127.0.0.1 --dir "$dir" "${persist[@]}" \
        >"$dir/log" 2>&1 &
      ARGS=(--system redis --label "AOF $mode") ;;
    beanstalkd)
      local persist=()
      [ "$mode" = binlog ] && persist=(-b "$dir" -f 0)
      beanstalkd -l 127.0.0.1 -p "$PORT" "${persist[@]}" >"$dir/log" 2>&1 &
      ARGS=(--system beanstalkd --label "$mode") ;;
    nats)
      "$NATS" -a 127.0.0.1 -p "$PORT" -js -sd "$dir" >"$dir/log" 2>&1 &
      ARGS=(--system nats --nats-storage "$mode") ;;
  esac
  PID=$!
  pids+=("$PID")
  wait_port "$PORT"
}

stop() {
  kill "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
}

systems=("fila none" "fila interval" "fila always" "redis none" "redis everysec" "redis always"
         "beanstalkd none" "beanstalkd binlog" "nats memory" "nats file")

for round in $(seq 1 "$ROUNDS"); do
  echo "round $round: loopback floor" >&2
  floor=$("$LOADGEN" --scenario floor --producers 4 --depth 8 --size 2400 --duration 3 --json)
  echo "{\"round\":$round,\"floor\":$floor}" >> "$results"
  for s in "${systems[@]}"; do
    set -- $s
    echo "round $round: $1 $2" >&2
    start "$1" "$2"
    lifecycle=("$LOADGEN" --addr "127.0.0.1:$PORT" "${ARGS[@]}" --server-pid "$PID" --json
               --scenario lifecycle --producers 4 --consumers 4 --size 100 --batch 20
               --messages "$MESSAGES" --duration "$DURATION")
    fixed=("$LOADGEN" --addr "127.0.0.1:$PORT" "${ARGS[@]}" --server-pid "$PID" --json
           --scenario fixed-rate --rate "$RATE" --producers 4 --consumers 4 --size 100 --batch 1
           --messages $((RATE * RATE_SECS)) --duration $((RATE_SECS + 30)))
    common=("$LOADGEN" --addr "127.0.0.1:$PORT" "${ARGS[@]}" --server-pid "$PID" --json
            --size 100 --batch 20)
    fan_in=("${common[@]}" --scenario fan-in --producers 16 --consumers 1
            --messages "$MESSAGES" --duration "$DURATION")
    many_queues=("${common[@]}" --scenario many-queues --queues "$QUEUES" --producers 4
                 --consumers 4 --messages "$MESSAGES" --duration "$DURATION")
    redelivery=("${common[@]}" --scenario redelivery --producers 4 --consumers 4
                --messages 100000 --visibility 1000 --duration "$SECS")
    idle=("${common[@]}" --scenario long-poll-idle --waiters 10000 --duration "$SECS")
    # What each system runs (docs/benchmarks.md says why the others do not).
    case "$1" in
      fila) cmds=(lifecycle fixed fan_in many_queues redelivery idle) ;;
      redis) cmds=(lifecycle fixed fan_in many_queues) ;;
      *) cmds=(lifecycle fixed fan_in redelivery) ;;
    esac
    for cmd in "${cmds[@]}"; do
      declare -n c=$cmd
      if json=$("${c[@]}" 2>"$tmp/err"); then
        echo "{\"round\":$round,\"system\":\"$1 ($2)\",\"mode\":\"$2\",\"report\":$json}" >> "$results"
      else
        echo "  $cmd failed: $(tail -1 "$tmp/err")" >&2
        echo "{\"round\":$round,\"mode\":\"$2\",\"failed\":\"$1 $cmd\"}" >> "$results"
      fi
      unset -n c
    done
    stop
  done
done

machine="$(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
machine="$machine, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), Linux $(uname -r)"
commit=$(git rev-parse --short HEAD)
versions="$(redis-server --version | awk '{print $1, $3}'), beanstalkd $(beanstalkd -v | awk '{print $2}'), nats-server $("$NATS" --version | awk '{print $NF}')"
python3 scripts/compare_report.py "$results" docs/benchmarks.md \
  "$machine" "$commit" "$versions" "$MESSAGES" "$RATE" "$RATE_SECS" "$ROUNDS" "$QUEUES" "$SECS"
echo "tables written to docs/benchmarks.md; raw results in $results" >&2
