package shed

import (
	"sync"
	"time"
)

// Pacer bounds how fast one client can make the node answer "overloaded".
// A shed answer is cheap but not free: reading the request and writing
// the answer cost about as many system calls as serving it, so a client
// that retries at once on thousands of connections would keep every core
// busy with refusals, and requests of other clients would wait behind
// them in the scheduler. Each client (IP address) has Rate shed answers
// a second (a token bucket with a burst of Rate/10); beyond them, the
// connection that was just refused is not read again for a while (Pause
// says how long, at most maxPause). Its next request waits in its socket, costing the node nothing,
// and is then answered like any other.
type Pacer struct {
	rate     float64
	burst    float64
	maxPause time.Duration

	mu      sync.Mutex
	clients map[Key]*pace
}

type pace struct {
	tokens float64
	last   time.Time
}

// NewPacer returns a Pacer allowing rate shed answers a second per
// client and pausing a connection at most maxPause. rate <= 0: no pacing.
func NewPacer(rate float64, maxPause time.Duration) *Pacer {
	if rate <= 0 {
		return nil
	}
	return &Pacer{rate: rate, burst: max(1, rate/10), maxPause: maxPause, clients: map[Key]*pace{}}
}

// maxPaceClients bounds the clients remembered; idle ones are dropped
// beyond it.
const maxPaceClients = 4096

// Pause counts one shed answer to client and returns how long the
// connection that got it should not be read (0: at once). Safe on a nil
// Pacer (no pacing).
func (p *Pacer) Pause(client Key) time.Duration {
	if p == nil {
		return 0
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.clients[client]
	if c == nil {
		if len(p.clients) >= maxPaceClients {
			p.forgetIdle(now)
			if len(p.clients) >= maxPaceClients {
				return 0 // too many clients in debt to track: not paced
			}
		}
		c = &pace{tokens: p.burst, last: now}
		p.clients[client] = c
	}
	c.tokens = min(p.burst, c.tokens+now.Sub(c.last).Seconds()*p.rate)
	c.last = now
	// Reserve a token even when there is none: the debt spreads the
	// pauses of many connections over time instead of waking them all
	// together. It is bounded so a long flood does not pause for ever.
	c.tokens = max(c.tokens-1, -p.rate*p.maxPause.Seconds())
	if c.tokens >= 0 {
		return 0
	}
	return min(p.maxPause, time.Duration(-c.tokens/p.rate*float64(time.Second)))
}

// forgetIdle drops clients whose bucket is full again (no debt to
// remember). Under mu.
func (p *Pacer) forgetIdle(now time.Time) {
	for k, c := range p.clients {
		if c.tokens+now.Sub(c.last).Seconds()*p.rate >= p.burst {
			delete(p.clients, k)
		}
	}
}
