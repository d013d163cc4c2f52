package ratelimit

import (
	"errors"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// t0 is aligned to every period used below (a multiple of 1 day since the
// epoch).
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

type step struct {
	at   time.Duration // since t0
	cost int64
	want Status
}

func runSteps(t *testing.T, lim Limit, steps []step) {
	t.Helper()
	clk := newFakeClock()
	l := newLimiter(t, clk.Now)
	for i, s := range steps {
		clk.Set(t0.Add(s.at))
		got := mustCheck(t, l, "k", lim, s.cost)
		if got != s.want {
			t.Errorf("step %d (at %v, cost %d):\n got %+v\nwant %+v", i, s.at, s.cost, got, s.want)
		}
	}
}

func TestFixedWindow(t *testing.T) {
	lim := Limit{Algorithm: FixedWindow, Limit: 3, Period: 10 * time.Second}
	s := time.Second
	runSteps(t, lim, []step{
		{1 * s, 1, Status{Allowed: true, Limit: 3, Remaining: 2, Reset: 9 * s}},
		{2 * s, 2, Status{Allowed: true, Limit: 3, Remaining: 0, Reset: 8 * s}},
		{3 * s, 1, Status{Limit: 3, Remaining: 0, Reset: 7 * s, RetryAfter: 7 * s}},
		{3 * s, 0, Status{Limit: 3, Remaining: 0, Reset: 7 * s, RetryAfter: 7 * s}}, // a query
		{10 * s, 1, Status{Allowed: true, Limit: 3, Remaining: 2, Reset: 10 * s}},
		// The documented boundary burst: 3 at the end of a window, 3 at the start of the next.
		{20*s - 1, 2, Status{Allowed: true, Limit: 3, Remaining: 0, Reset: 1}},
		{20 * s, 3, Status{Allowed: true, Limit: 3, Remaining: 0, Reset: 10 * s}},
	})
}

func TestSlidingWindow(t *testing.T) {
	lim := Limit{Algorithm: SlidingWindow, Limit: 10, Period: 10 * time.Second}
	s := time.Second
	runSteps(t, lim, []step{
		{5 * s, 10, Status{Allowed: true, Limit: 10, Remaining: 0, Reset: 15 * s}},
		// Denied; at 11s the previous window weighs 9/10 of its 10 hits:
		// 9 + 1 <= 10 passes, 1ns earlier it weighs a bit more than 9.
		{5 * s, 1, Status{Limit: 10, Remaining: 0, Reset: 15 * s, RetryAfter: 6 * s}},
		{11*s - 1, 1, Status{Limit: 10, Remaining: 0, Reset: 9*s + 1, RetryAfter: 1}},
		{11 * s, 1, Status{Allowed: true, Limit: 10, Remaining: 0, Reset: 19 * s}},
		// At 15s: prev 10 * 0.5 = 5, cur 1: room 4.
		{15 * s, 4, Status{Allowed: true, Limit: 10, Remaining: 0, Reset: 15 * s}},
		// At 30s both windows are gone.
		{30 * s, 0, Status{Allowed: true, Limit: 10, Remaining: 10}},
	})
}

func TestSlidingLog(t *testing.T) {
	lim := Limit{Algorithm: SlidingLog, Limit: 3, Period: 10 * time.Second}
	s := time.Second
	runSteps(t, lim, []step{
		{1 * s, 1, Status{Allowed: true, Limit: 3, Remaining: 2, Reset: 10 * s}},
		{2 * s, 1, Status{Allowed: true, Limit: 3, Remaining: 1, Reset: 10 * s}},
		{3 * s, 1, Status{Allowed: true, Limit: 3, Remaining: 0, Reset: 10 * s}},
		{4 * s, 1, Status{Limit: 3, Remaining: 0, Reset: 9 * s, RetryAfter: 7 * s}},
		{4 * s, 2, Status{Limit: 3, Remaining: 0, Reset: 9 * s, RetryAfter: 8 * s}},
		// The hit at 1s counts for (1s, 11s]: at 11s it is out.
		{11*s - 1, 1, Status{Limit: 3, Remaining: 0, Reset: 2*s + 1, RetryAfter: 1}},
		{11 * s, 1, Status{Allowed: true, Limit: 3, Remaining: 0, Reset: 10 * s}},
		{15 * s, 0, Status{Allowed: true, Limit: 3, Remaining: 2, Reset: 6 * s}},
		{25 * s, 0, Status{Allowed: true, Limit: 3, Remaining: 3}},
	})
}

func TestTokenBucket(t *testing.T) {
	// 10/s: one token every 100ms; bucket of 5.
	lim := Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second, Burst: 5}
	ms := time.Millisecond
	runSteps(t, lim, []step{
		{0, 1, Status{Allowed: true, Limit: 10, Remaining: 4, Reset: 100 * ms}},
		{0, 4, Status{Allowed: true, Limit: 10, Remaining: 0, Reset: 500 * ms}},
		{0, 1, Status{Limit: 10, Remaining: 0, Reset: 500 * ms, RetryAfter: 100 * ms}},
		{50 * ms, 1, Status{Limit: 10, Remaining: 0, Reset: 450 * ms, RetryAfter: 50 * ms}},
		{100 * ms, 1, Status{Allowed: true, Limit: 10, Remaining: 0, Reset: 500 * ms}},
		{350 * ms, 0, Status{Allowed: true, Limit: 10, Remaining: 2, Reset: 250 * ms}},
		{2 * time.Second, 5, Status{Allowed: true, Limit: 10, Remaining: 0, Reset: 500 * ms}},
	})
}

