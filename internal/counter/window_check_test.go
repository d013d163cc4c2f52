package counter

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestWindowAddCheck: AddCheck never predicts that an add succeeds when
// it fails, and is exact for the first add of a sequence. Sequences stop
// at the first add it refuses (what the engine does: it then applies
// with an undo).
func TestWindowAddCheck(t *testing.T) {
	var first, later, laterOK int
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 8).Draw(rt, "buckets")
		spec := WindowSpec{Granularity: time.Second, Span: time.Duration(n) * time.Second, Fixed: rapid.Bool().Draw(rt, "fixed")}
		w, err := NewWindow(spec)
		if err != nil {
			rt.Fatal(err)
		}
		delta := rapid.OneOf(
			rapid.Int64Range(-3, 3),
			rapid.SampledFrom([]int64{math.MaxInt64, math.MinInt64, math.MaxInt64 / 2, math.MinInt64 / 2, math.MaxInt64/2 + 1, math.MaxInt64 - 1}),
			rapid.Int64(),
		)
		at := rapid.Int64Range(0, int64(3*n)) // seconds
		for range rapid.IntRange(0, 10).Draw(rt, "prelude") {
			_, _ = w.TryAdd(time.Unix(at.Draw(rt, "pt"), 0), delta.Draw(rt, "pd"))
		}
		var c AddCheck
		w.CheckAdds(&c)
		for k := range rapid.IntRange(1, 8).Draw(rt, "adds") {
			tm, d, drop := time.Unix(at.Draw(rt, "t"), 0), delta.Draw(rt, "d"), rapid.Bool().Draw(rt, "drop")
			pred := c.Add(tm, d, drop)
			var ok bool
			if drop {
				ok = w.Add(tm, d) == nil
			} else {
				rec, err := w.TryAdd(tm, d)
				ok = rec && err == nil
			}
			if pred && !ok {
				rt.Fatalf("add %d (%v, %d, drop %v): predicted to succeed, failed", k, tm.Unix(), d, drop)
			}
			if k == 0 {
				first++
				if pred != ok {
					rt.Fatalf("first add (%v, %d, drop %v): predicted %v, got %v", tm.Unix(), d, drop, pred, ok)
				}
			} else {
				later++
				if pred {
					laterOK++
				}
			}
			if !pred {
				return
			}
		}
	})
	if later == 0 || laterOK == 0 || laterOK == later {
		t.Fatalf("later adds: %d checked, %d predicted to succeed: the cases do not cover both answers", later, laterOK)
	}
}
