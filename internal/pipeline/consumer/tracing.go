package consumer

import (
	"context"

	"github.com/counterd/counterd/internal/pipeline/stream"
	"github.com/counterd/counterd/internal/tracing"
)

// SetTracer makes Run trace each batch it polls: a consumer span from
// the poll's return to its commit, and within it a span for the apply.
// Set before Run starts; nil (the default) traces nothing.
func (a *Applier) SetTracer(t *tracing.Tracer) { a.tracer = t }

func noEnd() {}

// traceBatch starts the consumer span of one polled batch; end ends it.
// A batch starts a trace of its own (sampled at the tracer's ratio).
func (a *Applier) traceBatch(ctx context.Context, source string, groups [][]stream.Record) (context.Context, func()) {
	if a.tracer == nil {
		return ctx, noEnd
	}
	ctx, span := a.tracer.Start(ctx, "stream consume "+source, tracing.KindConsumer)
	if span.Recording() {
		n := 0
		for _, g := range groups {
			n += len(g)
		}
		span.SetString("messaging.destination.name", source)
		span.SetInt("messaging.batch.message_count", int64(n))
	}
	return ctx, span.End
}

// applyTraced is applyAsync inside a span when tracing is on.
func (a *Applier) applyTraced(ctx context.Context, source string, groups [][]stream.Record) ([][]stream.DeadLetter, bool, error) {
	if a.tracer == nil {
		return a.applyAsync(ctx, source, groups)
	}
	ctx, span := a.tracer.Start(ctx, "pipeline.apply", tracing.KindInternal)
	dead, applied, err := a.applyAsync(ctx, source, groups)
	if span.Recording() {
		n := 0
		for _, d := range dead {
			n += len(d)
		}
		span.SetInt("counterd.dead_letters", int64(n))
	}
	span.SetError(err)
	span.End()
	return dead, applied, err
}
