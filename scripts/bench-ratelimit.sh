#!/usr/bin/env bash
# bench-ratelimit.sh: rate limit checks/s and latency of counterd and, when
# GUBERNATOR_BIN names a gubernator binary, of gubernator side by side: same
# machine, same run, same load generator, same concurrency, same keys,
# alternating targets round by round. Prints every run and a summary with
# the counterd/gubernator ratios.
#
# Usage: scripts/bench-ratelimit.sh [-c workers] [-d duration] [-k keys]
#                                   [-R rounds] [-t target,...] [-k]
#   -c  concurrent workers, each waiting for its answer (default 64; env CONC)
#   -d  measured duration per run (default 10s; env DURATION)
#   -n  distinct keys (default 10000; env KEYS)
#   -R  rounds (default 3; env ROUNDS)
#   -t  targets (default: http,grpc): http = counterd POST /ratelimit/check
#       vs gubernator POST /v1/GetRateLimits; grpc = counterd Envoy RLS
#       ShouldRateLimit vs gubernator pb.gubernator.V1/GetRateLimits
#   -K  keep the temporary directory (logs, raw results)
#
# Environment:
#   GUBERNATOR_BIN   gubernator binary; unset: counterd is measured alone
#   RLBENCH          rlbench binary (default: built from internal/api/ratelimitapi/cmd/rlbench)
#   SERVER_GOMAXPROCS  GOMAXPROCS of both servers (default: unset, all cores)
#
# Every check is one hit of cost 1 under a token bucket of 1e9 per minute
# (nothing is denied: this measures the check path). counterd runs as
# "rlbench serve": a ratelimit.Limiter behind the same HTTP handler and
# Envoy RLS registration counterd mounts. gubernator runs single-node on
# loopback (GUBER_PEER_DISCOVERY_TYPE=none) and is asked with
# behavior NO_BATCHING. The load generator shares the machine with the
# server under test, as in the other scripts here.
set -euo pipefail

CONC=${CONC:-64}
DURATION=${DURATION:-10s}
KEYS=${KEYS:-10000}
ROUNDS=${ROUNDS:-3}
TARGETS="http grpc"
KEEP=0
while getopts "c:d:n:R:t:Kh" opt; do
	case $opt in
	c) CONC=$OPTARG ;;
	d) DURATION=$OPTARG ;;
	n) KEYS=$OPTARG ;;
	R) ROUNDS=$OPTARG ;;
	t) TARGETS=${OPTARG//,/ } ;;
	K) KEEP=1 ;;
	*) sed -n '2,32p' "$0"; exit 2 ;;
	esac
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-ratelimit.XXXXXX")
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	if [ "$KEEP" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${RLBENCH:-}" ]; then
	echo "building rlbench..." >&2
	(cd "$ROOT" && go build -o "$TMP/rlbench" ./internal/api/ratelimitapi/cmd/rlbench)
	RLBENCH=$TMP/rlbench
fi

server_env=()
[ -n "${SERVER_GOMAXPROCS:-}" ] && server_env=(env GOMAXPROCS="$SERVER_GOMAXPROCS")

# counterd
"${server_env[@]}" "$RLBENCH" serve >"$TMP/counterd.out" 2>"$TMP/counterd.log" &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$TMP/counterd.out" ] && break; sleep 0.1; done
read -r CD_HTTP CD_GRPC < <(sed -E 's/http=([^ ]+) grpc=(.+)/\1 \2/' "$TMP/counterd.out")
[ -n "$CD_GRPC" ] || { echo "bench-ratelimit: counterd did not start:" >&2; cat "$TMP/counterd.log" >&2; exit 1; }

# gubernator, if given
GUBER=0
if [ -n "${GUBERNATOR_BIN:-}" ]; then
	[ -x "$GUBERNATOR_BIN" ] || { echo "bench-ratelimit: GUBERNATOR_BIN=$GUBERNATOR_BIN is not executable" >&2; exit 1; }
	GB_HTTP=127.0.0.1:$("$RLBENCH" freeport)
	GB_GRPC=127.0.0.1:$("$RLBENCH" freeport)
	GUBER_PEER_DISCOVERY_TYPE=none GUBER_HTTP_ADDRESS=$GB_HTTP GUBER_GRPC_ADDRESS=$GB_GRPC \
		GUBER_ADVERTISE_ADDRESS=$GB_GRPC "${server_env[@]}" "$GUBERNATOR_BIN" >"$TMP/gubernator.log" 2>&1 &
	PIDS+=($!)
	for _ in $(seq 100); do
		curl -fsS "http://$GB_HTTP/v1/HealthCheck" >/dev/null 2>&1 && break
		sleep 0.1
	done
	curl -fsS "http://$GB_HTTP/v1/HealthCheck" >/dev/null || { echo "bench-ratelimit: gubernator did not start:" >&2; tail -20 "$TMP/gubernator.log" >&2; exit 1; }
	GUBER=1
else
	echo "GUBERNATOR_BIN is not set: measuring counterd alone (no gubernator comparison in this run)."
fi

echo "machine: $(nproc) cores; workers=$CONC duration=$DURATION keys=$KEYS rounds=$ROUNDS targets: $TARGETS"
run() { # name addr
	"$RLBENCH" load -target "$1" -addr "$2" -c "$CONC" -d "$DURATION" -keys "$KEYS" | tee -a "$TMP/results.txt"
}
for r in $(seq "$ROUNDS"); do
	echo "== round $r"
	for t in $TARGETS; do
		case $t in
		http) run counterd-http "$CD_HTTP"; [ $GUBER = 1 ] && run gubernator-http "$GB_HTTP" ;;
		grpc) run counterd-grpc "$CD_GRPC"; [ $GUBER = 1 ] && run gubernator-grpc "$GB_GRPC" ;;
		*) echo "unknown target $t" >&2; exit 2 ;;
		esac
	done
done

echo
echo "== summary (median of $ROUNDS rounds)"
awk '
function field(name,   i, kv) { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] } }
function median(s,   a, n, i, j, t) {
	n = split(s, a, " ")
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	return a[int((n + 1) / 2)]
}
{ t = field("target"); tp[t] = tp[t] " " field("checks_per_s"); p99[t] = p99[t] " " field("p99_us"); p50[t] = p50[t] " " field("p50_us"); err[t] += field("errors") }
END {
	printf "%-18s %12s %10s %10s %8s\n", "target", "checks/s", "p50 us", "p99 us", "errors"
	for (t in tp) printf "%-18s %12.0f %10.1f %10.1f %8d\n", t, median(tp[t]), median(p50[t]), median(p99[t]), err[t]
	split("http grpc", kinds, " ")
	for (k = 1; k <= 2; k++) {
		c = "counterd-" kinds[k]; g = "gubernator-" kinds[k]
		if ((c in tp) && (g in tp)) printf "%s: counterd/gubernator throughput %.2fx, p99 %.1f vs %.1f us\n", kinds[k], median(tp[c]) / median(tp[g]), median(p99[c]), median(p99[g])
	}
}' "$TMP/results.txt"
[ $GUBER = 1 ] || echo "(counterd alone: set GUBERNATOR_BIN to compare with gubernator)"
