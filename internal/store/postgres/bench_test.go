package postgres

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Both benchmarks run b.N increments spread over benchCounters counters from
// GOMAXPROCS*4 goroutines against the same PostgreSQL. Compare
// increments/s and statements/s:
//
//	go test -run '^$' -bench 'Increments|Naive' -benchtime 3s ./internal/store/postgres/
const benchCounters = 100

// BenchmarkAggregatedIncrements: increments go through an Aggregator
// (local aggregation, write-behind every 100 ms in one transaction per
// batch); the clock stops after a final Flush, so every increment is
// committed.
func BenchmarkAggregatedIncrements(b *testing.B) {
	s := newStore(b, Options{MaxConns: 8})
	a := s.NewAggregator(AggregatorOptions{FlushInterval: 100 * time.Millisecond})
	ids := benchIDs()
	ctx := context.Background()
	st0 := s.Stats().Statements
	var next atomic.Uint64
	b.SetParallelism(4)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			a.Add(ids[i%benchCounters], "", -1, 1, time.Time{})
		}
	})
	if err := a.Close(ctx); err != nil {
		b.Fatal(err)
	}
	el := time.Since(start)
	b.StopTimer()
	stmts := s.Stats().Statements - st0
	report(b, el, stmts)
	var sum int64
	if err := s.Pool().QueryRow(ctx, `SELECT coalesce(sum(value), 0) FROM counters`).Scan(&sum); err != nil {
		b.Fatal(err)
	}
	if sum != int64(b.N) {
		b.Fatalf("sum = %d, want %d", sum, b.N)
	}
}

// BenchmarkNaiveUpdate: one autocommit `UPDATE counters SET value = value +
// 1` per increment (the seeds' direct write path).
func BenchmarkNaiveUpdate(b *testing.B) {
	s := newStore(b, Options{MaxConns: 8})
	ids := benchIDs()
	ctx := context.Background()
	for _, id := range ids {
		if _, err := s.Pool().Exec(ctx, `INSERT INTO counters (counter_id, counter_type) VALUES ($1, 'counter')`, id); err != nil {
			b.Fatal(err)
		}
	}
	var next, stmts atomic.Uint64
	b.SetParallelism(4)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			stmts.Add(1)
			if _, err := s.Pool().Exec(ctx, `UPDATE counters SET value = value + 1, version = version + 1, updated_at = now() WHERE counter_id = $1`,
				ids[i%benchCounters]); err != nil {
				b.Error(err)
				return
			}
		}
	})
	el := time.Since(start)
	b.StopTimer()
	report(b, el, stmts.Load())
	var sum int64
	if err := s.Pool().QueryRow(ctx, `SELECT coalesce(sum(value), 0) FROM counters`).Scan(&sum); err != nil {
		b.Fatal(err)
	}
	if sum != int64(b.N) {
		b.Fatalf("sum = %d, want %d", sum, b.N)
	}
}

func benchIDs() []string {
	ids := make([]string, benchCounters)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench:c%03d", i)
	}
	return ids
}

func report(b *testing.B, el time.Duration, stmts uint64) {
	sec := el.Seconds()
	b.ReportMetric(float64(b.N)/sec, "increments/s")
	b.ReportMetric(float64(stmts)/sec, "statements/s")
	b.ReportMetric(float64(b.N)/float64(max(stmts, 1)), "increments/statement")
}

// BenchmarkApplyConcurrentBatches: four writers (the write-behind of four
// nodes) each commit batches of 500 deltas on distinct counters, the
// region change sequence (the last statement of each batch) making their
// commits one at a time. ns/op is per batch.
//
//	go test -run '^$' -bench ApplyConcurrentBatches -benchtime 200x -count 3 ./internal/store/postgres/
func BenchmarkApplyConcurrentBatches(b *testing.B) {
	s := newStore(b, Options{MaxConns: 8})
	ctx := context.Background()
	var next atomic.Uint64
	b.SetParallelism(max(1, 4/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := next.Add(1)
			batch := Batch{ID: fmt.Sprintf("bench-%d", n)}
			for i := range 500 {
				batch.Deltas = append(batch.Deltas, Delta{CounterID: fmt.Sprintf("bench:%d:%d", n%16, i), Delta: 1})
			}
			for {
				_, err := s.Apply(ctx, batch)
				if err == nil {
					break
				}
				if !strings.Contains(err.Error(), "40P01") {
					b.Error(err)
					return
				}
			}
		}
	})
}
