#!/usr/bin/env bash
# Installs the system packages counterd's tests and benchmark scripts use:
# redis-cli, redis-server and redis-benchmark (Debian package redis-server
# pulls in redis-tools). Safe to run repeatedly; does nothing when present.
set -euo pipefail
need=()
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
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
