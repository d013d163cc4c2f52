package server

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"strconv"

	"google.golang.org/grpc"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/api/httploop"
	"github.com/counterd/counterd/internal/api/ratelimitapi"
	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/buildinfo"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/nodestats"
	"github.com/counterd/counterd/internal/region"
	"github.com/counterd/counterd/internal/shed"
	"github.com/counterd/counterd/internal/tracing"
	"github.com/counterd/counterd/internal/ui"
)

// routes is the HTTP front end's router with every route but the mode's
// (mode.register adds those): the counters API on "/", and beside it the
// rate limits, the console, the command box (rs's POST /resp), /regions
// and the event pipeline. The API's writes take rs's script gate
// (resp.Server.GateWrites): none lands inside a Lua script run by this
// node's Redis-protocol front end.
func (n *node) routes(rs *resp.Server, stats *nodestats.Sampler) *router {
	api := httpapi.New(traceBackend(n.tp, guardBackend(n.auth, rs.GateWrites(n.be))), httpapi.Options{
		MaxBodyBytes:    n.cfg.MaxBodyBytes,
		MaxBatch:        n.cfg.MaxBatch,
		Registerer:      n.reg,
		Gatherer:        n.reg,
		Logger:          n.log,
		Authorize:       routeAuthorizer(n.auth),
		Global:          globalRead(n.rep),
		GlobalAggregate: globalAggregate(n.rep),
		Quotas:          quotaUsage(n.qb),
		EventMaxSkew:    n.cfg.Events.MaxSkew,
	})
	mux := http.NewServeMux()
	mux.Handle("/", api) // every path no other front end has: the API answers its own 404 and 405
	mountPaths(mux, ratelimitapi.NewHTTPHandler(n.recent, ratelimitapi.HTTPOptions{
		MaxBodyBytes: n.cfg.MaxBodyBytes, Policies: n.rl.policies, Authorize: hitsAuthorizer(n.auth), Recent: n.recent,
	}), ratelimitapi.HTTPRoutes())
	// The console: GET / redirects to it (other methods on / are the
	// API's), and it answers every method under /ui itself.
	console := ui.Handler(ui.Options{Auth: n.auth != nil, Version: buildinfo.Version()})
	mux.Handle("GET /{$}", console)
	mux.Handle("/ui", console)
	mux.Handle("/ui/", console)
	mux.Handle("/node/stats", stats.Handler())
	mux.Handle("/resp", rs.HTTPHandler(resp.HTTPOptions{MaxBodyBytes: n.cfg.MaxBodyBytes}))
	mux.Handle("/regions", region.Handler(regionStatus(n.cfg, n.rep)))
	if n.pl != nil {
		mux.Handle("/events", n.pl.Handler())
		mux.Handle("/events/dead", n.pl.Handler())
		mux.Handle("/events/status", n.pl.Handler())
		mux.Handle("/readyz", readyWithStream(n.pl.Stream, api))
	}
	return &router{mux: mux, api: api}
}

// httpServer is the HTTP front end on lns.http: rt behind the ring
// version header, peer checks, authentication, the guard and the overload
// limits. It puts the connection limits (and, on plaintext, admission) on
// lns.http.
func (n *node) httpServer(lns *listeners, rt *router, shedder *shed.Limiter, fair *shed.Fair, sm *shedMetrics) (*http.Server, *httploop.Front, error) {
	var h http.Handler = rt
	if n.tr.ring != nil {
		h = withRingVersion(n.tr.ring, h)
	}
	h = n.sec.peerOnlyForwarded(n.cfg, h)
	h = withAuth(n.auth, h)
	h = guard(newGuardConfig(n.cfg, addrOf(lns.http), shedder), h)
	h = tracing.HTTPHandler(n.tp, h)
	httpCap := connCap(n.cfg.HTTPMaxConns)
	// Refused connections are paced like shed requests (--shed-rate-per-
	// client), but held up to maxConnHold: a refused client reconnects.
	connPace := shed.NewPacer(float64(n.cfg.ShedRatePerClient), maxConnHold)
	lns.http = newLimitListener(lns.http, httpCap, shed.NewConnCounter(perClientCap(n.cfg.MaxConnsPerClient, httpCap), n.cfg.trustedProxies()), connPace, rejectHTTP, sm.httpConnsRejected.Inc)
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: n.cfg.HTTPReadHeaderTimeout,
		WriteTimeout:      n.cfg.HTTPWriteTimeout,
		IdleTimeout:       n.cfg.HTTPIdleTimeout,
	}
	if n.sec.tlsOn() {
		hs.TLSConfig = n.sec.server()
		// HTTP/1.1 only, in every build: the release build leaves
		// net/http's HTTP/2 out (nethttpomithttp2), so a development
		// build must not offer it either (docs/security.md).
		hs.TLSConfig.NextProtos = []string{"http/1.1"}
		hs.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
		return hs, nil, nil
	}
	// admission frames plaintext HTTP/1.1 only
	adm := newAdmission(n.cfg, fair, n.auth, sm, n.reg)
	var front *httploop.Front
	if loops := httpEventLoops(n.cfg.HTTPEventLoops, n.tr.nonBlocking); loops > 0 {
		var err error
		if front, err = httploop.New(lns.http, n.loopOptions(loops, h, hs, adm)); err != nil {
			return nil, nil, fmt.Errorf("server: --http-event-loops: %w", err)
		}
		lns.http = front
		registerLoopMetrics(n.reg, front)
	}
	lns.http = adm.wrap(lns.http)
	hs.ConnContext = adm.connContext
	return hs, front, nil
}

