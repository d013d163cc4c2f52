package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/counterd/counterd/internal/chunksync"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/region"
)

// node is what Run serves: a Backend and what its deployment mode adds.
type node struct {
	engine.Backend
	// close releases the backend; the embedded engine flushes every
	// acknowledged write first. Called once, after the front ends stop.
	close func() error
	// grpc, when set, registers the mode's services (peer traffic in
	// cluster mode) on the --grpc server before it serves.
	grpc func(*grpc.Server)
	// routes are extra HTTP handlers by path prefix (for example
	// "/cluster"), tried before the counters API.
	routes map[string]http.Handler
	// start, when set, runs once every listener is bound and before any
	// serves; bound holds their actual addresses (":0" resolved).
	start func(ctx context.Context, bound Addrs) error
	// drain, when set, runs on shutdown before the front ends stop (a
	// cluster node leaves the ring and hands its ids off).
	drain func(ctx context.Context) error
	// rlShared decides rate limits (on Redis in tiered mode, on each key's
	// owner in cluster mode) and keeps the policies in a store (PostgreSQL,
	// or the engine's Pebble); lim holds the --ratelimit-policies file,
	// which seeds the store. nil: lim decides and policy changes stay in
	// memory.
	rlShared func(ctx context.Context, lim *ratelimit.Limiter) (*sharedLimits, error)
	// rlKeepKeys, in cluster mode, makes the Limiter keep its keys so that
	// their state moves with the ring.
	rlKeepKeys bool
	// nonBlocking: no command waits on a network or an fsync (the
	// embedded engine with --durability async), so the RESP front end may
	// run commands on event loops (--resp-event-loops).
	nonBlocking bool
	// ringVersion, in cluster mode, is sent as the Counterd-Ring-Version
	// header on every HTTP answer (routing clients refresh on a change).
	ringVersion func() uint64
	// keyOwner, in cluster mode, tells whether this node owns a key (RESP
	// scripts run on one owner's keys).
	keyOwner func(key string) (self bool, httpAddr string)
	// collectors are the mode's Prometheus metrics, served on /metrics.
	collectors []prometheus.Collector
	// eng is the embedded engine (nil in cluster and tiered mode).
	eng *engine.Engine
	// region is set on a cluster node with --peer-regions: its engine,
	// where its store records changes, and its ring (openRegions).
	region *clusterRegion
}

// sharedLimits are the rate limits of a mode that shares their state.
type sharedLimits struct {
	checker  ratelimit.Checker
	policies ratelimit.PolicyStore // receives the policy API's changes
	close    func()
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

// openNode opens the backend the config asks for: tiered with --redis and
// --postgres, a cluster member with --join, else the embedded engine.
func openNode(ctx context.Context, cfg Config, sec *security, log *slog.Logger) (*node, error) {
	quotas, err := loadQuotas(cfg)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.Redis != "":
		return openTieredQuotas(ctx, cfg, quotas, log)
	case cfg.Join != "":
		return openCluster(ctx, cfg, sec, quotas, log)
	}
	eng, err := openEngine(cfg, log)
	if err != nil {
		return nil, err
	}
	if quotas != nil {
		eng.SetQuotas(quotas) // counts the keys loaded
		log.Info("quotas on", "quotas_file", cfg.Quotas, "quotas", len(quotas.Rules), "default", quotas.Default != nil)
	}
	dur, _ := engine.ParseDurability(cfg.Durability)
	return &node{
		Backend:     engine.Local(eng),
		eng:         eng,
		close:       closeEngine(eng, log),
		rlShared:    engineLimits(eng, nil, nil, log),
		nonBlocking: dur == engine.Async,
		routes:      map[string]http.Handler{"/admin/snapshot/": chunksync.NewHandler(eng, chunksync.Options{})},
	}, nil
}

// openEngine opens the embedded engine in cfg.Data.
func openEngine(cfg Config, log *slog.Logger) (*engine.Engine, error) {
	dur, _ := engine.ParseDurability(cfg.Durability)
	ecfg := engine.DefaultConfig()
	ecfg.Dir = cfg.Data
	ecfg.NodeID = cfg.NodeID
	ecfg.Durability = dur
	ecfg.FlushInterval = cfg.FlushInterval
	ecfg.IdempotencyRetention = cfg.IdempotencyRetention
	ecfg.IdempotencyMemory = cfg.IdempotencyMemory
	ecfg.MaxBatch = cfg.MaxBatch
	ecfg.MinFreeDisk, _ = parseMinFreeDisk(cfg.MinFreeDisk) // checked by Validate
	ecfg.Logger = log
	if err := os.MkdirAll(cfg.Data, 0o755); err != nil {
		return nil, fmt.Errorf("server: data directory: %w", err)
	}
	start := time.Now()
	eng, err := engine.Open(ecfg)
	if err != nil {
		return nil, err
	}
	if err := region.Record(eng, cfg.Region); err != nil {
		_ = eng.Close()
		return nil, fmt.Errorf("server: %s: %w", cfg.Data, err)
	}
	log.Info("engine open", "data", cfg.Data, "counters", eng.Len(), "durability", dur.String(), "took", time.Since(start).Round(time.Millisecond))
	return eng, nil
}

func closeEngine(eng *engine.Engine, log *slog.Logger) func() error {
	return func() error {
		if err := eng.Close(); err != nil {
			log.Error("engine close", "err", err)
			return err
		}
		log.Info("engine flushed and closed")
		return nil
	}
}
