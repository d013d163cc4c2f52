package ratelimitapi

import (
	"strings"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/ratelimit/ratelimittest"
)

// The test helpers of internal/ratelimit, for the front ends' tests.

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeClock is a settable clock for Config.Clock.
type fakeClock = ratelimittest.Clock

var newFakeClock = ratelimittest.NewClock

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

const examplePolicies = ratelimittest.ExamplePolicies
