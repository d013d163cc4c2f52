package httpapi

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/counterd/counterd/internal/contract"
)

// metrics are the HTTP metrics and the engine collector.
type metrics struct {
	requests *prometheus.CounterVec   // counterd_http_requests_total{op,code}
	duration *prometheus.HistogramVec // counterd_http_request_duration_seconds{op}
	http     http.Handler             // GET /metrics
}

func newMetrics(reg prometheus.Registerer, eng contract.Backend, g prometheus.Gatherer, log *slog.Logger) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "counterd_http_requests_total",
			Help: "HTTP requests by route (op) and status code.",
		}, []string{"op", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "counterd_http_request_duration_seconds",
			Help:    "HTTP request latency by route (op).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"op"}),
	}
	m.requests = register(reg, m.requests, log)
	m.duration = register(reg, m.duration, log)
	register[prometheus.Collector](reg, &engineCollector{eng: eng}, log)
	m.http = promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
	})
	return m
}

// register registers c, or returns the collector already registered in its
// place (several Handlers may share a registry).
func register[C prometheus.Collector](reg prometheus.Registerer, c C, log *slog.Logger) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		log.Warn("httpapi: registering metrics", slog.Any("err", err))
	}
	return c
}

func (m *metrics) observe(op string, status int, d time.Duration) {
	m.requests.WithLabelValues(op, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(op).Observe(d.Seconds())
}

// engineCollector exports contract.Stats, read once per scrape.
type engineCollector struct{ eng contract.Backend }

var (
	descKeys      = prometheus.NewDesc("counterd_engine_keys", "Live counters.", nil, nil)
	descExpires   = prometheus.NewDesc("counterd_engine_expires", "Live counters with a TTL.", nil, nil)
	descOps       = prometheus.NewDesc("counterd_engine_ops_total", "Mutations applied since the engine opened.", nil, nil)
	descFlushes   = prometheus.NewDesc("counterd_engine_flushes_total", "Durable flushes since the engine opened.", nil, nil)
	descFlushFail = prometheus.NewDesc("counterd_engine_flush_failures_total", "Flushes that failed since the engine opened (to disk; in tiered mode to PostgreSQL); each is retried.", nil, nil)
	descLastFlush = prometheus.NewDesc("counterd_engine_last_flush_timestamp_seconds", "Time of the last durable flush.", nil, nil)
	descDirty     = prometheus.NewDesc("counterd_engine_dirty_keys", "Counters changed since the last flush.", nil, nil)
	descIdem      = prometheus.NewDesc("counterd_engine_idempotency_records", "Idempotency records held in memory.", nil, nil)

	// The data directory's storage (docs/operations.md, "Full disk");
	// absent in tiered mode.
	descWritable   = prometheus.NewDesc("counterd_storage_writable", "1 while the node takes writes; 0 while it is read-only because its data directory is full (below --min-free-disk) or failing.", nil, nil)
	descFree       = prometheus.NewDesc("counterd_storage_free_bytes", "Free space last read on the data directory's filesystem.", nil, nil)
	descMinFree    = prometheus.NewDesc("counterd_storage_min_free_bytes", "The --min-free-disk reserve: below it writes are refused.", nil, nil)
	descRefused    = prometheus.NewDesc("counterd_storage_refused_writes_total", "Writes refused (HTTP 507, RESP MISCONF) because the node was read-only.", nil, nil)
	descStorageErr = prometheus.NewDesc("counterd_storage_errors_total", "Write and sync errors returned by the data directory's filesystem (ENOSPC, EIO, ...).", nil, nil)
)

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descKeys, descExpires, descOps, descFlushes, descFlushFail, descLastFlush, descDirty, descIdem,
		descWritable, descFree, descMinFree, descRefused, descStorageErr} {
		ch <- d
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.eng.Stats()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(descKeys, float64(st.Keys))
	gauge(descExpires, float64(st.Expires))
	counter(descOps, float64(st.Ops))
	counter(descFlushes, float64(st.Flushes))
	counter(descFlushFail, float64(st.FlushFailures))
	if !st.LastFlush.IsZero() {
		gauge(descLastFlush, float64(st.LastFlush.UnixNano())/1e9)
	}
	gauge(descDirty, float64(st.DirtyKeys))
	gauge(descIdem, float64(st.IdemRecords))
	if d := st.Disk; d != nil {
		w := 0.0
		if d.Writable {
			w = 1
		}
		gauge(descWritable, w)
		if d.FreeBytes >= 0 {
			gauge(descFree, float64(d.FreeBytes))
		}
		gauge(descMinFree, float64(d.MinFree))
		counter(descRefused, float64(d.Refused))
		counter(descStorageErr, float64(d.IOErrors))
	}
}
