package consumer

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline/event"
	"github.com/counterd/counterd/internal/pipeline/stream"
	"github.com/counterd/counterd/internal/testutil/pipelinetest"
)

// frontOnly is an engine whose marked batches apply nothing: what is
// left of applying is the consumer's front half (decode, rules, event
// time, dedupe within a segment, coalescing into batches).
type frontOnly struct {
	engine.MarkApplier
	contract.Backend
	rollupOfer
}

func (frontOnly) ApplyMarked(context.Context, []contract.Op, []string, time.Duration, contract.WriteOptions) error {
	return nil
}

func (frontOnly) MarkedAll(_ []string, found []bool) { clear(found) }

func (frontOnly) MayHaveMarkerCounters() bool { return false }

// BenchmarkApplyFront: the consumer's front half on the cost benchmark's
// events and rules (internal/pipeline BenchmarkApplyCost), in polls of
// 64,000 events, on an engine that applies nothing.
func BenchmarkApplyFront(b *testing.B) {
	cfg := engine.DefaultConfig()
	cfg.InMemory = true
	e, err := engine.Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	rs := loadWithRollups(b, e, pipelinetest.CostRules)
	l := engine.Local(e)
	a, err := NewApplier(frontOnly{l.(engine.MarkApplier), l, l.(rollupOfer)}, rs, event.Limits{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	msgs, _ := pipelinetest.CostEvents(b.N)
	recs := make([]stream.Record, 0, b.N)
	for i, m := range msgs {
		for j, ev := range bytes.Split(m, []byte{'\n'}) {
			recs = append(recs, stream.Record{Offset: int64(i + 1), Index: int32(j), Value: ev})
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	const poll = 64000
	for i := 0; i < len(recs); i += poll {
		if _, err := a.ApplyGroups(context.Background(), "bench", [][]stream.Record{recs[i:min(i+poll, len(recs))]}); err != nil {
			b.Fatal(err)
		}
	}
	// The process's CPU (the GC's too): steadier than the time on a
	// shared machine.
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/event")
}
