#!/usr/bin/env bash
# bench-ratelimit-global.sh: one hot global limit hit at full speed from
# every node, counterd's scope global-approx on 1 and on 3 nodes (and, for
# comparison, the same limit decided on the key's owner on 3 nodes) beside
# gubernator v2.13.0's GLOBAL behaviour on 3 peers, same machine, same
# load generator (rlbench global), same run. Prints every run and the
# medians: checks/s, server CPU per check, and the measured overshoot.
#
# Usage: scripts/bench-ratelimit-global.sh [-c conns] [-d duration] [-R rounds] [-l limit] [-t tests] [-K]
#   -c  concurrent HTTP clients per node (default 16; env CONNS)
#   -d  duration of a run (default 10s; env DURATION)
#   -R  rounds (default 3; env ROUNDS)
#   -l  the limit per second (default 1000; env LIMIT)
#   -t  tests, comma-separated (default global1,global3,alone3,owner3,gubernator3):
#       global1      counterd, 1-node cluster, policy scope global-approx
#       global3      counterd, 3-node cluster, the same policy
#       alone3       counterd, three 1-node clusters that do not know each
#                    other, the same policy on each (so 3x the admissions:
#                    its overshoot is not a figure): the CPU per check of
#                    three processes sharing the cores with nothing
#                    exchanged, the baseline of global3's CPU per check
#       owner3       counterd, 3-node cluster, the same limit decided on the
#                    key's owner (checks on the other nodes are forwarded)
#       gubernator3  gubernator, 3 peers, behavior GLOBAL, TOKEN_BUCKET
#   -K  keep the temporary directory
#
# Environment: GUBERNATOR_BIN (default: gubernator_bin in benchlib.sh),
# COUNTERD (default: built with make build's flags).
#
# The limit: fixed_window LIMIT per 1s on one key (counterd); gubernator's
# token bucket of LIMIT per 1000 ms, which refills whole at its
# reset_time (a window starting at the first hit). Overshoot is measured
# two ways (rlbench global): mean_overshoot% is how far the admissions per
# second over the whole run are above LIMIT; max_window% is the most
# admissions in one window (epoch-aligned for counterd; gubernator's by
# reset_time) above LIMIT. CPU per check is the servers' user+system CPU
# over the run divided by the checks answered. The load generator runs on
# the same cores: on a small machine 3 nodes cannot give 3x the checks/s
# of one; flat CPU per check is what shows that nothing is forwarded.
# Three processes on fewer cores each cost more per check than one even
# when they share nothing (scheduling, caches, one runtime each): global3
# is flat when it matches alone3, and global3/alone3 is what the cluster
# adds (gossip, leases, exchanges).
set -euo pipefail

CONNS=${CONNS:-16}
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
LIMIT=${LIMIT:-1000}
TESTS="global1 global3 alone3 owner3 gubernator3"
KEEP=0
while getopts "c:d:R:l:t:Kh" opt; do
	case $opt in
	c) CONNS=$OPTARG ;;
	d) DURATION=$OPTARG ;;
	R) ROUNDS=$OPTARG ;;
	l) LIMIT=$OPTARG ;;
	t) TESTS=${OPTARG//,/ } ;;
	K) KEEP=1 ;;
	*) sed -n '2,43p' "$0"; exit 2 ;;
	esac
