package resp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/shed"
)

// Buffer sizes of a connection.
const (
	minReadBuf   = 4 << 10  // first read buffer
	maxReadBuf   = 64 << 10 // read buffers grow to this under load (bigger only for one big command)
	flushAt      = 64 << 10 // flush replies mid-batch beyond this
	maxKeptReply = 1 << 20  // a reply buffer bigger than this is dropped after a flush
)

// client is one connection and its state. It is used only by the
// connection's goroutine, except the fields under mu (read by CLIENT LIST)
// and nc (closed by Server.Close).
type client struct {
	s       *Server
	nc      net.Conn
	id      int64
	addr    string
	laddr   string
	created time.Time

	// Input: in[r:w] is read but not yet consumed. in is write-once: bytes
	// are never overwritten once read (a full buffer is replaced, not
	// reused), so argument slices and the strings made from them without
	// copying (see str) stay valid however long something holds them.
	in    []byte
	r, w  int
	held  int // bytes of in counted in Server.queryBytes (see reserveBuffer)
	lastN int // bytes of the last read
	p     parser

	out []byte // replies not yet written

	// Event loop state (loop_linux.go), used only by the loop.
	fd        int  // the connection's descriptor
	onLoop    bool // served by an event loop (not its own goroutine)
	share     *loopShare
	shareKey  shed.Key // the client share is of (its key in the loop's shares)
	outOff    int      // out[:outOff] is written
	wantWrite bool     // waiting for the socket to take out[outOff:]
	queuedOut bool     // on the loop's list of replies written at the round's end
	napEpoch  int64    // the loop's activity epoch in which it last served this connection (Options.Coalesce)
	lastRead  int64    // nanotime of the last read (idle timeout)

	auth  authState // the login, with Options.Auth
	first bool      // no command parsed yet (looksLikeHTTP)
	// Admission (Options.Admission): the client the connection belongs
	// to (its IP address), the slot of the batch being run, and the
	// context of engine calls, which carries that slot so that waits on
	// I/O (fsync, peers, remote stores) park it (shed.IOWait).
	key    netip.Addr
	ticket shed.Ticket
	// connSlot: the client address counted in Options.ClientConns.
	connSlot netip.Addr
	ctx      context.Context
	// locks: the key locks (Options.KeyLocker) this connection's running
	// command, script or EXEC holds, which ctx carries then (holdKeys).
	locks   contract.KeyLocks
	proto   int  // 2 or 3
	closing bool // QUIT or a panic: stop after flushing the replies

	tstart      int64     // metrics: nanotime when the current command started
	deadlineSet time.Time // when the read deadline was last moved (fill)
	ncmds       uint64    // commands run in this batch, for INFO

	// MULTI state.
	multi    bool
	multiErr bool // a command failed to queue: EXEC answers EXECABORT
	queue    []queued
	watched  []watch

	opBuf []contract.Op         // scratch ops for writes
	spans []opSpan              // scratch for EXEC
	res1  [1]contract.Result    // scratch result of a single op
	field [1]counter.FieldDelta // scratch field of HINCRBY

	lower   [24]byte // command name lowered for lookup
	scratch []byte   // number formatting

	// What CLIENT LIST reads from other goroutines: the descriptor, the
	// last command's figures (its name) and when its batch started.
	fd0     int
	respVer atomic.Int32 // proto, for CLIENT LIST
	lastCmd atomic.Pointer[cmdStats]
	active  atomic.Int64 // nanotime
	// Keyspace hits and misses of this batch, added to the server's at
	// its end (like ncmds).
	hits, misses uint64

	mu      sync.Mutex // guards the fields below
	name    string
	libName string
	libVer  string
}

// loopShare is one client's use of its loop's rounds.
type loopShare struct {
	conns int    // its connections on the loop
	round uint64 // the round used counts
	used  int    // commands run in that round
}

type queued struct {
	cmd  *command
	args [][]byte
}

func newClient(s *Server, nc net.Conn) *client {
	c := &client{
		s:       s,
		nc:      nc,
		id:      s.nextID.Add(1),
		created: time.Now(),
		proto:   2,
		first:   true,
		scratch: make([]byte, 0, 32),
		in:      make([]byte, minReadBuf),
		p: parser{
			maxArgs: s.opts.MaxArgs,
			maxBulk: s.opts.MaxBulkLen,
			maxCmd:  s.opts.MaxCommandBytes,
		},
	}
	if a := nc.RemoteAddr(); a != nil {
		c.addr = a.String()
		if ap, err := netip.ParseAddrPort(c.addr); err == nil {
			c.key = shed.ClientAddr(ap.Addr())
		}
	}
	c.ctx = s.ctx
	if s.opts.Admission != nil {
		c.ctx = shed.WithTicket(s.ctx, &c.ticket)
	}
	if a := nc.LocalAddr(); a != nil {
		c.laddr = a.String()
	}
	c.fd0 = connFD(nc)
	c.respVer.Store(2)
	c.active.Store(nanotime())
	return c
}

