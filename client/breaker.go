package client

import (
	"errors"
	"sync"
	"time"
)

// ErrCircuitOpen is returned by a Cluster call when the circuit breaker of
// every node that could serve it is open: the call fails fast instead of
// waiting for nodes that just failed.
var ErrCircuitOpen = errors.New("client: circuit breaker open for every node")

// BreakerState is the state of a node's circuit breaker.
type BreakerState int

const (
	// BreakerClosed: requests flow; consecutive failures are counted.
	BreakerClosed BreakerState = iota
	// BreakerOpen: the node failed the threshold number of times in a
	// row; no request is sent to it until the cool-down has passed.
	BreakerOpen
	// BreakerHalfOpen: the cool-down has passed; one probe request is in
	// flight (or may be sent). Its success closes the breaker, its failure
	// opens it for another cool-down.
	BreakerHalfOpen
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return "unknown"
}

// Defaults of WithBreaker.
const (
	DefaultBreakerThreshold = 5
	DefaultBreakerCooldown  = 5 * time.Second
)

// breaker is one node's circuit breaker (seed 004's CounterCircuitBreaker):
// closed until threshold consecutive failures, then open for cooldown,
// then half-open with a single probe. It is safe for concurrent use.
type breaker struct {
	threshold int
	cooldown  time.Duration
	now       func() time.Time

	mu       sync.Mutex // guards the fields below
	state    BreakerState
	failures int       // consecutive, while closed
	openedAt time.Time // when it last opened
	probing  bool      // half-open: the probe is in flight
}

func newBreaker(threshold int, cooldown time.Duration, now func() time.Time) *breaker {
	return &breaker{threshold: threshold, cooldown: cooldown, now: now}
}

// allow reports whether a request may be sent now. In the half-open state
// it admits one probe; the caller must then report success, failure or
// release.
func (b *breaker) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerOpen:
		if b.now().Sub(b.openedAt) < b.cooldown {
			return false
		}
		b.state, b.probing = BreakerHalfOpen, true
		return true
	case BreakerHalfOpen:
		if b.probing {
			return false
		}
		b.probing = true
		return true
	}
	return true
}

// success records an answer from the node: the breaker closes.
func (b *breaker) success() {
	b.mu.Lock()
	b.state, b.failures, b.probing = BreakerClosed, 0, false
	b.mu.Unlock()
}

// failure records a connection error or a 5xx answer.
func (b *breaker) failure() {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		if b.failures++; b.failures >= b.threshold {
			b.state, b.openedAt = BreakerOpen, b.now()
		}
	case BreakerHalfOpen:
		b.state, b.openedAt, b.probing = BreakerOpen, b.now(), false
	}
	// Open: a request sent before the breaker opened; nothing to change.
}

// release records a request that ended without telling anything about
// the node (the caller gave up): a half-open breaker may probe again.
func (b *breaker) release() {
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

// current returns the state, with an open breaker whose cool-down has
// passed reported as half-open.
func (b *breaker) current() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == BreakerOpen && b.now().Sub(b.openedAt) >= b.cooldown {
		return BreakerHalfOpen
	}
	return b.state
}
