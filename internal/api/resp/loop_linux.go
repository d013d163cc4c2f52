//go:build linux

package resp

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/counterd/counterd/internal/coarse"
	"github.com/counterd/counterd/internal/evloop"
	"github.com/counterd/counterd/internal/shed"
)

// Event loops (Options.EventLoops): Redis's I/O model for plain TCP
// connections. A loop goroutine owns an epoll set of connections; one
// epoll_wait reports every connection with input, and for each the loop
// reads once, runs every complete command (runBuffered, shared with the
// goroutine-per-connection mode) and writes the replies at once.
//
// What this saves per request, against a goroutine per connection on Go's
// network poller: the read that finds the socket empty before the
// goroutine parks, the goroutine's wake-up and scheduling (with futex
// calls when an idle P must be woken), and the read deadline's timer
// update. Those were most of the CPU of an unpipelined request.
//
// The loop blocks in epoll_wait itself, like Redis's, rather than parking
// on Go's network poller: under redis-benchmark -P 1 that cut epoll calls
// from ~0.7 to ~0.23 per request and futex calls from ~0.09 to ~0.01
// (perf stat, docs/bench/history.md, "Redis protocol vs Redis"), and the
// scheduler's search for work per round (findRunnable, ~10% of the CPU of
// a GET) went away.
//
// The price: a command runs on the loop, so a slow command delays the other
// connections of its loop (as in Redis). The server enables loops only for
// backends whose commands never wait on a network or an fsync
// (docs/resp.md).
//
// Ownership: a connection on a loop is touched only by its loop goroutine,
// except fdConn.closed, which any goroutine may set (Close) to ask the loop
// to close it. The loop, and only it, closes the descriptor, so a
// descriptor number is never reused while the loop still refers to it.

// eventLoop is one loop goroutine and its epoll set.
type eventLoop struct {
	s     *Server
	p     *evloop.Poller // the epoll set and its wake pipe
	conns map[int]*client
	done  chan struct{}

	mu    sync.Mutex // guards adds, calls and stop
	adds  []*client  // connections handed over, not yet in the epoll set
	calls []func()   // run on the loop's goroutine at its next wake (onLoop)
	stop  bool

	now       int64 // nanotime when the current epoll_wait returned
	served    int   // connections with events in the current round (Options.Coalesce)
	roundCmds int   // commands run in the current round (Options.Coalesce)
	// Connections served in the current activity epoch (now /
	// coalesceEpoch) and in the one before (Options.Coalesce).
	epoch                 int64
	epochConns, epochPrev int
	naps                  uint64 // napPoll calls (tests)

	// clk is the backend's coarse clock (engine.Engine.CoarseClock), nil
	// if it has none. The loop drives it (coarse.Clock.Drive) from
	// epoll_wait's return to the next epoll_wait, with the nanotime it
	// reads anyway: the commands of a round read the time with a load,
	// and the clock's ticker, which woke the process every millisecond
	// (about three context switches each), stays parked under load.
	// cmds counts the commands run since the last refresh; every
	// clockRefreshCmds the loop reads the time again, so that a long
	// round does not run on its start's time.
	clk  *coarse.Clock
	cmds int

	// outq lists the connections whose replies are written at the end of
	// the round (flushQueued), after every connection with input was
	// read and served, as Redis does (handleClientsWithPendingWrites).
	outq []*client

	// Fairness between clients of the loop: in one round (one
	// epoll_wait's events) a client runs at most loopClientBudget
	// commands; its connections with more input are not read until the
	// next round (level-triggered epoll reports them again), so a client
	// flooding on many connections delays another client by at most
	// about one budget per flooding client, not one batch per connection.
	// A client is what admission keys by (Server.admissionKey): the
	// connection's user once it has authenticated, else its address.
	round  uint64
	shares map[shed.Key]*loopShare
}

