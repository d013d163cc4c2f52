//go:build linux

package httploop

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/counterd/counterd/internal/evloop"
	"github.com/counterd/counterd/internal/shed"
)

// The HTTP/1.1 event loops: the Redis-protocol front end's I/O model
// (internal/api/resp/loop_linux.go, sharing internal/evloop) for plain
// HTTP. One loop goroutine owns an epoll set of connections; for each
// connection with input it reads once (recvmsg, with the kernel's receive
// time), parses every complete request in the buffer without allocating,
// runs those of the routes it serves on the handler chain, and writes the
// answers of the round together at its end.
//
// A request the loop does not serve (see parse and Options.Serves) is
// handed over: once the answers before it are written, the connection
// leaves the loop, and the HTTP server gets it (Front.Accept) with the
// bytes already read in front of the socket's. It stays there.
//
// Fairness: in a round each client (Options.Key: the peer's address, or
// the user of a bearer token with --auth) reads at most loopClientBudget
// requests; a client flooding on thousands of connections delays another
// by about one budget, not by one request per connection.

// loopClientBudget is the most requests one client is read for in a round.
const loopClientBudget = 128

// loopFloodBudget is the most requests a flooding client (one holding
// more connections than its share of the queue, Options.Fair) is read
// for in a round; its other connections with input then wait their turn
// unpolled (see loop.turns), so that they do not fill every epoll_wait
// and the loop reaches other clients' connections within a round or two.
const loopFloodBudget = 32

// loopEvents is the most ready connections one epoll_wait reports. An
// HTTP request costs ten times a RESP INCR: a round of 128 keeps the
// answers of its first connections from waiting more than a few
// milliseconds for the round's end.
const loopEvents = 128

// initialBuf is a connection's first input buffer.
const initialBuf = 4 << 10

// New returns a Front on ln with opts.Loops event loops.
func New(ln net.Listener, opts Options) (*Front, error) {
	if opts.Serves == nil {
		opts.Serves = HotRoutes
	}
	f := &Front{inner: ln, opts: opts, ch: make(chan net.Conn), done: make(chan struct{})}
	for i := 0; i < opts.Loops; i++ {
		p, err := evloop.NewPoller(loopEvents)
		if err != nil {
			for _, l := range f.loops {
				l.stopNow()
			}
			return nil, fmt.Errorf("httploop: %w", err)
		}
		l := &loop{f: f, p: p, conns: make(map[int]*conn), shares: evloop.NewShares(loopClientBudget), done: make(chan struct{})}
		l.wake = p.Wake
		f.loops = append(f.loops, l)
		go l.run()
	}
	f.wg.Add(1)
	go f.acceptLoop()
	return f, nil
}

// Close closes the listener (the HTTP server's Serve does when it
// returns); connections on the loops stay until Shutdown or Stop.
func (f *Front) Close() error {
	err := f.inner.Close()
	f.shut()
	return err
}

// Stop closes the listener and every connection on a loop at once.
func (f *Front) Stop() {
	f.Close()
	for _, l := range f.loops {
		l.stopNow()
	}
	f.wg.Wait()
}

// Shutdown closes the listener and lets the loops drain: a connection is
// closed once it has no request in progress (answers then carry
// Connection: close); when ctx ends first, the rest are closed.
func (f *Front) Shutdown(ctx context.Context) error {
	err := f.inner.Close()
	for _, l := range f.loops {
		l.mu.Lock()
		l.draining = true
		l.mu.Unlock()
		l.p.Wake()
	}
	var cerr error
	for _, l := range f.loops {
		select {
		case <-l.done:
		case <-ctx.Done():
			cerr = ctx.Err()
		}
		l.stopNow()
	}
	f.shut()
	f.wg.Wait()
	if cerr != nil {
		return cerr
	}
	return err
}

