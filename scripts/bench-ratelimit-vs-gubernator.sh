#!/usr/bin/env bash
# bench-ratelimit-vs-gubernator.sh: rate-limit checks/s and p99 of the real
# counterd binary and of gubernator v2.13.0 (the limiter users would pick
# instead), same machine, same run, same load generator, alternating which
# goes first round by round. Prints every run and, per front end, the
# median checks/s of each, the counterd/gubernator ratio and both p99s.
#
# Usage: scripts/bench-ratelimit-vs-gubernator.sh [-c conns] [-d duration] [-R rounds] [-t tests] [-K]
#   -c  connections (default 50; env CONNS)
#   -d  duration of a run (default 10s; env DURATION)
#   -R  rounds (default 3; env ROUNDS)
#   -t  tests, comma-separated (default http,grpc,resp):
#       http  wrk -t2 -cCONNS: gubernator POST /v1/GetRateLimits against
#             counterd POST /ratelimit/check, one hot key, token bucket
#       grpc  the Go load generator (rlbench load): gubernator's
#             V1/GetRateLimits against counterd's Envoy RLS ShouldRateLimit
#       resp  counterd's RL.CHECK with redis-benchmark (gubernator has no
#             Redis protocol: counterd alone, beside the others)
#   -K  keep the temporary directory
#
# Environment:
#   GUBERNATOR_BIN  a gubernator binary; unset: `go install
#                   github.com/gubernator-io/gubernator/v2/cmd/gubernator@v2.13.0`
#                   into ~/.cache/counterd-bench/gubernator-v2.13.0 (once)
#   COUNTERD        counterd binary (default: built with make build's flags)
#   COUNTERD_ARGS   more counterd flags (default none: the HTTP event loops,
#                   counterd's default; "--http-event-loops -1" for net/http)
#
# Both check one key, account:12345, one hit at a time under a token bucket
# of 1e9 per minute (nothing is denied: this measures the check path).
# gubernator runs one node on loopback (member-list discovery with itself
# as the only known node, tracing off); counterd runs on its defaults
# (embedded, --durability async) plus COUNTERD_ARGS in a temporary data
# directory.
set -euo pipefail

CONNS=${CONNS:-50}
COUNTERD_ARGS=${COUNTERD_ARGS-}
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
TESTS="http grpc resp"
KEEP=0
while getopts "c:d:R:t:Kh" opt; do
	case $opt in
	c) CONNS=$OPTARG ;;
	d) DURATION=$OPTARG ;;
	R) ROUNDS=$OPTARG ;;
	t) TESTS=${OPTARG//,/ } ;;
	K) KEEP=1 ;;
	*) sed -n '2,30p' "$0"; exit 2 ;;
	esac
