# counterd — run `make help` for the targets.
GO ?= go
PKGS ?= ./...
# VERSION is stamped into both binaries (counterd --version, counterctl --version).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS := -X github.com/counterd/counterd/internal/buildinfo.version=$(VERSION)
# Release builds (build, install, and scripts/image-context.sh alike): no
# symbol table or DWARF (-s -w), no local paths (-trimpath), and gRPC
# without golang.org/x/net/trace (grpcnotrace), whose /debug/requests
# pages counterd never serves and which keeps every exported method
# reachable, and net/http without its HTTP/2 (nethttpomithttp2), which the
# HTTP front end never speaks (gRPC has its own). One build mode for make build, make install and the image:
# static, without cgo (CGO_ENABLED=0), so a release binary is the same
# wherever it is built and needs no C compiler or libc. docs/deploy.md,
# "Building".
BUILDFLAGS := -trimpath -tags grpcnotrace,nethttpomithttp2 -ldflags "-s -w $(LDFLAGS)"
RELEASE_GO := CGO_ENABLED=0 $(GO)

PROTOC_GEN_GO_VERSION ?= v1.36.12
PROTOC_GEN_GO_GRPC_VERSION ?= v1.5.1
GOBIN ?= $(shell $(GO) env GOPATH)/bin
PROTOS := $(shell find api -name '*.proto' 2>/dev/null | sort)

.PHONY: help build check-lean check-deploy image install docs test generate check-generate test-short bench bench-smoke bench-http bench-resp bench-ratelimit bench-auth bench-report bench-pipeline fuzz vet fmt deps run clean

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-15s %s\n", $$1, $$2}'

build: ## build lean static bin/counterd and bin/counterctl (CGO_ENABLED=0, stripped, -trimpath, grpcnotrace, nethttpomithttp2), stamped with VERSION (git describe)
	$(RELEASE_GO) build $(BUILDFLAGS) -o bin/counterd ./cmd/counterd
	$(RELEASE_GO) build $(BUILDFLAGS) -o bin/counterctl ./cmd/counterctl

check-lean: build ## fail if bin/counterd is over 40,000,000 bytes or links a test, browser or plotting module (deploy.TestReleaseBinary)
	COUNTERD_RELEASE_BIN=$(CURDIR)/bin/counterd $(GO) test -count=1 -run '^TestReleaseBinary$$' ./deploy/

check-deploy: ## validate deploy/ offline: deploy/k8s's kustomization and each manifest strictly against the k8s.io/api types (unknown fields refused), the systemd unit with systemd-analyze verify
	$(GO) test -count=1 -run '^(TestKubernetesStrict|TestKubernetesStrictRefuses|TestKubernetesManifests|TestKustomize|TestSystemdUnit)$$' ./deploy/

install: ## go install both commands, stamped with VERSION
	$(RELEASE_GO) install $(BUILDFLAGS) ./cmd/counterd ./cmd/counterctl

image: ## container image counterd:VERSION from scratch (static binaries; pulls no base image)
	VERSION=$(VERSION) ./scripts/image-context.sh bin/image
	docker build -t counterd:$(VERSION) bin/image

run: ## run counterd on its embedded default (./data, :8080 HTTP, :6380 RESP)
	$(GO) run ./cmd/counterd

# TESTP packages are tested at once. Most of the suite waits (on child
# servers, gossip timeouts, sync flushes) rather than computes: the race
# run took 26.5 min with go test's default of one package per core and
# 7.75 min with 8 at once, on the same loaded 2 cores (docs/testing.md).
TESTP ?= 8

# Three steps: the packages that only compute or wait, then the real-binary
# tests of cmd/counterd (floods, overload, clusters and regions of
# processes) alone, then the in-process cluster tests (gossip probes,
# 400 ms owner leases). Run side by side on 2 cores, the floods starved
# the others' leases, probes and deadlines in CI rehearsals
# (docs/testing.md).
TIMED_PKGS ?= ./internal/cluster/... ./internal/backendtest/

