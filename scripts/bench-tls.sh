#!/usr/bin/env bash
# Cost of TLS on the HTTP hot path: increments/s over HTTPS vs plain HTTP,
# measured side by side in one run with wrk (keep-alive connections, so
# handshakes happen once per connection) against two counterd processes
# built from the same tree, one with --tls-cert/--tls-key.
#
#   scripts/bench-tls.sh [ROUNDS] [SECONDS]
#
# Each round runs plain then tls (alternating order every round); the ratio
# tls/plain is printed per round and as a median. Besides req/s, each run
# reports the server's CPU time per request (user+sys of the counterd
# process, from /proc), which other jobs on a shared machine disturb far
# less than throughput. NEWCONN=1 sends
# "Connection: close" so that every request pays a full handshake.
# Needs wrk and openssl. counterd and wrk share the machine's cores.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
SECS=${2:-8}
CONNS=${CONNS:-50}
THREADS=${THREADS:-2}
NEWCONN=${NEWCONN:-0}
command -v wrk >/dev/null || { echo "bench-tls: wrk not found (apt-get install wrk)" >&2; exit 1; }

tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/counterd" ./cmd/counterd
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# A throw-away CA and server certificate (P-256, like the tests).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj /CN=bench-ca -keyout "$tmp/ca.key" -out "$tmp/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=bench \
  -keyout "$tmp/node.key" -out "$tmp/node.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' > "$tmp/ext"
openssl x509 -req -in "$tmp/node.csr" -CA "$tmp/ca.pem" -CAkey "$tmp/ca.key" -days 1 \
  -extfile "$tmp/ext" -out "$tmp/node.crt" 2>/dev/null

plain=$(freeport); tlsport=$(freeport)
"$tmp/counterd" --data "$tmp/plain" --http "127.0.0.1:$plain" --resp "" --grpc "" --log-level warn &
pids+=($!)
declare -A pid=([plain]=$!)
"$tmp/counterd" --data "$tmp/tls" --http "127.0.0.1:$tlsport" --resp "" --grpc "" --log-level warn \
  --tls-cert "$tmp/node.crt" --tls-key "$tmp/node.key" 2>/dev/null &
pids+=($!)
pid[tls]=$!
. scripts/benchlib.sh # the working directory is the repository (above)
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$plain/readyz" >/dev/null && curl -sf --cacert "$tmp/ca.pem" "https://127.0.0.1:$tlsport/readyz" >/dev/null && break
  sleep 0.1
done

cat > "$tmp/incr.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
if os.getenv("NEWCONN") == "1" then wrk.headers["Connection"] = "close" end
wrk.body = '{"delta": 1}'
wrk.path = "/counters/bench:0/increment"
LUA

run() { # $1 = plain|tls ; prints "reqs p50 p99 cpu_us_per_request"
  local url="http://127.0.0.1:$plain"
  [[ $1 == tls ]] && url="https://127.0.0.1:$tlsport"
  local t0; t0=$(cputicks "${pid[$1]}")
  NEWCONN=$NEWCONN wrk -t"$THREADS" -c"$CONNS" -d"${SECS}s" --latency -s "$tmp/incr.lua" "$url" > "$tmp/out" 2>&1
  wrksummary "$tmp/out" $(( $(cputicks "${pid[$1]}") - t0 )) bench-tls
}

echo "# wrk -t$THREADS -c$CONNS -d${SECS}s, POST /counters/bench:0/increment (async), NEWCONN=$NEWCONN, $(nproc) cores"
printf "%-6s %-6s %12s %10s %10s %12s\n" round mode req/s p50 p99 cpu_us/req
ratios=(); cpuratios=()
for r in $(seq "$ROUNDS"); do
  if (( r % 2 )); then order="plain tls"; else order="tls plain"; fi
  declare -A rps=() cpu=()
  for mode in $order; do
    read -r x p50 p99 c < <(run "$mode")
    rps[$mode]=$x; cpu[$mode]=$c
    printf "%-6s %-6s %12s %10s %10s %12s\n" "$r" "$mode" "$x" "$p50" "$p99" "$c"
  done
  ratio=$(python3 -c "print(f'{${rps[tls]}/${rps[plain]}:.3f}')")
  cratio=$(python3 -c "print(f'{${cpu[tls]}/${cpu[plain]}:.3f}')")
  ratios+=("$ratio"); cpuratios+=("$cratio")
  echo "round $r: req/s tls/plain = $ratio, server cpu/request tls/plain = $cratio"
done
echo "median req/s tls/plain = $(median "${ratios[@]}")"
echo "median server cpu/request tls/plain = $(median "${cpuratios[@]}")"