// serveConn is the connection's goroutine when the connection is not on an
// event loop (loop_linux.go): it runs every complete command in the read
// buffer, writes all their replies at once (so a pipeline costs one
// write), and reads more.
func (s *Server) serveConn(c *client) {
	var err error
	defer func() {
		if r := recover(); r != nil { // never let one connection take the server down
			s.log.Error("resp: panic serving connection", "client", c.id, "addr", c.addr, "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", r)
		}
		s.connDone(c, err)
	}()
	for {
		st := s.runBuffered(c)
		c.endBatch()
		if len(c.out) > 0 {
			if err = c.flush(); err != nil || st == stepClose {
				return
			}
		}
		switch st {
		case stepClose:
			return
		case stepFlushed:
			continue // replies written mid-batch: run the rest of the input
		}
		if err = c.fill(); err != nil {
			if errors.Is(err, errQueryBudget) {
				s.budgetExceeded(c)
				c.flush()
			}
			return
		}
	}
}

// step is what runBuffered stopped for.
type step uint8

const (
	stepRead    step = iota // every complete command ran: read more
	stepFlushed             // replies reached flushAt: write them, then run the rest
	stepClose               // write the replies, then close the connection
)

// runBuffered runs every complete command in the read buffer, appending
// their replies to c.out. It is the part of a connection's service that
// does not depend on how the connection does I/O (its own goroutine, or an
// event loop).
func (s *Server) runBuffered(c *client) step {
	if s.m != nil && !c.onLoop {
		c.tstart = nanotime() // a loop sets it once per round (serve)
	}
	if s.m != nil {
		c.active.Store(c.tstart)
	} else {
		c.active.Store(nanotime())
	}
	for c.r < c.w {
		n, args, perr := c.p.parse(c.in[c.r:c.w])
		if perr != "" {
			s.protoErrors.Add(1)
			if s.m != nil {
				s.m.protoErrs.Inc()
			}
			s.log.Debug("resp: protocol error, closing connection", "client", c.id, "addr", c.addr, "err", perr)
			c.writeError("ERR Protocol error: " + perr)
			return stepClose
		}
		if n == 0 {
			break // incomplete
		}
		c.r += n
		if args == nil {
			continue
		}
		if looksLikeHTTP(args, c.first, c.p.inline) {
			s.log.Warn(securityLogMsg, "client", c.id, "addr", c.addr)
			c.out = c.out[:0]
			return stepClose
		}
		c.first = false
		s.exec(c, args)
		if c.closing {
			return stepClose
		}
		if len(c.out) >= flushAt {
			// Never hold an overload slot while a slow reader blocks the
			// write (endBatch gives it back).
			return stepFlushed
		}
	}
	return stepRead
}

// endBatch ends a run of commands: it gives back the overload slot and
// adds the commands to the server's total (one shared atomic add per
// batch, not per command).
func (c *client) endBatch() {
	c.endAdmission()
	if c.ncmds > 0 {
		c.s.totalCmds.Add(c.ncmds)
		c.ncmds = 0
	}
	c.flushHits()
}

// flushHits adds the batch's keyspace hits and misses to the server's.
func (c *client) flushHits() {
	if c.hits > 0 {
		c.s.hits.Add(c.hits)
		c.hits = 0
	}
	if c.misses > 0 {
		c.s.misses.Add(c.misses)
		c.misses = 0
	}
}

// lookedUp counts a key read for INFO's keyspace_hits/misses.
func (c *client) lookedUp(found bool) {
	if found {
		c.hits++
	} else {
		c.misses++
	}
}

// budgetExceeded answers a connection whose read buffer would exceed
// MaxQueryBufferTotal; the caller writes the reply and closes.
func (s *Server) budgetExceeded(c *client) {
	s.protoErrors.Add(1)
	if s.m != nil {
		s.m.protoErrs.Inc()
	}
	c.writeError(errBudgetReply)
}

// endAdmission gives back the batch's overload slot, if it holds one.
func (c *client) endAdmission() {
	if c.ticket.Holding() {
		c.s.opts.Admission.Release(&c.ticket)
	}
}

// fill reads more input, replacing the buffer when it is full.
func (c *client) fill() error {
	if err := c.makeRoom(); err != nil {
		return err
	}
	if t := c.s.opts.IdleTimeout; t > 0 {
		// Moving the deadline costs a timer update: do it only when a
		// sixteenth of the timeout has passed since the last move, so an
		// idle connection is closed after between 15/16 and 1 timeout.
		if now := time.Now(); now.Sub(c.deadlineSet) >= t/16 {
			c.nc.SetReadDeadline(now.Add(t))
			c.deadlineSet = now
		}
	}
	n, err := c.nc.Read(c.in[c.w:])
	c.w += n
	c.lastN = n
	if n > 0 {
		return nil
	}
	return err
}

