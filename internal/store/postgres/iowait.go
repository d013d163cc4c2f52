package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/counterd/counterd/internal/shed"
)

// ioTracer parks a request's admission slot (shed.IOWait) while it waits
// for PostgreSQL: for a pool connection, a query or a batch. Waiting on
// the database is I/O, not load on this node, and must neither hold a
// slot other requests could use nor count as the request's latency.
type ioTracer struct{}

type parkedKey struct{}

func park(ctx context.Context) context.Context {
	if t := shed.IOWait(ctx); t != nil {
		return context.WithValue(ctx, parkedKey{}, t)
	}
	return ctx
}

func resume(ctx context.Context) {
	if t, ok := ctx.Value(parkedKey{}).(*shed.Ticket); ok {
		t.Resume()
	}
}

func (ioTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return park(ctx)
}

func (ioTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) { resume(ctx) }

func (ioTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return park(ctx)
}

func (ioTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (ioTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) { resume(ctx) }

func (ioTracer) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return park(ctx)
}

func (ioTracer) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireEndData) {
	resume(ctx)
}
