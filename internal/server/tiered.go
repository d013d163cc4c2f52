package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"google.golang.org/grpc"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/quota"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/ratelimit/redisrl"
	"github.com/counterd/counterd/internal/region"
	"github.com/counterd/counterd/internal/store/postgres"
	"github.com/counterd/counterd/internal/tiered"
	"github.com/counterd/counterd/internal/tracing"
)

// tieredMode serves counters from Redis (hot tier) and PostgreSQL
// (durable record), with stateless nodes.
type tieredMode struct {
	b   *tiered.Backend
	log *slog.Logger
}

// openTiered runs the migrations, opens both stores and starts the
// write-behind before any front end serves, then puts quotas (if any) in
// force, counting the keys Redis and PostgreSQL hold.
func openTiered(ctx context.Context, cfg Config, quotas *quota.Config, tp *tracing.Tracer, log *slog.Logger) (*tieredMode, error) {
	dur, _ := contract.ParseDurability(cfg.Durability)
	start := time.Now()
	b, err := tiered.Open(ctx, tiered.Options{
		RedisURL:             cfg.Redis,
		PostgresDSN:          cfg.Postgres,
		FlushInterval:        cfg.FlushInterval,
		Durability:           dur,
		NodeID:               cfg.NodeID,
		IdempotencyRetention: cfg.IdempotencyRetention,
		MaxBatch:             cfg.MaxBatch,
		SnapshotInterval:     cfg.SnapshotInterval,
		AuditNamespaces:      splitList(cfg.AuditNamespaces),
		LockWait:             2 * cfg.LuaTimeLimit, // a script's locks last --lua-time-limit unless renewed
		Logger:               log,
		Redis:                redisTracing(tp),
		Postgres:             postgresTracing(tp),
	})
	if err != nil {
		return nil, err
	}
	log.Info("tiered backend open", "durability", dur.String(), "flush_interval", cfg.FlushInterval,
		"took", time.Since(start).Round(time.Millisecond))
	m := &tieredMode{b: b, log: log}
	if quotas != nil {
		if err := b.SetQuotas(quotas); err != nil {
			_ = m.close()
			return nil, fmt.Errorf("server: --quotas: counting the keys: %w", err)
		}
		logQuotasOn(log, cfg, quotas)
	}
	return m, nil
}

func (m *tieredMode) backend() contract.Backend             { return m.b }
func (m *tieredMode) register(*http.ServeMux, *grpc.Server) {}
func (m *tieredMode) start(context.Context, Addrs) error    { return nil }
func (m *tieredMode) drain(context.Context) error           { return nil }
func (m *tieredMode) traits() traits                        { return traits{} }

func (m *tieredMode) close() error {
	if err := m.b.Close(); err != nil {
		m.log.Error("tiered close", "err", err)
		return err
	}
	m.log.Info("tiered backend flushed and closed")
	return nil
}

func (m *tieredMode) rateLimits(ctx context.Context, lim *ratelimit.Limiter) (*sharedLimits, error) {
	return tieredRateLimits(ctx, m.b, lim, m.log)
}

// peerRegions: every node of a tiered region ships the region's changes
// from PostgreSQL's record of them (tiered.Backend.RegionChanges) and
// keeps its own copies of the peer regions' states under --data; nothing
// to bootstrap (PostgreSQL is the region's durable state).
func (m *tieredMode) peerRegions(rc *region.Config) (bool, error) {
	rc.Durable = &region.Durable{
		Changes: func(ctx context.Context, after region.Cursor, limit int) ([]region.Change, bool, error) {
			cs, more, err := m.b.RegionChanges(ctx, postgres.RegionCursor(after), limit)
			out := make([]region.Change, len(cs))
			for i, c := range cs {
				out[i] = region.Change{At: region.Cursor(c.At), Tomb: c.Tomb, State: c.State}
			}
			return out, more, err
		},
		ExportAll: m.b.RegionExportAll,
		Export:    m.b.RegionExport,
		Region:    m.b,
	}
	return false, nil
}

// tieredRateLimits decides rate limits in Redis (one script per check, so
// every node enforces one exact global limit) with the policies kept in
// PostgreSQL. The policies of lim (the --ratelimit-policies file) seed the
// store: a policy whose name the store already holds is kept as stored
// (changes made through the API survive a restart with the original
// file), and a warning names it when the file differs. Then lim follows
// the store (ratelimit.PolicySync, every second).
func tieredRateLimits(ctx context.Context, b *tiered.Backend, lim *ratelimit.Limiter, log *slog.Logger) (*sharedLimits, error) {
	st := ratelimit.NewRecordPolicies(b)
	if seed := lim.Policies(); len(seed) > 0 {
		added, kept, err := ratelimit.SeedPolicies(ctx, st, seed)
		if err := logSeeded(log, added, kept, err); err != nil {
			return nil, err
		}
	}
	sync, err := ratelimit.NewPolicySync(ctx, lim, st, ratelimit.PolicySyncConfig{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("server: rate-limit policies: %w", err)
	}
	dec, err := redisrl.New(redisrl.Config{Client: b.Redis().Client(), Local: lim})
	if err != nil {
		sync.Close()
		return nil, err
	}
	log.Info("rate limits decided in Redis, policies in PostgreSQL", "policies", len(lim.Policies()))
	return &sharedLimits{checker: dec, policies: sync, close: func() {
		dec.Close()
		sync.Close()
	}}, nil
}
