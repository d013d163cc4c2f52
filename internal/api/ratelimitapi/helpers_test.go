package ratelimitapi

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/ratelimit"
)

// The test helpers of internal/ratelimit, for the front ends' tests.

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeClock is a settable clock for Config.Clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// newLimiter returns a Limiter on clock (nil: the default clock) without
// a janitor, closed when the test ends.
func newLimiter(t testing.TB, clock func() time.Time, ps ...ratelimit.Policy) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(ratelimit.Config{Clock: clock, EvictInterval: -1, Policies: ps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func mustCheck(t testing.TB, l *ratelimit.Limiter, key string, lim ratelimit.Limit, cost int64) ratelimit.Status {
	t.Helper()
	s, err := l.Check(key, lim, cost)
	if err != nil {
		t.Fatalf("Check(%q, %v, %d): %v", key, lim, cost, err)
	}
	return s
}

// args splits RL.CHECK's arguments.
func args(s string) [][]byte {
	var a [][]byte
	for _, f := range strings.Fields(s) {
		a = append(a, []byte(f))
	}
	return a
}

var all3 = []int{0, 1, 2}

const examplePolicies = `
policies:
  - name: vip-acme
    match: "api:acme:*"
    algorithm: token_bucket
    limit: 1000
    period: 1s
    final: true
  - name: api-per-second
    match: "api:*"
    algorithm: token_bucket
    limit: 10
    period: 1s
    burst: 20
  - name: api-per-day
    match: "api:*"
    algorithm: fixed_window
    limit: 10000
    period: 24h
  - name: uploads
    namespace: upload
    algorithm: sliding_window
    limit: 100
    period: 1m
    cost: 10
`
