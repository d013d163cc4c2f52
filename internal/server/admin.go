package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/counterd/counterd/internal/buildinfo"
	"github.com/counterd/counterd/internal/shed"
)

// adminRoutes are the --admin listener's ServeMux patterns (any method);
// "/debug/pprof/" also serves the named profiles, /debug/pprof/{profile}.
var adminRoutes = []struct {
	pattern string
	fn      http.HandlerFunc
}{
	{"/debug/pprof/", pprof.Index},
	{"/debug/pprof/cmdline", pprof.Cmdline},
	{"/debug/pprof/profile", pprof.Profile},
	{"/debug/pprof/symbol", pprof.Symbol},
	{"/debug/pprof/trace", pprof.Trace},
}

// adminHandler serves the --admin listener: pprof, which exposes the
// command line (with any password in it) and heap contents, so it is
// never on the API port.
func adminHandler(bound string) http.Handler {
	mux := http.NewServeMux()
	for _, rt := range adminRoutes {
		mux.HandleFunc(rt.pattern, rt.fn)
	}
	// The same Host check as the API: a rebinding page must not read
	// profiles either.
	g := newGuardConfig(Config{}, bound, nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.hostAllowed(r.Host) || r.Header.Get("Origin") != "" {
			guardError(w, http.StatusForbidden, codeOriginNotAllowed, "the admin listener serves local, non-browser clients only")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// shedMetrics count what the overload limits refused.
type shedMetrics struct {
	shed              *prometheus.CounterVec // counterd_shed_requests_total{front_end}
	httpConnsRejected prometheus.Counter     // counterd_http_rejected_connections_total
}

// newShedder returns the overload limiter of cfg (nil with
// --max-inflight -1) and registers its metrics on reg.
func newShedder(cfg Config, reg prometheus.Registerer) (*shed.Limiter, *shedMetrics) {
	m := &shedMetrics{
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "counterd_shed_requests_total",
			Help: "Requests refused because --max-inflight and --max-queue were full, by front end (http, resp, grpc).",
		}, []string{"front_end"}),
		httpConnsRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "counterd_http_rejected_connections_total",
			Help: "HTTP connections answered 503 and closed because --http-max-conns was reached.",
		}),
	}
	reg.MustRegister(m.shed, m.httpConnsRejected)
	for _, fe := range []string{"http", "resp", "grpc"} {
		m.shed.WithLabelValues(fe) // export zeros, so rate() works from the start
	}
	if cfg.MaxInflight < 0 {
		return nil, m
	}
	lim := shed.New(shed.Config{MaxInflight: cfg.MaxInflight, MaxQueue: cfg.MaxQueue, MaxWait: cfg.MaxQueueWait})
	lim.OnShed = func(fe string) { m.shed.WithLabelValues(fe).Inc() }
	return lim, m
}

// peerService is the cluster's own gRPC service: peer calls were admitted
// on the node the client called, and shedding them half way would fail
// an admitted request.
const peerService = "/counterd.cluster.v1.Peer/"

// shedUnary admits client gRPC calls (the Envoy rate-limit service)
// through lim; a shed call fails with RESOURCE_EXHAUSTED.
func shedUnary(lim *shed.Limiter) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if lim == nil || strings.HasPrefix(info.FullMethod, peerService) {
			return h(ctx, req)
		}
		if err := lim.Acquire(ctx, "grpc"); err != nil {
			if errors.Is(err, shed.ErrOverloaded) {
				return nil, status.Error(codes.ResourceExhausted, "server overloaded, retry later")
			}
			return nil, status.FromContextError(err).Err()
		}
		defer lim.Release()
		return h(ctx, req)
	}
}

// buildInfoGauge is counterd_build_info{version}, always 1: dashboards
// show which version each node runs.
func buildInfoGauge() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "counterd_build_info",
		Help:        "Always 1; the version label is the running binary's version.",
		ConstLabels: prometheus.Labels{"version": buildinfo.Version()},
	})
	g.Set(1)
	return g
}
