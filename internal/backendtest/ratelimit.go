package backendtest

import (
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/ratelimit"
)

// rlCase runs against the setup's Checker.
func rlCase(name string, run func(e *env, c ratelimit.Checker)) tcase {
	return tcase{name, func(e *env) {
		if e.s.Checker == nil {
			e.t.Skip("no rate-limit checker on this setup")
		}
		run(e, e.s.Checker)
	}}
}

// check runs one single-limit check.
func (e *env) check(c ratelimit.Checker, key string, lim ratelimit.Limit, cost int64) ratelimit.Status {
	e.t.Helper()
	st, err := c.CheckMultiContext(e.ctx, []ratelimit.Hit{{Key: key, Limit: lim, Cost: cost}}, nil)
	if err != nil {
		e.t.Fatalf("check %q: %v", key, err)
	}
	return st
}

func rateLimitCases() []tcase {
	perMinute := func(alg ratelimit.Algorithm, n int64) ratelimit.Limit {
		return ratelimit.Limit{Algorithm: alg, Limit: n, Period: time.Minute}
	}
	var out []tcase
	for _, alg := range []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.SlidingWindow, ratelimit.SlidingLog, ratelimit.TokenBucket, ratelimit.LeakyBucket} {
		out = append(out, rlCase("admits exactly the limit/"+alg.String(), func(e *env, c ratelimit.Checker) {
			key, lim := e.id("rl"), perMinute(alg, 5)
			if alg == ratelimit.FixedWindow && e.s.CheckerFollowsClock {
				// Not across a window boundary.
				now := e.s.Clock.Now()
				e.s.Clock.Advance(now.Truncate(time.Minute).Add(time.Minute).Sub(now) + time.Second)
			}
			for i := range 5 {
				st := e.check(c, key, lim, 1)
				if !st.Allowed || st.Limit != 5 || st.Remaining != int64(4-i) {
					e.t.Errorf("hit %d = %+v, want allowed with %d remaining", i+1, st, 4-i)
				}
			}
			st := e.check(c, key, lim, 1)
			if st.Allowed || st.Remaining != 0 || st.RetryAfter <= 0 {
				e.t.Errorf("hit 6 = %+v, want denied with a retry-after", st)
			}
			if other := e.check(c, e.id("rl-other"), lim, 1); !other.Allowed {
				e.t.Errorf("another key = %+v, want allowed", other)
			}
			if !e.s.CheckerFollowsClock {
				return
			}
			e.s.Clock.Advance(st.RetryAfter)
			if st := e.check(c, key, lim, 1); !st.Allowed {
				e.t.Errorf("after retry-after = %+v, want allowed", st)
			}
		}))
	}
	return append(out,
		rlCase("multi-limit is all or nothing", func(e *env, c ratelimit.Checker) {
			a, b := e.id("rl-a"), e.id("rl-b")
			wide, narrow := perMinute(ratelimit.SlidingWindow, 10), perMinute(ratelimit.SlidingWindow, 1)
			out := make([]ratelimit.Status, 2)
			hits := []ratelimit.Hit{{Key: a, Limit: wide, Cost: 1}, {Key: b, Limit: narrow, Cost: 1}}
			st, err := c.CheckMultiContext(e.ctx, hits, out)
			if err != nil || !st.Allowed || st.Remaining != 0 {
				e.t.Fatalf("first multi check = %+v, %v; want allowed, binding 0 remaining", st, err)
			}
			st, err = c.CheckMultiContext(e.ctx, hits, out)
			if err != nil || st.Allowed || !out[0].Allowed || out[1].Allowed {
				e.t.Errorf("second multi check = %+v %+v, %v; want denied by the narrow limit only", st, out, err)
			}
			// The denied check charged nothing: the wide limit has 9 left.
			if st := e.check(c, a, wide, 0); st.Remaining != 9 {
				e.t.Errorf("wide limit after a denied multi check: %+v, want 9 remaining", st)
			}
		}),
		rlCase("cost", func(e *env, c ratelimit.Checker) {
			key, lim := e.id("rl-cost"), perMinute(ratelimit.TokenBucket, 10)
			if st := e.check(c, key, lim, 7); !st.Allowed || st.Remaining != 3 {
				e.t.Errorf("cost 7 = %+v, want 3 remaining", st)
			}
			if st := e.check(c, key, lim, 4); st.Allowed || st.Remaining != 3 {
				e.t.Errorf("cost 4 with 3 left = %+v, want denied, 3 remaining", st)
			}
			if st := e.check(c, key, lim, 3); !st.Allowed || st.Remaining != 0 {
				e.t.Errorf("cost 3 = %+v, want allowed, 0 remaining", st)
			}
		}),
		// scope global-approx (docs/ratelimit.md, "Global limits"): a
		// single decider (embedded, tiered) decides it exactly; a cluster
		// admits from shares whose sum never passes the limit, and checks
		// made one after another leave no share stale in flight, so from
		// one client every backend admits at most the limit per window.
		rlCase("global-approx admits at most the limit", func(e *env, c ratelimit.Checker) {
			key := e.id("rl-global")
			lim := perMinute(ratelimit.FixedWindow, 20)
			lim.Scope = ratelimit.ScopeGlobalApprox
			if e.s.CheckerFollowsClock {
				now := e.s.Clock.Now() // not across a window boundary
				e.s.Clock.Advance(now.Truncate(time.Minute).Add(time.Minute).Sub(now) + time.Second)
			}
			admitted := 0
			for range 60 {
				if st := e.check(c, key, lim, 1); st.Allowed {
					admitted++
				} else if st.RetryAfter <= 0 {
					e.t.Errorf("denied check = %+v, want a retry-after", st)
				}
			}
			if admitted == 0 || admitted > 20 {
				e.t.Errorf("admitted %d of 60 checks under a global-approx limit of 20, want 1..20", admitted)
			}
			bad := lim
			bad.Algorithm = ratelimit.TokenBucket
			_, err := c.CheckMultiContext(e.ctx, []ratelimit.Hit{{Key: e.id("rl-global-tb"), Limit: bad, Cost: 1}}, nil)
			e.wantErr("global-approx token bucket", err, ratelimit.ErrInvalidLimit)
		}),
		rlCase("invalid checks", func(e *env, c ratelimit.Checker) {
			lim := perMinute(ratelimit.FixedWindow, 5)
			for _, tc := range []struct {
				name string
				hits []ratelimit.Hit
				want error
			}{
				{"empty key", []ratelimit.Hit{{Key: "", Limit: lim, Cost: 1}}, ratelimit.ErrInvalidKey},
				{"cost above the limit", []ratelimit.Hit{{Key: e.id("rl-x"), Limit: lim, Cost: 6}}, ratelimit.ErrInvalidCost},
				{"negative cost", []ratelimit.Hit{{Key: e.id("rl-x"), Limit: lim, Cost: -1}}, ratelimit.ErrInvalidCost},
				{"zero limit", []ratelimit.Hit{{Key: e.id("rl-x"), Limit: perMinute(ratelimit.FixedWindow, 0), Cost: 1}}, ratelimit.ErrInvalidLimit},
				{"no hits", nil, ratelimit.ErrInvalidRequest},
			} {
				_, err := c.CheckMultiContext(e.ctx, tc.hits, nil)
				e.wantErr(tc.name, err, tc.want)
			}
			// Nothing was charged.
			if st := e.check(c, e.id("rl-x"), lim, 0); st.Remaining != 5 {
				e.t.Errorf("after invalid checks: %+v, want 5 remaining", st)
			}
		}),
		// Limiter state and counters share the engine's index (embedded,
		// cluster: docs/ratelimit.md, "Where the state lives"), in a
		// namespace of its own: a rate-limited key is no counter (not in
		// Len, Scan nor Get), a counter of the same name is another thing,
		// and FLUSHALL of the counters leaves the limits' state.
		rlCase("limiter state is not a counter", func(e *env, c ratelimit.Checker) {
			e.reset()
			key := e.id("rl-ns")
			algs := []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.SlidingWindow, ratelimit.SlidingLog, ratelimit.TokenBucket, ratelimit.LeakyBucket}
			if e.s.CheckerFollowsClock {
				now := e.s.Clock.Now() // not across a window boundary
				e.s.Clock.Advance(now.Truncate(time.Minute).Add(time.Minute).Sub(now) + time.Second)
			}
			for _, alg := range algs {
				e.check(c, key, perMinute(alg, 5), 2)
			}
			e.wantMissing(key)
			if n, err := e.b.Len(e.ctx); err != nil || n != 0 {
				e.t.Errorf("len after rate-limit checks = %d, %v; want 0", n, err)
			}
			if ids, _, err := e.b.Scan(e.ctx, 0, "", 1000); err != nil || len(ids) != 0 {
				e.t.Errorf("scan after rate-limit checks = %q, %v; want none", ids, err)
			}
			if r := e.apply(add(key, contract.KindNone, 7)); r.Value != 7 {
				e.t.Errorf("a counter named like the rate-limited key = %+v, want 7", r)
			}
			if err := e.b.FlushAll(e.ctx, contract.WriteOptions{}); err != nil {
				e.t.Fatal(err)
			}
			for _, alg := range algs {
				if st := e.check(c, key, perMinute(alg, 5), 0); st.Remaining != 3 {
					e.t.Errorf("%s after a counter and flushall: %+v, want 3 remaining", alg, st)
				}
			}
		}),
	)
}
