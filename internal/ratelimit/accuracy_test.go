package ratelimit

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// The accuracy test replays synthetic traffic through a Limiter and
// compares every decision with the exact reference (docs/ratelimit.md,
// "Accuracy"):
//
//	reference(r) = allow iff cost(r) + the costs of the requests to the
//	same key that the limiter under test admitted in (t(r)-P, t(r)] <= L
//
// i.e. the sliding-log decision on the history the limiter itself
// produced. A request is a mismatch when the decisions differ: a false
// allow (the limiter admitted, the exact rule would not) or a false deny.

// traffic describes a replay: keys whose mean request rate, as a
// multiple of the limit's rate L/P, is drawn per key from a log-normal
// distribution (median, sigma) or from mix; with bursty set each key
// alternates between on and off periods of mean 2P (twice the rate while
// on, same mean); 5% of requests cost 5, the rest 1.
type traffic struct {
	name          string
	keys          int
	duration      time.Duration
	median, sigma float64
	mix           []rateClass
	bursty        bool
}

type rateClass struct {
	share    float64 // of the keys
	min, max float64 // request rate in multiples of L/P while on
}

type arrival struct {
	at  int64
	key int
}

type arrivals []arrival

func (a arrivals) Len() int           { return len(a) }
func (a arrivals) Less(i, j int) bool { return a[i].at < a[j].at }
func (a arrivals) Swap(i, j int)      { a[i], a[j] = a[j], a[i] }
func (a *arrivals) Push(x any)        { *a = append(*a, x.(arrival)) }
func (a *arrivals) Pop() any {
	old := *a
	x := old[len(old)-1]
	*a = old[:len(old)-1]
	return x
}

type accuracy struct {
	requests, allowed, falseAllow, falseDeny int
}

func (a accuracy) rate() float64 { return float64(a.falseAllow+a.falseDeny) / float64(a.requests) }

func (a accuracy) String() string {
	return fmt.Sprintf("%d requests, %.3f%% allowed, %d false allows + %d false denies = %.4f%% mismatched",
		a.requests, 100*float64(a.allowed)/float64(a.requests), a.falseAllow, a.falseDeny, 100*a.rate())
}

// replay runs tr through a Limiter checking lim and returns the accuracy
// against the exact reference.
func replay(t testing.TB, tr traffic, lim Limit, seed uint64) accuracy {
	rng := rand.New(rand.NewPCG(seed, 7))
	clk := newFakeClock()
	l := newLimiter(t, clk.Now)
	p := int64(lim.Period)
	base := float64(lim.Limit) / float64(p) // requests per ns at 1x
	type keyState struct {
		name     string
		rate     float64 // per ns while on
		on       bool
		switchAt int64
		log      []int64 // admitted: time, cost, time, cost, ... (the reference)
		head     int
		used     int64 // cost of log[head:]
	}
	start := clk.Now().UnixNano()
	end := start + int64(tr.duration)
	keys := make([]keyState, tr.keys)
	h := &arrivals{}
	for i := range keys {
		var mult float64
		if tr.mix == nil {
			mult = tr.median * math.Exp(tr.sigma*rng.NormFloat64())
		} else {
			x := rng.Float64()
			c := tr.mix[len(tr.mix)-1]
			for _, rc := range tr.mix {
				if x < rc.share {
					c = rc
					break
				}
				x -= rc.share
			}
			mult = c.min + rng.Float64()*(c.max-c.min)
		}
		k := &keys[i]
		k.name = fmt.Sprintf("client:%d", i)
		k.rate = base * mult / 1.2 // 5% cost 5: mean cost 1.2
		k.on = true
		if tr.bursty {
			k.rate *= 2
			k.on = rng.IntN(2) == 0
		}
		k.switchAt = start + int64(rng.ExpFloat64()*float64(2*p))
		heap.Push(h, arrival{start + int64(rng.ExpFloat64()/k.rate), i})
	}
	var acc accuracy
	for h.Len() > 0 {
		a := heap.Pop(h).(arrival)
		if a.at >= end {
			continue
		}
		k := &keys[a.key]
		next := a.at + int64(rng.ExpFloat64()/k.rate)
		for tr.bursty && k.switchAt <= a.at { // on/off periods of mean 2P
			k.on = !k.on
			k.switchAt += int64(rng.ExpFloat64() * float64(2*p))
		}
		heap.Push(h, arrival{next, a.key})
		if !k.on {
			continue
		}
		cost := int64(1)
		if rng.IntN(20) == 0 {
			cost = 5
		}
		clk.Set(time.Unix(0, a.at))
		s := mustCheck(t, l, k.name, lim, cost)
		// The exact reference on the admitted history.
		for k.head < len(k.log) && k.log[k.head] <= a.at-p {
			k.used -= k.log[k.head+1]
			k.head += 2
		}
		exact := k.used+cost <= lim.Limit
		if s.Allowed {
			acc.allowed++
			k.log = append(k.log, a.at, cost)
			k.used += cost
		}
		acc.requests++
		switch {
		case s.Allowed && !exact:
			acc.falseAllow++
		case !s.Allowed && exact:
			acc.falseDeny++
		}
		if k.head > 1024 && k.head > len(k.log)/2 {
			k.log = append(k.log[:0], k.log[k.head:]...)
			k.head = 0
		}
	}
	return acc
}

