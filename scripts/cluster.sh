#!/usr/bin/env bash
# A local counterd cluster on loopback, each node with its own data
# directory, for trying out failover, rejoin and forget.
#
#   scripts/cluster.sh [N]       start N nodes (default 3) and watch them until
#                                Ctrl-C, which stops them all; a node that dies
#                                is reported, the others keep running
#   scripts/cluster.sh up [N]    start N nodes in the background and return
#   scripts/cluster.sh stop I    stop node I gracefully (SIGTERM: it hands off
#                                and leaves)
#   scripts/cluster.sh kill I    kill node I (SIGKILL: a crash)
#   scripts/cluster.sh start I   start node I on its data directory; an I above
#                                the cluster's size adds a node
#   scripts/cluster.sh status    list the nodes: running or not, ready or not
#   scripts/cluster.sh down      stop every node
#
# Node I is named nI and listens on HTTP 127.0.0.1:818I, RESP 127.0.0.1:638I,
# gRPC 127.0.0.1:919I and gossip 127.0.0.1:794I (every port plus
# CLUSTER_PORT_OFFSET, default 0); every node lists every gossip address in
# --join, so they may start in any order. Data, logs (nI.log) and pid files
# live in ${CLUSTER_DIR:-./cluster-data}. COUNTERD_BIN names a counterd binary
# to use instead of building bin/counterd; extra flags go through
# COUNTERD_FLAGS.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${CLUSTER_DIR:-./cluster-data}
off=${CLUSTER_PORT_OFFSET:-0}
bin=${COUNTERD_BIN:-}

