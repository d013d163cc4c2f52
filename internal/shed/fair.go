package shed

import (
	"context"
	"math"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Fair admits requests by client: at most Limit run at once, and when all
// slots are busy the waiting requests are served round-robin across
// clients, oldest first within a client. A client that floods the node
// therefore waits behind its own requests, while a client with one
// request waiting gets the next free slot.
//
// What is shed (refused at once instead of queued) follows the share
// rule: a client's share of the queue is MaxClientQueue requests.
//
//   - A client over its share while other clients wait is shed (its next
//     request: ShedClient). A lone client may fill the whole queue.
//   - When the whole queue (MaxQueue) is full, a request of a client with
//     fewer waiting than the longest queue takes the place of that
//     queue's newest request, which is shed (ShedClient); otherwise the
//     request is shed: ShedClient when others wait and its client holds
//     at least its equal part of the queue, else ShedOverload.
//   - Waiting MaxWait (in its socket before Acquire, and in the queue)
//     sheds a request only while its client has more than its share
//     waiting (ShedOverload): the latency bound applies to the excess of
//     a flood. A client within its share, such as one with fewer
//     connections than MaxClientQueue (one request each), is never
//     refused for time: its waits are bounded by its own concurrency,
//     and a refusal would only make it retry.
//   - A request its caller knows to be a flood's (AcquireBounded: the
//     HTTP admission, for a client holding more connections than its
//     share) is held to MaxWait whatever its client has queued.
//
// Limit adapts to latency (a gradient limiter): the time between
// admission and release, averaged over a window, is compared with the
// lowest such average seen recently. While it stays within Tolerance of
// that baseline and requests had to wait, the limit grows by about its
// square root per window; when it rises above, the limit shrinks in
// proportion (at most by half per window), down to MinLimit.
//
// Waiting on I/O is not overload. A request that waits for an fsync, a
// peer or a remote store (it calls IOWait with the context its Ticket is
// in) gives its slot to the next waiter for as long as it waits: it is
// parked, not running. Parked requests do not count against the limit,
// and the time they are parked is left out of the latency the limit
// adapts to: only the time a request runs (admission to release, less
// its parked time) is measured. A slow disk or a slow peer therefore
// neither fills the slots nor shrinks the limit; CPU work and queueing
// inside the node do. When the wait ends the request runs on without
// waiting for a slot (its write may already be durable: it must not be
// refused now), over the limit for a moment if need be.
type Fair struct {
	cfg FairConfig

	mu      sync.Mutex
	limit   float64
	running int // requests admitted and not parked
	parked  int // requests admitted and waiting on I/O (IOWait)
	queued  int
	clients map[Key]*fairClient
	ring    []*fairClient // clients with waiters, served round-robin
	next    int           // ring index served next
	// gradient window
	winStart time.Time
	winSum   time.Duration
	winN     int
	winWait  bool // a request waited (or was shed) in this window
	minRTT   time.Duration
	minAge   int // windows since minRTT was set

	limitNow atomic.Int64 // for metrics, read without the lock
	shed     atomic.Uint64
	causes   [numCauses]atomic.Uint64 // shed requests by Cause
	pool     sync.Pool                // *fairWaiter
	now      func() time.Time
	// OnShed, when set before use, is called for every shed request
	// with the reason (ShedOverload or ShedClient).
	OnShed func(Verdict)
}

// Verdict is what Acquire decided.
type Verdict uint8

const (
	// Admitted: the request holds a slot until Release.
	Admitted Verdict = iota
	// ShedOverload: the node is overloaded (the queue is full, or the
	// request waited MaxWait). HTTP 503, RESP -BUSY, gRPC UNAVAILABLE.
	ShedOverload
	// ShedClient: the client's own queue (MaxClientQueue) is full while
	// other clients are served. HTTP 429, RESP -BUSY, gRPC
	// RESOURCE_EXHAUSTED.
	ShedClient
)

// String names the verdict (a metrics label).
func (v Verdict) String() string {
	switch v {
	case Admitted:
		return "admitted"
	case ShedClient:
		return "client"
	}
	return "overload"
}

// Cause is why a request was shed, finer than its Verdict (metrics:
// counterd_admission_shed_total{cause}).
type Cause uint8

const (
	// CauseQueueFull: the whole queue (MaxQueue) was full.
	CauseQueueFull Cause = iota
	// CauseStale: it had already waited MaxWait (in its socket) when it
	// arrived and would have had to queue.
	CauseStale
	// CauseTimeout: it waited MaxWait in the queue without a slot.
	CauseTimeout
	// CauseClient: its client was over its share of the queue.
	CauseClient
	numCauses
)

// String names the cause (a metrics label).
func (c Cause) String() string {
	return [...]string{"queue_full", "stale", "timeout", "client"}[c]
}

// ShedBy returns how many requests were shed for cause c so far.
func (f *Fair) ShedBy(c Cause) uint64 { return f.causes[c].Load() }

// Causes lists every Cause, for metrics.
func Causes() []Cause { return []Cause{CauseQueueFull, CauseStale, CauseTimeout, CauseClient} }

// Ticket is one request's hold on a Fair's slot: Acquire fills it,
// Release empties it, and in between IOWait on a context carrying it
// (WithTicket) parks it. A ticket is reused by the next request of the
// same connection once released; the zero Ticket is ready to use.
type Ticket struct {
	f      *Fair
	state  atomic.Uint32 // ticketIdle, ticketRunning or ticketParked; changed under f.mu
	since  time.Time     // admitted, or last resumed (under f.mu)
	active time.Duration // time run before the last park (under f.mu)
}

const (
	ticketIdle uint32 = iota
	ticketRunning
	ticketParked
)

// Holding reports whether t holds a slot (running or parked).
func (t *Ticket) Holding() bool { return t != nil && t.state.Load() != ticketIdle }

type ticketKey struct{}

// WithTicket returns ctx carrying t, for IOWait.
func WithTicket(ctx context.Context, t *Ticket) context.Context {
	return context.WithValue(ctx, ticketKey{}, t)
}

// TicketFrom returns the ticket ctx carries, or nil.
func TicketFrom(ctx context.Context) *Ticket {
	t, _ := ctx.Value(ticketKey{}).(*Ticket)
	return t
}

// IOWait parks the request of ctx's ticket for a wait on I/O (an fsync,
// a peer, a remote store): its slot goes to the next waiter, and the
// wait is not counted as the request's latency. It returns the parked
// ticket, whose Resume must be called when the wait ends:
//
//	defer shed.IOWait(ctx).Resume()
//
// Without a ticket in ctx, or one that holds no running slot (already
// parked, released, or never admitted), it does nothing and returns nil,
// whose Resume does nothing either.
func IOWait(ctx context.Context) *Ticket {
	t := TicketFrom(ctx)
	if t == nil || t.state.Load() != ticketRunning {
		return nil
	}
	if !t.f.park(t) {
		return nil
	}
	return t
}

// Resume ends the wait IOWait began: the request runs on, holding a slot
// again without waiting for one. Safe on nil, and after the ticket was
// released meanwhile (a connection closed while its request waited).
func (t *Ticket) Resume() {
	if t == nil {
		return
	}
	f := t.f
	f.mu.Lock()
	if t.state.Load() == ticketParked {
		t.state.Store(ticketRunning)
		t.since = f.now()
		f.parked--
		f.running++
	}
	f.mu.Unlock()
}

// park moves a running ticket to parked and passes its slot on.
func (f *Fair) park(t *Ticket) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.state.Load() != ticketRunning {
		return false
	}
	now := f.now()
	t.active += now.Sub(t.since)
	t.state.Store(ticketParked)
	f.parked++
	f.handOff(now)
	return true
}

