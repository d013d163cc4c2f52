#!/usr/bin/env bash
# Cost of authentication on the hot path: HTTP increments/s against one
# counterd without --auth and one with --auth (a bearer token on every
# request), measured alternately in one run with wrk.
#
#   scripts/bench-auth.sh [ROUNDS] [SECONDS]
#
# Each round runs both servers back to back (order alternating every round)
# and prints requests/s and the server's CPU time per request (utime+stime
# from /proc, which other processes on a shared machine disturb far less
# than throughput); the median ratios auth/open are printed at the end.
# Needs wrk and Linux. Both servers and wrk share the machine's cores; only
# one is loaded at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
SECS=${2:-10}
CONNS=${CONNS:-50}
THREADS=${THREADS:-2}
KEYS=${KEYS:-100} # distinct counter ids
SIMUL=${SIMUL:-0} # 1: load both servers at the same time (each with its own wrk), so both see the same machine noise
AA=${AA:-0}       # 1: an A/A control, the "auth" server runs without --auth (the token is still sent)
command -v wrk >/dev/null || { echo "bench-auth: wrk not found (apt-get install wrk)" >&2; exit 1; }

tmp=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/counterd" ./cmd/counterd
go build -o "$tmp/counterctl" ./cmd/counterctl
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# A realistic tokens file: the bench user among 50 others, each with two grants.
"$tmp/counterctl" auth token > "$tmp/tok"
token=$(awk '/^token:/ {print $2}' "$tmp/tok")
digest=$(awk '/^digest:/ {print $2}' "$tmp/tok")
{
  echo "users:"
  for i in $(seq 50); do
    d=$(echo "filler-token-$i-0123456789" | "$tmp/counterctl" auth hash)
    printf '  user%d:\n    tokens: ["%s"]\n    grants: {"ns%d:*": write, "shared:*": read}\n' "$i" "$d" "$i"
  done
  printf '  bench:\n    tokens: ["%s"]\n    grants: {"other:*": read, "bench:*": write}\n' "$digest"
} > "$tmp/tokens.yaml"

p_open=$(freeport); p_auth=$(freeport)
"$tmp/counterd" --data "$tmp/open" --http "127.0.0.1:$p_open" --resp "" --grpc "" --log-level warn &
pids+=($!); pid_open=$!
authflag=(--auth "$tmp/tokens.yaml")
if [[ $AA == 1 ]]; then authflag=(); fi
"$tmp/counterd" --data "$tmp/auth" --http "127.0.0.1:$p_auth" --resp "" --grpc "" --log-level warn "${authflag[@]}" &
pids+=($!); pid_auth=$!
for p in $p_open $p_auth; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$p/readyz" >/dev/null && break; sleep 0.1; done
done

cat > "$tmp/incr.lua" <<LUA
local keys = $KEYS
local n = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local tok = os.getenv("TOKEN") or ""
if tok ~= "" then wrk.headers["Authorization"] = "Bearer " .. tok end
wrk.body = '{"delta": 1}'
request = function()
  n = n + 1
  return wrk.format(nil, "/counters/bench:" .. (n % keys) .. "/increment")
end
LUA

. scripts/benchlib.sh # the working directory is the repository (above)

start_wrk() { # $1 = open|auth: starts wrk in the background, output in $tmp/out.$1
  local port=$p_open tok=""
  if [[ $1 == auth ]]; then port=$p_auth tok=$token; fi
  TOKEN=$tok wrk -t"$THREADS" -c"$CONNS" -d"${SECS}s" --latency -s "$tmp/incr.lua" "http://127.0.0.1:$port" > "$tmp/out.$1" 2>&1 &
  wrkpid=$!
}

report() { # $1 = mode, $2 $3 = server CPU ticks before/after; prints "reqs/s p50 p99 cpu_us_per_request"
  wrksummary "$tmp/out.$1" $(( $3 - $2 )) bench-auth
}

run() { # $1 = open|auth, loaded alone
  local pid=$pid_open
  if [[ $1 == auth ]]; then pid=$pid_auth; fi
  local t0; t0=$(cputicks "$pid")
  start_wrk "$1"; wait "$wrkpid"
  report "$1" "$t0" "$(cputicks "$pid")"
}

run_both() { # both loaded at once; prints two lines "mode reqs/s p50 p99 cpu"
  local o0 a0 o1 a1 wo wa
  o0=$(cputicks "$pid_open"); a0=$(cputicks "$pid_auth")
  start_wrk open; wo=$wrkpid
  start_wrk auth; wa=$wrkpid
  wait "$wo" "$wa"
  o1=$(cputicks "$pid_open"); a1=$(cputicks "$pid_auth")
  echo "open $(report open "$o0" "$o1")"
  echo "auth $(report auth "$a0" "$a1")"
}

echo "# SIMUL=$SIMUL AA=$AA wrk -t$THREADS -c$CONNS -d${SECS}s, POST /counters/bench:N/increment over $KEYS ids, tokens file of 51 users, $(nproc) cores"
printf "%-6s %-5s %12s %10s %10s %12s\n" round mode req/s p50 p99 cpu_us/req
ratios=(); cratios=()
for r in $(seq "$ROUNDS"); do
  if (( r % 2 )); then order="open auth"; else order="auth open"; fi
  declare -A rps=() cpu=()
  if [[ $SIMUL == 1 ]]; then
    while read -r mode x p50 p99 c; do
      rps[$mode]=$x; cpu[$mode]=$c
      printf "%-6s %-5s %12s %10s %10s %12s\n" "$r" "$mode" "$x" "$p50" "$p99" "$c"
    done < <(run_both)
  else
    for mode in $order; do
      read -r x p50 p99 c < <(run "$mode")
      rps[$mode]=$x; cpu[$mode]=$c
      printf "%-6s %-5s %12s %10s %10s %12s\n" "$r" "$mode" "$x" "$p50" "$p99" "$c"
    done
  fi
  ratio=$(python3 -c "print(f'{${rps[auth]}/${rps[open]}:.3f}')")
  cratio=$(python3 -c "print(f'{${cpu[auth]}/${cpu[open]}:.3f}')")
  ratios+=("$ratio"); cratios+=("$cratio")
  echo "round $r: req/s auth/open = $ratio, cpu/request auth/open = $cratio"
done
echo "median req/s auth/open = $(median "${ratios[@]}")"
echo "median cpu/request auth/open = $(median "${cratios[@]}")"
