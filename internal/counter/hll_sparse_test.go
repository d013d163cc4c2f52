package counter

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestHLLSparseEntries checks the byte-encoded sparse layout against a plain
// register array, including register 0, rank raises in place, inserts before,
// between and after entries, and both switches to dense (entry count at low
// precisions, byte bound at high ones).
func TestHLLSparseEntries(t *testing.T) {
	for _, p := range []uint8{4, 10, 14, 18} {
		rng := rand.New(rand.NewPCG(uint64(p), 7))
		h, _ := NewHLL(p)
		want := make([]uint8, 1<<p)
		for k := range 30000 {
			x := rng.Uint64()
			switch k % 7 {
			case 0:
				x >>= p // register 0
			case 1:
				x |= 1<<(64-p) - 1 // low rank
			}
			i, r := position(x, p)
			changed := r > want[i]
			want[i] = max(want[i], r)
			wasDense := h.dense
			if got := h.AddHash(x); got != changed {
				t.Fatalf("p=%d item %d: AddHash = %v, want %v", p, k, got, changed)
			}
			if !h.dense {
				if h.sparseFull() {
					t.Fatalf("p=%d item %d: sparse sketch over its bounds", p, k)
				}
			} else if !wasDense && !changed {
				t.Fatalf("p=%d item %d: turned dense without a change", p, k)
			}
			if k%997 == 0 || (k < 200 && !h.dense) {
				if !bytes.Equal(h.Registers(), want) {
					t.Fatalf("p=%d item %d (dense=%v): registers differ", p, k, h.dense)
				}
				nz := 0
				for _, r := range want {
					if r != 0 {
						nz++
					}
				}
				if h.nonZero() != nz {
					t.Fatalf("p=%d item %d: nonZero = %d, want %d", p, k, h.nonZero(), nz)
				}
				c := h.Clone()
				var u HLL
				if err := u.UnmarshalBinary(mustMarshal(t, c)); err != nil || !bytes.Equal(u.Registers(), want) {
					t.Fatalf("p=%d item %d: round trip differs (%v)", p, k, err)
				}
			}
		}
		if !h.dense {
			t.Fatalf("p=%d: never turned dense", p)
		}
	}
}
