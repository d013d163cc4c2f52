package server

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/shed"
)

// HTTP admission (docs/security.md, "Overload"). Under overload most of
// the cost of a request is the HTTP server's own (parsing, headers, the
// handler chain), so a limit inside the handler sheds too late: a 503
// costs about as much as a 200, and a light client waits behind
// thousands of flooding connections. admitConn moves the decision in
// front of the HTTP server, into the connection's Read:
//
//   - when a new request arrives, its head is framed here (request line,
//     Content-Length, Connection) without allocating;
//   - the kernel's receive time of its bytes (rxReader) says how long it
//     already waited in the socket, which counts against --max-queue-wait;
//   - the request then waits for a slot of a shed.Fair, which serves
//     clients round-robin and adapts its limit to latency; a client is
//     the user of a valid bearer token (with --auth), else the address a
//     --trusted-proxies peer forwards for, else the peer's IP address
//     (requestKey);
//   - a request shed by it is answered here with a prebuilt 503 and
//     Retry-After, its bytes consumed, and the connection kept for the
//     next request: the HTTP server never sees it; a client refused
//     more often than --shed-rate-per-client has that connection paused
//     (shed.Pacer);
//   - an admitted request is handed to the HTTP server, and its slot is
//     released when the server reads the connection's next request
//     (its answer is written by then) or closes the connection; the time
//     from its bytes' receive time to then is its latency
//     (counterd_http_admitted_latency_seconds), socket wait included.
//
// Only plain HTTP/1.1 requests whose head and body arrive in one read
// and that carry a Content-Length (or no body) are framed. Anything else
// (a head split across reads, a chunked body, pipelining, Expect,
// HTTP/1.0, TLS) turns the connection to pass-through for good: its
// requests are limited by the handler-level limiter (--max-inflight) only.
// GET /metrics, /healthz and /readyz are never shed.

type admitState uint8

const (
	admitIdle    admitState = iota // between requests
	admitBody                      // admitted; body bytes still to come
	admitAwait                     // admitted and read whole; its answer is being written
	admitPassing                   // not framed: pass-through from now on
)

// admission is the shared part of every admitConn.
type admission struct {
	fair   *shed.Fair
	onShed func(shed.Verdict) // counts shed requests (metrics); nil: none
	pace   *shed.Pacer        // nil: shed connections are read again at once
	idle   time.Duration      // read deadline after a shed answer (--http-idle-timeout)
	// onPass counts connections turned to pass-through (metrics).
	onPass func()
	// auth (--auth) names the client of a request with a valid bearer
	// token; nil: clients are addresses.
	auth *auth.Store
	// trusted (--trusted-proxies): peers whose X-Forwarded-For or
	// Forwarded header names the client.
	trusted []netip.Prefix
	// gate (--max-busy-conns-per-client) parks a client's connections
	// beyond its requests in hand while the node is overloaded; nil:
	// none. lag is the socket wait that counts as overload, overUntil
	// (Unix nanoseconds) when the last sign of overload expires.
	gate      *shed.Gate
	lag       time.Duration
	overUntil atomic.Int64
	// latency observes admitted requests' latency, by whether they
	// waited for their client's turn ([1]) or not ([0]); nil: none.
	latency *[2]prometheus.Observer
}

// admittedLatencyBuckets are counterd_http_admitted_latency_seconds'
// buckets: 1 ms to 5 s, finest around --max-queue-wait (20 ms) and the
// 50 ms goal of issue 11, where a p99 is read, and fine enough past the
// 250 ms pacing pause (maxShedPause) that the requests read after one
// are not spread over a wide bucket by histogram_quantile.
var admittedLatencyBuckets = []float64{.001, .0025, .005, .01, .015, .02, .03, .04, .05, .075, .1, .15, .2, .25, .3, .4, .5, .75, 1, 2.5, 5}

// overloadHold is how long a sign of overload (a shed request, or one
// that waited --max-queue-wait / 2 in its socket) keeps the gate parking.
const overloadHold = time.Second

// overloaded reports whether a sign of overload was seen within
// overloadHold (the gate's overload function).
func (a *admission) overloaded() bool { return time.Now().UnixNano() < a.overUntil.Load() }

// sawOverload records a sign of overload.
func (a *admission) sawOverload() {
	if until := time.Now().Add(overloadHold).UnixNano(); until > a.overUntil.Load()+int64(10*time.Millisecond) {
		a.overUntil.Store(until)
	}
}

