package ratelimit

import (
	"testing"
	"time"

	"github.com/counterd/counterd/internal/ratelimit/ratelimittest"
)

// fakeClock is a settable clock for Config.Clock.
type fakeClock = ratelimittest.Clock

var newFakeClock = ratelimittest.NewClock

// newLimiter returns a Limiter on clock (nil: the default clock) without
// a janitor, closed when the test ends.
func newLimiter(t testing.TB, clock func() time.Time, ps ...Policy) *Limiter {
	t.Helper()
	l, err := New(Config{Clock: clock, EvictInterval: -1, Policies: ps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func mustCheck(t testing.TB, l *Limiter, key string, lim Limit, cost int64) Status {
	t.Helper()
	s, err := l.Check(key, lim, cost)
	if err != nil {
		t.Fatalf("Check(%q, %v, %d): %v", key, lim, cost, err)
	}
	return s
}

// newCheckAnswer is NewCheckAnswer (the router tests' name for it).
var newCheckAnswer = NewCheckAnswer