// loopYieldEvery: the loop yields its processor that often. A goroutine
// that runs for 10 ms without passing through the scheduler (the loop's
// system calls do not) is seen by Go's system monitor as stuck: it sends
// the thread a preemption signal and takes the processor away during the
// next epoll_wait, and each time that sends the monitor back to waking
// every 20 µs for a millisecond or more (perf stat on the server under
// redis-benchmark -P 1: ~0.1 nanosleep calls per request, 0.01 with the
// yield). A yield costs one scheduler pass, and its wakep wakes the
// thread of an idle P (a futex call and two context switches) that finds
// nothing to do: hence every 5 ms, half the monitor's 10 ms (every 2 ms
// was 0.025 futex calls per request under -P 1, 5 ms 0.013).
const loopYieldEvery = evloop.YieldEvery

// loopClientBudget is the most commands one client runs in a loop round
// while it has input on several connections (about half a millisecond of
// INCRs).
const loopClientBudget = 512

// clockRefreshCmds: during a round the loop refreshes the coarse clock
// after this many commands (some 50 µs of INCRs).
const clockRefreshCmds = 64

// overBudget reports whether c's client used its share of this round.
func (l *eventLoop) overBudget(c *client) bool {
	sh := c.share
	return sh != nil && sh.round == l.round && sh.used >= loopClientBudget
}

// charge counts the commands c just ran against its client's share,
// moving c first to the share of the client it now is if those commands
// changed that (AUTH, or a reload that revoked its token).
func (l *eventLoop) charge(c *client) {
	sh := c.share
	if sh == nil {
		return
	}
	if l.s.opts.Auth != nil {
		if k := l.s.admissionKey(c); k != c.shareKey {
			l.leaveShare(c)
			l.joinShare(c, k)
			sh = c.share
		}
	}
	if sh.round != l.round {
		sh.round, sh.used = l.round, 0
	}
	sh.used += int(c.ncmds)
}

// joinShare makes c one of client k's connections on the loop.
func (l *eventLoop) joinShare(c *client, k shed.Key) {
	sh := l.shares[k]
	if sh == nil {
		sh = &loopShare{}
		l.shares[k] = sh
	}
	sh.conns++
	c.share, c.shareKey = sh, k
}

// leaveShare undoes joinShare.
func (l *eventLoop) leaveShare(c *client) {
	sh := c.share
	if sh == nil {
		return
	}
	if sh.conns--; sh.conns == 0 {
		delete(l.shares, c.shareKey)
	}
	c.share, c.shareKey = nil, shed.Key{}
}

// fdConn is the net.Conn of a connection on an event loop: only Close and
// the addresses are used from outside the loop.
type fdConn struct {
	fd           int
	loop         *eventLoop
	closed       atomic.Bool
	laddr, raddr net.Addr
}

// sysFD is the descriptor CLIENT LIST shows (connFD).
func (f *fdConn) sysFD() int { return f.fd }

var errLoopConn = errors.New("resp: event-loop connection is read and written by its loop")

func (f *fdConn) Read([]byte) (int, error)         { return 0, errLoopConn }
func (f *fdConn) Write([]byte) (int, error)        { return 0, errLoopConn }
func (f *fdConn) LocalAddr() net.Addr              { return f.laddr }
func (f *fdConn) RemoteAddr() net.Addr             { return f.raddr }
func (f *fdConn) SetDeadline(time.Time) error      { return nil }
func (f *fdConn) SetReadDeadline(time.Time) error  { return nil }
func (f *fdConn) SetWriteDeadline(time.Time) error { return nil }

// Close asks the loop to close the connection; it returns at once.
func (f *fdConn) Close() error {
	if f.closed.CompareAndSwap(false, true) {
		f.loop.wake()
	}
	return nil
}

