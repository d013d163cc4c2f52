package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/counterd/counterd/internal/buildinfo"
	"github.com/counterd/counterd/internal/tracing"
)

// openTracing starts the node's tracer provider: nil (tracing off)
// without --otlp-endpoint.
func openTracing(cfg Config, log *slog.Logger) (*tracing.Tracer, error) {
	tp, err := tracing.Open(tracing.Config{
		Endpoint:    cfg.OTLPEndpoint,
		SampleRatio: cfg.TraceSampleRatio,
		Service:     "counterd",
		Instance:    cfg.NodeID,
		Version:     buildinfo.Version(),
	})
	if err != nil {
		return nil, err
	}
	if tp != nil {
		log.Info("tracing on", "otlp_endpoint", cfg.OTLPEndpoint, "sample_ratio", cfg.TraceSampleRatio)
	}
	return tp, nil
}

// closeTracing exports the spans still buffered, for at most 5 s.
func closeTracing(tp *tracing.Tracer, log *slog.Logger) {
	if tp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tp.Close(ctx); err != nil {
		log.Warn("tracing: spans not exported at shutdown", "err", err)
	}
}