// FairConfig sets a Fair's bounds; zero fields take the defaults.
type FairConfig struct {
	// MaxLimit is the most requests admitted at once (default 64 x
	// GOMAXPROCS); MinLimit the fewest the limit adapts down to
	// (default GOMAXPROCS).
	MaxLimit, MinLimit int
	// MaxQueue is the most requests waiting, all clients together
	// (default 4 x MaxLimit); MaxClientQueue the most of one client
	// (default MaxQueue / 4).
	MaxQueue, MaxClientQueue int
	// MaxWait is the longest a request waits for a slot (default 20ms).
	MaxWait time.Duration
	// Window is the gradient limiter's window (default 50ms);
	// Tolerance how far above the baseline latency may rise before the
	// limit shrinks (default 2: twice the baseline).
	Window    time.Duration
	Tolerance float64
}

func (c FairConfig) withDefaults() FairConfig {
	if c.MaxLimit <= 0 {
		c.MaxLimit = 64 * runtime.GOMAXPROCS(0)
	}
	if c.MinLimit <= 0 {
		c.MinLimit = min(2*runtime.GOMAXPROCS(0), c.MaxLimit)
	}
	c.MinLimit = min(c.MinLimit, c.MaxLimit)
	if c.MaxQueue <= 0 {
		c.MaxQueue = 4 * c.MaxLimit
	}
	if c.MaxClientQueue <= 0 {
		c.MaxClientQueue = max(1, c.MaxQueue/4)
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 20 * time.Millisecond
	}
	if c.Window <= 0 {
		c.Window = 50 * time.Millisecond
	}
	if c.Tolerance < 1 {
		c.Tolerance = 2
	}
	return c
}