// respServer is the Redis-protocol front end.
func (n *node) respServer(fair *shed.Fair, sm *shedMetrics) *resp.Server {
	cfg := n.cfg
	opts := resp.Options{
		AllowFlush: cfg.AllowFlush, Registerer: n.reg, Logger: n.log, Version: buildinfo.Version(), RateLimiter: n.recent, Auth: n.auth,
		// security: hardening
		MaxConns: connCap(cfg.RESPMaxConns), IdleTimeout: cfg.RESPIdleTimeout,
		ClientConns: shed.NewConnCounter(perClientCap(cfg.MaxConnsPerClient, connCap(cfg.RESPMaxConns)), cfg.trustedProxies()),
		RefusePace:  shed.NewPacer(float64(cfg.ShedRatePerClient), maxConnHold),
		MaxBulkLen:  cfg.RESPMaxBulk, MaxCommandBytes: cfg.RESPMaxCommand,
		MaxQueryBufferTotal: cfg.RESPQueryBufferTotal, MaxArgs: cfg.RESPMaxArgs,
		Admission: fair, OnShed: sm.onShed("resp"),
		EventLoops:   respEventLoops(cfg.RESPEventLoops, n.tr.nonBlocking && n.pl == nil), // EVENTS.ADD waits for a stream or an fsync
		Coalesce:     cfg.RESPCoalesce,
		Events:       eventsAdder(n.pl),
		Global:       respGlobal(n.rep),
		EventMaxSkew: n.cfg.Events.MaxSkew,

		LuaTimeLimit: cfg.LuaTimeLimit, // scripts
		Tracer:       n.tp,
	}
	if n.tr.ring != nil {
		opts.KeyOwner = n.tr.ring.KeyOwner
	}
	if kl, ok := n.mode.backend().(contract.KeyLocker); ok { // tiered: scripts lock their keys against every node
		opts.KeyLocker = kl
	}
	return resp.New(traceBackend(n.tp, n.be), opts)
}

// grpcServer is the --grpc front end with Envoy's rate-limit service and
// the region service (the mode registers its own).
func (n *node) grpcServer(fair *shed.Fair, sm *shedMetrics) *grpc.Server {
	// Authentication first: calls are admitted by their user (shedUnary).
	opts := append(append(grpcConnOptions(grpcConnectionTimeout), grpcTracing(n.tp)...), n.sec.grpcOptions()...)
	gs := grpc.NewServer(append(append(opts, grpcAuthOptions(n.auth)...), grpc.ChainUnaryInterceptor(shedUnary(fair, sm)))...)
	ratelimitapi.RegisterEnvoy(gs, n.recent, ratelimitapi.EnvoyOptions{Authorize: grpcHitsAuthorizer(n.auth)})
	if n.rep != nil {
		n.rep.Register(gs)
	}
	return gs
}

// ringVersionHeader carries the cluster ring's version (client.RingVersionHeader).
const ringVersionHeader = "Counterd-Ring-Version"

// withRingVersion sends the ring's version on every answer of next.
func withRingVersion(ring clusterRing, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(ringVersionHeader, strconv.FormatUint(ring.RingVersion(), 10))
		next.ServeHTTP(w, r)
	})
}
