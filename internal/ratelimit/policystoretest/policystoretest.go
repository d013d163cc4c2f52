// Package policystoretest is the behaviour every ratelimit.PolicyStore
// must show: Run it against an implementation (in memory, PostgreSQL, the
// cluster's replicated state) with a constructor of empty stores.
package policystoretest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/ratelimit"
)

// Policy returns a valid policy named name with the given limit.
func Policy(name string, limit int64) ratelimit.Policy {
	return ratelimit.Policy{Name: name, Match: name + ":*", Algorithm: ratelimit.FixedWindow,
		Limit: limit, Period: time.Second, Cost: 1}
}

// Run runs the suite; newStore returns an empty store, released by the
// test's cleanups.
func Run(t *testing.T, newStore func(t *testing.T) ratelimit.PolicyStore) {
	ctx := context.Background()
	load := func(t *testing.T, st ratelimit.PolicyStore) []ratelimit.Policy {
		t.Helper()
		ps, err := st.LoadPolicies(ctx)
		if err != nil {
			t.Fatalf("LoadPolicies: %v", err)
		}
		return ps
	}
	want := func(t *testing.T, st ratelimit.PolicyStore, want ...ratelimit.Policy) {
		t.Helper()
		if got := load(t, st); !slices.Equal(got, want) {
			t.Fatalf("policies:\n got %+v\nwant %+v", got, want)
		}
	}

	t.Run("Empty", func(t *testing.T) {
		t.Parallel() // each subtest has a store of its own
		want(t, newStore(t))
	})

	t.Run("PutAppendsAndReplacesInPlace", func(t *testing.T) {
		t.Parallel() // each subtest has a store of its own
		st := newStore(t)
		a, b, c := Policy("a", 1), Policy("b", 2), Policy("c", 3)
		for _, p := range []ratelimit.Policy{a, b, c} {
			if err := st.PutPolicy(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		want(t, st, a, b, c)
		b2 := b
		b2.Limit, b2.Algorithm, b2.Burst, b2.Namespace, b2.Final, b2.Cost = 9, ratelimit.TokenBucket, 20, "ns", true, 5
		b2.Period = 1500 * time.Millisecond
		if err := st.PutPolicy(ctx, b2); err != nil {
			t.Fatal(err)
		}
		want(t, st, a, b2, c)
	})

	t.Run("EveryField", func(t *testing.T) {
		t.Parallel() // each subtest has a store of its own
		st := newStore(t)
		p := ratelimit.Policy{Name: "full.policy-1_x", Match: `user:[^a]*\*?`, Namespace: "tenant",
			Algorithm: ratelimit.LeakyBucket, Limit: 1 << 40, Period: 366 * 24 * time.Hour, Burst: 7, Cost: 7, Final: true}
		q := ratelimit.Policy{Name: "ns-only", Namespace: "x", Algorithm: ratelimit.SlidingLog, Limit: 3,
			Period: time.Millisecond, Cost: 0}
		for _, x := range []ratelimit.Policy{p, q} {
			if err := st.PutPolicy(ctx, x); err != nil {
				t.Fatal(err)
			}
		}
		want(t, st, p, q)
	})

	t.Run("Delete", func(t *testing.T) {
		t.Parallel() // each subtest has a store of its own
		st := newStore(t)
		a, b, c := Policy("a", 1), Policy("b", 2), Policy("c", 3)
		if err := st.ReplacePolicies(ctx, []ratelimit.Policy{a, b, c}); err != nil {
			t.Fatal(err)
		}
		if ok, err := st.DeletePolicy(ctx, "b"); err != nil || !ok {
			t.Fatalf("DeletePolicy(b) = %v, %v; want true", ok, err)
		}
		if ok, err := st.DeletePolicy(ctx, "b"); err != nil || ok {
			t.Fatalf("DeletePolicy(b) again = %v, %v; want false", ok, err)
		}
		want(t, st, a, c)
		// A re-added policy goes to the end.
		if err := st.PutPolicy(ctx, b); err != nil {
			t.Fatal(err)
		}
		want(t, st, a, c, b)
	})

	t.Run("ReplaceKeepsOrder", func(t *testing.T) {
		t.Parallel() // each subtest has a store of its own
		st := newStore(t)
		a, b, c := Policy("a", 1), Policy("b", 2), Policy("c", 3)
		if err := st.ReplacePolicies(ctx, []ratelimit.Policy{c, a}); err != nil {
			t.Fatal(err)
		}
		want(t, st, c, a)
		if err := st.ReplacePolicies(ctx, []ratelimit.Policy{b, c, a}); err != nil {
			t.Fatal(err)
		}
		want(t, st, b, c, a)
		if err := st.ReplacePolicies(ctx, nil); err != nil {
			t.Fatal(err)
		}
		want(t, st)
	})

	t.Run("InvalidChangesNothing", func(t *testing.T) {
		t.Parallel() // each subtest has a store of its own
		st := newStore(t)
		a := Policy("a", 1)
		if err := st.PutPolicy(ctx, a); err != nil {
			t.Fatal(err)
		}
		bad := []ratelimit.Policy{
			{Name: "", Match: "*", Algorithm: ratelimit.FixedWindow, Limit: 1, Period: time.Second},
			{Name: "bad name", Match: "*", Algorithm: ratelimit.FixedWindow, Limit: 1, Period: time.Second},
			{Name: "nomatch", Algorithm: ratelimit.FixedWindow, Limit: 1, Period: time.Second},
			{Name: "zero", Match: "*", Algorithm: ratelimit.FixedWindow, Limit: 0, Period: time.Second},
			{Name: "a", Match: "*", Algorithm: ratelimit.FixedWindow, Limit: 1, Period: 0},
			{Name: "a", Match: "*", Algorithm: ratelimit.FixedWindow, Limit: 1, Period: time.Second, Burst: 3},
			{Name: "a", Match: "*", Algorithm: 99, Limit: 1, Period: time.Second},
			{Name: "a", Match: "*", Algorithm: ratelimit.FixedWindow, Limit: 1, Period: time.Second, Cost: 2},
		}
		for i, p := range bad {
			if err := st.PutPolicy(ctx, p); !errors.Is(err, ratelimit.ErrInvalidPolicy) {
				t.Errorf("PutPolicy(bad[%d]) = %v, want ErrInvalidPolicy", i, err)
			}
			if err := st.ReplacePolicies(ctx, []ratelimit.Policy{Policy("z", 1), p}); !errors.Is(err, ratelimit.ErrInvalidPolicy) {
				t.Errorf("ReplacePolicies(bad[%d]) = %v, want ErrInvalidPolicy", i, err)
			}
		}
		if err := st.ReplacePolicies(ctx, []ratelimit.Policy{Policy("z", 1), Policy("z", 2)}); !errors.Is(err, ratelimit.ErrInvalidPolicy) {
			t.Errorf("ReplacePolicies(duplicate) = %v, want ErrInvalidPolicy", err)
		}
		want(t, st, a)
	})

	t.Run("ConcurrentWritersSeeAll", func(t *testing.T) {
		t.Parallel() // each subtest has a store of its own
		st := newStore(t)
		const n = 16
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() { errs <- st.PutPolicy(ctx, Policy(fmt.Sprintf("p%02d", i), int64(i+1))) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		got := load(t, st)
		if len(got) != n {
			t.Fatalf("%d policies after %d concurrent puts: %+v", len(got), n, got)
		}
		for i := range n {
			name := fmt.Sprintf("p%02d", i)
			if !slices.ContainsFunc(got, func(p ratelimit.Policy) bool { return p == Policy(name, int64(i+1)) }) {
				t.Errorf("policy %s missing or changed", name)
			}
		}
	})
}
