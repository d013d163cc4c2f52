package backendtest

import (
	"fmt"
	"slices"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/rollup"
)

// eventTimeCases: adds with an explicit event time (contract.Op.At) count
// in that time's window and rollup buckets on every backend
// (docs/time.md, "Event time").
func eventTimeCases() []tcase {
	spec := counter.WindowSpec{Span: time.Hour, Granularity: time.Minute}
	win := func(id string, d int64, at time.Time) contract.Op {
		op := contract.Op{Type: contract.OpAdd, ID: id, Kind: contract.KindWindow, Window: spec, Delta: d}
		if !at.IsZero() {
			op.At = at.UnixNano()
		}
		return op
	}
	return []tcase{
		{"window_past_bucket", func(e *env) {
			id := e.id("w")
			now := e.b.Now()
			e.apply(win(id, 1, time.Time{}))
			past := now.Add(-30 * time.Minute)
			if r := e.apply(win(id, 10, past)); r.Value != 11 {
				e.t.Errorf("add at -30m answered %d, want 11", r.Value)
			}
			v := e.get(id)
			var got int64
			for _, b := range v.Buckets {
				if b.Start.Equal(past.Truncate(time.Minute)) {
					got = b.Count
				}
			}
			if v.Value != 11 || got != 10 {
				e.t.Errorf("window = %d, bucket of -30m = %d (%+v); want 11 and 10", v.Value, got, v.Buckets)
			}
		}},
		{"window_too_late", func(e *env) {
			id := e.id("w")
			now := e.b.Now()
			e.apply(win(id, 1, time.Time{}))
			_, err := e.b.Apply(e.ctx, win(id, 5, now.Add(-2*time.Hour)), contract.WriteOptions{})
			e.wantErr("window add older than the window", err, engine.ErrTooLate)
			e.wantErr("window add older than the window", err, contract.ErrInvalidArgument)
			if v := e.get(id); v.Value != 1 {
				e.t.Errorf("window after a refused add = %d, want 1", v.Value)
			}
		}},
		{"rollup_past_buckets", func(e *env) {
			id := setSpec(e, "et") + ":a"
			now := e.b.Now()
			m := now.Add(-3 * time.Hour).Truncate(time.Minute)
			e.apply(add(id, contract.KindNone, 1)) // now: the open buckets are now's
			at := func(d int64, t time.Time) contract.Op {
				op := add(id, contract.KindNone, d)
				op.At = t.UnixNano()
				return op
			}
			e.apply(at(5, m.Add(10*time.Second)))
			e.apply(at(2, m.Add(time.Minute+59*time.Second)))
			e.apply(at(3, m.Add(20*time.Second)))
			s, err := e.b.Series(e.ctx, id, rollup.Minute, m.Add(-time.Minute), m.Add(3*time.Minute))
			if err != nil || !slices.Equal(s.Values, []int64{0, 8, 2, 0}) {
				e.t.Errorf("minutes around -3h = %+v, %v; want [0 8 2 0]", s, err)
			}
			if v := e.get(id); v.Value != 11 {
				e.t.Errorf("counter = %d, want 11", v.Value)
			}
		}},
		{"uniques_past_day", func(e *env) {
			// A PFADD of many items at once (the pipeline's coalesced
			// op) counts as the same items added one at a time, both into
			// a past day's sketch (event time) and into today's.
			ns := setSpec(e, "etu")
			many, one := ns+":many", ns+":one"
			yesterday := e.b.Now().Add(-24 * time.Hour).UnixNano()
			items := make([]string, 300)
			for i := range items {
				items[i] = fmt.Sprintf("u%d", i)
			}
			op := pfadd(many, items...)
			op.At = yesterday
			e.apply(op)
			for _, it := range items {
				op := pfadd(one, it)
				op.At = yesterday
				e.apply(op)
			}
			e.apply(pfadd(many, "t1", "t2", "u0"))
			for _, it := range []string{"t1", "t2", "u0"} {
				e.apply(pfadd(one, it))
			}
			for _, n := range []int{1, 2} {
				a, errA := e.b.Uniques(e.ctx, many, rollup.Day, n)
				b, errB := e.b.Uniques(e.ctx, one, rollup.Day, n)
				if errA != nil || errB != nil || a.Value != b.Value {
					e.t.Errorf("uniques of the last %d days: %+v, %v at once; %+v, %v one at a time; want equal", n, a, errA, b, errB)
				}
			}
			if today, err := e.b.Uniques(e.ctx, many, rollup.Day, 1); err != nil || today.Value != 3 {
				e.t.Errorf("uniques today = %+v, %v; want 3", today, err)
			}
			if two, err := e.b.Uniques(e.ctx, many, rollup.Day, 2); err != nil || two.Value < 298 || two.Value > 306 {
				e.t.Errorf("uniques of the last 2 days = %+v, %v; want about 302", two, err)
			}
			if a, b := e.get(many), e.get(one); a.Value != b.Value {
				e.t.Errorf("pfcount %d at once, %d one at a time; want equal", a.Value, b.Value)
			}
		}},
		{"invalid_time", func(e *env) {
			op := add(e.id("c"), contract.KindNone, 1)
			op.At = time.Date(1800, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
			_, err := e.b.Apply(e.ctx, op, contract.WriteOptions{})
			e.wantErr("add at 1800", err, contract.ErrInvalidArgument)
			op = set(e.id("c"), 1)
			op.At = e.b.Now().UnixNano()
			_, err = e.b.Apply(e.ctx, op, contract.WriteOptions{})
			e.wantErr("set with an event time", err, contract.ErrInvalidArgument)
		}},
	}
}
