#!/usr/bin/env bash
# Peer-cluster benchmark (issue 4): three counterd processes on loopback,
# measured by BenchmarkCluster in cmd/counterd/cluster_test.go:
#
#   convergence  a pn increment acknowledged by one node, then polled every
#                2 ms on the two others until visible, while 4 background
#                writers increment 200 pn ids on all nodes: P50/P99/max ms
#   forwarding   sequential increments sent to n1, alternating ids n1 owns
#                and ids another node owns (placement from GET /cluster and
#                internal/cluster/ring): P50/P99/max us, direct vs forwarded
#   throughput   counterctl bench (async increments, 1000 counter ids):
#                one embedded node vs the three cluster nodes at once with
#                the same total concurrency, alternating order per round
#
#   scripts/bench-cluster.sh
#
# Tunables (environment): BENCH_SAMPLES (300), BENCH_OPS (2000),
# BENCH_ROUNDS (3), BENCH_SECONDS (5), BENCH_CONCURRENCY (48).
# Every process, load generators included, shares the machine's cores.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/counterd" ./cmd/counterd
go build -o "$tmp/counterctl" ./cmd/counterctl
echo "# $(nproc) cores shared by 3 cluster nodes, 1 embedded node and the load generators"
COUNTERD_BIN="$tmp/counterd" COUNTERCTL_BIN="$tmp/counterctl" \
  go test -run '^$' -bench '^BenchmarkCluster$' -benchtime 1x -timeout 20m -v ./cmd/counterd/
