# Shared helpers of the A/B benchmark scripts (bench-auth.sh, bench-tls.sh,
# bench-resp.sh, bench-resp-ab.sh);
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
