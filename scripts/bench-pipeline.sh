#!/usr/bin/env bash
# End-to-end event pipeline throughput (docs/pipeline.md, BENCHMARKS.md
# "Event pipeline"): events posted to a collector-only counterd in NDJSON
# batches of 1000 (four in flight) until a consumer counterd has applied
# them all, on kfake (franz-go's in-process Kafka-protocol cluster, served
# by the benchmark process) and on a NATS JetStream server; then the same
# events as individual HTTP requests (increment, pfadd, hincr per event,
# 64 connections) against one counterd, for comparison. Each benchmark
# iteration is 1000 events.
#
#   scripts/bench-pipeline.sh [EVENTS_THOUSANDS] [COUNT] [HTTP_EVENTS_THOUSANDS]
#
# Each run also reports the CPU each process spent per event
# (collector-, consumer-, nats- and bench-cpu-us/event; bench is the
# sender, the pollers and, with Kafka, kfake). COUNTERD_BENCH_PROFILE=DIR
# writes CPU profiles of the collector and the consumer of each run (the
# first COUNTERD_BENCH_PROFILE_SECONDS, default 5).
#
# Then the CPU cost of consuming alone (internal/pipeline
# BenchmarkConsumeCost): one embedded node applies EVENTS_THOUSANDS
# thousand events already on a private JetStream with the four rules of
# the impressions pipeline (views, unique viewers, hourly likes, a
# per-user window), and, in the same run, a bare consumer (poll and ack,
# nothing applied) reads the same stream; printed: events/s, CPU µs per
# event of both and the ratio, per run and their medians over the runs.
# (The consumer alone, without the stream, for profiles:
# go test -run '^$' -bench BenchmarkApplyCost -benchtime=1000000x
# -cpuprofile cpu.out ./internal/pipeline/.)
#
# Then the same consumption on a cluster (cmd/counterd
# BenchmarkClusterConsumeCost): CLUSTER_NODES (default "1,3") counterd
# processes joined with --join on loopback share one durable consumer of
# a fresh private JetStream stream of CLUSTER_EVENTS_THOUSANDS (default
# 100) thousand events with the same four rules, each op sent to its
# counter's owner with its dedupe marks (ApplyMarked); printed: events/s,
# the nodes' CPU µs per event in total and per node, a bare consumer's on
# the same stream in the same run, the ring changes during the run (not 0:
# a node was suspected dead under load, not the steady state), and the
# medians over the runs.
# COUNTERD_BIN names the counterd binary (default: built from this tree),
# so a base binary can be measured alternately with a new one.
#
# Defaults: 1000 (1,000,000 events: a sustained rate; runs of 100,000
# events last about a second and mostly measure the start, and stop before
# the engine's first memtable flushes), 3 runs of each; the HTTP comparison
# sends 100 (100,000 events: at a few thousand a second, a million would
# take minutes a run). NATS: COUNTERD_TEST_NATS
# names a server; else a private nats-server -js is started (apt-get install
# nats-server). Everything shares the machine's cores; the load average is
# printed before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000}
COUNT=${2:-3}
HTTPN=${3:-100}
echo "load before: $(uptime)"
go test -run '^$' -bench 'BenchmarkPipeline(Kafka|JetStream)$' -benchtime="${N}x" -count="$COUNT" ./cmd/counterd/ | tee /tmp/bench-pipeline.$$.out
go test -run '^$' -bench 'BenchmarkPipelineHTTPIncrements$' -benchtime="${HTTPN}x" -count="$COUNT" ./cmd/counterd/ | tee -a /tmp/bench-pipeline.$$.out
go test -run '^$' -bench 'BenchmarkConsumeCost$' -benchtime="${N}000x" -count="$COUNT" ./internal/pipeline/ | tee -a /tmp/bench-pipeline.$$.out
CLUSTER_EVENTS=${CLUSTER_EVENTS_THOUSANDS:-100}000
bin=${COUNTERD_BIN:-}
if [ -z "$bin" ]; then
  bin=/tmp/bench-pipeline.$$.counterd
  go build -o "$bin" ./cmd/counterd
fi
COUNTERD_BIN="$bin" COUNTERD_BENCH_CLUSTER_CONSUME="$CLUSTER_EVENTS" COUNTERD_BENCH_NODES="${CLUSTER_NODES:-1,3}" \
  go test -run '^$' -bench 'BenchmarkClusterConsumeCost$' -benchtime=1x -count="$COUNT" -timeout 60m ./cmd/counterd/ | tee -a /tmp/bench-pipeline.$$.out
[ -z "${COUNTERD_BIN:-}" ] && rm -f "$bin"
echo "load after:  $(uptime)"
awk '/^BenchmarkPipeline/ { name=$1; sub(/-[0-9]+$/, "", name); for (i=3; i<NF; i++) if ($(i+1) == "events/s") { s[name] = s[name] " " $i } }
     END { for (n in s) print n ":" s[n] " events/s" }' /tmp/bench-pipeline.$$.out | sort
awk 'function median(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
                                        return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2 }
     /^BenchmarkConsumeCost/ { for (i=3; i<NF; i++) v[$(i+1)] = $i
       printf "consume, 4 rules, one node: %s events/s, %s CPU us/event; bare consumer: %s events/s, %s CPU us/event; ratio %sx\n",
         v["events/s"], v["cpu-us/event"], v["bare-events/s"], v["bare-cpu-us/event"], v["cpu-x-bare"]
       n++; es[n] = v["events/s"]; cpu[n] = v["cpu-us/event"]; bes[n] = v["bare-events/s"]; bcpu[n] = v["bare-cpu-us/event"]; x[n] = v["cpu-x-bare"] }
     END { if (n > 1) printf "consume, median of %d runs: %.0f events/s, %.3f CPU us/event; bare consumer: %.0f events/s, %.3f CPU us/event; ratio %.1fx\n",
             n, median(es, n), median(cpu, n), median(bes, n), median(bcpu, n), median(x, n) }' /tmp/bench-pipeline.$$.out
awk 'function median(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
                                        return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2 }
     /^BenchmarkClusterConsumeCost\/nodes=.*events\/s/ { name = $1; sub(/-[0-9]+$/, "", name); sub(/.*nodes=/, "", name)
       delete v; for (i=3; i<NF; i++) v[$(i+1)] = $i
       per = ""; for (k = 1; ("n" k "-cpu-us/event") in v; k++) per = per sprintf(" n%d %s", k, v["n" k "-cpu-us/event"])
       printf "cluster of %s: %s events/s, %s CPU us/event in all (per node:%s); bare consumer %s CPU us/event; ratio %sx; ring changes %s\n",
         name, v["events/s"], v["cpu-us/event"], per, v["bare-cpu-us/event"], v["cpu-x-bare"], v["ring-changes"]
       c[name]++; k = c[name]; es[name, k] = v["events/s"]; cpu[name, k] = v["cpu-us/event"]; bcpu[name, k] = v["bare-cpu-us/event"] }
     END { for (name in c) { n = c[name]; if (n < 2) continue
             for (k = 1; k <= n; k++) { a1[k] = es[name, k]; a2[k] = cpu[name, k]; a3[k] = bcpu[name, k] }
             m1 = median(a1, n); m2 = median(a2, n); m3 = median(a3, n)
             printf "cluster of %s, median of %d runs: %.0f events/s, %.2f CPU us/event in all (%.2f a node); bare consumer %.3f CPU us/event\n",
               name, n, m1, m2, m2 / name, m3 } }' /tmp/bench-pipeline.$$.out
rm -f /tmp/bench-pipeline.$$.out