type admitListener struct {
	net.Listener
	a *admission
}

func (l *admitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	ac := &admitConn{Conn: c, a: l.a}
	if ip := shed.AddrIP(c.RemoteAddr()); ip.IsValid() {
		ac.key = shed.ClientKey(ip)
		ac.proxied = shed.InPrefixes(l.a.trusted, ip)
		// The clients behind a trusted proxy share its connections:
		// they are not gated by its address.
		ac.gated = l.a.gate != nil && !ac.proxied
	}
	if lc, ok := c.(*limitConn); ok {
		ac.rx = newRxReader(lc.Conn)
		ac.conns, ac.client = lc.l.clients, lc.client
	}
	return ac, nil
}

type admitConn struct {
	net.Conn
	a   *admission
	key shed.Key // the peer's address as a client
	// conns counts the connections of client, the peer's address
	// (--max-conns-per-client); nil or the zero Addr: not counted.
	conns     *shed.ConnCounter
	client    netip.Addr
	proxied   bool      // the peer is a --trusted-proxies address
	rx        *rxReader // reads with the kernel's receive time; nil: unknown
	state     admitState
	resumed   time.Time // end of the pause after the last shed answer (zero: none)
	remaining int64     // body bytes still to come (admitBody)
	// ticket holds the slot of a.fair of the request being served; the
	// request's context carries it (connContext), so that its waits on
	// I/O park it (shed.IOWait).
	ticket shed.Ticket
	// The HTTP server's background read took the next request's first
	// byte (early); the server holds it, so that request cannot be
	// answered here.
	early     bool
	earlyByte byte
	// gated: the connection's requests count against a.gate by key;
	// permit: it holds one of the gate's permits (a request in hand),
	// given back once, by its goroutine or by Close.
	gated  bool
	permit atomic.Bool
	// quiet: the socket signals no readiness (rxReader.quiet), while
	// the connection takes turns at the gate.
	quiet bool
	gw    shed.GateWaiter
	// rxAt is when the admitted request being served was received (the
	// kernel's receive time of its bytes, else when they were read), in
	// Unix nanoseconds; 0: none to observe. turned: it waited for its
	// client's turn. Close may take them from another goroutine.
	rxAt   atomic.Int64
	turned atomic.Bool
}

