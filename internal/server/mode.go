package server

import (
	"context"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/region"
	"github.com/counterd/counterd/internal/tracing"
)

// mode is a deployment mode: the Backend a node serves and what the mode
// adds around it (embeddedMode, clusterMode, tieredMode). openMode opens
// one; Run then drives its lifecycle in this order: register before any
// front end serves, start once every listener is bound, drain on
// shutdown before the front ends stop, close once they stopped. Its
// methods are called from Run's goroutine only.
type mode interface {
	// backend is what the front ends serve.
	backend() contract.Backend
	// register mounts the mode's HTTP routes on mux and its gRPC services
	// on gs (nil without --grpc).
	register(mux *http.ServeMux, gs *grpc.Server)
	// start runs once every listener is bound and before any serves;
	// bound holds their actual addresses (":0" resolved).
	start(ctx context.Context, bound Addrs) error
	// drain runs on shutdown before the front ends stop (a cluster node
	// leaves the ring and hands its ids off).
	drain(ctx context.Context) error
	// close releases the backend; the embedded engine flushes every
	// acknowledged write first. Called once, after the front ends stop.
	close() error

	// rateLimits decides rate limits (on Redis in tiered mode, on each
	// key's owner in cluster mode) and keeps the policies in a store
	// (PostgreSQL, or the engine's Pebble); lim holds the
	// --ratelimit-policies file, which seeds the store (ratelimit.go).
	rateLimits(ctx context.Context, lim *ratelimit.Limiter) (*sharedLimits, error)
	// peerRegions fills in what region replication (--peer-regions) needs
	// of the mode; bootstrap: the node is empty and fetches its region's
	// state from the peer regions before it serves.
	peerRegions(rc *region.Config) (bootstrap bool, err error)
	// traits are the mode's settings the front ends read.
	traits() traits
}

// traits are what the front ends need to know of a mode.
type traits struct {
	// keepKeys, in cluster mode, makes the rate Limiter keep its keys so
	// that their state moves with the ring.
	keepKeys bool
	// limiters is the engine's index, where the rate Limiter keeps its
	// state (embedded and cluster mode: one table for counters and
	// limits); nil in tiered mode, whose Limiter has its own.
	limiters *engine.Limiters
	// nonBlocking: no command waits on a network or an fsync (the
	// embedded engine with --durability async), so the RESP front end may
	// run commands on event loops (--resp-event-loops).
	nonBlocking bool
	// ring, in cluster mode, is the node's ring: its version is sent as
	// the Counterd-Ring-Version header on every HTTP answer (routing
	// clients refresh on a change) and RESP scripts run on one owner's
	// keys. nil in the other modes.
	ring clusterRing
	// collectors are the mode's Prometheus metrics, served on /metrics.
	collectors []prometheus.Collector
}

// clusterRing is what the front ends read of a cluster node's ring.
type clusterRing interface {
	RingVersion() uint64
	KeyOwner(key string) (self bool, httpAddr string)
}

// sharedLimits are the rate limits of a mode that shares their state.
type sharedLimits struct {
	checker  ratelimit.Checker
	policies ratelimit.PolicyStore // receives the policy API's changes
	close    func()
	// collectors are the mode's rate-limit metrics (cluster: the router's
	// decisions and the global-approx shares).
	collectors []prometheus.Collector
}

// Addrs are the addresses the front ends are bound to; empty when disabled.
type Addrs struct {
	HTTP, RESP, GRPC string
}

func addrOf(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

// openMode opens the mode the config asks for: tiered with --redis and
// --postgres, a cluster member with --join, else the embedded engine.
func openMode(ctx context.Context, cfg Config, sec *security, tp *tracing.Tracer, log *slog.Logger) (mode, error) {
	quotas, err := loadQuotas(cfg)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.Redis != "":
		return openTiered(ctx, cfg, quotas, tp, log)
	case cfg.Join != "":
		return openCluster(cfg, sec, quotas, tp, log)
	}
	return openEmbedded(cfg, quotas, log)
}