test: ## run every test with the race detector (what CI runs)
	$(GO) test -race -count=1 -p $(TESTP) $$($(GO) list $(PKGS) | grep -v -e /internal/cluster/ -e /internal/backendtest -e '/cmd/counterd$$')
	$(GO) test -race -count=1 ./cmd/counterd/
	$(GO) test -race -count=1 -p $(TESTP) $(TIMED_PKGS)

test-short: ## quick tests without the race detector or subprocess tests
	$(GO) test -short -count=1 -p $(TESTP) $(PKGS)

docs: ## regenerate docs/http-reference.md from the OpenAPI document
	$(GO) generate ./internal/api/httpapi

vet: ## go vet
	$(GO) vet $(PKGS)

fmt: ## gofmt every file
	gofmt -w $$(git ls-files '*.go')

bench: ## run the benchmarks quoted in BENCHMARKS.md
	$(GO) test -run '^$$' -bench . -benchtime=2s -count=3 ./internal/engine/ ./internal/counter/

bench-http: ## HTTP increments/s, async vs sync, with wrk (scripts/bench-http.sh)
	./scripts/bench-http.sh

bench-auth: ## cost of --auth on HTTP increments, server CPU per request (scripts/bench-auth.sh)
	SIMUL=1 ./scripts/bench-auth.sh

bench-resp: ## redis-benchmark against counterd and a real redis-server (scripts/bench-resp.sh)
	./scripts/bench-resp.sh

bench-ratelimit: ## rate-limit checks/s; with GUBERNATOR_BIN also gubernator (scripts/bench-ratelimit.sh)
	./scripts/bench-ratelimit.sh

bench-report: ## RESP vs redis-server, HTTP, hot-key and memory benchmarks: docs/bench/report.md + PNG charts (a few minutes)
	$(GO) run ./scripts/benchreport -out docs/bench $(BENCH_REPORT_FLAGS)

bench-pipeline: ## events/s collector to counters on kfake and JetStream vs HTTP requests (scripts/bench-pipeline.sh)
	./scripts/bench-pipeline.sh

bench-smoke: ## run every benchmark once, so they keep compiling and running
	$(GO) test -run '^$$' -bench . -benchtime=1x $(PKGS)

fuzz: ## run each fuzz target for FUZZTIME (default 20s)
	@for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $${FUZZTIME:-20s} $$pkg || exit 1; \
	  done; \
	done

generate: ## regenerate the Go code of api/**/*.proto (protoc + pinned protoc-gen-go, protoc-gen-go-grpc)
	@command -v protoc >/dev/null || { echo "generate: protoc not found; run make deps (Debian package protobuf-compiler)" >&2; exit 1; }
	@$(GOBIN)/protoc-gen-go --version 2>/dev/null | grep -qx 'protoc-gen-go $(PROTOC_GEN_GO_VERSION)' || \
	  $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@$(GOBIN)/protoc-gen-go-grpc --version 2>/dev/null | grep -qx 'protoc-gen-go-grpc $(patsubst v%,%,$(PROTOC_GEN_GO_GRPC_VERSION))' || \
	  $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	protoc -I api \
	  --plugin=protoc-gen-go=$(GOBIN)/protoc-gen-go --go_out=api --go_opt=paths=source_relative \
	  --plugin=protoc-gen-go-grpc=$(GOBIN)/protoc-gen-go-grpc --go-grpc_out=api --go-grpc_opt=paths=source_relative \
	  $(patsubst api/%,%,$(PROTOS))

check-generate: generate ## fail if the checked-in generated code differs from make generate's
	@git diff --exit-code -- api || { echo "check-generate: generated code is stale; run make generate and commit" >&2; exit 1; }
	@test -z "$$(git ls-files --others --exclude-standard -- api)" || { echo "check-generate: untracked generated files in api/:" >&2; git ls-files --others --exclude-standard -- api >&2; exit 1; }

deps: ## install the system packages tests and benchmarks use (redis, postgresql, wrk, protoc, chromium, nats-server, python3-redis) and ioredis (npm)
	./scripts/install-deps.sh

clean: ## remove build output and the default data directory
	rm -rf bin data
