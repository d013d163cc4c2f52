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
echo "load after:  $(uptime)"
awk '/^BenchmarkPipeline/ { name=$1; sub(/-[0-9]+$/, "", name); for (i=3; i<NF; i++) if ($(i+1) == "events/s") { s[name] = s[name] " " $i } }
     END { for (n in s) print n ":" s[n] " events/s" }' /tmp/bench-pipeline.$$.out | sort
rm -f /tmp/bench-pipeline.$$.out
