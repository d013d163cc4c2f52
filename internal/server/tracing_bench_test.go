package server

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/tracing"
)

// BenchmarkHTTPIncrementTracing runs POST /counters/{id}/increment
// through the HTTP handler, the engine op and an in-memory engine: with
// no tracing code in the chain (untraced), with tracing off as Run
// builds it (off: no --otlp-endpoint), and with tracing on exporting to
// an in-process collector, sampling no new traces (on-unsampled) or all
// (on-sampled). untraced and off are the same-run comparison of the cost
// of tracing when it is off.
func BenchmarkHTTPIncrementTracing(b *testing.B) {
	cfg := engine.DefaultConfig()
	cfg.InMemory = true
	cfg.NodeID = "bench"
	cfg.Logger = slog.New(slog.DiscardHandler)
	eng, err := engine.Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	_, endpoint := startReceiver(b)
	opts := httpapi.Options{Logger: slog.New(slog.DiscardHandler)}
	for _, mode := range []string{"untraced", "off", "on-unsampled", "on-sampled"} {
		b.Run(mode, func(b *testing.B) {
			var h http.Handler
			switch mode {
			case "untraced":
				h = httpapi.New(engine.Local(eng), opts)
			case "off":
				var tp *tracing.Tracer
				h = tracing.HTTPHandler(tp, httpapi.New(traceBackend(tp, engine.Local(eng)), opts))
			default:
				ratio := 0.0
				if mode == "on-sampled" {
					ratio = 1
				}
				tp, err := tracing.Open(tracing.Config{Endpoint: endpoint, SampleRatio: ratio, Service: "counterd"})
				if err != nil {
					b.Fatal(err)
				}
				defer tp.Close(b.Context())
				h = tracing.HTTPHandler(tp, httpapi.New(traceBackend(tp, engine.Local(eng)), opts))
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				r := httptest.NewRequest("POST", fmt.Sprintf("/counters/bench:%d/increment", i%100), strings.NewReader(`{"delta":1}`))
				r.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("%d %s", w.Code, w.Body)
				}
			}
		})
	}
}
