# Shared helpers of the A/B benchmark scripts (bench-auth.sh, bench-tls.sh,
# bench-resp.sh, bench-resp-ab.sh, bench-ratelimit-vs-gubernator.sh,
# bench-ratelimit-global.sh);
# source it, don't run it.

# cputicks PID: the process's user + system CPU time, in clock ticks.
cputicks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# wrksummary OUT TICKS NAME: "reqs/s p50 p99 cpu_us_per_request" from a wrk
# --latency output file and the server's CPU ticks during the run; exits
# naming NAME if wrk saw errors or no requests.
wrksummary() {
  local out=$1 ticks=$2 name=$3 n
  if grep -q "Non-2xx" "$out" || ! grep -q "Requests/sec" "$out"; then echo "$name: errors:" >&2; cat "$out" >&2; exit 1; fi
  n=$(awk '/requests in/ {print $1}' "$out")
  echo "$(awk '/Requests\/sec/ {print $2}' "$out") $(awk '$1=="50%" {print $2}' "$out") $(awk '$1=="99%" {print $2}' "$out") $(python3 -c "print(f'{$ticks/$(getconf CLK_TCK)*1e6/$n:.2f}')")"
}

# median X...: the median of numbers (the upper one of an even count).
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# resp_test_args NAME: the redis-benchmark arguments of a RESP test
# (bench-resp.sh lists what each does).
resp_test_args() {
  case $1 in
  incr_p1) echo "-t incr -P 1" ;;
  incr_p16) echo "-t incr -P 16" ;;
  incr_rand) echo "-t incr -r 100000" ;;
  get) echo "-r 100000 get counter:__rand_int__" ;;
  hincrby) echo "-r 1000 hincrby bench:h f:__rand_int__ 1" ;;
  pfadd) echo "-r 1000000 pfadd bench:hll __rand_int__" ;;
  *) echo "unknown RESP test $1" >&2; exit 2 ;;
  esac
}

# free_port: a loopback TCP port nothing listens on, below the ephemeral
# range (32768-60999, where a client's local port can make a bind fail
# although nothing listens), not returned before by this script.
free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 12000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      case " ${USED_PORTS:-} " in *" $p "*) continue ;; esac
      USED_PORTS="${USED_PORTS:-} $p"
      echo "$p"
      return
    fi
  done
  echo "$(basename "$0"): no free port" >&2
  exit 1
}

# wait_ping PORT NAME LOGFILE: waits until the server on PORT answers
# redis-cli PING, or exits printing its log.
wait_ping() {
  for _ in $(seq 1 600); do
    if [ "$(redis-cli -p "$1" PING 2>/dev/null || true)" = PONG ]; then
      return
    fi
    sleep 0.05
  done
  echo "$(basename "$0"): $2 did not answer PING on port $1; log:" >&2
  cat "$3" >&2
  exit 1
}

# gubernator_bin: sets GUBERNATOR_BIN, unless set, to gubernator v2.13.0,
# installed once with `go install` into ~/.cache/counterd-bench.
gubernator_bin() {
  if [ -z "${GUBERNATOR_BIN:-}" ]; then
    GUBERNATOR_BIN=$HOME/.cache/counterd-bench/gubernator-v2.13.0/gubernator
    if [ ! -x "$GUBERNATOR_BIN" ]; then
      echo "installing gubernator v2.13.0 (go install, once)..." >&2
      GOBIN=$(dirname "$GUBERNATOR_BIN") GOFLAGS=-mod=mod go install github.com/gubernator-io/gubernator/v2/cmd/gubernator@v2.13.0
    fi
  fi
}
