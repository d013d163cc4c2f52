#!/usr/bin/env bash
# Start a local counterd cluster of N nodes (default 3) on loopback, each with
# its own data directory, and stop them all on Ctrl-C.
#
#   scripts/cluster.sh [N]
#
# Node i listens on HTTP 127.0.0.1:818i, RESP 127.0.0.1:638i, gRPC
# 127.0.0.1:919i and gossip 127.0.0.1:794i; every node lists every gossip
# address in --join, so they may start in any order. Data lives in
# ${CLUSTER_DIR:-./cluster-data}/nI. Extra flags go through COUNTERD_FLAGS.
set -euo pipefail
n=${1:-3}
if ! [[ $n =~ ^[1-9]$ ]]; then
  echo "usage: $0 [N]   (1 <= N <= 9)" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
dir=${CLUSTER_DIR:-./cluster-data}
mkdir -p bin "$dir"
go build -o bin/counterd ./cmd/counterd

join=""
for i in $(seq 1 "$n"); do join+="${join:+,}127.0.0.1:794$i"; done

pids=()
stop() {
  echo "stopping ${#pids[@]} nodes"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
}
trap stop EXIT INT TERM

for i in $(seq 1 "$n"); do
  # shellcheck disable=SC2086
  ./bin/counterd --node-id "n$i" --data "$dir/n$i" \
    --http "127.0.0.1:818$i" --resp "127.0.0.1:638$i" --grpc "127.0.0.1:919$i" \
    --gossip "127.0.0.1:794$i" --join "$join" ${COUNTERD_FLAGS:-} \
    >"$dir/n$i.log" 2>&1 &
  pids+=($!)
  echo "n$i: http://127.0.0.1:818$i  resp 127.0.0.1:638$i  log $dir/n$i.log"
done
echo "cluster view: curl -s 127.0.0.1:8181/cluster"
wait -n "${pids[@]}" || true
echo "a node exited; see the logs in $dir" >&2
