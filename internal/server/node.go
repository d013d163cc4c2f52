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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"

	"github.com/counterd/counterd/internal/api/httploop"
	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/nodestats"
	"github.com/counterd/counterd/internal/pipeline"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/region"
	"github.com/counterd/counterd/internal/shed"
	"github.com/counterd/counterd/internal/tracing"
)

// node is one running counterd: a mode and what every mode has around it
// (region replication, rate limits, metrics, the event pipeline and the
// front ends). Run builds it with open, serves with serve and releases
// it with close, all from its own goroutine.
type node struct {
	cfg  Config
	log  *slog.Logger
	sec  *security   // nil without TLS, peer or gossip keys
	auth *auth.Store // nil without --auth
	mode mode
	tr   traits          // mode.traits(), with the replicator's metrics
	tp   *tracing.Tracer // nil without --otlp-endpoint

	be  contract.Backend      // mode.backend(), through rep with --peer-regions
	qb  contract.QuotaBackend // nil without --quotas
	rep *region.Replicator    // nil without --peer-regions
	lim *ratelimit.Limiter    // the --ratelimit-policies file, seeding rl
	rl  *sharedLimits
	// recent is the rate-limit checker every front end uses: rl's, keeping
	// the recent decisions for GET /ratelimit/decisions.
	recent *ratelimit.Recorder
	reg    *prometheus.Registry
	pl     *pipeline.Pipeline // nil without --rules, --kafka or --nats
}

// open opens what the node serves beside its mode. On error, close
// releases what open opened.
func (n *node) open(ctx context.Context) error {
	n.tr, n.be = n.mode.traits(), n.mode.backend()
	n.qb = quotaBackend(n.cfg, n.be)
	reloadQuotasOnHUP(ctx, n.cfg, n.qb, n.log)
	var err error
	if n.rep, err = openRegions(ctx, n.cfg, n.mode, n.sec, n.log); err != nil {
		return err
	}
	if n.rep != nil {
		n.be = n.rep.Wrap(n.be)
		n.tr.collectors = append(n.tr.collectors, n.rep.Collector())
	}
	if n.lim, err = newLimiter(n.cfg.RateLimitPolicies, n.tr.keepKeys, n.tr.limiters); err != nil {
		return err
	}
	if n.rl, err = n.mode.rateLimits(ctx, n.lim); err != nil {
		return err
	}
	n.recent = ratelimit.NewRecorder(n.rl.checker, ratelimit.DefaultRecentDecisions)
	n.reg = prometheus.NewRegistry()
	n.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	n.reg.MustRegister(n.tr.collectors...)
	n.reg.MustRegister(n.rl.collectors...)
	countAuthFailures(n.auth, n.reg)
	n.reg.MustRegister(buildInfoGauge())
	n.reg.MustRegister(tracingCollectors(n.tp)...)
	n.pl, err = openPipeline(ctx, n.cfg, n.be, n.tp, n.reg, n.log)
	return err
}

// close releases what open opened, then the mode: the replicator before
// the engine, the engine last (it flushes every acknowledged write).
func (n *node) close() {
	if n.pl != nil {
		n.pl.Close()
	}
	if n.rl != nil {
		n.rl.close()
	}
	if n.lim != nil {
		n.lim.Close()
	}
	if n.rep != nil {
		_ = n.rep.Close()
	}
	_ = n.mode.close()
}