// startLoops starts Options.EventLoops loops; Serve stops them.
func (s *Server) startLoops() error {
	for i := 0; i < s.opts.EventLoops; i++ {
		l, err := newEventLoop(s)
		if err != nil {
			s.stopLoops()
			return err
		}
		s.loops = append(s.loops, l)
		go l.run()
	}
	return nil
}

// stopLoops stops the loops (after every connection is closed) and waits
// for them.
func (s *Server) stopLoops() {
	for _, l := range s.loops {
		l.mu.Lock()
		l.stop = true
		l.mu.Unlock()
		l.wake()
	}
	for _, l := range s.loops {
		<-l.done
		l.p.Close()
	}
	s.loops = nil
}

func newEventLoop(s *Server) (*eventLoop, error) {
	p, err := evloop.NewPoller(256)
	if err != nil {
		return nil, fmt.Errorf("resp: %w", err)
	}
	var clk *coarse.Clock
	if cc, ok := s.eng.(interface{ CoarseClock() *coarse.Clock }); ok {
		clk = cc.CoarseClock()
	}
	return &eventLoop{
		s: s, p: p, clk: clk,
		conns:  make(map[int]*client),
		shares: make(map[shed.Key]*loopShare),
		done:   make(chan struct{}),
	}, nil
}

// detach moves a plain TCP connection off Go's network poller: it
// duplicates the descriptor (the duplicate shares the non-blocking mode)
// and closes the net.Conn. It returns the fdConn that replaces it, or nil
// (the connection keeps its goroutine) if there are no loops or nc is not
// a *net.TCPConn (TLS connections are not).
func (s *Server) detach(nc net.Conn) *fdConn {
	if len(s.loops) == 0 {
		return nil
	}
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil
	}
	laddr, raddr := tc.LocalAddr(), tc.RemoteAddr()
	nfd, err := evloop.Detach(tc)
	if err != nil {
		return nil
	}
	f := &fdConn{fd: nfd, laddr: laddr, raddr: raddr}
	f.loop = s.loops[int(s.nextLoop.Add(1))%len(s.loops)]
	return f
}

// attach hands a registered client whose nc is an fdConn to its loop.
func (s *Server) attach(c *client) {
	f := c.nc.(*fdConn)
	c.fd, c.onLoop = f.fd, true
	l := f.loop
	l.mu.Lock()
	l.adds = append(l.adds, c)
	l.mu.Unlock()
	l.wake()
}

// onLoop runs f on the loop's goroutine, between rounds, where the
// loop's state may be read (tests, diagnostics); f must not block.
func (l *eventLoop) onLoop(f func()) {
	l.mu.Lock()
	l.calls = append(l.calls, f)
	l.mu.Unlock()
	l.wake()
}

func (l *eventLoop) wake() { l.p.Wake() }

