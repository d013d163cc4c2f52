package server

import (
	"bufio"
	"bytes"
	"io"
	"math"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/counterd/counterd/internal/shed"
)

// limitListener serves at most max connections at once, and at most
// perClient of one client address (shed.ConnCounter). One more is
// accepted, answered by reject and closed, rather than left in the
// kernel's backlog: the client learns that the node is full, and a flood
// of connections cannot use up the file descriptors that the served
// clients and the other listeners need, nor one address every slot.
//
// Refusals are paced per client address (pace: --shed-rate-per-client
// refusals a second, beyond which a refused connection is held unread
// before its answer, up to maxConnHold). A flood that reconnects as soon
// as it is refused (wrk, a client pool) otherwise spins the node on
// accept, answer and close: at 5,000 connections against a cap of 2,468,
// a quarter of the node's CPU went to that churn, and the requests of
// other clients waited behind it. A held connection takes a slot of the
// listener (max) while it is held, and one address holds at most
// perClient (held); a refusal that finds no such slot (the listener is
// full, or its address holds perClient already) is one of at most
// maxRejecting answered beyond the cap, after the same pause, and past
// those it is closed unanswered. Accept itself never waits: a new client
// is not stuck in the backlog behind a flood's connections.
// It is safe for concurrent use, like the listener it wraps.
type limitListener struct {
	net.Listener
	max       int64
	n         atomic.Int64      // connections being served or held
	rejecting atomic.Int64      // refusals being answered beyond max
	reject    func(net.Conn)    // answers and closes a refused connection
	onReject  func()            // counts it (metrics)
	clients   *shed.ConnCounter // nil: no cap per client
	held      *shed.ConnCounter // refused connections held, per client (clients' cap)
	pace      *shed.Pacer       // nil: refusals answered at once
	// maxRejecting bounds the refusals answered beyond max at once
	// (the constant; tests lower it).
	maxRejecting int64
}

// maxRejecting bounds the refused connections being answered beyond the
// listener's cap at once; past it they are closed unanswered.
const maxRejecting = 256

// maxConnHold is the longest a refused connection is held unread before
// its answer (with --shed-rate-per-client refusals a second, one address
// that keeps reconnecting holds about rate x maxConnHold connections, at
// most its cap).
const maxConnHold = 2 * time.Second

func newLimitListener(ln net.Listener, max int, clients *shed.ConnCounter, pace *shed.Pacer, reject func(net.Conn), onReject func()) *limitListener {
	return &limitListener{Listener: ln, max: int64(max), clients: clients, held: clients.Clone(), pace: pace, reject: reject, onReject: onReject,
		maxRejecting: maxRejecting}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := shed.AddrIP(c.RemoteAddr())
		if takeBelow(&l.n, l.max) {
			client, ok := l.clients.TakeIP(ip)
			if ok {
				return &limitConn{Conn: c, l: l, client: client}, nil
			}
			// Over its address's cap: held in the slot taken, if its
			// address holds fewer than its cap already.
			if h, ok := l.held.TakeIP(ip); ok {
				l.refuse(c, ip, func() { l.held.Give(h); l.n.Add(-1) })
				continue
			}
			l.n.Add(-1)
		}
		if !takeBelow(&l.rejecting, l.maxRejecting) {
			if l.onReject != nil {
				l.onReject()
			}
			c.Close()
			continue
		}
		l.refuse(c, ip, func() { l.rejecting.Add(-1) })
	}
}

// refuse answers c with reject after its client's pause, then calls done.
func (l *limitListener) refuse(c net.Conn, ip netip.Addr, done func()) {
	if l.onReject != nil {
		l.onReject()
	}
	var pause time.Duration
	if ip.IsValid() {
		pause = l.pace.Pause(shed.ClientKey(ip))
	}
	run := func() {
		defer done()
		l.reject(c)
	}
	if pause > 0 {
		time.AfterFunc(pause, run) // no goroutine while it is held
	} else {
		go run()
	}
}

// limitConn gives its slots back on its first Close.
type limitConn struct {
	net.Conn
	l      *limitListener
	client netip.Addr // counted in l.clients (invalid: not counted)
	once   sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.n.Add(-1)
		c.l.clients.Give(c.client)
	})
	return err
}

// perClientCap resolves --max-conns-per-client for a listener whose cap
// is listenerCap: -1 none, 0 a quarter of the listener's cap (so that at
// least four addresses share it), else the value.
func perClientCap(v, listenerCap int) int {
	switch {
	case v > 0:
		return v
	case v < 0:
		return 0
	}
	return max(1, listenerCap/4)
}

// httpBusy is the answer to an HTTP connection over --http-max-conns.
var httpBusy = func() []byte {
	body := `{"status":"error","error":{"code":"overloaded","message":"too many connections, retry later"}}` + "\n"
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " +
		itoa(len(body)) + "\r\n\r\n" + body)
}()

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		if n /= 10; n == 0 {
			return string(b[i:])
		}
	}
}

// rejectHTTP answers 503 without reading the request, then reads (and
// drops) what the client sent until it closes: closing with its request
// unread would reset the connection, and the client could lose the answer.
func rejectHTTP(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	// Read the request's head first: an answer sent before the request is
	// written reaches a client as an unsolicited response on an idle
	// connection (Go's client reports an error), not as this 503.
	br := bufio.NewReaderSize(c, 4096)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil || len(bytes.TrimRight(line, "\r\n")) == 0 {
			break
		}
	}
	if _, err := c.Write(httpBusy); err != nil {
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
}

// connCap resolves a --http-max-conns or --resp-max-conns value: -1
// unlimited, 0 derived from the file-descriptor limit (half of it, less a
// reserve for files and peers, for each of the two listeners), at most
// 10000.
func connCap(v int) int {
	switch {
	case v > 0:
		return v
	case v < 0:
		return math.MaxInt32
	}
	n := 10000
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < math.MaxInt32 {
		n = min(n, max(64, (int(rl.Cur)-256)/2))
	}
	return n
}

// isWildcard reports whether addr binds every interface.
func isWildcard(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	host = strings.Trim(host, "[]")
	ip := net.ParseIP(host)
	return host == "" || ip != nil && ip.IsUnspecified()
}

// takeBelow adds one to a unless it is at max already: the count never
// passes max, even for a moment (an add then a take-back would show it
// over to its readers: the gauges and the tests).
func takeBelow(a *atomic.Int64, max int64) bool {
	for {
		v := a.Load()
		if v >= max {
			return false
		}
		if a.CompareAndSwap(v, v+1) {
			return true
		}
	}
}
