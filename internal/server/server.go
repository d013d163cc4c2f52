// Package server runs one counterd node: it opens the engine and serves the
// HTTP and Redis-protocol front ends until its context is cancelled, then
// shuts down gracefully (drains requests, flushes every change to disk).
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/api/ratelimitapi"
	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/buildinfo"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/region"
	"github.com/counterd/counterd/internal/shed"
	"github.com/counterd/counterd/internal/ui"
)

// newLimiter opens the rate limiter with the policies in path ("" = none);
// keepKeys lets its state move with a cluster's ring.
func newLimiter(path string, keepKeys bool) (*ratelimit.Limiter, error) {
	cfg := ratelimit.Config{KeepKeys: keepKeys}
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("server: --ratelimit-policies: %w", err)
		}
		defer f.Close()
		if cfg.Policies, err = ratelimit.LoadPolicies(f); err != nil {
			return nil, fmt.Errorf("server: --ratelimit-policies %s: %w", path, err)
		}
	}
	return ratelimit.New(cfg)
}

// NewLogger builds the process logger from the config.
func NewLogger(cfg *Config) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// Run serves until ctx is done, then shuts down: it stops accepting, waits
// up to cfg.ShutdownTimeout for in-flight requests, and closes the engine,
// which flushes every acknowledged write to disk.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	sec, err := loadSecurity(cfg, log)
	if err != nil {
		return err
	}
	sec.reloadOnHUP(ctx, log)
	store, stopAuth, err := openAuth(cfg, log)
	if err != nil {
		return err
	}
	defer stopAuth()
	nd, err := openNode(ctx, cfg, sec, log)
	if err != nil {
		return err
	}
	defer func() { _ = nd.close() }()
	qb := quotaBackend(cfg, nd.Backend)
	reloadQuotasOnHUP(ctx, cfg, qb, log)
	rep, err := openRegions(ctx, cfg, nd, sec, log)
	if err != nil {
		return err
	}
	if rep != nil {
		defer func() { _ = rep.Close() }() // before the engine closes
		nd.Backend = rep.Wrap(nd.Backend)
		nd.collectors = append(nd.collectors, rep.Collector())
	}
	be := nd.Backend
	if nd.routes == nil {
		nd.routes = map[string]http.Handler{}
	}
	nd.routes["/regions"] = region.Handler(regionStatus(cfg, rep))

	lim, err := newLimiter(cfg.RateLimitPolicies, nd.rlKeepKeys)
	if err != nil {
		return err
	}
	defer lim.Close()
	var rlc ratelimit.Checker = lim
	var rlPolicies ratelimit.PolicyStore // nil: policy changes stay in lim
	if nd.rlShared != nil {
		shared, err := nd.rlShared(ctx, lim)
		if err != nil {
			return err
		}
		defer shared.close()
		rlc, rlPolicies = shared.checker, shared.policies
	}
	recent := ratelimit.NewRecorder(rlc, ratelimit.DefaultRecentDecisions) // GET /ratelimit/decisions
	rlc = recent

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(nd.collectors...)
	countAuthFailures(store, reg)
	reg.MustRegister(buildInfoGauge())

	pl, err := openPipeline(ctx, cfg, be, reg, log)
	if err != nil {
		return err
	}
	if pl != nil {
		defer pl.Close()
	}
	api := httpapi.New(guardBackend(store, be), httpapi.Options{
		MaxBodyBytes:    cfg.MaxBodyBytes,
		MaxBatch:        cfg.MaxBatch,
		Registerer:      reg,
		Gatherer:        reg,
		Logger:          log,
		Authorize:       routeAuthorizer(store),
		Global:          globalRead(rep),
		GlobalAggregate: globalAggregate(rep),
		Quotas:          quotaUsage(qb),
	})
	rl := ratelimitapi.NewHTTPHandler(rlc, ratelimitapi.HTTPOptions{MaxBodyBytes: cfg.MaxBodyBytes, Policies: rlPolicies, Authorize: hitsAuthorizer(store), Recent: recent})
	console := ui.Handler(ui.Options{Auth: store != nil, Version: buildinfo.Version()})
	// Route by prefix rather than through another ServeMux, which would
	// clean and redirect API paths before the API sees them.
	var handler http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if nd.ringVersion != nil {
			w.Header().Set(ringVersionHeader, strconv.FormatUint(nd.ringVersion(), 10))
		}
		if strings.HasPrefix(r.URL.Path, "/ratelimit/") {
			rl.ServeHTTP(w, r)
			return
		}
		if ui.Serves(r) { // the web console: /ui/..., and / redirects there
			console.ServeHTTP(w, r)
			return
		}
		if pl != nil && (r.URL.Path == "/events" || r.URL.Path == "/events/dead") {
			pl.Handler().ServeHTTP(w, r)
			return
		}
		if pl != nil && r.URL.Path == "/readyz" {
			readyWithStream(pl.Stream, api).ServeHTTP(w, r)
			return
		}
		for prefix, h := range nd.routes {
			if strings.HasPrefix(r.URL.Path, prefix) {
				h.ServeHTTP(w, r)
				return
			}
		}
		api.ServeHTTP(w, r)
	})
	handler = sec.peerOnlyForwarded(cfg, handler)
	handler = withAuth(store, handler)
	// Bind every listener before serving any, so that once "http
	// listening" is logged every front end accepts connections.
	lns, err := listen(cfg)
	if err != nil {
		return err
	}
	shedder, sm := newShedder(cfg, reg)
	handler = guard(newGuardConfig(cfg, addrOf(lns.http), shedder), handler)
	httpCap := connCap(cfg.HTTPMaxConns)
	// Refused connections are paced like shed requests (--shed-rate-per-
	// client), but held up to maxConnHold: a refused client reconnects.
	connPace := shed.NewPacer(float64(cfg.ShedRatePerClient), maxConnHold)
	lns.http = newLimitListener(lns.http, httpCap, shed.NewConnCounter(perClientCap(cfg.MaxConnsPerClient, httpCap), cfg.trustedProxies()), connPace, rejectHTTP, sm.httpConnsRejected.Inc)
	fair := newFair(cfg, shedder, reg) // per-client admission of HTTP, RESP and gRPC
	var adm *admission
	if !sec.tlsOn() { // admission frames plaintext HTTP/1.1 only
		adm = newAdmission(cfg, fair, store, sm, reg)
		lns.http = adm.wrap(lns.http)
	}
	if nd.start != nil {
		bound := Addrs{HTTP: addrOf(lns.http), RESP: addrOf(lns.resp), GRPC: addrOf(lns.grpc)}
		if err := nd.start(ctx, bound); err != nil {
			lns.close()
			return err
		}
	}
	if sec.tlsOn() && lns.resp != nil {
		lns.resp = tls.NewListener(lns.resp, sec.server())
	}
	if rep != nil {
		rep.Start(ctx)
	}
	errc := make(chan error, 4)
	hs := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: cfg.HTTPReadHeaderTimeout,
		WriteTimeout:      cfg.HTTPWriteTimeout,
		IdleTimeout:       cfg.HTTPIdleTimeout,
	}
	if adm != nil {
		hs.ConnContext = adm.connContext
	}
	var rs *resp.Server
	if lns.resp != nil {
		rs = resp.New(be, resp.Options{
			AllowFlush: cfg.AllowFlush, Registerer: reg, Logger: log, Version: buildinfo.Version(), RateLimiter: rlc, Auth: store,
			// security: hardening
			MaxConns: connCap(cfg.RESPMaxConns), IdleTimeout: cfg.RESPIdleTimeout,
			ClientConns: shed.NewConnCounter(perClientCap(cfg.MaxConnsPerClient, connCap(cfg.RESPMaxConns)), cfg.trustedProxies()),
			RefusePace:  shed.NewPacer(float64(cfg.ShedRatePerClient), maxConnHold),
			MaxBulkLen:  cfg.RESPMaxBulk, MaxCommandBytes: cfg.RESPMaxCommand,
			MaxQueryBufferTotal: cfg.RESPQueryBufferTotal, MaxArgs: cfg.RESPMaxArgs,
			Admission: fair, OnShed: sm.onShed("resp"),
			EventLoops: respEventLoops(cfg.RESPEventLoops, nd.nonBlocking && pl == nil), // EVENTS.ADD waits for a stream or an fsync
			Coalesce:   cfg.RESPCoalesce,
			Events:     eventsAdder(pl),
			Global:     respGlobal(rep),

			LuaTimeLimit: cfg.LuaTimeLimit, KeyOwner: nd.keyOwner, // scripts
		})
		go func() {
			if err := rs.Serve(lns.resp); err != nil {
				errc <- fmt.Errorf("server: resp: %w", err)
			}
		}()
		log.Info("resp listening", "addr", lns.resp.Addr().String())
	}
	var gs *grpc.Server
	if lns.grpc != nil {
		// Authentication first: calls are admitted by their user (shedUnary).
		gopts := append(grpcConnOptions(grpcConnectionTimeout), sec.grpcOptions()...)
		gs = grpc.NewServer(append(append(gopts, grpcAuthOptions(store)...), grpc.ChainUnaryInterceptor(shedUnary(fair, sm)))...)
		ratelimitapi.RegisterEnvoy(gs, rlc, ratelimitapi.EnvoyOptions{Authorize: grpcHitsAuthorizer(store)})
		if nd.grpc != nil {
			nd.grpc(gs)
		}
		if rep != nil {
			rep.Register(gs)
		}
		go func() {
			if err := gs.Serve(lns.grpc); err != nil {
				errc <- fmt.Errorf("server: grpc: %w", err)
			}
		}()
		log.Info("grpc listening", "addr", lns.grpc.Addr().String(), "services", "envoy.service.ratelimit.v3")
	}
	serve := hs.Serve
	if sec.tlsOn() {
		hs.TLSConfig = sec.server()
		serve = func(ln net.Listener) error { return hs.ServeTLS(ln, "", "") }
	}
	go func() {
		if err := serve(lns.http); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("server: http: %w", err)
		}
	}()
	log.Info("http listening", "addr", lns.http.Addr().String(), "tls", sec.tlsOn())
	var as *http.Server
	if lns.admin != nil {
		as = &http.Server{Handler: adminHandler(addrOf(lns.admin)), ReadHeaderTimeout: cfg.HTTPReadHeaderTimeout, IdleTimeout: cfg.HTTPIdleTimeout}
		go func() {
			if err := as.Serve(lns.admin); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("server: admin: %w", err)
			}
		}()
		log.Info("admin listening", "addr", lns.admin.Addr().String(), "routes", "/debug/pprof/")
	}

	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err = <-errc:
		log.Error("listener failed, shutting down", "err", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if nd.drain != nil {
		if derr := nd.drain(sctx); derr != nil {
			log.Warn("drain", "err", derr)
		}
	}
	// RESP connections are closed at once (their commands are cancelled);
	// waiting for their goroutines, which only a command ignoring its
	// cancellation can hold, runs alongside the other front ends' stops,
	// until the shutdown timeout.
	respDone := make(chan error, 1)
	if rs != nil {
		go func() { respDone <- rs.Shutdown(sctx) }()
	} else {
		respDone <- nil
	}
	if rep != nil {
		// Region calls from peers are cancelled and refused from here
		// on (their senders retry them): a cut or slow peer's call must
		// not hold the gRPC server's graceful stop.
		rep.StopServing()
	}
	if gs != nil {
		stopGRPC(gs, sctx, log)
	}
	if serr := hs.Shutdown(sctx); serr != nil {
		// Out of time: close the connections still serving requests
		// (their handlers are not waited for).
		log.Warn("http shutdown", "err", serr)
		_ = hs.Close()
	}
	if rerr := <-respDone; rerr != nil {
		log.Warn("resp: a command still running after the shutdown timeout; exiting without it", "err", rerr)
	}
	if as != nil {
		_ = as.Close() // profiles in progress are not worth waiting for
	}
	return err
}

