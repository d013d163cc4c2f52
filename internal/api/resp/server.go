// Package resp is counterd's Redis protocol (RESP2 and RESP3) front end.
//
// It lets redis-cli, Redis client libraries and redis-benchmark talk to the
// counter engine unchanged. Every command is applied through the same
// engine as the HTTP API. See doc.go for the command list, the places where
// counterd deliberately differs from Redis, and why the protocol is
// implemented here rather than with a library.
package resp

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	_ "unsafe" // go:linkname

	"github.com/prometheus/client_golang/prometheus"

	"github.com/counterd/counterd/internal/api/ratelimitapi"
	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/shed"
	"github.com/counterd/counterd/internal/tracing"
)

// Defaults applied by New to zero Options fields.
const (
	DefaultMaxConns        = 10000
	DefaultMaxBulkLen      = 8 << 20  // 8 MiB
	DefaultMaxArgs         = 32768    // above what any command accepts (contract.MaxItems items)
	DefaultMaxCommandBytes = 32 << 20 // 32 MiB
	// DefaultMaxQueryBufferTotal bounds the read buffers above 64 KiB of
	// all connections together.
	DefaultMaxQueryBufferTotal = 256 << 20 // 256 MiB
	// MaxInlineLen is the longest inline (telnet style) command line, as in
	// Redis (PROTO_INLINE_MAX_SIZE).
	MaxInlineLen = 64 << 10
	// MaxCoalesce bounds Options.Coalesce: the loop holds its P through a
	// nap, without telling the scheduler.
	MaxCoalesce = time.Millisecond
)

// RedisVersion is the Redis version counterd reports in HELLO's "version"
// field, INFO's redis_version and scripts' redis.REDIS_VERSION: the
// release the differential tests compare counterd with (redis-server
// 7.0.15). Clients gate features on it (rueidis, for
// one, reads the major version), so it is the version whose command
// semantics counterd follows, not counterd's own version, which is reported
// separately (Options.Version).
const RedisVersion = "7.0.15"

