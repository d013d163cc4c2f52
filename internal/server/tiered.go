package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/counterd/counterd/internal/engine"
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
	return &node{Backend: b, close: func() error {
		if err := b.Close(); err != nil {
			log.Error("tiered close", "err", err)
			return err
		}
		log.Info("tiered backend flushed and closed")
		return nil
	}}, nil
}
