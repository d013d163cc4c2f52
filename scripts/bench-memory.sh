#!/usr/bin/env bash
# bench-memory.sh: peak memory of counterd and of a real redis-server under
# the same write load, same run: N new counters written with
# `redis-cli --pipe` (INCR counter:0 .. counter:N-1), each server fresh in
# its own temporary directory, alternating which goes first, several
# rounds. Prints for each run the load time (and so the commands/s), the
# peak RSS while loading (VmHWM from /proc), the RSS once loaded and, for
# counterd, the RSS after a restart and the time from start to first read.
#
# Usage: scripts/bench-memory.sh [-n counters] [-R rounds] [-L limit] [-k] [-- counterd flags...]
#   -n  counters to write (default 5000000; env N)
#   -R  rounds (default 3; env ROUNDS)
#   -L  also run counterd with --memory-limit LIMIT (e.g. 384MiB; env LIMIT),
#       as a third target "limited" beside the default one
#   -k  keep the temporary directory
#   flags after -- are passed to counterd (e.g. -- --memory-limit 300MiB)
#
# Environment: COUNTERD (binary; default built from ./cmd/counterd),
# REDIS_SERVER (default redis-server in PATH).
#
# Redis runs with appendonly yes, appendfsync everysec (no RDB snapshots);
# counterd with --durability async: the same durability promise.
set -euo pipefail

N=${N:-5000000}
ROUNDS=${ROUNDS:-3}
LIMIT=${LIMIT:-}
KEEP=0
while getopts "n:R:L:kh" opt; do
	case $opt in
	n) N=$OPTARG ;;
	R) ROUNDS=$OPTARG ;;
	L) LIMIT=$OPTARG ;;
	k) KEEP=1 ;;
	*) sed -n '2,20p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
EXTRA=("$@")

