package consumer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline/event"
	"github.com/counterd/counterd/internal/pipeline/rules"
	"github.com/counterd/counterd/internal/pipeline/stream"
	"github.com/counterd/counterd/internal/rollup"
)

const eventTimeRules = `rules:
  - name: views
    filter: event.type == "view"
    counter: '"views:" + event.post'
    add: "1"
    rollup: {key: views, minute: 48h, hour: 90d, day: 400d}
  - name: viewers
    filter: event.type == "view"
    counter: '"viewers:" + event.post'
    pfadd: event.user
    rollup: {key: viewers, unique_hours: 48h, unique_days: 400d}
  - name: recent
    filter: event.type == "view"
    counter: '"recent:" + event.post'
    window: {granularity: 1m, span: 1h, by: "1"}
`

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// clockEngine is an in-memory engine whose clock is clk, closed at the
// test's end.
func clockEngine(t *testing.T, clk *testClock) *engine.Engine {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.InMemory = true
	cfg.Clock = clk.Now
	e, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// eventTimeApplier is an applier over an engine whose clock, and the
// applier's, is clk, with the event-time rules and their rollups.
func eventTimeApplier(t *testing.T, clk *testClock) (*Applier, *engine.Engine) {
	t.Helper()
	e := clockEngine(t, clk)
	rs := loadWithRollups(t, e, eventTimeRules)
	a, err := NewApplier(engine.Local(e), rs, event.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.SetEventTime(EventTime{Now: clk.Now})
	return a, e
}

func viewRecord(off int, id string, ts time.Time, user string) stream.Record {
	js := fmt.Sprintf(`{"id":%q,"type":"view","ts":%d,"post":"p","user":%q}`, id, ts.UnixMilli(), user)
	return stream.Record{Partition: 0, Offset: int64(off), Value: []byte(js)}
}

// TestEventTimeOutOfOrderAndLate applies views whose times are spread
// over the last 3 hours (and a few in the future), shuffled, in several
// deliveries: the hour and minute buckets hold exactly the views of their
// times; the window holds the views of the last hour; views older than
// the allowed lateness count in the rollups but not in the window (their
// window op is dropped); views beyond the skew are dead-lettered
// too_early.
func TestEventTimeOutOfOrderAndLate(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 30, 20, 0, time.UTC)
	clk := &testClock{t: now}
	a, e := eventTimeApplier(t, clk)
	rng := rand.New(rand.NewPCG(1, 2))
	type ev struct {
		ts     time.Time
		future bool
	}
	var evs []ev
	for range 3000 {
		evs = append(evs, ev{ts: now.Add(-time.Duration(rng.Int64N(int64(3 * time.Hour))))})
	}
	for range 20 {
		evs = append(evs, ev{ts: now.Add(6*time.Minute + time.Duration(rng.Int64N(int64(time.Hour)))), future: true})
	}
	for range 20 { // within the skew: accepted
		evs = append(evs, ev{ts: now.Add(time.Duration(rng.Int64N(int64(4 * time.Minute))))})
	}
	rng.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	var recs []stream.Record
	for i, x := range evs {
		recs = append(recs, viewRecord(i, fmt.Sprint("e", i), x.ts, fmt.Sprint("u", i%97)))
	}
	var dead []stream.DeadLetter
	for from := 0; from < len(recs); from += 700 {
		d, err := a.Apply(context.Background(), "test", recs[from:min(from+700, len(recs))])
		if err != nil {
			t.Fatal(err)
		}
		dead = append(dead, d...)
		e.Flush(context.Background())
	}
	perMin, perHour := map[int64]int64{}, map[int64]int64{}
	var window, total int64
	early := 0
	for _, x := range evs {
		if x.future {
			early++
			continue
		}
		total++
		perMin[x.ts.Unix()/60]++
		perHour[x.ts.Unix()/3600]++
		if !x.ts.Before(now.Add(-time.Hour)) {
			window++
		}
	}
	if len(dead) != early {
		for _, d := range dead {
			if !evs[d.Record.Offset].future {
				t.Logf("dead %v: %s", evs[d.Record.Offset].ts, d.Reason)
				break
			}
		}
		t.Fatalf("%d dead letters, want the %d future events", len(dead), early)
	}
	for _, d := range dead {
		if !evs[d.Record.Offset].future || !strings.HasPrefix(d.Reason, ReasonTooEarly+":") {
			t.Fatalf("dead letter %d (%v): %s", d.Record.Offset, evs[d.Record.Offset].ts, d.Reason)
		}
	}
	v, _ := e.Get("views:p")
	if v.Value != total {
		t.Fatalf("views %d, want %d", v.Value, total)
	}
	from := now.Add(-3 * time.Hour).Truncate(time.Minute)
	s, err := e.Series("views:p", rollup.Minute, from, now.Add(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range s.Values {
		if w := perMin[s.Start(i).Unix()/60]; x != w {
			t.Fatalf("minute %v: %d, want %d", s.Start(i), x, w)
		}
	}
	h, err := e.Series("views:p", rollup.Hour, from.Truncate(time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range h.Values {
		if w := perHour[h.Start(i).Unix()/3600]; x != w {
			t.Fatalf("hour %v: %d, want %d", h.Start(i), x, w)
		}
	}
	// The window: views of the last hour, by minute bucket (the bucket of
	// now-1h is partly in: the window holds whole minutes).
	w, _ := e.Get("recent:p")
	var inWindow int64
	for _, x := range evs {
		if !x.future && x.ts.Truncate(time.Minute).After(now.Add(-time.Hour)) {
			inWindow++
		}
	}
	if w.Value != inWindow {
		t.Fatalf("window %d, want %d (views of the last hour: %d)", w.Value, inWindow, window)
	}
	st := a.EventTimeStatus()
	if st.TooEarly != int64(early) || st.TooLate != 0 {
		t.Fatalf("status %+v", st)
	}
	var newest time.Time
	for _, x := range evs {
		if !x.future && x.ts.After(newest) {
			newest = x.ts
		}
	}
	if !st.Watermark.Equal(newest.Truncate(time.Millisecond)) {
		t.Fatalf("watermark %v, want the newest applied ts %v", st.Watermark, newest)
	}
	// Uniques by hour count each hour's users by event time.
	est, err := e.Uniques("viewers:p", rollup.Hour, 4)
	if err != nil || est.Value < 95 || est.Value > 99 {
		t.Fatalf("viewers of the last 4 hours: %+v %v", est, err)
	}
}

// TestEventTimeTooLate: an event that only a window rule matches, older
// than the allowed lateness, is dead-lettered too_late; one that the
// engine refuses (older than every rollup retention) too.
func TestEventTimeTooLate(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	clk := &testClock{t: now}
	cfg := engine.DefaultConfig()
	cfg.InMemory = true
	cfg.Clock = clk.Now
	e, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rs, err := rules.Load("rules.yaml", []byte(`rules:
  - name: recent
    counter: '"recent:" + event.post'
    window: {granularity: 1m, span: 2h, by: "1"}
  - name: old
    filter: event.type == "old"
    counter: '"old:" + event.post'
    add: "1"
    rollup: {key: old, minute: 1h, hour: 48h, day: 0s, month: 0s, unique_hours: 0s, unique_days: 0s}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetRollup("old", rs.Rules[1].Rollup); err != nil {
		t.Fatal(err)
	}
	a, err := NewApplier(engine.Local(e), rs, event.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.SetEventTime(EventTime{AllowedLateness: 30 * time.Minute, Now: clk.Now})
	rec := func(off int, typ string, ts time.Time) stream.Record {
		return stream.Record{Offset: int64(off), Value: []byte(fmt.Sprintf(`{"id":"e%d","type":%q,"ts":%d,"post":"p"}`, off, typ, ts.UnixMilli()))}
	}
	dead, err := a.Apply(context.Background(), "test", []stream.Record{
		rec(0, "view", now.Add(-10*time.Minute)), // in
		rec(1, "view", now.Add(-40*time.Minute)), // window op past the lateness: the event is too_late
		rec(2, "old", now.Add(-72*time.Hour)),    // window op dropped; the add is past the rollup's retention: too_late
		rec(3, "old", now.Add(-47*time.Hour)),    // window op dropped; the add counts in its hour
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 2 || dead[0].Record.Offset != 1 || dead[1].Record.Offset != 2 {
		t.Fatalf("dead letters %+v", dead)
	}
	for _, d := range dead {
		if !strings.HasPrefix(d.Reason, ReasonTooLate+":") {
			t.Fatalf("reason %q", d.Reason)
		}
	}
	if w, _ := e.Get("recent:p"); w.Value != 1 {
		t.Fatalf("window %d", w.Value)
	}
	if v, _ := e.Get("old:p"); v.Value != 1 {
		t.Fatalf("old %d", v.Value)
	}
	at := now.Add(-47 * time.Hour).Truncate(time.Hour)
	h, err := e.Series("old:p", rollup.Hour, at, at.Add(time.Hour))
	if err != nil || h.Values[0] != 1 {
		t.Fatalf("hour of 47h ago: %+v %v", h, err)
	}
	if st := a.EventTimeStatus(); st.TooLate != 2 || st.AllowedLateness != 30*time.Minute || st.MaxSkew != DefaultMaxSkew {
		t.Fatalf("status %+v", st)
	}
}

// TestEventTimeReplayYesterday replays yesterday's stream today (the
// clock injected): yesterday's hour and day buckets hold exactly its
// views, today's stay as they were; a second delivery changes nothing.
func TestEventTimeReplayYesterday(t *testing.T) {
	today := time.Date(2026, 3, 10, 8, 15, 0, 0, time.UTC)
	clk := &testClock{t: today}
	a, e := eventTimeApplier(t, clk)
	ctx := context.Background()
	// Live traffic this morning.
	var live []stream.Record
	for i := range 50 {
		live = append(live, viewRecord(i, fmt.Sprint("live", i), today.Add(-time.Duration(i)*time.Minute), "u"))
	}
	if _, err := a.Apply(ctx, "live", live); err != nil {
		t.Fatal(err)
	}
	yesterday := today.Truncate(24 * time.Hour).Add(-24 * time.Hour)
	rng := rand.New(rand.NewPCG(5, 6))
	perHour := make([]int64, 24)
	var recs []stream.Record
	for i := range 5000 {
		ts := yesterday.Add(time.Duration(rng.Int64N(int64(24 * time.Hour))))
		perHour[ts.Hour()]++
		recs = append(recs, viewRecord(i, fmt.Sprint("y", i), ts, fmt.Sprint("u", i%300)))
	}
	for round := range 2 {
		for from := 0; from < len(recs); from += 1000 {
			dead, err := a.Apply(ctx, "replay", recs[from:from+1000])
			if err != nil {
				t.Fatal(err)
			}
			if len(dead) != 0 {
				t.Fatalf("round %d: dead letters: %s", round, dead[0].Reason)
			}
			e.Flush(ctx)
		}
		h, err := e.Series("views:p", rollup.Hour, yesterday, yesterday.Add(24*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		for i, x := range h.Values {
			if x != perHour[i] {
				t.Fatalf("round %d: yesterday %02d:00: %d, want %d", round, i, x, perHour[i])
			}
		}
		d, err := e.Series("views:p", rollup.Day, yesterday, today.Add(time.Hour))
		if err != nil || d.Values[0] != 5000 || d.Values[1] != 50 {
			t.Fatalf("round %d: days %v %v, want [5000 50]", round, d.Values, err)
		}
		// The window (1h) holds only this morning's live views.
		if w, _ := e.Get("recent:p"); w.Value != 50 {
			t.Fatalf("window %d, want 50", w.Value)
		}
		est, err := e.Uniques("viewers:p", rollup.Day, 2)
		if err != nil || est.Value < 290 || est.Value > 310 {
			t.Fatalf("viewers of 2 days: %+v %v", est, err)
		}
	}
}
