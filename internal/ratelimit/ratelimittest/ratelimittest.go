// Package ratelimittest holds what the tests of internal/ratelimit and of
// its front ends (internal/api/ratelimitapi) share: a settable clock and
// the example policies of docs/ratelimit.md. It imports nothing of the
// project, so the ratelimit package's own tests can use it.
package ratelimittest

import (
	"sync"
	"time"
)

// Clock is a settable clock for ratelimit.Config.Clock, safe for
// concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock at 2025-01-01 00:00 UTC.
func NewClock() *Clock {
	return &Clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Set sets the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// ExamplePolicies is a policy file with every kind of rule: a final
// override, two limits on one match, and a namespace rule with a cost.
const ExamplePolicies = `
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