done
command -v curl >/dev/null || { echo "bench-ratelimit-global: curl not found" >&2; exit 1; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-rl-global.XXXXXX")
PIDS=()
stop_all() { # SIGTERM, and SIGKILL to what still runs 5 s later (a gubernator peer may hang in its shutdown)
	local p _
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	PIDS=()
}
cleanup() {
	stop_all
	if [ "$KEEP" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# shellcheck source=scripts/benchlib.sh
. "$ROOT/scripts/benchlib.sh"

case " $TESTS " in *" gubernator3 "*) gubernator_bin ;; esac
if [ -z "${COUNTERD:-}" ]; then
	echo "building counterd (make build's flags)..." >&2
	(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -tags grpcnotrace,nethttpomithttp2 -ldflags "-s -w" -o "$TMP/counterd" ./cmd/counterd)
	COUNTERD=$TMP/counterd
fi
echo "building rlbench..." >&2
(cd "$ROOT" && go build -o "$TMP/rlbench" ./internal/api/ratelimitapi/cmd/rlbench)
RLBENCH=$TMP/rlbench

# start_counterd N [alone]: an N-node cluster on loopback (alone: N
# 1-node clusters); sets ADDRS (HTTP) and SPIDS (pids), and puts the
# policies "hot" and "own".
start_counterd() {
	local n=$1 alone=${2:-} i gossips=() https=() dir join seen=$1 puts a
	for i in $(seq 1 "$n"); do gossips+=("127.0.0.1:$(free_port)"); https+=("127.0.0.1:$(free_port)"); done
	SPIDS=()
	for i in $(seq 1 "$n"); do
		dir=$TMP/cd$n-$i-$RANDOM
		join=$(IFS=,; echo "${gossips[*]}")
		[ -n "$alone" ] && join=${gossips[$((i - 1))]}
		"$COUNTERD" --node-id "n$i" --data "$dir" --http "${https[$((i - 1))]}" --grpc "127.0.0.1:$(free_port)" \
			--resp "127.0.0.1:$(free_port)" --gossip "${gossips[$((i - 1))]}" --join "$join" \
			--durability async >"$dir.log" 2>&1 &
		PIDS+=($!)
		SPIDS+=($!)
	done
	ADDRS=$(IFS=,; echo "${https[*]}")
	puts=${https[0]}
	if [ -n "$alone" ]; then seen=1 puts=${https[*]}; fi
	for a in "${https[@]}"; do
		for _ in $(seq 300); do curl -fsS -m 2 "http://$a/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
	done
	# every node sees all the others
	for a in "${https[@]}"; do
		for _ in $(seq 300); do
			[ "$(curl -fsS -m 2 "http://$a/cluster" 2>/dev/null | grep -o '"state":"alive"' | wc -l)" = "$seen" ] && break
			sleep 0.1
		done
	done
	for a in $puts; do
		curl -fsS -X PUT -d "{\"match\":\"hot:*\",\"algorithm\":\"fixed_window\",\"limit\":$LIMIT,\"period\":\"1s\",\"scope\":\"global-approx\"}" \
			"http://$a/ratelimit/policies/hot" >/dev/null
		curl -fsS -X PUT -d "{\"match\":\"hot:*\",\"algorithm\":\"fixed_window\",\"limit\":$LIMIT,\"period\":\"1s\"}" \
			"http://$a/ratelimit/policies/own" >/dev/null
	done
	for a in "${https[@]}"; do
		for _ in $(seq 300); do
			curl -fsS "http://$a/ratelimit/policies/own" >/dev/null 2>&1 && curl -fsS "http://$a/ratelimit/policies/hot" >/dev/null 2>&1 && break
			sleep 0.1
		done
	done
}

# start_gubernator N: N peers discovering each other by member-list, peer
# i on 127.0.0.i (gubernator's member-list keeps one peer per IP address:
# peers sharing 127.0.0.1 would each see one peer and decide alone). No
# GUBER_MEMBERLIST_ADVERTISE_ADDRESS: it is the gRPC address announced to
# the peers (default GUBER_ADVERTISE_ADDRESS), not the member-list one.
# Each peer runs in a UTS namespace of its own (unshare, root) with its
# own host name: member-list names a peer by the host name, and peers of
# one name conflict.
start_gubernator() {
	local n=$1 i ip mls=() https=() grpcs=()
	for i in $(seq 1 "$n"); do
		ip=127.0.0.$i
		mls+=("$ip:$(free_port)"); https+=("$ip:$(free_port)"); grpcs+=("$ip:$(free_port)")
	done
	SPIDS=()
	for i in $(seq 0 $((n - 1))); do
		env OTEL_TRACES_EXPORTER=none GUBER_HTTP_ADDRESS=${https[$i]} GUBER_GRPC_ADDRESS=${grpcs[$i]} \
			GUBER_ADVERTISE_ADDRESS=${grpcs[$i]} GUBER_PEER_DISCOVERY_TYPE=member-list \
			GUBER_MEMBERLIST_ADDRESS=${mls[$i]} GUBER_MEMBERLIST_BIND_ADDRESS=${mls[$i]} \
			GUBER_MEMBERLIST_KNOWN_NODES=$(IFS=,; echo "${mls[*]}") \
			GUBER_LOG_LEVEL=error unshare --uts sh -c "hostname gubernator-$i && exec '$GUBERNATOR_BIN'" >"$TMP/gubernator-$i-$RANDOM.log" 2>&1 &
		PIDS+=($!)
		SPIDS+=($!)
	done
	ADDRS=$(IFS=,; echo "${https[*]}")
	local body='{"requests":[{"name":"warm","unique_key":"w","hits":1,"limit":10,"duration":1000,"behavior":2}]}'
	for a in "${https[@]}"; do
		for _ in $(seq 300); do curl -fsS -m 2 -d "$body" "http://$a/v1/GetRateLimits" 2>/dev/null | grep -q UNDER_LIMIT && break; sleep 0.1; done
	done
	# member-list needs a moment to agree on the peers (GLOBAL owners);
	# without it the comparison would be void.
	local ok
	for a in "${https[@]}"; do
		ok=0
		for _ in $(seq 100); do
			if [ "$(curl -fsS -m 2 "http://$a/v1/HealthCheck" 2>/dev/null | grep -o '"peer_count":[0-9]*' | cut -d: -f2)" = "$n" ]; then ok=1; break; fi
			sleep 0.1
		done
		[ "$ok" = 1 ] || { echo "bench-ratelimit-global: gubernator $a does not see $n peers: $(curl -sS -m 2 "http://$a/v1/HealthCheck")" >&2; exit 1; }
	done
}

ticks_of() { local t=0 p; for p in "${SPIDS[@]}"; do t=$((t + $(cputicks "$p"))); done; echo "$t"; }

RESULTS=$TMP/results.txt # test round checks_per_s cpu_us mean_overshoot% max_window_overshoot%
: >"$RESULTS"

run() { # test round
	local test=$1 round=$2 target=counterd-http policy=hot line t0 t1 checks rps mean most cpu
	case $test in
	global1) start_counterd 1 ;;
	global3) start_counterd 3 ;;
	alone3) start_counterd 3 alone ;;
	owner3) start_counterd 3; policy=own ;;
	gubernator3) start_gubernator 3; target=gubernator-http ;;
	*) echo "unknown test $test" >&2; exit 2 ;;
	esac
	t0=$(ticks_of)
	line=$("$RLBENCH" global -target "$target" -addrs "$ADDRS" -c "$CONNS" -d "$DURATION" -limit "$LIMIT" -period 1s -key "r$round" -policy "$policy")
	t1=$(ticks_of)
	stop_all
	field() { echo "$line" | head -1 | tr ' ' '\n' | awk -F= -v k="$1" '$1 == k {print $2}'; }
	checks=$(field checks) rps=$(field checks_per_s) mean=$(field mean_overshoot_pct) most=$(field overshoot_pct)
	if [ "$(field errors)" != 0 ]; then echo "$test: errors: $line" >&2; exit 1; fi
	cpu=$(python3 -c "print(f'{($t1-$t0)/$(getconf CLK_TCK)*1e6/max($checks,1):.1f}')")
	echo "$test $round $rps $cpu $mean $most" >>"$RESULTS"
	printf "  round %d %-12s %8s checks/s  cpu %7s us/check  per-second %5s (mean overshoot %5s%%)  max window %5s (+%s%%)  per window %s\n" \
		"$round" "$test" "$rps" "$cpu" "$(field per_period)" "$mean" "$(field max_window)" "$most" "$(field per_window)"
}

echo "counterd $("$COUNTERD" --version) vs gubernator ${GUBERNATOR_BIN:-(not run)}; $(nproc) cores; $CONNS clients per node, $DURATION per run, $ROUNDS rounds, limit $LIMIT/s; tests: $TESTS"
echo "uptime: $(uptime)"
for round in $(seq 1 "$ROUNDS"); do
	order=$TESTS
	[ $((round % 2)) = 0 ] && order=$(echo "$TESTS" | tr ' ' '\n' | tac | tr '\n' ' ')
	for t in $order; do run "$t" "$round"; done
done

echo
echo "medians over $ROUNDS rounds (uptime: $(uptime)):"
for t in $TESTS; do
	# shellcheck disable=SC2046
	printf "  %-12s %8s checks/s  cpu %7s us/check  mean overshoot %5s%%  max window overshoot %5s%%\n" "$t" \
		"$(median $(awk -v t="$t" '$1 == t {print $3}' "$RESULTS"))" \
		"$(median $(awk -v t="$t" '$1 == t {print $4}' "$RESULTS"))" \
		"$(median $(awk -v t="$t" '$1 == t {print $5}' "$RESULTS"))" \
		"$(median $(awk -v t="$t" '$1 == t {print $6}' "$RESULTS"))"
done
