#!/usr/bin/env bash
# Starts a cluster of three fila-server nodes on this machine (docs/cluster.md)
# and stops them all on Ctrl-C:
#   scripts/cluster.sh [DIR]
# Each node's config, data directory and log are under DIR (default
# ./fila-cluster); the secret the nodes share is made once and kept there.
# Clients connect to any node: 127.0.0.1:7710, :7720, :7730 (a node that does
# not lead answers not_leader with the leader's address). Peers talk on
# :7711, :7721, :7731; the SQS API is on :7712, :7722, :7732 and the console on
# :7713, :7723, :7733 (a node that does not lead forwards their calls to the
# leader). A node may be killed and started again by hand:
#   target/release/fila-server --config DIR/node-2.toml
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-fila-cluster}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
# FILA_SERVER: a fila-server binary to run instead of building the release one.
# FILA_PARTITIONS: the cluster's partitions (1 unless set; fixed once it ran).
partitions="${FILA_PARTITIONS:-1}"
# FILA_REPLICAS: each partition's replicas (1, 3 or 5; 3 unless set).
replicas="${FILA_REPLICAS:-3}"
bin="${FILA_SERVER:-target/release/fila-server}"
# FILA_ARGS: more flags for every node (after --config, so they win).
read -r -a extra <<< "${FILA_ARGS:-}"
[ -n "${FILA_SERVER:-}" ] || cargo build --release -p fila-server
if [ ! -s "$dir/secret" ]; then
    (umask 077; head -c 24 /dev/urandom | base64 > "$dir/secret")
fi
secret="$(cat "$dir/secret")"
members=""
for i in 1 2 3; do
    members+="[[cluster.members]]
id = $i
peer = \"127.0.0.1:77${i}1\"
client = \"127.0.0.1:77${i}0\"
"
done
pids=()
stop() {
    kill "${pids[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
}
trap stop EXIT INT TERM
for i in 1 2 3; do
    (umask 077; cat > "$dir/node-$i.toml" <<TOML
listen = "127.0.0.1:77${i}0"
metrics_listen = "off"
sqs_listen = "127.0.0.1:77${i}2"
azure_listen = "127.0.0.1:77${i}4"
console_listen = "127.0.0.1:77${i}3"
data_dir = "$dir/node-$i"

[cluster]
node_id = $i
listen = "127.0.0.1:77${i}1"
secret = "$secret"
partitions = $partitions
replicas = $replicas
$members
TOML
)
    "$bin" --config "$dir/node-$i.toml" "${extra[@]}" > "$dir/node-$i.log" 2>&1 &
    pids+=($!)
done
echo "three nodes: clients at 127.0.0.1:7710, :7720, :7730, SQS at :7712, :7722, :7732, consoles at :7713, :7723, :7733 (logs in $dir); Ctrl-C stops them"
wait
