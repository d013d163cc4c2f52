package counter

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/axiomhq/hyperloglog"
	"github.com/cespare/xxhash/v2"
	"pgregory.net/rapid"
)

// item returns the i-th distinct test item of a stream named by seed.
func item(buf []byte, seed, i uint64) []byte {
	buf = binary.LittleEndian.AppendUint64(buf[:0], seed)
	return binary.LittleEndian.AppendUint64(buf, i)
}

// fataler is the part of testing.TB and *rapid.T that sketch needs.
type fataler interface {
	Helper()
	Fatal(args ...any)
}

// sketch returns a sketch of precision p of items [from, to) of stream seed.
func sketch(t fataler, p uint8, seed, from, to uint64) *HLL {
	t.Helper()
	h, err := NewHLL(p)
	if err != nil {
		t.Fatal(err)
	}
	var buf []byte
	for i := from; i < to; i++ {
		h.Add(item(buf, seed, i))
	}
	return h
}

func TestValidatePrecision(t *testing.T) {
	for p := range 40 {
		err := ValidatePrecision(uint8(p))
		if ok := p >= 4 && p <= 18; ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Fatalf("ValidatePrecision(%d) = %v", p, err)
		}
		h, err := NewHLL(uint8(p))
		if (err == nil) != (p >= 4 && p <= 18) || (err == nil && h.Precision() != uint8(p)) {
			t.Fatalf("NewHLL(%d) = %v, %v", p, h, err)
		}
	}
}

func TestHLLAccuracy(t *testing.T) {
	tests := []struct {
		name string
		p    uint8
		n    uint64
	}{
		{"p14 n1e3", 14, 1e3},
		{"p14 n1e4", 14, 1e4},
		{"p14 n1e5", 14, 1e5},
		{"p14 n1e6", 14, 1e6},
		{"p4 n1e4", 4, 1e4},
		{"p10 n1e5", 10, 1e5},
		{"p12 n1e2", 12, 100},
		{"p16 n1e5", 16, 1e5},
		{"p18 n1e6", 18, 1e6},
	}
	for k, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := sketch(t, tc.p, uint64(k)+1, 0, tc.n)
			got := h.Count()
			rel := math.Abs(float64(got)-float64(tc.n)) / float64(tc.n)
			t.Logf("n=%d estimate=%d relative error %.4f (std error %.4f)", tc.n, got, rel, h.StdError())
			if rel > 3*h.StdError() {
				t.Fatalf("estimate %d for %d items: relative error %.4f > 3 x %.4f", got, tc.n, rel, h.StdError())
			}
			// Adding the same items again changes nothing.
			before := mustMarshal(t, h)
			var buf []byte
			for i := range min(tc.n, 1000) {
				if h.Add(item(buf, uint64(k)+1, i)) {
					t.Fatalf("re-adding item %d changed a register", i)
				}
			}
			if !bytes.Equal(before, mustMarshal(t, h)) || h.Count() != got {
				t.Fatal("re-adding items changed the sketch")
			}
		})
	}
}

// TestHLLErrorDistribution checks the estimator statistically rather than on
// one draw: over many independent sketches the bias is small and the RMS
// relative error is close to the 1.04/sqrt(m) the StdError promises, at
// cardinalities from below m (linear counting regime) to 400 m.
func TestHLLErrorDistribution(t *testing.T) {
	const p = 8 // m = 256, std error 6.5%
	for _, tc := range []struct {
		n     int
		runs  int
		maxSE float64 // RMS error bound, in std errors
	}{
		{100, 300, 0.85}, // linear counting is far better than 1.04/sqrt(m)
		{1000, 300, 1.25},
		{10000, 200, 1.25},
		{100000, 40, 1.4},
	} {
		t.Run(fmt.Sprintf("n=%d", tc.n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(tc.n), 42))
			var sum, sumSq float64
			se := 0.0
			for range tc.runs {
				h, _ := NewHLL(p)
				se = h.StdError()
				for range tc.n {
					h.AddHash(rng.Uint64())
				}
				rel := (float64(h.Count()) - float64(tc.n)) / float64(tc.n)
				sum += rel
				sumSq += rel * rel
			}
			mean, rms := sum/float64(tc.runs), math.Sqrt(sumSq/float64(tc.runs))
			t.Logf("mean relative error %+.4f, rms %.4f (std error %.4f)", mean, rms, se)
			if rms > tc.maxSE*se {
				t.Errorf("rms relative error %.4f > %.2f x %.4f", rms, tc.maxSE, se)
			}
			// The mean of runs independent errors has std error se/sqrt(runs).
			if math.Abs(mean) > 4*se/math.Sqrt(float64(tc.runs)) {
				t.Errorf("bias %.4f beyond 4 standard errors of the mean", mean)
			}
		})
	}
}