// Options configure a Server. The zero value is valid: every field has a
// documented default.
type Options struct {
	// AllowFlush allows FLUSHALL and FLUSHDB. Default false: both are
	// refused with an error, so a stray redis-cli FLUSHALL cannot wipe
	// every counter.
	AllowFlush bool

	// MaxConns is the most client connections served at once; one more is
	// answered "-ERR max number of clients reached" and closed, like Redis.
	// Default 10000 (DefaultMaxConns).
	MaxConns int
	// ClientConns, when set, caps the connections of one client address
	// (--max-conns-per-client): one more is answered "-ERR max number of
	// clients from this address reached" and closed.
	ClientConns *shed.ConnCounter
	// RefusePace, when set, paces the refusals of connections over
	// MaxConns or ClientConns per client address: beyond its rate a
	// refused connection is held unread for the pause before its error,
	// so that a client reconnecting as soon as it is refused does not
	// spin the server on accept, answer and close. A held connection
	// counts against MaxConns while held, at most ClientConns' cap of
	// them per address; maxRejecting more are held beyond MaxConns, and
	// past those a refusal is answered at once.
	RefusePace *shed.Pacer

	// MaxBulkLen is the longest bulk string (one argument) accepted, in
	// bytes; Redis's proto-max-bulk-len. Default 8 MiB (DefaultMaxBulkLen).
	// A longer one is answered "-ERR Protocol error: invalid bulk length"
	// and the connection is closed, as Redis does.
	MaxBulkLen int

	// MaxArgs is the most arguments (multibulk length) of one command;
	// it bounds the work one command can ask for. Default 32768
	// (DefaultMaxArgs). More is answered "-ERR Protocol error: invalid
	// multibulk length" and the connection is closed.
	MaxArgs int

	// MaxCommandBytes bounds the size on the wire of one command, headers
	// included, and so the memory one connection buffers; Redis's
	// client-query-buffer-limit. Default 32 MiB (DefaultMaxCommandBytes).
	// More is answered "-ERR Protocol error: too big request" and the
	// connection is closed. Inline commands are limited to 64 KiB
	// (MaxInlineLen) like in Redis.
	MaxCommandBytes int

	// MaxQueryBufferTotal bounds the read buffers larger than 64 KiB of
	// all connections together (limits.go), so that many connections each
	// sending half of a big command hold at most this much. A connection
	// that would exceed it is answered "-ERR max query buffer memory
	// reached, closing connection" and closed. Default 256 MiB
	// (DefaultMaxQueryBufferTotal).
	MaxQueryBufferTotal int

	// Admission, when set, admits reading and writing commands (outside
	// MULTI) per client IP address, once per batch of pipelined commands:
	// the first such command of a batch takes a slot, held until the
	// batch's replies are written. Waiting clients are served
	// round-robin, so a client flooding on many connections waits behind
	// its own commands (shed.Fair). A shed command is answered
	// "-BUSY server overloaded, retry later", or "-BUSY too many
	// commands of this client waiting, retry later" when the client's own
	// queue is full; OnShed counts them. Connections on an event loop
	// are not admitted through it (a loop runs one batch at a time and
	// cannot be over-committed): they get a per-client share of each loop
	// round instead (loop_linux.go). Default nil: no limit.
	Admission *shed.Fair
	// OnShed, when set, is called for every command Admission shed.
	OnShed func(shed.Verdict)

	// RateLimiter, when set, serves RL.CHECK (docs/ratelimit.md): a
	// *ratelimit.Limiter, or a *ratelimit.Router in a cluster. Default
	// nil: RL.CHECK is an unknown command.
	RateLimiter ratelimit.Checker

	// Events, when set, serves EVENTS.ADD (docs/pipeline.md).
	Events EventsAdder
	// Global, when set, answers COUNTERD.GET key SCOPE global (a region's
	// value plus every peer region's); COUNTERD.GET is always served.
	Global GlobalReader
	// EventMaxSkew bounds how far ahead of the clock the AT of
	// COUNTERD.INCRBY and COUNTERD.PFADD may be (--events-max-skew; <= 0:
	// engine.DefaultMaxSkew).
	EventMaxSkew time.Duration

	// Auth, when set, requires every connection to authenticate (AUTH,
	// HELLO AUTH) and checks each command and its keys against the user's
	// grants (perms.go). Default nil: every connection may run anything,
	// and AUTH accepts any user.
	Auth *auth.Store

	// IdleTimeout closes a connection that sent nothing for this long.
	// Default 0: never, like Redis's "timeout 0" (counterd's server sets
	// 5 minutes: idle connections count against MaxConns).
	IdleTimeout time.Duration

	// Registerer receives the metrics. Default nil: no metrics. Otherwise
	// it gets counterd_resp_commands_total{cmd},
	// counterd_resp_command_duration_seconds{cmd} (histogram),
	// counterd_resp_connections (gauge),
	// counterd_resp_connections_total, counterd_resp_rejected_connections_total
	// and counterd_resp_protocol_errors_total. cmd is the lower-case command
	// name, or "unknown".
	Registerer prometheus.Registerer

	// EventLoops, when above 0, serves plain TCP connections on this many
	// event loops (epoll, Linux only) instead of a goroutine per
	// connection: Redis's I/O model, several times less CPU per
	// unpipelined request (loop_linux.go). Commands then run on the loop,
	// so use it only with a backend whose commands never block on the
	// network or an fsync (counterd's server enables it for the embedded
	// engine with --durability async; --resp-event-loops). TLS
	// connections, and every connection on other systems, keep their
	// goroutine. Default 0: a goroutine per connection.
	EventLoops int

	// Coalesce, when above 0, is how long an event loop naps, while many
	// connections are active (32) and not pipelining, after a round
	// before it polls again, instead of blocking in epoll_wait at once:
	// the requests that arrive meanwhile are served together, and their
	// senders do not pay for waking the loop (napPoll in loop_linux.go).
	// It adds up to the nap (plus the kernel's timer slack) to the
	// latency of those requests, under concurrent load only. At most
	// MaxCoalesce. Default 0: no nap (counterd's server: 20µs,
	// --resp-coalesce).
	Coalesce time.Duration

	// Logger receives connection and error logs. Default slog.Default().
	Logger *slog.Logger

	// LuaTimeLimit is Redis's lua-time-limit (--lua-time-limit): after
	// it a running script makes other clients' data commands fail with
	// BUSY, and SCRIPT KILL may stop it if it has not written. Default
	// DefaultLuaTimeLimit.
	LuaTimeLimit time.Duration
	// KeyOwner, in a cluster, tells whether this node owns a key and else
	// the owner's address: a script's keys must have one owner (else
	// CROSSSLOT), and every key it calls that owner.
	KeyOwner func(key string) (self bool, addr string)
	// KeyLocker, when set (the tiered mode: other nodes write the same
	// store), locks a script's keys against every writer of every node
	// while it runs: its declared keys before it starts, in sorted order,
	// and any other key when a command of the script first names it.
	// Default: the backend's, if it implements contract.KeyLocker.
	KeyLocker contract.KeyLocker

	// Version is counterd's version, reported as counterd_version by INFO
	// and HELLO. Default "dev".
	Version string

	// Tracer, when set, puts a span around every command (tracing.go).
	// Default nil: no tracing.
	Tracer *tracing.Tracer
}

