package engine

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/rollup"
)

// latencies records one duration per benchmark iteration and reports the
// median and 99th percentile in milliseconds.
type latencies []time.Duration

func (l *latencies) time(fn func()) {
	t := time.Now()
	fn()
	*l = append(*l, time.Since(t))
}

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	s := slices.Clone(l)
	slices.Sort(s)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	b.ReportMetric(ms(s[len(s)/2]), "p50-ms")
	b.ReportMetric(ms(s[min(len(s)-1, len(s)*99/100)]), "p99-ms")
}

// openBench opens an engine on a temporary directory with a fake clock.
func openBench(b *testing.B, clk *fakeClock, rollups map[string]rollup.Spec) *Engine {
	cfg := DefaultConfig()
	cfg.Dir = b.TempDir()
	cfg.Clock = clk.Now
	cfg.FlushInterval = time.Hour
	cfg.Rollups = rollups
	e, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	return e
}

// BenchmarkSeries30DaysMinutes: one counter hit every minute for 30 days
// (43,200 minute buckets, 720 stored chunks, flushed and compacted into
// sstables), then the whole range read back at minute granularity and
// summed. Reports p50/p99 per query (goal: p99 <= 10 ms).
func BenchmarkSeries30DaysMinutes(b *testing.B) {
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &fakeClock{t: start}
	e := openBench(b, clk, map[string]rollup.Spec{"api": {Minute: 31 * day, Hour: 90 * day, Day: 400 * day}})
	const minutes = 30 * 24 * 60
	for m := range minutes {
		if _, err := e.Add(bg, "api:requests", int64(m%97+1), contract.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
		clk.Advance(time.Minute)
		if m%(6*60) == 0 {
			e.Flush(bg)
		}
	}
	e.Flush(bg)
	if err := e.db.Flush(); err != nil { // memtable -> sstables
		b.Fatal(err)
	}
	from, to := start, clk.Now()
	var l latencies
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		l.time(func() {
			s, err := e.Series("api:requests", rollup.Minute, from, to)
			if err != nil || len(s.Values) != minutes {
				b.Fatal(err)
			}
		})
	}
	l.report(b)
}

