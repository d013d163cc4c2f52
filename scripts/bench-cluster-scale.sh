#!/usr/bin/env bash
# Cluster scale benchmark (issue 27): a 3-node and a 16-node cluster of
# counterd processes on loopback, one after the other in the same run,
# measured by BenchmarkClusterScale in cmd/counterd/scale_bench_test.go:
# join and leave time and the state bytes handed off, convergence P50/P99,
# failover window, prefix-aggregate latency, and increments/s with the
# nodes' CPU time per increment (docs/capacity.md reads these).
#
#   scripts/bench-cluster-scale.sh            # 3 vs 16 nodes
#   BENCH_NODES=8 scripts/bench-cluster-scale.sh
#
# Tunables (environment): BENCH_NODES (16), BENCH_IDS (5000),
# BENCH_SAMPLES (300: 30 convergence samples), BENCH_KILLS (3),
# BENCH_SECONDS (5), BENCH_CONCURRENCY (48). Every process, load
# generators included, shares the machine's cores.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/counterd" ./cmd/counterd
go build -o "$tmp/counterctl" ./cmd/counterctl
echo "# $(nproc) cores shared by every node and the load generators"
BENCH_NODES=${BENCH_NODES:-16} COUNTERD_BIN="$tmp/counterd" COUNTERCTL_BIN="$tmp/counterctl" \
  go test -run '^$' -bench '^BenchmarkClusterScale$' -benchtime 1x -timeout 60m -v ./cmd/counterd/
