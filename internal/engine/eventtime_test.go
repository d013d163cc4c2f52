package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/rollup"
)

// TestEventTimeRollupsOutOfOrder adds hits with event times spread over
// the last 30 hours, in random order, with flushes and restarts between
// them and the clock moving, and checks that every minute and hour bucket
// holds exactly the hits whose time falls in it.
func TestEventTimeRollupsOutOfOrder(t *testing.T) {
	clk := &fakeClock{t: rollT0}
	e, reopen := diskEngine(t, clk)
	id := "page_views:late"
	rng := rand.New(rand.NewPCG(7, 11))
	start := rollT0.Add(-30 * time.Hour)
	truthMin := map[int64]int64{} // minute bucket -> count
	truthHour := map[int64]int64{}
	for i := range 3000 {
		at := start.Add(time.Duration(rng.Int64N(int64(30*time.Hour + 10*time.Minute))))
		if at.After(clk.Now()) {
			at = clk.Now()
		}
		d := int64(1 + rng.IntN(3))
		mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: id, Delta: d, At: at.UnixNano()})
		truthMin[at.Unix()/60] += d
		truthHour[at.Unix()/3600] += d
		switch {
		case i%97 == 0:
			e.Flush(bg)
		case i%701 == 700:
			e.Flush(bg)
			e.Close()
			e = reopen()
		}
		if i%300 == 0 {
			clk.Advance(time.Minute)
		}
	}
	check := func(when string) {
		t.Helper()
		now := clk.Now()
		s := mustSeries(t, e, id, rollup.Minute, start.Truncate(time.Minute), now.Add(time.Minute))
		for i, v := range s.Values {
			if w := truthMin[s.Start(i).Unix()/60]; v != w {
				t.Fatalf("%s: minute %v: %d, want %d", when, s.Start(i), v, w)
			}
		}
		h := mustSeries(t, e, id, rollup.Hour, start.Truncate(time.Hour), now.Add(time.Hour))
		var total int64
		for i, v := range h.Values {
			if w := truthHour[h.Start(i).Unix()/3600]; v != w {
				t.Fatalf("%s: hour %v: %d, want %d", when, h.Start(i), v, w)
			}
			total += v
		}
		if v := viewValue(t, e, id); v != total {
			t.Fatalf("%s: counter %d, hour buckets sum to %d", when, v, total)
		}
	}
	check("before flush")
	e.Flush(bg)
	check("after flush")
	e.Close()
	e = reopen()
	check("after restart")
	// More late hits on top of stored chunks, read before and after a flush.
	for i := range 200 {
		at := start.Add(time.Duration(i) * 7 * time.Minute)
		mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1, At: at.UnixNano()})
		truthMin[at.Unix()/60]++
		truthHour[at.Unix()/3600]++
	}
	check("late on stored")
	e.Flush(bg)
	check("late on stored, flushed")
	e.Close()
}

func viewValue(t *testing.T, e *Engine, id string) int64 {
	t.Helper()
	v, err := e.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	return v.Value
}

// TestEventTimeReplayYesterday replays yesterday's stream (event times in
// yesterday, applied today) and finds yesterday's hour and day buckets
// filled exactly, today's untouched.
func TestEventTimeReplayYesterday(t *testing.T) {
	today := time.Date(2024, 3, 10, 9, 30, 0, 0, time.UTC)
	clk := &fakeClock{t: today}
	e, _ := diskEngine(t, clk)
	id := "page_views:replay"
	// Today's live traffic first: the open chunks are today's.
	for range 5 {
		mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1})
	}
	yesterday := today.Truncate(24 * time.Hour).Add(-24 * time.Hour)
	perHour := make([]int64, 24)
	for i := range 24 * 60 {
		at := yesterday.Add(time.Duration(i) * time.Minute).Add(17 * time.Second)
		d := int64(i%5 + 1)
		perHour[at.Hour()] += d
		mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: id, Delta: d, At: at.UnixNano()})
		if i%200 == 0 {
			e.Flush(bg)
		}
	}
	e.Flush(bg)
	h := mustSeries(t, e, id, rollup.Hour, yesterday, yesterday.Add(24*time.Hour))
	var sum int64
	for i, v := range h.Values {
		if v != perHour[i] {
			t.Fatalf("yesterday %02d:00: %d, want %d", i, v, perHour[i])
		}
		sum += v
	}
	d := mustSeries(t, e, id, rollup.Day, yesterday, today.Add(time.Hour))
	if len(d.Values) != 2 || d.Values[0] != sum || d.Values[1] != 5 {
		t.Fatalf("days: %v, want [%d 5]", d.Values, sum)
	}
}

