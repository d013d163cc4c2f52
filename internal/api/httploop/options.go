package httploop

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/counterd/counterd/internal/shed"
)

// Options configure a Front.
type Options struct {
	// Loops is the number of event loops; 0: none (every connection goes
	// to the HTTP server, as without a Front).
	Loops int
	// Handler runs the requests a loop serves: the same handler chain
	// the HTTP server runs (authentication, guard, routes), so answers
	// are the same. It must not block (wait on a network or an fsync):
	// it runs on the loop.
	Handler http.Handler
	// Serves reports whether the loop runs requests for method and path;
	// others are handed over. Nil: HotRoutes.
	Serves func(method, path []byte) bool
	// MaxBody is the largest body a loop buffers; larger requests are
	// handed over (where the guard answers 413 past --max-body).
	MaxBody int64
	// IdleTimeout closes a connection without a request for that long;
	// ReadHeaderTimeout one whose request has not arrived whole by then.
	IdleTimeout, ReadHeaderTimeout time.Duration
	// ReadBodyTimeout closes a connection whose request's head has
	// arrived but whose body has not arrived whole that long after
	// (--http-read-body-timeout: a client trickling its body is cut as
	// the HTTP server cuts it). 0: only ReadHeaderTimeout bounds it.
	ReadBodyTimeout time.Duration
	// WriteTimeout closes a connection whose answers the socket has not
	// taken for that long (its client does not read them).
	WriteTimeout time.Duration
	// TCPConn finds the TCP connection inside a connection the listener
	// accepted (its wrappers count connections; Close is still called on
	// the accepted connection when the loop closes it). Nil, or a nil
	// result: the connection is not put on a loop.
	TCPConn func(net.Conn) *net.TCPConn
	// Key is the client a request counts against (per-client budget of a
	// round, admission); nil: the peer's address.
	Key func(peer shed.Key, proxied bool, h Head) shed.Key
	// Proxied reports whether a peer is a trusted proxy (Key's argument).
	Proxied func(peer netip.Addr) bool
	// OnShed is called for every request shed on a loop.
	OnShed func(shed.Verdict)
	// Fair, when set, admits the requests a loop runs, as the HTTP
	// server's admission does (docs/security.md, Overload): a connection
	// takes a slot for its request when the loop parses it and holds it
	// until its answer is written (its pipelined requests of the round run
	// under it); a request that finds no slot free waits in the Fair's
	// queue (shed.Fair.AcquireAsync) while the loop serves others, its
	// connection unread, and one the Fair sheds is answered ShedAnswer.
	Fair       *shed.Fair
	ShedAnswer func(v shed.Verdict, closeAfter bool) []byte
	// ClientConns, when set, is the number of connections of the client
	// address of an accepted connection, node-wide (-1: not counted): a
	// client over its share of the queue (Fair's MaxClientQueue) is a
	// flood, its requests held to MaxWait (shed.Fair.AcquireBounded).
	// Nil or -1: its connections on the loop are counted instead.
	ClientConns func(c net.Conn) int
	// Pace, when set, says how long a connection whose request was just
	// shed is left unread (shed.Pacer.Pause): a client refused too often
	// waits in its sockets instead of making the loop refuse at once.
	Pace func(shed.Key) time.Duration
	// NeverShed reports routes never shed (GET /metrics, /healthz).
	NeverShed func(method, path []byte) bool
	// Latency, when set, observes every request a loop served after
	// admitting it: from the kernel's receive time of its bytes to when
	// its answer was written; turned: it waited for its client's turn
	// (its connection was passed over in a round for its client's budget).
	Latency func(d time.Duration, turned bool)
	// ConnContext, when set, derives the context of a connection's
	// requests (as http.Server.ConnContext).
	ConnContext func(ctx context.Context, c net.Conn) context.Context
	// Server is put into requests' contexts (http.ServerContextKey).
	Server *http.Server
	Logger *slog.Logger
}

// Head is the parsed head of a request, for Options.Key.
type Head struct{ h *head }

// Each calls f for every header line.
func (h Head) Each(f func(name, value []byte)) {
	for i := 0; i < h.h.nfields; i++ {
		f(h.h.fields[i].name, h.h.fields[i].value)
	}
}

// HotRoutes are the routes a loop runs by default: rate-limit checks and
// counter increments, decrements and reads.
func HotRoutes(method, path []byte) bool {
	switch string(method) {
	case "POST":
		if string(path) == "/ratelimit/check" {
			return true
		}
		id, ok := counterID(path)
		if !ok {
			return false
		}
		return hasSuffixStr(id, "/increment") && !containsSlash(id[:len(id)-len("/increment")]) ||
			hasSuffixStr(id, "/decrement") && !containsSlash(id[:len(id)-len("/decrement")])
	case "GET":
		id, ok := counterID(path)
		return ok && !containsSlash(id)
	}
	return false
}

func counterID(p []byte) ([]byte, bool) {
	const pre = "/counters/"
	if len(p) <= len(pre) || string(p[:len(pre)]) != pre {
		return nil, false
	}
	return p[len(pre):], true
}

func hasSuffixStr(b []byte, s string) bool {
	return len(b) > len(s) && string(b[len(b)-len(s):]) == s
}

func containsSlash(b []byte) bool {
	for _, c := range b {
		if c == '/' {
			return true
		}
	}
	return false
}

// mayWait reports whether a request asks for what may wait on an fsync
// (a durability override: ?durability= or Counterd-Durability), which a
// loop must not run: it is handed over.
func mayWait(h *head) bool {
	if len(h.query) > 0 && bytes.Contains(h.query, []byte("durability")) {
		return true
	}
	for i := 0; i < h.nfields; i++ {
		if bytes.EqualFold(h.fields[i].name, []byte("Counterd-Durability")) {
			return true
		}
	}
	return false
}
