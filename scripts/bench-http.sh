#!/usr/bin/env bash
# HTTP increment throughput and latency, async vs sync durability, measured
# side by side in one run with wrk (50 connections) against one counterd.
#
#   scripts/bench-http.sh [ROUNDS] [SECONDS]
#
# Each round runs async then sync (alternating order every round) on the
# same server; the ratio sync/async is printed per round and as a median.
# Needs wrk (apt-get install wrk). counterd and wrk share the machine's cores.
# COUNTERD_ARGS adds flags to counterd's command line (such as
# "--quotas FILE", to measure a feature's cost against a run without it).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SECS=${2:-10}
CONNS=${CONNS:-50}
THREADS=${THREADS:-2}
KEYS=${KEYS:-1} # distinct counter ids (1 = one hot counter)
command -v wrk >/dev/null || { echo "bench-http: wrk not found (apt-get install wrk)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/counterd" ./cmd/counterd
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# shellcheck disable=SC2086 # COUNTERD_ARGS is split into flags on purpose
"$tmp/counterd" --data "$tmp/data" --http "127.0.0.1:$port" --resp "" --log-level warn ${COUNTERD_ARGS:-} &
pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done

cat > "$tmp/incr.lua" <<LUA
local keys = $KEYS
local n = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"delta": 1}'
request = function()
  n = n + 1
  return wrk.format(nil, "/counters/bench:" .. (n % keys) .. "/increment" .. (os.getenv("DURABILITY_QS") or ""))
end
LUA

run() { # $1 = async|sync ; prints "reqs p50_ms p99_ms"
  DURABILITY_QS="?durability=$1" wrk -t"$THREADS" -c"$CONNS" -d"${SECS}s" --latency -s "$tmp/incr.lua" "http://127.0.0.1:$port" > "$tmp/out" 2>&1
  local rps p50 p99
  rps=$(awk '/Requests\/sec/ {print $2}' "$tmp/out")
  p50=$(awk '$1=="50%" {print $2}' "$tmp/out")
  p99=$(awk '$1=="99%" {print $2}' "$tmp/out")
  if grep -q "Non-2xx" "$tmp/out"; then echo "bench-http: errors:" >&2; cat "$tmp/out" >&2; exit 1; fi
  echo "$rps $p50 $p99"
}

echo "# wrk -t$THREADS -c$CONNS -d${SECS}s, POST /counters/bench:N/increment over $KEYS id(s), $(nproc) cores"
printf "%-6s %-6s %12s %10s %10s\n" round mode req/s p50 p99
ratios=()
for r in $(seq "$ROUNDS"); do
  if (( r % 2 )); then order="async sync"; else order="sync async"; fi
  declare -A rps=()
  for mode in $order; do
    read -r x p50 p99 < <(run "$mode")
    rps[$mode]=$x
    printf "%-6s %-6s %12s %10s %10s\n" "$r" "$mode" "$x" "$p50" "$p99"
  done
  ratio=$(python3 -c "print(f'{${rps[sync]}/${rps[async]}:.2f}')")
  ratios+=("$ratio")
  echo "round $r: sync/async = $ratio"
done
echo "median sync/async = $(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