// TestEventTimeUniques adds items to hour sketches before the open one and
// checks the unique counts are those of exactly the items of the units
// asked for, before and after flushes and restarts.
func TestEventTimeUniques(t *testing.T) {
	clk := &fakeClock{t: rollT0}
	e, reopen := diskEngine(t, clk)
	id := "visitors:late"
	spec := testSpec()
	perHour := map[int][]string{} // hours ago -> items
	add := func(ago int, item string) {
		at := clk.Now().Truncate(time.Hour).Add(-time.Duration(ago)*time.Hour + 5*time.Minute)
		if ago == 0 {
			at = clk.Now()
		}
		mustApply(t, e, contract.Op{Type: contract.OpPFAdd, ID: id, Items: [][]byte{[]byte(item)}, At: at.UnixNano()})
		perHour[ago] = append(perHour[ago], item)
	}
	for i := range 40 {
		add(0, fmt.Sprintf("now-%d", i))
	}
	rng := rand.New(rand.NewPCG(3, 5))
	for i := range 600 {
		add(1+rng.IntN(30), fmt.Sprintf("u-%d", rng.IntN(500)))
		if i%150 == 149 {
			e.Flush(bg)
		}
		if i == 400 {
			e.Close()
			e = reopen()
		}
	}
	check := func(when string) {
		t.Helper()
		for _, n := range []int{1, 2, 5, 13, 31, 48} {
			est, err := e.Uniques(id, rollup.Hour, n)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := counter.NewHLL(spec.Precision)
			for ago := range n {
				for _, u := range perHour[ago] {
					want.Add([]byte(u))
				}
			}
			if est.Value != want.Count() {
				t.Fatalf("%s: last %d hours: %d, want %d", when, n, est.Value, want.Count())
			}
		}
	}
	check("in memory")
	e.Flush(bg)
	check("flushed")
	e.Close()
	e = reopen()
	check("restarted")
	// The open hour closes: the late units stay counted.
	clk.Advance(time.Hour)
	for k := 47; k > 0; k-- {
		perHour[k] = perHour[k-1]
	}
	perHour[0] = nil
	add(0, "next-hour")
	e.Flush(bg)
	check("next hour")
	e.Close()
}

