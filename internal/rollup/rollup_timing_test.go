package rollup

import (
	"runtime"
	"slices"
	"testing"
	"time"
)

// BenchmarkStateAdd is one increment into the open minute, hour, day and
// month buckets.
func BenchmarkStateAdd(b *testing.B) {
	s := NewState(longSpec(), false)
	now := ns(t0)
	b.ReportAllocs()
	for b.Loop() {
		s.Add(now, 1)
	}
}

// BenchmarkSeries30DaysMinutesMem sums 43,200 minute buckets read from an
// in-memory store (decoding included, no Pebble): the rollup package's
// share of the engine's BenchmarkSeries30DaysMinutes.
func BenchmarkSeries30DaysMinutesMem(b *testing.B) {
	s, st := NewState(longSpec(), false), newMemStore()
	now := ns(t0)
	for m := range 30 * 24 * 60 {
		s.Add(now, int64(m%97+1))
		now += nsMinute
		if m%600 == 0 {
			st.flush(b, s, uint64(m+1))
		}
	}
	st.flush(b, s, 1<<40)
	from := ns(t0)
	var ds []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t := time.Now()
		got, err := s.CountsView().Series(st, Minute, from, now, now)
		if err != nil || len(got.Values) != 43200 {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t))
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)*99/100])/1e6, "p99-ms")
}

// BenchmarkCountStateBytes reports the heap of a count State at its
// largest: a full hour of minutes, day of hours, month of days and year of
// months, everything closed already flushed. And the stored size of a chunk
// of one hour of minutes.
func BenchmarkCountStateBytes(b *testing.B) {
	const n = 2000
	spec := DefaultSpec()
	var times []int64 // every month, every day of December, every hour of Dec 31, every minute of its last hour
	for m := 1; m <= 12; m++ {
		times = append(times, ns(time.Date(2024, time.Month(m), 1, 0, 0, 0, 0, time.UTC)))
	}
	for d := 2; d <= 31; d++ {
		times = append(times, ns(time.Date(2024, 12, d, 0, 0, 0, 0, time.UTC)))
	}
	for h := 1; h <= 23; h++ {
		times = append(times, ns(time.Date(2024, 12, 31, h, 0, 0, 0, time.UTC)))
	}
	for m := 1; m <= 59; m++ {
		times = append(times, ns(time.Date(2024, 12, 31, 23, m, 0, 0, time.UTC)))
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	states := make([]*State, n)
	for i := range states {
		s := NewState(&spec, false)
		for k, t := range times {
			s.Add(t, 1)
			if _, err := s.TakeFlush(uint64(k + 1)); err != nil {
				b.Fatal(err)
			}
			s.Committed(uint64(k + 1))
		}
		states[i] = s
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(states)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/state")
	vals := make([]int64, 60)
	for i := range vals {
		vals[i] = int64(i%97 + 1)
	}
	b.ReportMetric(float64(len(MarshalChunk(vals))), "chunk-B/hour")
	b.ReportMetric(0, "ns/op")
}