type fairClient struct {
	key     Key
	waiters []*fairWaiter // FIFO; head at index 0
	inRing  bool
}

// fairWaiter is one queued request. admit receives Admitted when it is
// given a slot, else the verdict it is shed with (cause set before).
type fairWaiter struct {
	admit    chan Verdict
	cause    Cause
	deadline time.Time // shed if not admitted by then
	client   *fairClient
	done     bool // handed a slot or shed (under Fair.mu)
	bounded  bool // AcquireBounded: shed at its deadline whatever its client has queued
	ticket   *Ticket
	timer    *time.Timer
	// wake, for a waiter of AcquireAsync, is called under mu once its
	// outcome is sent on admit.
	wake func()
}

// decide sends w its outcome (under mu) and wakes an asynchronous
// waiter's caller.
func (w *fairWaiter) decide(v Verdict) {
	wake := w.wake // w may be recycled once v is received
	w.admit <- v
	if wake != nil {
		wake()
	}
}

// NewFair returns a Fair with cfg's bounds, starting at MinLimit slots
// (the limit grows within a few windows when requests wait).
func NewFair(cfg FairConfig) *Fair {
	cfg = cfg.withDefaults()
	f := &Fair{cfg: cfg, limit: float64(cfg.MinLimit), clients: map[Key]*fairClient{}, now: time.Now}
	f.limitNow.Store(int64(cfg.MinLimit))
	return f
}

// Key is the client a request belongs to, by which Fair shares its
// slots and its queue: an authenticated identity when there is one, else
// an address. The zero Key is one client (requests of unknown origin).
type Key struct {
	addr netip.Addr
	user string
}

// ClientKey is the client of a remote address: ClientAddr's.
func ClientKey(ip netip.Addr) Key { return Key{addr: ClientAddr(ip)} }

