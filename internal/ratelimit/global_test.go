package ratelimit

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func genUsage(t *rapid.T, label string) UsageVector {
	v := UsageVector{Window: rapid.Int64Range(0, 3).Draw(t, label+".window"), Used: map[string]int64{}}
	for _, n := range rapid.SliceOfN(rapid.SampledFrom([]string{"a", "b", "c", "d"}), 0, 4).Draw(t, label+".nodes") {
		v.Used[n] = rapid.Int64Range(0, 50).Draw(t, label+".used."+n)
	}
	return v
}

func merged(vs ...UsageVector) UsageVector {
	var out UsageVector
	for _, v := range vs {
		c := UsageVector{Window: v.Window, Used: maps.Clone(v.Used)}
		out.Merge(c)
	}
	return out
}

func sameUsage(a, b UsageVector) bool {
	if a.Window != b.Window || len(a.Used) != len(b.Used) {
		return false
	}
	for n, u := range a.Used {
		if w, ok := b.Used[n]; !ok || w != u {
			return false
		}
	}
	return true
}

// The owner's usage vector merges reports by max per node within the
// latest window: commutative, associative, idempotent, and a merge never
// lowers a slot of the window it keeps.
func TestUsageVectorMergeIsAJoin(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b, c := genUsage(t, "a"), genUsage(t, "b"), genUsage(t, "c")
		if ab, ba := merged(a, b), merged(b, a); !sameUsage(ab, ba) {
			t.Fatalf("not commutative: %v vs %v", ab, ba)
		}
		if l, r := merged(merged(a, b), c), merged(a, merged(b, c)); !sameUsage(l, r) {
			t.Fatalf("not associative: %v vs %v", l, r)
		}
		if aa := merged(a, a); !sameUsage(aa, merged(a)) {
			t.Fatalf("not idempotent: %v vs %v", aa, a)
		}
		m := merged(a, b)
		if m.Window != max(a.Window, b.Window) {
			t.Fatalf("window %d, want %d", m.Window, max(a.Window, b.Window))
		}
		for _, v := range []UsageVector{a, b} {
			if v.Window != m.Window {
				continue
			}
			for n, u := range v.Used {
				if m.Used[n] < u {
					t.Fatalf("merge lowered %s: %d < %d", n, m.Used[n], u)
				}
			}
		}
		ma := merged(a)
		if a.Window == m.Window && m.Total() < ma.Total() {
			t.Fatalf("total fell")
		}
	})
}

// simPeers makes node 0 the owner of every key; a cold fetch reaches it
// at once (a round trip of 0).
type simPeers struct {
	self  int
	owner *Global
}

func (p simPeers) Owner(string) (bool, string) { return p.self == 0, "n0" }
func (p simPeers) Nodes() int                  { return 3 }
func (p simPeers) Exchange(_ context.Context, peer string, reps []GlobalReport) ([]GlobalShare, error) {
	return p.owner.Serve(fmt.Sprintf("n%d", p.self), reps)
}

