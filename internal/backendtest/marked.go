package backendtest

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/counterd/counterd/internal/contract"
)

// Dedupe marks that live with each counter (contract.CounterMarker): the
// pipeline's consumer applies events through them on every backend, so an
// event changes each counter it touches once, wherever the counter lives.
// A backend without CounterMarker skips the cases with a log line.

// counterMarker returns b's CounterMarker: the backend's own, or a
// round-robin one when every backend behind a RoundRobin has one.
func counterMarker(b contract.Backend) (contract.CounterMarker, bool) {
	if r, ok := b.(*roundRobin); ok {
		var ms []contract.CounterMarker
		for _, x := range r.bs {
			m, ok := x.(contract.CounterMarker)
			if !ok {
				return nil, false
			}
			ms = append(ms, m)
		}
		return &roundRobinMarker{r: r, ms: ms}, true
	}
	m, ok := b.(contract.CounterMarker)
	return m, ok
}

type roundRobinMarker struct {
	r  *roundRobin
	ms []contract.CounterMarker
}

func (m *roundRobinMarker) ApplyCounterMarked(ctx context.Context, ops []contract.MarkedOp, ttl time.Duration, wo contract.WriteOptions) ([][]string, error) {
	return m.ms[(m.r.n.Add(1)-1)%uint64(len(m.ms))].ApplyCounterMarked(ctx, ops, ttl, wo)
}

// marker returns the backend's CounterMarker or skips the test.
func (e *env) marker(b contract.Backend) contract.CounterMarker {
	e.t.Helper()
	m, ok := counterMarker(b)
	if !ok {
		e.t.Skipf("%s backend does not implement contract.CounterMarker (dedupe marks beside each counter): the pipeline cannot consume on it", e.caps.Mode)
	}
	return m
}

