package nodestats

import (
	"encoding/json"
	"math"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"pgregory.net/rapid"
)

type fixture struct {
	reg              *prometheus.Registry
	http, resp, shed *prometheus.CounterVec
	httpDur, respDur *prometheus.HistogramVec
	repl             prometheus.Gauge
	t0               time.Time
}

func newFixture(t *testing.T, cluster bool) *fixture {
	f := &fixture{reg: prometheus.NewRegistry(), t0: time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)}
	f.http = prometheus.NewCounterVec(prometheus.CounterOpts{Name: httpRequests}, []string{"route"})
	f.resp = prometheus.NewCounterVec(prometheus.CounterOpts{Name: respCommands}, []string{"cmd"})
	f.shed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: shedRequests}, []string{"front_end"})
	f.httpDur = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: httpDuration, Buckets: []float64{.001, .01, .1, 1}}, []string{"route"})
	f.respDur = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: respDuration, Buckets: []float64{.0001, .001, .01}}, []string{"cmd"})
	f.reg.MustRegister(f.http, f.resp, f.shed, f.httpDur, f.respDur)
	if cluster {
		f.repl = prometheus.NewGauge(prometheus.GaugeOpts{Name: replLag})
		f.reg.MustRegister(f.repl)
	}
	return f
}

// TestSampler: rates over the interval, the p50/p99 of the interval's
// observations only (earlier ones are not counted again), the lag gauge
// when there is one, null latency for an idle interval.
func TestSampler(t *testing.T) {
	f := newFixture(t, true)
	s := New(f.reg, 10*time.Second)
	f.http.WithLabelValues("a").Add(1000) // before the baseline: not in any rate
	f.httpDur.WithLabelValues("a").Observe(0.5)
	s.Sample(f.t0)
	if got := s.Samples(); len(got) != 0 {
		t.Fatalf("baseline made samples: %v", got)
	}
	f.http.WithLabelValues("a").Add(60)
	f.resp.WithLabelValues("incr").Add(40)
	f.shed.WithLabelValues("http").Add(5)
	f.repl.Set(0.25)
	for range 98 { // 98 fast RESP commands, 2 slow HTTP requests
		f.respDur.WithLabelValues("incr").Observe(0.0005)
	}
	f.httpDur.WithLabelValues("a").Observe(0.05)
	f.httpDur.WithLabelValues("b").Observe(0.05)
	s.Sample(f.t0.Add(10 * time.Second))
	got := s.Samples()
	if len(got) != 1 {
		t.Fatalf("%d samples, want 1", len(got))
	}
	x := got[0]
	if x.RequestsPerS != 10 || x.ShedPerS != 0.5 || x.Seconds != 10 || !x.Time.Equal(f.t0.Add(10*time.Second)) {
		t.Errorf("sample %+v: want 10 requests/s, 0.5 shed/s over 10 s", x)
	}
	if x.ReplicationLagS == nil || *x.ReplicationLagS != 0.25 || x.StreamLag != nil {
		t.Errorf("lags %v %v: want 0.25 and null", x.ReplicationLagS, x.StreamLag)
	}
	// p50 among the 98 observations in (0.0001, 0.001]; p99 at rank 99
	// of 100, in the HTTP bucket (0.01, 0.1].
	if x.P50Ms == nil || *x.P50Ms <= 0.1 || *x.P50Ms > 1 {
		t.Errorf("p50 %v ms, want in (0.1, 1]", x.P50Ms)
	}
	if x.P99Ms == nil || *x.P99Ms <= 10 || *x.P99Ms > 100 {
		t.Errorf("p99 %v ms, want in (10, 100]", x.P99Ms)
	}
	s.Sample(f.t0.Add(20 * time.Second)) // idle
	got = s.Samples()
	if len(got) != 2 || got[1].P50Ms != nil || got[1].RequestsPerS != 0 {
		t.Errorf("idle interval: %+v", got[1])
	}
	// The route's JSON: nulls where there is no figure.
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/node/stats", nil))
	var a struct {
		IntervalS float64          `json:"interval_s"`
		Samples   []map[string]any `json:"samples"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil || rec.Code != 200 {
		t.Fatalf("GET: %d %s %v", rec.Code, rec.Body, err)
	}
	if a.IntervalS != 10 || len(a.Samples) != 2 || a.Samples[1]["p50_ms"] != nil || a.Samples[0]["requests_per_s"] != 10.0 {
		t.Errorf("answer %s", rec.Body)
	}
	if _, ok := a.Samples[1]["p50_ms"]; !ok {
		t.Errorf("p50_ms missing, want null: %s", rec.Body)
	}
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/node/stats", nil))
	if rec.Code != 405 {
		t.Errorf("POST: %d", rec.Code)
	}
}

// TestSamplerRing: an hour of samples is kept, oldest first, and a
// counter reset (a registry that starts again) counts from zero rather
// than as a negative rate.
func TestSamplerRing(t *testing.T) {
	f := newFixture(t, false)
	s := New(f.reg, time.Minute)
	for i := range 100 {
		f.http.WithLabelValues("a").Add(60)
		s.Sample(f.t0.Add(time.Duration(i) * time.Minute))
	}
	got := s.Samples()
	if len(got) != 60 {
		t.Fatalf("%d samples, want 60 (an hour of minutes)", len(got))
	}
	for i, x := range got {
		if want := f.t0.Add(time.Duration(40+i) * time.Minute); !x.Time.Equal(want) || x.RequestsPerS != 1 || x.ReplicationLagS != nil {
			t.Fatalf("sample %d: %+v, want at %v, 1 request/s", i, x, want)
		}
	}
	g := newFixture(t, false) // a new registry: counters back to 0
	s.g = g.reg
	g.http.WithLabelValues("a").Add(120)
	s.Sample(f.t0.Add(100 * time.Minute))
	got = s.Samples()
	if x := got[len(got)-1]; x.RequestsPerS != 0 {
		t.Errorf("after a reset: %v requests/s, want 0 (never negative)", x.RequestsPerS)
	}
}

// TestQuantileProperties: quantiles lie within the observed buckets and
// grow with q.
func TestQuantileProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 8).Draw(t, "buckets")
		var spans []span
		lower := 0.0
		for i := range n {
			upper := lower + rapid.Float64Range(0.001, 10).Draw(t, "width")
			if i == n-1 && rapid.Bool().Draw(t, "inf") {
				upper = math.Inf(1)
			}
			spans = append(spans, span{lower: lower, upper: upper, count: float64(rapid.IntRange(0, 50).Draw(t, "count"))})
			lower = upper
		}
		var total float64
		for _, s := range spans {
			total += s.count
		}
		prev := -1.0
		for _, q := range []float64{0, 0.1, 0.5, 0.9, 0.99, 1} {
			v, ok := quantile(spans, q)
			if ok != (total > 0) {
				t.Fatalf("quantile ok %v with %v observations", ok, total)
			}
			if !ok {
				return
			}
			if v < 0 || math.IsInf(v, 0) || math.IsNaN(v) || v < prev {
				t.Fatalf("quantile(%v) = %v after %v: %v", q, v, prev, spans)
			}
			prev = v
		}
	})
}