// attach puts c on a loop; false: the HTTP server gets it.
func (f *Front) attach(c net.Conn) bool {
	if len(f.loops) == 0 || f.opts.TCPConn == nil {
		return false
	}
	tc := f.opts.TCPConn(c)
	if tc == nil {
		return false
	}
	laddr, raddr := tc.LocalAddr(), tc.RemoteAddr()
	fd, err := evloop.Detach(tc)
	if err != nil {
		return false
	}
	_ = evloop.EnableRxTime(fd) // refused: latencies count from the read
	f.next++                    // only the accepting goroutine
	l := f.loops[f.next%len(f.loops)]
	cn := &conn{fd: fd, orig: c, remote: raddr.String(), laddr: laddr}
	ip := shed.AddrIP(raddr)
	cn.peer = shed.ClientKey(ip)
	if f.opts.Proxied != nil && ip.IsValid() {
		cn.proxied = f.opts.Proxied(ip)
	}
	l.mu.Lock()
	if l.stopped || l.draining {
		l.mu.Unlock()
		syscall.Close(fd)
		c.Close()
		return true
	}
	l.adds = append(l.adds, cn)
	l.mu.Unlock()
	l.p.Wake()
	return true
}

type loop struct {
	f      *Front
	p      *evloop.Poller
	conns  map[int]*conn
	shares *evloop.Shares
	done   chan struct{}

	closeOnce sync.Once
	mu        sync.Mutex
	adds      []*conn
	draining  bool // Shutdown: close connections as they become idle
	stopped   bool // Close: close every connection now
	stopping  bool // the loop's copy of stopped
	// hold (tests): the loop waits for it to close at its next wake,
	// holding set meanwhile.
	hold    chan struct{}
	holding bool
	nconns  atomic.Int32 // connections on the loop (tests, diagnostics)
	drain   bool         // the loop's copy of draining

	now  int64     // nanotime at the round's start
	wall time.Time // wall clock at the round's start
	outq []*conn
	oob  evloop.RxOOB
	// paused: connections left unread after a shed answer (Options.Pace)
	// until their pauseEnd.
	paused []*conn
	// waiting: connections whose request waits for a slot (conn.pend).
	waiting, waitSwap []*conn
	// turns: connections of flooding clients over their budget of a
	// round, unpolled until their turn (conn.waitTurn), by client.
	turns map[shed.Key][]*conn
	wake  func() // the Fair's wake of a pending request
	h     head
}

type conn struct {
	fd     int
	orig   net.Conn
	remote string
	laddr  net.Addr
	peer   shed.Key
	key    shed.Key
	share  *evloop.Share
	// proxied: the peer is a trusted proxy (Options.Key decides the client).
	proxied bool

	in       []byte
	r, w     int   // unparsed input is in[r:w]
	lastRead int64 // nanotime
	startAt  int64 // nanotime the unparsed input started arriving
	bodyAt   int64 // nanotime the head of a request whose body is still to come was parsed; 0: none
	rxAt     int64 // Unix ns the last read's bytes were received

	out        []byte
	outOff     int
	wantWrite  bool
	blockedAt  int64 // nanotime wantWrite was set
	queued     bool
	closeAfter bool // close once out is written
	handover   bool // hand over once out is written
	turned     bool // passed over in a round for its client's budget
	pauseFor   time.Duration
	pauseEnd   int64 // nanotime; 0: not paused
	obs        []obs
	x          exchange
	// ticket holds the connection's admission slot (Options.Fair) from
	// its request's parse until its answers are written; pend: its
	// request waits for one (the connection is not read meanwhile);
	// decided: that wait ended with verdict, to apply when it is parsed
	// again.
	ticket  shed.Ticket
	pend    *shed.Pending
	decided bool
	verdict shed.Verdict
	// waitTurn: not polled until its client's turn (loop.turns).
	waitTurn bool
	// resumed: Unix ns its last pause ended, if no request was admitted
	// since (0: none); input received before it was sent in the pause.
	resumed int64
}

// obs is an admitted request whose answer is in out.
type obs struct {
	rxAt   int64
	turned bool
}

func (l *loop) stopNow() {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.stopped = true
		l.mu.Unlock()
		l.p.Wake()
		<-l.done
		l.p.Close()
	})
}

