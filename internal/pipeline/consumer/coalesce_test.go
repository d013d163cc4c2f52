package consumer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline/event"
	"github.com/counterd/counterd/internal/pipeline/stream"
	"github.com/counterd/counterd/internal/rollup"
)

const coalesceRules = `rules:
  - name: plain
    counter: '"plain:" + event.post'
    add: "1"
  - name: hourly
    counter: '"hourly:" + event.post'
    add: "1"
    rollup: {key: hourly, minute: "0", hour: 48h, day: "0", month: "0"}
  - name: daily-uniques
    counter: '"daily:" + event.post'
    pfadd: event.user
    rollup: {key: daily, unique_hours: "0", unique_days: 30d}
  - name: minutes
    counter: '"minutes:" + event.post'
    add: "1"
    rollup: {key: minutes, minute: 48h, day: 30d}
`

// opCounter is the engine's backend, counting the ops of each counter
// that reach ApplyAtomic.
type opCounter struct {
	contract.Backend
	e   *engine.Engine
	ops map[string]int
}

func (o *opCounter) ApplyAtomic(ctx context.Context, ops []contract.Op, wo contract.WriteOptions) error {
	for i := range ops {
		o.ops[ops[i].ID]++
	}
	return o.e.ApplyAtomic(ctx, ops, wo)
}

func (o *opCounter) RollupOf(id string) (rollup.Spec, bool) { return o.e.RollupOf(id) }

// TestCoalescePerRollupBucket: events over 3 hours (each minute of them)
// to counters with hour, day-unique, minute and no rollups make one op a
// counter and bucket of its finest rollup: a counter without rollups
// one, an hourly one one an hour, a daily-unique one one a day, a minute
// one one a minute (the rules' rollups keep what they name and the
// defaults: minute buckets unless "0"); every rollup bucket is exact.
func TestCoalescePerRollupBucket(t *testing.T) {
	clk := &testClock{t: time.Date(2026, 11, 20, 12, 30, 0, 0, time.UTC)}
	e := clockEngine(t, clk)
	rs := loadWithRollups(t, e, coalesceRules)
	be := &opCounter{Backend: engine.Local(e), e: e, ops: map[string]int{}}
	a, err := NewApplier(be, rs, event.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.SetEventTime(EventTime{Now: clk.Now})
	// From 09:30 to 12:29, one event a minute (3 a minute in the last
	// hour), of users u0..u9.
	from := clk.Now().Add(-3 * time.Hour)
	var recs []stream.Record
	perHour := map[time.Time]int64{}
	for m := range 180 {
		ts := from.Add(time.Duration(m) * time.Minute)
		for k := range 1 + 2*(m/120) {
			js := fmt.Sprintf(`{"id":"e%d-%d","type":"view","ts":%d,"post":"p","user":"u%d"}`, m, k, ts.UnixMilli(), m%10)
			recs = append(recs, stream.Record{Offset: int64(len(recs)), Value: []byte(js)})
			perHour[ts.Truncate(time.Hour)]++
		}
	}
	if _, err := a.Apply(context.Background(), "test", recs); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int{"plain:p": 1, "hourly:p": 4, "daily:p": 1, "minutes:p": 180} {
		if got := be.ops[id]; got != want {
			t.Errorf("%s: %d ops, want %d", id, got, want)
		}
	}
	n := int64(len(recs))
	for _, id := range []string{"plain:p", "hourly:p", "minutes:p"} {
		if v, err := e.Get(id); err != nil || v.Value != n {
			t.Errorf("%s = %d (%v), want %d", id, v.Value, err, n)
		}
	}
	h, err := e.Series("hourly:p", rollup.Hour, from.Truncate(time.Hour), clk.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if h.Total != n {
		t.Errorf("hourly:p's hours sum to %d, want %d", h.Total, n)
	}
	for i, x := range h.Values {
		if w := perHour[h.Start(i)]; x != w {
			t.Errorf("hourly:p at %s = %d, want %d", h.Start(i), x, w)
		}
	}
	mins, err := e.Series("minutes:p", rollup.Minute, from, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if mins.Total != n {
		t.Errorf("minutes:p's minutes sum to %d, want %d", mins.Total, n)
	}
	for i, x := range mins.Values {
		if want := int64(1 + 2*(int(mins.Start(i).Sub(from)/time.Minute)/120)); x != want {
			t.Errorf("minutes:p at %s = %d, want %d", mins.Start(i), x, want)
		}
	}
	if est, err := e.Uniques("daily:p", rollup.Day, 1); err != nil || est.Value != 10 {
		t.Errorf("daily:p uniques of today = %+v (%v), want 10", est, err)
	}
}

// TestGrainFollowsRollupBetweenPolls: the grain of a counter is kept for
// the rest of a poll (hitGrain), never beyond it: a counter whose
// rollups keep hours only gets one op for events in three minutes of one
// hour; after its rollup is changed to keep minutes too, the next poll's
// events in three minutes make three ops (one a minute bucket), and the
// minute buckets hold them; a counter without rollups, then with one,
// likewise. The times of a poll's events are looked up for a counter
// named in every poll, through the rules' cache of counter ids.
func TestGrainFollowsRollupBetweenPolls(t *testing.T) {
	clk := &testClock{t: time.Date(2026, 11, 20, 12, 30, 0, 0, time.UTC)}
	e := clockEngine(t, clk)
	rs := loadWithRollups(t, e, coalesceRules)
	be := &opCounter{Backend: engine.Local(e), e: e, ops: map[string]int{}}
	a, err := NewApplier(be, rs, event.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.SetEventTime(EventTime{Now: clk.Now})
	hour := clk.Now().Truncate(time.Hour).Add(-time.Hour) // 11:00
	off := 0
	poll := func(name string) {
		t.Helper()
		clear(be.ops)
		var recs []stream.Record
		for m := range 3 { // 11:10, 11:20, 11:30
			ts := hour.Add(time.Duration(10*(m+1)) * time.Minute)
			js := fmt.Sprintf(`{"id":"g%d","type":"view","ts":%d,"post":"p","user":"u"}`, off, ts.UnixMilli())
			recs = append(recs, stream.Record{Offset: int64(off), Value: []byte(js)})
			off++
		}
		if _, err := a.Apply(context.Background(), "test", recs); err != nil {
			t.Fatal(err)
		}
	}
	minutes := rollup.Spec{Minute: 48 * time.Hour, Hour: 48 * time.Hour}
	poll("hours")
	if be.ops["hourly:p"] != 1 || be.ops["plain:p"] != 1 {
		t.Fatalf("hourly:p %d ops, plain:p %d, want 1 and 1", be.ops["hourly:p"], be.ops["plain:p"])
	}
	for _, key := range []string{"hourly", "plain"} {
		if err := e.SetRollup(key, minutes); err != nil {
			t.Fatal(err)
		}
	}
	poll("minutes")
	for _, id := range []string{"hourly:p", "plain:p"} {
		if be.ops[id] != 3 {
			t.Errorf("%s after its rollup kept minutes: %d ops, want 3 (one a minute)", id, be.ops[id])
		}
		s, err := e.Series(id, rollup.Minute, hour, hour.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		for i, x := range s.Values {
			want := int64(0)
			if m := s.Start(i).Sub(hour); m == 10*time.Minute || m == 20*time.Minute || m == 30*time.Minute {
				want = 1
			}
			if x != want {
				t.Errorf("%s at %s = %d, want %d", id, s.Start(i).Format("15:04"), x, want)
			}
		}
	}
}
