package ratelimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// side is one node's state of a (key, limit): st, or g for SlidingLog.
type side struct {
	st   state
	g    [][2]int64
	last int64 // time of the last check
}

func drawLimit(rt *rapid.T) Limit {
	alg := Algorithm(rapid.IntRange(int(FixedWindow), int(LeakyBucket)).Draw(rt, "alg"))
	lim := Limit{Algorithm: alg, Limit: rapid.Int64Range(1, 20).Draw(rt, "limit"),
		Period: time.Duration(rapid.Int64Range(1, 60_000).Draw(rt, "period_ms")) * time.Millisecond}
	if alg == TokenBucket || alg == LeakyBucket {
		lim.Burst = rapid.Int64Range(0, 30).Draw(rt, "burst")
	}
	return lim
}

// drawSide runs a random history of checks from start, as a Limiter
// would, and returns the state it leaves.
func drawSide(rt *rapid.T, sp *spec, start int64, label string) side {
	s := side{st: freshState, last: start}
	var g hitLog
	for i := range rapid.IntRange(0, 25).Draw(rt, label+"_checks") {
		s.last += rapid.Int64Range(0, sp.period/2+1).Draw(rt, fmt.Sprintf("%s_dt%d", label, i))
		cost := rapid.Int64Range(0, sp.capacity()).Draw(rt, fmt.Sprintf("%s_cost%d", label, i))
		if sp.alg == SlidingLog {
			if st := sp.decideLog(&g, s.last, cost); st.Allowed && cost > 0 {
				g.push(s.last, cost)
			}
			continue
		}
		if st, next := sp.decide(&s.st, s.last, cost); st.Allowed {
			s.st = next
		}
	}
	s.g = g.records()
	return s
}

func merge(sp *spec, a, b side) side {
	if sp.alg == SlidingLog {
		return side{st: freshState, g: mergeLogs(a.g, b.g), last: max(a.last, b.last)}
	}
	return side{st: mergeState(sp, a.st, b.st), last: max(a.last, b.last)}
}

// decideSide decides a hit on a copy of s.
func decideSide(sp *spec, s side, now, cost int64) Status {
	if sp.alg == SlidingLog {
		var g hitLog
		g.setRecords(slices.Clone(s.g))
		return sp.decideLog(&g, now, cost)
	}
	st, _ := sp.decide(&s.st, now, cost)
	return st
}

func sameSide(a, b side) bool { return a.st == b.st && slices.Equal(a.g, b.g) }

// TestMergeIsAStricterJoin: the handoff merge is idempotent, commutative
// and associative, and at any time after both sides' last check it admits
// a hit only if each side alone would, with no more Remaining.
func TestMergeIsAStricterJoin(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		lim := drawLimit(rt)
		sp, err := lim.spec()
		if err != nil {
			rt.Skip(err)
		}
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
		start := func(label string) int64 {
			return t0 + rapid.Int64Range(0, 3*sp.period).Draw(rt, label)
		}
		a, b, c := drawSide(rt, &sp, start("a0"), "a"), drawSide(rt, &sp, start("b0"), "b"), drawSide(rt, &sp, start("c0"), "c")
		if m := merge(&sp, a, a); !sameSide(m, a) {
			rt.Fatalf("not idempotent: %v merged with itself is %v", a, m)
		}
		ab, ba := merge(&sp, a, b), merge(&sp, b, a)
		if !sameSide(ab, ba) {
			rt.Fatalf("not commutative: %v vs %v", ab, ba)
		}
		if l, r := merge(&sp, ab, c), merge(&sp, a, merge(&sp, b, c)); !sameSide(l, r) {
			rt.Fatalf("not associative: %v vs %v", l, r)
		}
		for i := range 5 {
			now := ab.last + rapid.Int64Range(0, 2*sp.period).Draw(rt, fmt.Sprintf("now%d", i))
			cost := rapid.Int64Range(0, sp.capacity()).Draw(rt, fmt.Sprintf("cost%d", i))
			m, sa, sb := decideSide(&sp, ab, now, cost), decideSide(&sp, a, now, cost), decideSide(&sp, b, now, cost)
			if m.Allowed && (!sa.Allowed || !sb.Allowed) {
				rt.Fatalf("merged state admits cost %d at +%dns, a side denies: merged %+v, a %+v, b %+v", cost, now-ab.last, m, sa, sb)
			}
			// Remaining after a query (cost 0): the room left.
			m, sa, sb = decideSide(&sp, ab, now, 0), decideSide(&sp, a, now, 0), decideSide(&sp, b, now, 0)
			if m.Remaining > min(sa.Remaining, sb.Remaining) {
				rt.Fatalf("merged Remaining %d above a side's (%d, %d)", m.Remaining, sa.Remaining, sb.Remaining)
			}
		}
	})
}

