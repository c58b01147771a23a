#!/usr/bin/env bash
# Measures the time to bring back a wiped node (docs/benchmarks.md): starts
# three nodes with scripts/cluster.sh, leaves N messages leased in a queue
# (the load generator's redelivery scenario with a 10-minute lease), kills a
# follower with SIGKILL, removes it, wipes its data directory, starts it
# empty with join = true under a new id (4: a node id is never used twice),
# adds it (`fila cluster add` says how long it took to hold the leader's
# log) and promotes it.
#   scripts/cluster-wiped.sh [N] [DIR]      (N: 100000, DIR: /tmp/fila-wiped)
# Uses the release binaries (built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-100000}"
dir="${2:-/tmp/fila-wiped}"
rm -rf "$dir"
mkdir -p "$dir"
[ -x target/release/fila-loadgen ] && [ -x target/release/fila ] && [ -x target/release/fila-server ] ||
    cargo build --release -p fila-server -p fila-cli -p fila-loadgen
fila() { target/release/fila --addr 127.0.0.1:7710 "$@"; }
FILA_SERVER=target/release/fila-server scripts/cluster.sh "$dir" > /dev/null 2>&1 &
cluster=$!
node=""
stop() {
    [ -n "$node" ] && kill "$node" 2>/dev/null || true
    kill "$cluster" 2>/dev/null || true
    wait 2>/dev/null || true
}
trap stop EXIT
# Up once the cluster's map places a queue (its partitions made and led).
for _ in $(seq 200); do fila queue create loadgen > /dev/null 2>&1 && break; sleep 0.1; done
target/release/fila-loadgen --addr 127.0.0.1:7710 --scenario redelivery --consumers 1 \
    --visibility 600000 --messages "$n" --duration 60 --quiet > /dev/null
fila queue stats loadgen | grep "^in_flight"
leader=$(fila --json cluster status | sed 's/.*"leader":\([0-9]*\).*/\1/')
victim=3
[ "$leader" = 3 ] && victim=2
pid=$(pgrep -f "$dir/node-$victim.toml")
kill -9 "$pid"
while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
fila cluster remove "$victim"
rm -rf "$dir/node-$victim"
# The same machine (addresses, directory), a new id: node 4.
sed -e 's/^\[cluster\]$/[cluster]\njoin = true/' -e 's/^node_id = .*/node_id = 4/' \
    -e "s/^id = $victim\$/id = 4/" "$dir/node-$victim.toml" > "$dir/node-4.toml"
target/release/fila-server --config "$dir/node-4.toml" > "$dir/node-4.log" 2>&1 &
node=$!
fila cluster add 4 --peer "127.0.0.1:77${victim}1" --client "127.0.0.1:77${victim}0"
fila cluster promote 4