// TestEventTimeWindow: a window add with a past time lands in that
// bucket; one older than the window is refused with ErrTooLate (an
// invalid argument); times outside 1900..2200 are invalid.
func TestEventTimeWindow(t *testing.T) {
	clk := &fakeClock{t: rollT0}
	e := mustOpen(t, func() Config { c := DefaultConfig(); c.Dir = t.TempDir(); c.Clock = clk.Now; return c }())
	spec := counter.WindowSpec{Span: time.Hour, Granularity: time.Minute}
	win := func(d int64, at time.Time) (contract.Result, error) {
		var a int64
		if !at.IsZero() {
			a = at.UnixNano()
		}
		return e.Apply(bg, contract.Op{Type: contract.OpAdd, ID: "w", Kind: contract.KindWindow, Window: spec, Delta: d, At: a}, contract.WriteOptions{})
	}
	if _, err := win(1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := win(10, clk.Now().Add(-30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	v, err := e.Get("w")
	if err != nil || v.Value != 11 {
		t.Fatalf("window %+v %v", v, err)
	}
	var at30 int64
	for _, b := range v.Buckets {
		if b.Start.Equal(clk.Now().Add(-30 * time.Minute).Truncate(time.Minute)) {
			at30 = b.Count
		}
	}
	if at30 != 10 {
		t.Fatalf("bucket 30 minutes ago holds %d, want 10: %+v", at30, v.Buckets)
	}
	// 31 minutes on, the add of 30 minutes ago is 61 minutes old: out.
	clk.Advance(31 * time.Minute)
	if v, _ := e.Get("w"); v.Value != 1 {
		t.Fatalf("after 31 minutes: %d", v.Value)
	}
	_, err = win(5, clk.Now().Add(-61*time.Minute))
	if !errors.Is(err, ErrTooLate) || !errors.Is(err, contract.ErrInvalidArgument) {
		t.Fatalf("too late: %v", err)
	}
	// A new window counter refuses a first add older than its window, and
	// is not created.
	_, err = e.Apply(bg, contract.Op{Type: contract.OpAdd, ID: "w2", Kind: contract.KindWindow, Window: spec, Delta: 1, At: clk.Now().Add(-2 * time.Hour).UnixNano()}, contract.WriteOptions{})
	if !errors.Is(err, ErrTooLate) {
		t.Fatalf("new window too late: %v", err)
	}
	if v, _ := e.Get("w2"); v.Exists {
		t.Fatal("w2 created by a refused add")
	}
	for _, bad := range []time.Time{time.Date(1800, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2201, 1, 1, 0, 0, 0, 0, time.UTC)} {
		if _, err := win(1, bad); !errors.Is(err, contract.ErrInvalidArgument) || errors.Is(err, ErrTooLate) {
			t.Fatalf("%v: %v", bad, err)
		}
	}
	if _, err := e.Apply(bg, contract.Op{Type: contract.OpSet, ID: "s", Value: 1, At: clk.Now().UnixNano()}, contract.WriteOptions{}); !errors.Is(err, contract.ErrInvalidArgument) {
		t.Fatalf("set with an event time: %v", err)
	}
	// A rolled-up counter refuses a time past every retention.
	_, err = e.Apply(bg, contract.Op{Type: contract.OpAdd, ID: "plain", Delta: 1, At: clk.Now().Add(-400 * day).UnixNano()}, contract.WriteOptions{})
	if err != nil {
		t.Fatalf("a counter without rollups takes any valid time: %v", err)
	}
}

// TestEventTimeRollupRetention: an add older than every retention is too
// late; one inside the hour retention but past the minute's counts in
// the hour bucket only.
func TestEventTimeRollupRetention(t *testing.T) {
	clk := &fakeClock{t: rollT0}
	e, _ := diskEngine(t, clk)
	id := "page_views:ret"
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1})
	old := clk.Now().Add(-11 * 365 * day)
	if _, err := e.Apply(bg, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1, At: old.UnixNano()}, contract.WriteOptions{}); !errors.Is(err, ErrTooLate) {
		t.Fatalf("past every retention: %v", err)
	}
	at := clk.Now().Add(-72 * time.Hour)
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: id, Delta: 7, At: at.UnixNano()})
	e.Flush(bg)
	h := mustSeries(t, e, id, rollup.Hour, at.Truncate(time.Hour), at.Truncate(time.Hour).Add(time.Hour))
	if h.Values[0] != 7 {
		t.Fatalf("hour bucket 72h ago: %v", h.Values)
	}
	if v := viewValue(t, e, id); v != 8 {
		t.Fatalf("counter %d", v)
	}
}

