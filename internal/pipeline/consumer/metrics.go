package consumer

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/counterd/counterd/internal/pipeline/rules"
)

// Metrics are the pipeline's Prometheus metrics. Safe for concurrent use.
type Metrics struct {
	// Events counts consumed events by result: applied, duplicate,
	// filtered (no rule matched) or dead (dead-lettered).
	Events   *prometheus.CounterVec
	RuleHits *prometheus.CounterVec // by rule name
	Dead     prometheus.Counter     // dead letters published
	Batches  prometheus.Counter     // engine batches applied
	Lag      *prometheus.GaugeVec   // records not yet consumed, by partition
	// Collected counts events the collector accepted, by front end.
	Collected *prometheus.CounterVec
	// Rejected counts events of partial batches the collector refused
	// (and dead-lettered), by front end.
	Rejected *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg (nil: none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "counterd_pipeline_events_total",
			Help: "Events consumed from the stream, by result (applied, duplicate, filtered, dead)."}, []string{"result"}),
		RuleHits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "counterd_pipeline_rule_hits_total",
			Help: "Events a rule matched, by rule."}, []string{"rule"}),
		Dead: prometheus.NewCounter(prometheus.CounterOpts{Name: "counterd_pipeline_dead_letters_total",
			Help: "Events sent to the dead-letter stream."}),
		Batches: prometheus.NewCounter(prometheus.CounterOpts{Name: "counterd_pipeline_batches_total",
			Help: "Engine batches applied by the consumer."}),
		Lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "counterd_pipeline_consumer_lag",
			Help: "Records not yet consumed, by partition (JetStream: partition 0, the consumer's pending count)."}, []string{"partition"}),
		Collected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "counterd_pipeline_collected_total",
			Help: "Events the collector appended to the stream, by front end (http, resp)."}, []string{"frontend"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "counterd_pipeline_rejected_total",
			Help: "Events of accepted batches that the collector refused one by one (bad JSON, fields or size) and dead-lettered, by front end."}, []string{"frontend"}),
	}
	if reg != nil {
		reg.MustRegister(m.Events, m.RuleHits, m.Dead, m.Batches, m.Lag, m.Collected, m.Rejected)
	}
	return m
}

func (m *Metrics) ruleHits(hits []rules.Hit) {
	for i := range hits {
		m.RuleHits.WithLabelValues(hits[i].Rule.Name).Inc()
	}
}