// applyMarked calls ApplyCounterMarked, retrying while the backend is
// unavailable (a restarted hot tier), which the contract allows.
func applyMarked(e *env, m contract.CounterMarker, ops []contract.MarkedOp, ttl time.Duration) [][]string {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		seen, err := m.ApplyCounterMarked(e.ctx, ops, ttl, contract.WriteOptions{Durability: contract.Sync})
		if err == nil {
			if len(seen) != len(ops) {
				e.t.Fatalf("ApplyCounterMarked: %d seen lists for %d ops", len(seen), len(ops))
			}
			return seen
		}
		if !errors.Is(err, contract.ErrUnavailable) || time.Now().After(deadline) {
			e.t.Fatalf("ApplyCounterMarked: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func marked(op contract.Op, marks ...string) contract.MarkedOp {
	return contract.MarkedOp{Op: op, Marks: marks}
}

// wantSeen checks the seen lists (order within a list does not matter).
func (e *env) wantSeen(what string, seen [][]string, want ...[]string) {
	e.t.Helper()
	for i := range want {
		got := slices.Clone(seen[i])
		slices.Sort(got)
		if !slices.Equal(got, want[i]) {
			e.t.Errorf("%s: seen[%d] = %q, want %q", what, i, seen[i], want[i])
		}
	}
}

func markCases() []tcase {
	return []tcase{
		{"a marked op is applied once per counter; a retry with the same marks is not applied again; seen lists existing marks", func(e *env) {
			m := e.marker(e.b)
			x, y, h := e.id("x"), e.id("y"), e.id("h")
			ops := []contract.MarkedOp{
				marked(add(x, contract.KindNone, 3), "e1", "e2"),
				marked(add(y, contract.KindNone, 5), "e1"), // the same event, another counter: its own mark
				marked(hadd(h, fd("a", 2)), "e2"),
			}
			seen := applyMarked(e, m, ops, time.Hour)
			e.wantSeen("first call", seen, nil, nil, nil)
			e.wantValue(x, contract.KindCounter, 3)
			e.wantValue(y, contract.KindCounter, 5)
			// A retry of the same call applies nothing and lists every mark.
			seen = applyMarked(e, m, ops, time.Hour)
			e.wantSeen("retry", seen, []string{"e1", "e2"}, []string{"e1"}, []string{"e2"})
			e.wantValue(x, contract.KindCounter, 3)
			e.wantValue(y, contract.KindCounter, 5)
			if v, ok, err := e.b.HGet(e.ctx, h, "a"); err != nil || !ok || v != 2 {
				e.t.Errorf("hget %q a = %d, %v, %v; want 2", h, v, ok, err)
			}
			// One mark existing is enough to refuse the op: the caller
			// drops that event's part and applies the rest (e3) alone.
			seen = applyMarked(e, m, []contract.MarkedOp{marked(add(x, contract.KindNone, 7), "e2", "e3")}, time.Hour)
			e.wantSeen("mixed", seen, []string{"e2"})
			e.wantValue(x, contract.KindCounter, 3)
			seen = applyMarked(e, m, []contract.MarkedOp{marked(add(x, contract.KindNone, 4), "e3")}, time.Hour)
			e.wantSeen("the rest", seen, nil)
			e.wantValue(x, contract.KindCounter, 7)
			// Marks are per counter: e1 on another counter applies.
			z := e.id("z")
			seen = applyMarked(e, m, []contract.MarkedOp{marked(add(z, contract.KindNone, 1), "e1")}, time.Hour)
			e.wantSeen("other counter", seen, nil)
			e.wantValue(z, contract.KindCounter, 1)
			// An op without marks (a PFADD, idempotent) applies every time.
			u := e.id("u")
			for range 2 {
				seen = applyMarked(e, m, []contract.MarkedOp{marked(pfadd(u, "a", "b"))}, time.Hour)
				e.wantSeen("unmarked", seen, nil)
			}
			if n, _, err := e.b.PFCount(e.ctx, u); err != nil || n != 2 {
				e.t.Errorf("pfcount %q = %d, %v; want 2", u, n, err)
			}
		}},
		{"marks expire after their ttl", func(e *env) {
			m := e.marker(e.b)
			if !e.s.ExpiryFollowsClock {
				e.t.Skip("expiry follows real time on this backend")
			}
			x := e.id("x")
			ops := []contract.MarkedOp{marked(add(x, contract.KindNone, 1), "x1")}
			e.wantSeen("first call", applyMarked(e, m, ops, time.Minute), nil)
			e.s.Clock.Advance(2 * time.Minute)
			e.wantSeen("after the ttl", applyMarked(e, m, ops, time.Minute), nil)
			e.wantValue(x, contract.KindCounter, 2)
		}},
		{"bad marked input is refused and changes nothing", func(e *env) {
			m := e.marker(e.b)
			x := e.id("x")
			e.apply(add(x, contract.KindCounter, 1))
			before := e.snap(x)
			_, err := m.ApplyCounterMarked(e.ctx, []contract.MarkedOp{marked(add(x, contract.KindNone, 1), "x1")}, 0, contract.WriteOptions{})
			e.wantErr("ttl 0", err, contract.ErrInvalidArgument)
			_, err = m.ApplyCounterMarked(e.ctx, []contract.MarkedOp{marked(add("", contract.KindNone, 1), "x1")}, time.Hour, contract.WriteOptions{})
			e.wantErr("empty id", err, contract.ErrInvalidID)
			e.unchanged(x, before)
		}},
		{"a marked op that fails names its op and applies nothing of it", func(e *env) {
			m := e.marker(e.b)
			h := e.id("h")
			e.apply(hadd(h, fd("a", 1)))
			before := e.snap(h)
			_, err := m.ApplyCounterMarked(e.ctx, []contract.MarkedOp{marked(add(h, contract.KindNone, 1), "e1")}, time.Hour, contract.WriteOptions{})
			e.wantErr("add to a hash", err, contract.ErrWrongKind)
			e.unchanged(h, before)
		}},
	}
}

// lostMarkCase: a marked retry after the hot tier lost its data (tiered:
// the marks are persisted to PostgreSQL with the effect and looked up
// there) is not applied twice.
func lostMarkCase() tcase {
	return tcase{"a marked retry after the hot tier lost its data is not applied twice", func(e *env) {
		if e.s.LoseHotTier == nil {
			e.t.Skip("Setup.LoseHotTier unset: no way to make this backend lose its hot tier")
		}
		m := e.marker(e.b)
		x := e.id("mx")
		ops := []contract.MarkedOp{marked(add(x, contract.KindNone, 3), "e1", "e2")}
		e.wantSeen("first call", applyMarked(e, m, ops, time.Hour), nil)
		b := e.s.LoseHotTier(e.t, x)
		e.s.Backend = b // the next cases' backend
		m = e.marker(b)
		e.wantSeen("retry after the loss", applyMarked(e, m, ops, time.Hour), []string{"e1", "e2"})
		e.wantSeen("new event", applyMarked(e, m, []contract.MarkedOp{marked(add(x, contract.KindNone, 4), "e3")}, time.Hour), nil)
		deadline := time.Now().Add(20 * time.Second)
		for {
			v, err := b.Get(e.ctx, x)
			if err == nil {
				if v.Value != 7 {
					e.t.Errorf("%q = %d after the retry, want 7 (each event applied once)", x, v.Value)
				}
				return
			}
			if !errors.Is(err, contract.ErrUnavailable) || time.Now().After(deadline) {
				e.t.Fatalf("get %q: %v", x, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}}
}
