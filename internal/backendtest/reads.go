package backendtest

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/rollup"
)

func aggregateCases() []tcase {
	return []tcase{
		{"prefix sums", func(e *env) {
			p := e.id("agg.")
			e.apply(add(p+"c", contract.KindNone, 5))
			e.apply(add(p+"pn", contract.KindPN, -3))
			e.apply(add(p+"sh", contract.KindSharded, 10))
			w := add(p+"w", contract.KindWindow, 4)
			w.Window = testWindow
			e.apply(w)
			e.apply(pfadd(p+"u", "a"))
			e.apply(hadd(p+"h", fd("f", 100)))
			e.apply(add(e.id("other"), contract.KindNone, 1000))
			want := contract.Aggregate{Prefix: p, Value: 16, Count: 4} // windows included
			e.eventually(true, func() error {
				a, err := e.b.Aggregate(e.ctx, p)
				if err != nil || a != want {
					return fmt.Errorf("aggregate %q = %+v, %v; want %+v", p, a, err, want)
				}
				return nil
			})
			if a, err := e.b.Aggregate(e.ctx, e.id("none.")); err != nil || a.Value != 0 || a.Count != 0 {
				e.t.Errorf("aggregate of no counters = %+v, %v", a, err)
			}
		}},
		{"aggregate overflow", func(e *env) {
			p := e.id("of.")
			e.apply(set(p+"a", 1<<62))
			e.apply(set(p+"b", 1<<62))
			_, err := e.b.Aggregate(e.ctx, p)
			e.wantErr("sum past MaxInt64", err, contract.ErrOverflow)
		}},
		{"aggregate overflow figures", func(e *env) {
			// The overflow error of engine.AggregateOverflow says what the
			// sum covers: the additive counters only, each once, exactly.
			p := e.id("off.")
			e.apply(set(p+"a", math.MaxInt64))
			e.apply(set(p+"b", math.MaxInt64))
			e.apply(add(p+"pn", contract.KindPN, 3))
			e.apply(pfadd(p+"u", "x"))
			e.apply(hadd(p+"h", fd("f", 7)))
			e.apply(set(e.id("off"), 1)) // no "." after the prefix: not covered
			want := new(big.Int).Lsh(big.NewInt(1), 64)
			want.Add(want, big.NewInt(1)) // 2*(2^63-1) + 3
			e.eventually(true, func() error {
				_, err := engine.AggregateOverflow(e.ctx, e.b, p)
				var oe *engine.OverflowError
				if !errors.As(err, &oe) || !errors.Is(err, contract.ErrOverflow) {
					return fmt.Errorf("aggregate %q: %v, want an *engine.OverflowError", p, err)
				}
				if oe.Prefix != p || oe.Count != 3 || oe.Sum.Cmp(want) != 0 {
					return fmt.Errorf("overflow figures %q: count %d sum %s, want count 3 sum %s", oe.Prefix, oe.Count, oe.Sum, want)
				}
				return nil
			})
			if a, err := engine.AggregateOverflow(e.ctx, e.b, p+"a"); err != nil || a.Value != math.MaxInt64 || a.Count != 1 {
				e.t.Errorf("aggregate without overflow = %+v, %v", a, err)
			}
		}},
		{"len", func(e *env) {
			e.reset()
			for _, op := range everyKind(e) {
				e.apply(op)
			}
			e.apply(contract.Op{Type: contract.OpDelete, ID: e.id("kc")})
			e.eventually(true, func() error {
				if n, err := e.b.Len(e.ctx); err != nil || n != 5 {
					ids, _, _ := e.b.Scan(e.ctx, 0, "", 1000)
					return fmt.Errorf("len = %d, %v; want 5 (%v)", n, err, ids)
				}
				return nil
			})
		}},
		{"flushall", func(e *env) {
			for _, op := range everyKind(e) {
				e.apply(op)
			}
			if err := e.b.FlushAll(e.ctx, contract.WriteOptions{}); err != nil {
				e.t.Fatal(err)
			}
			for _, op := range everyKind(e) {
				e.wantMissing(op.ID)
			}
			if n, err := e.b.Len(e.ctx); err != nil || n != 0 {
				e.t.Errorf("len after flushall = %d, %v", n, err)
			}
		}},
		{"scan", func(e *env) {
			var want []string
			for i := range 7 {
				id := e.id(fmt.Sprintf("scan.a%d", i))
				want = append(want, id)
				e.apply(add(id, contract.KindNone, 1))
			}
			e.apply(add(e.id("scan.b"), contract.KindNone, 1))
			e.apply(add(e.id("scan.a-deleted"), contract.KindNone, 1))
			e.apply(contract.Op{Type: contract.OpDelete, ID: e.id("scan.a-deleted")})
			var got []string
			var cursor uint64
			for page := 0; ; page++ {
				if page > 10000 {
					e.t.Fatal("scan does not end")
				}
				ids, next, err := e.b.Scan(e.ctx, cursor, e.id("scan.a?"), 3)
				if err != nil {
					e.t.Fatal(err)
				}
				got = append(got, ids...)
				if next == 0 {
					break
				}
				cursor = next
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				e.t.Errorf("scan = %v, want %v", got, want)
			}
		}},
		{"sorted listing", func(e *env) {
			// engine.ListSorted over this backend's Scan: byte order, and
			// paging with after visits every id exactly once.
			p := e.id("ls.")
			var want []string
			for _, name := range []string{"home", "b", "a_10", "a_2", "Z", "a", "\u00e9t\u00e9", "~", "0", "a:1", "a:0", "A", "ab", "a_1"} {
				e.apply(add(p+name, contract.KindNone, 1))
				want = append(want, p+name)
			}
			for i := range 12 {
				id := fmt.Sprintf("%sn%03d", p, 11-i)
				e.apply(set(id, int64(i)))
				want = append(want, id)
			}
			e.apply(add(p+"gone", contract.KindNone, 1))
			e.apply(contract.Op{Type: contract.OpDelete, ID: p + "gone"})
			e.apply(add(e.id("ls"), contract.KindNone, 1)) // outside the pattern
			slices.Sort(want)
			pattern := p + "*"
			for _, limit := range []int{1, 4, len(want), len(want) + 5} {
				var got []string
				after := ""
				for page := 0; ; page++ {
					if page > len(want)+1 {
						e.t.Fatalf("limit %d: sorted listing does not end", limit)
					}
					ids, more, err := engine.ListSorted(e.ctx, e.b, pattern, nil, after, limit)
					if err != nil {
						e.t.Fatal(err)
					}
					if len(ids) > limit || (more && len(ids) != limit) {
						e.t.Fatalf("limit %d: page of %d ids, more %v", limit, len(ids), more)
					}
					got = append(got, ids...)
					if !more {
						break
					}
					after = ids[len(ids)-1]
				}
				if !slices.Equal(got, want) {
					e.t.Errorf("limit %d: pages = %q, want %q (byte order, each id once)", limit, got, want)
				}
			}
			ids, more, err := engine.ListSorted(e.ctx, e.b, pattern, func(id string) bool { return strings.HasPrefix(id, p+"a") }, p+"a_1", 100)
			if err != nil || more || !slices.Equal(ids, []string{p + "a_10", p + "a_2", p + "ab"}) {
				e.t.Errorf("filtered page after %q = %q, %v, %v", p+"a_1", ids, more, err)
			}
			if _, _, err := engine.ListSorted(e.ctx, e.b, pattern, nil, "", 0); !errors.Is(err, contract.ErrInvalidArgument) {
				e.t.Errorf("limit 0: %v, want ErrInvalidArgument", err)
			}
		}},
	}
}

