package counter

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"
)

func BenchmarkShardedAdd(b *testing.B) {
	s := NewSharded(16)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := s.Add(i&15, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPNAdd(b *testing.B) {
	for _, replicas := range []int{1, 16} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			c := NewPN()
			names := make([]string, replicas)
			for i := range names {
				names[i] = fmt.Sprintf("node-%02d", i)
				_ = c.Add(names[i], 1)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if err := c.Add(names[i%replicas], int64(i&1)*2-1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkPNMerge(b *testing.B) {
	x, y := NewPN(), NewPN()
	for i := range 16 {
		_ = x.Add(fmt.Sprintf("node-%02d", i), int64(i))
		_ = y.Add(fmt.Sprintf("node-%02d", i), int64(16-i))
	}
	b.ReportAllocs()
	for b.Loop() {
		x.Merge(y)
	}
}

func BenchmarkHLLAdd(b *testing.B) {
	for _, tc := range []struct {
		name  string
		p     uint8
		items uint64 // distinct items cycled through
	}{
		{"sparse/p=14", 14, 1000},
		{"dense/p=14", 14, 1 << 20},
		{"dense/p=18", 18, 1 << 22},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h, _ := NewHLL(tc.p)
			buf := make([]byte, 8)
			for i := range tc.items { // reach the steady state first
				binary.LittleEndian.PutUint64(buf, i)
				h.Add(buf)
			}
			b.ReportAllocs()
			for i := uint64(0); b.Loop(); i++ {
				binary.LittleEndian.PutUint64(buf, i%tc.items)
				h.Add(buf)
			}
		})
	}
}

func BenchmarkHLLCount(b *testing.B) {
	for _, p := range []uint8{10, 14, 18} {
		b.Run(fmt.Sprintf("p=%d", p), func(b *testing.B) {
			h := sketch(b, p, 1, 0, 1<<20)
			b.ReportAllocs()
			for b.Loop() {
				_ = h.Count()
			}
		})
	}
}

func BenchmarkWindowAdd(b *testing.B) {
	for _, tc := range []struct {
		name string
		spec WindowSpec
		step time.Duration // time between adds
	}{
		{"same bucket", WindowSpec{Granularity: time.Minute, Span: time.Hour}, 0},
		{"sliding 1ms steps", WindowSpec{Granularity: time.Second, Span: 300 * time.Second}, time.Millisecond},
		{"new bucket every add", WindowSpec{Granularity: time.Second, Span: 300 * time.Second}, time.Second},
		{"fixed", WindowSpec{Granularity: time.Second, Span: time.Minute, Fixed: true}, 10 * time.Millisecond},
	} {
		b.Run(tc.name, func(b *testing.B) {
			w, _ := NewWindow(tc.spec)
			now := t0
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(tc.step)
				if err := w.Add(now, 1); err != nil {
					b.Fatal(err)
				}
			}
			_ = w.Sum(now)
		})
	}
}

func BenchmarkWindowSum(b *testing.B) {
	w, _ := NewWindow(WindowSpec{Granularity: time.Second, Span: 300 * time.Second})
	for s := range 600 {
		_ = w.Add(at(float64(s)), 1)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = w.Sum(at(599.5))
	}
}

func BenchmarkHashAdd(b *testing.B) {
	for _, n := range []int{1, 4, 32} {
		b.Run(fmt.Sprintf("fields=%d", n), func(b *testing.B) {
			h := NewHash()
			deltas := make([]FieldDelta, n)
			for i := range deltas {
				deltas[i] = FieldDelta{Name: fmt.Sprintf("field-%d", i), Delta: 1}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := h.Add(deltas); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWindowAppendBinary encodes a window of an hour by minute with
// one hit in every third bucket (the engine's flush encodes each changed
// window).
func BenchmarkWindowAppendBinary(b *testing.B) {
	w, _ := NewWindow(WindowSpec{Granularity: time.Minute, Span: time.Hour})
	for i := range 20 {
		if err := w.Add(t0.Add(time.Duration(3*i)*time.Minute), int64(1+i%3)); err != nil {
			b.Fatal(err)
		}
	}
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = w.AppendBinary(buf[:0])
	}
}
