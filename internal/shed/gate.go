package shed

import (
	"sync"
	"sync/atomic"
)

// Gate bounds how many connections of one client have a request in hand
// (read, and not yet answered) at once, while the node is overloaded.
//
// Under overload most of a request's wait is in front of admission: in
// its socket and in the Go scheduler's run queue, which are first in,
// first out. A client flooding the node on thousands of connections
// keeps thousands of goroutines runnable, each serving a request when it
// runs, and the request of another client waits behind all of them,
// whatever Fair decides once it gets there. A Gate moves the flood's
// excess out of the run queue: a connection of a client that has Max
// requests in hand is parked before it reads its next request (Wait),
// on a channel rather than in the network poller, so the bytes its
// client sends stay in the socket and its goroutine is not woken by
// them. A request in hand that finishes (Give) passes its permit to the
// client's oldest parked connection, so the client's connections take
// turns, Max at a time, and the run queue holds at most Max requests of
// any one client.
//
// A permit is held only by a connection with a request in hand: a
// parked connection that is handed one and finds its socket empty (an
// idle connection of a pool) gives it back and waits in the poller
// without one (Take then admits or parks it once its request arrives),
// so idle connections never hold a client's turns.
//
// The gate parks only while the node is overloaded (the overload
// function: requests shed or waiting long in their sockets recently) or
// some client still has connections waiting for a permit; otherwise a
// client may have any number of requests in hand, as a pool that waits
// on I/O does.
//
// Safe for concurrent use. A nil *Gate parks nothing.
type Gate struct {
	max      int
	overload func() bool

	mu      sync.Mutex
	clients map[Key]*gateClient
	waiting atomic.Int64 // connections parked, all clients
}

type gateClient struct {
	held int // permits held: requests in hand
	// waiters is a FIFO from head; a cancelled waiter leaves a nil
	// behind. n counts the live ones. (A flood parks thousands: a
	// shift per handoff would copy them all.)
	waiters []*GateWaiter
	head, n int
}

func (c *gateClient) push(w *GateWaiter) {
	if c.head > 0 && c.head >= len(c.waiters)/2 { // compact, amortised
		k := copy(c.waiters, c.waiters[c.head:])
		clear(c.waiters[k:])
		c.waiters, c.head = c.waiters[:k], 0
	}
	c.waiters = append(c.waiters, w)
	c.n++
}

// remove takes w out of the queue, leaving a hole that pop skips.
func (c *gateClient) remove(w *GateWaiter) {
	for i := c.head; i < len(c.waiters); i++ {
		if c.waiters[i] == w {
			c.waiters[i] = nil
			c.n--
			return
		}
	}
}

// pop returns the oldest live waiter (c.n > 0).
func (c *gateClient) pop() *GateWaiter {
	for {
		w := c.waiters[c.head]
		c.waiters[c.head] = nil
		c.head++
		if w != nil {
			c.n--
			if c.n == 0 {
				c.waiters, c.head = c.waiters[:0], 0
			}
			return w
		}
	}
}

// GateWaiter is one connection's place at a Gate; the zero value is
// ready to use, and a connection reuses its own for every request. It
// must not be copied after first use.
type GateWaiter struct {
	ch     chan bool // true: handed a permit; false: cancelled
	queued bool      // in its client's waiters (under Gate.mu)
	key    Key
}

// NewGate returns a Gate of max requests in hand per client while
// overloaded (nil for max <= 0: no gate). overload reports whether the
// node is overloaded now; it is called often and must be cheap.
func NewGate(max int, overload func() bool) *Gate {
	if max <= 0 {
		return nil
	}
	return &Gate{max: max, overload: overload, clients: map[Key]*gateClient{}}
}

// Max returns the requests in hand one client may have while the gate
// parks.
func (g *Gate) Max() int { return g.max }

// Waiting returns how many connections are parked now.
func (g *Gate) Waiting() int {
	if g == nil {
		return 0
	}
	return int(g.waiting.Load())
}

// engaged reports whether the gate parks now.
func (g *Gate) engaged() bool {
	return g.waiting.Load() > 0 || g.overload != nil && g.overload()
}

// Wait is called by a connection of client about to read its next
// request, holding no permit. When the gate parks and client has its
// Max requests in hand (or connections parked already), Wait parks the
// connection until it is handed a permit and returns true: it holds one,
// and must Give it back (if its socket is empty, at once). Otherwise it
// returns false at once: the connection reads without a permit and calls
// Take when its request is in. It also returns false when Cancel ended
// the wait.
func (g *Gate) Wait(client Key, w *GateWaiter) bool {
	if g == nil || !g.engaged() {
		return false
	}
	g.mu.Lock()
	c := g.clients[client]
	if c == nil || c.held < g.max && c.n == 0 {
		g.mu.Unlock()
		return false
	}
	return g.park(c, client, w)
}

// Take counts a request of client just read, by a connection that holds
// no permit. When the gate parks and client has Max requests in hand
// already, it waits for a permit first, after the client's connections
// parked before it (parked reports that it did). ok is false only when
// Cancel ended the wait (no permit held then).
func (g *Gate) Take(client Key, w *GateWaiter) (ok, parked bool) {
	if g == nil {
		return true, false
	}
	g.mu.Lock()
	c := g.clients[client]
	if c == nil {
		c = &gateClient{}
		g.clients[client] = c
	}
	if c.held < g.max && c.n == 0 || !g.engaged() {
		c.held++
		g.mu.Unlock()
		return true, false
	}
	return g.park(c, client, w), true
}

// park queues w behind client's waiters and blocks until it is handed a
// permit (true) or cancelled (false). Called under mu; unlocks it.
func (g *Gate) park(c *gateClient, client Key, w *GateWaiter) bool {
	if w.ch == nil {
		w.ch = make(chan bool, 1)
	}
	w.queued, w.key = true, client
	c.push(w)
	g.waiting.Add(1)
	g.mu.Unlock()
	return <-w.ch
}

// Give returns a permit of client (its request is answered, or it was
// handed one and found nothing to read): the client's oldest parked
// connection gets it, or it is freed.
func (g *Gate) Give(client Key) {
	if g == nil {
		return
	}
	g.mu.Lock()
	c := g.clients[client]
	if c == nil { // not taken: nothing to give
		g.mu.Unlock()
		return
	}
	if c.n > 0 {
		w := c.pop()
		w.queued = false
		g.waiting.Add(-1)
		g.mu.Unlock()
		w.ch <- true // the permit passes on: held is unchanged
		return
	}
	if c.held--; c.held <= 0 {
		delete(g.clients, client)
	}
	g.mu.Unlock()
}

// Cancel ends the wait of a parked connection (it is being closed): its
// Wait or Take returns false. It does nothing when w is not parked.
func (g *Gate) Cancel(w *GateWaiter) {
	if g == nil {
		return
	}
	g.mu.Lock()
	if !w.queued {
		g.mu.Unlock()
		return
	}
	g.clients[w.key].remove(w)
	w.queued = false
	g.waiting.Add(-1)
	g.mu.Unlock()
	w.ch <- false
}

// Over reports whether client is over its requests in hand: it has more
// than Max (taken while the gate did not park), or connections parked
// waiting for a turn. A client with at most Max connections never is.
func (g *Gate) Over(client Key) bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.clients[client]
	return c != nil && (c.held > g.max || c.n > 0)
}

// Held returns how many requests of client are in hand (tests, metrics).
func (g *Gate) Held(client Key) int {
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.clients[client]; c != nil {
		return c.held
	}
	return 0
}
