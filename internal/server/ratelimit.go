package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	cnode "github.com/counterd/counterd/internal/cluster/node"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/ratelimit"
)

// engineLimits is the rlShared hook of the embedded and cluster modes:
// the policies live in a ratelimit.PolicyLog stored in the engine's Pebble
// (seeded with the --ratelimit-policies file, which loses to any change
// made through the API) and a PolicySync keeps lim's policies equal to it.
// With cn (cluster mode) the node replicates the log, moves lim's state
// with the ring, and a Router decides each check on its key's owner
// (forwarding over TLS with sec's peer settings).
// logSeeded reports how --ratelimit-policies seeded a policy store: a
// warning for each stored policy kept although the file differs.
func logSeeded(log *slog.Logger, added, kept []string, err error) error {
	if err != nil {
		return fmt.Errorf("server: --ratelimit-policies: %w", err)
	}
	for _, name := range kept {
		log.Warn("rate-limit policy already stored differs from --ratelimit-policies; keeping the stored one (change it through the API)", "policy", name)
	}
	if len(added)+len(kept) > 0 {
		log.Info("rate-limit policies seeded", "added", len(added), "kept", len(kept))
	}
	return nil
}

func engineLimits(eng *engine.Engine, cn *cnode.Node, sec *security, log *slog.Logger, globalInterval time.Duration) func(context.Context, *ratelimit.Limiter) (*sharedLimits, error) {
	return func(ctx context.Context, lim *ratelimit.Limiter) (*sharedLimits, error) {
		pl, err := ratelimit.OpenPolicyLog(eng.NodeID(), cnode.EnginePolicies(eng))
		if err != nil {
			return nil, fmt.Errorf("server: rate-limit policies: %w", err)
		}
		added, kept, err := pl.Seed(lim.Policies())
		if err := logSeeded(log, added, kept, err); err != nil {
			return nil, err
		}
		var checker ratelimit.Checker = lim
		var cols []prometheus.Collector
		closeRouter := func() {}
		syncCfg := ratelimit.PolicySyncConfig{Interval: -1, Logger: log} // one node: every change is its own
		if cn != nil {
			// global-approx limits: decided here from this node's share,
			// exchanged with the keys' owners every globalInterval.
			g, err := ratelimit.NewGlobal(ratelimit.GlobalConfig{Self: cn.ID(), Interval: globalInterval, Peers: cn.GlobalPeers()})
			if err != nil {
				return nil, err
			}
			cn.SetRateLimit(cnode.RateLimit{Limiter: lim, Policies: pl, Global: g})
			rc := sec.routerConfig(cn.KeyOwner)
			rc.Global = g
			router, err := ratelimit.NewRouter(lim, rc)
			if err != nil {
				return nil, err
			}
			checker, closeRouter = router, func() { _ = router.Close() }
			cols = append(cols, routerCollector{router, g})
			syncCfg.Interval = 0 // the default: peers' changes show within a second
		}
		ps, err := ratelimit.NewPolicySync(ctx, lim, pl, syncCfg)
		if err != nil {
			closeRouter()
			return nil, err
		}
		return &sharedLimits{checker: checker, policies: ps, close: func() { _ = ps.Close(); closeRouter() }, collectors: cols}, nil
	}
}

var (
	descRLDecisions = prometheus.NewDesc("counterd_ratelimit_decisions_total",
		"Cluster rate-limit checks by where they were decided: local (this node owns the key), forwarded (to the owner), fallback (owner unreachable, decided here), unavailable (failed), global (a global-approx limit, decided here from this node's share).",
		[]string{"decided"}, nil)
	descRLGlobal = prometheus.NewDesc("counterd_ratelimit_global_total",
		"global-approx limits on this node: checks allowed and denied from its shares, exchanges with the keys' owners (ok, failed) and first checks that asked the owner for a share (cold).",
		[]string{"result"}, nil)
	descRLGlobalRTT = prometheus.NewDesc("counterd_ratelimit_global_max_roundtrip_seconds",
		"Longest exchange of usage and shares with a key's owner so far: the round trip in the overshoot bound of docs/ratelimit.md (Global limits).", nil, nil)
)

// routerCollector exports a cluster Router's decision counts and its
// Global's.
type routerCollector struct {
	r *ratelimit.Router
	g *ratelimit.Global
}

func (c routerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRLDecisions
	ch <- descRLGlobal
	ch <- descRLGlobalRTT
}

func (c routerCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.r.Stats()
	for _, v := range []struct {
		l string
		n uint64
	}{{"local", st.Local}, {"forwarded", st.Forwarded}, {"fallback", st.Fallback}, {"unavailable", st.Unavailable}, {"global", st.Global}} {
		ch <- prometheus.MustNewConstMetric(descRLDecisions, prometheus.CounterValue, float64(v.n), v.l)
	}
	gs := c.g.Stats()
	for _, v := range []struct {
		l string
		n uint64
	}{{"allowed", gs.Allowed}, {"denied", gs.Denied}, {"exchange_ok", gs.Exchanges}, {"exchange_failed", gs.ExchangeErrors}, {"cold", gs.ColdFetches}} {
		ch <- prometheus.MustNewConstMetric(descRLGlobal, prometheus.CounterValue, float64(v.n), v.l)
	}
	ch <- prometheus.MustNewConstMetric(descRLGlobalRTT, prometheus.GaugeValue, gs.MaxRoundTrip.Seconds())
}