type simEvent struct {
	at  int64
	seq int
	f   func()
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// TestGlobalOvershootBound simulates N nodes checking one global-approx
// limit at their own fixed rates while exchanging with the owner (node 0)
// every interval, each exchange taking a random round trip below the
// interval (the request and the answer delayed independently). In every
// window the admissions of all nodes must stay within the bound
// docs/ratelimit.md derives: Limit plus, for each node but the owner,
// what it admits during one exchange's round trip; and so within
// Limit + (N-1)*(floor(rate*roundtrip)+1) for the highest per-node rate
// and the longest round trip.
func TestGlobalOvershootBound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(2, 5).Draw(t, "nodes")
		limit := rapid.Int64Range(1, 600).Draw(t, "limit")
		period := time.Second
		interval := time.Duration(rapid.IntRange(10, 300).Draw(t, "intervalMS")) * time.Millisecond
		windows := 3
		start := int64(1_000) * int64(period) // a window boundary
		now := start
		clock := func() time.Time { return time.Unix(0, now) }
		lim := Limit{Name: "g", Algorithm: FixedWindow, Limit: limit, Period: period, Scope: ScopeGlobalApprox}

		gs := make([]*Global, n)
		for i := range gs {
			g, err := NewGlobal(GlobalConfig{Self: fmt.Sprintf("n%d", i), Interval: interval, Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			gs[i] = g
		}
		for i := range gs {
			gs[i].peers = simPeers{self: i, owner: gs[0]}
		}

		var q simQueue
		seq := 0
		at := func(ts int64, f func()) {
			seq++
			heap.Push(&q, simEvent{at: ts, seq: seq, f: f})
		}
		end := start + int64(windows)*int64(period)
		rates := make([]int, n)
		maxRate := 0
		// admissions[node] = times of admitted hits
		admissions := make([][]int64, n)
		type flight struct{ from, to int64 }
		flights := make([][]flight, n)
		var maxRTT int64
		for i := range n {
			rates[i] = rapid.IntRange(0, 1500).Draw(t, fmt.Sprintf("rate%d", i))
			maxRate = max(maxRate, rates[i])
			if rates[i] > 0 {
				step := int64(time.Second) / int64(rates[i])
				phase := rapid.Int64Range(0, step-1).Draw(t, fmt.Sprintf("phase%d", i))
				var next func(ts int64)
				next = func(ts int64) {
					at(ts, func() {
						s, err := gs[i].CheckMultiContext(context.Background(), []Hit{{Key: "k", Limit: lim, Cost: 1}}, nil)
						if err != nil {
							t.Fatal(err)
						}
						if s.Allowed {
							admissions[i] = append(admissions[i], now)
						}
						if ts+step < end {
							next(ts + step)
						}
					})
				}
				next(start + phase)
			}
			ph := rapid.Int64Range(0, int64(interval)-1).Draw(t, fmt.Sprintf("xphase%d", i))
			var tick func(ts int64)
			tick = func(ts int64) {
				at(ts, func() {
					if ts+int64(interval) < end {
						defer tick(ts + int64(interval))
					}
					if i == 0 {
						gs[0].ExchangeSelf(nil)
						return
					}
					reps := gs[i].Reports(nil)
					if len(reps) == 0 {
						return
					}
					d1 := rapid.Int64Range(0, int64(interval)/2-1).Draw(t, "d1")
					d2 := rapid.Int64Range(0, int64(interval)/2-1).Draw(t, "d2")
					maxRTT = max(maxRTT, d1+d2)
					flights[i] = append(flights[i], flight{ts, ts + d1 + d2})
					at(ts+d1, func() {
						shares, err := gs[0].Serve(fmt.Sprintf("n%d", i), reps)
						if err != nil {
							t.Fatal(err)
						}
						at(ts+d1+d2, func() { gs[i].Apply(shares) })
					})
				})
			}
			tick(start + ph)
		}
		for q.Len() > 0 {
			e := heap.Pop(&q).(simEvent)
			now = e.at
			e.f()
		}

		for w := range windows {
			lo, hi := start+int64(w)*int64(period), start+int64(w+1)*int64(period)
			in := func(ts int64) bool { return ts >= lo && ts < hi }
			var total, slack int64
			for i := range n {
				for _, ts := range admissions[i] {
					if in(ts) {
						total++
					}
				}
				if i == 0 {
					continue
				}
				var worst int64 // most admitted during one exchange's round trip
				for _, f := range flights[i] {
					var c int64
					for _, ts := range admissions[i] {
						if in(ts) && ts >= f.from && ts <= f.to {
							c++
						}
					}
					worst = max(worst, c)
				}
				slack += worst
			}
			if total > limit+slack {
				t.Fatalf("window %d: %d admitted, limit %d + in-flight slack %d", w, total, limit, slack)
			}
			stated := limit + int64(n-1)*(int64(maxRate)*maxRTT/int64(time.Second)+1)
			if total > stated {
				t.Fatalf("window %d: %d admitted above the stated bound %d (N=%d rate=%d rtt=%s)", w, total, stated, n, maxRate, time.Duration(maxRTT))
			}
		}
	})
}