// FuzzParseEventTime: any input parses to a valid event time or fails
// with ErrInvalidArgument; times written either way parse back exactly.
func FuzzParseEventTime(f *testing.F) {
	for _, s := range []string{"2026-11-25T10:00:00Z", "1764064800000", "0", "-1", "9999-12-31T23:59:59Z", "0000-01-01T00:00:00Z",
		"2026-11-25T10:00:00.123456789+05:30", "1e3", "", "T", "2199-12-31T23:59:59.999999999Z", "7258118400000"} {
		f.Add(s, int64(0))
	}
	f.Fuzz(func(t *testing.T, s string, n int64) {
		at, err := ParseEventTime(s)
		if err != nil {
			if !errors.Is(err, contract.ErrInvalidArgument) {
				t.Fatalf("%q: untyped error %v", s, err)
			}
		} else if contract.ValidateAt(at) != nil || at == 0 {
			t.Fatalf("%q parsed to %d: outside the range, or 0 (which means now)", s, at)
		}
		// n as a time in range: both forms round-trip.
		span := contract.MaxAt - contract.MinAt
		x := contract.MinAt + ((n%span)+span)%span
		if x/int64(time.Millisecond) == 0 {
			x = int64(time.Millisecond) // the epoch itself is refused
		}
		tm := time.Unix(0, x).UTC()
		if got, err := ParseEventTime(tm.Format(time.RFC3339Nano)); err != nil || got != x {
			t.Fatalf("%v: RFC 3339 round trip %d %v", tm, got, err)
		}
		ms := x - ((x%int64(time.Millisecond))+int64(time.Millisecond))%int64(time.Millisecond)
		if got, err := ParseEventTime(fmt.Sprint(ms / int64(time.Millisecond))); err != nil || got != ms {
			t.Fatalf("%d ms: round trip %d %v", ms/int64(time.Millisecond), got, err)
		}
	})
}

// TestLateSketchesAcrossFlushes: late items go to the same few closed
// hours flush after flush, so each flush merges into sketches the last
// one wrote (kept in the engine's sketch cache rather than read back); the
// unique counts stay exact after every flush, across purges, and after a
// restart, which reads everything from disk.
func TestLateSketchesAcrossFlushes(t *testing.T) {
	clk := &fakeClock{t: rollT0}
	e, reopen := diskEngine(t, clk)
	id := "visitors:cache"
	spec := testSpec()
	perHour := map[int][]string{}
	rng := rand.New(rand.NewPCG(9, 4))
	check := func(when string) {
		t.Helper()
		for n := 1; n <= 8; n++ {
			est, err := e.Uniques(id, rollup.Hour, n)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := counter.NewHLL(spec.Precision)
			for ago := range n {
				for _, u := range perHour[ago] {
					want.Add([]byte(u))
				}
			}
			if est.Value != want.Count() {
				t.Fatalf("%s: last %d hours: %d, want %d", when, n, est.Value, want.Count())
			}
		}
	}
	mustApply(t, e, contract.Op{Type: contract.OpPFAdd, ID: id, Items: [][]byte{[]byte("now")}})
	perHour[0] = append(perHour[0], "now")
	for round := range 40 {
		for range 20 {
			ago := 1 + rng.IntN(6)
			item := fmt.Sprintf("u-%d", rng.IntN(2000))
			at := clk.Now().Truncate(time.Hour).Add(-time.Duration(ago)*time.Hour + time.Duration(rng.IntN(3600))*time.Second)
			mustApply(t, e, contract.Op{Type: contract.OpPFAdd, ID: id, Items: [][]byte{[]byte(item)}, At: at.UnixNano()})
			perHour[ago] = append(perHour[ago], item)
		}
		if err := e.Flush(bg); err != nil {
			t.Fatal(err)
		}
		if round%7 == 3 {
			if err := e.purgeRollups(); err != nil {
				t.Fatal(err)
			}
		}
		check(fmt.Sprintf("round %d", round))
	}
	e.Close()
	e = reopen()
	check("restarted")
	e.Close()
}
