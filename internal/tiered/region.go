package tiered

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/store/postgres"
)

// Region export (internal/region, Durable): a tiered region ships its
// state to its peer regions from PostgreSQL, the tier every node of the
// region shares, through the record of changes every write-behind batch
// keeps in commit order (postgres.RegionChanges). What a peer receives is
// each counter's value in this region as PostgreSQL holds it, as the
// embedded engine's state of the kind:
//
//   - counter, pn, window and sharded: a counter of the region's total
//     (a window's total over its buckets; a sharded counter's sum of
//     shards);
//   - float: a float; hash: a hash of the integer fields;
//   - hll: not shipped (PostgreSQL keeps Redis' raw sketch, which the
//     engine does not read): a tiered region's hll counters are not part
//     of global reads.
//
// Its version is the region's version of the counter plus the versions
// of the counter's earlier lives (a counter deleted and created again
// starts again at version 1 in the hot tier): every later state of a
// counter has a higher version than every earlier one, so a peer that
// merges by the higher version keeps the newest whatever the order and
// the number of times the states arrive. A counter deleted since it was
// created is preceded by a tombstone at the versions of its earlier lives.

// RegionChange is one counter's entry in the region export: its
// position, the tombstone of its earlier lives (nil: none) and its state
// (nil: not live, or not shipped).
type RegionChange struct {
	At    postgres.RegionCursor
	Tomb  *engine.State
	State *engine.State
}

// RegionChanges returns the changes after cursor, at most limit
// (region.Durable's Changes), and whether more follow.
func (b *Backend) RegionChanges(ctx context.Context, after postgres.RegionCursor, limit int) ([]RegionChange, bool, error) {
	rows, more, err := b.pg.RegionChanges(ctx, after, limit)
	if err != nil {
		return nil, false, unavailable(err)
	}
	out := make([]RegionChange, 0, len(rows))
	for _, r := range rows {
		c := RegionChange{At: postgres.RegionCursor{Seq: r.Seq, ID: r.ID}}
		t, s, ok := regionStates(&r)
		c.Tomb = t
		if ok {
			c.State = &s
		}
		out = append(out, c)
	}
	return out, more, nil
}

// RegionExportAll calls fn with the state of every live counter that is
// shipped to the peer regions, in id order.
func (b *Backend) RegionExportAll(ctx context.Context, fn func(engine.State) error) error {
	return unavailable(b.pg.RegionExportAll(ctx, func(r postgres.RegionRow) error {
		if _, s, ok := regionStates(&r); ok {
			return fn(s)
		}
		return nil
	}))
}

// RegionExport reads one counter's state as RegionExportAll ships it.
func (b *Backend) RegionExport(ctx context.Context, id string) (engine.State, bool, error) {
	r, ok, err := b.pg.RegionExport(ctx, id)
	if err != nil || !ok {
		return engine.State{}, false, unavailable(err)
	}
	_, s, ok := regionStates(&r)
	return s, ok, nil
}

// regionStates converts a row of the region export: the tombstone of the
// counter's earlier lives (nil: none), and its state (ok false: not live,
// or a kind that is not shipped).
func regionStates(r *postgres.RegionRow) (tomb *engine.State, s engine.State, ok bool) {
	if r.Base > 0 {
		tomb = &engine.State{ID: r.ID, Deleted: true, Version: uint64(r.Base)}
	}
	if !r.Live {
		return tomb, s, false
	}
	s = engine.State{ID: r.ID, Version: uint64(r.Base) + uint64(max(r.Version, 1)), UpdatedAt: r.UpdatedAt.UnixNano()}
	if !r.ExpiresAt.IsZero() {
		s.ExpiresAt = r.ExpiresAt.UnixNano()
	}
	data, kind, err := regionData(r)
	if err != nil || kind == contract.KindNone {
		return tomb, engine.State{}, false
	}
	s.Kind, s.Data = kind, data
	return tomb, s, true
}

// regionData is the engine's encoding of the row's value.
func regionData(r *postgres.RegionRow) ([]byte, contract.Kind, error) {
	switch r.Kind {
	case postgres.KindHLL:
		return nil, contract.KindNone, nil
	case postgres.KindFloat:
		f, err := counter.FloatOfText(r.Float)
		if err != nil {
			return nil, contract.KindNone, fmt.Errorf("tiered: float %q: %w", r.ID, err)
		}
		b, err := f.MarshalBinary()
		return b, contract.KindFloat, err
	case postgres.KindHash:
		names := make([]string, 0, len(r.Fields))
		for n := range r.Fields {
			names = append(names, n)
		}
		sort.Strings(names)
		fd := make([]counter.FieldDelta, len(names))
		for i, n := range names {
			fd[i] = counter.FieldDelta{Name: n, Delta: r.Fields[n]}
		}
		h := counter.NewHash()
		if _, err := h.Set(fd, false); err != nil {
			return nil, contract.KindNone, err
		}
		b, err := h.MarshalBinary()
		return b, contract.KindHash, err
	}
	return binary.AppendVarint(nil, r.Value), contract.KindCounter, nil
}
