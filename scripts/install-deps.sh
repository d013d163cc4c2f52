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
# The Redis client libraries the scripting tests drive (internal/api/resp,
# TestScriptIoredis and TestScriptRedisPy): Debian's python3-redis
# (redis-py; 4.3.4 on bookworm) for /usr/bin/python3, and ioredis from npm
# (pinned below) into $COUNTERD_TEST_CACHE/node_modules (default
# ~/.cache/counterd-test/node_modules), where the tests look for it; npm
# and node themselves are not installed here.
# Safe to run repeatedly; does nothing when everything is present.
set -euo pipefail
IOREDIS_VERSION=5.9.3
cache=${COUNTERD_TEST_CACHE:-$HOME/.cache/counterd-test}
if command -v npm >/dev/null 2>&1; then
  if [ "$(node -p "require('$cache/node_modules/ioredis/package.json').version" 2>/dev/null)" != "$IOREDIS_VERSION" ]; then
    mkdir -p "$cache"
    npm install --silent --no-audit --no-fund --no-save --prefix "$cache" "ioredis@$IOREDIS_VERSION"
  fi
else
  echo "install-deps: npm not found; skipping ioredis (the ioredis scripting test will skip)" >&2
fi
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
/usr/bin/python3 -c 'import redis' >/dev/null 2>&1 || need+=(python3-redis) # redis-py for the scripting test (register_script)
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
