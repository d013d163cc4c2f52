package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/counterd/counterd/internal/buildinfo"
	cnode "github.com/counterd/counterd/internal/cluster/node"
	"github.com/counterd/counterd/internal/coarse"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/region"
	"github.com/counterd/counterd/internal/store/postgres"
	redisstore "github.com/counterd/counterd/internal/store/redis"
	"github.com/counterd/counterd/internal/tracing"
)

// validateTracing checks --otlp-endpoint and --trace-sample-ratio.
func (c *Config) validateTracing() error {
	if !(c.TraceSampleRatio >= 0 && c.TraceSampleRatio <= 1) {
		return fmt.Errorf("server: --trace-sample-ratio must be between 0 and 1, not %v", c.TraceSampleRatio)
	}
	if c.OTLPEndpoint != "" {
		if err := tracing.CheckEndpoint(c.OTLPEndpoint); err != nil {
			return fmt.Errorf("server: --otlp-endpoint: %w", err)
		}
	}
	return nil
}

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

// tracingCollectors are the tracer's metrics; none with tracing off.
func tracingCollectors(t *tracing.Tracer) []prometheus.Collector {
	if t == nil {
		return nil
	}
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "counterd_trace_spans_exported_total",
			Help: "Spans the OTLP collector (--otlp-endpoint) accepted."}, func() float64 { return float64(t.Exported()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "counterd_trace_spans_dropped_total",
			Help: "Spans lost: the export queue was full or an export to the collector failed."}, func() float64 { return float64(t.Dropped()) }),
	}
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

// tracedBackend puts a span around every write of the wrapped backend:
// the engine op of an HTTP request or RESP command, whichever node
// applies it (a cluster node forwards to the owner inside it).
type tracedBackend struct {
	contract.Backend
	t *tracing.Tracer
}

// coarseTracedBackend keeps the wrapped backend's coarse clock visible
// to the RESP event loops.
type coarseTracedBackend struct {
	tracedBackend
	cc interface{ CoarseClock() *coarse.Clock }
}

func (b coarseTracedBackend) CoarseClock() *coarse.Clock { return b.cc.CoarseClock() }

// traceBackend wraps be in spans when tracing is on; be itself when off.
func traceBackend(t *tracing.Tracer, be contract.Backend) contract.Backend {
	if t == nil {
		return be
	}
	tb := tracedBackend{Backend: be, t: t}
	if cc, ok := be.(interface{ CoarseClock() *coarse.Clock }); ok {
		return coarseTracedBackend{tracedBackend: tb, cc: cc}
	}
	return tb
}

func (b tracedBackend) Apply(ctx context.Context, op contract.Op, wo contract.WriteOptions) (contract.Result, error) {
	ctx, span := b.t.Start(ctx, "engine.apply", tracing.KindInternal)
	if span.Recording() {
		span.SetString("counterd.op", op.Type.String())
		span.SetString("counterd.id", op.ID)
	}
	r, err := b.Backend.Apply(ctx, op, wo)
	span.SetError(err)
	span.End()
	return r, err
}

func (b tracedBackend) ApplyBatch(ctx context.Context, ops []contract.Op, wo contract.WriteOptions) ([]contract.Result, error) {
	ctx, span := b.t.Start(ctx, "engine.apply_batch", tracing.KindInternal)
	span.SetInt("counterd.ops", int64(len(ops)))
	r, err := b.Backend.ApplyBatch(ctx, ops, wo)
	span.SetError(err)
	span.End()
	return r, err
}

// grpcTracing are the --grpc server's tracing interceptors. Cluster and
// region peer calls are traced only as part of a trace a peer passes on
// (a forwarded request), not the background replication, anti-entropy
// and lease traffic that would otherwise start a trace each.
func grpcTracing(t *tracing.Tracer) []grpc.ServerOption {
	return tracing.ServerOptions(t, func(method string) bool {
		return strings.HasPrefix(method, "/"+cnode.PeerService+"/") || strings.HasPrefix(method, "/"+region.ServiceName+"/")
	})
}

// redisTracing is the tiered Redis store's options with the tracing hook.
func redisTracing(t *tracing.Tracer) redisstore.Options {
	if t == nil {
		return redisstore.Options{}
	}
	return redisstore.Options{Hooks: []redis.Hook{tracing.RedisHook(t)}}
}

// postgresTracing is the tiered PostgreSQL store's options with the
// tracing tracer.
func postgresTracing(t *tracing.Tracer) postgres.Options {
	if t == nil {
		return postgres.Options{}
	}
	return postgres.Options{Tracer: tracing.PGTracer(t)}
}
