#!/usr/bin/env bash
# bench-resp.sh: redis-benchmark against a real redis-server and against
# counterd's Redis protocol front end, same commands, alternating, several
# rounds; prints every run and a summary with the counterd/Redis ratio.
#
# Usage: scripts/bench-resp.sh [-n requests] [-c clients] [-R rounds]
#                              [-t test,test,...] [-k]
#   -n  requests per run (default 200000; env N)
#   -c  parallel connections (default 50; env CLIENTS)
#   -R  rounds (default 3; env ROUNDS)
#   -t  tests to run (default all): incr_p1 incr_p16 incr_rand get hincrby pfadd
#   -k  keep the temporary directory (data, logs, raw CSV)
#
# Environment:
#   COUNTERD         counterd binary (default: built from ./cmd/counterd)
#   REDIS_SERVER     redis-server binary (default: redis-server in PATH)
#   REDIS_BENCHMARK  redis-benchmark binary (default: redis-benchmark in PATH)
#   COUNTERD_GOMAXPROCS  GOMAXPROCS for counterd (default: unset, all cores)
#
# Each run also reports the server's CPU time per request (user + system,
# from /proc; "cpu us/req"), which other jobs on the machine disturb much
# less than requests/s.
#
# Redis runs with appendonly yes, appendfsync everysec (no RDB snapshots),
# in a temporary directory; counterd with --durability async (acknowledged
# from memory, flushed every second): the same durability promise.
#
# The tests (redis-benchmark has no HINCRBY or PFADD test, so those are
# custom commands; __rand_int__ is replaced by a random number below -r):
#   incr_p1    -t incr -P 1                       one hot key, no pipelining
#   incr_p16   -t incr -P 16                      one hot key, pipelines of 16
#   incr_rand  -t incr -r 100000                  100000 random keys
#   get        get counter:__rand_int__ -r 100000 (keys left by incr_rand)
#   hincrby    hincrby bench:h f:__rand_int__ 1 -r 1000
#   pfadd      pfadd bench:hll __rand_int__ -r 1000000
set -euo pipefail

N=${N:-200000}
CLIENTS=${CLIENTS:-50}
ROUNDS=${ROUNDS:-3}
TESTS="incr_p1 incr_p16 incr_rand get hincrby pfadd"
KEEP=0
while getopts "n:c:R:t:kh" opt; do
	case $opt in
	n) N=$OPTARG ;;
	c) CLIENTS=$OPTARG ;;
	R) ROUNDS=$OPTARG ;;
	t) TESTS=${OPTARG//,/ } ;;
	k) KEEP=1 ;;
	*) sed -n '2,20p' "$0"; exit 2 ;;
	esac
done

REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_BENCHMARK=${REDIS_BENCHMARK:-redis-benchmark}
for b in "$REDIS_SERVER" "$REDIS_BENCHMARK"; do
	command -v "$b" >/dev/null || { echo "bench-resp: $b not found (install redis-server and redis-tools)" >&2; exit 1; }
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-resp.XXXXXX")
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${PIDS[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	if [ "$KEEP" = 1 ]; then
		echo "kept $TMP"
	else
		rm -rf "$TMP"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${COUNTERD:-}" ]; then
	echo "building counterd..." >&2
	(cd "$ROOT" && go build -o "$TMP/counterd-bin" ./cmd/counterd)
	COUNTERD=$TMP/counterd-bin
fi

# shellcheck source=scripts/benchlib.sh
. "$ROOT/scripts/benchlib.sh"
command -v redis-cli >/dev/null || { echo "bench-resp: redis-cli not found" >&2; exit 1; }

REDIS_PORT=$(free_port)
mkdir -p "$TMP/redis"
"$REDIS_SERVER" --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$TMP/redis" \
	--appendonly yes --appendfsync everysec --save "" --daemonize no \
	--protected-mode no --logfile "$TMP/redis.log" &
PIDS+=($!)
REDIS_PID=$!
wait_ping "$REDIS_PORT" redis-server "$TMP/redis.log"

RESP_PORT=$(free_port)
HTTP_PORT=$(free_port)
GRPC_PORT=$(free_port)
mkdir -p "$TMP/counterd-data"
(
	if [ -n "${COUNTERD_GOMAXPROCS:-}" ]; then export GOMAXPROCS=$COUNTERD_GOMAXPROCS; fi
	exec "$COUNTERD" --data "$TMP/counterd-data" --http "127.0.0.1:$HTTP_PORT" \
		--resp "127.0.0.1:$RESP_PORT" --grpc "127.0.0.1:$GRPC_PORT" --durability async
) >"$TMP/counterd.log" 2>&1 &
PIDS+=($!)
COUNTERD_PID=$!
wait_ping "$RESP_PORT" counterd "$TMP/counterd.log"

echo "redis-server $("$REDIS_SERVER" --version | awk '{print $3}' | sed 's/v=//') on :$REDIS_PORT (appendonly yes, appendfsync everysec)"
echo "counterd on :$RESP_PORT (durability async); $(nproc 2>/dev/null || echo '?') cores; -n $N -c $CLIENTS, $ROUNDS rounds"
echo

# test_args name: the redis-benchmark arguments of a test.
test_args() { resp_test_args "$1"; }

RESULTS=$TMP/results.txt # target test round rps p50 p99 cpu_us_per_request

# cpu_ticks pid: user+system CPU of a process so far, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)
: >"$RESULTS"

# run target port test round
run() {
	local target=$1 port=$2 test=$3 round=$4 out line pid t0 t1 cpu
	pid=$REDIS_PID
	[ "$target" = counterd ] && pid=$COUNTERD_PID
	t0=$(cpu_ticks "$pid")
	# shellcheck disable=SC2046
	out=$("$REDIS_BENCHMARK" -h 127.0.0.1 -p "$port" -c "$CLIENTS" -n "$N" --csv $(test_args "$test") 2>&1) || {
		echo "bench-resp: redis-benchmark failed against $target ($test):" >&2
		echo "$out" >&2
		exit 1
	}
	t1=$(cpu_ticks "$pid")
	# Server CPU per request: what the throughput would be bounded by on a
	# quiet machine, and much less sensitive to other jobs than req/s.
	cpu=$(awk -v d=$((t1 - t0)) -v n="$N" -v t="$TCK" 'BEGIN {printf "%.2f", d / t * 1e6 / n}')
	echo "$out" >"$TMP/$target-$test-$round.csv"
	# "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
	line=$(echo "$out" | grep -v '^"test"' | grep '^"' | tail -1 | tr -d '"')
	if [ -z "$line" ]; then
		echo "bench-resp: no CSV result from redis-benchmark ($target $test):" >&2
		echo "$out" >&2
		exit 1
	fi
	local rps p50 p99
	rps=$(echo "$line" | awk -F, '{print $2}')
	p50=$(echo "$line" | awk -F, '{print $5}')
	p99=$(echo "$line" | awk -F, '{print $7}')
	echo "$target $test $round $rps $p50 $p99 $cpu" >>"$RESULTS"
	printf "  round %d %-9s %-9s %12.0f req/s  p50 %6.3f ms  p99 %6.3f ms  cpu %6.2f us/req\n" "$round" "$test" "$target" "$rps" "$p50" "$p99" "$cpu"
}

for test in $TESTS; do
	test_args "$test" >/dev/null
done
for round in $(seq 1 "$ROUNDS"); do
	for test in $TESTS; do
		# Alternate who goes first so that neither always runs on a
		# warmer (or more throttled) machine.
		if [ $((round % 2)) = 1 ]; then
			run redis "$REDIS_PORT" "$test" "$round"
			run counterd "$RESP_PORT" "$test" "$round"
		else
			run counterd "$RESP_PORT" "$test" "$round"
			run redis "$REDIS_PORT" "$test" "$round"
		fi
	done
done

# Sanity check: both servers hold the same counts for the deterministic test.
if [[ " $TESTS " == *" incr_p1 "* ]]; then
	r=$(redis-cli -p "$REDIS_PORT" GET counter:__rand_int__)
	c=$(redis-cli -p "$RESP_PORT" GET counter:__rand_int__)
	if [ "$r" != "$c" ]; then
		echo "bench-resp: WARNING: counter:__rand_int__ is $r in Redis but $c in counterd" >&2
	fi
fi

echo
echo "median of $ROUNDS rounds (-c $CLIENTS, -n $N):"
printf "%-10s %14s %14s %8s   %-19s %-19s %-21s\n" test "redis req/s" "counterd req/s" ratio "p50 ms redis/ctrd" "p99 ms redis/ctrd" "cpu us/req redis/ctrd"
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
for test in $TESTS; do
	rr=$(awk -v t="$test" '$1=="redis" && $2==t {print $4}' "$RESULTS" | median)
	cr=$(awk -v t="$test" '$1=="counterd" && $2==t {print $4}' "$RESULTS" | median)
	r50=$(awk -v t="$test" '$1=="redis" && $2==t {print $5}' "$RESULTS" | median)
	c50=$(awk -v t="$test" '$1=="counterd" && $2==t {print $5}' "$RESULTS" | median)
	r99=$(awk -v t="$test" '$1=="redis" && $2==t {print $6}' "$RESULTS" | median)
	c99=$(awk -v t="$test" '$1=="counterd" && $2==t {print $6}' "$RESULTS" | median)
	rc=$(awk -v t="$test" '$1=="redis" && $2==t {print $7}' "$RESULTS" | median)
	cc=$(awk -v t="$test" '$1=="counterd" && $2==t {print $7}' "$RESULTS" | median)
	ratio=$(awk -v a="$cr" -v b="$rr" 'BEGIN {if (b > 0) printf "%.2f", a/b; else print "n/a"}')
	printf "%-10s %14.0f %14.0f %8s   %8.3f / %-8.3f %8.3f / %-8.3f %8.2f / %-8.2f\n" "$test" "$rr" "$cr" "$ratio" "$r50" "$c50" "$r99" "$c99" "$rc" "$cc"
done
