#!/usr/bin/env bash
# bench-resp-ab.sh: A/B of counterd builds on the Redis protocol, for a
# noisy machine (docs/bench/history.md, "Issue 17, third pass"). One redis-server
# (appendonly yes, appendfsync everysec) and one counterd per build
# (--durability async) run side by side; every round runs each test
# against every server, rotating who goes first. Per run it prints
# requests/s, the server's CPU time per request (/proc/<pid>/stat) and,
# with PERF=1, per-request counts from `perf stat` on the server process
# (context switches and the read, write, epoll, futex and nanosleep
# system calls), which load disturbs much less than requests/s.
#
# Usage: [PERF=1] scripts/bench-resp-ab.sh ROUNDS REQUESTS "TESTS" COUNTERD_BIN...
#   TESTS: space-separated, from bench-resp.sh's: incr_p1 incr_p16
#          incr_rand get hincrby pfadd
# Output lines: round test server req/s cpu_us_per_request [counts]
set -uo pipefail
[ $# -ge 4 ] || { sed -n '2,15p' "$0"; exit 2; }
ROUNDS=$1 N=$2 TESTS=$3
shift 3
BINS=("$@")
T=$(mktemp -d "${TMPDIR:-/tmp}/bench-resp-ab.XXXXXX")
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
port() { echo $((20000 + RANDOM % 12000)); }
RP=$(port)
mkdir "$T/redis"
redis-server --port "$RP" --bind 127.0.0.1 --dir "$T/redis" --appendonly yes --appendfsync everysec \
	--save "" --protected-mode no --logfile "$T/redis.log" &
PIDS+=($!)
NAMES=(redis) PORTS=("$RP") SPIDS=($!)
i=0
for b in "${BINS[@]}"; do
	i=$((i + 1))
	P=$(port)
	mkdir "$T/c$i"
	"$b" --data "$T/c$i" --http "127.0.0.1:$(port)" --grpc "127.0.0.1:$(port)" --resp "127.0.0.1:$P" \
		--admin "127.0.0.1:$(port)" --durability async >"$T/c$i.log" 2>&1 &
	PIDS+=($!)
	NAMES+=("$(basename "$b")") PORTS+=("$P") SPIDS+=($!)
done
for p in "${PORTS[@]}"; do
	for _ in $(seq 100); do
		redis-cli -p "$p" ping >/dev/null 2>&1 && break
		sleep 0.05
	done
done
# shellcheck source=scripts/benchlib.sh
. "$(dirname "$0")/benchlib.sh"
TCK=$(getconf CLK_TCK)
K=${#PORTS[@]}
echo "start $(uptime)"
for r in $(seq "$ROUNDS"); do
	for t in $TESTS; do
		for j in $(seq 0 $((K - 1))); do
			idx=$(((j + r) % K))
			pc=""
			t0=$(cputicks "${SPIDS[$idx]}")
			if [ -n "${PERF:-}" ]; then
				perf stat -x, -e context-switches,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_nanosleep,syscalls:sys_enter_futex,syscalls:sys_enter_read,syscalls:sys_enter_write \
					-p "${SPIDS[$idx]}" -o "$T/perf.out" &
				PP=$!
				sleep 0.3
			fi
			# shellcheck disable=SC2046
			out=$(redis-benchmark -h 127.0.0.1 -p "${PORTS[$idx]}" -c 50 -n "$N" --csv $(resp_test_args "$t") 2>&1 |
				grep -v '^"test"' | grep '^"' | tail -1 | tr -d '"')
			t1=$(cputicks "${SPIDS[$idx]}")
			if [ -n "${PERF:-}" ]; then
				kill -INT "$PP"
				wait "$PP"
				pc=$(awk -F, -v n="$N" '/^[0-9]/ {nm = $3; sub(".*sys_enter_", "", nm); if ($1 > 0) printf "%s=%.3f ", nm, $1 / n}' "$T/perf.out")
			fi
			rps=$(echo "$out" | awk -F, '{print $2}')
			cpu=$(awk -v d=$((t1 - t0)) -v n="$N" -v t="$TCK" 'BEGIN {printf "%.2f", d / t * 1e6 / n}')
			echo "$r $t ${NAMES[$idx]} $rps $cpu $pc"
		done
	done
done
echo "end $(uptime)"