// grpcStopWait bounds the wait for grpc.Server.Stop once the graceful
// stop ran out of time. Stop closes every connection and cancels every
// call, but it also waits for connections still in their handshake (up to
// gRPC's connection timeout, 2 minutes: a peer that connected and sent
// nothing, as through a cut link), and for a graceful stop already waiting
// on a call that ignores its cancellation. Past it, the node shuts down
// without them.
const grpcStopWait = 2 * time.Second

// stopGRPC stops gs gracefully until ctx is done, then forcibly, waiting
// at most grpcStopWait more.
func stopGRPC(gs *grpc.Server, ctx context.Context, log *slog.Logger) {
	graceful := make(chan struct{})
	go func() { gs.GracefulStop(); close(graceful) }()
	select {
	case <-graceful:
		return
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { gs.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-graceful:
	case <-time.After(grpcStopWait):
		log.Warn("grpc: connections still open after the shutdown timeout; exiting without them", "waited", grpcStopWait)
	}
}

// grpcConnectionTimeout bounds a gRPC connection's TLS and HTTP/2
// handshake: a peer that connects and sends nothing (or stops halfway)
// is closed after it rather than after gRPC's default of 2 minutes. A
// variable for tests.
var grpcConnectionTimeout = 10 * time.Second

// Server-side gRPC keepalive: a connection that carried nothing for
// grpcKeepaliveTime is pinged, and closed if the ping is not answered
// within grpcKeepaliveTimeout, so a peer gone without a FIN or RST (a
// cut link, a crashed host) holds its connection and calls for at most
// about 50 s. Clients may ping every grpcMinPingInterval, with or without
// calls in flight (counterd's own cluster and region clients do not ping;
// Envoy and other clients often do, every 30 to 60 s: gRPC's default
// policy would answer them GOAWAY "too_many_pings" below 5 minutes).
const (
	grpcKeepaliveTime    = 30 * time.Second
	grpcKeepaliveTimeout = 20 * time.Second
	grpcMinPingInterval  = 10 * time.Second
)

// grpcConnOptions are the connection settings of counterd's gRPC server,
// which serves the client API, Envoy's rate-limit service, cluster peer
// calls and region calls.
func grpcConnOptions(handshake time.Duration) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(handshake),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: grpcKeepaliveTime, Timeout: grpcKeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: grpcMinPingInterval, PermitWithoutStream: true}),
	}
}