// newLimiter opens the rate limiter with the policies in path ("" = none);
// keepKeys lets its state move with a cluster's ring; tab is the index its
// state lives in (the engine's; nil: its own).
func newLimiter(path string, keepKeys bool, tab *engine.Limiters) (*ratelimit.Limiter, error) {
	cfg := ratelimit.Config{KeepKeys: keepKeys, Table: tab}
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

// servers are the node's front ends while they serve; nil when disabled.
type servers struct {
	http, admin *http.Server
	httpFront   *httploop.Front // the HTTP event loops in front of http (nil: none)
	resp        *resp.Server
	grpc        *grpc.Server
	errc        chan error // the first listener to fail
}

// serve binds the listeners, starts the mode and serves until ctx is done
// or a listener fails, then shuts down: the mode drains, the front ends
// stop (in-flight requests get up to cfg.ShutdownTimeout).
func (n *node) serve(ctx context.Context) error {
	shedder, sm := newShedder(n.cfg, n.reg)
	fair := newFair(n.cfg, shedder, n.reg) // per-client admission of HTTP, RESP and gRPC
	s := &servers{errc: make(chan error, 4)}
	if n.cfg.GRPC != "" {
		s.grpc = n.grpcServer(fair, sm)
	}
	// The Redis-protocol front end exists even without a RESP listener:
	// the HTTP command box (POST /resp) runs commands through it.
	s.resp = n.respServer(fair, sm)
	// The node page's last hour of figures, sampled from the registry.
	stats := nodestats.New(n.reg, n.cfg.NodeStatsInterval)
	statsCtx, stopStats := context.WithCancel(ctx)
	statsDone := make(chan struct{})
	go func() { defer close(statsDone); stats.Run(statsCtx) }()
	defer func() { stopStats(); <-statsDone }()
	rt := n.routes(s.resp, stats)
	n.mode.register(rt.mux, s.grpc)
	// Bind every listener before serving any, so that once "http
	// listening" is logged every front end accepts connections.
	lns, err := listen(n.cfg)
	if err != nil {
		s.stopUnstarted()
		return err
	}
	s.http, s.httpFront, err = n.httpServer(lns, rt, shedder, fair, sm)
	if err != nil {
		lns.close()
		s.stopUnstarted()
		return err
	}
	if err := n.mode.start(ctx, Addrs{HTTP: addrOf(lns.http), RESP: addrOf(lns.resp), GRPC: addrOf(lns.grpc)}); err != nil {
		lns.close()
		s.stopUnstarted()
		return err
	}
	if n.sec.tlsOn() && lns.resp != nil {
		lns.resp = tls.NewListener(lns.resp, n.sec.server())
	}
	if n.rep != nil {
		n.rep.Start(ctx)
	}
	n.start(s, lns, fair, sm)
	select {
	case <-ctx.Done():
		n.log.Info("shutting down")
	case err = <-s.errc:
		n.log.Error("listener failed, shutting down", "err", err)
	}
	n.shutdown(s)
	return err
}

// start serves each front end on its listener.
func (n *node) start(s *servers, lns *listeners, fair *shed.Fair, sm *shedMetrics) {
	if lns.resp != nil {
		go func() {
			if err := s.resp.Serve(lns.resp); err != nil {
				s.errc <- fmt.Errorf("server: resp: %w", err)
			}
		}()
		n.log.Info("resp listening", "addr", lns.resp.Addr().String())
	}
	if s.grpc != nil {
		go func() {
			if err := s.grpc.Serve(lns.grpc); err != nil {
				s.errc <- fmt.Errorf("server: grpc: %w", err)
			}
		}()
		n.log.Info("grpc listening", "addr", lns.grpc.Addr().String(), "services", "envoy.service.ratelimit.v3")
	}
	serveHTTP(s.http, lns.http, "http", s.errc, n.sec.tlsOn())
	n.log.Info("http listening", "addr", lns.http.Addr().String(), "tls", n.sec.tlsOn())
	if lns.admin != nil {
		s.admin = &http.Server{Handler: adminHandler(addrOf(lns.admin)), ReadHeaderTimeout: n.cfg.HTTPReadHeaderTimeout, IdleTimeout: n.cfg.HTTPIdleTimeout}
		serveHTTP(s.admin, lns.admin, "admin", s.errc, false)
		n.log.Info("admin listening", "addr", lns.admin.Addr().String(), "routes", "/debug/pprof/")
	}
}

// serveHTTP serves hs on ln (with TLS when tlsOn) until it is shut down.
func serveHTTP(hs *http.Server, ln net.Listener, name string, errc chan<- error, tlsOn bool) {
	go func() {
		var err error
		if tlsOn {
			err = hs.ServeTLS(ln, "", "")
		} else {
			err = hs.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("server: %s: %w", name, err)
		}
	}()
}

// shutdown drains the mode and stops the front ends within
// cfg.ShutdownTimeout.
func (n *node) shutdown(s *servers) {
	sctx, cancel := context.WithTimeout(context.Background(), n.cfg.ShutdownTimeout)
	defer cancel()
	if err := n.mode.drain(sctx); err != nil {
		n.log.Warn("drain", "err", err)
	}
	// RESP connections are closed at once (their commands are cancelled);
	// waiting for their goroutines, which only a command ignoring its
	// cancellation can hold, runs alongside the other front ends' stops,
	// until the shutdown timeout.
	respDone := make(chan error, 1)
	if s.resp != nil {
		go func() { respDone <- s.resp.Shutdown(sctx) }()
	} else {
		respDone <- nil
	}
	if n.rep != nil {
		// Region calls from peers are cancelled and refused from here
		// on (their senders retry them): a cut or slow peer's call must
		// not hold the gRPC server's graceful stop.
		n.rep.StopServing()
	}
	if s.grpc != nil {
		stopGRPC(s.grpc, sctx, n.log)
	}
	if s.httpFront != nil {
		// The loops' connections drain first (answers then close them);
		// the HTTP server's Shutdown closes the listener again (a no-op).
		if err := s.httpFront.Shutdown(sctx); err != nil {
			n.log.Warn("http event loops shutdown", "err", err)
		}
	}
	if err := s.http.Shutdown(sctx); err != nil {
		// Out of time: close the connections still serving requests
		// (their handlers are not waited for).
		n.log.Warn("http shutdown", "err", err)
		_ = s.http.Close()
	}
	if err := <-respDone; err != nil {
		n.log.Warn("resp: a command still running after the shutdown timeout; exiting without it", "err", err)
	}
	if s.admin != nil {
		_ = s.admin.Close() // profiles in progress are not worth waiting for
	}
}

// stopUnstarted releases the servers built before one failed to start.
func (s *servers) stopUnstarted() {
	if s.grpc != nil {
		s.grpc.Stop()
	}
}