func TestHLLSmallCounts(t *testing.T) {
	// Small cardinalities are nearly exact (linear counting regime).
	for _, n := range []uint64{0, 1, 2, 5, 10, 50} {
		h := sketch(t, 14, 99, 0, n)
		if got := h.Count(); got != n {
			t.Errorf("Count() of %d items = %d", n, got)
		}
	}
	var zero HLL
	if zero.Count() != 0 || zero.Precision() != DefaultPrecision {
		t.Fatalf("zero HLL: count %d precision %d", zero.Count(), zero.Precision())
	}
	if !zero.Add([]byte("x")) || zero.Count() != 1 || zero.Precision() != DefaultPrecision {
		t.Fatal("zero HLL is not usable as a precision-14 sketch")
	}
}

func TestHLLStdError(t *testing.T) {
	for _, tc := range []struct {
		p    uint8
		want float64
	}{{4, 0.26}, {10, 0.0325}, {14, 0.008125}, {16, 0.0040625}} {
		h, _ := NewHLL(tc.p)
		if got := h.StdError(); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("StdError at p=%d = %v, want %v", tc.p, got, tc.want)
		}
	}
}

// TestHLLMatchesAxiom checks that the registers are exactly those of
// github.com/axiomhq/hyperloglog's dense sketch fed the same hashes, and that
// the two estimates agree.
func TestHLLMatchesAxiom(t *testing.T) {
	for _, tc := range []struct {
		p uint8
		n uint64
	}{{4, 1000}, {10, 50}, {10, 20000}, {14, 300}, {14, 100000}, {18, 200000}} {
		ours := sketch(t, tc.p, 7, 0, tc.n)
		ax, err := hyperloglog.NewSketch(tc.p, false)
		if err != nil {
			t.Fatal(err)
		}
		var buf []byte
		for i := range tc.n {
			ax.InsertHash(xxhash.Sum64(item(buf, 7, i)))
		}
		enc, err := ax.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		// Version 2 dense layout: 8 header bytes, then one byte per register.
		if len(enc) != 8+1<<tc.p || enc[3] != 0 {
			t.Fatalf("unexpected axiomhq encoding header %x", enc[:8])
		}
		if !bytes.Equal(enc[8:], ours.Registers()) {
			t.Fatalf("p=%d n=%d: registers differ from axiomhq's", tc.p, tc.n)
		}
		a, o := float64(ax.Estimate()), float64(ours.Count())
		if math.Abs(a-o)/float64(tc.n) > 2*ours.StdError() {
			t.Fatalf("p=%d n=%d: estimate %v, axiomhq %v", tc.p, tc.n, o, a)
		}
	}
}

