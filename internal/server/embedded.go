package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"google.golang.org/grpc"

	"github.com/counterd/counterd/internal/chunksync"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/quota"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/region"
)

// embeddedMode serves one embedded engine in --data: the default mode.
type embeddedMode struct {
	eng *engine.Engine
	dur contract.Durability
	log *slog.Logger
}

// openEmbedded opens the engine and puts quotas (if any) in force.
func openEmbedded(cfg Config, quotas *quota.Config, log *slog.Logger) (*embeddedMode, error) {
	eng, err := openEngine(cfg, log)
	if err != nil {
		return nil, err
	}
	if quotas != nil {
		eng.SetQuotas(quotas) // counts the keys loaded
		logQuotasOn(log, cfg, quotas)
	}
	dur, _ := contract.ParseDurability(cfg.Durability)
	return &embeddedMode{eng: eng, dur: dur, log: log}, nil
}

func (m *embeddedMode) backend() contract.Backend { return engine.Local(m.eng) }

// register mounts the chunked snapshot routes (docs/operations.md).
func (m *embeddedMode) register(mux *http.ServeMux, _ *grpc.Server) {
	mountPaths(mux, chunksync.NewHandler(m.eng, chunksync.Options{}), chunksync.Routes)
}

func (m *embeddedMode) start(context.Context, Addrs) error { return nil }
func (m *embeddedMode) drain(context.Context) error        { return nil }
func (m *embeddedMode) close() error                       { return closeEngine(m.eng, m.log) }

func (m *embeddedMode) rateLimits(ctx context.Context, lim *ratelimit.Limiter) (*sharedLimits, error) {
	return engineLimits(m.eng, nil, nil, m.log, 0)(ctx, lim)
}

func (m *embeddedMode) peerRegions(rc *region.Config) (bool, error) {
	rc.Local = m.eng
	return m.eng.Len() == 0, nil
}

func (m *embeddedMode) traits() traits {
	return traits{limiters: m.eng.Limiters(), nonBlocking: m.dur == contract.Async}
}

// openEngine opens the embedded engine in cfg.Data.
func openEngine(cfg Config, log *slog.Logger) (*engine.Engine, error) {
	dur, _ := contract.ParseDurability(cfg.Durability)
	ecfg := engine.DefaultConfig()
	ecfg.Dir = cfg.Data
	ecfg.NodeID = cfg.NodeID
	ecfg.Durability = dur
	ecfg.FlushInterval = cfg.FlushInterval
	ecfg.IdempotencyRetention = cfg.IdempotencyRetention
	ecfg.IdempotencyMemory = cfg.IdempotencyMemory
	ecfg.MaxBatch = cfg.MaxBatch
	ecfg.MinFreeDisk, _ = parseMinFreeDisk(cfg.MinFreeDisk) // checked by Validate
	ecfg.MemTableSize = cfg.memTable                        // from --memory-limit (memlimit.go)
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

// closeEngine closes eng, which flushes every acknowledged write.
func closeEngine(eng *engine.Engine, log *slog.Logger) error {
	if err := eng.Close(); err != nil {
		log.Error("engine close", "err", err)
		return err
	}
	log.Info("engine flushed and closed")
	return nil
}
