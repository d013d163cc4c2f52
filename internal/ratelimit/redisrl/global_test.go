package redisrl_test

import (
	"context"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/ratelimit"
)

// Backends differ on global-approx limits: a cluster decides them on
// every node from its share (ratelimit.Global, docs/ratelimit.md), while
// the embedded Limiter and the tiered mode's Redis decide them exactly,
// as they decide every limit (all nodes of a tiered deployment share
// Redis already), so their overshoot is 0, within any bound. Both answer
// the same, and the global-approx state is apart from an owner-scoped
// limit with the same numbers.
func TestGlobalApproxDecidedExactly(t *testing.T) {
	clk := new(clock)
	clk.ns.Store(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	mem := newLimiter(t, clk.Now)
	red := newDecider(t, newClient(t), newLimiter(t, clk.Now), clk.Now)
	g := ratelimit.Limit{Name: "hot", Algorithm: ratelimit.FixedWindow, Limit: 7, Period: time.Second, Scope: ratelimit.ScopeGlobalApprox}
	own := g
	own.Scope = ratelimit.ScopeOwner
	ctx := context.Background()
	for w := range 2 {
		admitted := map[string]int{}
		for i := range 20 {
			for _, lim := range []ratelimit.Limit{g, own} {
				hits := []ratelimit.Hit{{Key: "k", Limit: lim, Cost: 1}}
				a, err := mem.CheckMulti(hits, nil)
				if err != nil {
					t.Fatal(err)
				}
				b, err := red.CheckMultiContext(ctx, hits, nil)
				if err != nil {
					t.Fatal(err)
				}
				if a.Allowed != b.Allowed || a.Remaining != b.Remaining {
					t.Fatalf("window %d check %d %s: memory %+v, redis %+v", w, i, lim, a, b)
				}
				if a.Allowed {
					admitted[lim.Scope.String()]++
				}
			}
			clk.Advance(10 * time.Millisecond)
		}
		if admitted["global-approx"] != 7 || admitted["owner"] != 7 {
			t.Fatalf("window %d admitted %v, want 7 for each scope (separate states)", w, admitted)
		}
		clk.Advance(time.Second)
	}
}