// TestHLLAddReportsChange checks Add's result against the registers, across
// the sparse to dense switch.
func TestHLLAddReportsChange(t *testing.T) {
	h, _ := NewHLL(8)
	var buf []byte
	changed := 0
	for i := range uint64(3000) {
		before := h.Registers()
		got := h.Add(item(buf, 3, i%2000)) // the last 1000 are repeats
		after := h.Registers()
		if want := !bytes.Equal(before, after); got != want {
			t.Fatalf("item %d: Add = %v, registers changed = %v (dense=%v)", i, got, want, h.dense)
		}
		if got {
			changed++
		}
		if i >= 2000 && got {
			t.Fatalf("repeat item %d changed a register", i)
		}
	}
	if !h.dense || changed < 256 {
		t.Fatalf("dense=%v changed=%d: the test did not exercise both layouts", h.dense, changed)
	}
}

func registersEqual(a, b *HLL) bool {
	return a.Precision() == b.Precision() && bytes.Equal(a.Registers(), b.Registers())
}

func TestHLLMergeIsUnion(t *testing.T) {
	tests := []struct {
		name       string
		pa, pb     uint8
		a0, a1     uint64 // items [a0, a1) go to a
		b0, b1     uint64 // items [b0, b1) go to b
		wantP      uint8
		checkCount bool
	}{
		{"sparse sparse", 14, 14, 0, 300, 200, 500, 14, true},
		{"sparse dense", 14, 14, 0, 300, 100, 50000, 14, true},
		{"dense sparse", 14, 14, 0, 50000, 40000, 40100, 14, true},
		{"dense dense", 12, 12, 0, 30000, 20000, 60000, 12, true},
		{"disjoint", 10, 10, 0, 5000, 5000, 10000, 10, true},
		{"identical", 10, 10, 0, 5000, 0, 5000, 10, true},
		{"empty into full", 10, 10, 0, 0, 0, 5000, 10, true},
		{"finer into coarser", 10, 14, 0, 20000, 10000, 50000, 10, true},
		{"coarser into finer", 14, 10, 0, 20000, 10000, 50000, 10, true},
		{"sparse finer into sparse coarser", 12, 16, 0, 100, 50, 300, 12, true},
		{"dense finer into sparse coarser", 12, 16, 0, 100, 0, 100000, 12, true},
		{"extreme precisions", 18, 4, 0, 100000, 0, 10, 4, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := sketch(t, tc.pa, 1, tc.a0, tc.a1)
			b := sketch(t, tc.pb, 1, tc.b0, tc.b1)
			bEnc := mustMarshal(t, b)
			ab, ba := a.Clone(), b.Clone()
			if err := ab.Merge(b); err != nil {
				t.Fatal(err)
			}
			if err := ba.Merge(a); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(bEnc, mustMarshal(t, b)) {
				t.Fatal("Merge modified its argument")
			}
			// The union sketch built directly at the coarser precision.
			u := sketch(t, tc.wantP, 1, min(tc.a0, tc.b0), max(tc.a1, tc.b1))
			if tc.a1 == tc.a0 {
				u = sketch(t, tc.wantP, 1, tc.b0, tc.b1)
			}
			if ab.Precision() != tc.wantP || !registersEqual(ab, u) {
				t.Fatalf("a∪b (p=%d) differs from the sketch of the union (p=%d)", ab.Precision(), u.Precision())
			}
			if !registersEqual(ab, ba) || ab.Count() != ba.Count() {
				t.Fatal("merge is not commutative")
			}
			if !bytes.Equal(mustMarshal(t, ab), mustMarshal(t, u)) {
				t.Fatal("equal registers, different encodings")
			}
			again := ab.Clone()
			_ = again.Merge(b)
			_ = again.Merge(a)
			_ = again.Merge(again)
			if !registersEqual(again, ab) || again.Count() != ab.Count() {
				t.Fatal("merge is not idempotent")
			}
			n := float64(max(tc.a1, tc.b1) - min(tc.a0, tc.b0))
			if tc.a1 == tc.a0 {
				n = float64(tc.b1 - tc.b0)
			}
			if rel := math.Abs(float64(ab.Count())-n) / n; rel > 3*ab.StdError() {
				t.Fatalf("union count %d for %v items", ab.Count(), n)
			}
		})
	}
}