func TestLeakyBucket(t *testing.T) {
	// Drains 10/s (one per 100ms) from a queue of 3.
	lim := Limit{Algorithm: LeakyBucket, Limit: 10, Period: time.Second, Burst: 3}
	ms := time.Millisecond
	runSteps(t, lim, []step{
		{0, 1, Status{Allowed: true, Limit: 10, Remaining: 2, Reset: 100 * ms}},
		{0, 1, Status{Allowed: true, Limit: 10, Remaining: 1, Reset: 200 * ms, Delay: 100 * ms}},
		{0, 1, Status{Allowed: true, Limit: 10, Remaining: 0, Reset: 300 * ms, Delay: 200 * ms}},
		{0, 1, Status{Limit: 10, Remaining: 0, Reset: 300 * ms, RetryAfter: 100 * ms}},
		{150 * ms, 1, Status{Allowed: true, Limit: 10, Remaining: 0, Reset: 250 * ms, Delay: 150 * ms}},
	})
}

func TestCheckErrors(t *testing.T) {
	l := newLimiter(t, newFakeClock().Now)
	ok := Limit{Algorithm: FixedWindow, Limit: 5, Period: time.Second}
	for _, c := range []struct {
		name string
		key  string
		lim  Limit
		cost int64
		want error
	}{
		{"empty key", "", ok, 1, ErrInvalidKey},
		{"long key", string(make([]byte, MaxKeyLen+1)), ok, 1, ErrInvalidKey},
		{"negative cost", "k", ok, -1, ErrInvalidCost},
		{"cost above limit", "k", ok, 6, ErrInvalidCost},
		{"cost above burst", "k", Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second, Burst: 2}, 3, ErrInvalidCost},
		{"no algorithm", "k", Limit{Limit: 1, Period: time.Second}, 1, ErrInvalidLimit},
		{"zero limit", "k", Limit{Algorithm: FixedWindow, Period: time.Second}, 1, ErrInvalidLimit},
		{"huge limit", "k", Limit{Algorithm: FixedWindow, Limit: MaxLimit + 1, Period: time.Second}, 1, ErrInvalidLimit},
		{"short period", "k", Limit{Algorithm: FixedWindow, Limit: 1, Period: time.Microsecond}, 1, ErrInvalidLimit},
		{"long period", "k", Limit{Algorithm: FixedWindow, Limit: 1, Period: MaxPeriod + 1}, 1, ErrInvalidLimit},
		{"burst on window", "k", Limit{Algorithm: SlidingWindow, Limit: 1, Period: time.Second, Burst: 2}, 1, ErrInvalidLimit},
		{"log too long", "k", Limit{Algorithm: SlidingLog, Limit: MaxLogLimit + 1, Period: time.Second}, 1, ErrInvalidLimit},
		{"faster than 1/ns", "k", Limit{Algorithm: TokenBucket, Limit: 2e6, Period: time.Millisecond}, 1, ErrInvalidLimit},
		{"burst too long", "k", Limit{Algorithm: TokenBucket, Limit: 1, Period: MaxPeriod, Burst: MaxLimit}, 1, ErrInvalidLimit},
	} {
		if _, err := l.Check(c.key, c.lim, c.cost); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
	if n := l.Len(); n != 0 {
		t.Errorf("failed checks left %d entries", n)
	}
}