// Server serves the Redis protocol on top of an engine.
type Server struct {
	eng  contract.Backend
	opts Options
	log  *slog.Logger

	ctx    context.Context // canceled by Close; used for engine calls
	cancel context.CancelFunc

	mu        sync.Mutex
	ln        net.Listener // the listener being served, nil before Serve
	closed    bool
	serveDone chan struct{} // closed when Serve returns; nil if never served
	clients   map[*client]struct{}

	conns      sync.WaitGroup // live connection goroutines
	nconns     atomic.Int64   // live connections
	held       atomic.Int64   // refused connections held for their pause in a slot of MaxConns (RefusePace)
	heldBeyond atomic.Int64   // refused connections held beyond MaxConns
	heldConns  *shed.ConnCounter
	nextID     atomic.Int64 // client ids
	queryBytes atomic.Int64 // read buffers counted against MaxQueryBufferTotal
	started    time.Time
	startMem   int64 // used_memory when New returned (used_memory_startup)

	totalConns    atomic.Uint64
	rejectedConns atomic.Uint64
	totalCmds     atomic.Uint64
	protoErrors   atomic.Uint64
	deferredReads atomic.Uint64 // event loops: reads put off to the next round (loopClientBudget)
	hits, misses  atomic.Uint64 // keyspace_hits/misses
	errStats      errorStats
	slow          slowlog
	ops           opsSampler
	peakMem       atomic.Uint64 // used_memory_peak
	runID, replID string

	cmds    map[string]*command // by lower-case name
	unknown *command            // metrics for unknown commands
	m       *metrics            // nil without a Registerer

	lua *scripting // EVAL and the script gate

	loops    []*eventLoop // Options.EventLoops, while serving
	nextLoop atomic.Uint64

	closeOnce sync.Once
}