// Read frames requests and admits them; see the comment above.
func (c *admitConn) Read(p []byte) (int, error) {
	if len(p) <= 1 || c.state == admitPassing {
		// The HTTP server's background read (one byte, while a handler
		// runs), or pass-through.
		n, err := c.Conn.Read(p)
		if n > 0 && len(p) <= 1 && c.state != admitPassing {
			if c.state == admitAwait {
				c.early, c.earlyByte = true, p[0]
			} else {
				c.pass() // a byte outside any request we framed
			}
		}
		return n, err
	}
	switch c.state {
	case admitBody:
		n, err := c.Conn.Read(p)
		c.remaining -= int64(n)
		if c.remaining == 0 {
			c.state = admitAwait
		} else if c.remaining < 0 {
			c.pass() // pipelined: the next request came in the same read
		}
		return n, err
	case admitAwait:
		c.observe() // the answer is written: the server reads the next request
		c.release()
		c.state = admitIdle
	}
	for {
		n, at, parked, err := c.readGated(p)
		if n == 0 {
			c.givePermit()
			return n, err
		}
		rxAt := at // the request's latency counts from here
		if rxAt.IsZero() {
			rxAt = time.Now()
		}
		waited := c.socketWait(at)
		// Sent during the pause after a shed answer (see below).
		inPause := !at.IsZero() && at.Before(c.resumed)
		if !parked && waited >= c.a.lag && c.a.lag > 0 {
			c.a.sawOverload()
		}
		if c.gated && !c.permit.Load() {
			t0 := time.Now()
			ok, waitedTurn := c.a.gate.Take(c.key, &c.gw)
			if !ok {
				return 0, net.ErrClosed // closed while it waited
			}
			c.permit.Store(true)
			if waitedTurn {
				waited += time.Since(t0)
				parked = true
			}
		}
		buf, early := p[:n], c.early
		if early { // rare: frame the request with its first byte
			buf = append([]byte{c.earlyByte}, buf...)
			c.early = false
		}
		f, ok := frameRequest(buf)
		if !ok {
			c.pass()
			return n, err
		}
		admitted := false
		// A request whose body is still to come is left to the handler
		// limit: admitted here, it would hold a slot while a slow client
		// trickles its body (up to --http-read-body-timeout).
		if !f.neverShed && c.a.fair != nil && f.total <= len(buf) {
			key := c.requestKey(&f)
			var v shed.Verdict
			if c.a.fair.Stale(waited, parked || inPause) {
				// It waited for its client's turn (the client over
				// its busy connections), or through the pause its
				// client was given for being refused too often, past
				// the latency bound: the excess of a flood, refused
				// like a stale request of a client over its share of
				// the queue.
				v = c.a.fair.ShedStale()
			} else if c.flooding() {
				// Its client is over its part of the node: held to
				// --max-queue-wait from its receive time, free slot
				// or not (shed.Fair.AcquireBounded).
				v = c.a.fair.AcquireBounded(&c.ticket, key, waited)
			} else {
				v = c.a.fair.Acquire(&c.ticket, key, waited)
			}
			if v != shed.Admitted {
				c.a.sawOverload()
				if c.a.onShed != nil {
					c.a.onShed(v)
				}
			}
			if v == shed.Admitted {
				c.resumed = time.Time{}
				admitted = true
			} else if !early && f.total == n {
				c.givePermit()
				if err := c.shedAnswer(v, f.close); err != nil || f.close {
					// Closed after its answer, or the answer could not be
					// written whole: the connection cannot carry another.
					return 0, io.EOF
				}
				// A client refused too often has its refused connection
				// paused (shed.Pacer). A request read after a pause that
				// was sent during it (its client retried at once, not
				// minding Retry-After) has waited the pause in its
				// socket: past --max-queue-wait it is refused as stale
				// above, and the connection paused again while its client
				// is refused too often, so the requests admitted keep to
				// the latency bound and the flood's excess waits in its
				// sockets, refused once a pause.
				if d := c.a.pace.Pause(key); d > 0 {
					time.Sleep(d)
					c.resumed = time.Now()
				}
				continue // the next request on this connection
			}
			// Shed but not answerable here (its bytes are not all read,
			// or the server holds its first byte): the HTTP server
			// answers it, through the handler limiter.
		}
		switch {
		case f.total == len(buf):
			c.state = admitAwait
			if admitted && c.a.latency != nil {
				c.turned.Store(parked)
				c.rxAt.Store(rxAt.UnixNano())
			}
		case f.total > len(buf):
			c.state, c.remaining = admitBody, int64(f.total-len(buf))
			c.loud() // its body is read in the poller
		default:
			c.pass() // pipelined
		}
		return n, err
	}
}

// flooding reports whether the connection's client (its address) is
// over its share: it holds more connections than its share of the queue
// (--max-queue-per-client), so that it can have more requests in hand
// than any client within its share; where its connections are not
// counted (--max-conns-per-client -1), whether it has more requests in
// hand than --max-busy-conns-per-client or connections waiting for a
// turn. Its requests are then held to --max-queue-wait from their
// receive time, refused past it rather than served late
// (shed.Fair.AcquireBounded). A client with at most its share of
// connections never is.
func (c *admitConn) flooding() bool {
	if c.conns != nil && c.client.IsValid() {
		return c.conns.Conns(c.client) > c.a.fair.MaxClientQueue()
	}
	return c.gated && c.a.gate.Over(c.key)
}

// readGated reads the start of a request like readRequest, first
// parking the connection at the gate when its client has its requests in
// hand while the node is overloaded (shed.Gate.Wait). A connection handed
// a permit that finds its socket empty (idle) gives it back and reads
// like any other. parked reports that the bytes read waited in the
// socket while the connection was parked: waiting for its client's
// turn, which is no sign of overload of the node (but counts against
// --max-queue-wait).
func (c *admitConn) readGated(p []byte) (n int, at time.Time, parked bool, err error) {
	if c.gated && c.rx != nil && c.a.gate.Wait(c.key, &c.gw) {
		c.permit.Store(true)
		if !c.quiet {
			// Parked once: it stays quiet while it takes turns.
			c.rx.quiet(true)
			c.quiet = true
		}
		n, at, empty, err := c.rx.tryRead(p)
		if !empty {
			return n, at, true, err
		}
		c.givePermit()
	}
	c.loud()
	n, at, err = c.readRequest(p)
	return n, at, false, err
}

