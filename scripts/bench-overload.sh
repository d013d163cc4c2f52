#!/usr/bin/env bash
# Overload: wrk with CONNS (default 5000) keep-alive connections POSTing
# increments as fast as answers come (the flood, from 127.0.0.1), against
# a fresh counterd per run, while two normal clients
# (scripts/overload-probe.py: one keep-alive connection, an increment
# every 10 ms) report their own latencies:
#   normal  from 127.0.0.2: another client than the flood;
#   flood-ip from 127.0.0.1: a client sharing the flood's address (often
#            over its connection cap: never served then).
# and the server's own figures for ALL admitted requests (the flood's
# included), from its /metrics scraped before and after the run (from
# 127.0.0.3, another client): the p50 and p99 of
# counterd_http_admitted_latency_seconds (each admitted request, from the
# kernel's receive time of its bytes, so its wait in the socket counts,
# to its written answer), interpolated within the bucket as Prometheus'
# histogram_quantile does, and the shed fraction from its counters
# (wrk's own percentiles mix 200s and 503s). A binary without that
# histogram (an older BASE_BIN) prints "-" there.
# Modes, in one session, order alternating every round (MODES to choose):
#   before  : no shedding at all (--max-inflight -1 --http-max-conns -1)
#   handler : only the limit inside the HTTP handler (--http-admission=false)
#   after   : the defaults (HTTP event loops for the hot routes, admission per
#             client, --max-conns-per-client a quarter of --http-max-conns)
#   loop    : the same, the loops asked for (--http-event-loops 0)
#   nethttp : the defaults on net/http only (--http-event-loops -1: HTTP
#             admission per client before the HTTP server)
#   nocap   : the defaults without the per-client connection cap (--max-conns-per-client -1)
#   nopace  : the defaults, refused connections never paused (--shed-rate-per-client 0)
#   cap     : defaults plus --http-max-conns CAP (default 1024)
#   pcN     : defaults plus --max-conns-per-client N (e.g. pc256)
#   nogate  : the defaults without turns per client (--max-busy-conns-per-client -1)
#   busyN   : defaults plus --max-busy-conns-per-client N (e.g. busy16)
#             (the loops take no turns at that gate: nogate and busyN act on the
#             requests handed to net/http only)
#   base    : BASE_BIN (another counterd binary, e.g. an older commit) with --http-admission
#             (compares two admissions in one session; skipped without BASE_BIN)
#   basedef : BASE_BIN with its own defaults
#   baseloop: BASE_BIN with --http-event-loops 0 (compare with loop)
#   basenet : BASE_BIN with --http-event-loops -1 (compare with nethttp)
#
#   scripts/bench-overload.sh [ROUNDS] [SECONDS]
#
# Needs wrk and python3; Linux (127.0.0.2 must be routable, as on lo).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/benchlib.sh
ROUNDS=${1:-3}
SECS=${2:-10}
CONNS=${CONNS:-5000}
CAP=${CAP:-1024}
MODES=${MODES:-before handler after}
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

flags() {
  case $1 in
    before) echo "--max-inflight -1 --http-max-conns -1" ;;
    handler) echo "--http-admission=false" ;;
    after) echo "" ;;
    loop) echo "--http-event-loops 0" ;;
    nethttp) echo "--http-event-loops -1" ;;
    nocap) echo "--max-conns-per-client -1" ;;
    nopace) echo "--shed-rate-per-client 0" ;;
    base) echo "--http-admission" ;;
    basedef) echo "" ;;
    baseloop) echo "--http-event-loops 0" ;;
    basenet) echo "--http-event-loops -1" ;;
    cap) echo "--http-max-conns $CAP" ;;
    pc*) echo "--max-conns-per-client ${1#pc}" ;;
    nogate) echo "--max-busy-conns-per-client -1" ;;
    busy*) echo "--max-busy-conns-per-client ${1#busy}" ;;
    *) echo "bench-overload: unknown mode $1" >&2; exit 2 ;;
  esac
}

