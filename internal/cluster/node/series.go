package node

import (
	"fmt"
	"math"
	"time"

	"github.com/counterd/counterd/internal/engine"
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
		return nil, fmt.Errorf("%w: empty series from peer", engine.ErrUnavailable)
	}
	st := rollup.NewState(&rollup.Spec{Minute: forever, Hour: forever, Day: forever, Month: forever}, false)
	st.SetNoStore(true)
	s, err := st.CountsView().Series(nil, w.Granularity, w.From.UnixNano(), w.To.UnixNano(), w.To.UnixNano())
	if err != nil {
		return nil, fmt.Errorf("%w: series from peer: %v", engine.ErrUnavailable, err)
	}
	if len(s.Values) != len(w.Values) {
		return nil, fmt.Errorf("%w: series from peer has %d buckets, want %d", engine.ErrUnavailable, len(w.Values), len(s.Values))
	}
	copy(s.Values, w.Values)
	s.Source, s.Total = w.Source, w.Total
	return s, nil
}