// BenchmarkUniques365Days: an hll counter with 400 days of visitors (5,000
// a day, half of them new each day: dense day sketches at p = 14), the day
// closes flushed as they happen, then last-365-days queries. Reports
// p50/p99 per query (goal: p99 <= 5 ms) and the sketches merged.
func BenchmarkUniques365Days(b *testing.B) {
	start := time.Date(2023, 1, 1, 12, 0, 0, 0, time.UTC)
	clk := &fakeClock{t: start}
	spec := rollup.DefaultSpec()
	spec.UniqueHours = 0
	e := openBench(b, clk, map[string]rollup.Spec{"visitors": spec})
	items := make([][]byte, 1000)
	for d := range 400 {
		for k := range 5 {
			for i := range items {
				u := d*2500 + k*1000 + i // overlaps the day before by half
				items[i] = fmt.Appendf(items[i][:0], "user-%d", u)
			}
			if _, err := e.Apply(bg, contract.Op{Type: contract.OpPFAdd, ID: "visitors:site", Items: items}, contract.WriteOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		clk.Advance(day)
		e.Flush(bg)
	}
	e.Add(bg, "x", 1, contract.WriteOptions{})
	e.Flush(bg)
	if err := e.db.Flush(); err != nil {
		b.Fatal(err)
	}
	var l latencies
	var est *rollup.Estimate
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		l.time(func() {
			var err error
			if est, err = e.Uniques("visitors:site", rollup.Day, 365); err != nil {
				b.Fatal(err)
			}
		})
	}
	l.report(b)
	b.ReportMetric(float64(est.Merged), "sketches/op")
	want := 364*2500.0 + 2500 // days 36..399 (today, day 400, is empty)
	b.ReportMetric(100*(float64(est.Value)-want)/want, "error-%")
}

// BenchmarkRollupAdd is BenchmarkHotKeyAdd on a counter whose namespace
// keeps minute, hour, day and month buckets.
func BenchmarkRollupAdd(b *testing.B) {
	e := openMem(b, func(c *Config) { c.Rollups = map[string]rollup.Spec{"page_views": rollup.DefaultSpec()} })
	benchHotAdds(b, e)
}

// BenchmarkRollupPFAdd is one-item PFADD on an hll with day and hour
// sketches, against BenchmarkPlainPFAdd without.
func BenchmarkRollupPFAdd(b *testing.B) {
	e := openMem(b, func(c *Config) { c.Rollups = map[string]rollup.Spec{"v": rollup.DefaultSpec()} })
	benchPFAdd(b, e, "v:a")
}

func BenchmarkPlainPFAdd(b *testing.B) {
	benchPFAdd(b, openMem(b), "v:a")
}

func benchPFAdd(b *testing.B, e *Engine, id string) {
	items := [][]byte{nil}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		items[0] = fmt.Appendf(items[0][:0], "u%d", i)
		if _, err := e.Apply(bg, contract.Op{Type: contract.OpPFAdd, ID: id, Items: items}, contract.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWindowCounterBytes reports the heap per window counter of 60 x
// 1 minute buckets after an hour of hits (entry, state and ring), and its
// stored size; the seed's design takes 1.4 KB (60 buckets of 24 bytes).
func BenchmarkWindowCounterBytes(b *testing.B) {
	const n = 50000 // enough counters that the shards' fixed chunks amortise
	clk := &fakeClock{t: time.Date(2024, 1, 8, 10, 0, 0, 0, time.UTC)}
	// No flush during the measure: the in-memory Pebble would count too.
	e := openMem(b, func(c *Config) { c.Clock = clk.Now; c.FlushInterval = 1 << 62 })
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("api_requests:user_%07d", i)
	}
	spec := counter.WindowSpec{Granularity: time.Minute, Span: time.Hour}
	e.Flush(bg)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for m := range 60 {
		for _, id := range ids {
			e.Apply(bg, contract.Op{Type: contract.OpAdd, ID: id, Kind: contract.KindWindow, Window: spec, Delta: int64(m%7 + 1)}, contract.WriteOptions{})
		}
		clk.Advance(time.Minute)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "heap-B/counter")
	r, _, _ := e.acquire(ids[0], false)
	enc, _ := encodeEntry(nil, r.e)
	r.e.unlock()
	b.ReportMetric(float64(len(enc)+1+len(ids[0])), "stored-B/counter")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRollupBytesPerHour reports what an hour of minute buckets costs
// a counter with rollups: the stored minute chunk (key and value), and the
// heap the rollup state grows by over the hour (the open hour of minutes;
// the counter and its empty state existed before).
func BenchmarkRollupBytesPerHour(b *testing.B) {
	const n = 5000
	clk := &fakeClock{t: time.Date(2024, 1, 8, 10, 0, 0, 0, time.UTC)}
	e := openMem(b, func(c *Config) {
		c.Clock = clk.Now
		c.FlushInterval = 1 << 62
		c.Rollups = map[string]rollup.Spec{"api": {Minute: 48 * time.Hour}}
	})
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("api:user_%07d", i)
		e.Add(bg, ids[i], 1, contract.WriteOptions{}) // created before the measure
	}
	clk.Advance(-time.Minute)
	e.Flush(bg)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for m := range 60 {
		clk.Advance(time.Minute)
		for _, id := range ids {
			e.Add(bg, id, int64(m%97+1), contract.WriteOptions{})
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "heap-B/counter-hour")
	clk.Advance(time.Hour) // close the hour: the chunk is stored
	e.Add(bg, ids[0], 1, contract.WriteOptions{})
	e.Flush(bg)
	var stored int
	it, _ := e.db.NewIter(nil)
	for it.First(); it.Valid(); it.Next() {
		if it.Key()[0] == prefixRollupChunk {
			stored = len(it.Key()) + len(it.Value())
			break
		}
	}
	it.Close()
	b.ReportMetric(float64(stored), "stored-B/counter-hour")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkDayCloseFlush is the flusher's cost when the day of an hll
// counter with dense day sketches (p = 14) closes: the day's sketch and the
// block unions it completes, read, merged, encoded and written. One
// iteration is one day (the PFADDs of the day are outside the timer).
// same-day is the same flush (head and entry) without a day closing.
func BenchmarkDayCloseFlush(b *testing.B) {
	b.Run("close", func(b *testing.B) { benchDayFlush(b, day) })
	b.Run("same-day", func(b *testing.B) { benchDayFlush(b, 0) })
}

func benchDayFlush(b *testing.B, step time.Duration) {
	clk := &fakeClock{t: time.Date(2023, 1, 1, 12, 0, 0, 0, time.UTC)}
	spec := rollup.DefaultSpec()
	spec.UniqueHours = 0
	e := openBench(b, clk, map[string]rollup.Spec{"v": spec})
	items := make([][]byte, 5000)
	d := 0
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for i := range items {
			items[i] = fmt.Appendf(items[i][:0], "user-%d", d*2500+i)
		}
		if _, err := e.Apply(bg, contract.Op{Type: contract.OpPFAdd, ID: "v:site", Items: items}, contract.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
		e.Flush(bg)
		clk.Advance(step)
		// A new item: the entry is dirty, and with step = day the day closes.
		e.Apply(bg, contract.Op{Type: contract.OpPFAdd, ID: "v:site", Items: [][]byte{fmt.Appendf(nil, "new-%d", d)}}, contract.WriteOptions{})
		b.StartTimer()
		e.Flush(bg)
		d++
	}
}
