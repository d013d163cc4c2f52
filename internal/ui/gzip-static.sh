#!/bin/sh
# Writes gz/<path>.gz, gzip -9 -n, for every file of static/ (go generate
# ./internal/ui; ui.go embeds gz/).
set -eu
cd "$(dirname "$0")"
rm -rf gz
cd static
find . -type f | sort | while read -r f; do
	mkdir -p "../gz/$(dirname "$f")"
	gzip -9 -n -c "$f" > "../gz/$f.gz"
done