func TestHLLMergeLaws(t *testing.T) {
	gen := rapid.Custom(func(t *rapid.T) *HLL {
		p := rapid.Uint8Range(4, 16).Draw(t, "p")
		from := rapid.Uint64Range(0, 3000).Draw(t, "from")
		n := rapid.Uint64Range(0, 3000).Draw(t, "n")
		return sketch(t, p, 5, from, from+n)
	})
	rapid.Check(t, func(t *rapid.T) {
		a, b, c := gen.Draw(t, "a"), gen.Draw(t, "b"), gen.Draw(t, "c")
		merge := func(xs ...*HLL) *HLL {
			out := xs[0].Clone()
			for _, x := range xs[1:] {
				if err := out.Merge(x); err != nil {
					t.Fatal(err)
				}
			}
			return out
		}
		ab, ba := merge(a, b), merge(b, a)
		if !registersEqual(ab, ba) || ab.Count() != ba.Count() {
			t.Fatal("not commutative")
		}
		if l, r := merge(ab, c), merge(a, merge(b, c)); !registersEqual(l, r) {
			t.Fatal("not associative")
		}
		if aa := merge(a, a.Clone()); !registersEqual(aa, a) || aa.Count() != a.Count() {
			t.Fatal("not idempotent")
		}
		if abb := merge(ab, b); !registersEqual(abb, ab) {
			t.Fatal("(a∪b)∪b != a∪b")
		}
	})
}

func TestHLLFold(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to uint8
		n        uint64
	}{
		{"sparse 14 to 10", 14, 10, 500},
		{"dense 14 to 10", 14, 10, 100000},
		{"dense 18 to 4", 18, 4, 200000},
		{"sparse to dense 16 to 8", 16, 8, 5000},
		{"same precision", 12, 12, 1000},
		{"empty", 12, 6, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := sketch(t, tc.from, 11, 0, tc.n)
			if err := h.Fold(tc.to); err != nil {
				t.Fatal(err)
			}
			if want := sketch(t, tc.to, 11, 0, tc.n); !registersEqual(h, want) {
				t.Fatal("folded sketch differs from the sketch built at the lower precision")
			}
		})
	}
	h := sketch(t, 10, 1, 0, 10)
	before := mustMarshal(t, h)
	if err := h.Fold(12); !errors.Is(err, ErrPrecision) {
		t.Fatalf("Fold up: %v, want ErrPrecision", err)
	}
	if err := h.Fold(2); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Fold to 2: %v, want ErrInvalid", err)
	}
	if !bytes.Equal(before, mustMarshal(t, h)) {
		t.Fatal("failed Fold changed the sketch")
	}
}

func TestHLLCodec(t *testing.T) {
	tests := []struct {
		name   string
		p      uint8
		n      uint64
		layout byte
	}{
		{"empty p4", 4, 0, hllSparse},
		{"empty p18", 18, 0, hllSparse},
		{"one item", 14, 1, hllSparse},
		{"sparse", 14, 1000, hllSparse},
		{"dense", 14, 100000, hllDense},
		{"dense p4", 4, 1000, hllDense},
		{"dense p18", 18, 1000000, hllDense},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := sketch(t, tc.p, 2, 0, tc.n)
			enc := mustMarshal(t, h)
			if enc[0] != formatHLL || enc[1] != tc.p || enc[2] != tc.layout {
				t.Fatalf("header %x, want layout %d", enc[:3], tc.layout)
			}
			if max := 3 + 3<<tc.p/4; len(enc) > max {
				t.Fatalf("encoding of %d bytes, more than the dense %d", len(enc), max)
			}
			d := new(HLL)
			if err := d.UnmarshalBinary(enc); err != nil {
				t.Fatal(err)
			}
			if !registersEqual(d, h) || d.Count() != h.Count() || d.Precision() != tc.p {
				t.Fatal("round trip changed the sketch")
			}
			if !bytes.Equal(mustMarshal(t, d), enc) {
				t.Fatal("re-encoding differs")
			}
			// Same registers held densely in memory: same encoding.
			dense := h.Clone()
			if !dense.dense {
				dense.toDense()
			}
			if !bytes.Equal(mustMarshal(t, dense), enc) {
				t.Fatal("dense and sparse in-memory layouts encode differently")
			}
			if tc.n <= 1000 {
				checkTruncations(t, enc, func() binaryCodec { return new(HLL) })
			}
		})
	}
}

