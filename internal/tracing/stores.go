package tracing

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// The stores' spans are client spans of the sampled request that made
// the call: a call outside any trace (the write-behind, the pipelined
// Redis writes, maintenance) or in an unsampled one starts none.

// RedisHook is a go-redis hook that puts a client span around every
// command and pipeline sent within a trace; nil on a nil *Tracer.
func RedisHook(t *Tracer) redis.Hook {
	if t == nil {
		return nil
	}
	return redisHook{t}
}

type redisHook struct{ t *Tracer }

func (redisHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !FromContext(ctx).Sampled {
			return next(ctx, cmd)
		}
		ctx, span := h.t.Start(ctx, "redis "+cmd.Name(), KindClient)
		span.SetString("db.system", "redis")
		span.SetString("db.operation.name", cmd.Name())
		err := next(ctx, cmd)
		if !errors.Is(err, redis.Nil) {
			span.SetError(err)
		}
		span.End()
		return err
	}
}

func (h redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !FromContext(ctx).Sampled {
			return next(ctx, cmds)
		}
		ctx, span := h.t.Start(ctx, "redis pipeline", KindClient)
		span.SetString("db.system", "redis")
		span.SetInt("db.operation.batch.size", int64(len(cmds)))
		err := next(ctx, cmds)
		if !errors.Is(err, redis.Nil) {
			span.SetError(err)
		}
		span.End()
		return err
	}
}

// PGTracer is a pgx tracer (queries and batches) that puts a client span
// around every statement sent within a trace; nil on a nil *Tracer.
func PGTracer(t *Tracer) PGQueryBatchTracer {
	if t == nil {
		return nil
	}
	return pgTracer{t}
}

// PGQueryBatchTracer is the pgx tracer of queries and batches.
type PGQueryBatchTracer interface {
	pgx.QueryTracer
	pgx.BatchTracer
}

type pgTracer struct{ t *Tracer }

type pgSpanKey struct{}

// maxStatement bounds the statement text kept on a span.
const maxStatement = 256

func (p pgTracer) start(ctx context.Context, op, sql string) context.Context {
	if !FromContext(ctx).Sampled {
		return ctx
	}
	ctx, span := p.t.Start(ctx, "postgresql "+op, KindClient)
	span.SetString("db.system", "postgresql")
	if sql != "" {
		if len(sql) > maxStatement {
			sql = sql[:maxStatement]
		}
		span.SetString("db.query.text", sql)
	}
	return context.WithValue(ctx, pgSpanKey{}, span)
}

func (pgTracer) end(ctx context.Context, err error) {
	if span, ok := ctx.Value(pgSpanKey{}).(*Span); ok {
		span.SetError(err)
		span.End()
	}
}

func (p pgTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !FromContext(ctx).Sampled {
		return ctx
	}
	return p.start(ctx, sqlOperation(d.SQL), d.SQL)
}

func (p pgTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	p.end(ctx, d.Err)
}

func (p pgTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return p.start(ctx, "batch", "")
}

func (pgTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (p pgTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	p.end(ctx, d.Err)
}

// sqlOperation is a statement's first keyword, upper case ("SELECT").
func sqlOperation(sql string) string {
	sql = strings.TrimLeft(sql, " \t\r\n(")
	end := strings.IndexAny(sql, " \t\r\n(;")
	if end < 0 {
		end = len(sql)
	}
	if end > 16 {
		end = 16
	}
	return strings.ToUpper(sql[:end])
}