// New returns a server for eng. Call Serve to accept connections.
func New(eng contract.Backend, opts Options) *Server {
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.MaxBulkLen <= 0 {
		opts.MaxBulkLen = DefaultMaxBulkLen
	}
	if opts.MaxArgs <= 0 {
		opts.MaxArgs = DefaultMaxArgs
	}
	if opts.MaxCommandBytes <= 0 {
		opts.MaxCommandBytes = DefaultMaxCommandBytes
	}
	if opts.MaxQueryBufferTotal <= 0 {
		opts.MaxQueryBufferTotal = DefaultMaxQueryBufferTotal
	}
	opts.Coalesce = min(max(opts.Coalesce, 0), MaxCoalesce)
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	s := &Server{
		eng:     eng,
		opts:    opts,
		log:     opts.Logger,
		clients: make(map[*client]struct{}),
		started: time.Now(),
		// Refused connections held in slots: at most ClientConns' cap per address.
		heldConns: opts.ClientConns.Clone(),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.cmds = buildCommands()
	if opts.RateLimiter != nil {
		s.cmds[ratelimitapi.RESPCommandName] = rateLimitCommand(opts.RateLimiter)
	}
	if opts.Events != nil {
		s.cmds[EventsCommandName] = eventsCommand(opts.Events)
	}
	s.cmds[ScopedGetCommandName] = scopedGetCommand(opts.Global)
	if opts.EventMaxSkew > 0 {
		for _, c := range eventTimeCommands(opts.EventMaxSkew) {
			s.cmds[c.name].prep = c.prep
		}
	}
	setGates(s.cmds)
	initStats(s.cmds)
	s.slow.slowerThan.Store(DefaultSlowlogSlowerThan)
	s.slow.maxLen.Store(DefaultSlowlogMaxLen)
	s.runID, s.replID = randomHex40(), randomHex40()
	s.lua = newScripting(s, opts.LuaTimeLimit)
	if s.lua.locker = opts.KeyLocker; s.lua.locker == nil {
		s.lua.locker, _ = eng.(contract.KeyLocker)
	}
	if opts.Auth != nil {
		s.cmds["auth"].fn = cmdAuthTokens
	}
	s.unknown = &command{name: "unknown"}
	s.unknown.stats.name = "unknown"
	s.startMem, _, _ = usedMemory()
	s.peakMem.Store(uint64(s.startMem))
	if opts.Registerer != nil {
		s.m = newMetrics(opts.Registerer, s.log)
		for _, c := range s.cmds {
			c.calls = s.m.calls.WithLabelValues(c.name)
			c.dur = s.m.dur.WithLabelValues(c.name)
		}
		s.unknown.calls = s.m.calls.WithLabelValues("unknown")
		s.unknown.dur = s.m.dur.WithLabelValues("unknown")
		register(opts.Registerer, s.log, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "counterd_resp_loop_deferred_reads_total",
			Help: "Event loops: reads of a connection put off to the next loop round because its client (its user once authenticated, else its IP address) ran its share of the round.",
		}, func() float64 { return float64(s.deferredReads.Load()) }))
	}
	return s
}

// Serve accepts connections on ln until Close. It returns nil after Close,
// the listener's error if it fails otherwise, and an error if the server
// was already serving.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	if s.ln != nil {
		s.mu.Unlock()
		return errors.New("resp: Serve called twice")
	}
	s.ln = ln
	s.serveDone = make(chan struct{})
	done := s.serveDone
	s.mu.Unlock()
	defer close(done)

	if s.opts.EventLoops > 0 {
		if err := s.startLoops(); err != nil {
			// Serve anyway, with a goroutine per connection.
			s.log.Warn("resp: event loops unavailable", "err", err)
		}
	}
	err := s.acceptLoop(ln)
	ln.Close()
	// Close every connection and wait for their goroutines, so that Serve
	// (and Close) return with nothing left behind.
	s.mu.Lock()
	open := make([]net.Conn, 0, len(s.clients))
	for c := range s.clients {
		open = append(open, c.nc)
	}
	s.mu.Unlock()
	for _, nc := range open {
		closeNow(nc)
	}
	s.conns.Wait()
	s.stopLoops()
	return err
}

