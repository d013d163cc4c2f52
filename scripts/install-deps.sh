#!/usr/bin/env bash
# Installs the system packages counterd's tests and benchmark scripts use:
# redis-cli, redis-server and redis-benchmark (Debian package redis-server
# pulls in redis-tools), PostgreSQL's server binaries (initdb, pg_ctl: the
# tests start private servers from them), wrk (scripts/bench-http.sh),
# protoc (protobuf-compiler: make generate regenerates api/*.proto's Go code),
# chromium (the web console's browser tests, internal/ui),
# nats-server (the pipeline tests start a private JetStream server) and
# promtool (Debian package prometheus: deploy/'s tests check the alert
# rules and dashboard with it).
# Safe to run repeatedly; does nothing when everything is present.
set -euo pipefail
need=()
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v nats-server >/dev/null 2>&1 || need+=(nats-server) # JetStream for the event pipeline tests
command -v ip >/dev/null 2>&1 || need+=(iproute2) # network namespaces for the cluster partition test
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler) # make generate / check-generate (api/*.proto)
command -v chromium >/dev/null 2>&1 || need+=(chromium) # headless browser tests of the console (docs/console.md)
command -v promtool >/dev/null 2>&1 || need+=(prometheus) # promtool checks deploy/prometheus and the dashboard's queries
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: need root to install ${need[*]} (or install them yourself)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${need[@]}"
