# Sourced by the benchmark scripts (compare.sh, sync-bench.sh,
# cluster-goals.sh): the servers they start, stopped on exit or Ctrl-C with
# their temporary directory ($tmp, set before sourcing), waiting for a port,
# and the CPU time of processes.
pids=()
cleanup() {
  for p in "${pids[@]:-}"; do
    [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_port PORT: until something listens on 127.0.0.1:PORT (at most 20 s).
wait_port() {
  for _ in $(seq 1 400); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "nothing listens on port $1" >&2
  return 1
}

# cpu_ticks PID...: the user and system clock ticks of them all (/proc).
cpu_ticks() {
  local sum=0
  for p in "$@"; do
    read -r -a f < "/proc/$p/stat"
    sum=$((sum + f[13] + f[14]))
  done
  echo "$sum"
}