// With equal demand on three nodes, after the first window the shares
// converge and the nodes together admit most of the limit in each window
// (the mode is useful, not just safe).
func TestGlobalSharesFollowDemand(t *testing.T) {
	now := int64(5000) * int64(time.Second)
	clock := func() time.Time { return time.Unix(0, now) }
	lim := Limit{Name: "g", Algorithm: FixedWindow, Limit: 300, Period: time.Second, Scope: ScopeGlobalApprox}
	gs := make([]*Global, 3)
	for i := range gs {
		gs[i], _ = NewGlobal(GlobalConfig{Self: fmt.Sprintf("n%d", i), Interval: 100 * time.Millisecond, Clock: clock})
	}
	for i := range gs {
		gs[i].peers = simPeers{self: i, owner: gs[0]}
	}
	admitted := make([]int64, 3)
	for ms := 0; ms < 3000; ms++ {
		now = int64(5000)*int64(time.Second) + int64(ms)*int64(time.Millisecond)
		for i := range gs {
			s, err := gs[i].CheckMultiContext(context.Background(), []Hit{{Key: "k", Limit: lim, Cost: 1}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if s.Allowed && ms >= 2000 {
				admitted[i]++
			}
		}
		if ms%100 == 50 {
			for i := range gs {
				if err := gs[i].Exchange(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	total := admitted[0] + admitted[1] + admitted[2]
	if total > lim.Limit || total < lim.Limit*9/10 {
		t.Fatalf("third window admitted %v (total %d), want within [%d, %d]", admitted, total, lim.Limit*9/10, lim.Limit)
	}
	for i, a := range admitted {
		if a < lim.Limit/6 {
			t.Fatalf("node %d admitted %d of %d: shares did not follow equal demand (%v)", i, a, lim.Limit, admitted)
		}
	}
}

// One node (no peers) decides a global-approx limit exactly: Limit per
// window.
func TestGlobalOneNodeExact(t *testing.T) {
	now := int64(7000) * int64(time.Second)
	clock := func() time.Time { return time.Unix(0, now) }
	g, _ := NewGlobal(GlobalConfig{Self: "a", Clock: clock})
	lim := Limit{Algorithm: FixedWindow, Limit: 50, Period: time.Second, Scope: ScopeGlobalApprox}
	for w := range 3 {
		got := 0
		for i := range 200 {
			now = int64(7000+w)*int64(time.Second) + int64(i)*int64(time.Millisecond)
			if i%20 == 0 {
				g.Exchange(context.Background())
			}
			s, err := g.CheckMultiContext(context.Background(), []Hit{{Key: "k", Limit: lim, Cost: 1}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if s.Allowed {
				got++
			}
		}
		if got != 50 {
			t.Fatalf("window %d: %d admitted, want 50", w, got)
		}
	}
}

func TestGlobalRejects(t *testing.T) {
	g, _ := NewGlobal(GlobalConfig{Self: "a"})
	own := Limit{Algorithm: FixedWindow, Limit: 5, Period: time.Second}
	if _, err := g.CheckMultiContext(context.Background(), []Hit{{Key: "k", Limit: own, Cost: 1}}, nil); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("owner-scoped limit: %v", err)
	}
	tb := Limit{Algorithm: TokenBucket, Limit: 5, Period: time.Second, Scope: ScopeGlobalApprox}
	if err := tb.Validate(); !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), "fixed_window only") {
		t.Fatalf("token_bucket global-approx: %v", err)
	}
	if _, err := g.Serve("", nil); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("report without node: %v", err)
	}
	gl := Limit{Algorithm: FixedWindow, Limit: 5, Period: time.Second, Scope: ScopeGlobalApprox}
	if _, err := g.Serve("b", []GlobalReport{{Key: "k", Limit: gl, Used: -1}}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("negative usage: %v", err)
	}
}

// A policy's scope round-trips through YAML and JSON, and a router with a
// Global decides global-approx checks on this node even when another
// node owns the key: nothing is forwarded.
func TestPolicyScopeAndRouter(t *testing.T) {
	ps, err := LoadPolicies(strings.NewReader(`policies:
  - name: hot
    match: "hot:*"
    algorithm: fixed_window
    limit: 10
    period: 1s
    scope: global-approx
`))
	if err != nil {
		t.Fatal(err)
	}
	if ps[0].Scope != ScopeGlobalApprox || ps[0].RateLimit().Scope != ScopeGlobalApprox {
		t.Fatalf("scope not loaded: %+v", ps[0])
	}
	b, _ := ps[0].MarshalJSON()
	if !strings.Contains(string(b), `"scope":"global-approx"`) {
		t.Fatalf("JSON %s lacks the scope", b)
	}
	var back Policy
	if err := back.UnmarshalJSON(b); err != nil || back != ps[0] {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	if _, err := LoadPolicies(strings.NewReader("policies:\n  - {name: x, match: '*', algorithm: sliding_window, limit: 1, period: 1s, scope: global-approx}\n")); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("sliding_window global-approx: %v", err)
	}
	if _, err := LoadPolicies(strings.NewReader("policies:\n  - {name: x, match: '*', algorithm: fixed_window, limit: 1, period: 1s, scope: planet}\n")); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("unknown scope: %v", err)
	}

	l := newLimiter(t, nil, append(ps, Policy{Name: "own", Match: "hot:*", Algorithm: FixedWindow, Limit: 10, Period: time.Second})...)
	g, _ := NewGlobal(GlobalConfig{Self: "a"})
	r, err := NewRouter(l, RouterConfig{Owner: func(string) (bool, string) { return false, "127.0.0.1:1" }, Global: g})
	if err != nil {
		t.Fatal(err)
	}
	allowed := 0
	for range 30 {
		s, err := r.CheckMultiContext(context.Background(), []Hit{{Key: "hot:x", Limit: ps[0].RateLimit(), Cost: 1}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if s.Allowed {
			allowed++
		}
	}
	if st := r.Stats(); st.Global != 30 || st.Forwarded+st.Fallback+st.Local != 0 {
		t.Fatalf("stats %+v, want 30 global and nothing else", st)
	}
	if allowed == 0 || allowed > 10 {
		t.Fatalf("%d allowed of limit 10", allowed)
	}
	// Both policies match: the cluster refuses to mix the scopes.
	if _, err := l.AppendPolicyHits(nil, "hot:x", nil, PolicyCost); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CheckMultiContext(context.Background(), must(l.AppendPolicyHits(nil, "hot:x", nil, PolicyCost)), nil); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("mixed scopes: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