// makeRoom makes sure in has room after w, replacing the buffer when it is
// full (never overwriting bytes already read, see client.in).
func (c *client) makeRoom() error {
	rest := c.w - c.r
	if c.w == len(c.in) || rest == 0 && len(c.in) > maxReadBuf {
		// A big buffer is dropped as soon as its command is consumed, so
		// idle connections hold at most maxReadBuf.
		size := min(2*len(c.in), maxReadBuf)
		if rest == 0 && c.lastN < minReadBuf {
			size = minReadBuf // small reads: an interactive client
		}
		// Grow a long command's buffer geometrically: growing it by a
		// constant would copy the command once per read (quadratic CPU for
		// a command of many small arguments).
		if rest >= maxReadBuf/2 {
			size = max(size, min(2*rest, c.p.maxCmd+minReadBuf))
		}
		size = max(size, rest+minReadBuf, c.p.need+minReadBuf)
		if !c.s.reserveBuffer(c, size) {
			return errQueryBudget
		}
		nb := make([]byte, size)
		copy(nb, c.in[c.r:c.w])
		c.in, c.r, c.w = nb, 0, rest
	}
	return nil
}

// flush writes the pending replies.
func (c *client) flush() error {
	if len(c.out) == 0 {
		return nil
	}
	_, err := c.nc.Write(c.out)
	if cap(c.out) > maxKeptReply {
		c.out = nil
	} else {
		c.out = c.out[:0]
	}
	return err
}

// Reply writers: they append to c.out.

func (c *client) writeError(msg string) {
	if c.s != nil {
		c.s.errStats.count(msg)
	}
	c.out = append(c.out, '-')
	c.out = appendLine(c.out, msg)
}

// writeStatus writes a simple string.
func (c *client) writeStatus(s string) {
	c.out = append(c.out, '+')
	c.out = appendLine(c.out, s)
}

// appendLine appends s with CR and LF replaced by spaces, then CRLF.
func appendLine(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch == '\r' || ch == '\n' {
			ch = ' '
		}
		b = append(b, ch)
	}
	return append(b, '\r', '\n')
}

func (c *client) writeOK() { c.out = append(c.out, "+OK\r\n"...) }

func (c *client) writeInt(n int64) {
	c.out = append(c.out, ':')
	c.out = strconv.AppendInt(c.out, n, 10)
	c.out = append(c.out, '\r', '\n')
}

func (c *client) writeHeader(t byte, n int) {
	c.out = append(c.out, t)
	c.out = strconv.AppendInt(c.out, int64(n), 10)
	c.out = append(c.out, '\r', '\n')
}

func (c *client) writeBulk(b []byte) {
	c.writeHeader('$', len(b))
	c.out = append(c.out, b...)
	c.out = append(c.out, '\r', '\n')
}

func (c *client) writeBulkString(s string) {
	c.writeHeader('$', len(s))
	c.out = append(c.out, s...)
	c.out = append(c.out, '\r', '\n')
}

// writeVerbatim writes text as RESP3's verbatim string of format txt
// (INFO, CLIENT LIST), a bulk string in RESP2.
func (c *client) writeVerbatim(text string) {
	if c.proto != 3 {
		c.writeBulkString(text)
		return
	}
	c.writeHeader('=', len(text)+4)
	c.out = append(c.out, "txt:"...)
	c.out = append(c.out, text...)
	c.out = append(c.out, '\r', '\n')
}

// writeDouble writes f as RESP3's double, a bulk string in RESP2, both
// with Redis's "%.17g".
func (c *client) writeDouble(f float64) {
	s := strconv.FormatFloat(f, 'g', 17, 64)
	if c.proto != 3 {
		c.writeBulkString(s)
		return
	}
	c.out = append(c.out, ',')
	c.out = append(c.out, s...)
	c.out = append(c.out, '\r', '\n')
}

// writeBulkInt writes n as a bulk string.
func (c *client) writeBulkInt(n int64) {
	c.scratch = strconv.AppendInt(c.scratch[:0], n, 10)
	c.writeBulk(c.scratch)
}

// writeNull writes a null bulk string in RESP2 and a null in RESP3.
func (c *client) writeNull() {
	if c.proto == 3 {
		c.out = append(c.out, "_\r\n"...)
		return
	}
	c.out = append(c.out, "$-1\r\n"...)
}

// writeNullArray writes a null array (EXEC after a failed WATCH).
func (c *client) writeNullArray() {
	if c.proto == 3 {
		c.out = append(c.out, "_\r\n"...)
		return
	}
	c.out = append(c.out, "*-1\r\n"...)
}

func (c *client) writeArray(n int) { c.writeHeader('*', n) }

// writeMap writes a map header of n pairs: a RESP3 map, or an array of 2n
// elements in RESP2.
func (c *client) writeMap(n int) {
	if c.proto == 3 {
		c.writeHeader('%', n)
		return
	}
	c.writeHeader('*', 2*n)
}

// writeSet writes a set header: a RESP3 set, or an array in RESP2.
func (c *client) writeSet(n int) {
	if c.proto == 3 {
		c.writeHeader('~', n)
		return
	}
	c.writeHeader('*', n)
}

func (c *client) setName(name string) {
	c.mu.Lock()
	c.name = name
	c.mu.Unlock()
}

func (c *client) getName() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.name
}