func TestParseAlgorithm(t *testing.T) {
	for a := FixedWindow; a <= LeakyBucket; a++ {
		got, err := ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a.String(), got, err)
		}
		b, err := a.MarshalText()
		if err != nil || string(b) != a.String() {
			t.Errorf("MarshalText(%v) = %q, %v", a, b, err)
		}
	}
	if a, err := ParseAlgorithm("gcra"); err != nil || a != TokenBucket {
		t.Errorf("gcra: %v, %v", a, err)
	}
	if _, err := ParseAlgorithm("nope"); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("unknown algorithm: %v", err)
	}
}

// sim runs one limit on its own state, without a Limiter, so that tests
// can clone it to probe the future.
type sim struct {
	sp spec
	st state
	g  *hitLog
}

func newSim(t testing.TB, lim Limit) *sim {
	sp, err := lim.spec()
	if err != nil {
		t.Fatal(err)
	}
	return &sim{sp: sp, st: freshState, g: new(hitLog)}
}

func (m *sim) check(now, cost int64) Status {
	if m.sp.alg == SlidingLog {
		s := m.sp.decideLog(m.g, now, cost)
		if s.Allowed && cost > 0 {
			m.g.push(now, cost)
		}
		return s
	}
	s, next := m.sp.decide(&m.st, now, cost)
	if s.Allowed {
		m.st = next
	}
	return s
}

func (m *sim) clone() *sim {
	c := *m
	g := *m.g
	g.ts = append([]int64(nil), m.g.ts...)
	g.n = append([]int64(nil), m.g.n...)
	c.g = &g
	return &c
}

// checkPromises verifies what status s of a hit (now, cost) promises about
// the future, given no other hits: a denied hit passes exactly RetryAfter
// later (not 1ns earlier), and the state is back to full capacity exactly
// Reset later. pre is the state before the hit, post after it.
func checkPromises(t *testing.T, pre, post *sim, now, cost int64, s Status) {
	t.Helper()
	m := pre
	if !s.Allowed {
		if s.RetryAfter <= 0 {
			t.Fatalf("denied with RetryAfter %v", s.RetryAfter)
		}
		at := now + int64(s.RetryAfter)
		if got := m.clone().check(at, cost); !got.Allowed {
			t.Fatalf("at now %d cost %d: denied with RetryAfter %v, but still denied then: %+v", now, cost, s.RetryAfter, got)
		}
		if got := m.clone().check(at-1, cost); got.Allowed {
			t.Fatalf("at now %d cost %d: denied with RetryAfter %v, but allowed 1ns earlier", now, cost, s.RetryAfter)
		}
	} else if s.RetryAfter != 0 {
		t.Fatalf("allowed with RetryAfter %v", s.RetryAfter)
	}
	m = post
	full := m.sp.capacity()
	at := now + int64(s.Reset)
	if got := m.clone().check(at, 0); got.Remaining != full {
		t.Fatalf("at now %d: Reset %v, but remaining %d (not %d) then", now, s.Reset, got.Remaining, full)
	}
	if s.Reset > 0 {
		if got := m.clone().check(at-1, 0); got.Remaining == full {
			t.Fatalf("at now %d: Reset %v, but already full 1ns earlier", now, s.Reset)
		}
	}
}

// Reference models: straightforward and independent of the
// implementation's tricks (no windows-by-index ring, no GCRA).

type refFixed struct {
	lim    int64
	period int64
	counts map[int64]int64
}

func (r *refFixed) check(now, cost int64) (bool, int64) {
	w := floorDiv(now, r.period)
	ok := r.counts[w]+max(cost, 1) <= r.lim
	if ok {
		r.counts[w] += cost
	}
	return ok, r.lim - r.counts[w]
}

// refLog is also the exact reference of the accuracy test.
type refLog struct {
	lim, period int64
	ts, n       []int64
}

func (r *refLog) used(now int64) int64 {
	var u int64
	for i, ts := range r.ts {
		if ts > now-r.period {
			u += r.n[i]
		}
	}
	return u
}

func (r *refLog) check(now, cost int64) (bool, int64) {
	u := r.used(now)
	ok := u+max(cost, 1) <= r.lim
	if ok && cost > 0 {
		r.ts, r.n = append(r.ts, now), append(r.n, cost)
		u += cost
	}
	return ok, r.lim - u
}

// refSliding decides the weighted two-window estimate in exact rationals.
type refSliding struct {
	lim, period int64
	counts      map[int64]int64
}

