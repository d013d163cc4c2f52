package contract

import (
	"context"
	"time"

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