run() { # $1 = mode
  rm -rf "$tmp/data"
  local bin=$tmp/counterd
  if [ "$1" = base ] || [ "$1" = basedef ] || [ "$1" = baseloop ] || [ "$1" = basenet ]; then
    [ -n "${BASE_BIN:-}" ] || return 0
    bin=$BASE_BIN
  fi
  # shellcheck disable=SC2046
  "$bin" --data "$tmp/data" --http "127.0.0.1:$port" --resp "" --grpc "" --log-level error $(flags "$1") &
  pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  scrape "$tmp/m0"
  python3 scripts/overload-probe.py "127.0.0.1:$port" "$((SECS - 1))" 127.0.0.2 > "$tmp/normal" &
  local p1=$!
  python3 scripts/overload-probe.py "127.0.0.1:$port" "$((SECS - 1))" 127.0.0.1 > "$tmp/floodip" &
  local p2=$!
  local t0; t0=$(cputicks $pid)
  wrk -t2 -c"$CONNS" -d"${SECS}s" --latency -s "$tmp/incr.lua" "http://127.0.0.1:$port" > "$tmp/wrk" 2>&1 || true
  local cpu; cpu=$(python3 -c "print(($(cputicks $pid) - $t0) / $(getconf CLK_TCK))")
  wait $p1 $p2
  scrape "$tmp/m1"
  kill $pid; wait $pid 2>/dev/null || true; pid=
  python3 - "$1" "$load" "$cpu" "$tmp/wrk" "$tmp/normal" "$tmp/floodip" "$tmp/m0" "$tmp/m1" <<'PY' || { echo "bench-overload: unreadable output:" >&2; cat "$tmp/wrk" "$tmp/normal" "$tmp/floodip" >&2; }
import re, sys
mode, load, cpu, w = sys.argv[1], sys.argv[2], float(sys.argv[3]), open(sys.argv[4]).read()
normal, floodip = open(sys.argv[5]).read().split(), open(sys.argv[6]).read().split()
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
timeouts = num(r"timeout (\d+)")
rps = float(num(r"Requests/sec:\s+([\d.]+)"))
p50 = ms(num(r"50%\s+(\S+)", "0us"))
p99 = ms(num(r"99%\s+(\S+)", "0us"))
shed = non2xx / max(answers, 1)
def probe(p):  # sent ok shed errors ok_p50 ok_p99 all_p99 all_max
    return f"{p[1]:>4s}/{p[0]:<4s} {p[4]:>7s} {p[5]:>7s}"
secs = answers / max(rps, 1)

def metrics(path):  # {(name, labels): value} of a Prometheus text exposition
    out = {}
    for line in open(path):
        m = re.match(r'([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)', line)
        if m and not line.startswith("#"):
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out
def delta(m0, m1, name, want=lambda labels: True):
    return sum(v - m0.get(k, 0) for k, v in m1.items() if k[0] == name and want(k[1]))
def quantile(q, buckets):  # Prometheus' histogram_quantile over [(le, cumulative count)]
    total = buckets[-1][1]
    rank = q * total
    i = next(i for i, (le, c) in enumerate(buckets) if c >= rank)
    if i == len(buckets) - 1:  # in +Inf: the highest finite bound
        return buckets[-2][0]
    lo, clo = (0.0, 0.0) if i == 0 else buckets[i - 1]
    le, c = buckets[i]
    return lo + (le - lo) * (rank - clo) / (c - clo)
m0, m1 = metrics(sys.argv[7]), metrics(sys.argv[8])
hist = "counterd_http_admitted_latency_seconds"
server = f"{'-':>8s} {'-':>5s} {'-':>7s} {'-':>7s}"
if any(k[0] == hist + "_count" for k in m1):
    admitted = delta(m0, m1, hist + "_count")
    shed_srv = (delta(m0, m1, "counterd_shed_requests_total", lambda l: 'front_end="http"' in l)
                + delta(m0, m1, "counterd_http_rejected_connections_total"))
    bounds = sorted({re.search(r'le="([^"]+)"', k[1]).group(1) for k in m1 if k[0] == hist + "_bucket"}, key=float)
    buckets = [(float(le), delta(m0, m1, hist + "_bucket", lambda l, le=le: f'le="{le}"' in l)) for le in bounds]
    def qms(q):
        if admitted <= 0:
            return "nan"
        v = quantile(q, buckets) * 1e3
        return f"{v:.1f}" if v < buckets[-2][0] * 1e3 else f">{v:.0f}"
    server = (f"{admitted / secs:8.0f} {shed_srv * 100 / max(admitted + shed_srv, 1):5.1f} "
              f"{qms(.5):>7s} {qms(.99):>7s}")
print(f"{mode:8s} {load:>5s} {cpu/secs:4.2f} {cpu*1e6/max(answers,1):6.1f} {rps:8.0f} {rps*(1-shed):8.0f} {shed*100:5.1f} {p50:7.1f} {p99:7.1f} {timeouts:>5s} | "
      f"{server} | {probe(normal)} | {probe(floodip)}")
PY
}

scrape() { # $1 = file: the /metrics of the counterd under test, as another client (127.0.0.3)
  : > "$1"
  for _ in 1 2 3 4 5; do
    curl -sf --max-time 5 --interface 127.0.0.3 "http://127.0.0.1:$port/metrics" > "$1" && return
    sleep 0.2
  done
  echo "bench-overload: could not scrape /metrics" >&2
}

cat <<EOF
# wrk -t2 -c$CONNS -d${SECS}s POST /counters/bench:0/increment (flood from 127.0.0.1); $(nproc) cores shared by
# counterd, wrk and the probes. Per run: load = 1-min load average at its start; req/s = wrk's answers/s,
# ok/s = its 200s/s; shed% = 503s / answers; wrk p50/p99 over all answers (200 and 503); tmo = wrk timeouts;
# cores = CPU counterd got (user+sys / wall), us/ans = its CPU microseconds per wrk answer (less load-sensitive).
# server (its /metrics, deltas over the run, probes included): adm/s = requests admitted before the HTTP
# server per second of wrk's run; shed% = refusals (counterd_shed_requests_total{front_end="http"} and
# counterd_http_rejected_connections_total) / (those + admitted); adm50/adm99 = p50/p99 in ms of
# counterd_http_admitted_latency_seconds: from the receive time of each admitted request to its written
# answer, socket wait included (">5000": beyond the last bucket); "-": the binary has no such histogram.
# normal = client at 127.0.0.2, flood-ip = client at 127.0.0.1 (one request per 10 ms each): 200s/sent,
# then p50 and p99 in ms of their 200s. Goal (issue 11): admitted p99 (adm99) <= 50 ms.
mode      load cores us/ans  req/s     ok/s shed%  wrk50  wrk99   tmo | server: adm/s shed%   adm50   adm99 | normal: ok/sent p50  p99    | flood-ip: ok/sent p50 p99
EOF
for r in $(seq "$ROUNDS"); do
  if (( r % 2 )); then order=$MODES; else order=$(echo "$MODES" | tr ' ' '\n' | tac | tr '\n' ' '); fi
  for mode in $order; do run "$mode"; done
done