func (l *loop) run() {
	defer close(l.done)
	o := &l.f.opts
	var sweep time.Duration
	if t := min(nonZero(o.IdleTimeout), nonZero(o.ReadHeaderTimeout), nonZero(o.ReadBodyTimeout), nonZero(o.WriteTimeout)); t > 0 && t < time.Duration(1<<62) {
		sweep = min(max(t/8, 10*time.Millisecond), time.Second)
	}
	l.now = evloop.Nanotime()
	lastSweep, lastYield := l.now, l.now
	for {
		wait := -1
		if sweep > 0 {
			wait = max(int((sweep-time.Duration(l.now-lastSweep)+time.Millisecond-1)/time.Millisecond), 0)
		}
		if len(l.paused) > 0 {
			if d := l.resume(); d >= 0 {
				ms := int((d + time.Millisecond - 1) / time.Millisecond)
				if wait < 0 || ms < wait {
					wait = ms
				}
			}
			l.flushQueued()
		}
		l.giveTurns()
		if d := l.nextDeadline(); d >= 0 {
			ms := int((d + time.Millisecond - 1) / time.Millisecond)
			if wait < 0 || ms < wait {
				wait = ms
			}
		}
		n, err := l.p.Wait(wait)
		l.now = evloop.Nanotime()
		l.wall = time.Now()
		if sweep > 0 && time.Duration(l.now-lastSweep) >= sweep {
			lastSweep = l.now
			l.sweepIdle()
		}
		if l.now-lastYield >= int64(evloop.YieldEvery) {
			runtime.Gosched()
			lastYield = evloop.Nanotime()
		}
		l.shares.NextRound()
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			l.log("httploop: event loop failed; closing its connections", "err", err)
			l.closeAll()
			l.waitStop()
			return
		}
		for i := 0; i < n; i++ {
			ev := &l.p.Events[i]
			fd := int(ev.Fd)
			if l.p.IsWake(fd) {
				l.woke()
				continue
			}
			if c := l.conns[fd]; c != nil {
				l.serve(c, ev.Events)
			}
		}
		l.flushQueued()
		for l.runWaiting() { // requests handed a slot (by this round's answers, among others)
			l.flushQueued()
		}
		if l.stopping {
			l.closeAll()
			return
		}
		if l.drain {
			for _, c := range l.conns {
				if c.r == c.w && !c.wantWrite && len(c.out) == 0 {
					l.closeConn(c)
				}
			}
			if len(l.conns) == 0 {
				return
			}
		}
	}
}

func nonZero(d time.Duration) time.Duration {
	if d <= 0 {
		return time.Duration(1 << 62)
	}
	return d
}

func (l *loop) log(msg string, args ...any) {
	if l.f.opts.Logger != nil {
		l.f.opts.Logger.Error(msg, args...)
	}
}

