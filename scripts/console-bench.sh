#!/usr/bin/env bash
# Recorded in docs/benchmarks.md ("The web console"). Needs release builds:
#   cargo build --release -p fila-server -p fila-loadgen
# The lifecycle with and without a console viewer refreshing as fast as it can.
set -u
cd "$(dirname "$0")/.."
mkdir -p /tmp/bench/c
target/release/fila-server --listen 127.0.0.1:7852 --sqs-listen off --azure-listen off --metrics-listen off \
    --console-listen 127.0.0.1:7853 --sync none --data-dir /tmp/bench/c --log warn & P=$!
sleep 1
viewer() {  # one client, pages back to back: the overview and the queue's page
    local jar=/tmp/bench/jar n=0
    curl -s -c $jar -o /dev/null http://127.0.0.1:7853/
    while [ -e /tmp/bench/viewing ]; do
        curl -s -b $jar -o /dev/null http://127.0.0.1:7853/
        curl -s -b $jar -o /dev/null "http://127.0.0.1:7853/queues/$1"
        n=$((n + 2))
        [ "$2" = fast ] || sleep 2   # a browser: an open page refreshes every 2 s
    done
    echo "viewer pages: $n" >&2
}
run() {  # $1 queue, $2 with a viewer or not
    if [ "$2" != no ]; then touch /tmp/bench/viewing; viewer "$1" "$2" & V=$!; fi
    target/release/fila-loadgen --addr 127.0.0.1:7852 --server-pid $P --json --quiet \
        --scenario lifecycle --producers 4 --consumers 4 --batch 10 --depth 4 --ack-depth 1 \
        --size 100 --messages 1000000 --duration 60 --queue "$1" \
        | python3 -c 'import json,sys; r=json.load(sys.stdin); print(sys.argv[1], r["messages_per_s"], r["server"]["cpu_us_per_message"], r["end_to_end_us"]["p99"])' "$1 viewer=$2"
    if [ "$2" != no ]; then rm -f /tmp/bench/viewing; wait $V; fi
}
for i in 1 2 3 4 5; do run plain$i no; run browser$i browser; run fast$i fast; done
kill $P; wait $P 2>/dev/null
