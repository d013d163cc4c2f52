package server

import (
	"context"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"runtime"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/counterd/counterd/internal/auth"
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
	shed              *prometheus.CounterVec // counterd_shed_requests_total{front_end,reason}
	httpConnsRejected prometheus.Counter     // counterd_http_rejected_connections_total
}

// onShed returns the OnShed hook of a shed.Fair of front end fe.
func (m *shedMetrics) onShed(fe string) func(shed.Verdict) {
	overload, client := m.shed.WithLabelValues(fe, "overload"), m.shed.WithLabelValues(fe, "client")
	return func(v shed.Verdict) {
		if v == shed.ShedClient {
			client.Inc()
		} else {
			overload.Inc()
		}
	}
}

// newShedder returns the overload limiter of cfg (nil with
// --max-inflight -1) and registers its metrics on reg.
func newShedder(cfg Config, reg prometheus.Registerer) (*shed.Limiter, *shedMetrics) {
	m := &shedMetrics{
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "counterd_shed_requests_total",
			Help: "Requests refused by the overload limits, by front end (http, resp, grpc) and reason (overload: the node is saturated; client: the client's own queue is full while others are served).",
		}, []string{"front_end", "reason"}),
		httpConnsRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "counterd_http_rejected_connections_total",
			Help: "HTTP connections answered 503 and closed because --http-max-conns was reached.",
		}),
	}
	reg.MustRegister(m.shed, m.httpConnsRejected)
	for _, fe := range []string{"http", "resp", "grpc"} {
		for _, reason := range []string{"overload", "client"} {
			m.shed.WithLabelValues(fe, reason) // export zeros, so rate() works from the start
		}
	}
	if cfg.MaxInflight < 0 {
		return nil, m
	}
	lim := shed.New(shed.Config{MaxInflight: cfg.MaxInflight, MaxQueue: cfg.MaxQueue, MaxWait: cfg.MaxQueueWait})
	lim.OnShed = func(fe string) { m.shed.WithLabelValues(fe, "overload").Inc() }
	return lim, m
}

// registerFairGauges exports the per-client admission's state:
// counterd_admission_limit and counterd_admission_parked.
func registerFairGauges(reg prometheus.Registerer, f *shed.Fair) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "counterd_admission_limit",
			Help: "Requests (HTTP, RESP batches, gRPC calls) admitted to run at once: adapts to latency between its floor and --max-inflight; waits on I/O are not counted.",
		}, func() float64 { return float64(f.Limit()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "counterd_admission_parked",
			Help: "Admitted requests waiting on I/O (an fsync, a peer, a remote store): they hold no slot meanwhile.",
		}, func() float64 { return float64(f.Parked()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "counterd_admission_queued",
			Help: "Requests waiting for an admission slot (at most --max-queue).",
		}, func() float64 { return float64(f.Queued()) }),
	)
	for _, c := range shed.Causes() {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "counterd_admission_shed_total",
			Help:        "Requests (HTTP, RESP batches, gRPC calls) the per-client admission shed, by cause: queue_full (--max-queue reached), stale (waited --max-queue-wait before it was read, while others waited), timeout (waited --max-queue-wait in the queue), client (over its share of the queue while other clients waited).",
			ConstLabels: prometheus.Labels{"cause": c.String()},
		}, func() float64 { return float64(f.ShedBy(c)) }))
	}
}

// admissionMinLimit is the floor of an adaptive admission limit: 8 x
// GOMAXPROCS (at most maxInflight). Requests that only compete for the
// CPU need no more than a few per core; the rest is headroom for a
// machine that is busy with other processes, where latency rises whatever
// the limit does and a lower limit would only turn waits into refusals.
func admissionMinLimit(maxInflight int) int {
	return min(8*runtime.GOMAXPROCS(0), maxInflight)
}

// peerService is the cluster's own gRPC service: peer calls were admitted
// on the node the client called, and shedding them half way would fail
// an admitted request.
const peerService = "/counterd.cluster.v1.Peer/"

// shedUnary admits client gRPC calls (the Envoy rate-limit service) per
// client (its user with --auth, else its IP address) through fair (nil: no limit): a call shed because the
// node is overloaded fails with UNAVAILABLE, one shed because its
// client's own queue is full with RESOURCE_EXHAUSTED; both carry a
// retry-after trailer. The call's context carries its slot, so that its
// waits on I/O (a forwarded check) park it.
func shedUnary(fair *shed.Fair, sm *shedMetrics) grpc.UnaryServerInterceptor {
	onShed := sm.onShed("grpc")
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if fair == nil || strings.HasPrefix(info.FullMethod, peerService) {
			return h(ctx, req)
		}
		var key shed.Key
		if p := auth.FromContext(ctx); p != nil { // --auth: authenticated before (grpcAuthOptions comes first)
			key = shed.UserKey(p.User)
		} else if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			if ap, err := netip.ParseAddrPort(p.Addr.String()); err == nil {
				key = shed.ClientKey(ap.Addr())
			}
		}
		t := new(shed.Ticket)
		if v := fair.Acquire(t, key, 0); v != shed.Admitted {
			onShed(v)
			_ = grpc.SetTrailer(ctx, metadata.Pairs("retry-after", "1"))
			if v == shed.ShedClient {
				return nil, status.Error(codes.ResourceExhausted, "too many requests of this client waiting, retry later")
			}
			return nil, status.Error(codes.Unavailable, "server overloaded, retry later")
		}
		defer fair.Release(t)
		return h(shed.WithTicket(ctx, t), req)
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
