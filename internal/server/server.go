// Package server runs one counterd node: it opens the backend of one
// deployment mode (embedded, cluster or tiered, each a type behind the
// mode interface) and serves the HTTP, Redis-protocol and gRPC front ends
// until its context is cancelled, then shuts down gracefully (the mode
// drains, requests finish, every change is flushed).
package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// NewLogger builds the process logger from the config.
func NewLogger(cfg *Config) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// Run serves until ctx is done, then shuts down: it stops accepting, waits
// up to cfg.ShutdownTimeout for in-flight requests, and closes the
// backend, which flushes every acknowledged write. The mode (embedded,
// cluster or tiered: mode.go) supplies the backend; node (node.go) the
// rest.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	mem, err := resolveMemoryLimit(cfg.MemoryLimit, "/proc/self/cgroup", "/sys/fs/cgroup")
	if err != nil {
		return fmt.Errorf("server: --memory-limit: %w", err)
	}
	mem.apply(log)
	cfg.memTable = mem.memTable
	sec, err := loadSecurity(cfg, log)
	if err != nil {
		return err
	}
	sec.reloadOnHUP(ctx, log)
	tp, err := openTracing(cfg, log)
	if err != nil {
		return err
	}
	defer closeTracing(tp, log)
	store, stopAuth, err := openAuth(cfg, log)
	if err != nil {
		return err
	}
	defer stopAuth()
	m, err := openMode(ctx, cfg, sec, tp, log)
	if err != nil {
		return err
	}
	n := &node{cfg: cfg, log: log, sec: sec, auth: store, mode: m, tp: tp}
	defer n.close()
	if err := n.open(ctx); err != nil {
		return err
	}
	return n.serve(ctx)
}

// grpcStopWait bounds the wait for grpc.Server.Stop once the graceful
// stop ran out of time. Stop closes every connection and cancels every
// call, but it also waits for connections still in their handshake (up to
// gRPC's connection timeout, 2 minutes: a peer that connected and sent
// nothing, as through a cut link), and for a graceful stop already waiting
// on a call that ignores its cancellation. Past it, the node shuts down
// without them.
const grpcStopWait = 2 * time.Second

// stopGRPC stops gs gracefully until ctx is done, then forcibly, waiting
// at most grpcStopWait more.
func stopGRPC(gs *grpc.Server, ctx context.Context, log *slog.Logger) {
	graceful := make(chan struct{})
	go func() { gs.GracefulStop(); close(graceful) }()
	select {
	case <-graceful:
		return
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { gs.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-graceful:
	case <-time.After(grpcStopWait):
		log.Warn("grpc: connections still open after the shutdown timeout; exiting without them", "waited", grpcStopWait)
	}
}

// grpcConnectionTimeout bounds a gRPC connection's TLS and HTTP/2
// handshake: a peer that connects and sends nothing (or stops halfway)
// is closed after it rather than after gRPC's default of 2 minutes. A
// variable for tests.
var grpcConnectionTimeout = 10 * time.Second

// Server-side gRPC keepalive: a connection that carried nothing for
// grpcKeepaliveTime is pinged, and closed if the ping is not answered
// within grpcKeepaliveTimeout, so a peer gone without a FIN or RST (a
// cut link, a crashed host) holds its connection and calls for at most
// about 50 s. Clients may ping every grpcMinPingInterval, with or without
// calls in flight (counterd's own cluster and region clients do not ping;
// Envoy and other clients often do, every 30 to 60 s: gRPC's default
// policy would answer them GOAWAY "too_many_pings" below 5 minutes).
const (
	grpcKeepaliveTime    = 30 * time.Second
	grpcKeepaliveTimeout = 20 * time.Second
	grpcMinPingInterval  = 10 * time.Second
)

// grpcConnOptions are the connection settings of counterd's gRPC server,
// which serves the client API, Envoy's rate-limit service, cluster peer
// calls and region calls.
func grpcConnOptions(handshake time.Duration) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(handshake),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: grpcKeepaliveTime, Timeout: grpcKeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: grpcMinPingInterval, PermitWithoutStream: true}),
	}
}

type listeners struct{ http, resp, grpc, admin net.Listener }

// listen binds the configured addresses; on error it closes what it bound.
func listen(cfg Config) (*listeners, error) {
	l := &listeners{}
	var err error
	if l.http, err = net.Listen("tcp", cfg.HTTP); err != nil {
		return nil, fmt.Errorf("server: --http: %w", err)
	}
	if cfg.RESP != "" {
		if l.resp, err = net.Listen("tcp", cfg.RESP); err != nil {
			l.close()
			return nil, fmt.Errorf("server: --resp: %w", err)
		}
	}
	if cfg.GRPC != "" {
		if l.grpc, err = net.Listen("tcp", cfg.GRPC); err != nil {
			l.close()
			return nil, fmt.Errorf("server: --grpc: %w", err)
		}
	}
	if cfg.Pprof {
		if l.admin, err = net.Listen("tcp", cfg.Admin); err != nil {
			l.close()
			return nil, fmt.Errorf("server: --admin: %w", err)
		}
	}
	return l, nil
}

func (l *listeners) close() {
	for _, ln := range []net.Listener{l.http, l.resp, l.grpc, l.admin} {
		if ln != nil {
			ln.Close()
		}
	}
}

// respEventLoops resolves --resp-event-loops: 0 (auto) is one loop per two
// Ps when no command can block (nonBlocking), else none; -1 is none.
func respEventLoops(flag int, nonBlocking bool) int {
	switch {
	case flag > 0:
		return flag
	case flag < 0 || !nonBlocking:
		return 0
	}
	return max(1, runtime.GOMAXPROCS(0)/2)
}
