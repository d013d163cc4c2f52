package engine

import (
	"math/rand/v2"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// BenchmarkWindowFlush: the flushes of a consumer with a per-user window
// rule (BenchmarkConsumeCost's): 20,000 windows of an hour by minute with
// hits over the last 50 minutes, each op 26,000 hits (1.3 a window, at
// random times of those 50 minutes), then the flush that writes them
// (an in-memory engine: no I/O waits); ns/op is per flush (the adds not
// counted), cpu-us/hit the process's CPU during the flushes per hit.
func BenchmarkWindowFlush(b *testing.B) {
	cfg := DefaultConfig()
	cfg.InMemory = true           // no I/O waits: the flush's CPU
	cfg.FlushInterval = time.Hour // only the benchmark flushes
	e := mustOpen(b, cfg)
	defer e.Close()
	spec := counter.WindowSpec{Granularity: time.Minute, Span: time.Hour}
	const users, hits = 20_000, 26_000
	rng := rand.New(rand.NewPCG(1, 2))
	ids := make([]string, users)
	for u := range ids {
		ids[u] = "recent:u" + strconv.Itoa(u)
	}
	now := time.Now()
	ops := make([]contract.Op, 0, 1000)
	add := func(n int) {
		for k := 0; k < n; k++ {
			at := now.Add(-time.Duration(rng.IntN(3000)) * time.Second)
			ops = append(ops, contract.Op{Type: contract.OpAdd, ID: ids[rng.IntN(users)], Kind: contract.KindWindow, Window: spec, Delta: 1, At: at.UnixNano()})
			if len(ops) == cap(ops) || k == n-1 {
				if err := e.ApplyAtomic(bg, ops, contract.WriteOptions{Durability: contract.Async}); err != nil {
					b.Fatal(err)
				}
				ops = ops[:0]
			}
		}
	}
	add(40 * users) // ~35 of the 50 minutes' buckets each
	if err := e.flushOnce(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var cpu time.Duration
	for range b.N {
		b.StopTimer()
		add(hits)
		b.StartTimer()
		cpu0 := processCPU()
		if err := e.flushOnce(); err != nil {
			b.Fatal(err)
		}
		cpu += processCPU() - cpu0
	}
	b.ReportMetric(float64(cpu)/float64(time.Microsecond)/float64(b.N)/hits, "cpu-us/hit")
}

// processCPU is the process's CPU time (user and system) so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
