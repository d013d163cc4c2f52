package consumer

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline/event"
	"github.com/counterd/counterd/internal/pipeline/stream"
	"github.com/counterd/counterd/internal/testutil/pipelinetest"
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

// BenchmarkApplyDisk: the consumer's part as the end-to-end benchmark
// drives it (cmd/counterd BenchmarkPipeline*): the e2e rules (the viewers
// rule with a rollup), an engine on disk with its flush loop, events of
// 1000 posts and 50 users a post, polls of 4000 events; b.N events.
func BenchmarkApplyDisk(b *testing.B) {
	cfg := engine.DefaultConfig()
	cfg.Dir = b.TempDir()
	e, err := engine.Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	rs := loadWithRollups(b, e, benchRules)
	a, err := NewApplier(engine.Local(e), rs, event.Limits{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	recs := make([]stream.Record, b.N)
	ts := time.Now().UnixMilli()
	for i := range recs {
		recs[i] = stream.Record{Offset: int64(i / 1000), Index: int32(i % 1000), Value: fmt.Appendf(nil,
			`{"id":"b%d","type":"impression","ts":%d,"post":"p%d","user":"u%d","country":"c%d"}`, i, ts, i%1000, i%50000, i%5)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < len(recs); i += applyDiskPoll {
		if _, err := a.Apply(context.Background(), "bench", recs[i:min(i+applyDiskPoll, len(recs))]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	// CPU of the whole process (the engine's flusher, Pebble's compactions
	// and the GC too) per event: steadier than the time on a shared machine.
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-us/event")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

const benchRules = pipelinetest.ImpressionRules

var applyDiskPoll = 16000