// waitStop waits for Close or Shutdown after a fatal epoll error.
func (l *loop) waitStop() {
	for {
		l.mu.Lock()
		stop, adds := l.stopped || l.draining, l.adds
		l.adds = nil
		l.mu.Unlock()
		for _, c := range adds {
			syscall.Close(c.fd)
			c.orig.Close()
		}
		if stop {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (l *loop) woke() {
	l.p.DrainWake()
	l.mu.Lock()
	adds, hold := l.adds, l.hold
	l.adds, l.hold = nil, nil
	l.stopping, l.drain = l.stopped, l.draining
	l.holding = hold != nil
	l.mu.Unlock()
	if hold != nil {
		<-hold
		l.mu.Lock()
		l.holding = false
		l.mu.Unlock()
	}
	o := &l.f.opts
	for _, c := range adds {
		if err := l.p.Add(c.fd, syscall.EPOLLIN|syscall.EPOLLRDHUP); err != nil {
			syscall.Close(c.fd)
			c.orig.Close()
			continue
		}
		c.lastRead = l.now
		ctx := context.Background()
		if o.Server != nil {
			ctx = context.WithValue(ctx, http.ServerContextKey, o.Server)
		}
		ctx = context.WithValue(ctx, http.LocalAddrContextKey, c.laddr)
		if o.ConnContext != nil {
			ctx = o.ConnContext(ctx, c.orig)
		}
		if o.Fair != nil {
			// Its admitted requests carry their slot, as on the HTTP
			// server: the handler limit does not take another.
			ctx = shed.WithTicket(ctx, &c.ticket)
		}
		c.x.ctx, c.x.remote = ctx, c.remote
		l.conns[c.fd] = c
		l.nconns.Add(1)
		c.key = c.peer
		c.share = l.shares.Join(c.key)
	}
}

func (l *loop) closeAll() {
	for _, c := range l.conns {
		l.closeConn(c)
	}
}

func (l *loop) sweepIdle() {
	o := &l.f.opts
	for _, c := range l.conns {
		switch {
		case c.pend != nil, c.waitTurn:
			// waits for a slot (bounded by the Fair: MaxWait, or its
			// client's turn) or for its client's turn (giveTurns)
		case c.wantWrite:
			if o.WriteTimeout > 0 && time.Duration(l.now-c.blockedAt) >= o.WriteTimeout {
				l.closeConn(c) // its client does not read its answers
			}
		case c.r == c.w && o.IdleTimeout > 0 && time.Duration(l.now-c.lastRead) >= o.IdleTimeout:
			l.closeConn(c)
		case c.r < c.w && c.bodyAt != 0 && o.ReadBodyTimeout > 0 && time.Duration(l.now-c.bodyAt) >= o.ReadBodyTimeout:
			l.closeConn(c) // its body trickles (as net/http's body deadline)
		case c.r < c.w && o.ReadHeaderTimeout > 0 && time.Duration(l.now-c.startAt) >= o.ReadHeaderTimeout:
			l.closeConn(c)
		}
	}
}

// closeConn closes a connection of the loop.
func (l *loop) closeConn(c *conn) {
	if l.conns[c.fd] != c {
		return
	}
	l.p.Del(c.fd)
	syscall.Close(c.fd)
	delete(l.conns, c.fd)
	l.nconns.Add(-1)
	l.shares.Leave(c.key, c.share)
	c.share = nil
	c.queued = false
	l.dropAdmission(c)
	c.orig.Close() // releases what its wrappers count
}

// dropAdmission gives up c's wait for a slot and releases its slot.
func (l *loop) dropAdmission(c *conn) {
	if c.pend != nil {
		c.pend.Cancel()
		c.pend = nil
	}
	c.decided = false
	if c.ticket.Holding() {
		l.f.opts.Fair.Release(&c.ticket)
	}
}

// interest is what c's socket is polled for: output while its answers
// wait for room, nothing while it is paused or its request waits for a
// slot (its next requests wait in the socket), else input.
func (c *conn) interest() uint32 {
	switch {
	case c.wantWrite:
		return syscall.EPOLLOUT
	case c.pend != nil || c.pauseEnd != 0 || c.waitTurn:
		return 0
	}
	return syscall.EPOLLIN | syscall.EPOLLRDHUP
}

// runWaiting runs the requests whose wait for a slot ended (admitted, or
// shed: answered so) and reports whether any did.
func (l *loop) runWaiting() bool {
	if len(l.waiting) == 0 {
		return false
	}
	list := l.waiting
	l.waiting, l.waitSwap = l.waitSwap[:0], nil
	ran := false
	for i, c := range list {
		list[i] = nil
		if l.conns[c.fd] != c || c.pend == nil {
			continue // closed meanwhile
		}
		v, ok := c.pend.Poll()
		if !ok {
			l.waiting = append(l.waiting, c)
			continue
		}
		c.pend = nil
		if v != shed.Admitted {
			c.decided, c.verdict = true, v
		}
		if !c.wantWrite {
			l.p.Mod(c.fd, c.interest())
		}
		l.process(c)
		ran = true
	}
	l.waitSwap = list[:0]
	return ran
}

// giveTurns polls again, for each flooding client, up to its budget of
// its connections waiting their turn, oldest first.
func (l *loop) giveTurns() {
	for k, q := range l.turns {
		n := 0
		for len(q) > 0 && n < loopFloodBudget {
			c := q[0]
			q[0] = nil
			q = q[1:]
			if l.conns[c.fd] != c || !c.waitTurn {
				continue // closed or handed over meanwhile
			}
			c.waitTurn = false
			if !c.wantWrite {
				l.p.Mod(c.fd, c.interest())
			}
			n++
		}
		if len(q) == 0 {
			delete(l.turns, k)
		} else {
			l.turns[k] = q
		}
	}
}

// nextDeadline is how long until the earliest wait for a slot reaches
// its deadline (-1: none ahead), when runWaiting must poll it.
func (l *loop) nextDeadline() time.Duration {
	next := time.Duration(-1)
	if len(l.waiting) == 0 {
		return next
	}
	now := time.Now()
	for _, c := range l.waiting {
		if c.pend == nil {
			continue
		}
		if d := c.pend.Deadline().Sub(now); d > 0 && (next < 0 || d < next) {
			next = d
		}
	}
	return next
}

// handOver gives c to the HTTP server with its unparsed input.
func (l *loop) handOver(c *conn) {
	l.p.Del(c.fd)
	delete(l.conns, c.fd)
	l.nconns.Add(-1)
	l.shares.Leave(c.key, c.share)
	c.share = nil
	c.queued = false
	l.dropAdmission(c)
	file := os.NewFile(uintptr(c.fd), "")
	nc, err := net.FileConn(file) // a duplicate on Go's network poller
	file.Close()
	if err != nil {
		c.orig.Close()
		return
	}
	l.f.handedOver.Add(1)
	pc := &prefixConn{Conn: nc, pre: append([]byte(nil), c.in[c.r:c.w]...), orig: c.orig}
	go l.f.toServer(pc)
}

func (l *loop) serve(c *conn, events uint32) {
	defer func() {
		if r := recover(); r != nil { // one connection must not take the loop down
			l.log("httploop: panic serving connection", "addr", c.remote, "panic", r, "stack", string(debug.Stack()))
			l.closeConn(c)
		}
	}()
	if c.wantWrite {
		if events&(syscall.EPOLLOUT|syscall.EPOLLERR|syscall.EPOLLHUP) == 0 {
			return
		}
		if !l.flush(c) || c.wantWrite {
			return
		}
		if c.r < c.w && !l.process(c) {
			return
		}
		if c.wantWrite {
			return
		}
	}
	if events&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLERR|syscall.EPOLLHUP) == 0 {
		return
	}
	if (c.pauseEnd != 0 || c.pend != nil) && events&(syscall.EPOLLERR|syscall.EPOLLHUP) == 0 {
		return // paused (resume), or waiting for a slot (runWaiting)
	}
	if l.shares.Over(c.share) {
		c.turned = true
		return // its client had its share of this round: read next round
	}
	if c.waitTurn {
		// Unpolled for input until its turn; a hang-up is still
		// reported (level-triggered, it would be at every wait).
		if events&(syscall.EPOLLERR|syscall.EPOLLHUP) != 0 {
			l.closeConn(c)
		}
		return
	}
	if o := &l.f.opts; o.Fair != nil && l.shares.Used(c.share) >= loopFloodBudget && events&(syscall.EPOLLERR|syscall.EPOLLHUP) == 0 && l.flooding(c) {
		// A flooding client had its budget of this round: this
		// connection waits for its turn unpolled (its bytes wait in the
		// socket, their wait counting against --max-queue-wait).
		c.turned, c.waitTurn = true, true
		if !c.wantWrite {
			l.p.Mod(c.fd, 0)
		}
		if l.turns == nil {
			l.turns = make(map[shed.Key][]*conn)
		}
		l.turns[c.key] = append(l.turns[c.key], c)
		return
	}
	if c.r == c.w {
		c.r, c.w = 0, 0
	}
	if c.in == nil {
		c.in = make([]byte, initialBuf)
	}
	if len(c.in)-c.w < 1024 {
		if c.r > 0 {
			c.w = copy(c.in, c.in[c.r:c.w])
			c.r = 0
		}
		if len(c.in)-c.w < 1024 {
			limit := maxHead + int(l.f.opts.MaxBody) + 1024
			if len(c.in) >= limit {
				l.startHandOver(c) // parse hands such input over; defensive
				return
			}
			nb := make([]byte, min(2*len(c.in), limit))
			copy(nb, c.in[:c.w])
			c.in = nb
		}
	}
	n, rx, err := evloop.RecvRx(c.fd, c.in[c.w:], &l.oob)
	if err == syscall.EAGAIN || err == syscall.EINTR {
		return
	}
	if n <= 0 {
		l.closeConn(c) // EOF or a reset
		return
	}
	if c.r == c.w {
		c.startAt = l.now
	}
	c.w += n
	c.lastRead = l.now
	if rx == 0 {
		rx = l.wall.UnixNano()
	}
	c.rxAt = rx
	l.process(c)
}

// process runs the complete requests in c's input. It reports whether c
// is still on the loop.
func (l *loop) process(c *conn) bool {
	o := &l.f.opts
	if c.pend != nil {
		return true // its request waits for a slot (runWaiting)
	}
	h := &l.h
	served := 0
	for c.r < c.w && !c.closeAfter {
		h.headLen = 0 // parse sets it once the head is whole
		st := parse(c.in[c.r:c.w], o.MaxBody, h)
		if st == needMore {
			if h.headLen > 0 && c.bodyAt == 0 {
				c.bodyAt = l.now // the head is whole, the body is to come
			}
			break
		}
		c.bodyAt = 0
		if st == handOver || !o.Serves(h.method, h.path) || mayWait(h) {
			l.shares.Charge(c.share, served)
			l.f.served.Add(int64(served))
			return l.startHandOver(c)
		}
		buf := c.in[c.r:c.w]
		if o.Key != nil {
			if k := o.Key(c.peer, c.proxied, Head{h}); k != c.key {
				l.shares.Leave(c.key, c.share)
				c.key, c.share = k, l.shares.Join(k)
			}
		}
		// Admission (docs/security.md, Overload), as the HTTP server's:
		// the connection takes a slot of the Fair for its request (held
		// until its answers are written; its pipelined requests of the
		// round run under it), waiting in the Fair's queue while the loop
		// serves others when none is free. A client holding more
		// connections than its share of the queue is a flood: its
		// request is held to --max-queue-wait from the kernel's receive
		// time, by the clock now, not the round's start (a long round's
		// last requests waited the round too), and refused past it. So
		// is one of any client that waited --max-queue-wait while held
		// back (heldBack), as on the HTTP server (shed.Fair.Stale).
		if o.Fair != nil && !c.ticket.Holding() && (o.NeverShed == nil || !o.NeverShed(h.method, h.path)) {
			v, pace := shed.Admitted, true
			if c.decided {
				v, c.decided = c.verdict, false
			} else if waited := time.Duration(time.Now().UnixNano() - c.rxAt); o.Fair.Stale(waited, l.heldBack(c)) {
				v = o.Fair.ShedStale()
				// Sent during its connection's pause and refused for
				// it while a slot is free with nobody queued: refused
				// for the pause alone, which the loop gave it, not for
				// the node's load. Its connection is not paused again:
				// its next request, sent after this answer, is fresh
				// and asks for the slot. Paused again, that request
				// would be sent during the new pause and refused as
				// stale in turn, and so on: once its client's pacer
				// debt is at the bound (every pause longer than
				// --max-queue-wait), a flood's connections carried
				// only such refusals and it was admitted next to
				// nothing while the slots stood free. With no slot
				// free it is paced as any refusal (its client's excess
				// costs one refusal a pause).
				pace = c.rxAt >= c.resumed || !o.Fair.Free()
			} else {
				var p *shed.Pending
				v, p = o.Fair.AcquireAsync(&c.ticket, c.key, waited, l.flooding(c), l.wake)
				if p != nil {
					c.pend = p
					l.waiting = append(l.waiting, c)
					if !c.wantWrite {
						l.p.Mod(c.fd, 0) // not read while it waits
					}
					break
				}
			}
			if v != shed.Admitted {
				l.f.shed.Add(1)
				if o.OnShed != nil {
					o.OnShed(v)
				}
				c.out = append(c.out, o.ShedAnswer(v, h.close)...)
				c.r += h.total
				served++
				if h.close {
					c.closeAfter = true
				}
				if o.Pace != nil && pace {
					if d := o.Pace(c.key); d > 0 {
						c.pauseFor = d
						break // the rest of its input waits for the pause's end
					}
				}
				continue
			}
		}
		c.resumed = 0
		var closeAfter, panicked bool
		c.out, closeAfter, panicked = c.x.run(o.Handler, h, buf, c.out, l.drain, l.wall)
		served++
		if panicked {
			l.closeConn(c) // as net/http: no answer
			return false
		}
		if o.Latency != nil {
			c.obs = append(c.obs, obs{rxAt: c.rxAt, turned: c.turned})
		}
		c.r += h.total
		if closeAfter {
			c.closeAfter = true
		}
	}
	c.turned = false
	l.shares.Charge(c.share, served)
	l.f.served.Add(int64(served))
	if c.closeAfter {
		c.r = c.w // input after the last answer is not read
	}
	if len(c.out) > c.outOff && !c.queued {
		c.queued = true
		l.outq = append(l.outq, c)
	} else if c.closeAfter && len(c.out) == c.outOff {
		l.closeConn(c)
		return false
	}
	return true
}

// heldBack reports whether c's request, which waited that long in its
// socket, was held back there (shed.Fair.Stale): its connection was
// passed over for its client's budget of a round or waited for its
// client's turn (turned), it was sent during its connection's pause
// after a shed answer (Options.Pace). A request that waited as long only
// because the node was busy is not held back: a client within its share
// is not refused for time.
func (l *loop) heldBack(c *conn) bool {
	return c.turned || c.rxAt < c.resumed
}

// flooding reports whether c's client holds more connections than its
// share of the queue (Options.ClientConns, else on this loop).
func (l *loop) flooding(c *conn) bool {
	o := &l.f.opts
	n := -1
	if o.ClientConns != nil {
		n = o.ClientConns(c.orig)
	}
	if n < 0 {
		n = c.share.Conns()
	}
	return n > o.Fair.MaxClientQueue()
}

// connsOnLoop is the number of connections on the loop.
func (l *loop) connsOnLoop() int { return int(l.nconns.Load()) }

// startHandOver hands c over once its answers so far are written.
func (l *loop) startHandOver(c *conn) bool {
	c.handover = true
	if len(c.out) > c.outOff {
		if !c.queued {
			c.queued = true
			l.outq = append(l.outq, c)
		}
		return true
	}
	l.handOver(c)
	return false
}

func (l *loop) flushQueued() {
	for i, c := range l.outq {
		l.outq[i] = nil
		if !c.queued {
			continue // closed or handed over meanwhile
		}
		c.queued = false
		l.flush(c)
	}
	l.outq = l.outq[:0]
}

// flush writes c.out without blocking; what the socket does not take
// waits for EPOLLOUT (input is not read meanwhile). It reports whether c
// is still on the loop.
func (l *loop) flush(c *conn) bool {
	off, blocked, err := evloop.WriteOut(c.fd, c.out, c.outOff)
	c.outOff = off
	switch {
	case err != nil:
		l.closeConn(c)
		return false
	case blocked:
		if !c.wantWrite {
			c.wantWrite, c.blockedAt = true, l.now
			l.p.Mod(c.fd, syscall.EPOLLOUT)
		}
		return true
	}
	if cap(c.out) > 64<<10 {
		c.out = nil
	} else {
		c.out = c.out[:0]
	}
	c.outOff = 0
	if c.ticket.Holding() {
		l.f.opts.Fair.Release(&c.ticket) // its answers are written
	}
	if lat := l.f.opts.Latency; lat != nil && len(c.obs) > 0 {
		now := time.Now().UnixNano()
		for _, ob := range c.obs {
			lat(time.Duration(max(0, now-ob.rxAt)), ob.turned)
		}
		c.obs = c.obs[:0]
	}
	if c.wantWrite {
		c.wantWrite = false
		l.p.Mod(c.fd, c.interest())
	}
	switch {
	case c.closeAfter:
		l.closeConn(c)
		return false
	case c.handover:
		l.handOver(c)
		return false
	case c.pauseFor > 0:
		// Not read until the pause ends (resume): its client's next
		// requests wait in the socket.
		c.pauseEnd = l.now + int64(c.pauseFor)
		c.pauseFor = 0
		l.p.Mod(c.fd, 0)
		l.paused = append(l.paused, c)
	}
	return true
}

// resume reads again the paused connections whose pause has ended, and
// returns how long until the next one's ends (-1: none paused).
func (l *loop) resume() time.Duration {
	next := time.Duration(-1)
	kept := l.paused[:0]
	for _, c := range l.paused {
		if l.conns[c.fd] != c || c.pauseEnd == 0 {
			continue // closed meanwhile
		}
		if left := time.Duration(c.pauseEnd - l.now); left > 0 {
			kept = append(kept, c)
			if next < 0 || left < next {
				next = left
			}
			continue
		}
		c.pauseEnd = 0
		c.resumed = time.Now().UnixNano()
		l.p.Mod(c.fd, syscall.EPOLLIN|syscall.EPOLLRDHUP)
		if c.r < c.w { // input read before the pause
			l.process(c)
		}
	}
	clear(l.paused[len(kept):])
	l.paused = kept
	return next
}