// ClientAddr is the address that stands for a remote address's client:
// its IP, or its /64 for IPv6 (one host usually holds a whole /64).
// Connection caps per client count by it.
func ClientAddr(ip netip.Addr) netip.Addr {
	ip = ip.Unmap()
	if ip.Is6() {
		if p, err := ip.Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return ip
}

// UserKey is the client of an authenticated user (a token's identity),
// wherever its requests come from.
func UserKey(user string) Key { return Key{user: user} }

// String names the key (logs, tests).
func (k Key) String() string {
	if k.user != "" {
		return "user:" + k.user
	}
	return k.addr.String()
}

// Acquire admits a request of client into t, or sheds it. waited is how
// long the request already waited before it got here (in a socket). A
// request that finds a slot free and nobody queued is admitted whatever
// it waited: serving it costs about what refusing it would, and the wait
// was not spent behind other requests of this node (a starved process on
// a busy machine also makes requests wait in their sockets). Otherwise it
// queues, and is shed by the share rule (see Fair). An admitted request
// must call Release(t) once.
func (f *Fair) Acquire(t *Ticket, client Key, waited time.Duration) Verdict {
	return f.acquire(t, client, waited, false)
}

// AcquireBounded is Acquire for a request whose client the caller knows
// to be over its part of the node: it has more requests in hand (read
// and not yet answered, on all its connections) than the node runs at
// once, or its cap of them (the HTTP admission's Gate). Such a request
// is held to MaxWait from its receive time whatever its client has
// queued here, as a CoDel queue holds every packet to its target: one
// that already waited MaxWait is shed (ShedOverload, CauseStale) even
// when a slot is free, and one that waits in the queue until MaxWait is
// shed then (CauseTimeout). Its client is flooding the node, so its
// excess is refused before it runs instead of admitted late: each
// request it gets admitted has waited at most MaxWait, and the refusal
// costs what the late answer would have.
func (f *Fair) AcquireBounded(t *Ticket, client Key, waited time.Duration) Verdict {
	if waited >= f.cfg.MaxWait {
		f.mu.Lock()
		f.winWait = true
		f.mu.Unlock()
		return f.shedOne(ShedOverload, CauseStale)
	}
	return f.acquire(t, client, waited, true)
}

func (f *Fair) acquire(t *Ticket, client Key, waited time.Duration, bounded bool) Verdict {
	v, w, budget := f.enqueue(t, client, waited, bounded, nil)
	if w == nil {
		return v
	}
	timed := false
	if budget > 0 {
		w.timer.Reset(budget)
		select {
		case v = <-w.admit:
			w.timer.Stop()
		case <-w.timer.C:
			timed = true
		}
	} else {
		timed = true // already waited MaxWait: it waits on within its share only
	}
	if timed {
		f.mu.Lock()
		f.expire(w)
		f.mu.Unlock()
		// Shed just now, or a slot or a shed was handed to it meanwhile,
		// or (within its share) it waits on for its turn.
		v = <-w.admit
	}
	return f.finish(w, v)
}

// expire sheds w, past its deadline, when its client is over its share
// or it is bounded (AcquireBounded). Under mu.
func (f *Fair) expire(w *fairWaiter) {
	if !w.done && (w.bounded || len(w.client.waiters) > f.cfg.MaxClientQueue) {
		w.done, w.cause = true, CauseTimeout
		f.dropWaiter(w)
		w.admit <- ShedOverload
	}
}

// finish recycles w, whose outcome v was received, and counts a shed.
func (f *Fair) finish(w *fairWaiter, v Verdict) Verdict {
	cause := w.cause
	w.client, w.ticket, w.wake = nil, nil, nil
	f.pool.Put(w)
	if v != Admitted {
		return f.shedOne(v, cause)
	}
	return Admitted
}

// enqueue admits t at once, sheds it, or queues it: then the waiter is
// returned with its budget (what is left of MaxWait). wake is the
// waiter's (nil: a blocking caller).
func (f *Fair) enqueue(t *Ticket, client Key, waited time.Duration, bounded bool, wake func()) (Verdict, *fairWaiter, time.Duration) {
	f.mu.Lock()
	now := f.now()
	if f.freeLocked() {
		f.running++
		f.admit(t, now)
		f.mu.Unlock()
		return Admitted, nil, 0
	}
	f.winWait = true
	c := f.clients[client]
	mine := 0
	if c != nil {
		mine = len(c.waiters)
	}
	others := f.queued - mine
	budget := f.cfg.MaxWait - waited
	switch {
	case budget <= 0 && mine >= f.cfg.MaxClientQueue:
		f.mu.Unlock()
		return f.shedOne(ShedOverload, CauseStale), nil, 0
	case mine >= f.cfg.MaxClientQueue && others > 0:
		f.mu.Unlock()
		return f.shedOne(ShedClient, CauseClient), nil, 0
	case f.queued >= f.cfg.MaxQueue:
		if !f.pushOut(mine) {
			// At or over its equal part of the full queue while others
			// wait: its own excess; else the node is full.
			n := len(f.ring)
			if c == nil {
				n++
			}
			f.mu.Unlock()
			if others > 0 && mine*n >= f.cfg.MaxQueue {
				return f.shedOne(ShedClient, CauseClient), nil, 0
			}
			return f.shedOne(ShedOverload, CauseQueueFull), nil, 0
		}
	}
	if c == nil {
		c = &fairClient{key: client}
		f.clients[client] = c
	}
	w, _ := f.pool.Get().(*fairWaiter)
	if w == nil {
		w = &fairWaiter{admit: make(chan Verdict, 1), timer: time.NewTimer(time.Hour)}
		w.timer.Stop()
	}
	w.deadline, w.client, w.done, w.ticket, w.bounded, w.wake = now.Add(budget), c, false, t, bounded, wake
	c.waiters = append(c.waiters, w)
	if !c.inRing {
		c.inRing = true
		f.ring = append(f.ring, c)
	}
	f.queued++
	f.mu.Unlock()
	return Admitted, w, budget
}

// Pending is a request AcquireAsync queued: its caller, which must not
// block, polls it (Poll) when woken, and cancels it (Cancel) if it gives
// the request up.
type Pending struct {
	f *Fair
	w *fairWaiter
}

// AcquireAsync is Acquire (bounded: AcquireBounded) for a caller that
// must not block, an event loop: a request admitted or shed at once gets
// its verdict, and one that must wait for a slot is queued as Acquire
// queues it (the same share rule, round-robin between clients, pushed
// out of a full queue by another client's request, shed by the same
// causes) and returned as a Pending (the verdict is then meaningless).
// wake is called, from any goroutine and under the Fair's lock (it must
// not block nor call the Fair), once the Pending's outcome is decided by
// another request's Release or arrival; its deadline (MaxWait from its
// receive time) is applied by Poll.
func (f *Fair) AcquireAsync(t *Ticket, client Key, waited time.Duration, bounded bool, wake func()) (Verdict, *Pending) {
	if bounded && waited >= f.cfg.MaxWait {
		f.mu.Lock()
		f.winWait = true
		f.mu.Unlock()
		return f.shedOne(ShedOverload, CauseStale), nil
	}
	v, w, _ := f.enqueue(t, client, waited, bounded, wake)
	if w == nil {
		return v, nil
	}
	return Admitted, &Pending{f: f, w: w}
}

// Poll reports the outcome of a pending request, once decided: Admitted
// (its ticket holds a slot, to Release), or the verdict it was shed with
// (counted). Past its deadline, a request of a client over its share (or
// bounded) is shed then (CauseTimeout), as Acquire's would be; one within
// its share waits on. After a decided Poll the Pending is done with.
func (p *Pending) Poll() (Verdict, bool) {
	f, w := p.f, p.w
	select {
	case v := <-w.admit:
		return f.finish(w, v), true
	default:
	}
	f.mu.Lock()
	if !w.done && !f.now().Before(w.deadline) {
		f.expire(w)
	}
	f.mu.Unlock()
	select {
	case v := <-w.admit:
		return f.finish(w, v), true
	default:
		return Admitted, false
	}
}

// Deadline is when a pending request's wait reaches MaxWait.
func (p *Pending) Deadline() time.Time { return p.w.deadline }

// Cancel gives up a pending request (its connection closed): it leaves
// the queue, or the slot handed to it meanwhile is released. Nothing is
// counted as shed.
func (p *Pending) Cancel() {
	f, w := p.f, p.w
	f.mu.Lock()
	if !w.done {
		w.done = true
		f.dropWaiter(w)
		w.client, w.ticket, w.wake = nil, nil, nil
		f.mu.Unlock()
		f.pool.Put(w)
		return
	}
	f.mu.Unlock()
	t := w.ticket
	v := <-w.admit
	w.client, w.ticket, w.wake = nil, nil, nil
	f.pool.Put(w)
	if v == Admitted && t != nil {
		f.Release(t)
	}
}

// pushOut makes room in a full queue for a request of a client with mine
// requests waiting: the newest request of the client with the most
// waiting is shed, if that client has more than mine+1 (so that the
// arrival does not become the longest itself). Under mu.
func (f *Fair) pushOut(mine int) bool {
	var long *fairClient
	for _, c := range f.ring {
		if long == nil || len(c.waiters) > len(long.waiters) {
			long = c
		}
	}
	if long == nil || len(long.waiters) <= mine+1 {
		return false
	}
	i := len(long.waiters) - 1
	w := long.waiters[i]
	long.waiters[i] = nil
	long.waiters = long.waiters[:i]
	f.queued--
	f.maybeForget(long)
	w.done, w.cause = true, CauseClient
	w.decide(ShedClient)
	return true
}

// admit fills t with a slot just taken. Under mu.
func (f *Fair) admit(t *Ticket, now time.Time) {
	t.f, t.since, t.active = f, now, 0
	t.state.Store(ticketRunning)
}

// dropWaiter removes a timed-out waiter from its client's queue. Under mu.
func (f *Fair) dropWaiter(w *fairWaiter) {
	c := w.client
	for i, x := range c.waiters {
		if x == w {
			copy(c.waiters[i:], c.waiters[i+1:])
			c.waiters[len(c.waiters)-1] = nil
			c.waiters = c.waiters[:len(c.waiters)-1]
			break
		}
	}
	f.queued--
	f.maybeForget(c)
}

// maybeForget drops a client with nothing queued from the map and the
// ring. Under mu.
func (f *Fair) maybeForget(c *fairClient) {
	if len(c.waiters) > 0 {
		return
	}
	delete(f.clients, c.key)
	if c.inRing {
		c.inRing = false
		for i, x := range f.ring {
			if x == c {
				f.ring = append(f.ring[:i], f.ring[i+1:]...)
				if f.next > i {
					f.next--
				}
				break
			}
		}
	}
}

// Release gives back t's slot (a running or parked request), hands a
// freed slot to the next waiter round-robin across clients, and sheds
// the waiters found older than MaxWait on the way. Releasing a ticket
// that holds nothing does nothing.
func (f *Fair) Release(t *Ticket) {
	f.mu.Lock()
	now := f.now()
	switch t.state.Load() {
	case ticketRunning:
		t.state.Store(ticketIdle)
		f.sample(now, t.active+now.Sub(t.since))
		f.handOff(now)
	case ticketParked:
		t.state.Store(ticketIdle)
		f.parked--
		f.sample(now, t.active)
	}
	f.mu.Unlock()
}

// handOff passes the slot of a request that stops running (released or
// parked) to the next waiter, or frees it. Under mu.
func (f *Fair) handOff(now time.Time) {
	for f.queued > 0 && float64(f.running-1) < f.limit {
		if f.next >= len(f.ring) {
			f.next = 0
		}
		c := f.ring[f.next]
		w := c.waiters[0]
		copy(c.waiters, c.waiters[1:])
		c.waiters[len(c.waiters)-1] = nil
		c.waiters = c.waiters[:len(c.waiters)-1]
		f.queued--
		f.next++
		f.maybeForget(c)
		w.done = true
		if now.After(w.deadline) && (w.bounded || len(c.waiters) >= f.cfg.MaxClientQueue) {
			// Waited too long, its client over its share (counting w)
			// or bounded: its timer is about to fire.
			w.cause = CauseTimeout
			w.decide(ShedOverload)
			continue
		}
		f.admit(w.ticket, now)
		w.decide(Admitted) // the slot passes to w: running is unchanged
		return
	}
	f.running--
}

// sample adds one admission's latency to the window and, at the end of
// a window, moves the limit (the gradient limiter). Under mu.
func (f *Fair) sample(now time.Time, rtt time.Duration) {
	f.winSum += rtt
	f.winN++
	if f.winStart.IsZero() {
		f.winStart = now
	}
	if now.Sub(f.winStart) < f.cfg.Window || f.winN < 10 {
		return
	}
	avg := f.winSum / time.Duration(f.winN)
	f.minAge++
	if f.minRTT == 0 || avg < f.minRTT || f.minAge > 100 {
		f.minRTT, f.minAge = avg, 0
	}
	gradient := math.Min(1, math.Max(0.5, f.cfg.Tolerance*float64(f.minRTT)/float64(avg)))
	lim := f.limit * gradient
	if gradient == 1 && f.winWait {
		lim += math.Sqrt(f.limit)
	}
	f.limit = math.Min(float64(f.cfg.MaxLimit), math.Max(float64(f.cfg.MinLimit), 0.8*f.limit+0.2*lim))
	f.limitNow.Store(int64(f.limit))
	f.winStart, f.winSum, f.winN, f.winWait = now, 0, 0, false
}

// ShedStale counts a request refused without a slot for having waited
// MaxWait before it could ask for one (see Stale) and returns
// ShedOverload.
func (f *Fair) ShedStale() Verdict { return f.shedOne(ShedOverload, CauseStale) }

// Free reports whether a slot is free with nobody queued: a request
// asking for one now would be admitted at once.
func (f *Fair) Free() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.freeLocked()
}

