package pipeline

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline/consumer"
	"github.com/counterd/counterd/internal/pipeline/event"
	"github.com/counterd/counterd/internal/pipeline/stream"
	"github.com/counterd/counterd/internal/testutil/pipelinetest"
)

// BenchmarkApplyCost is BenchmarkConsumeCost without the stream: the same
// events, rules and engine, applied in polls of 64 messages of 1000
// events as the JetStream consumer takes them, so that a profile shows
// the applier and the engine alone; reports CPU µs per event (the whole
// process: the flusher, Pebble and the GC too).
func BenchmarkApplyCost(b *testing.B) {
	ctx := context.Background()
	msgs, impressions := pipelinetest.CostEvents(b.N)
	var recs []stream.Record
	for i, m := range msgs {
		for j, ev := range bytes.Split(m, []byte{'\n'}) {
			recs = append(recs, stream.Record{Offset: int64(i + 1), Index: int32(j), Value: ev})
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ecfg := engine.DefaultConfig()
	ecfg.Dir = b.TempDir()
	ecfg.Logger = log
	e, err := engine.Open(ecfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	path := filepath.Join(b.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(pipelinetest.CostRules), 0o644); err != nil {
		b.Fatal(err)
	}
	p := &Pipeline{cfg: Config{Rules: path}, be: engine.Local(e), log: log}
	rs, err := p.loadRules(ctx)
	if err != nil {
		b.Fatal(err)
	}
	a, err := consumer.NewApplier(p.be, rs, event.Limits{}, consumer.NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	flushes0 := e.Stats().Flushes
	cpu0, began := processCPU(), time.Now()
	const poll = 64000
	for i := 0; i < len(recs); i += poll {
		if _, err := a.ApplyGroups(ctx, "bench", [][]stream.Record{recs[i:min(i+poll, len(recs))]}); err != nil {
			b.Fatal(err)
		}
	}
	el, cpu := time.Since(began), processCPU()-cpu0
	flushes := e.Stats().Flushes - flushes0
	b.StopTimer()
	got, err := engine.Local(e).Aggregate(ctx, "views:")
	if err != nil || got.Value != int64(impressions) {
		b.Fatalf("views: %d (%v), want %d", got.Value, err, impressions)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(b.N)/el.Seconds(), "events/s")
	b.ReportMetric(float64(cpu)/float64(time.Microsecond)/float64(b.N), "cpu-us/event")
	b.ReportMetric(float64(flushes), "flushes")
}
