package ratelimit

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestStateIdentity(t *testing.T) {
	l := newLimiter(t, newFakeClock().Now)
	a := Limit{Algorithm: FixedWindow, Limit: 2, Period: time.Minute}
	b := a
	b.Limit = 3
	named := a
	named.Name = "other"
	mustCheck(t, l, "k", a, 2)
	if s := mustCheck(t, l, "k", a, 1); s.Allowed {
		t.Error("same key and limit: state not shared")
	}
	if s := mustCheck(t, l, "k", b, 3); !s.Allowed {
		t.Error("another limit on the same key shares its state")
	}
	if s := mustCheck(t, l, "k", named, 2); !s.Allowed {
		t.Error("another name shares state")
	}
	if s := mustCheck(t, l, "k2", a, 2); !s.Allowed {
		t.Error("another key shares state")
	}
	if n := l.Len(); n != 4 {
		t.Errorf("Len = %d, want 4", n)
	}
}

func TestEvictAndReuse(t *testing.T) {
	clk := newFakeClock()
	l := newLimiter(t, clk.Now)
	lim := Limit{Algorithm: FixedWindow, Limit: 1, Period: time.Second}
	tb := Limit{Algorithm: TokenBucket, Limit: 1, Period: 10 * time.Second}
	const n = 20000
	for i := range n {
		mustCheck(t, l, fmt.Sprint("key:", i), lim, 1)
		mustCheck(t, l, fmt.Sprint("key:", i), tb, 1)
	}
	if got := l.Len(); got != 2*n {
		t.Fatalf("Len = %d, want %d", got, 2*n)
	}
	if got := l.Evict(); got != 0 {
		t.Fatalf("evicted %d live entries", got)
	}
	clk.Advance(time.Second) // the fixed windows end; the buckets need 10s
	if got := l.Evict(); got != n {
		t.Fatalf("evicted %d, want %d", got, n)
	}
	for i := range n {
		if s := mustCheck(t, l, fmt.Sprint("key:", i), tb, 1); s.Allowed {
			t.Fatalf("key %d: token bucket state lost by evicting its neighbours", i)
		}
	}
	clk.Advance(10 * time.Second)
	if got := l.Evict(); got != n {
		t.Fatalf("evicted %d, want %d", got, n)
	}
	if got := l.Len(); got != 0 {
		t.Fatalf("Len = %d after evicting all", got)
	}
	// Freed entries come back fresh.
	for i := range n {
		if s := mustCheck(t, l, fmt.Sprint("key:", i), lim, 1); !s.Allowed || s.Remaining != 0 {
			t.Fatalf("reused entry not fresh: %+v", s)
		}
	}
	if got := l.Len(); got != n {
		t.Fatalf("Len = %d, want %d", got, n)
	}
	// A query alone leaves no state behind once evicted.
	mustCheck(t, l, "query-only", lim, 0)
	clk.Advance(time.Second)
	if got := l.Evict(); got != n+1 {
		t.Fatalf("evicted %d, want %d", got, n+1)
	}
}