// TestSlidingWindowAccuracy measures the sliding window counter (100 per
// minute) against the exact sliding log on several replays and logs the
// table that docs/ratelimit.md quotes. The mismatch rate depends on how
// much traffic runs near its limit: the goal (below 0.01%) holds
// for keys below about half their limit and is asserted there; for the
// other replays the assertions are regression bounds (about 2x the
// measured rate). The sliding log itself must match the reference
// exactly.
func TestSlidingWindowAccuracy(t *testing.T) {
	if testing.Short() {
		t.Skip("replays millions of requests")
	}
	scale := 1
	if raceEnabled {
		scale = 5 // the race detector makes the replay ~10x slower
	}
	lim := Limit{Algorithm: SlidingWindow, Limit: 100, Period: time.Minute}
	steady := func(rate float64) []rateClass { return []rateClass{{1, rate, rate}} }
	for _, c := range []struct {
		tr      traffic
		atMost  float64 // mismatch rate
		isGoal  bool
		skipRce bool
	}{
		{traffic{name: "steady, every key at 0.5x its limit", keys: 1000, duration: 20 * time.Minute, mix: steady(0.5)}, 0.0001, true, false},
		{traffic{name: "log-normal rates, median 0.02x, sigma 0.5, bursty", keys: 10000, duration: 20 * time.Minute, median: 0.02, sigma: 0.5, bursty: true}, 0.0001, true, false},
		{traffic{name: "log-normal rates, median 0.01x, sigma 1, bursty", keys: 10000, duration: 20 * time.Minute, median: 0.01, sigma: 1, bursty: true}, 0.002, false, false},
		{traffic{name: "log-normal rates, median 0.02x, sigma 1, bursty", keys: 10000, duration: 20 * time.Minute, median: 0.02, sigma: 1, bursty: true}, 0.01, false, true},
		{traffic{name: "steady, every key at 1x its limit", keys: 100, duration: 20 * time.Minute, mix: steady(1)}, 0.25, false, true},
		{traffic{name: "bursty, every key at 2x its limit", keys: 100, duration: 20 * time.Minute, mix: steady(2), bursty: true}, 0.8, false, true},
	} {
		if raceEnabled && c.skipRce {
			continue
		}
		tr := c.tr
		tr.keys /= scale
		acc := replay(t, tr, lim, 1)
		t.Logf("%-55s %v", tr.name+":", acc)
		if acc.requests < 10000 {
			t.Errorf("%s: only %d requests replayed", tr.name, acc.requests)
		}
		if acc.rate() > c.atMost {
			what := "regression bound"
			if c.isGoal {
				what = "goal"
			}
			t.Errorf("%s: mismatch rate %.4f%% above the %s %.4f%%", tr.name, 100*acc.rate(), what, 100*c.atMost)
		}
	}
	exact := replay(t, traffic{name: "log-normal, median 0.05x, sigma 1.5, bursty", keys: 1000 / scale, duration: 10 * time.Minute,
		median: 0.05, sigma: 1.5, bursty: true}, Limit{Algorithm: SlidingLog, Limit: 100, Period: time.Minute}, 3)
	t.Logf("sliding_log on log-normal median 0.05x sigma 1.5 bursty: %v", exact)
	if exact.falseAllow+exact.falseDeny != 0 || exact.allowed == exact.requests {
		t.Errorf("sliding_log is not exact (or never limited): %v", exact)
	}
}