func (r *refSliding) check(now, cost int64) (bool, int64) {
	w := floorDiv(now, r.period)
	e := now - w*r.period
	// usage = prev*(p-e)/p + cur
	usage := new(big.Rat)
	prev := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(r.counts[w-1]), big.NewInt(r.period-e)), big.NewInt(r.period))
	usage.Add(prev, big.NewRat(r.counts[w], 1))
	need := new(big.Rat).Add(usage, big.NewRat(max(cost, 1), 1))
	ok := need.Cmp(big.NewRat(r.lim, 1)) <= 0
	if ok {
		r.counts[w] += cost
		usage.Add(usage, big.NewRat(cost, 1))
	}
	// remaining = floor(lim - usage)
	rem := new(big.Rat).Sub(big.NewRat(r.lim, 1), usage)
	q := new(big.Int).Div(rem.Num(), rem.Denom()) // floor for positive denominators
	return ok, max(q.Int64(), 0)
}

// refBucket is a classic token bucket counted in nanoseconds of credit:
// credit refills one ns per ns up to burst*t, a unit costs t.
type refBucket struct {
	t, tol       int64
	credit, last int64
	started      bool
}

func (r *refBucket) check(now, cost int64) (bool, int64) {
	if !r.started {
		r.credit, r.started = r.tol, true
	} else {
		r.credit = min(r.tol, r.credit+(now-r.last))
	}
	r.last = now
	ok := r.credit >= max(cost, 1)*r.t
	if ok {
		r.credit -= cost * r.t
	}
	return ok, r.credit / r.t
}

type refModel interface {
	check(now, cost int64) (bool, int64)
}

func TestAlgorithmsMatchReferences(t *testing.T) {
	limits := []Limit{
		{Algorithm: FixedWindow, Limit: 7, Period: 10 * time.Millisecond},
		{Algorithm: SlidingWindow, Limit: 7, Period: 10 * time.Millisecond},
		{Algorithm: SlidingWindow, Limit: 1, Period: 3 * time.Millisecond},
		{Algorithm: SlidingLog, Limit: 7, Period: 10 * time.Millisecond},
		{Algorithm: TokenBucket, Limit: 7, Period: 10 * time.Millisecond},
		{Algorithm: TokenBucket, Limit: 3, Period: 10 * time.Millisecond, Burst: 9},
		{Algorithm: LeakyBucket, Limit: 7, Period: 10 * time.Millisecond, Burst: 2},
	}
	for _, lim := range limits {
		t.Run(lim.DisplayName()+"-burst"+formatPeriod(time.Duration(lim.Burst)), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(lim.Limit)))
			m := newSim(t, lim)
			var ref refModel
			p := int64(lim.Period)
			switch lim.Algorithm {
			case FixedWindow:
				ref = &refFixed{lim: lim.Limit, period: p, counts: map[int64]int64{}}
			case SlidingWindow:
				ref = &refSliding{lim: lim.Limit, period: p, counts: map[int64]int64{}}
			case SlidingLog:
				ref = &refLog{lim: lim.Limit, period: p}
			default:
				ref = &refBucket{t: m.sp.t, tol: m.sp.tol}
			}
			now := t0.UnixNano()
			allowed := 0
			for i := range 20000 {
				// Bursts, trickles and long gaps.
				switch rng.IntN(10) {
				case 0:
					now += rng.Int64N(3 * p)
				case 1, 2, 3:
				default:
					now += rng.Int64N(p / 4)
				}
				cost := rng.Int64N(min(m.sp.capacity(), 3) + 1)
				var pre *sim
				if i%7 == 0 {
					pre = m.clone()
				}
				s := m.check(now, cost)
				ok, rem := ref.check(now, cost)
				if s.Allowed != ok || s.Remaining != rem {
					t.Fatalf("step %d at +%dns cost %d: got allowed %v remaining %d, reference %v %d",
						i, now-t0.UnixNano(), cost, s.Allowed, s.Remaining, ok, rem)
				}
				if s.Allowed {
					allowed++
				}
				if pre != nil {
					checkPromises(t, pre, m, now, cost, s)
				}
			}
			if allowed == 0 || allowed == 20000 {
				t.Fatalf("degenerate traffic: %d allowed", allowed)
			}
		})
	}
}

func TestSlidingRetryLargeNumbers(t *testing.T) {
	// Products above 2^64 (limit * period in ns) must not overflow.
	lim := Limit{Algorithm: SlidingWindow, Limit: 1 << 39, Period: 300 * 24 * time.Hour}
	m := newSim(t, lim)
	now := t0.UnixNano()
	if s := m.check(now, 1<<39); !s.Allowed {
		t.Fatal("first hit denied")
	}
	now += int64(lim.Period) / 3
	pre := m.clone()
	s := m.check(now, 1<<38)
	if s.Allowed {
		t.Fatal("second hit allowed")
	}
	checkPromises(t, pre, m, now, 1<<38, s)
}