REDIS_SERVER=${REDIS_SERVER:-redis-server}
for b in "$REDIS_SERVER" redis-cli; do
	command -v "$b" >/dev/null || { echo "bench-memory: $b not found (install redis-server and redis-tools)" >&2; exit 1; }
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-memory.XXXXXX")
PID=
cleanup() {
	if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
	if [ "$KEEP" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${COUNTERD:-}" ]; then
	echo "building counterd (make build's flags)..." >&2
	(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -tags grpcnotrace,nethttpomithttp2 -ldflags "-s -w" -o "$TMP/counterd-bin" ./cmd/counterd)
	COUNTERD=$TMP/counterd-bin
fi

# shellcheck source=scripts/benchlib.sh
. "$ROOT/scripts/benchlib.sh"

# kib FIELD PID: a field of /proc/PID/status (VmHWM, VmRSS) in KiB.
kib() { awk -v f="$1:" '$1 == f {print $2}' "/proc/$2/status"; }
mb() { awk -v k="$1" 'BEGIN {printf "%.0f", k / 1024}'; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", b - a}'; }

echo "writing the load: $N x INCR counter:N in the Redis protocol..." >&2
LOAD=$TMP/load.resp
awk -v n="$N" 'BEGIN {
	for (i = 0; i < n; i++) {
		k = "counter:" i
		printf "*2\r\n$4\r\nINCR\r\n$%d\r\n%s\r\n", length(k), k
	}
}' >"$LOAD"

# pipe PORT: send the load, fail unless every reply came back.
pipe() {
	local out
	out=$(redis-cli -p "$1" --pipe <"$LOAD" 2>&1)
	echo "$out" | grep -q "errors: 0, replies: $N" || { echo "bench-memory: redis-cli --pipe: $out" >&2; exit 1; }
}

start_redis() { # dir port
	"$REDIS_SERVER" --port "$2" --bind 127.0.0.1 --dir "$1" --appendonly yes \
		--appendfsync everysec --save "" --daemonize no --protected-mode no \
		--logfile "$1/redis.log" &
	PID=$!
	wait_ping "$2" redis-server "$1/redis.log"
}

start_counterd() { # dir port [flags...]
	local dir=$1 port=$2
	shift 2
	"$COUNTERD" --data "$dir/data" --http "127.0.0.1:$(free_port)" --resp "127.0.0.1:$port" \
		--grpc "127.0.0.1:$(free_port)" --durability async "${EXTRA[@]}" "$@" >>"$dir/counterd.log" 2>&1 &
	PID=$!
	wait_ping "$port" counterd "$dir/counterd.log"
}

start_limited() { start_counterd "$1" "$2" --memory-limit "$LIMIT"; }

stop() { kill "$PID"; wait "$PID" 2>/dev/null || true; PID=; }

RESULTS=$TMP/results.txt # target round secs peak_mb loaded_mb
: >"$RESULTS"

run() { # target round
	local dir=$TMP/$1-$2 port t0 t1 peak rss line
	mkdir -p "$dir"
	port=$(free_port)
	"start_$1" "$dir" "$port"
	t0=$(now)
	pipe "$port"
	t1=$(now)
	peak=$(kib VmHWM "$PID")
	sleep 2 # let a flush or an AOF rewrite settle
	peak=$(( $(kib VmHWM "$PID") > peak ? $(kib VmHWM "$PID") : peak ))
	rss=$(kib VmRSS "$PID")
	line="$1 $2 $(secs "$t0" "$t1") $(mb "$peak") $(mb "$rss")"
	stop
	if [ "$1" != redis ]; then
		t0=$(now)
		"start_$1" "$dir" "$port"
		[ "$(redis-cli -p "$port" GET "counter:$((N - 1))")" = 1 ] || { echo "bench-memory: counterd lost counter:$((N - 1)) across a restart" >&2; exit 1; }
		t1=$(now)
		line="$line $(secs "$t0" "$t1") $(mb "$(kib VmRSS "$PID")")"
		stop
	fi
	echo "$line" >>"$RESULTS"
	set -- $line
	printf "  round %d %-9s load %6.2f s (%8.0f cmd/s)  peak RSS %5d MB  loaded RSS %5d MB%s\n" \
		"$2" "$1" "$3" "$(awk -v n="$N" -v s="$3" 'BEGIN {print n / s}')" "$4" "$5" \
		"${6:+  restart to first read $6 s, RSS then $7 MB}"
	rm -rf "$dir"
}

TARGETS="redis counterd"
[ -n "$LIMIT" ] && TARGETS="$TARGETS limited"
echo "redis-server $("$REDIS_SERVER" --version | awk '{print $3}' | sed 's/v=//') (appendonly yes, everysec) vs counterd (--durability async ${EXTRA[*]})${LIMIT:+ and limited (--memory-limit $LIMIT)}; $(nproc) cores; $N counters, $ROUNDS rounds"
for round in $(seq 1 "$ROUNDS"); do
	# Alternate the order so that no target always runs first.
	order=$TARGETS
	[ $((round % 2)) = 0 ] && order=$(echo "$TARGETS" | tr ' ' '\n' | tac | tr '\n' ' ')
	for t in $order; do run "$t" "$round"; done
done

echo
echo "medians over $ROUNDS rounds:"
for t in $TARGETS; do
	# shellcheck disable=SC2046
	printf "  %-9s load %6s s  peak RSS %5s MB  loaded RSS %5s MB\n" "$t" \
		"$(median $(awk -v t="$t" '$1 == t {print $3}' "$RESULTS"))" \
		"$(median $(awk -v t="$t" '$1 == t {print $4}' "$RESULTS"))" \
		"$(median $(awk -v t="$t" '$1 == t {print $5}' "$RESULTS"))"
done
for t in $TARGETS; do
	[ "$t" = redis ] && continue
	# shellcheck disable=SC2046
	awk -v t="$t" -v r="$(median $(awk '$1 == "redis" {print $4}' "$RESULTS"))" -v c="$(median $(awk -v t="$t" '$1 == t {print $4}' "$RESULTS"))" \
		-v rl="$(median $(awk '$1 == "redis" {print $3}' "$RESULTS"))" -v cl="$(median $(awk -v t="$t" '$1 == t {print $3}' "$RESULTS"))" \
		'BEGIN {printf "  %s/redis: peak RSS %.2f, load time %.2f\n", t, c / r, cl / rl}'
done
