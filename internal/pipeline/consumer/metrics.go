package consumer

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the pipeline's Prometheus metrics. Safe for concurrent use.
type Metrics struct {
	// Events counts consumed events by result: applied, duplicate,
	// filtered (no rule matched) or dead (dead-lettered).
	Events   *prometheus.CounterVec
	RuleHits *prometheus.CounterVec // by rule name
	Dead     prometheus.Counter     // dead letters published
	Batches  prometheus.Counter     // engine batches applied
	// DurableWaits counts the waits for the durability of applied
	// batches (one synced write each); Commits the stream commits of
	// the consumer loop, each of one or more polls (Run).
	DurableWaits prometheus.Counter
	Commits      prometheus.Counter
	Lag          *prometheus.GaugeVec // records not yet consumed, by partition
	// Collected counts events the collector accepted, by front end.
	Collected *prometheus.CounterVec
	// Rejected counts events of partial batches the collector refused
	// (and dead-lettered), by front end.
	Rejected *prometheus.CounterVec
	// EventTime counts events dead-lettered by their time, by reason
	// (too_late, too_early).
	EventTime *prometheus.CounterVec
	// Watermark is the newest event time applied, Unix seconds.
	Watermark prometheus.Gauge
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
		DurableWaits: prometheus.NewCounter(prometheus.CounterOpts{Name: "counterd_pipeline_durable_waits_total",
			Help: "Waits of the consumer for the durability of the batches it applied (one synced write each)."}),
		Commits: prometheus.NewCounter(prometheus.CounterOpts{Name: "counterd_pipeline_commits_total",
			Help: "Stream commits of the consumer, each of the polls applied since the last one (--events-commit-interval)."}),
		Lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "counterd_pipeline_consumer_lag",
			Help: "Records not yet consumed, by partition (JetStream: partition 0, the consumer's pending count)."}, []string{"partition"}),
		Collected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "counterd_pipeline_collected_total",
			Help: "Events the collector appended to the stream, by front end (http, resp)."}, []string{"frontend"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "counterd_pipeline_rejected_total",
			Help: "Events of accepted batches that the collector refused one by one (bad JSON, fields or size) and dead-lettered, by front end."}, []string{"frontend"}),
		EventTime: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "counterd_pipeline_event_time_refused_total",
			Help: "Events dead-lettered by their own time, by reason: too_late (older than --events-allowed-lateness for a window rule, or than every rollup retention), too_early (ahead of the clock by more than --events-max-skew)."}, []string{"reason"}),
		Watermark: prometheus.NewGauge(prometheus.GaugeOpts{Name: "counterd_pipeline_watermark_seconds",
			Help: "The newest event time (ts) this node's consumer applied, Unix seconds: its event-time progress."}),
	}
	if reg != nil {
		reg.MustRegister(m.Events, m.RuleHits, m.Dead, m.Batches, m.DurableWaits, m.Commits, m.Lag, m.Collected, m.Rejected, m.EventTime, m.Watermark)
	}
	return m
}