// loud makes a quiet socket signal readiness again, before the
// connection waits in the poller.
func (c *admitConn) loud() {
	if c.quiet {
		c.rx.quiet(false)
		c.quiet = false
	}
}

// givePermit gives back the connection's gate permit, if it holds one.
func (c *admitConn) givePermit() {
	if c.permit.CompareAndSwap(true, false) {
		c.a.gate.Give(c.key)
	}
}

// readRequest reads the start of a request and when the kernel received
// its bytes (zero if unknown).
func (c *admitConn) readRequest(p []byte) (int, time.Time, error) {
	if c.rx == nil {
		n, err := c.Conn.Read(p)
		return n, time.Time{}, err
	}
	return c.rx.read(p)
}

// socketWait is how long bytes received at at (zero: unknown, no wait)
// waited in the socket before they were read.
func (c *admitConn) socketWait(at time.Time) time.Duration {
	if at.IsZero() {
		return 0
	}
	return max(0, time.Since(at))
}

// observe records the latency of the admitted request whose answer is
// written (the server reads the next request, or closes the connection),
// at most once: from when its bytes were received, so its wait in the
// socket, for its client's turn and for a slot all count.
func (c *admitConn) observe() {
	if at := c.rxAt.Swap(0); at != 0 {
		turned := 0
		if c.turned.Load() {
			turned = 1
		}
		c.a.latency[turned].Observe(max(0, float64(time.Now().UnixNano()-at)/1e9))
	}
}

// shedAnswer writes the prebuilt answer for a request shed with v (503,
// or 429 for a client over its share) whose bytes are all read. On an
// error, or with closeAfter, the connection is closed (a partly written
// answer would corrupt the next).
func (c *admitConn) shedAnswer(v shed.Verdict, closeAfter bool) error {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
	msg := shedAnswers[0][0]
	switch {
	case v == shed.ShedClient && closeAfter:
		msg = shedAnswers[1][1]
	case v == shed.ShedClient:
		msg = shedAnswers[1][0]
	case closeAfter:
		msg = shedAnswers[0][1]
	}
	_, err := c.Conn.Write(msg)
	if err != nil || closeAfter {
		c.Conn.Close()
		return err
	}
	if c.a.idle > 0 {
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.a.idle))
	}
	return nil
}

// pass turns the connection to pass-through, giving back its slot.
func (c *admitConn) pass() {
	c.release()
	c.loud()
	c.state = admitPassing
	if c.a.onPass != nil {
		c.a.onPass()
	}
}

func (c *admitConn) release() {
	if c.ticket.Holding() {
		c.a.fair.Release(&c.ticket) // a no-op if Close released it first
	}
	c.givePermit()
}

// Close releases the slot and the gate's permit (a connection closed
// after its answer, or mid-request), ends a wait at the gate, and closes
// the connection.
func (c *admitConn) Close() error {
	err := c.Conn.Close()
	c.observe() // its answer written, or the connection given up
	c.release() // at most once: Release empties the ticket under the Fair's lock
	if c.gated {
		c.a.gate.Cancel(&c.gw)
	}
	return err
}

// shedAnswers are the early answers, by [client over its share][close]:
// the guard's error body with Retry-After, 503 "overloaded" when the
// node is overloaded, 429 "too_many_requests" when the client's own
// queue is full while other clients are served.
var shedAnswers = func() (a [2][2][]byte) {
	for i, st := range []struct{ status, code, msg string }{
		{"503 Service Unavailable", codeOverloaded, "server overloaded, retry later"},
		{"429 Too Many Requests", codeTooManyRequests, "too many requests of this client waiting, retry later"},
	} {
		body := `{"status":"error","error":{"code":"` + st.code + `","message":"` + st.msg + `"}}` + "\n"
		head := "HTTP/1.1 " + st.status + "\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\nRetry-After: 1\r\nContent-Length: " + itoa(len(body)) + "\r\n"
		a[i][0], a[i][1] = []byte(head+"\r\n"+body), []byte(head+"Connection: close\r\n\r\n"+body)
	}
	return a
}()

// framed is what frameRequest found in a request's head.
type framed struct {
	total     int  // bytes of head and body
	close     bool // Connection: close
	neverShed bool // GET /metrics, /healthz or /readyz
	// Header values that name the client (requestKey), slices of the
	// request's bytes: Authorization, and the last maxForwardLines lines
	// of X-Forwarded-For and of Forwarded.
	authz     []byte
	xff, fwd  [maxForwardLines][]byte
	nxff, nfw int
}

