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
// Refusals are paced per client address (pace, the --shed-rate-per-client
// bucket that HTTP admission's refusals draw on too): a client over its
// rate has its refused connection held unread for the pause before it is
// answered. A flood that reconnects as soon as it is refused (wrk, or a
// client pool) otherwise spins the node on accept, answer and close: at
// 5,000 connections against a cap of 2,468, a quarter of the node's CPU
// went to that churn, and the requests of other clients waited behind
// it. At most maxRejecting refused connections are held or answered at
// once; beyond that Accept waits for one to finish, leaving the next
// connections in the kernel's backlog, where they cost nothing.
// It is safe for concurrent use, like the listener it wraps.
type limitListener struct {
	net.Listener
	max      int64
	n        atomic.Int64      // connections being served
	refusing chan struct{}     // a token per refused connection being held or answered
	reject   func(net.Conn)    // answers and closes a refused connection
	onReject func()            // counts it (metrics)
	clients  *shed.ConnCounter // nil: no cap per client
	pace     *shed.Pacer       // nil: refusals answered at once
}

// maxRejecting bounds the refused connections being held or answered at
// once; beyond it Accept waits.
const maxRejecting = 256

func newLimitListener(ln net.Listener, max int, clients *shed.ConnCounter, pace *shed.Pacer, reject func(net.Conn), onReject func()) *limitListener {
	return &limitListener{Listener: ln, max: int64(max), clients: clients, pace: pace, reject: reject, onReject: onReject,
		refusing: make(chan struct{}, maxRejecting)}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		if l.n.Add(1) <= l.max {
			client, ok := l.clients.TakeIP(ip)
			if ok {
				return &limitConn{Conn: c, l: l, client: client}, nil
			}
		}
		l.n.Add(-1)
		if l.onReject != nil {
			l.onReject()
		}
		var pause time.Duration
		if ip.IsValid() {
			pause = l.pace.Pause(shed.ClientKey(ip))
		}
		l.refusing <- struct{}{} // waits while maxRejecting are being refused
		go func() {
			defer func() { <-l.refusing }()
			if pause > 0 {
				time.Sleep(pause)
			}
			l.reject(c)
		}()
	}
}

// remoteIP is c's peer address (the zero Addr if not IP).
func remoteIP(c net.Conn) netip.Addr {
	switch a := c.RemoteAddr().(type) {
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap()
	case nil:
		return netip.Addr{}
	default:
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return netip.Addr{}
		}
		return ap.Addr().Unmap()
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
