package counter

import (
	"fmt"
	"math"
	"runtime"
	"testing"

	"pgregory.net/rapid"
)

// TestHLLErrorAcrossSeeds measures the relative error of Count at p = 14
// over independent item streams (seeds) at n = 1e2 .. 1e7 and holds it to
// the promised 1.04/sqrt(2^14) = 0.81%: no single sketch beyond 4 standard
// errors, the RMS over the seeds within 1.6 standard errors (a loose
// bound: a handful of seeds gives a rough RMS). At n = 100 an estimate off
// by one is already 1%. n = 1e7 takes 4 seeds (40M adds, about 4 s) and is
// skipped under the race detector, which makes it minutes long and checks
// nothing in this single-goroutine test.
func TestHLLErrorAcrossSeeds(t *testing.T) {
	const p = 14
	se := 1.04 / math.Sqrt(1<<p)
	for _, n := range []uint64{1e2, 1e3, 1e4, 1e5, 1e6, 1e7} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			seeds := 8
			if n >= 1e7 {
				if raceEnabled {
					t.Skip("40M adds under the race detector")
				}
				if testing.Short() {
					t.Skip("40M adds (go test without -short runs them)")
				}
				seeds = 4
			}
			var sumSq, worst float64
			for s := range uint64(seeds) {
				h := sketch(t, p, 1000+s, 0, n)
				rel := (float64(h.Count()) - float64(n)) / float64(n)
				sumSq += rel * rel
				worst = max(worst, math.Abs(rel))
				if math.Abs(rel) > 4*se {
					t.Errorf("seed %d: estimate %d, relative error %.4f > 4 x %.4f", s, h.Count(), rel, se)
				}
			}
			rms := math.Sqrt(sumSq / float64(seeds))
			t.Logf("p=%d n=%d: rms relative error %.5f (%.2f std errors) over %d seeds, worst %.5f, std error %.5f", p, n, rms, rms/se, seeds, worst, se)
			if rms > 1.6*se {
				t.Errorf("rms relative error %.5f > 1.6 x %.5f", rms, se)
			}
		})
	}
}

// TestHLLErrorByPrecision checks the rollup precisions 10..16 at n = 1e5.
func TestHLLErrorByPrecision(t *testing.T) {
	for p := uint8(10); p <= 16; p++ {
		se := 1.04 / math.Sqrt(float64(uint64(1)<<p))
		var sumSq float64
		const seeds = 6
		for s := range uint64(seeds) {
			h := sketch(t, p, 77+s, 0, 1e5)
			rel := (float64(h.Count()) - 1e5) / 1e5
			sumSq += rel * rel
		}
		rms := math.Sqrt(sumSq / seeds)
		t.Logf("p=%d: rms relative error %.4f, std error %.4f", p, rms, se)
		if rms > 1.8*se {
			t.Errorf("p=%d: rms %.4f > 1.8 x %.4f", p, rms, se)
		}
	}
}

// hllHeapBytes returns the heap an HLL takes (struct and slices' backing
// arrays), measured over many sketches.
func hllHeapBytes(p uint8, n uint64) float64 {
	const count = 2000
	hs := make([]*HLL, count)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range hs {
		h, _ := NewHLL(p)
		var buf []byte
		for j := range n {
			h.Add(item(buf, uint64(i), j))
		}
		hs[i] = h
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(hs)
	return float64(after.HeapAlloc-before.HeapAlloc) / count
}

// TestHLLSparseSize: a small sketch stays small. At n = 100 (p = 14) the
// encoding is at most 300 bytes; the in-memory sparse entries are a uvarint
// (about 2 bytes) per register in a slice sized to fit.
func TestHLLSparseSize(t *testing.T) {
	for _, tc := range []struct {
		n       uint64
		maxEnc  int
		maxHeap float64
	}{
		{1, 8, 100},
		{10, 40, 150},
		{100, 300, 700},
		{1000, 3000, 6000},
	} {
		var total int
		const seeds = 20
		for s := range uint64(seeds) {
			enc := mustMarshal(t, sketch(t, 14, s, 0, tc.n))
			total += len(enc)
			if len(enc) > tc.maxEnc {
				t.Errorf("n=%d seed %d: %d encoded bytes > %d", tc.n, s, len(enc), tc.maxEnc)
			}
		}
		if raceEnabled {
			// The race detector's shadow memory makes heap figures
			// meaningless (and building 2000 sketches slow).
			t.Logf("p=14 n=%d: %.0f encoded bytes on average; heap not measured under the race detector", tc.n, float64(total)/seeds)
			continue
		}
		heap := hllHeapBytes(14, tc.n)
		t.Logf("p=14 n=%d: %.0f encoded bytes on average, %.0f heap bytes (dense: %d encoded, %d heap)",
			tc.n, float64(total)/seeds, heap, 3+3<<14/4, 1<<14)
		if heap > tc.maxHeap {
			t.Errorf("n=%d: %.0f heap bytes > %.0f", tc.n, heap, tc.maxHeap)
		}
	}
}

// TestHLLMergeIsSketchOfUnion checks, over random item sets and the rollup
// precisions, that merging sketches gives exactly the registers of the
// sketch of the union (so unions of stored day sketches are exact), that the
// empty sketch is the identity, and that folding then merging equals merging
// then folding.
func TestHLLMergeIsSketchOfUnion(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pa := rapid.Uint8Range(10, 16).Draw(t, "pa")
		pb := rapid.Uint8Range(10, 16).Draw(t, "pb")
		a0 := rapid.Uint64Range(0, 5000).Draw(t, "a0")
		a1 := a0 + rapid.Uint64Range(0, 5000).Draw(t, "alen")
		b0 := rapid.Uint64Range(0, 5000).Draw(t, "b0")
		b1 := b0 + rapid.Uint64Range(0, 5000).Draw(t, "blen")
		a, b := sketch(t, pa, 9, a0, a1), sketch(t, pb, 9, b0, b1)
		u := a.Clone()
		if err := u.Merge(b); err != nil {
			t.Fatal(err)
		}
		p := min(pa, pb)
		want, _ := NewHLL(p)
		var buf []byte
		for i := a0; i < a1; i++ {
			want.Add(item(buf, 9, i))
		}
		for i := b0; i < b1; i++ {
			want.Add(item(buf, 9, i))
		}
		if !registersEqual(u, want) || u.Count() != want.Count() {
			t.Fatalf("merge of p%d [%d,%d) and p%d [%d,%d) differs from the sketch of the union", pa, a0, a1, pb, b0, b1)
		}
		empty, _ := NewHLL(p)
		if err := empty.Merge(u); err != nil || !registersEqual(empty, u) {
			t.Fatal("the empty sketch is not the identity")
		}
		// fold(a) ∪ fold(b) == fold(a ∪ b) at a lower precision.
		q := rapid.Uint8Range(MinPrecision, p).Draw(t, "q")
		fa, fb, fu := a.Clone(), b.Clone(), u.Clone()
		_ = fa.Fold(q)
		_ = fb.Fold(q)
		_ = fu.Fold(q)
		_ = fa.Merge(fb)
		if !registersEqual(fa, fu) {
			t.Fatal("fold does not commute with merge")
		}
	})
}