done
for b in wrk curl redis-benchmark redis-cli; do
	command -v "$b" >/dev/null || { echo "bench-ratelimit-vs-gubernator: $b not found (scripts/install-deps.sh installs wrk and redis-tools)" >&2; exit 1; }
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-rl-guber.XXXXXX")
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	if [ "$KEEP" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# shellcheck source=scripts/benchlib.sh
. "$ROOT/scripts/benchlib.sh"

gubernator_bin
if [ -z "${COUNTERD:-}" ]; then
	echo "building counterd (make build's flags)..." >&2
	(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -tags grpcnotrace,nethttpomithttp2 -ldflags "-s -w" -o "$TMP/counterd" ./cmd/counterd)
	COUNTERD=$TMP/counterd
fi
echo "building rlbench..." >&2
(cd "$ROOT" && go build -o "$TMP/rlbench" ./internal/api/ratelimitapi/cmd/rlbench)
RLBENCH=$TMP/rlbench
port() { "$RLBENCH" freeport; }

# counterd
CD_HTTP=127.0.0.1:$(port)
CD_GRPC=127.0.0.1:$(port)
CD_RESP=$(port)
"$COUNTERD" --data "$TMP/data" --http "$CD_HTTP" --grpc "$CD_GRPC" --resp "127.0.0.1:$CD_RESP" \
	--durability async $COUNTERD_ARGS >"$TMP/counterd.log" 2>&1 &
PIDS+=($!)
CD_PID=$!

# gubernator
GB_HTTP=127.0.0.1:$(port)
GB_GRPC=127.0.0.1:$(port)
GB_ML=127.0.0.1:$(port)
env OTEL_TRACES_EXPORTER=none GUBER_HTTP_ADDRESS=$GB_HTTP GUBER_GRPC_ADDRESS=$GB_GRPC \
	GUBER_ADVERTISE_ADDRESS=$GB_GRPC GUBER_PEER_DISCOVERY_TYPE=member-list \
	GUBER_MEMBERLIST_ADDRESS=$GB_ML GUBER_MEMBERLIST_BIND_ADDRESS=$GB_ML \
	GUBER_MEMBERLIST_ADVERTISE_ADDRESS=$GB_ML GUBER_MEMBERLIST_KNOWN_NODES=$GB_ML \
	GUBER_LOG_LEVEL=error "$GUBERNATOR_BIN" >"$TMP/gubernator.log" 2>&1 &
PIDS+=($!)
GB_PID=$!

GB_BODY='{"requests":[{"name":"requests_per_sec","unique_key":"account:12345","hits":1,"limit":1000000000,"duration":60000}]}'
CD_BODY='{"key":"account:12345","limits":[{"name":"requests_per_sec","algorithm":"token_bucket","limit":1000000000,"period_ms":60000}]}'
# Ready once a check is answered (gubernator's HealthCheck answers 503,
# "this instance is not found in the peer list", on one node although it
# serves checks).
wait_check() { # url body pattern name log
	for _ in $(seq 200); do
		curl -fsS -d "$2" "$1" 2>/dev/null | grep -q "$3" && return
		sleep 0.1
	done
	echo "bench-ratelimit-vs-gubernator: $4 did not answer a check:" >&2
	curl -sS -d "$2" "$1" >&2 || true
	tail -20 "$5" >&2
	exit 1
}
wait_check "http://$CD_HTTP/ratelimit/check" "$CD_BODY" '"allowed":true' counterd "$TMP/counterd.log"
wait_check "http://$GB_HTTP/v1/GetRateLimits" "$GB_BODY" UNDER_LIMIT gubernator "$TMP/gubernator.log"

wrk_lua() { # body file
	cat >"$2" <<EOF
wrk.method = "POST"
wrk.body = '$1'
wrk.headers["Content-Type"] = "application/json"
EOF
}
wrk_lua "$GB_BODY" "$TMP/gubernator.lua"
wrk_lua "$CD_BODY" "$TMP/counterd.lua"

RESULTS=$TMP/results.txt # test target round checks_per_s p99_ms
: >"$RESULTS"

# to_ms VALUE: a wrk latency (us, ms or s) in milliseconds.
to_ms() { awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /[0-9]s$/ && v !~ /ms$/) n *= 1000; printf "%.3f", n }'; }

run_http() { # target round
	local url=http://$GB_HTTP/v1/GetRateLimits lua=$TMP/gubernator.lua pid=$GB_PID out t0
	[ "$1" = counterd ] && url=http://$CD_HTTP/ratelimit/check lua=$TMP/counterd.lua pid=$CD_PID
	out=$TMP/http-$1-$2.txt
	t0=$(cputicks "$pid")
	wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s "$lua" "$url" >"$out" 2>&1
	read -r rps _ p99 cpu <<<"$(wrksummary "$out" $(($(cputicks "$pid") - t0)) "$1 http")"
	echo "http $1 $2 $rps $(to_ms "$p99") $cpu" >>"$RESULTS"
	printf "  round %d http %-10s %10.0f checks/s  p99 %8.3f ms  cpu %6.2f us/check\n" "$2" "$1" "$rps" "$(to_ms "$p99")" "$cpu"
}

