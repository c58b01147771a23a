#!/usr/bin/env bash
# Recorded in docs/benchmarks.md ("The console's own thread, measured").
# Needs release builds:
#   cargo build --release -p fila-server -p fila-loadgen -p fila-cli
# What one console page costs the server (500 queues on the overview; a
# message of 256 KiB on its detail page), and the binary protocol's p99 at
# a fixed 5 000 msg/s with and without a client fetching pages back to
# back over one keep-alive connection.
set -u
cd "$(dirname "$0")/.."
S=target/release/fila-server L=target/release/fila-loadgen F=target/release/fila
D=/tmp/bench/console-pages
rm -rf $D; mkdir -p $D/data; chmod 700 $D/data
$S --listen 127.0.0.1:7871 --sqs-listen off --azure-listen off --metrics-listen off --console-listen 127.0.0.1:9371 \
    --sync none --data-dir $D/data --log warn 2>$D/server.err & PID=$!
trap 'kill $PID 2>/dev/null' EXIT
sleep 1
A="--addr 127.0.0.1:7871"
for i in $(seq 1 500); do $F $A queue create q$i >/dev/null; done
$F $A queue create big >/dev/null
head -c 196000 /dev/urandom | base64 -w0 > $D/payload
for i in $(seq 1 10); do $F $A put big --file $D/payload >/dev/null; done
cat > $D/pages.py <<'PY'
import http.client, sys, time
secs, paths = float(sys.argv[1]), sys.argv[2:]
c = http.client.HTTPConnection("127.0.0.1", 9371)
end, n = time.time() + secs, 0
while time.time() < end:
    for p in paths:
        c.request("GET", p); c.getresponse().read(); n += 1
print(n)
PY
cpu() { awk '{print $14+$15}' /proc/$PID/stat; }
for p in / /queues/big /queues/big/messages /queues/big/messages/1; do
  c0=$(cpu); n=$(python3 $D/pages.py 5 $p); c1=$(cpu)
  echo "page $p: $n in 5 s, $(( (c1 - c0) * 10000 / n )) us of server CPU each"
done
rate() {
  $L --system fila --addr 127.0.0.1:7871 --queue rate --scenario fixed-rate --rate 5000 \
      --duration 15 --producers 4 --consumers 4 --batch 1 --depth 1 --ack-depth 0 --size 100 \
      --server-pid $PID --json --quiet \
    | python3 -c 'import json,sys; r=json.load(sys.stdin)["end_to_end_us"]; print("p50", r["p50"], "p99", r["p99"])'
}
for r in 1 2 3; do
  echo "round $r quiet: $(rate)"
  python3 $D/pages.py 16 / /queues/big/messages/1 > $D/pages.n & C=$!
  echo "round $r pages back to back: $(rate)"
  wait $C; echo "  pages fetched: $(cat $D/pages.n)"
done