func (l *eventLoop) run() {
	defer close(l.done)
	var sweep time.Duration // 0: no idle timeout
	if t := l.s.opts.IdleTimeout; t > 0 {
		sweep = min(max(t/8, 10*time.Millisecond), time.Second)
	}
	l.now = nanotime()
	lastSweep, lastYield := l.now, l.now
	for {
		wait := -1 // ms; -1: until an event
		if sweep > 0 {
			wait = int((sweep - time.Duration(l.now-lastSweep) + time.Millisecond - 1) / time.Millisecond)
			wait = max(wait, 0)
		}
		n, err := 0, error(nil)
		if l.s.opts.Coalesce > 0 && l.served > 0 && l.active() >= coalesceMinActive && l.roundCmds < coalesceMaxDepth*l.served {
			n, err = l.napPoll()
		}
		if n == 0 && err == nil {
			n, err = l.p.Wait(wait)
		}
		l.now = nanotime()
		l.served, l.roundCmds = 0, 0
		if sweep > 0 && time.Duration(l.now-lastSweep) >= sweep {
			lastSweep = l.now
			l.sweepIdle()
		}
		if l.now-lastYield >= int64(loopYieldEvery) {
			runtime.Gosched()
			if l.clk != nil {
				l.clk.Sync() // now and then, the wall clock too (a step)
			}
			l.now = nanotime()
			lastYield = l.now
		}
		l.round++
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			l.s.log.Error("resp: event loop failed; closing its connections", "err", err)
			l.closeAll(err)
			l.waitStop()
			return
		}
		if l.clk != nil {
			l.clk.Drive(l.now)
			l.cmds = 0
		}
		for i := 0; i < n; i++ {
			ev := &l.p.Events[i]
			fd := int(ev.Fd)
			if l.p.IsWake(fd) {
				if l.woke() {
					if l.clk != nil {
						l.clk.Release()
					}
					return
				}
				continue
			}
			if c := l.conns[fd]; c != nil {
				l.served++
				if e := l.now / int64(coalesceEpoch); c.napEpoch != e {
					if e != l.epoch {
						l.epochPrev, l.epochConns = l.epochConns, 0
						if e != l.epoch+1 {
							l.epochPrev = 0
						}
						l.epoch = e
					}
					c.napEpoch = e
					l.epochConns++
				}
				l.serve(c, ev.Events)
				if l.cmds >= clockRefreshCmds && l.clk != nil {
					l.cmds = 0
					l.clk.Refresh(nanotime())
				}
			}
		}
		l.flushQueued()
		if l.clk != nil {
			l.clk.Release() // before epoll_wait may block
		}
	}
}

// coalesceMinActive: the loop naps (Options.Coalesce) only while at
// least this many connections were served in the current or the last
// coalesceEpoch. A client working through the replies of that many
// connections stays busy for longer than a nap; with fewer, it runs out
// of work and waits for the nap's end: under redis-benchmark -P 1 a nap
// after every round of 4 or more connections cut -c 4 from ~80k to ~38k
// requests/s and -c 8 from ~90k to ~65k.
const coalesceMinActive = 32

// coalesceEpoch is the period over which active connections are counted.
const coalesceEpoch = time.Millisecond

// active is the number of connections served in the current or the last
// activity epoch.
func (l *eventLoop) active() int {
	return max(l.epochConns, l.epochPrev)
}

// coalesceMaxDepth: and only after a round whose connections sent fewer
// than this many commands each on average. Pipelining clients pay for a
// wake-up once per batch, not per command, and keep the loop busy: under
// redis-benchmark -P 16 a nap after every round cost 10-30% of the
// throughput (the loop, not the client, is then the bottleneck).
const coalesceMaxDepth = 2

// napPoll sleeps for Options.Coalesce, then polls the epoll set without
// blocking, and returns what the poll found.
//
// Why: a loop that blocks in epoll_wait as soon as it has caught up is
// woken by the next request, and the wake-up is paid by the sender: its
// write runs the loopback delivery, which wakes the loop's thread, and on
// a virtual machine whose idle CPUs halt (here: cpuidle haltpoll with no
// guest polling) that is an inter-processor interrupt and a VM exit in
// the client's system call. Under redis-benchmark -c 50 -P 1 the loop
// slept about every 6 requests (0.15-0.18 voluntary context switches per
// request, Redis 0.09-0.11), and the client, one thread at 100% of a core,
// spent 0.3-0.5 us more per request than against Redis: its throughput
// is the benchmark's. While the loop naps it is on no wait queue, so the
// clients' writes wake nobody; the nap ends on a timer of the loop's own
// CPU, and the next round serves the requests that came meanwhile
// together (the idea of a NIC's interrupt coalescing). The nap is taken
// only while coalesceMinActive connections or more are active, so that
// clients always have replies to work through meanwhile, and only after
// a round whose connections were not pipelining (coalesceMaxDepth). Its
// cost: up to the nap of latency for the requests that arrive during
// it; the nap's thread
// has its timer slack set to napTimerSlack (1 us; Linux's default, 50 us,
// made a 20 us nap last 20-70 us: p50 at -c 50 0.35-0.41 ms against
// 0.31-0.35 ms with 1 us, for the same or more requests/s).
//
// The nap is a raw system call, like the loop's reads and writes: the
// scheduler is not told, the P stays with the loop for those
// microseconds (Options.Coalesce is at most MaxCoalesce).
const (
	prSetTimerSlack = 29   // prctl PR_SET_TIMERSLACK
	napTimerSlack   = 1000 // ns: how late the kernel may end a nap
)

