package counter

import (
	"math"
	"runtime"
	"testing"
	"time"
)

// BenchmarkHLLBytes reports what a p = 14 sketch costs against Redis's 12 KB
// and 0.81%: encoded and heap bytes dense (n = 1e6) and sparse (n = 100),
// and the RMS relative error measured over 8 streams of 1e6 items.
func BenchmarkHLLBytes(b *testing.B) {
	dense := sketch(b, 14, 1, 0, 1e6)
	b.ReportMetric(float64(len(mustMarshal(b, dense))), "dense-enc-B")
	b.ReportMetric(hllHeapBytes(14, 5000), "dense-heap-B")
	b.ReportMetric(float64(len(mustMarshal(b, sketch(b, 14, 1, 0, 100)))), "n100-enc-B")
	b.ReportMetric(hllHeapBytes(14, 100), "n100-heap-B")
	var sumSq float64
	for s := range uint64(8) {
		rel := (float64(sketch(b, 14, 500+s, 0, 1e6).Count()) - 1e6) / 1e6
		sumSq += rel * rel
	}
	b.ReportMetric(100*math.Sqrt(sumSq/8), "rms-error-%")
	b.ReportMetric(100*dense.StdError(), "std-error-%")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkWindowBytesPerHour reports the heap of a Window of 60 x 1 minute
// buckets after an hour of hits and its encoded size; the seed's design
// takes 1.4 KB per counter per hour (60 buckets of 24 bytes).
func BenchmarkWindowBytesPerHour(b *testing.B) {
	const n = 10000
	start := time.Date(2024, 1, 8, 10, 0, 0, 0, time.UTC)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ws := make([]*Window, n)
	for i := range ws {
		w, _ := NewWindow(WindowSpec{Granularity: time.Minute, Span: time.Hour})
		for m := range 60 {
			w.Add(start.Add(time.Duration(m)*time.Minute), int64(m%97+1))
		}
		ws[i] = w
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(ws)
	enc, _ := ws[0].MarshalBinary()
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/window-hour")
	b.ReportMetric(float64(len(enc)), "enc-B/window-hour")
	b.ReportMetric(0, "ns/op")
}
