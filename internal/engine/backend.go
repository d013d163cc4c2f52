package engine

import (
	"context"
	"time"

	"github.com/counterd/counterd/internal/coarse"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/quota"
	"github.com/counterd/counterd/internal/rollup"
)

// Local returns e as a Backend.
func Local(e *Engine) contract.Backend { return local{e} }

type local struct{ e *Engine }

func (l local) Apply(ctx context.Context, op contract.Op, wo contract.WriteOptions) (contract.Result, error) {
	return l.e.Apply(ctx, op, wo)
}

func (l local) ApplyBatch(ctx context.Context, ops []contract.Op, wo contract.WriteOptions) ([]contract.Result, error) {
	return l.e.ApplyBatch(ctx, ops, wo)
}

func (l local) NextFlush() FlushWait { return l.e.NextFlush() }

func (l local) Get(_ context.Context, id string) (contract.View, error) { return l.e.Get(id) }

func (l local) HGet(_ context.Context, id, field string) (int64, bool, error) {
	return l.e.HGet(id, field)
}

func (l local) PFCount(_ context.Context, ids ...string) (uint64, float64, error) {
	return l.e.PFCount(ids...)
}

func (l local) TTL(_ context.Context, id string) (time.Duration, bool, bool, error) {
	ttl, has, exists := l.e.TTL(id)
	return ttl, has, exists, l.e.checkOpen()
}

func (l local) Scan(_ context.Context, cursor uint64, match string, count int) ([]string, uint64, error) {
	ids, next := l.e.Scan(cursor, match, count)
	return ids, next, nil
}

func (l local) Aggregate(_ context.Context, prefix string) (contract.Aggregate, error) {
	return l.e.Aggregate(prefix)
}

func (l local) Len(context.Context) (int, error) { return l.e.Len(), nil }

func (l local) FlushAll(ctx context.Context, wo contract.WriteOptions) error {
	return l.e.FlushAll(ctx, wo)
}

func (l local) Series(_ context.Context, id string, g rollup.Granularity, from, to time.Time) (*rollup.Series, error) {
	return l.e.Series(id, g, from, to)
}

func (l local) Uniques(_ context.Context, id string, unit rollup.Granularity, n int) (*rollup.Estimate, error) {
	return l.e.Uniques(id, unit, n)
}

func (l local) SetRollup(_ context.Context, key string, spec rollup.Spec) error {
	return l.e.SetRollup(key, spec)
}

func (l local) DeleteRollup(_ context.Context, key string) (bool, error) {
	return l.e.DeleteRollup(key)
}

func (l local) Rollup(_ context.Context, key string) (rollup.Spec, bool, error) {
	s, ok := l.e.Rollup(key)
	return s, ok, nil
}

func (l local) Rollups(context.Context) (map[string]rollup.Spec, error) { return l.e.Rollups(), nil }

func (l local) Now() time.Time { return l.e.Now() }

// SetQuotas and Quotas make Local a QuotaBackend.
func (l local) SetQuotas(c *quota.Config) error { l.e.SetQuotas(c); return nil }

func (l local) Quotas(context.Context) ([]quota.Usage, error) { return l.e.Quotas(), nil }

// CoarseClock is the engine's (Engine.CoarseClock): the Redis-protocol
// event loops drive it.
func (l local) CoarseClock() *coarse.Clock { return l.e.CoarseClock() }
func (l local) Stats() contract.Stats      { return l.e.Stats() }
func (l local) Ready() error               { return l.e.Ready() }

// Capabilities: the embedded engine is the reference behaviour.
func (l local) Capabilities() contract.Capabilities {
	return contract.Capabilities{Mode: "embedded", Batches: contract.BatchAtomic, MultiKeyAnyOwner: true,
		GlobalIdempotencyKeys: true, Limits: l.e.Limits(), FloatHashFields: true}
}