run_grpc() { # target round
	local addr=$GB_GRPC line rps p99
	[ "$1" = counterd ] && addr=$CD_GRPC
	line=$("$RLBENCH" load -target "$1-grpc" -addr "$addr" -c "$CONNS" -d "$DURATION" -keys 1)
	rps=$(echo "$line" | tr ' ' '\n' | awk -F= '$1 == "checks_per_s" {print $2}')
	p99=$(echo "$line" | tr ' ' '\n' | awk -F= '$1 == "p99_us" {printf "%.3f", $2 / 1000}')
	echo "grpc $1 $2 $rps $p99 -" >>"$RESULTS"
	printf "  round %d grpc %-10s %10.0f checks/s  p99 %8.3f ms\n" "$2" "$1" "$rps" "$p99"
}

run_resp() { # round
	local out rps p99
	out=$(redis-benchmark -p "$CD_RESP" -c "$CONNS" -n 200000 --csv \
		RL.CHECK account:12345 1000000000 60000 1 token_bucket 2>&1)
	rps=$(echo "$out" | grep -v '^"test"' | grep '^"' | tail -1 | tr -d '"' | awk -F, '{print $2}')
	p99=$(echo "$out" | grep -v '^"test"' | grep '^"' | tail -1 | tr -d '"' | awk -F, '{print $7}')
	[ -n "$rps" ] || { echo "redis-benchmark RL.CHECK failed: $out" >&2; exit 1; }
	echo "resp counterd $1 $rps $p99 -" >>"$RESULTS"
	printf "  round %d resp %-10s %10.0f checks/s  p99 %8.3f ms\n" "$1" counterd "$rps" "$p99"
}

echo "gubernator $GUBERNATOR_BIN vs counterd $("$COUNTERD" --version); $(nproc) cores; counterd flags: ${COUNTERD_ARGS:-none}; $CONNS connections, $DURATION per run, $ROUNDS rounds; tests: $TESTS"
for round in $(seq 1 "$ROUNDS"); do
	order="gubernator counterd"
	[ $((round % 2)) = 0 ] && order="counterd gubernator"
	for t in $TESTS; do
		case $t in
		http) for x in $order; do run_http "$x" "$round"; done ;;
		grpc) for x in $order; do run_grpc "$x" "$round"; done ;;
		resp) run_resp "$round" ;;
		*) echo "unknown test $t" >&2; exit 2 ;;
		esac
	done
done

echo
echo "medians over $ROUNDS rounds:"
for t in $TESTS; do
	for x in gubernator counterd; do
		n=$(awk -v t="$t" -v x="$x" '$1 == t && $2 == x' "$RESULTS" | wc -l)
		[ "$n" -gt 0 ] || continue
		# shellcheck disable=SC2046
		printf "  %-4s %-10s %10s checks/s  p99 %8s ms\n" "$t" "$x" \
			"$(median $(awk -v t="$t" -v x="$x" '$1 == t && $2 == x {print $4}' "$RESULTS"))" \
			"$(median $(awk -v t="$t" -v x="$x" '$1 == t && $2 == x {print $5}' "$RESULTS"))"
	done
	if [ "$t" != resp ]; then
		# shellcheck disable=SC2046
		awk -v t="$t" -v c="$(median $(awk -v t="$t" '$1 == t && $2 == "counterd" {print $4}' "$RESULTS"))" \
			-v g="$(median $(awk -v t="$t" '$1 == t && $2 == "gubernator" {print $4}' "$RESULTS"))" \
			-v cp="$(median $(awk -v t="$t" '$1 == t && $2 == "counterd" {print $5}' "$RESULTS"))" \
			-v gp="$(median $(awk -v t="$t" '$1 == t && $2 == "gubernator" {print $5}' "$RESULTS"))" \
			'BEGIN {printf "  %s: counterd/gubernator %.2fx checks/s; p99 %.3f vs %.3f ms (%s)\n", t, c / g, cp, gp, (cp <= gp ? "at or below" : "above")}'
	fi
done
