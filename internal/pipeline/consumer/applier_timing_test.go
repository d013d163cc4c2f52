package consumer

import (
	"context"
	"fmt"
	"testing"

	"github.com/counterd/counterd/internal/pipeline/stream"
)

// BenchmarkApply: the consumer's part of the pipeline alone (decode,
// rules, dedupe markers, one durable engine batch per 1000 events) on an
// in-memory engine; b.N events.
func BenchmarkApply(b *testing.B) {
	a, _ := newApplier(b, 1000)
	recs := make([]stream.Record, b.N)
	for i := range recs {
		recs[i] = stream.Record{Offset: int64(i), Value: fmt.Appendf(nil,
			`{"id":"e%d","type":"view","ts":1,"post":"p%d","user":"u%d","country":"c%d"}`, i, i%1000, i%50000, i%5)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < len(recs); i += 1000 {
		if _, err := a.Apply(context.Background(), "bench", recs[i:min(i+1000, len(recs))]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