func newKeepLimiter(t testing.TB, clock func() time.Time) *Limiter {
	t.Helper()
	l, err := New(Config{Clock: clock, EvictInterval: -1, KeepKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestHandoffCarriesConsumption: 6 of 10 used on one node, its entries
// exported to another node that imports them (twice: idempotent), which
// then admits exactly 4 more, for every algorithm; keys match rejects stay.
func TestHandoffCarriesConsumption(t *testing.T) {
	for alg := FixedWindow; alg <= LeakyBucket; alg++ {
		t.Run(alg.String(), func(t *testing.T) {
			clk := newFakeClock()
			a, b := newKeepLimiter(t, clk.Now), newKeepLimiter(t, clk.Now)
			lim := Limit{Name: "api", Algorithm: alg, Limit: 10, Period: time.Hour}
			for i := range 6 {
				for _, k := range []string{"moves:1", "stays:1"} {
					if s := mustCheck(t, a, k, lim, 1); !s.Allowed {
						t.Fatalf("check %d of %s denied", i, k)
					}
				}
			}
			// A multi-limit check keeps its entries too.
			if _, err := a.CheckMulti([]Hit{{Key: "moves:2", Limit: lim, Cost: 3}, {Key: "moves:2", Limit: Limit{Algorithm: alg, Limit: 5, Period: time.Hour}, Cost: 5}}, nil); err != nil {
				t.Fatal(err)
			}
			ents := a.ExportEntries(func(k string) bool { return strings.HasPrefix(k, "moves:") })
			if len(ents) != 3 {
				t.Fatalf("exported %d entries, want 3: %+v", len(ents), ents)
			}
			clk.Advance(time.Millisecond)
			for range 2 {
				wire, err := json.Marshal(ents)
				if err != nil {
					t.Fatal(err)
				}
				var got []Entry
				if err := json.Unmarshal(wire, &got); err != nil {
					t.Fatal(err)
				}
				if n, err := b.ImportEntries(got, false); err != nil || n != 3 {
					t.Fatalf("ImportEntries = %d, %v; want 3", n, err)
				}
			}
			admitted := 0
			for range 10 {
				if mustCheck(t, b, "moves:1", lim, 1).Allowed {
					admitted++
				}
			}
			if admitted != 4 {
				t.Errorf("after the handoff %d admitted, want 4", admitted)
			}
			if s := mustCheck(t, b, "moves:2", Limit{Algorithm: alg, Limit: 5, Period: time.Hour}, 1); s.Allowed {
				t.Errorf("second limit of the multi-limit check was not carried: %+v", s)
			}
			if s := mustCheck(t, b, "stays:1", lim, 0); s.Remaining != 10 {
				t.Errorf("an unselected key moved: remaining %d", s.Remaining)
			}
		})
	}
}

// TestExportNeedsKeepKeys: without KeepKeys nothing is remembered.
func TestExportNeedsKeepKeys(t *testing.T) {
	l := newLimiter(t, newFakeClock().Now)
	mustCheck(t, l, "k", Limit{Algorithm: FixedWindow, Limit: 3, Period: time.Minute}, 1)
	if ents := l.ExportEntries(nil); len(ents) != 0 {
		t.Fatalf("exported %d entries without KeepKeys", len(ents))
	}
}

// TestImportRejectsBadEntries: an invalid entry fails the whole import
// with ErrInvalidEntry and changes nothing.
func TestImportRejectsBadEntries(t *testing.T) {
	clk := newFakeClock()
	now := clk.Now().UnixNano()
	fw := Limit{Algorithm: FixedWindow, Limit: 10, Period: time.Minute}
	w := now / int64(time.Minute)
	good := Entry{Key: "good", Limit: fw, State: [3]int64{w, 5, 0}}
	for _, tc := range []struct {
		name string
		e    Entry
	}{
		{"empty key", Entry{Limit: fw, State: [3]int64{w, 1, 0}}},
		{"invalid limit", Entry{Key: "k", Limit: Limit{Algorithm: FixedWindow, Limit: 0, Period: time.Minute}}},
		{"count above limit", Entry{Key: "k", Limit: fw, State: [3]int64{w, 11, 0}}},
		{"negative count", Entry{Key: "k", Limit: fw, State: [3]int64{w, -1, 0}}},
		{"fixed with prev", Entry{Key: "k", Limit: fw, State: [3]int64{w, 1, 1}}},
		{"window overflows", Entry{Key: "k", Limit: fw, State: [3]int64{1 << 62, 1, 0}}},
		{"counts without window", Entry{Key: "k", Limit: fw, State: [3]int64{freshWindow, 1, 0}}},
		{"bad name", Entry{Key: "k", Limit: Limit{Name: "a b", Algorithm: FixedWindow, Limit: 1, Period: time.Minute}}},
		{"log on a window", Entry{Key: "k", Limit: fw, State: [3]int64{w, 1, 0}, Log: [][2]int64{{now, 1}}}},
		{"tat with counts", Entry{Key: "k", Limit: Limit{Algorithm: TokenBucket, Limit: 1, Period: time.Second}, State: [3]int64{now, 1, 0}}},
		{"log out of order", Entry{Key: "k", Limit: Limit{Algorithm: SlidingLog, Limit: 5, Period: time.Minute}, Log: [][2]int64{{now, 1}, {now - 1, 1}}}},
		{"log units above limit", Entry{Key: "k", Limit: Limit{Algorithm: SlidingLog, Limit: 5, Period: time.Minute}, Log: [][2]int64{{now, 6}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newKeepLimiter(t, clk.Now)
			n, err := l.ImportEntries([]Entry{good, tc.e}, true)
			if !errors.Is(err, ErrInvalidEntry) || n != 0 {
				t.Fatalf("ImportEntries = %d, %v; want ErrInvalidEntry", n, err)
			}
			if l.Len() != 0 {
				t.Fatalf("%d entries after a rejected import", l.Len())
			}
		})
	}
}

// TestImportClampsFutureTAT: a TAT from a clock far ahead counts as an
// empty bucket, not as a key blocked for that long.
func TestImportClampsFutureTAT(t *testing.T) {
	clk := newFakeClock()
	l := newKeepLimiter(t, clk.Now)
	lim := Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second}
	future := clk.Now().Add(time.Hour).UnixNano()
	if _, err := l.ImportEntries([]Entry{{Key: "k", Limit: lim, State: [3]int64{future, 0, 0}}}, false); err != nil {
		t.Fatal(err)
	}
	s := mustCheck(t, l, "k", lim, 1)
	if s.Allowed || s.RetryAfter > 100*time.Millisecond {
		t.Fatalf("after importing a far TAT: %+v, want denied for at most one interval", s)
	}
}

// FuzzImportEntries: any JSON either fails with ErrInvalidEntry (or is not
// entries) or imports states that decide sanely.
func FuzzImportEntries(f *testing.F) {
	clk := newFakeClock()
	now := clk.Now().UnixNano()
	for _, s := range []string{
		fmt.Sprintf(`[{"key":"k","limit":{"Algorithm":"fixed_window","Limit":10,"Period":60000000000},"state":[%d,5,0]}]`, now/int64(time.Minute)),
		fmt.Sprintf(`[{"key":"k","limit":{"Algorithm":"token_bucket","Limit":10,"Period":1000000000,"Burst":3},"state":[%d,0,0]}]`, now+1e9),
		fmt.Sprintf(`[{"key":"k","limit":{"Algorithm":"sliding_log","Limit":3,"Period":1000000000},"state":[0,0,0],"log":[[%d,1],[%d,2]]}]`, now-10, now),
		`[{"key":"k","limit":{"Algorithm":"sliding_window","Limit":1,"Period":1000000},"state":[-1,0,0]}]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var ents []Entry
		if json.Unmarshal([]byte(s), &ents) != nil {
			return
		}
		l := newKeepLimiter(t, clk.Now)
		if _, err := l.ImportEntries(ents, false); err != nil {
			if !errors.Is(err, ErrInvalidEntry) {
				t.Fatalf("error %v does not wrap ErrInvalidEntry", err)
			}
			if l.Len() != 0 {
				t.Fatal("a rejected import changed state")
			}
			return
		}
		for _, e := range ents {
			st, err := l.Check(e.Key, e.Limit, 0)
			if err != nil || st.Remaining < 0 || st.Remaining > e.Limit.Capacity() || st.RetryAfter < 0 {
				t.Fatalf("after import, %q %v: %+v %v", e.Key, e.Limit, st, err)
			}
		}
	})
}

// TestExportChanged: only entries charged (or imported with mark) since
// the last ExportChanged come back; a denied check is no change; an
// expired entry is still evicted while marked.
func TestExportChanged(t *testing.T) {
	clk := newFakeClock()
	l := newKeepLimiter(t, clk.Now)
	lim := Limit{Algorithm: FixedWindow, Limit: 1, Period: time.Second}
	keys := func(ents []Entry) []string {
		var ks []string
		for _, e := range ents {
			ks = append(ks, e.Key)
		}
		slices.Sort(ks)
		return ks
	}
	mustCheck(t, l, "a", lim, 1)
	mustCheck(t, l, "b", lim, 1)
	if got := keys(l.ExportChanged(nil)); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("first ExportChanged: %v", got)
	}
	if got := l.ExportChanged(nil); len(got) != 0 {
		t.Fatalf("second ExportChanged: %v", keys(got))
	}
	if s := mustCheck(t, l, "a", lim, 1); s.Allowed {
		t.Fatal("second hit allowed")
	}
	if got := l.ExportChanged(nil); len(got) != 0 {
		t.Fatalf("a denied check was exported: %v", keys(got))
	}
	mustCheck(t, l, "c", lim, 1)
	if got := keys(l.ExportChanged(func(k string) bool { return k != "c" })); len(got) != 0 {
		t.Fatalf("match ignored: %v", got)
	}
	if got := l.ExportChanged(nil); len(got) != 0 {
		t.Fatalf("the mark of an unmatched entry stayed: %v", keys(got))
	}
	imp := []Entry{{Key: "e", Limit: lim, State: [3]int64{clk.Now().UnixNano() / int64(time.Second), 1, 0}}}
	if _, err := l.ImportEntries(imp, false); err != nil {
		t.Fatal(err)
	}
	if got := l.ExportChanged(nil); len(got) != 0 {
		t.Fatalf("an unmarked import was exported: %v", keys(got))
	}
	imp[0].Key = "f"
	if _, err := l.ImportEntries(imp, true); err != nil {
		t.Fatal(err)
	}
	if got := keys(l.ExportChanged(nil)); !slices.Equal(got, []string{"f"}) {
		t.Fatalf("a marked import: ExportChanged = %v, want [f]", got)
	}
	mustCheck(t, l, "d", lim, 1)
	clk.Advance(2 * time.Second)
	if n := l.Evict(); n != 6 {
		t.Fatalf("Evict freed %d of 6 expired entries (one still marked)", n)
	}
}
