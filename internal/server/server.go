// Package server runs one counterd node: it opens the engine and serves the
// HTTP and Redis-protocol front ends until its context is cancelled, then
// shuts down gracefully (drains requests, flushes every change to disk).
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/ratelimit"
)

// newLimiter opens the rate limiter with the policies in path ("" = none).
func newLimiter(path string) (*ratelimit.Limiter, error) {
	var cfg ratelimit.Config
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

// Version is reported by INFO and logs; set at build time with
// -ldflags "-X github.com/counterd/counterd/internal/server.Version=..."
var Version = "0.1.0-dev"

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
	store, stopAuth, err := openAuth(cfg, log)
	if err != nil {
		return err
	}
	defer stopAuth()
	nd, err := openNode(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer func() { _ = nd.close() }()
	be := nd.Backend

	lim, err := newLimiter(cfg.RateLimitPolicies)
	if err != nil {
		return err
	}
	defer lim.Close()
	var rlc ratelimit.Checker = lim
	if nd.rlOwner != nil {
		router, err := ratelimit.NewRouter(lim, ratelimit.RouterConfig{Owner: nd.rlOwner})
		if err != nil {
			return err
		}
		defer router.Close()
		rlc = router
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(nd.collectors...)

	api := httpapi.New(guard(store, be), httpapi.Options{
		MaxBodyBytes: cfg.MaxBodyBytes,
		MaxBatch:     cfg.MaxBatch,
		Registerer:   reg,
		Gatherer:     reg,
		Logger:       log,
		Authorize:    routeAuthorizer(store),
	})
	rl := ratelimit.NewHTTPHandler(rlc, ratelimit.HTTPOptions{MaxBodyBytes: cfg.MaxBodyBytes, Authorize: hitsAuthorizer(store)})
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
		for prefix, h := range nd.routes {
			if strings.HasPrefix(r.URL.Path, prefix) {
				h.ServeHTTP(w, r)
				return
			}
		}
		api.ServeHTTP(w, r)
	})
	if cfg.Pprof {
		prof := http.NewServeMux()
		prof.HandleFunc("/debug/pprof/", pprof.Index)
		prof.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		prof.HandleFunc("/debug/pprof/profile", pprof.Profile)
		prof.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		prof.HandleFunc("/debug/pprof/trace", pprof.Trace)
		next := handler
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/debug/pprof/") {
				prof.ServeHTTP(w, r)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	handler = withAuth(store, handler)
	// Bind every listener before serving any, so that once "http
	// listening" is logged every front end accepts connections.
	lns, err := listen(cfg)
	if err != nil {
		return err
	}
	if nd.start != nil {
		bound := Addrs{HTTP: addrOf(lns.http), RESP: addrOf(lns.resp), GRPC: addrOf(lns.grpc)}
		if err := nd.start(ctx, bound); err != nil {
			lns.close()
			return err
		}
	}
	errc := make(chan error, 3)
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	var rs *resp.Server
	if lns.resp != nil {
		rs = resp.New(be, resp.Options{AllowFlush: cfg.AllowFlush, Registerer: reg, Logger: log, Version: Version, RateLimiter: rlc, Auth: store})
		go func() {
			if err := rs.Serve(lns.resp); err != nil {
				errc <- fmt.Errorf("server: resp: %w", err)
			}
		}()
		log.Info("resp listening", "addr", lns.resp.Addr().String())
	}
	var gs *grpc.Server
	if lns.grpc != nil {
		gs = grpc.NewServer(grpcAuthOptions(store)...)
		ratelimit.RegisterEnvoy(gs, rlc, ratelimit.EnvoyOptions{Authorize: hitsAuthorizer(store)})
		if nd.grpc != nil {
			nd.grpc(gs)
		}
		go func() {
			if err := gs.Serve(lns.grpc); err != nil {
				errc <- fmt.Errorf("server: grpc: %w", err)
			}
		}()
		log.Info("grpc listening", "addr", lns.grpc.Addr().String(), "services", "envoy.service.ratelimit.v3")
	}
	go func() {
		if err := hs.Serve(lns.http); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("server: http: %w", err)
		}
	}()
	log.Info("http listening", "addr", lns.http.Addr().String())

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
	if rs != nil {
		rs.Close()
	}
	if gs != nil {
		stopped := make(chan struct{})
		go func() { gs.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-sctx.Done():
			gs.Stop()
		}
	}
	if serr := hs.Shutdown(sctx); serr != nil {
		log.Warn("http shutdown", "err", serr)
	}
	return err
}

// ringVersionHeader carries the cluster ring's version (client.RingVersionHeader).
const ringVersionHeader = "Counterd-Ring-Version"

type listeners struct{ http, resp, grpc net.Listener }

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
	return l, nil
}

func (l *listeners) close() {
	for _, ln := range []net.Listener{l.http, l.resp, l.grpc} {
		if ln != nil {
			ln.Close()
		}
	}
}
