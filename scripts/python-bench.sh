#!/usr/bin/env bash
# Recorded in docs/benchmarks.md ("The Python client against redis-py").
# fila's Python client and redis-py on Redis 7 Streams, the lifecycle of
# benches/python/lifecycle.py, interleaved rounds on one machine: fila with
# --sync none, Redis with no persistence. Needs a release build of the
# server, redis-server (Debian: apt-get install redis-server) and a Python
# with redis-py (pip install redis):
#   cargo build --release -p fila-server
#   scripts/python-bench.sh [ROUNDS] [MESSAGES] [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3} messages=${2:-200000} py=${3:-python3}
dir=$(mktemp -d /tmp/python-bench.XXXXXX)
mkdir -m 700 "$dir/data"
target/release/fila-server --listen 127.0.0.1:7881 --sqs-listen off --azure-listen off --metrics-listen off \
    --console-listen off --sync none --data-dir "$dir/data" --log warn 2>"$dir/fila.log" & fila=$!
redis-server --port 6391 --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
    >"$dir/redis.log" 2>&1 & redis=$!
trap 'kill $fila $redis 2>/dev/null; rm -rf "$dir"' EXIT
sleep 1
echo "# $(redis-server --version | awk '{print $1, $3}'), redis-py $("$py" -c 'import redis; print(redis.__version__)'), $("$py" --version)"
for r in $(seq 1 "$rounds"); do
    for mode in async threads; do
        for sys in fila redis; do
            port=7881 pid=$fila
            [ $sys = redis ] && port=6391 pid=$redis
            echo "round $r $(PYTHONPATH=clients/python/src "$py" benches/python/lifecycle.py --system $sys \
                --mode $mode --addr 127.0.0.1:$port --server-pid $pid --messages "$messages")"
        done
    done
done
