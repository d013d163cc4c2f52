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

// TestWindowPeek: Peek at any time (negative, far past or future) stays
// in the ring, changes nothing (the encoding, the delta's slots, the sum)
// and returns the bucket number of the slot an add at that time would
// write (the head for a window without a ring).
func TestWindowPeek(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 8).Draw(rt, "buckets")
		w, err := NewWindow(WindowSpec{Granularity: time.Second, Span: time.Duration(n) * time.Second, Fixed: rapid.Bool().Draw(rt, "fixed")})
		if err != nil {
			rt.Fatal(err)
		}
		for range rapid.IntRange(0, 10).Draw(rt, "adds") {
			_, _ = w.TryAdd(time.Unix(rapid.Int64Range(0, int64(3*n)).Draw(rt, "at"), 0), 1)
		}
		before, _ := w.MarshalBinary()
		since, used, head := w.since, w.used, w.head
		at := rapid.OneOf(rapid.Int64(), rapid.Int64Range(-int64(3*n)*1e9, int64(3*n)*1e9)).Draw(rt, "peek")
		got := w.Peek(at)
		want := head
		if w.ring != nil {
			want = w.ring[w.slotIndex(at/w.g)].num
		}
		if got != want {
			rt.Fatalf("Peek(%d) = %d, want %d", at, got, want)
		}
		after, _ := w.MarshalBinary()
		if string(before) != string(after) || w.since != since || w.used != used || w.head != head {
			rt.Fatalf("Peek changed the window")
		}
	})
}