func TestHLLCodecErrors(t *testing.T) {
	dense := make([]byte, 3+12)
	dense[0], dense[1], dense[2] = formatHLL, 4, hllDense
	badDense := slices.Clone(dense)
	badDense[3] = 62 // register 0 = 62 > 65-4
	tests := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"wrong format", []byte{formatPN, 14, 0, 0}},
		{"precision 3", []byte{formatHLL, 3, hllSparse, 0}},
		{"precision 19", []byte{formatHLL, 19, hllSparse, 0}},
		{"unknown layout", []byte{formatHLL, 14, 2, 0}},
		{"rank zero", []byte{formatHLL, 14, hllSparse, 1, 5, 0}},
		{"rank too high", []byte{formatHLL, 14, hllSparse, 1, 5, 52}},
		{"index beyond m", []byte{formatHLL, 4, hllSparse, 1, 16, 1}},
		{"index sum beyond m", []byte{formatHLL, 4, hllSparse, 2, 15, 1, 1, 1}},
		{"repeated index", []byte{formatHLL, 4, hllSparse, 2, 3, 1, 0, 2}},
		{"more registers than m", append([]byte{formatHLL, 4, hllSparse, 17}, bytes.Repeat([]byte{1, 1}, 17)...)},
		{"count beyond input", []byte{formatHLL, 14, hllSparse, 3, 1, 1}},
		{"dense too short", dense[:len(dense)-1]},
		{"dense too long", append(slices.Clone(dense), 0)},
		{"dense rank too high", badDense},
	}
	good := sketch(t, 10, 1, 0, 100)
	enc := mustMarshal(t, good)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := good.Clone()
			if err := h.UnmarshalBinary(tc.in); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("UnmarshalBinary(%x) = %v, want ErrCorrupt", tc.in, err)
			}
			if !bytes.Equal(enc, mustMarshal(t, h)) {
				t.Fatal("failed UnmarshalBinary changed the receiver")
			}
		})
	}
	if err := new(HLL).UnmarshalBinary(dense); err != nil {
		t.Fatalf("valid empty dense encoding rejected: %v", err)
	}
}

func FuzzHLLUnmarshal(f *testing.F) {
	for _, tc := range []struct {
		p uint8
		n uint64
	}{{4, 0}, {4, 3}, {4, 100}, {8, 20}, {8, 1000}, {14, 5}} {
		f.Add(mustMarshal(f, sketch(f, tc.p, 1, 0, tc.n)))
	}
	f.Add([]byte{formatHLL, 4, hllSparse, 2, 15, 1, 1, 1})
	f.Add([]byte{formatHLL, 18, hllDense})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, ok := checkDecode(t, data, func() *HLL { return new(HLL) },
			func() *HLL { return sketch(t, 6, 1, 0, 10) }, false)
		if !ok {
			return
		}
		c := h.Count()
		if c > 0 && h.nonZero() == 0 || c == 0 && h.nonZero() != 0 {
			t.Fatalf("Count() = %d with %d non-zero registers", c, h.nonZero())
		}
		// A decoded sketch merges like any other.
		m := h.Clone()
		if err := m.Merge(h); err != nil || !registersEqual(m, h) || m.Count() != c {
			t.Fatalf("self-merge of a decoded sketch changed it (%v)", err)
		}
		if p := h.Precision(); p > MinPrecision {
			if err := m.Fold(p - 1); err != nil || m.Precision() != p-1 {
				t.Fatalf("Fold: %v", err)
			}
		}
	})
}