func (s *Server) acceptLoop(ln net.Listener) error {
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// EMFILE and the like: back off instead of spinning.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("resp: accept failed", "err", err, "retry_in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-s.ctx.Done():
				t.Stop()
			}
			continue
		}
		backoff = 0
		if s.nconns.Load()+s.held.Load() >= int64(s.opts.MaxConns) {
			s.refuseConn(nc, errMaxClients, false)
			continue
		}
		slot, ok := s.opts.ClientConns.Take(nc.RemoteAddr())
		if !ok {
			s.refuseConn(nc, errMaxClientsAddr, true)
			continue
		}
		f := s.detach(nc) // nil: the connection keeps its goroutine
		if f != nil {
			nc = f
		}
		c := newClient(s, nc)
		c.connSlot = slot
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			s.opts.ClientConns.Give(slot)
			return nil
		}
		s.clients[c] = struct{}{}
		s.conns.Add(1)
		s.mu.Unlock()
		s.nconns.Add(1)
		s.totalConns.Add(1)
		if s.m != nil {
			s.m.conns.Inc()
			s.m.connsTotal.Inc()
		}
		if f != nil {
			s.attach(c)
		} else {
			go s.serveConn(c)
		}
	}
}

// refuseConn answers a connection over a cap with msg and closes it
// (like Redis: the client is told why), counting it.
// With Options.RefusePace, a client over its rate has the connection held
// for its pause first: in a slot of MaxConns when inSlot (it is over its
// address's cap, not the server's) and its address holds fewer than its
// cap, else as one of maxRejecting beyond; past those it is answered at
// once.
func (s *Server) refuseConn(nc net.Conn, msg string, inSlot bool) {
	s.rejectedConns.Add(1)
	if s.m != nil {
		s.m.rejected.Inc()
	}
	answer := func() {
		nc.SetWriteDeadline(time.Now().Add(time.Second))
		nc.Write([]byte("-" + msg + "\r\n"))
		nc.Close()
	}
	var pause time.Duration
	if ip := shed.AddrIP(nc.RemoteAddr()); ip.IsValid() {
		pause = s.opts.RefusePace.Pause(shed.ClientKey(ip))
	}
	if pause <= 0 {
		answer()
		return
	}
	if inSlot {
		if h, ok := s.heldConns.Take(nc.RemoteAddr()); ok {
			if s.nconns.Load()+s.held.Add(1) <= int64(s.opts.MaxConns) {
				time.AfterFunc(pause, func() {
					defer func() { s.held.Add(-1); s.heldConns.Give(h) }()
					answer()
				})
				return
			}
			s.held.Add(-1)
			s.heldConns.Give(h)
		}
	}
	if s.heldBeyond.Add(1) <= maxRejecting {
		time.AfterFunc(pause, func() {
			defer s.heldBeyond.Add(-1)
			answer()
		})
		return
	}
	s.heldBeyond.Add(-1)
	answer()
}

// closeNow closes a connection at once, so that its goroutine's blocked
// read or write returns. A TLS connection's own Close first sends a
// close_notify alert, which waits up to 5 s for a peer that does not read
// (while no write is in flight): its TCP connection is closed instead (the
// goroutine's later Close of the TLS connection then fails at once).
func closeNow(nc net.Conn) {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	nc.SetDeadline(time.Now())
	nc.Close()
}

// maxRejecting bounds the refused connections held beyond MaxConns.
const maxRejecting = 256

// Close stops accepting, closes every connection and waits for their
// goroutines. It is idempotent and safe to call before or without Serve.
// It is Shutdown without a deadline.
func (s *Server) Close() error {
	return s.Shutdown(context.Background())
}

// Shutdown stops accepting, closes every connection (cancelling the
// context of their commands) and waits until their goroutines and the
// event loops have ended or ctx is done. A connection's goroutine can
// outlive its closing only in a command that ignores its cancellation (a
// backend stuck on a lock, a disk or a peer): then Shutdown returns
// ctx.Err() once ctx is done, leaving that goroutine to end on its own.
// It is idempotent and safe to call before or without Serve.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		ln := s.ln
		s.mu.Unlock()
		s.cancel()
		if ln != nil {
			ln.Close()
		}
	})
	s.mu.Lock()
	done := s.serveDone
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Addr returns the listener's address, or nil before Serve.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

const (
	errMaxClients     = "ERR max number of clients reached"
	errMaxClientsAddr = "ERR max number of clients from this address reached"
)

