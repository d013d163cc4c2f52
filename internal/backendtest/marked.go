package backendtest

import (
	"slices"
	"time"

	"github.com/counterd/counterd/internal/contract"
)

// markedCases are the contract of contract.CounterMarker (dedupe marks
// that live with each counter), on backends that implement it.
func markedCases() []tcase {
	marker := func(e *env) contract.CounterMarker {
		m, ok := e.b.(contract.CounterMarker)
		if !ok {
			e.t.Skip("the backend does not implement contract.CounterMarker")
		}
		return m
	}
	mop := func(id string, d int64, marks ...string) contract.MarkedOp {
		return contract.MarkedOp{Op: add(id, contract.KindCounter, d), Marks: marks}
	}
	sorted := func(s []string) []string {
		s = slices.Clone(s)
		slices.Sort(s)
		return s
	}
	return []tcase{
		{"a marked op is applied once per counter; a retry with the same marks is not applied again; seen lists existing marks", func(e *env) {
			m := marker(e)
			a, b, c := e.id("a"), e.id("b"), e.id("c")
			ops := []contract.MarkedOp{mop(a, 2, "e1", "e2"), mop(b, 3, "e1")}
			seen, err := m.ApplyCounterMarked(e.ctx, ops, time.Hour, contract.WriteOptions{})
			if err != nil || len(seen) != 2 || len(seen[0]) != 0 || len(seen[1]) != 0 {
				e.t.Fatalf("first apply: seen %v, %v; want nothing seen", seen, err)
			}
			e.wantValue(a, contract.KindCounter, 2)
			e.wantValue(b, contract.KindCounter, 3)
			// The same ops again (a redelivery): nothing applied, every
			// mark reported.
			seen, err = m.ApplyCounterMarked(e.ctx, ops, time.Hour, contract.WriteOptions{})
			if err != nil || len(seen) != 2 || !slices.Equal(sorted(seen[0]), []string{"e1", "e2"}) || !slices.Equal(seen[1], []string{"e1"}) {
				e.t.Fatalf("retry: seen %v, %v; want [[e1 e2] [e1]]", seen, err)
			}
			e.wantValue(a, contract.KindCounter, 2)
			e.wantValue(b, contract.KindCounter, 3)
			// One old and one new mark: not applied; seen lists the old.
			seen, err = m.ApplyCounterMarked(e.ctx, []contract.MarkedOp{mop(a, 5, "e2", "e3")}, time.Hour, contract.WriteOptions{})
			if err != nil || len(seen) != 1 || !slices.Equal(seen[0], []string{"e2"}) {
				e.t.Fatalf("partly seen: %v, %v; want [[e2]]", seen, err)
			}
			e.wantValue(a, contract.KindCounter, 2)
			// The rest again, as a consumer does: applied.
			seen, err = m.ApplyCounterMarked(e.ctx, []contract.MarkedOp{mop(a, 4, "e3")}, time.Hour, contract.WriteOptions{})
			if err != nil || len(seen[0]) != 0 {
				e.t.Fatalf("the rest: seen %v, %v", seen, err)
			}
			e.wantValue(a, contract.KindCounter, 6)
			// Marks are per counter: e1 on another counter is new there.
			seen, err = m.ApplyCounterMarked(e.ctx, []contract.MarkedOp{mop(c, 1, "e1")}, time.Hour, contract.WriteOptions{})
			if err != nil || len(seen[0]) != 0 {
				e.t.Fatalf("another counter: seen %v, %v", seen, err)
			}
			e.wantValue(c, contract.KindCounter, 1)
		}},
		{"marks expire after their ttl", func(e *env) {
			m := marker(e)
			if !e.s.ExpiryFollowsClock {
				e.t.Skip("expiry follows real time on this backend")
			}
			a := e.id("a")
			ops := []contract.MarkedOp{mop(a, 1, "x")}
			if _, err := m.ApplyCounterMarked(e.ctx, ops, time.Minute, contract.WriteOptions{}); err != nil {
				e.t.Fatal(err)
			}
			e.s.Clock.Advance(2 * time.Minute)
			seen, err := m.ApplyCounterMarked(e.ctx, ops, time.Minute, contract.WriteOptions{})
			if err != nil || len(seen[0]) != 0 {
				e.t.Fatalf("after the ttl: seen %v, %v; want applied again", seen, err)
			}
			e.wantValue(a, contract.KindCounter, 2)
		}},
		{"bad marked input is refused and changes nothing", func(e *env) {
			m := marker(e)
			a := e.id("a")
			e.apply(add(a, contract.KindCounter, 1))
			before := e.snap(a)
			_, err := m.ApplyCounterMarked(e.ctx, []contract.MarkedOp{mop(a, 1, "x")}, 0, contract.WriteOptions{})
			e.wantErr("ttl 0", err, contract.ErrInvalidArgument)
			_, err = m.ApplyCounterMarked(e.ctx, []contract.MarkedOp{mop(a, 1, "")}, time.Hour, contract.WriteOptions{})
			e.wantErr("empty mark", err, contract.ErrInvalidArgument)
			_, err = m.ApplyCounterMarked(e.ctx, []contract.MarkedOp{{Op: contract.Op{Type: contract.OpAdd, ID: "", Delta: 1}, Marks: []string{"x"}}}, time.Hour, contract.WriteOptions{})
			e.wantErr("empty id", err, contract.ErrInvalidID)
			e.unchanged(a, before)
		}},
	}
}
