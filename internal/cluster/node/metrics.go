package node

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the node's Prometheus collectors (Collectors registers them).
type metrics struct {
	forwarded      *prometheus.CounterVec // by op and result
	replicationLag prometheus.Gauge
	convergence    prometheus.Histogram
	fence          prometheus.Histogram
	handoff        *prometheus.CounterVec // by result: sent, dropped, failed, limits_sent, limits_replicated
	handoffBytes   prometheus.Counter
	antiEntropy    prometheus.Counter
	ringVersion    prometheus.Gauge
	failover       *prometheus.CounterVec // by result: probe_failed, rerouted, timeout
	duplicates     prometheus.Counter
	lease          *prometheus.CounterVec // by result: no_lease, lapsed, takeover_waited, takeover_timeout, renewal_calls (lease.go)
}

func newMetrics() *metrics {
	return &metrics{
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "counterd_cluster_forwarded_total",
			Help: "Requests sent to another node (forwarded ops and reads, fan-out parts), by op and result (ok, wrong_owner, unavailable, error).",
		}, []string{"op", "result"}),
		replicationLag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "counterd_cluster_replication_lag_seconds",
			Help: "Age of the oldest local change not yet acknowledged by its replicas (0 when none is pending).",
		}),
		convergence: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "counterd_cluster_convergence_seconds",
			Help:    "Time from a local change (CRDT delta or async write) to its acknowledgement by every replica.",
			Buckets: []float64{.01, .025, .05, .1, .15, .2, .3, .5, .75, 1, 2, 5, 10},
		}),
		fence: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "counterd_cluster_fence_seconds",
			Help:    "Time a new owner spent pulling state from the other replicas before its first op on ids after a ring change.",
			Buckets: prometheus.ExponentialBuckets(.001, 2.5, 10),
		}),
		handoff: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "counterd_cluster_handoff_total",
			Help: "Handoff after ring changes: states sent to new replicas, local copies dropped, peers that failed; rate-limit entries handed to new owners (limits_sent) and replicated to next replicas (limits_replicated).",
		}, []string{"result"}),
		handoffBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "counterd_cluster_handoff_bytes_total",
			Help: "Bytes of the states handed off after ring changes (each state's id and encoded state, once per new replica sent to; not the RPC framing).",
		}),
		antiEntropy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "counterd_cluster_anti_entropy_repairs_total",
			Help: "States exchanged by anti-entropy because replicas differed.",
		}),
		ringVersion: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "counterd_cluster_ring_version",
			Help: "Version of this node's ring (increases on every membership change it sees).",
		}),
		failover: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "counterd_cluster_failover_total",
			Help: "Forwarded requests whose owner failed a direct probe after a failed call (probe_failed), then were sent to the new owner (rerouted) or gave up waiting for the ring to move (timeout).",
		}, []string{"result"}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "counterd_cluster_duplicates_undone_total",
			Help: "Keyed pn/sharded adds this node applied that another node had applied first (a retry after a crash or partition), taken back from this node's slot.",
		}),
		lease: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "counterd_cluster_lease_total",
			Help: "Owner lease events: owner operations refused without a lease (no_lease) or whose lease ran out before the acknowledgement (lapsed); new owners that waited for dropped nodes' leases (takeover_waited) or gave up (takeover_timeout); Lease calls sent to renew this node's lease (renewal_calls).",
		}, []string{"result"}),
	}
}

// Collectors returns the node's metrics, for the server's registry.
func (n *Node) Collectors() []prometheus.Collector {
	m := n.metrics
	return []prometheus.Collector{m.forwarded, m.replicationLag, m.convergence, m.fence, m.handoff, m.handoffBytes, m.antiEntropy, m.ringVersion, m.failover, m.duplicates, m.lease, membersCollector{n}}
}

// descMembers is counterd_cluster_members{state}: the members this node
// sees by state (alive, dead, left), read from Status at each scrape. A
// peer that crashed shows as dead on every node still up, which alerts
// even when the crashed node's own scrape target is gone too.
var descMembers = prometheus.NewDesc("counterd_cluster_members",
	"Cluster members this node sees, by state (alive, dead, left).", []string{"state"}, nil)

type membersCollector struct{ n *Node }

func (c membersCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descMembers }

func (c membersCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{"alive": 0, "dead": 0, "left": 0}
	for _, m := range c.n.Status().Members {
		counts[m.State]++
	}
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(n), state)
	}
}

// metricsHandler serves the node's metrics alone (at /cluster/metrics) for
// servers that do not register Collectors on their own registry.
func (n *Node) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(n.Collectors()...)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}
