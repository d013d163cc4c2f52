#!/usr/bin/env bash
# Prepares the build context of the Dockerfile in DIR (default bin/image):
# static counterd and counterctl (CGO_ENABLED=0, version stamped from
# VERSION or git describe; stripped, -trimpath and -tags grpcnotrace,nethttpomithttp2 like
# make build), the CA bundle of the machine that builds (for
# counterd's and counterctl's outgoing TLS: PostgreSQL, Redis, peers), and
# an empty data directory. The Dockerfile starts FROM scratch, so
# "docker build DIR" pulls no base image.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-bin/image}
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo devel)}
ca=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
if [ ! -s "$ca" ]; then
  echo "image-context: no CA bundle at $ca (Debian package ca-certificates; or set CA_BUNDLE)" >&2
  exit 1
fi
mkdir -p "$dir/data"
ldflags="-s -w -X github.com/counterd/counterd/internal/buildinfo.version=$version"
for cmd in counterd counterctl; do
  CGO_ENABLED=0 GOOS=${GOOS:-linux} go build -trimpath -tags grpcnotrace,nethttpomithttp2 -ldflags "$ldflags" -o "$dir/$cmd" "./cmd/$cmd"
done
cp "$ca" "$dir/ca-certificates.crt"
cp Dockerfile "$dir/Dockerfile"
echo "image-context: $dir ready (counterd $version); docker build -t counterd:$version $dir"