// maxForwardLines is how many X-Forwarded-For (or Forwarded) lines of a
// request are kept: the client is found from the right, so the oldest
// lines are the ones dropped.
const maxForwardLines = 4

// keep appends line to lines (n kept so far), dropping the oldest beyond
// maxForwardLines.
func keep(lines *[maxForwardLines][]byte, n *int, line []byte) {
	if *n == maxForwardLines {
		copy(lines[:], lines[1:])
		*n--
	}
	lines[*n] = line
	*n++
}

// frameRequest frames the HTTP/1.1 request at the start of b: its head
// must be complete in b and its body, if any, sized by one
// Content-Length. ok is false for anything else (an incomplete head,
// Transfer-Encoding, Expect, Upgrade, HTTP/1.0, a malformed head), which
// the HTTP server then handles (and answers 400 where it must).
func frameRequest(b []byte) (f framed, ok bool) {
	end := bytes.Index(b, crlfcrlf)
	if end < 0 {
		return f, false
	}
	head := b[:end+2] // every line ends in \r\n
	nl := bytes.Index(head, crlf)
	line := head[:nl]
	sp1 := bytes.IndexByte(line, ' ')
	sp2 := bytes.LastIndexByte(line, ' ')
	if sp1 <= 0 || sp2 <= sp1 || !bytes.Equal(line[sp2+1:], http11) {
		return f, false
	}
	method, target := line[:sp1], line[sp1+1:sp2]
	if bytes.Equal(method, methodHead) {
		return f, false // its answer has no body, unlike the prebuilt 503
	}
	if bytes.Equal(method, methodGet) {
		for _, p := range neverShedPaths {
			if bytes.Equal(target, p) {
				f.neverShed = true
			}
		}
	}
	clen, seenLen := int64(0), false
	for rest := head[nl+2:]; len(rest) > 0; {
		i := bytes.Index(rest, crlf)
		h := rest[:i]
		rest = rest[i+2:]
		colon := bytes.IndexByte(h, ':')
		if colon <= 0 {
			return f, false
		}
		name, val := h[:colon], bytes.TrimSpace(h[colon+1:])
		switch {
		case bytes.EqualFold(name, hdrContentLength):
			if seenLen || len(val) == 0 || len(val) > 12 {
				return f, false
			}
			seenLen = true
			for _, d := range val {
				if d < '0' || d > '9' {
					return f, false
				}
				clen = clen*10 + int64(d-'0')
			}
		case bytes.EqualFold(name, hdrTransferEncoding), bytes.EqualFold(name, hdrExpect), bytes.EqualFold(name, hdrUpgrade):
			return f, false
		case bytes.EqualFold(name, hdrConnection):
			if containsFold(val, tokClose) {
				f.close = true
			}
		case bytes.EqualFold(name, hdrAuthorization):
			f.authz = val
		case bytes.EqualFold(name, hdrXForwardedFor):
			keep(&f.xff, &f.nxff, val)
		case bytes.EqualFold(name, hdrForwarded):
			keep(&f.fwd, &f.nfw, val)
		}
	}
	f.total = end + 4 + int(clen)
	return f, true
}

// containsFold reports whether tok appears in v, ASCII case-insensitively.
func containsFold(v, tok []byte) bool {
	for i := 0; i+len(tok) <= len(v); i++ {
		if bytes.EqualFold(v[i:i+len(tok)], tok) {
			return true
		}
	}
	return false
}

var (
	crlf, crlfcrlf      = []byte("\r\n"), []byte("\r\n\r\n")
	http11, methodGet   = []byte("HTTP/1.1"), []byte("GET")
	methodHead          = []byte("HEAD")
	hdrContentLength    = []byte("Content-Length")
	hdrTransferEncoding = []byte("Transfer-Encoding")
	hdrExpect           = []byte("Expect")
	hdrUpgrade          = []byte("Upgrade")
	hdrConnection       = []byte("Connection")
	hdrAuthorization    = []byte("Authorization")
	hdrXForwardedFor    = []byte("X-Forwarded-For")
	hdrForwarded        = []byte("Forwarded")
	tokClose            = []byte("close")
	neverShedPaths      = [][]byte{[]byte("/metrics"), []byte("/healthz"), []byte("/readyz")}
)

