package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/ratelimit/redisrl"
	"github.com/counterd/counterd/internal/tiered"
)

// openTiered serves counters from Redis (hot tier) and PostgreSQL (durable
// record): migrations run, both stores open and the write-behind starts
// before any front end serves.
func openTiered(ctx context.Context, cfg Config, log *slog.Logger) (*node, error) {
	dur, _ := engine.ParseDurability(cfg.Durability)
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
		Logger:               log,
	})
	if err != nil {
		return nil, err
	}
	log.Info("tiered backend open", "durability", dur.String(), "flush_interval", cfg.FlushInterval,
		"took", time.Since(start).Round(time.Millisecond))
	return &node{Backend: b, rlShared: func(ctx context.Context, lim *ratelimit.Limiter) (*sharedLimits, error) {
		return tieredRateLimits(ctx, b, lim, log)
	}, close: func() error {
		if err := b.Close(); err != nil {
			log.Error("tiered close", "err", err)
			return err
		}
		log.Info("tiered backend flushed and closed")
		return nil
	}}, nil
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