// freeLocked is Free with f.mu held: the condition on which enqueue
// admits at once.
func (f *Fair) freeLocked() bool { return f.queued == 0 && float64(f.running) < f.limit }

// Stale reports whether a request that waited (in its socket) before it
// could ask for a slot is refused for it (ShedStale) instead: it waited
// MaxWait or more while held back (held) by what a flood or an overload
// causes, not by its own client's concurrency: for its client's turn (a
// Gate, or an HTTP event loop's round budget), or through the pause its
// client was given for being refused too often (Pacer). Its wait was spent
// behind others' requests; admitted, it would run late and set the
// latency of everything admitted. A request that waited as long without
// being held back (a starved process on a busy machine) asks for a slot
// as any other (Acquire).
func (f *Fair) Stale(waited time.Duration, held bool) bool {
	return held && waited >= f.cfg.MaxWait
}

// MaxClientQueue returns a client's share of the queue.
func (f *Fair) MaxClientQueue() int { return f.cfg.MaxClientQueue }

// MaxWait returns the longest a request waits for a slot.
func (f *Fair) MaxWait() time.Duration { return f.cfg.MaxWait }

func (f *Fair) shedOne(v Verdict, c Cause) Verdict {
	f.shed.Add(1)
	f.causes[c].Add(1)
	if f.OnShed != nil {
		f.OnShed(v)
	}
	return v
}

// Limit returns the current concurrency limit.
func (f *Fair) Limit() int { return int(f.limitNow.Load()) }

// Shed returns how many requests were shed so far.
func (f *Fair) Shed() uint64 { return f.shed.Load() }

// Running returns how many requests hold a running slot now.
func (f *Fair) Running() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running
}

// Queued returns how many requests wait for a slot now.
func (f *Fair) Queued() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queued
}

// Parked returns how many admitted requests wait on I/O now (IOWait).
func (f *Fair) Parked() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.parked
}
