// Package nodestats keeps the last hour of a node's own figures in memory
// for the web console's node page (docs/console.md): a sampler reads the
// node's Prometheus registry every interval (10 s by default) and keeps,
// in a ring buffer, the request rate, the p50 and p99 latency, the shed
// rate, the cluster replication lag and the event stream's consumer lag of
// each interval. No Prometheus server is needed to see them; GET
// /node/stats serves them as JSON.
package nodestats

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/counterd/counterd/internal/httpjson"
)

// Route is the JSON route of the samples, as "METHOD pattern".
const Route = "GET /node/stats"

// DefaultInterval is how often the sampler reads the registry.
const DefaultInterval = 10 * time.Second

// Window is how much history the ring buffer keeps.
const Window = time.Hour

// The metrics a sample reads.
const (
	httpRequests  = "counterd_http_requests_total"
	respCommands  = "counterd_resp_commands_total"
	httpDuration  = "counterd_http_request_duration_seconds"
	respDuration  = "counterd_resp_command_duration_seconds"
	shedRequests  = "counterd_shed_requests_total"
	replLag       = "counterd_cluster_replication_lag_seconds"
	streamLag     = "counterd_pipeline_consumer_lag"
	maxBucketsSeq = 64 // histogram buckets kept per metric (bounds the work per sample)
)

// Sample is one interval's figures. Rates are per second over the
// interval that ends at Time; the latency quantiles are estimated from
// the request-duration histograms of the HTTP API and the RESP commands
// over that interval, as Prometheus's histogram_quantile does (linear
// within a bucket), and are null when no request finished in it. The lags
// are the gauges' values at Time, null when the node has no such figure
// (not a cluster member, no event stream).
type Sample struct {
	Time            time.Time `json:"t"`
	Seconds         float64   `json:"seconds"`
	RequestsPerS    float64   `json:"requests_per_s"`
	P50Ms           *float64  `json:"p50_ms"`
	P99Ms           *float64  `json:"p99_ms"`
	ShedPerS        float64   `json:"shed_per_s"`
	ReplicationLagS *float64  `json:"replication_lag_s"`
	StreamLag       *float64  `json:"stream_lag"`
}

// Answer is GET /node/stats.
type Answer struct {
	IntervalS float64  `json:"interval_s"`
	WindowS   float64  `json:"window_s"`
	Samples   []Sample `json:"samples"` // oldest first
}

// bucket is one cumulative histogram bucket.
type bucket struct {
	upper float64
	count float64
}

// reading is what the registry said at one time.
type reading struct {
	at       time.Time
	requests float64
	shed     float64
	hist     map[string][]bucket // by metric name: buckets summed over the series, cumulative
	repl     *float64
	stream   *float64
}

// Sampler reads a registry every interval into a ring buffer. Safe for
// concurrent use.
type Sampler struct {
	g        prometheus.Gatherer
	interval time.Duration

	mu   sync.Mutex
	ring []Sample
	next int // ring[next] is the oldest once full
	full bool
	prev *reading
}

// New returns a sampler of g every interval (<= 0: DefaultInterval),
// keeping Window of samples. Call Run to start it.
func New(g prometheus.Gatherer, interval time.Duration) *Sampler {
	if interval <= 0 {
		interval = DefaultInterval
	}
	n := max(int(Window/interval), 1)
	return &Sampler{g: g, interval: interval, ring: make([]Sample, n)}
}

// Run samples until ctx is done: once at once (the baseline), then every
// interval.
func (s *Sampler) Run(ctx context.Context) {
	s.Sample(time.Now())
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.Sample(now)
		}
	}
}

// Sample reads the registry now and, after the first reading, records the
// interval since the previous one.
func (s *Sampler) Sample(now time.Time) {
	mfs, err := s.g.Gather()
	if err != nil && len(mfs) == 0 {
		return // a partly failed gather still has the families it read
	}
	cur := read(mfs, now)
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.prev
	s.prev = cur
	if prev == nil || !cur.at.After(prev.at) {
		return
	}
	s.ring[s.next] = between(prev, cur)
	s.next++
	if s.next == len(s.ring) {
		s.next, s.full = 0, true
	}
}

// Samples returns the kept samples, oldest first.
func (s *Sampler) Samples() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Sample
	if s.full {
		out = append(out, s.ring[s.next:]...)
	}
	return append(out, s.ring[:s.next]...)
}

// Handler serves Route.
func (s *Sampler) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			httpjson.WriteError(w, fmt.Errorf("%w: %s is read with GET", httpjson.ErrMethodNotAllowed, r.URL.Path))
			return
		}
		samples := s.Samples()
		if samples == nil {
			samples = []Sample{}
		}
		_ = httpjson.WriteJSON(w, http.StatusOK, Answer{IntervalS: s.interval.Seconds(), WindowS: Window.Seconds(), Samples: samples})
	})
}