// ringVersionHeader carries the cluster ring's version (client.RingVersionHeader).
const ringVersionHeader = "Counterd-Ring-Version"

type listeners struct{ http, resp, grpc, admin net.Listener }

// listen binds the configured addresses; on error it closes what it bound.
func listen(cfg Config) (*listeners, error) {
	l := &listeners{}
	var err error
	if l.http, err = net.Listen("tcp", cfg.HTTP); err != nil {
		return nil, fmt.Errorf("server: --http: %w", err)
	}
	if cfg.RESP != "" {
		if l.resp, err = net.Listen("tcp", cfg.RESP); err != nil {
			l.close()
			return nil, fmt.Errorf("server: --resp: %w", err)
		}
	}
	if cfg.GRPC != "" {
		if l.grpc, err = net.Listen("tcp", cfg.GRPC); err != nil {
			l.close()
			return nil, fmt.Errorf("server: --grpc: %w", err)
		}
	}
	if cfg.Pprof {
		if l.admin, err = net.Listen("tcp", cfg.Admin); err != nil {
			l.close()
			return nil, fmt.Errorf("server: --admin: %w", err)
		}
	}
	return l, nil
}

func (l *listeners) close() {
	for _, ln := range []net.Listener{l.http, l.resp, l.grpc, l.admin} {
		if ln != nil {
			ln.Close()
		}
	}
}

// respEventLoops resolves --resp-event-loops: 0 (auto) is one loop per two
// Ps when no command can block (nonBlocking), else none; -1 is none.
func respEventLoops(flag int, nonBlocking bool) int {
	switch {
	case flag > 0:
		return flag
	case flag < 0 || !nonBlocking:
		return 0
	}
	return max(1, runtime.GOMAXPROCS(0)/2)
}
