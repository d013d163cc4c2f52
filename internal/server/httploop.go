package server

import (
	"bytes"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/counterd/counterd/internal/api/httploop"
	"github.com/counterd/counterd/internal/shed"
)

// httpEventLoops resolves --http-event-loops like --resp-event-loops:
// loops only where no hot route can block (nonBlocking: the embedded
// engine with --durability async).
func httpEventLoops(flag int, nonBlocking bool) int { return respEventLoops(flag, nonBlocking) }

// httpLoopMaxBody is the largest body an HTTP event loop buffers: the hot
// routes' bodies are small; a larger one goes to the HTTP server.
const httpLoopMaxBody = 64 << 10

// loopOptions are the HTTP event loops' options: the HTTP server's
// handler chain h, its timeouts, and admission's client keys, shedding
// and latency histogram (adm nil: --http-admission off, clients are
// still read fairly by address).
func (n *node) loopOptions(loops int, h http.Handler, hs *http.Server, adm *admission) httploop.Options {
	cfg := n.cfg
	o := httploop.Options{
		Loops: loops, Handler: h, Server: hs, Logger: n.log,
		MaxBody:           min(cfg.MaxBodyBytes, httpLoopMaxBody),
		IdleTimeout:       cfg.HTTPIdleTimeout,
		ReadHeaderTimeout: cfg.HTTPReadHeaderTimeout,
		ReadBodyTimeout:   cfg.HTTPReadBodyTimeout,
		WriteTimeout:      cfg.HTTPWriteTimeout,
		TCPConn:           loopTCPConn,
	}
	store, trusted := n.auth, cfg.trustedProxies()
	if len(trusted) > 0 {
		o.Proxied = func(ip netip.Addr) bool { return shed.InPrefixes(trusted, ip) }
	}
	if store != nil || len(trusted) > 0 {
		o.Key = func(peer shed.Key, proxied bool, hd httploop.Head) shed.Key {
			var f framed
			hd.Each(func(name, val []byte) {
				switch {
				case bytes.EqualFold(name, hdrAuthorization):
					f.authz = val
				case bytes.EqualFold(name, hdrXForwardedFor):
					keep(&f.xff, &f.nxff, val)
				case bytes.EqualFold(name, hdrForwarded):
					keep(&f.fwd, &f.nfw, val)
				}
			})
			return clientKey(store, trusted, peer, proxied, &f)
		}
	}
	if adm != nil {
		o.Fair, o.OnShed = adm.fair, adm.onShed
		o.ClientConns = loopClientConns
		if adm.pace != nil {
			o.Pace = adm.pace.Pause
		}
		o.ShedAnswer = func(v shed.Verdict, closeAfter bool) []byte {
			i, j := 0, 0
			if v == shed.ShedClient {
				i = 1
			}
			if closeAfter {
				j = 1
			}
			return shedAnswers[i][j]
		}
		o.NeverShed = func(method, path []byte) bool {
			if string(method) != http.MethodGet {
				return false
			}
			for _, p := range neverShedPaths {
				if bytes.Equal(path, p) {
					return true
				}
			}
			return false
		}
		if lat := adm.latency; lat != nil {
			o.Latency = func(d time.Duration, turned bool) {
				i := 0
				if turned {
					i = 1
				}
				lat[i].Observe(d.Seconds())
			}
		}
	}
	return o
}

// loopClientConns is the number of HTTP connections of the client
// address of c (--max-conns-per-client's count), -1 where they are not
// counted.
func loopClientConns(c net.Conn) int {
	if lc, ok := c.(*limitConn); ok && lc.l.clients != nil && lc.client.IsValid() {
		return lc.l.clients.Conns(lc.client)
	}
	return -1
}

// loopTCPConn is the TCP connection inside one the HTTP listener
// accepted (under its connection limits).
func loopTCPConn(c net.Conn) *net.TCPConn {
	if lc, ok := c.(*limitConn); ok {
		c = lc.Conn
	}
	tc, _ := c.(*net.TCPConn)
	return tc
}

// registerLoopMetrics exports the HTTP event loops' counters.
func registerLoopMetrics(reg prometheus.Registerer, f *httploop.Front) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "counterd_http_loop_requests_total",
			Help: "HTTP requests answered on an event loop (--http-event-loops), shed ones included.",
		}, func() float64 { return float64(f.Served()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "counterd_http_loop_handovers_total",
			Help: "HTTP connections an event loop handed to the HTTP server (a request it does not serve: another route, chunked, Expect, TLS, a malformed head, ...).",
		}, func() float64 { return float64(f.HandedOver()) }),
	)
}
