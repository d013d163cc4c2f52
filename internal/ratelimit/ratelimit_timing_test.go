package ratelimit

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

var benchLimits = []Limit{
	{Algorithm: FixedWindow, Limit: 1 << 30, Period: time.Minute},
	{Algorithm: SlidingWindow, Limit: 1 << 30, Period: time.Minute},
	{Algorithm: SlidingLog, Limit: 1000, Period: time.Second},
	{Algorithm: TokenBucket, Limit: 1e6, Period: time.Second, Burst: 1 << 30},
	{Algorithm: LeakyBucket, Limit: 1e6, Period: time.Second, Burst: 1 << 30},
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%08d", i)
	}
	return keys
}

// BenchmarkCheck is one Check per op from all Ps: "hot" hits one key,
// "spread" 64Ki keys. Default clock (the coarse one).
func BenchmarkCheck(b *testing.B) {
	keys := benchKeys(1 << 16)
	for _, lim := range benchLimits {
		for _, spread := range []bool{false, true} {
			name := lim.Algorithm.String() + "/hot"
			if spread {
				name = lim.Algorithm.String() + "/spread"
			}
			b.Run(name, func(b *testing.B) {
				l := newLimiter(b, nil)
				var seq atomic.Uint64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := seq.Add(1 << 20)
					for pb.Next() {
						key := keys[0]
						if spread {
							key = keys[i&(1<<16-1)]
							i++
						}
						if _, err := l.Check(key, lim, 1); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// BenchmarkCheckMulti checks a per-second and a per-day limit atomically.
func BenchmarkCheckMulti(b *testing.B) {
	keys := benchKeys(1 << 16)
	l := newLimiter(b, nil)
	perSec := Limit{Name: "s", Algorithm: TokenBucket, Limit: 1e6, Period: time.Second, Burst: 1 << 30}
	perDay := Limit{Name: "d", Algorithm: SlidingWindow, Limit: 1 << 40, Period: 24 * time.Hour}
	var seq atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := seq.Add(1 << 20)
		hits := []Hit{{Limit: perSec, Cost: 1}, {Limit: perDay, Cost: 1}}
		out := make([]Status, 2)
		for pb.Next() {
			k := keys[i&(1<<16-1)]
			i++
			hits[0].Key, hits[1].Key = k, k
			if _, err := l.CheckMulti(hits, out); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkCheckArgs is the RESP command's path (RL.CHECK key limit period_ms).
func BenchmarkCheckArgs(b *testing.B) {
	l := newLimiter(b, nil)
	a := [][]byte{[]byte("user:00000001"), []byte("1000000000"), []byte("60000")}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.CheckArgs(a); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBytesPerKey reports the heap held per active key: 1M keys,
// each with state under one sliding_window limit (the per-key cost
// includes the table, the slab and its slack). "hashed" stores no keys;
// "keep_keys" is Config.KeepKeys (cluster mode: keys kept for handoff).
func BenchmarkBytesPerKey(b *testing.B) {
	const n = 1 << 20
	keys := benchKeys(n)
	lim := Limit{Algorithm: SlidingWindow, Limit: 100, Period: time.Hour}
	for _, keep := range []bool{false, true} {
		name := "hashed"
		if keep {
			name = "keep_keys"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				l, err := New(Config{EvictInterval: -1, KeepKeys: keep})
				if err != nil {
					b.Fatal(err)
				}
				for _, k := range keys {
					if _, err := l.Check(k, lim, 1); err != nil {
						b.Fatal(err)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				if l.Len() != n {
					b.Fatalf("%d entries", l.Len())
				}
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/key")
				runtime.KeepAlive(l)
				l.Close()
			}
		})
	}
}

// BenchmarkReplicationRound is one pass of the cluster's replication over
// 1M kept keys: "idle" when none changed since the last pass, "changed"
// when all did (each op recharges every key first, untimed). "evict", the
// janitor's pass over the same entries (nothing to free), is the baseline.
func BenchmarkReplicationRound(b *testing.B) {
	const n = 1 << 20
	keys := benchKeys(n)
	lim := Limit{Algorithm: SlidingWindow, Limit: 1 << 30, Period: time.Hour}
	l, err := New(Config{EvictInterval: -1, KeepKeys: true})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	charge := func() {
		for _, k := range keys {
			if _, err := l.Check(k, lim, 1); err != nil {
				b.Fatal(err)
			}
		}
	}
	charge()
	l.ExportChanged(nil)
	b.Run("evict", func(b *testing.B) {
		for b.Loop() {
			if l.Evict() != 0 {
				b.Fatal("freed live entries")
			}
		}
	})
	b.Run("idle", func(b *testing.B) {
		for b.Loop() {
			if len(l.ExportChanged(nil)) != 0 {
				b.Fatal("exported unchanged entries")
			}
		}
	})
	b.Run("changed", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			charge()
			b.StartTimer()
			if got := len(l.ExportChanged(nil)); got != n {
				b.Fatalf("exported %d of %d changed entries", got, n)
			}
		}
	})
}