func (l *eventLoop) napPoll() (int, error) {
	l.naps++
	// The loop's goroutine moves between threads: the slack is set on the
	// one it naps on (the default 50 us would more than double a 20 us
	// nap, and its latency).
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, napTimerSlack, 0)
	ts := syscall.Timespec{Nsec: int64(l.s.opts.Coalesce)}
	syscall.RawSyscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0) // EINTR: poll early
	return evloop.PollNow(l.p.Epfd, l.p.Events)
}

// flushQueued writes the replies of the round's served connections.
// Writing them after every read of the round, rather than each right
// after its commands, lets the clients' next requests arrive together:
// the next epoll_wait finds more connections ready, so the loop sleeps
// and wakes (a context switch each) less often per request.
func (l *eventLoop) flushQueued() {
	for i, c := range l.outq {
		l.outq[i] = nil
		if !c.queuedOut {
			continue // closed meanwhile
		}
		c.queuedOut = false
		l.flush(c)
	}
	l.outq = l.outq[:0]
}

// The loop's wait, reads and writes are evloop's: one blocking
// epoll_pwait per round made with the scheduler told (the P stays with
// the thread and is taken back without a hand-off when the call returns
// soon, which it does under load; waiting on Go's network poller instead
// cost the poller's own epoll_wait, a non-blocking one that found
// nothing before the goroutine parked, and the scheduler's search for
// work with futex wake-ups), and raw reads and writes that never block.

// woke handles the wake pipe: new connections, Close requests and stop.
// It reports whether the loop must end.
func (l *eventLoop) woke() bool {
	// With the pipe empty: a wake() after this writes a byte again, and
	// one before it is seen below (its change precedes it).
	l.p.DrainWake()
	l.mu.Lock()
	adds, stop, calls := l.adds, l.stop, l.calls
	l.adds, l.calls = nil, nil
	l.mu.Unlock()
	now := nanotime()
	defer func() {
		for _, f := range calls {
			f()
		}
	}()
	for _, c := range adds {
		if err := l.p.Add(c.fd, syscall.EPOLLIN|syscall.EPOLLRDHUP); err != nil {
			syscall.Close(c.fd)
			l.s.connDone(c, err)
			continue
		}
		c.lastRead = now
		l.conns[c.fd] = c
		l.joinShare(c, l.s.admissionKey(c))
	}
	for _, c := range l.conns {
		if c.nc.(*fdConn).closed.Load() {
			l.closeConn(c, nil)
		}
	}
	if stop {
		l.closeAll(nil)
		return true
	}
	return false
}