usage() {
  sed -n '5,16p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

port() { echo $(($1 + off)); } # port BASE+I
http_of() { echo "127.0.0.1:$(port $((8180 + $1)))"; }
size() { cat "$dir/size" 2>/dev/null || echo 0; }
pid_of() { cat "$dir/n$1.pid" 2>/dev/null || true; }
running() {
  local p
  p=$(pid_of "$1")
  [[ -n $p ]] && kill -0 "$p" 2>/dev/null
}
node_arg() {
  [[ ${1:-} =~ ^[1-9]$ ]] || { echo "node number must be 1..9, not '${1:-}'" >&2; exit 2; }
}

build() {
  if [[ -z $bin ]]; then
    mkdir -p bin
    go build -o bin/counterd ./cmd/counterd
    bin=./bin/counterd
  fi
}

# start_node I: run node I in the background, wait until it answers.
start_node() {
  local i=$1 n join="" j
  if running "$i"; then
    echo "n$i is already running (pid $(pid_of "$i"))"
    return 0
  fi
  n=$(size)
  ((i > n)) && n=$i && echo "$n" >"$dir/size"
  for j in $(seq 1 "$n"); do join+="${join:+,}127.0.0.1:$(port $((7940 + j)))"; done
  mkdir -p "$dir/n$i"
  echo "=== $(date -u +%FT%TZ) start n$i" >>"$dir/n$i.log"
  # shellcheck disable=SC2086
  nohup "$bin" --node-id "n$i" --data "$dir/n$i" \
    --http "$(http_of "$i")" --resp "127.0.0.1:$(port $((6380 + i)))" \
    --grpc "127.0.0.1:$(port $((9190 + i)))" --gossip "127.0.0.1:$(port $((7940 + i)))" \
    --join "$join" ${COUNTERD_FLAGS:-} >>"$dir/n$i.log" 2>&1 </dev/null &
  echo $! >"$dir/n$i.pid"
  for _ in $(seq 1 300); do # up to 30 s
    if ! running "$i"; then
      echo "n$i exited while starting; see $dir/n$i.log" >&2
      tail -n 5 "$dir/n$i.log" >&2
      return 1
    fi
    if curl -fs -o /dev/null "http://$(http_of "$i")/healthz" 2>/dev/null; then
      echo "n$i: http://$(http_of "$i")  resp 127.0.0.1:$(port $((6380 + i)))  pid $(pid_of "$i")  log $dir/n$i.log"
      return 0
    fi
    sleep 0.1
  done
  echo "n$i does not answer on $(http_of "$i"); see $dir/n$i.log" >&2
  return 1
}

# wait_ready I...: wait up to 30 s until the nodes are ready (joined);
# warn about those that are not.
wait_ready() {
  local i ok
  for _ in $(seq 1 300); do
    ok=1
    for i in "$@"; do
      curl -fs -o /dev/null "http://$(http_of "$i")/readyz" 2>/dev/null || ok=""
    done
    [[ -n $ok ]] && return 0
    sleep 0.1
  done
  for i in "$@"; do
    curl -fs -o /dev/null "http://$(http_of "$i")/readyz" 2>/dev/null ||
      echo "n$i is running but not ready: $(curl -s "http://$(http_of "$i")/readyz" 2>/dev/null)" >&2
  done
}

# signal_node SIG I: send SIG to node I and wait until it is gone.
signal_node() {
  local sig=$1 i=$2 p
  if ! running "$i"; then
    echo "n$i is not running"
    rm -f "$dir/n$i.pid"
    return 0
  fi
  p=$(pid_of "$i")
  kill "-$sig" "$p"
  for _ in $(seq 1 300); do
    kill -0 "$p" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$p" 2>/dev/null; then
    echo "n$i (pid $p) did not exit within 30 s" >&2
    return 1
  fi
  rm -f "$dir/n$i.pid"
  echo "n$i stopped ($sig)"
}

status() {
  local n i state ready
  n=$(size)
  if ((n == 0)); then
    echo "no cluster in $dir"
    return 0
  fi
  for i in $(seq 1 "$n"); do
    if running "$i"; then
      state="running (pid $(pid_of "$i"))"
      ready=$(curl -s -o /dev/null -w '%{http_code}' "http://$(http_of "$i")/readyz" 2>/dev/null || true)
      [[ $ready == 200 ]] && ready=ready || ready="not ready ($ready)"
    else
      state=stopped
      ready=""
    fi
    printf 'n%s  %-22s  %-22s  %s\n' "$i" "$(http_of "$i")" "$state" "$ready"
  done
}

up() {
  local n=${1:-3} i
  node_arg "$n"
  mkdir -p "$dir"
  ((n > $(size))) && echo "$n" >"$dir/size"
  build
  for i in $(seq 1 "$n"); do start_node "$i"; done
  wait_ready $(seq 1 "$n")
  echo "cluster view: curl -s $(http_of 1)/cluster"
}

down() {
  local i
  for i in $(seq 1 "$(size)"); do
    running "$i" && signal_node TERM "$i"
  done
  return 0
}

# watch: report nodes that exit (the others keep running) until Ctrl-C,
# then stop them all.
watch_nodes() {
  trap 'echo; echo "stopping the cluster"; down; exit 0' INT TERM
  local -a seen=() # by node number (bash 3 has no associative arrays)
  local i
  echo "watching; Ctrl-C stops every node. In another terminal: $0 kill 2 | start 2 | status"
  while :; do
    for i in $(seq 1 "$(size)"); do
      if running "$i"; then
        seen[$i]=up
      elif [[ ${seen[$i]:-} == up ]]; then
        seen[$i]=down
        echo "$(date -u +%T) n$i is not running (the others keep serving); restart it with: $0 start $i" >&2
      fi
    done
    sleep 1
  done
}

case ${1:-} in
'' | [1-9]) up "${1:-3}" && watch_nodes ;;
up) up "${2:-3}" ;;
start) node_arg "${2:-}"; mkdir -p "$dir"; build; start_node "$2"; wait_ready "$2" ;;
stop) node_arg "${2:-}"; signal_node TERM "$2" ;;
kill) node_arg "${2:-}"; signal_node KILL "$2" ;;
status) status ;;
down) down ;;
-h | --help | help) usage ;;
*) usage ;;
esac
