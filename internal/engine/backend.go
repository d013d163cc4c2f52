package engine

import (
	"context"
	"time"

	"github.com/counterd/counterd/internal/coarse"
	"github.com/counterd/counterd/internal/quota"
	"github.com/counterd/counterd/internal/rollup"
)

// Backend is what the front ends (HTTP, RESP) serve. Three implementations
// share its semantics: the embedded engine (Local), the tiered store on
// Redis and PostgreSQL, and a cluster node that places ids on a ring and
// forwards to their owners. Reads take a context because the latter two
// cross a network; every error wraps one of this package's sentinels so
// front ends map errors the same way whatever serves them.
type Backend interface {
	Apply(ctx context.Context, op Op, wo WriteOptions) (Result, error)
	ApplyBatch(ctx context.Context, ops []Op, wo WriteOptions) ([]Result, error)

	Get(ctx context.Context, id string) (View, error)
	// HGet reads an integer field; a float field (counter.Field.Float) is
	// an error wrapping ErrNotInteger, with ok true: Get has its text.
	HGet(ctx context.Context, id, field string) (value int64, ok bool, err error)
	PFCount(ctx context.Context, ids ...string) (estimate uint64, stdErr float64, err error)
	// TTL of an id that is not valid reports a missing counter, no error
	// (RESP EXISTS counts such keys as missing, like Redis).
	TTL(ctx context.Context, id string) (ttl time.Duration, hasTTL, exists bool, err error)
	// Scan lists ids matching a Redis glob, count at a time; the returned
	// cursor is 0 when the listing is complete.
	Scan(ctx context.Context, cursor uint64, match string, count int) (ids []string, next uint64, err error)
	Aggregate(ctx context.Context, prefix string) (Aggregate, error)
	Len(ctx context.Context) (int, error)
	FlushAll(ctx context.Context, wo WriteOptions) error

	Series(ctx context.Context, id string, g rollup.Granularity, from, to time.Time) (*rollup.Series, error)
	Uniques(ctx context.Context, id string, unit rollup.Granularity, n int) (*rollup.Estimate, error)
	SetRollup(ctx context.Context, key string, spec rollup.Spec) error
	DeleteRollup(ctx context.Context, key string) (bool, error)
	Rollup(ctx context.Context, key string) (rollup.Spec, bool, error)
	Rollups(ctx context.Context) (map[string]rollup.Spec, error)

	// Now is the backend's clock (injected in tests).
	Now() time.Time
	// Stats describes the local node; fields a backend does not track are 0.
	Stats() Stats
	// Ready is nil while the backend can serve requests.
	Ready() error
	// Capabilities says where the backend differs from the embedded engine.
	Capabilities() Capabilities
}

// Local returns e as a Backend.
func Local(e *Engine) Backend { return local{e} }

type local struct{ e *Engine }

func (l local) Apply(ctx context.Context, op Op, wo WriteOptions) (Result, error) {
	return l.e.Apply(ctx, op, wo)
}

func (l local) ApplyBatch(ctx context.Context, ops []Op, wo WriteOptions) ([]Result, error) {
	return l.e.ApplyBatch(ctx, ops, wo)
}

func (l local) Get(_ context.Context, id string) (View, error) { return l.e.Get(id) }

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

func (l local) Aggregate(_ context.Context, prefix string) (Aggregate, error) {
	return l.e.Aggregate(prefix)
}

func (l local) Len(context.Context) (int, error) { return l.e.Len(), nil }

func (l local) FlushAll(ctx context.Context, wo WriteOptions) error { return l.e.FlushAll(ctx, wo) }

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
func (l local) Stats() Stats               { return l.e.Stats() }
func (l local) Ready() error               { return l.e.Ready() }

// Capabilities: the embedded engine is the reference behaviour.
func (l local) Capabilities() Capabilities {
	return Capabilities{Mode: "embedded", Batches: BatchAtomic, MultiKeyAnyOwner: true,
		GlobalIdempotencyKeys: true, Limits: l.e.Limits(), FloatHashFields: true}
}
