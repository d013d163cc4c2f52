package tiered

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/rollup"
)

// Series reads id's buckets from PostgreSQL: minute buckets from
// counter_timeseries, hour/day/month from counter_aggregates, which every
// write-behind batch maintains. Retention is the spec set for id or its
// namespace (SetRollup), else rollup.DefaultSpec: buckets are written for
// every counter whatever the spec.
func (b *Backend) Series(ctx context.Context, id string, g rollup.Granularity, from, to time.Time) (*rollup.Series, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	spec, err := b.specFor(ctx, id)
	if err != nil {
		return nil, err
	}
	if v, err := b.Get(ctx, id); err != nil {
		return nil, err
	} else if v.Exists && !v.Kind.Additive() {
		return nil, fmt.Errorf("%w: %q is of kind %s; series need an additive kind", contract.ErrWrongKind, id, v.Kind)
	}
	if b.agg.Pending(id) {
		if err := b.Flush(ctx); err != nil {
			return nil, err
		}
	}
	st := pgChunks{ctx: ctx, b: b, id: id}
	s, err := rollup.NewState(&spec, false).CountsView().Series(&st, g, from.UnixNano(), to.UnixNano(), b.opts.Now().UnixNano())
	switch {
	case st.err != nil:
		return nil, st.err
	case errors.Is(err, rollup.ErrInvalid):
		return nil, fmt.Errorf("%w: %q: %v", contract.ErrInvalidArgument, id, err)
	case errors.Is(err, counter.ErrOverflow):
		return nil, fmt.Errorf("%w: %q: %v", contract.ErrOverflow, id, err)
	}
	return s, err
}

// specFor returns the spec of id, else of its namespace, else the default.
func (b *Backend) specFor(ctx context.Context, id string) (rollup.Spec, error) {
	ns, _, _ := strings.Cut(id, ":")
	for _, key := range []string{id, ns} {
		s, ok, err := b.Rollup(ctx, key)
		if err != nil || ok {
			return s, err
		}
	}
	return rollup.DefaultSpec(), nil
}

// SetRollup stores spec for key (a namespace or an id) in PostgreSQL
// (table counter_rollups), shared by every node: the retention Series
// applies and, for hll counters, the unique-count sketches kept
// (uniques.go; other nodes see a change within specCacheTTL).
func (b *Backend) SetRollup(ctx context.Context, key string, spec rollup.Spec) error {
	if err := engine.ValidateRollupKey(key); err != nil {
		return err
	}
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("%w: %v", contract.ErrInvalidArgument, err)
	}
	defer b.uq.invalidateSpecs()
	return unavailable(b.pg.PutRollup(ctx, key, spec))
}

// DeleteRollup removes key's spec.
func (b *Backend) DeleteRollup(ctx context.Context, key string) (bool, error) {
	if err := engine.ValidateRollupKey(key); err != nil {
		return false, err
	}
	defer b.uq.invalidateSpecs()
	ok, err := b.pg.DeleteRollup(ctx, key)
	return ok, unavailable(err)
}

// Rollup returns key's spec.
func (b *Backend) Rollup(ctx context.Context, key string) (rollup.Spec, bool, error) {
	data, ok, err := b.pg.Rollup(ctx, key)
	if err != nil || !ok {
		return rollup.Spec{}, false, unavailable(err)
	}
	s, err := decodeSpec(data)
	return s, err == nil, err
}

// Rollups returns every spec.
func (b *Backend) Rollups(ctx context.Context) (map[string]rollup.Spec, error) {
	all, err := b.pg.Rollups(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	out := make(map[string]rollup.Spec, len(all))
	for k, data := range all {
		if out[k], err = decodeSpec(data); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// decodeSpec parses a stored spec; one that does not validate is an error.
func decodeSpec(data []byte) (rollup.Spec, error) {
	var s rollup.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return rollup.Spec{}, fmt.Errorf("tiered: stored rollup spec: %w", err)
	}
	if err := s.Validate(); err != nil {
		return rollup.Spec{}, fmt.Errorf("tiered: stored rollup spec: %w", err)
	}
	return s, nil
}

// pgChunks is a rollup.Store over PostgreSQL's buckets of one counter.
// Chunks are the minutes of an hour, hours of a day, days of a month and
// months of a year, numbered like rollup's buckets (UTC, from 1970).
type pgChunks struct {
	ctx context.Context
	b   *Backend
	id  string
	err error // infrastructure error, reported as ErrUnavailable
}

var granNames = map[rollup.Granularity]string{
	rollup.Minute: "minute", rollup.Hour: "hour", rollup.Day: "day", rollup.Month: "month",
}

func (p *pgChunks) Chunks(g rollup.Granularity, from, to int64, fn func(idx int64, vals []int64) error) error {
	start, _ := chunkSpan(g, from)
	_, end := chunkSpan(g, to)
	buckets, err := p.b.pg.Series(p.ctx, p.id, granNames[g], start, end)
	if err != nil {
		p.err = unavailable(err)
		return p.err
	}
	var vals []int64
	cur := int64(-1 << 62)
	for _, bk := range buckets {
		idx, off, n := chunkOf(g, bk.Start)
		if idx != cur {
			if vals != nil {
				if err := fn(cur, vals); err != nil {
					return err
				}
			}
			cur, vals = idx, make([]int64, n)
		}
		vals[off] += bk.Value
	}
	if vals != nil {
		return fn(cur, vals)
	}
	return nil
}

// Sketch: Series reads no sketches (Uniques reads them, uniques.go).
func (p *pgChunks) Sketch(rollup.Granularity, int, int64) (*counter.HLL, error) { return nil, nil }

// chunkOf returns the chunk index of the bucket starting at t, its offset
// in the chunk and the chunk's length.
func chunkOf(g rollup.Granularity, t time.Time) (idx int64, off, n int) {
	t = t.UTC()
	switch g {
	case rollup.Minute:
		return floorDiv(t.Unix(), 3600), t.Minute(), 60
	case rollup.Hour:
		return floorDiv(t.Unix(), 86400), t.Hour(), 24
	case rollup.Day:
		m := monthIndex(t)
		return m, t.Day() - 1, daysIn(t)
	}
	return int64(t.Year() - 1970), int(t.Month()) - 1, 12
}

// chunkSpan returns [start, end) of chunk idx of g.
func chunkSpan(g rollup.Granularity, idx int64) (time.Time, time.Time) {
	switch g {
	case rollup.Minute:
		s := time.Unix(idx*3600, 0).UTC()
		return s, s.Add(time.Hour)
	case rollup.Hour:
		s := time.Unix(idx*86400, 0).UTC()
		return s, s.Add(24 * time.Hour)
	case rollup.Day:
		s := time.Date(1970+int(floorDiv(idx, 12)), time.Month(idx-12*floorDiv(idx, 12)+1), 1, 0, 0, 0, 0, time.UTC)
		return s, s.AddDate(0, 1, 0)
	}
	s := time.Date(1970+int(idx), 1, 1, 0, 0, 0, 0, time.UTC)
	return s, s.AddDate(1, 0, 0)
}

func monthIndex(t time.Time) int64 { return int64(t.Year()-1970)*12 + int64(t.Month()) - 1 }

func daysIn(t time.Time) int {
	return time.Date(t.Year(), t.Month()+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
