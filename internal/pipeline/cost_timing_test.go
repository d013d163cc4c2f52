package pipeline

// BenchmarkConsumeCost measures the CPU the consumer of one embedded node
// spends per event (scripts/bench-pipeline.sh): the stream is a private
// nats-server (natstest), so the process's CPU (getrusage) is the
// consumer's and its engine's (Pebble's flushes and compactions and the
// GC too), not the stream server's. The events are appended before the
// clock starts; then, in the same run, a bare consumer (poll and ack,
// nothing applied) reads them all, and the pipeline with the four rules
// of costRules does.

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline/consumer"
	"github.com/counterd/counterd/internal/pipeline/event"
	"github.com/counterd/counterd/internal/pipeline/stream"
	"github.com/counterd/counterd/internal/testutil/natstest"
	"github.com/counterd/counterd/internal/testutil/pipelinetest"
)

func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// countingConsumer counts the records its Commit commits.
type countingConsumer struct {
	stream.Consumer
	committed atomic.Int64
	done      chan struct{}
	want      int64
}

// CommitsOldestPolls: the JetStream consumer it wraps is a
// stream.PollCommitter, as consumer.Run is given it outside the benchmark.
func (c *countingConsumer) CommitsOldestPolls() {}

func (c *countingConsumer) Commit(ctx context.Context, groups [][]stream.Record) error {
	if err := c.Consumer.Commit(ctx, groups); err != nil {
		return err
	}
	n := int64(0)
	for _, g := range groups {
		n += int64(len(g))
	}
	if c.committed.Add(n) >= c.want && c.want > 0 {
		select {
		case <-c.done:
		default:
			close(c.done)
		}
	}
	return nil
}

// BenchmarkConsumeCost: b.N events; reports events/s and CPU µs per event
// of the bare consumer and of the pipeline, and the pipeline's CPU as a
// multiple of the bare consumer's.
func BenchmarkConsumeCost(b *testing.B) {
	url := natstest.New(b)
	name := natstest.Name("C")
	scfg := stream.JetStreamConfig{URL: url, Stream: name, Subject: name + ".events", DeadSubject: name + ".dead", Consumer: name}
	ctx := context.Background()
	n := b.N
	msgs, impressions := pipelinetest.CostEvents(n)
	if err := pipelinetest.Publish(ctx, scfg, msgs); err != nil {
		b.Fatal(err)
	}
	msgs = nil

	// consume runs the loop over a consumer until it committed n records.
	var flushes uint64 // the pipeline's engine flushes while it consumed
	consume := func(durable string, apply bool) (time.Duration, time.Duration) {
		cfg := scfg
		cfg.Consumer = durable
		js, err := stream.OpenJetStream(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer js.Close()
		if err := js.Consume(ctx); err != nil {
			b.Fatal(err)
		}
		c := &countingConsumer{Consumer: js, done: make(chan struct{}), want: int64(n)}
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		var run func()
		if apply {
			ecfg := engine.DefaultConfig()
			ecfg.Dir = b.TempDir()
			ecfg.Logger = log
			e, err := engine.Open(ecfg)
			if err != nil {
				b.Fatal(err)
			}
			path := filepath.Join(b.TempDir(), "rules.yaml")
			if err := os.WriteFile(path, []byte(pipelinetest.CostRules), 0o644); err != nil {
				b.Fatal(err)
			}
			p := &Pipeline{cfg: Config{Rules: path}, be: engine.Local(e), log: log}
			rs, err := p.loadRules(ctx) // attaches the rollups
			if err != nil {
				b.Fatal(err)
			}
			a, err := consumer.NewApplier(p.be, rs, event.Limits{}, consumer.NewMetrics(prometheus.NewRegistry()))
			if err != nil {
				b.Fatal(err)
			}
			flushes0 := e.Stats().Flushes
			run = func() {
				consumer.Run(rctx, a, c, log)
				flushes = e.Stats().Flushes - flushes0
			}
			defer func() {
				// Every impression counted once.
				got, err := engine.Local(e).Aggregate(ctx, "views:")
				e.Close()
				if err != nil || got.Value != int64(impressions) {
					b.Fatalf("views: %d (%v), want %d", got.Value, err, impressions)
				}
			}()
		} else {
			run = func() {
				for rctx.Err() == nil {
					groups, err := c.Poll(rctx)
					if err == nil {
						err = c.Commit(rctx, groups)
					}
					if err != nil && rctx.Err() == nil {
						b.Error(err)
						return
					}
				}
			}
		}
		cpu0, began := processCPU(), time.Now()
		done := make(chan struct{})
		go func() { defer close(done); run() }()
		select {
		case <-c.done:
		case <-time.After(10 * time.Minute):
			b.Fatalf("%d of %d events consumed after 10 minutes", c.committed.Load(), n)
		}
		el, cpu := time.Since(began), processCPU()-cpu0
		cancel()
		<-done
		return el, cpu
	}
	b.ResetTimer()
	bareEl, bareCPU := consume(name+"-bare", false)
	el, cpu := consume(name, true)
	b.StopTimer()
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(n) }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(n)/el.Seconds(), "events/s")
	b.ReportMetric(us(cpu), "cpu-us/event")
	b.ReportMetric(float64(n)/bareEl.Seconds(), "bare-events/s")
	b.ReportMetric(us(bareCPU), "bare-cpu-us/event")
	b.ReportMetric(float64(cpu)/float64(bareCPU), "cpu-x-bare")
	b.ReportMetric(float64(flushes), "flushes")
}