// connDone unregisters a connection whose goroutine is ending.
func (s *Server) connDone(c *client, err error) {
	c.nc.Close()
	s.totalCmds.Add(c.ncmds)
	c.flushHits()
	if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
		s.log.Debug("resp: connection closed", "client", c.id, "addr", c.addr, "err", err)
	}
	c.endAdmission()
	s.opts.ClientConns.Give(c.connSlot)
	s.queryBytes.Add(-int64(c.held))
	s.mu.Lock()
	delete(s.clients, c)
	s.mu.Unlock()
	s.nconns.Add(-1)
	if s.m != nil {
		s.m.conns.Dec()
	}
	s.conns.Done()
}

// exec runs one command, recovering from a panic in it: the client gets
// an error and is disconnected, the server keeps running.
func (s *Server) exec(c *client, args [][]byte) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("resp: panic in command handler", "client", c.id, "cmd", string(truncate(args[0], 64)), "panic", r, "stack", string(debug.Stack()))
			c.writeError("ERR internal error")
			c.closing = true
		}
	}()
	s.dispatch(c, args)
}

// dispatch looks the command up and runs it, or queues it inside MULTI.
func (s *Server) dispatch(c *client, args [][]byte) {
	c.ncmds++
	cmd := s.lookup(c, args[0])
	if cmd == nil {
		if s.m != nil {
			s.unknown.calls.Inc()
		}
		if c.multi {
			c.multiErr = true
		}
		c.writeError(unknownCommandError(args))
		return
	}
	if cmd.arity > 0 && len(args) != cmd.arity || cmd.arity < 0 && len(args) < -cmd.arity {
		cmd.stats.rejected.Add(1)
		if s.m != nil {
			cmd.calls.Inc()
		}
		if c.multi {
			c.multiErr = true
		}
		c.writeError("ERR wrong number of arguments for '" + cmd.name + "' command")
		return
	}
	if s.opts.Auth != nil && !s.authorize(c, cmd, args) {
		statsOf(cmd, args).rejected.Add(1)
		if s.m != nil {
			cmd.calls.Inc()
		}
		if c.multi {
			c.multiErr = true
		}
		return
	}
	if c.multi && cmd.flags&flagTxControl == 0 {
		// The argument slices alias the connection's write-once read
		// buffer and stay valid; only the slice of them is reused.
		c.queue = append(c.queue, queued{cmd: cmd, args: append([][]byte(nil), args...)})
		c.writeStatus("QUEUED")
		return
	}
	if s.opts.Admission != nil && !c.onLoop && !c.ticket.Holding() && cmd.flags&(flagWrite|flagReadonly) != 0 {
		// Held until the batch's replies are written (client.endAdmission).
		if v := s.opts.Admission.Acquire(&c.ticket, s.admissionKey(c), 0); v != shed.Admitted {
			if s.opts.OnShed != nil {
				s.opts.OnShed(v)
			}
			if v == shed.ShedClient {
				c.writeError(errBusyClientReply)
			} else {
				c.writeError(errBusyReply)
			}
			return
		}
	}
	if cmd.gate != gateNone {
		exclusive, ok := s.lua.enter(c, cmd)
		if !ok {
			return
		}
		defer s.lua.leave(exclusive)
		if release, ok := s.lockCommandKeys(c, cmd, args); !ok {
			return
		} else if release != nil {
			defer release()
		}
	}
	if s.opts.Tracer != nil {
		s.runTraced(c, cmd, args)
		return
	}
	s.run(c, cmd, args)
}

