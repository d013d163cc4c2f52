package counter

import (
	"bytes"
	"testing"

	"pgregory.net/rapid"
)

// TestHLLAddHashes: AddHashes of a list of hashes leaves a sketch (sparse
// or dense, of any precision, after any earlier adds) with the registers
// and the encoding that AddHash of each, in order, leaves, reports a
// change exactly when that does, and turns dense when that does. The
// hashes repeat indexes (with lower and higher ranks) and registers the
// sketch already has, and lists pass the merge's block size.
func TestHLLAddHashes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := rapid.SampledFrom([]uint8{4, 6, 10, 14, 18}).Draw(t, "p")
		h, err := NewHLL(p)
		if err != nil {
			t.Fatal(err)
		}
		// Hashes from a small pool, so indexes and ranks collide.
		pool := rapid.SliceOfN(rapid.Uint64(), 1, 400).Draw(t, "pool")
		hash := rapid.SampledFrom(pool)
		for range rapid.IntRange(0, 600).Draw(t, "before") {
			h.AddHash(hash.Draw(t, "old"))
		}
		for range rapid.IntRange(1, 4).Draw(t, "rounds") {
			xs := rapid.SliceOfN(hash, 0, 200).Draw(t, "xs")
			want := h.Clone()
			wantChanged := false
			for _, x := range xs {
				if want.AddHash(x) {
					wantChanged = true
				}
			}
			changed := h.AddHashes(xs)
			if changed != wantChanged || h.dense != want.dense || h.nonZero() != want.nonZero() {
				t.Fatalf("AddHashes of %d: changed %v dense %v registers %d; AddHash each: %v %v %d", len(xs), changed, h.dense, h.nonZero(), wantChanged, want.dense, want.nonZero())
			}
			if !h.dense && (h.n != want.n || !bytes.Equal(h.regs, want.regs)) {
				t.Fatalf("sparse entries %x (%d), want %x (%d)", h.regs, h.n, want.regs, want.n)
			}
			got, _ := h.MarshalBinary()
			exp, _ := want.MarshalBinary()
			if !bytes.Equal(got, exp) {
				t.Fatalf("encoding %x, want %x", got, exp)
			}
		}
	})
}