// waitStop waits for stopLoops after a fatal epoll error.
func (l *eventLoop) waitStop() {
	for {
		l.mu.Lock()
		stop, adds := l.stop, l.adds
		l.adds = nil
		l.mu.Unlock()
		for _, c := range adds {
			syscall.Close(c.fd)
			l.s.connDone(c, nil)
		}
		if stop {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (l *eventLoop) closeAll(err error) {
	for _, c := range l.conns {
		l.closeConn(c, err)
	}
}

func (l *eventLoop) sweepIdle() {
	t := l.s.opts.IdleTimeout
	for _, c := range l.conns {
		if time.Duration(l.now-c.lastRead) >= t {
			l.closeConn(c, nil)
		}
	}
}

// closeConn closes a connection of the loop and unregisters it.
func (l *eventLoop) closeConn(c *client, err error) {
	if l.conns[c.fd] != c {
		return // already closed: never close a descriptor number twice
	}
	l.p.Del(c.fd)
	syscall.Close(c.fd)
	delete(l.conns, c.fd)
	l.leaveShare(c)
	c.queuedOut = false
	c.nc.(*fdConn).closed.Store(true) // connDone's Close is then a no-op
	l.s.connDone(c, err)
}

// serve handles the events of one connection.
func (l *eventLoop) serve(c *client, events uint32) {
	defer func() {
		if r := recover(); r != nil { // never let one connection take the loop down
			l.s.log.Error("resp: panic serving connection", "client", c.id, "addr", c.addr, "panic", r, "stack", string(debug.Stack()))
			l.closeConn(c, fmt.Errorf("panic: %v", r))
		}
	}()
	if c.wantWrite {
		if events&(syscall.EPOLLOUT|syscall.EPOLLERR|syscall.EPOLLHUP) == 0 {
			return
		}
		if !l.flush(c) || c.wantWrite {
			return
		}
		// The replies are out: run the input that waited for them.
		if !l.process(c) {
			return
		}
	}
	if events&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLERR|syscall.EPOLLHUP) == 0 {
		return
	}
	if l.overBudget(c) {
		l.s.deferredReads.Add(1)
		return // its client had its share of this round: read next round
	}
	if err := c.makeRoom(); err != nil {
		if errors.Is(err, errQueryBudget) {
			l.s.budgetExceeded(c)
			if !l.flush(c) {
				return // closed by the failed write
			}
		}
		l.closeConn(c, err)
		return
	}
	n, err := evloop.RawRead(c.fd, c.in[c.w:])
	if err == syscall.EAGAIN || err == syscall.EINTR {
		return // level-triggered: reported again while input is there
	}
	if n <= 0 {
		l.closeConn(c, err) // EOF or a reset
		return
	}
	c.w += n
	c.lastN = n
	c.lastRead = l.now
	c.tstart = l.now // the batch's commands started when the round did
	l.process(c)
}

// process runs the buffered commands until the input is used up or a
// write would block. The replies of the last batch are queued for the
// round's end (flushQueued); larger ones (flushAt) are written at once.
// It reports whether c is still open.
func (l *eventLoop) process(c *client) bool {
	for {
		st := l.s.runBuffered(c)
		l.charge(c)
		l.cmds += int(c.ncmds)
		l.roundCmds += int(c.ncmds)
		c.endBatch()
		if st == stepRead && !c.wantWrite {
			if len(c.out) > c.outOff && !c.queuedOut {
				c.queuedOut = true
				l.outq = append(l.outq, c)
			}
			return true
		}
		if !l.flush(c) {
			return false
		}
		if st == stepClose {
			l.closeConn(c, nil) // replies written as far as the socket took them
			return false
		}
		if c.wantWrite || st == stepRead {
			return true
		}
	}
}

// flush writes c.out without blocking. What the socket does not take waits
// for EPOLLOUT (c.wantWrite, input not read meanwhile: the backpressure a
// blocking write gives). It reports whether c is still open.
func (l *eventLoop) flush(c *client) bool {
	off, blocked, err := evloop.WriteOut(c.fd, c.out, c.outOff)
	c.outOff = off
	switch {
	case err != nil:
		l.closeConn(c, err)
		return false
	case blocked:
		if !c.wantWrite {
			c.wantWrite = true
			l.interest(c, syscall.EPOLLOUT)
		}
		return true
	}
	if cap(c.out) > maxKeptReply {
		c.out = nil
	} else {
		c.out = c.out[:0]
	}
	c.outOff = 0
	if c.wantWrite {
		c.wantWrite = false
		l.interest(c, syscall.EPOLLIN|syscall.EPOLLRDHUP)
	}
	return true
}

func (l *eventLoop) interest(c *client, events uint32) { l.p.Mod(c.fd, events) }