// newFair returns the per-client admission shared by HTTP, RESP and gRPC
// (docs/security.md, Overload), nil when shedding is off (--max-inflight
// -1). lim is the handler limiter, whose bounds it shares.
func newFair(cfg Config, lim *shed.Limiter, reg prometheus.Registerer) *shed.Fair {
	if lim == nil {
		return nil
	}
	lc := lim.Config()
	fair := shed.NewFair(shed.FairConfig{
		MaxLimit: lc.MaxInflight, MinLimit: admissionMinLimit(lc.MaxInflight), MaxQueue: max(lc.MaxQueue, 1), MaxClientQueue: cfg.MaxClientQueue, MaxWait: lc.MaxWait,
	})
	registerFairGauges(reg, fair)
	return fair
}

// newAdmission returns the HTTP admission in front of the HTTP server,
// nil when fair is nil or --http-admission is off, and registers its
// metrics on reg.
func newAdmission(cfg Config, fair *shed.Fair, store *auth.Store, sm *shedMetrics, reg prometheus.Registerer) *admission {
	if fair == nil || !cfg.HTTPAdmission {
		return nil
	}
	passed := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "counterd_http_admission_passthrough_total",
		Help: "HTTP connections whose requests could not be framed before the HTTP server (split heads, chunked bodies, pipelining, HTTP/1.0): admitted by --max-inflight only.",
	})
	lat := newAdmittedLatency()
	reg.MustRegister(passed, lat)
	a := &admission{latency: latencyObservers(lat),
		fair: fair, onShed: sm.onShed("http"), pace: shed.NewPacer(float64(cfg.ShedRatePerClient), maxShedPause), idle: cfg.HTTPIdleTimeout, onPass: passed.Inc,
		auth: store, trusted: cfg.trustedProxies(), lag: cfg.MaxQueueWait / 2}
	a.gate = shed.NewGate(busyCap(cfg.MaxBusyConnsPerClient, fair), a.overloaded)
	if a.gate != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "counterd_http_conns_waiting_turn",
			Help: "HTTP connections not read while their client has --max-busy-conns-per-client requests in hand on an overloaded node (docs/security.md, Overload).",
		}, func() float64 { return float64(a.gate.Waiting()) }))
	}
	return a
}

// newAdmittedLatency returns counterd_http_admitted_latency_seconds.
func newAdmittedLatency() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "counterd_http_admitted_latency_seconds",
		Help:    "Latency of the HTTP requests admitted before the HTTP server, from the kernel's receive time of their bytes (their waits in the socket, for their client's turn and for a slot included) to when their answer was written; waited_turn: whether the request waited for its client's turn (--max-busy-conns-per-client). Its count is the requests admitted there; refusals are in counterd_shed_requests_total{front_end=\"http\"}.",
		Buckets: admittedLatencyBuckets,
	}, []string{"waited_turn"})
}

// latencyObservers are admission.latency's observers of h, whose series
// exist from the start.
func latencyObservers(h *prometheus.HistogramVec) *[2]prometheus.Observer {
	return &[2]prometheus.Observer{h.WithLabelValues("false"), h.WithLabelValues("true")}
}

// busyCap resolves --max-busy-conns-per-client: -1 none (0 returned), 0
// a client's share of fair's queue (--max-queue-per-client, 128 on 2
// cores), else the value. The default keeps the share rule's promise: a
// client with at most its share of connections, one request each,
// never waits for a turn, so it is never refused for time.
func busyCap(v int, fair *shed.Fair) int {
	switch {
	case v > 0:
		return v
	case v < 0:
		return 0
	}
	return fair.MaxClientQueue()
}

// connContext puts the ticket of an admitted connection into the context
// of its requests (http.Server.ConnContext), so that their waits on I/O
// (fsync, peers, remote stores) park it: see shed.IOWait.
func (a *admission) connContext(ctx context.Context, c net.Conn) context.Context {
	if ac, ok := c.(*admitConn); ok {
		return shed.WithTicket(ctx, &ac.ticket)
	}
	return ctx
}

// wrap returns ln with admission in front of its connections (ln itself
// when a is nil).
func (a *admission) wrap(ln net.Listener) net.Listener {
	if a == nil {
		return ln
	}
	return &admitListener{Listener: ln, a: a}
}

