package engine

import (
	"fmt"
	"github.com/counterd/counterd/internal/contract"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkHotKeyAdd is one hot counter under RunParallel; compare with
// BenchmarkRawAtomicAdd from the same run (BENCHMARKS.md quotes the ratio).
func BenchmarkHotKeyAdd(b *testing.B) {
	e := openMem(b)
	benchHotAdds(b, e)
}

// BenchmarkHotKeyAddHot is BenchmarkHotKeyAdd with the counter made hot
// first and no flush to cool it: the hot path alone, for a path length
// measured without contention (callgrind, -test.cpu 1), where
// BenchmarkHotKeyAdd would never turn the counter hot.
func BenchmarkHotKeyAddHot(b *testing.B) {
	e := openMem(b, func(c *Config) { c.FlushInterval = 1 << 62 })
	if _, err := e.Add(bg, "page_views:article_123", 1, contract.WriteOptions{}); err != nil {
		b.Fatal(err)
	}
	if !e.heatForTest("page_views:article_123") {
		b.Fatal("not hot")
	}
	benchHotAdds(b, e)
}

// BenchmarkHotKeyAddGet is BenchmarkHotKeyAdd with every 16th op a Get of
// the counter: reads of a hot counter leave it hot (no fold and re-heat,
// no allocation).
func BenchmarkHotKeyAddGet(b *testing.B) {
	e := openMem(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			if i%16 == 15 {
				if _, err := e.Get("page_views:article_123"); err != nil {
					b.Fatal(err)
				}
				continue
			}
			if _, err := e.Add(bg, "page_views:article_123", 1, contract.WriteOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchHotAdds runs the benchmark's adds of 1 to one counter from
// GOMAXPROCS goroutines, allocations reported.
func benchHotAdds(b *testing.B, e *Engine) {
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := e.Add(bg, "page_views:article_123", 1, contract.WriteOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRawAtomicAdd is the floor: one atomic.Int64 shared by all
// goroutines.
func BenchmarkRawAtomicAdd(b *testing.B) {
	var v atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			v.Add(1)
		}
	})
}

// BenchmarkKeyedAtomicAdd is a second floor: find the counter by id in a
// sync.Map, then one atomic add — the least any keyed counter store does,
// with no validation, overflow check, version or durability.
func BenchmarkKeyedAtomicAdd(b *testing.B) {
	var m sync.Map
	m.Store("page_views:article_123", new(atomic.Int64))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			v, _ := m.Load("page_views:article_123")
			v.(*atomic.Int64).Add(1)
		}
	})
}

// BenchmarkManyKeysAdd spreads adds over 100k counters.
func BenchmarkManyKeysAdd(b *testing.B) {
	e := openMem(b)
	ids := make([]string, 100000)
	for i := range ids {
		ids[i] = fmt.Sprintf("page_views:article_%08d", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i = (i + 7919) % len(ids)
			e.Add(bg, ids[i], 1, contract.WriteOptions{})
		}
	})
}

// BenchmarkIdleCounterBytes reports heap bytes per idle counter with 1M
// counters of 24-byte ids (b.N is ignored: it measures one fill).
func BenchmarkIdleCounterBytes(b *testing.B) {
	heapPerCounter(b, func(e *Engine, id string) error {
		_, err := e.Add(bg, id, 1, contract.WriteOptions{})
		return err
	})
}

// heapPerCounter fills an in-memory engine that never flushes with 1M
// counters of 24-byte ids through fill and reports the heap bytes per
// counter (b.N is ignored: it measures one fill).
func heapPerCounter(b *testing.B, fill func(e *Engine, id string) error) {
	const n = 1_000_000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("page_views:art_%09d", i) // 24 bytes
	}
	e := openMem(b, func(c *Config) { c.FlushInterval = 1 << 62 })
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, id := range ids {
		if err := fill(e, id); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	memtable := heapOfStore(e)
	per := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)-memtable) / n
	b.ReportMetric(per, "B/counter")
	b.ReportMetric(0, "ns/op")
	runtime.KeepAlive(ids)
}

// heapOfStore is the part of the heap that belongs to Pebble rather than to
// the counters (nothing is flushed during BenchmarkIdleCounterBytes, so it
// is only Pebble's fixed overhead).
func heapOfStore(e *Engine) int64 { return 0 }