// run executes a command and records its metrics. To read the clock once
// per command, a command's start is the previous one's end (c.tstart),
// reset when a read batch begins.
//
// It also keeps INFO's figures: the command's (or subcommand's) calls,
// time and failures (an error reply), the connection's last command, and
// the slow log. Without metrics commands are not timed (no clock read),
// so their time and the slow log stay empty.
func (s *Server) run(c *client, cmd *command, args [][]byte) {
	st := &cmd.stats
	if cmd.subs != nil {
		st = statsOf(cmd, args)
	}
	if c.lastCmd.Load() != st {
		c.lastCmd.Store(st)
	}
	at := len(c.out)
	if s.m == nil {
		cmd.fn(s, c, args)
		st.calls.Add(1)
		if len(c.out) > at && c.out[at] == '-' {
			st.failed.Add(1)
		}
		return
	}
	start := c.tstart
	cmd.fn(s, c, args)
	end := nanotime()
	d := end - start
	cmd.dur.Observe(float64(d) / 1e9)
	cmd.calls.Inc()
	st.calls.Add(1)
	st.ns.Add(d)
	if len(c.out) > at && c.out[at] == '-' {
		st.failed.Add(1)
	}
	if lim := s.slow.slowerThan.Load(); lim >= 0 && d >= lim*1000 && !skipSlowlog(cmd.name) {
		s.slow.add(c, args, time.Duration(d))
	}
	c.tstart = end
}

// nanotime is the runtime's monotonic clock, what time.Now reads besides
// the wall clock (half its cost; a clock read is ~0.15 µs on the VMs
// measured in docs/bench/history.md, "Issue 17, third pass").
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// lookup finds a command by name without allocating: the name is lowered
// into a per-connection buffer and looked up with a string conversion the
// compiler does not copy.
func (s *Server) lookup(c *client, name []byte) *command {
	if len(name) > len(c.lower) {
		return nil
	}
	b := c.lower[:len(name)]
	for i, ch := range name {
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		b[i] = ch
	}
	return s.cmds[string(b)]
}

// unknownCommandError words the error like Redis 7.
func unknownCommandError(args [][]byte) string {
	b := make([]byte, 0, 96)
	b = append(b, "ERR unknown command '"...)
	b = append(b, truncate(args[0], 128)...)
	b = append(b, "', with args beginning with: "...)
	start := len(b)
	for _, a := range args[1:] {
		if len(b)-start >= 128 {
			break
		}
		b = append(b, '\'')
		b = append(b, truncate(a, 128-(len(b)-start-1))...)
		b = append(b, '\'', ' ')
	}
	return string(b)
}

func truncate(b []byte, n int) []byte {
	if n < 0 {
		n = 0
	}
	if len(b) > n {
		return b[:n]
	}
	return b
}

// metrics are the Prometheus collectors.
type metrics struct {
	calls      *prometheus.CounterVec
	dur        *prometheus.HistogramVec
	conns      prometheus.Gauge
	connsTotal prometheus.Counter
	rejected   prometheus.Counter
	protoErrs  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, log *slog.Logger) *metrics {
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "counterd_resp_commands_total",
			Help: "Redis protocol commands processed, by command.",
		}, []string{"cmd"}),
		dur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "counterd_resp_command_duration_seconds",
			Help:    "Time to execute a Redis protocol command (excluding network I/O), by command.",
			Buckets: []float64{5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 1e-2, 5e-2, 0.25, 1},
		}, []string{"cmd"}),
		conns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "counterd_resp_connections",
			Help: "Open Redis protocol client connections.",
		}),
		connsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "counterd_resp_connections_total",
			Help: "Redis protocol client connections accepted.",
		}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "counterd_resp_rejected_connections_total",
			Help: "Redis protocol connections refused because MaxConns was reached.",
		}),
		protoErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "counterd_resp_protocol_errors_total",
			Help: "Redis protocol connections closed for malformed or oversized input.",
		}),
	}
	m.calls = register(reg, log, m.calls)
	m.dur = register(reg, log, m.dur)
	m.conns = register(reg, log, m.conns)
	m.connsTotal = register(reg, log, m.connsTotal)
	m.rejected = register(reg, log, m.rejected)
	m.protoErrs = register(reg, log, m.protoErrs)
	return m
}

// register registers c, or returns the collector already registered under
// the same description (a second Server on the same registry shares it).
func register[T prometheus.Collector](reg prometheus.Registerer, log *slog.Logger, c T) T {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing
			}
		}
		log.Warn("resp: metrics not registered", "err", err)
	}
	return c
}