// TestConcurrentExact: with the clock frozen, exactly Limit hits pass per
// key however many goroutines race, while the janitor frees and reuses
// the entries of keys that are only queried.
func TestConcurrentExact(t *testing.T) {
	l := newLimiter(t, newFakeClock().Now)
	const keys, limit, workers = 64, 100, 8
	algs := []Limit{
		{Algorithm: FixedWindow, Limit: limit, Period: time.Hour},
		{Algorithm: SlidingWindow, Limit: limit, Period: time.Hour},
		{Algorithm: SlidingLog, Limit: limit, Period: time.Hour},
		{Algorithm: TokenBucket, Limit: limit, Period: time.Hour},
		{Algorithm: LeakyBucket, Limit: limit, Period: time.Hour},
	}
	var allowed [5][keys]atomic.Int64
	stop := make(chan struct{})
	var evictors sync.WaitGroup
	evictors.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				l.Evict()
				runtime.Gosched()
			}
		}
	})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range 3 * keys * limit / workers * 2 {
				k := (i*7 + w) % keys
				a := i % len(algs)
				key := fmt.Sprint("k", k)
				mustCheck(t, l, "q:"+key, algs[a], 0) // churn: evictable at once
				if mustCheck(t, l, key, algs[a], 1).Allowed {
					allowed[a][k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	evictors.Wait()
	for a := range algs {
		for k := range keys {
			if got := allowed[a][k].Load(); got != limit {
				t.Errorf("%s key %d: %d allowed, want exactly %d", algs[a].Algorithm, k, got, limit)
			}
		}
	}
}

// TestMultiAtomic: a multi-limit check consumes from all limits or none.
// Workers race checks of (A and B) against checks of B alone; with a
// frozen clock, B admits exactly its limit in total, and A's consumption
// equals the number of admitted pairs: no pair consumed A without B.
func TestMultiAtomic(t *testing.T) {
	l := newLimiter(t, newFakeClock().Now)
	limA := Limit{Algorithm: FixedWindow, Limit: 1000, Period: time.Hour}
	limB := Limit{Algorithm: TokenBucket, Limit: 300, Period: time.Hour}
	pair := []Hit{{Key: "user:1", Limit: limA, Cost: 1}, {Key: "tenant:acme", Limit: limB, Cost: 1}}
	var pairs, singles atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			out := make([]Status, 2)
			for i := range 200 {
				if (i+w)%2 == 0 { // every worker alternates, so both kinds race
					s, err := l.CheckMulti(pair, out)
					if err != nil {
						t.Error(err)
						return
					}
					if s.Allowed != (out[0].Allowed && out[1].Allowed) {
						t.Errorf("binding %+v disagrees with %+v", s, out)
					}
					if s.Allowed {
						pairs.Add(1)
					}
				} else if mustCheck(t, l, "tenant:acme", limB, 1).Allowed {
					singles.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := pairs.Load() + singles.Load(); got != 300 {
		t.Errorf("B admitted %d, want exactly 300", got)
	}
	a := mustCheck(t, l, "user:1", limA, 0)
	if used := 1000 - a.Remaining; used != pairs.Load() {
		t.Errorf("A consumed %d, but %d pairs were admitted", used, pairs.Load())
	}
	if pairs.Load() == 0 || singles.Load() == 0 {
		t.Errorf("no race: %d pairs, %d singles", pairs.Load(), singles.Load())
	}
}

func TestMultiStatuses(t *testing.T) {
	l := newLimiter(t, newFakeClock().Now)
	perSec := Limit{Name: "per-second", Algorithm: SlidingWindow, Limit: 2, Period: time.Second}
	perDay := Limit{Name: "per-day", Algorithm: FixedWindow, Limit: 3, Period: 24 * time.Hour}
	hits := []Hit{{"u", perSec, 1}, {"u", perDay, 1}}
	out := make([]Status, 2)
	s, err := l.CheckMulti(hits, out)
	if err != nil || !s.Allowed {
		t.Fatal(s, err)
	}
	// Binding while allowed: the fewest remaining (per-second: 1, per-day: 2).
	if s.Remaining != 1 || s.Limit != 2 {
		t.Errorf("binding %+v, want per-second's", s)
	}
	l.CheckMulti(hits, out)
	s, _ = l.CheckMulti(hits, out)
	if s.Allowed || out[0].Allowed || !out[1].Allowed {
		t.Fatalf("third hit in a second: %+v %+v", s, out)
	}
	// The per-day limit allowed but was not charged: it reports 1 left.
	if out[1].Remaining != 1 {
		t.Errorf("per-day remaining %d after a denied check, want 1 (not charged)", out[1].Remaining)
	}
	if s.RetryAfter != out[0].RetryAfter || s.RetryAfter <= 0 {
		t.Errorf("binding RetryAfter %v, per-second's %v", s.RetryAfter, out[0].RetryAfter)
	}
	// The same (key, limit) twice is one limit hit with both costs.
	l2 := newLimiter(t, newFakeClock().Now)
	s, err = l2.CheckMulti([]Hit{{"u", perDay, 2}, {"u", perDay, 1}}, out)
	if err != nil || !s.Allowed || out[0].Remaining != 0 || out[1] != out[0] {
		t.Errorf("duplicate limit: %+v %+v %v", s, out, err)
	}
	if _, err := l2.CheckMulti([]Hit{{"u", perDay, 2}, {"u", perDay, 2}}, nil); !errors.Is(err, ErrInvalidCost) {
		t.Errorf("duplicate limit above capacity: %v", err)
	}
	if _, err := l2.CheckMulti(nil, nil); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("no hits: %v", err)
	}
	if _, err := l2.CheckMulti(make([]Hit, MaxHits+1), nil); !errors.Is(err, ErrTooManyLimits) {
		t.Errorf("too many hits: %v", err)
	}
	if _, err := l2.CheckMulti(hits, make([]Status, 1)); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("short out: %v", err)
	}
}

func TestMultiManyKeysOrder(t *testing.T) {
	// Many keys across shards, in both orders, from many goroutines:
	// must not deadlock and must stay exact.
	l := newLimiter(t, newFakeClock().Now)
	lim := Limit{Algorithm: FixedWindow, Limit: 50, Period: time.Hour}
	var hits []Hit
	for i := range 20 {
		hits = append(hits, Hit{Key: fmt.Sprint("k", i), Limit: lim, Cost: 1})
	}
	rev := make([]Hit, len(hits))
	for i := range hits {
		rev[len(hits)-1-i] = hits[i]
	}
	var ok atomic.Int64
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			h := hits
			if w%2 == 1 {
				h = rev
			}
			for range 40 {
				s, err := l.CheckMulti(h, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if s.Allowed {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load() != 50 {
		t.Errorf("%d multi checks admitted, want 50", ok.Load())
	}
}

func TestCloseAndDefaultClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := New(Config{EvictInterval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		start := l.Now()
		lim := Limit{Algorithm: FixedWindow, Limit: 1, Period: time.Second}
		mustCheck(t, l, "a", lim, 1)
		time.Sleep(1500 * time.Millisecond)
		if d := l.Now().Sub(start); d < 1400*time.Millisecond || d > 1600*time.Millisecond {
			t.Errorf("default clock advanced %v in 1.5s", d)
		}
		time.Sleep(2 * time.Second) // the janitor runs
		if n := l.Len(); n != 0 {
			t.Errorf("janitor left %d entries", n)
		}
		l.Close()
		l.Close()
		if _, err := l.Check("a", lim, 1); !errors.Is(err, ErrClosed) {
			t.Errorf("check after Close: %v", err)
		}
		if _, err := l.CheckMulti([]Hit{{"a", lim, 1}}, nil); !errors.Is(err, ErrClosed) {
			t.Errorf("multi check after Close: %v", err)
		}
		// synctest.Test fails if the clock or janitor goroutine outlived Close.
	})
}

func TestConfigValidate(t *testing.T) {
	bad := Config{Policies: []Policy{{Name: "x", Match: "*", Algorithm: FixedWindow, Limit: 0, Period: time.Second}}}
	if err := bad.Validate(); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("Validate: %v", err)
	}
	if _, err := New(bad); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("New: %v", err)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero config: %v", err)
	}
}
