package node

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/rollup"
)

func toWireSeries(s *rollup.Series) *wireSeries {
	return &wireSeries{Granularity: s.Granularity, Source: s.Source, From: s.From, To: s.To, Values: s.Values, Total: s.Total}
}

// forever is a retention no query reaches past.
const forever = time.Duration(math.MaxInt64)

// series rebuilds a rollup.Series. Its bucket origin is unexported, so the
// frame comes from an empty in-memory rollup over the same range and the
// values are copied in.
func (w *wireSeries) series() (*rollup.Series, error) {
	if w == nil {
		return nil, fmt.Errorf("%w: empty series from peer", contract.ErrUnavailable)
	}
	st := rollup.NewState(&rollup.Spec{Minute: forever, Hour: forever, Day: forever, Month: forever}, false)
	st.SetNoStore(true)
	s, err := st.CountsView().Series(nil, w.Granularity, w.From.UnixNano(), w.To.UnixNano(), w.To.UnixNano())
	if err != nil {
		return nil, fmt.Errorf("%w: series from peer: %v", contract.ErrUnavailable, err)
	}
	if len(s.Values) != len(w.Values) {
		return nil, fmt.Errorf("%w: series from peer has %d buckets, want %d", contract.ErrUnavailable, len(w.Values), len(s.Values))
	}
	copy(s.Values, w.Values)
	s.Source, s.Total = w.Source, w.Total
	return s, nil
}

// Series of pn and sharded counters. Rollups count the adds applied on the
// node that applied them (the engine's Merge does not feed them), and a pn
// or sharded add is applied on whichever node receives it. So the series of
// such a counter is the per-bucket sum of every ring node's own series:
// each add is counted once, by the node that applied it, as soon as it is
// applied there (no replication lag). Adds applied on a node that is no
// longer on the ring are missing until it comes back (its rollups are on
// its disk); a node on the ring that cannot be reached fails the read with
// ErrUnavailable (a partial sum would be wrong without saying so).

// seriesQuery asks a node for its own series of an id (op "series").
type seriesQuery struct {
	ID   string             `json:"id"`
	G    rollup.Granularity `json:"g"`
	From time.Time          `json:"from"`
	To   time.Time          `json:"to"`
}

// localSeries is this node's own series of q.ID.
func (n *Node) localSeries(ctx context.Context, q *seriesQuery) (*wireSeries, error) {
	if q == nil {
		return nil, fmt.Errorf("%w: series without a query", contract.ErrInvalidArgument)
	}
	s, err := n.store.Series(ctx, q.ID, q.G, q.From, q.To)
	if err != nil {
		return nil, err
	}
	return toWireSeries(s), nil
}

// seriesEverywhere sums q's series over every node of the ring.
func (n *Node) seriesEverywhere(ctx context.Context, q *seriesQuery) (*rollup.Series, error) {
	var sum *wireSeries
	err := n.fanOut(ctx, &localRequest{Op: "series", SeriesOf: q}, func(r *localResponse) error {
		var err error
		sum, err = addSeries(sum, r.Series)
		return err
	})
	if err != nil {
		return nil, err
	}
	return sum.series()
}

// errSeriesFrame: two nodes framed a series differently (their clocks put
// the range on two sides of a retention boundary); a retry agrees.
var errSeriesFrame = fmt.Errorf("%w: nodes framed the series differently; retry", contract.ErrUnavailable)

// addSeries adds b into a per bucket (a nil a is b's copy). Both must have
// the same frame.
func addSeries(a, b *wireSeries) (*wireSeries, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: empty series from peer", contract.ErrUnavailable)
	}
	if a == nil {
		c := *b
		c.Values = slices.Clone(b.Values)
		return &c, nil
	}
	if a.Granularity != b.Granularity || a.Source != b.Source || !a.From.Equal(b.From) || !a.To.Equal(b.To) || len(a.Values) != len(b.Values) {
		return nil, errSeriesFrame
	}
	var err error
	for i, v := range b.Values {
		if a.Values[i], err = counter.AddInt64(a.Values[i], v); err != nil {
			return nil, fmt.Errorf("%w: series bucket %d", contract.ErrOverflow, i)
		}
	}
	if a.Total, err = counter.AddInt64(a.Total, b.Total); err != nil {
		return nil, fmt.Errorf("%w: series total", contract.ErrOverflow)
	}
	return a, nil
}