func read(mfs []*dto.MetricFamily, at time.Time) *reading {
	r := &reading{at: at, hist: map[string][]bucket{}}
	for _, mf := range mfs {
		switch mf.GetName() {
		case httpRequests, respCommands:
			r.requests += sumValues(mf)
		case shedRequests:
			r.shed += sumValues(mf)
		case replLag:
			v := sumValues(mf)
			r.repl = &v
		case streamLag:
			v := sumValues(mf)
			r.stream = &v
		case httpDuration, respDuration:
			r.hist[mf.GetName()] = sumHistograms(mf)
		}
	}
	return r
}

// sumValues sums a counter's or gauge's series.
func sumValues(mf *dto.MetricFamily) float64 {
	var t float64
	for _, m := range mf.GetMetric() {
		switch {
		case m.GetCounter() != nil:
			t += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			t += m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			t += m.GetUntyped().GetValue()
		}
	}
	if math.IsNaN(t) || math.IsInf(t, 0) {
		return 0
	}
	return t
}

// sumHistograms adds up a histogram's series bucket by bucket (the
// series of one family share their bounds), with +Inf as the count.
func sumHistograms(mf *dto.MetricFamily) []bucket {
	byUpper := map[float64]float64{}
	for _, m := range mf.GetMetric() {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		for _, b := range h.GetBucket() {
			byUpper[b.GetUpperBound()] += float64(b.GetCumulativeCount())
		}
		byUpper[math.Inf(1)] += float64(h.GetSampleCount())
	}
	out := make([]bucket, 0, len(byUpper))
	for u, c := range byUpper {
		out = append(out, bucket{upper: u, count: c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].upper < out[j].upper })
	if len(out) > maxBucketsSeq {
		out = append(out[:maxBucketsSeq-1], out[len(out)-1])
	}
	return out
}

// between is the sample of the interval from a to b.
func between(a, b *reading) Sample {
	secs := b.at.Sub(a.at).Seconds()
	s := Sample{
		Time:            b.at.UTC(),
		Seconds:         secs,
		RequestsPerS:    max(b.requests-a.requests, 0) / secs,
		ShedPerS:        max(b.shed-a.shed, 0) / secs,
		ReplicationLagS: b.repl,
		StreamLag:       b.stream,
	}
	// The interval's buckets (non-cumulative), every histogram together.
	var spans []span
	for name, cur := range b.hist {
		spans = append(spans, deltaSpans(a.hist[name], cur)...)
	}
	if q, ok := quantile(spans, 0.5); ok {
		ms := q * 1000
		s.P50Ms = &ms
	}
	if q, ok := quantile(spans, 0.99); ok {
		ms := q * 1000
		s.P99Ms = &ms
	}
	return s
}

// span is a bucket's range and the observations in it.
type span struct {
	lower, upper, count float64
}

// deltaSpans turns two readings of one cumulative histogram into the
// observations per bucket between them (a reset counts from zero).
func deltaSpans(prev, cur []bucket) []span {
	before := map[float64]float64{}
	for _, b := range prev {
		before[b.upper] = b.count
	}
	reset := false
	for _, b := range cur {
		if b.count < before[b.upper] {
			reset = true
		}
	}
	var out []span
	lower, cumPrev := 0.0, 0.0
	for _, b := range cur {
		c := b.count
		if !reset {
			c -= before[b.upper]
		}
		if n := c - cumPrev; n > 0 {
			out = append(out, span{lower: lower, upper: b.upper, count: n})
		}
		cumPrev = max(c, cumPrev)
		lower = b.upper
	}
	return out
}

// quantile estimates the q-quantile of the observations in spans as
// histogram_quantile does: linear within the bucket that holds it, the
// lower bound of the +Inf bucket when it falls there. false when there is
// no observation.
func quantile(spans []span, q float64) (float64, bool) {
	var total float64
	for _, s := range spans {
		total += s.count
	}
	if total <= 0 {
		return 0, false
	}
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].upper < spans[j].upper })
	rank := q * total
	var cum float64
	for _, s := range spans {
		if s.count <= 0 {
			continue
		}
		if cum+s.count >= rank {
			if math.IsInf(s.upper, 1) {
				return s.lower, true
			}
			return s.lower + (s.upper-s.lower)*(rank-cum)/s.count, true
		}
		cum += s.count
	}
	last := spans[len(spans)-1]
	if math.IsInf(last.upper, 1) {
		return last.lower, true
	}
	return last.upper, true
}