// maxShedPause is the longest a refused connection of a client over
// --shed-rate-per-client is left unread: long enough that a flood of
// immediate retries costs little, short enough that a well-behaved
// client sharing the flood's address is delayed at most this much.
const maxShedPause = 250 * time.Millisecond

// requestKey is the client a framed request is admitted as: the user of
// its bearer token when --auth accepts it (an invalid token counts as
// none: a client cannot pick a fresh key per request), else, from a
// --trusted-proxies peer, the client address its X-Forwarded-For (or,
// without one, Forwarded) header names, else the peer's address.
func (c *admitConn) requestKey(f *framed) shed.Key {
	return clientKey(c.a.auth, c.a.trusted, c.key, c.proxied, f)
}

// clientKey is requestKey for a request from peer (proxied: a
// --trusted-proxies address), shared with the HTTP event loops.
func clientKey(store *auth.Store, trusted []netip.Prefix, peer shed.Key, proxied bool, f *framed) shed.Key {
	if store != nil && len(f.authz) > 0 {
		if tok := bearerToken(f.authz); len(tok) > 0 {
			if p, err := store.Authenticate("", tok); err == nil {
				return shed.UserKey(p.User)
			}
		}
	}
	if proxied {
		if ip, ok := forwardedFor(f, trusted); ok {
			return shed.ClientKey(ip)
		}
	}
	return peer
}

// bearerToken is auth.BearerToken on a header's bytes.
func bearerToken(h []byte) []byte {
	sp := bytes.IndexByte(h, ' ')
	if sp < 0 || !bytes.EqualFold(h[:sp], []byte("Bearer")) {
		return nil
	}
	return bytes.TrimSpace(h[sp+1:])
}

// forwardedFor finds the client in a proxied request's X-Forwarded-For
// lines (or, when it has none, its Forwarded lines' for= parameters):
// reading from the right, as each proxy appends the address it received
// from, the first address that is not a trusted proxy. Entries left of it
// were written by the client itself and are not believed. ok is false
// when there is no such header or an entry does not parse (obfuscated
// or "unknown"): the peer's own address is used then.
func forwardedFor(f *framed, trusted []netip.Prefix) (netip.Addr, bool) {
	lines, n, forwarded := f.xff[:f.nxff], f.nxff, false
	if n == 0 {
		lines, n, forwarded = f.fwd[:f.nfw], f.nfw, true
	}
	var last netip.Addr
	for i := n - 1; i >= 0; i-- {
		line := lines[i]
		for len(line) > 0 {
			elem := line
			if j := bytes.LastIndexByte(line, ','); j >= 0 {
				elem, line = line[j+1:], line[:j]
			} else {
				line = nil
			}
			if forwarded {
				elem = forwardedForParam(elem)
			}
			ip, ok := parseForwardedAddr(bytes.TrimSpace(elem))
			if !ok {
				return netip.Addr{}, false
			}
			if !shed.InPrefixes(trusted, ip) {
				return ip, true
			}
			last = ip
		}
	}
	// Every entry a trusted proxy: the leftmost is the nearest to the client.
	return last, last.IsValid()
}

// forwardedForParam returns the value of the for= parameter of one
// Forwarded element ("for=192.0.2.1;proto=http"), nil if it has none.
func forwardedForParam(elem []byte) []byte {
	for len(elem) > 0 {
		pair := elem
		if j := bytes.IndexByte(elem, ';'); j >= 0 {
			pair, elem = elem[:j], elem[j+1:]
		} else {
			elem = nil
		}
		pair = bytes.TrimSpace(pair)
		if len(pair) > 4 && bytes.EqualFold(pair[:4], []byte("for=")) {
			return pair[4:]
		}
	}
	return nil
}

// parseForwardedAddr parses an address as proxies write it: "192.0.2.1",
// "192.0.2.1:4711", "2001:db8::1", "[2001:db8::1]:4711", any of them
// quoted (Forwarded).
func parseForwardedAddr(v []byte) (netip.Addr, bool) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	if len(v) == 0 || len(v) > 64 {
		return netip.Addr{}, false
	}
	s := string(v) // short; one allocation per proxied request
	if ip, err := netip.ParseAddr(s); err == nil {
		return ip.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' { // "[v6]" without a port
		if ip, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return ip, true
		}
	}
	return netip.Addr{}, false
}