// TestHLLUndo: after random adds (one at a time, in blocks, merges; sparse
// and dense), BeginUndo, more adds and Rollback, the sketch encodes as it
// did at BeginUndo; with End the adds stay; a clone taken during the undo
// is not changed by either; an undo is reusable.
func TestHLLUndo(t *testing.T) {
	var u HLLUndo
	// Sparse sketches of every size up to 200 entries, with the slack a
	// block merge leaves, then one-at-a-time adds that insert entries in
	// place: the copy a write makes has its own capacity.
	for n := range 200 {
		h, _ := NewHLL(14)
		h.AddHashes(hashes(uint64(n), n))
		want, _ := h.MarshalBinary()
		h.BeginUndo(&u)
		for _, x := range hashes(uint64(1000+n), 50) {
			h.AddHash(x)
		}
		u.Rollback()
		if got, _ := h.MarshalBinary(); !bytes.Equal(got, want) {
			t.Fatalf("%d entries: after Rollback:\n%x\nwant %x", n, got, want)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		h, err := NewHLL(rapid.SampledFrom([]uint8{4, 10, 14}).Draw(t, "p"))
		if err != nil {
			t.Fatal(err)
		}
		add := func(label string) {
			switch rapid.SampledFrom([]int{0, 0, 0, 1, 2}).Draw(t, label) { // mostly one at a time: writes in place
			case 0:
				h.AddHash(rapid.Uint64().Draw(t, label+"-hash"))
			case 1:
				h.AddHashes(rapid.SliceOfN(rapid.Uint64(), 1, 200).Draw(t, label+"-hashes"))
			case 2:
				o, _ := NewHLL(h.Precision())
				o.AddHashes(rapid.SliceOfN(rapid.Uint64(), 1, 3000).Draw(t, label+"-merged"))
				if err := h.Merge(o); err != nil {
					t.Fatal(err)
				}
			}
		}
		for range rapid.IntRange(0, 20).Draw(t, "before") {
			add("before")
		}
		want, _ := h.MarshalBinary()
		h.BeginUndo(&u)
		c := h.Clone()
		for range rapid.IntRange(1, 60).Draw(t, "during") {
			add("during")
		}
		during, _ := h.MarshalBinary()
		if rapid.Bool().Draw(t, "keep") {
			u.End()
			if got, _ := h.MarshalBinary(); !bytes.Equal(got, during) {
				t.Fatal("End changed the sketch")
			}
		} else {
			u.Rollback()
			if got, _ := h.MarshalBinary(); !bytes.Equal(got, want) {
				t.Fatalf("after Rollback:\n%x\nwant %x", got, want)
			}
		}
		if got, _ := c.MarshalBinary(); !bytes.Equal(got, want) {
			t.Fatal("the clone changed")
		}
		// Writes after the undo ended are the sketch's alone.
		add("after")
	})
}

// hashes returns n well-spread hashes from seed (splitmix64).
func hashes(seed uint64, n int) []uint64 {
	xs := make([]uint64, n)
	for i := range xs {
		seed += 0x9e3779b97f4a7c15
		x := seed
		x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
		x = (x ^ x>>27) * 0x94d049bb133111eb
		xs[i] = x ^ x>>31
	}
	return xs
}

// TestHLLPeek: Peek changes nothing, on empty, sparse and dense sketches.
func TestHLLPeek(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h, err := NewHLL(rapid.SampledFrom([]uint8{4, 10, 14}).Draw(t, "p"))
		if err != nil {
			t.Fatal(err)
		}
		h.AddHashes(rapid.SliceOfN(rapid.Uint64(), 0, 3000).Draw(t, "hashes"))
		before, _ := h.MarshalBinary()
		dense, n := h.dense, h.n
		h.Peek()
		if after, _ := h.MarshalBinary(); !bytes.Equal(after, before) || h.dense != dense || h.n != n {
			t.Fatalf("Peek changed the sketch")
		}
	})
}
