#!/usr/bin/env bash
# Overload: wrk with CONNS (default 5000) connections on HTTP increments,
# against counterd with shedding off ("before": --max-inflight -1) and on
# (defaults), and with shedding plus a connection cap ("cap":
# --http-max-conns CAP, default 1024), in one session, alternating the
# order every round. A normal client (scripts/overload-probe.py: one
# keep-alive connection, an increment every 10 ms) runs beside wrk and
# reports its own latencies. Loopback only.
#
#   scripts/bench-overload.sh [ROUNDS] [SECONDS]
#
# Prints per run: wrk req/s, wrk p50/p99 over every answer (200 and 503),
# the shed fraction (503s / answers), wrk's timeouts and socket errors, and
# the normal client's answers and its p50/p99 over its 200s. Needs wrk.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SECS=${2:-10}
CONNS=${CONNS:-5000}
CAP=${CAP:-1024}
command -v wrk >/dev/null || { echo "bench-overload: wrk not found (apt-get install wrk)" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)" # wrk and counterd each need CONNS descriptors
if (( $(ulimit -n) < CONNS + 512 )); then CONNS=$(( $(ulimit -n) - 512 )); echo "# fd limit: CONNS lowered to $CONNS"; fi

tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
go build -o "$tmp/counterd" ./cmd/counterd
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$tmp/incr.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"delta": 1}'
wrk.path = "/counters/bench:0/increment"
LUA

declare -A FLAGS=([before]="--max-inflight -1 --http-max-conns -1" [after]="" [cap]="--http-max-conns $CAP")

run() { # $1 = before|after|cap
  rm -rf "$tmp/data"
  # shellcheck disable=SC2086
  "$tmp/counterd" --data "$tmp/data" --http "127.0.0.1:$port" --resp "" --grpc "" --log-level error ${FLAGS[$1]} &
  pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
  python3 scripts/overload-probe.py "127.0.0.1:$port" "$((SECS - 1))" > "$tmp/probe" &
  local probe=$!
  wrk -t2 -c"$CONNS" -d"${SECS}s" --latency -s "$tmp/incr.lua" "http://127.0.0.1:$port" > "$tmp/wrk" 2>&1 || true
  wait $probe
  kill $pid; wait $pid 2>/dev/null || true; pid=
  python3 - "$1" "$tmp/wrk" "$tmp/probe" <<'PY' || { echo "bench-overload: unreadable output:" >&2; cat "$tmp/wrk" "$tmp/probe" >&2; }
import re, sys
mode, w, p = sys.argv[1], open(sys.argv[2]).read(), open(sys.argv[3]).read().split()
def ms(s):
    m = re.match(r"([\d.]+)(us|ms|s|m)$", s)
    if not m:
        return float("nan")
    v, u = m.groups()
    return float(v) * {"us": 1e-3, "ms": 1, "s": 1e3, "m": 6e4}[u]
def num(pat, default="0"):
    m = re.search(pat, w)
    return m.group(1) if m else default
answers = int(num(r"(\d+) requests in"))
non2xx = int(num(r"Non-2xx or 3xx responses: (\d+)"))
errs = num(r"Socket errors: (.*)", "none")
rps = float(num(r"Requests/sec:\s+([\d.]+)"))
p50 = ms(num(r"50%\s+(\S+)", "0us"))
p99 = ms(num(r"99%\s+(\S+)", "0us"))
shed = non2xx / max(answers, 1)
print(f"{mode:7s} {rps:9.0f} {p50:9.1f} {p99:9.1f} {shed:6.3f}  probe sent={p[0]} ok={p[1]} 503={p[2]} err={p[3]} "
      f"ok_p50={p[4]} ok_p99={p[5]} max={p[7]}  wrk errors: {errs}")
PY
}

echo "# wrk -t2 -c$CONNS -d${SECS}s POST /counters/bench:0/increment; $(nproc) cores shared with wrk and the probe; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# before: ${FLAGS[before]} | after: (defaults) | cap: ${FLAGS[cap]}"
printf "%-7s %9s %9s %9s %6s\n" mode "req/s" "p50 ms" "p99 ms" shed
for r in $(seq "$ROUNDS"); do
  if (( r % 2 )); then order="before after cap"; else order="cap after before"; fi
  for mode in $order; do run "$mode"; done
done