// testSpec keeps every granularity and both sketch units.
var testSpec = rollup.Spec{
	Minute: 48 * time.Hour, Hour: 30 * 24 * time.Hour, Day: 400 * 24 * time.Hour, Month: 3660 * 24 * time.Hour,
	UniqueHours: 48 * time.Hour, UniqueDays: 30 * 24 * time.Hour, Precision: 14,
}

// setSpec sets testSpec for the namespace e.id(name) and deletes it when
// the test ends; ids of the namespace are e.id(name)+":...".
func setSpec(e *env, name string) string {
	e.t.Helper()
	specFor(e, name)
	key := e.id(name)
	if err := e.b.SetRollup(e.ctx, key, testSpec); err != nil {
		e.t.Fatal(err)
	}
	return key
}

func rollupCases() []tcase {
	return []tcase{
		{"specs", func(e *env) {
			key := e.id("ns")
			if _, ok, err := e.b.Rollup(e.ctx, key); err != nil || ok {
				e.t.Fatalf("rollup of an unset key = %v, %v", ok, err)
			}
			setSpec(e, "ns")
			if s, ok, err := e.b.Rollup(e.ctx, key); err != nil || !ok || s != testSpec {
				e.t.Errorf("rollup = %+v %v, %v; want %+v", s, ok, err, testSpec)
			}
			all, err := e.b.Rollups(e.ctx)
			if err != nil || all[key] != testSpec {
				e.t.Errorf("rollups[%q] = %+v, %v", key, all[key], err)
			}
			if ok, err := e.b.DeleteRollup(e.ctx, key); err != nil || !ok {
				e.t.Errorf("delete rollup = %v, %v; want true", ok, err)
			}
			if ok, err := e.b.DeleteRollup(e.ctx, key); err != nil || ok {
				e.t.Errorf("second delete rollup = %v, %v; want false", ok, err)
			}
			if _, ok, err := e.b.Rollup(e.ctx, key); err != nil || ok {
				e.t.Errorf("rollup after delete = %v, %v", ok, err)
			}
		}},
		{"series", func(e *env) {
			id := setSpec(e, "ser") + ":a"
			t0 := e.b.Now()
			e.apply(add(id, contract.KindNone, 3))
			e.s.Clock.Advance(time.Minute)
			e.apply(add(id, contract.KindNone, 4))
			e.apply(add(id, contract.KindNone, -1))
			m0 := t0.Truncate(time.Minute)
			s, err := e.b.Series(e.ctx, id, rollup.Minute, m0.Add(-time.Minute), m0.Add(3*time.Minute))
			if err != nil {
				e.t.Fatal(err)
			}
			if !slices.Equal(s.Values, []int64{0, 3, 3, 0}) || s.Total != 6 || !s.From.Equal(m0.Add(-time.Minute)) || s.Granularity != rollup.Minute {
				e.t.Errorf("minute series = from %v %v total %d, want from %v [0 3 3 0] total 6", s.From, s.Values, s.Total, m0.Add(-time.Minute))
			}
			h0 := t0.Truncate(time.Hour)
			s, err = e.b.Series(e.ctx, id, rollup.Hour, h0, h0.Add(2*time.Hour)) // the minute may have crossed an hour
			if err != nil || len(s.Values) != 2 || s.Total != 6 || s.Values[0] < 3 {
				e.t.Errorf("hour series = %+v, %v; want two buckets of 6 in all", s, err)
			}
			missing := e.id("ser") + ":missing"
			s, err = e.b.Series(e.ctx, missing, rollup.Minute, m0, m0.Add(time.Minute))
			if err != nil || s.Total != 0 || len(s.Values) != 1 {
				e.t.Errorf("series of a missing counter = %+v, %v; want one zero bucket", s, err)
			}
			_, err = e.b.Series(e.ctx, id, rollup.Minute, m0, m0.Add(-time.Hour))
			e.wantErr("series with to before from", err, contract.ErrInvalidArgument)
		}},
		{"uniques", func(e *env) {
			id := setSpec(e, "uq") + ":u"
			e.apply(pfadd(id, "a", "b", "c"))
			est, err := e.b.Uniques(e.ctx, id, rollup.Day, 1)
			if err != nil || est.Value != 3 || est.N != 1 || est.Unit != rollup.Day {
				e.t.Errorf("uniques today = %+v, %v; want 3", est, err)
			}
			e.s.Clock.Advance(24 * time.Hour)
			e.apply(pfadd(id, "c", "d"))
			for _, c := range []struct {
				unit rollup.Granularity
				n    int
				want uint64
			}{{rollup.Day, 1, 2}, {rollup.Day, 2, 4}, {rollup.Day, 30, 4}, {rollup.Hour, 1, 2}, {rollup.Hour, 48, 4}} {
				est, err := e.b.Uniques(e.ctx, id, c.unit, c.n)
				if err != nil || est.Value != c.want || est.N != c.n {
					e.t.Errorf("uniques of the last %d %ss = %+v, %v; want %d", c.n, c.unit, est, err, c.want)
				}
			}
			_, err = e.b.Uniques(e.ctx, id, rollup.Day, 31)
			e.wantErr("uniques past the retention", err, contract.ErrInvalidArgument)
			est, err = e.b.Uniques(e.ctx, e.id("uq")+":missing", rollup.Day, 3)
			if err != nil || est.Value != 0 {
				e.t.Errorf("uniques of a missing hll = %+v, %v; want 0", est, err)
			}
		}},
		{"uniques of an hll without sketches says how to keep them", func(e *env) {
			ns := e.id("nosk")
			id := ns + ":u"
			e.apply(pfadd(id, "a", "b"))
			for _, c := range []struct {
				unit rollup.Granularity
				hint string
			}{{rollup.Day, "rollup set " + ns + " --unique-days"}, {rollup.Hour, "rollup set " + ns + " --unique-hours"}} {
				_, err := e.b.Uniques(e.ctx, id, c.unit, 1)
				e.wantErr("uniques of an hll without sketches", err, contract.ErrNotFound)
				if err != nil && (!strings.Contains(err.Error(), "is an hll without per-"+c.unit.String()+" sketches") || !strings.Contains(err.Error(), c.hint)) {
					e.t.Errorf("uniques by %s of an hll without sketches: %q; want it to say so and suggest %q", c.unit, err, c.hint)
				}
			}
		}},
	}
}
