package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TraceQueryBatch is a pgx tracer of queries and batches.
type TraceQueryBatch interface {
	pgx.QueryTracer
	pgx.BatchTracer
}

// chainTracer runs the admission's ioTracer and then another tracer
// (Options.Tracer) on every query and batch; pool acquires are the
// ioTracer's alone.
type chainTracer struct {
	io   ioTracer
	next TraceQueryBatch
}

func (c chainTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return c.next.TraceQueryStart(c.io.TraceQueryStart(ctx, conn, d), conn, d)
}

func (c chainTracer) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryEndData) {
	c.next.TraceQueryEnd(ctx, conn, d)
	c.io.TraceQueryEnd(ctx, conn, d)
}

func (c chainTracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	return c.next.TraceBatchStart(c.io.TraceBatchStart(ctx, conn, d), conn, d)
}

func (c chainTracer) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.next.TraceBatchQuery(ctx, conn, d)
}

func (c chainTracer) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchEndData) {
	c.next.TraceBatchEnd(ctx, conn, d)
	c.io.TraceBatchEnd(ctx, conn, d)
}

func (c chainTracer) TraceAcquireStart(ctx context.Context, p *pgxpool.Pool, d pgxpool.TraceAcquireStartData) context.Context {
	return c.io.TraceAcquireStart(ctx, p, d)
}

func (c chainTracer) TraceAcquireEnd(ctx context.Context, p *pgxpool.Pool, d pgxpool.TraceAcquireEndData) {
	c.io.TraceAcquireEnd(ctx, p, d)
}
