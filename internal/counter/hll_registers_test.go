package counter

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// fromRegisters is NewHLLFromRegisters for input the test knows is valid.
func fromRegisters(t fataler, p uint8, regs []uint8) *HLL {
	t.Helper()
	h, err := NewHLLFromRegisters(p, regs)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// maxOf is the register-wise maximum of a and b, the registers of a union.
func maxOf(a, b []uint8) []uint8 {
	out := slices.Clone(a)
	for i, r := range b {
		out[i] = max(out[i], r)
	}
	return out
}

// TestHLLRegistersRoundTrip: a sketch's registers give back a sketch that
// is the same to every reader (registers, estimate, encoding) and merges the
// same, whether the original is sparse or dense.
func TestHLLRegistersRoundTrip(t *testing.T) {
	gen := rapid.Custom(func(t *rapid.T) *HLL {
		p := rapid.Uint8Range(MinPrecision, 16).Draw(t, "p")
		from := rapid.Uint64Range(0, 3000).Draw(t, "from")
		n := rapid.Uint64Range(0, 6000).Draw(t, "n")
		return sketch(t, p, 9, from, from+n)
	})
	rapid.Check(t, func(t *rapid.T) {
		h, o := gen.Draw(t, "h"), gen.Draw(t, "o")
		regs := h.Registers()
		if len(regs) != 1<<h.Precision() {
			t.Fatalf("Registers: %d registers at precision %d", len(regs), h.Precision())
		}
		g := fromRegisters(t, h.Precision(), regs)
		regs[0]++ // neither h nor g share the slice
		if g.Registers()[0] == regs[0] || h.Registers()[0] == regs[0] {
			t.Fatal("Registers or NewHLLFromRegisters shares its slice")
		}
		regs[0]--
		if !bytes.Equal(g.Registers(), regs) || g.Precision() != h.Precision() {
			t.Fatal("registers -> HLL -> registers differs")
		}
		if g.Count() != h.Count() || !bytes.Equal(mustMarshal(t, g), mustMarshal(t, h)) {
			t.Fatalf("rebuilt sketch: count %d, encoding differs from the original's (count %d)", g.Count(), h.Count())
		}
		hm, gm := h.Clone(), g.Clone()
		if err := hm.Merge(o); err != nil {
			t.Fatal(err)
		}
		if err := gm.Merge(o); err != nil {
			t.Fatal(err)
		}
		if !registersEqual(hm, gm) || hm.Count() != gm.Count() {
			t.Fatal("the rebuilt sketch merges differently")
		}
		om, og := o.Clone(), o.Clone()
		_ = om.Merge(h)
		_ = og.Merge(g)
		if !registersEqual(om, og) || om.Count() != og.Count() {
			t.Fatal("merging the rebuilt sketch in differs")
		}
	})
}

// TestHLLFromArbitraryRegisters: any valid register array, from a few set
// registers to all of them at any rank, round-trips through the sketch and
// its encoding, and the union of two is their register-wise maximum.
func TestHLLFromArbitraryRegisters(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := rapid.Uint8Range(MinPrecision, MaxPrecision).Draw(t, "p")
		m := 1 << p
		draw := func(name string) []uint8 {
			regs := make([]uint8, m)
			n := rapid.IntRange(0, m).Draw(t, name+" set")
			if n > 400 { // every register, from a seed: drawing each is slow
				seed := rapid.Uint64().Draw(t, name+" seed")
				for i := range regs {
					seed = seed*6364136223846793005 + 1442695040888963407
					regs[i] = uint8(seed>>33) % (66 - p)
				}
				return regs
			}
			for range n {
				i := rapid.IntRange(0, m-1).Draw(t, name+" index")
				regs[i] = rapid.Uint8Range(0, 65-p).Draw(t, name+" rank")
			}
			return regs
		}
		a, b := draw("a"), draw("b")
		ha, hb := fromRegisters(t, p, a), fromRegisters(t, p, b)
		if !bytes.Equal(ha.Registers(), a) {
			t.Fatal("registers -> HLL -> registers differs")
		}
		var dec HLL
		if err := dec.UnmarshalBinary(mustMarshal(t, ha)); err != nil || !bytes.Equal(dec.Registers(), a) || dec.Count() != ha.Count() {
			t.Fatalf("encoding round trip differs (%v)", err)
		}
		if err := ha.Merge(hb); err != nil {
			t.Fatal(err)
		}
		u := fromRegisters(t, p, maxOf(a, b))
		if !registersEqual(ha, u) || ha.Count() != u.Count() {
			t.Fatal("merge is not the register-wise maximum")
		}
	})
}

func TestNewHLLFromRegistersErrors(t *testing.T) {
	withLast := func(p uint8, r uint8) []uint8 {
		regs := make([]uint8, 1<<p)
		regs[len(regs)-1] = r
		return regs
	}
	for _, tc := range []struct {
		name string
		p    uint8
		regs []uint8
	}{
		{"precision 3", 3, make([]uint8, 8)},
		{"precision 19", 19, make([]uint8, 1<<19)},
		{"nil", 4, nil},
		{"one short", 10, make([]uint8, 1<<10-1)},
		{"one long", 10, make([]uint8, 1<<10+1)},
		{"other precision's length", 14, make([]uint8, 1<<12)},
		{"rank above 65-p", 4, withLast(4, 62)},
		{"rank above 65-p at p 18", 18, withLast(18, 48)},
		{"rank 255", 14, withLast(14, 255)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := NewHLLFromRegisters(tc.p, tc.regs)
			if !errors.Is(err, ErrInvalid) || h != nil {
				t.Fatalf("NewHLLFromRegisters = %v, %v; want nil and ErrInvalid", h, err)
			}
		})
	}
	// The bounds themselves are valid.
	for _, p := range []uint8{MinPrecision, DefaultPrecision, MaxPrecision} {
		if h := fromRegisters(t, p, withLast(p, 65-p)); h.Registers()[1<<p-1] != 65-p {
			t.Fatalf("p=%d: highest rank not kept", p)
		}
		if h := fromRegisters(t, p, make([]uint8, 1<<p)); h.Count() != 0 || h.nonZero() != 0 {
			t.Fatalf("p=%d: all-zero registers count %d", p, h.Count())
		}
	}
}

// FuzzHLLFromRegisters: data[0] picks the precision; the rest, used as it
// is (odd data[1]) or cycled to 2^p bytes, are the registers. Bad input is
// refused with ErrInvalid; good input round-trips and merges as a sketch.
func FuzzHLLFromRegisters(f *testing.F) {
	f.Add([]byte{0, 1})
	f.Add([]byte{0, 0, 61, 0, 3})
	f.Add([]byte{10, 0, 1, 2, 3, 4, 5})
	f.Add([]byte{14, 0, 0})
	f.Add([]byte{4, 0, 48})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		p := MinPrecision + data[0]%(MaxPrecision-MinPrecision+1)
		regs := data[2:]
		if data[1]%2 == 0 && len(regs) > 0 {
			regs = make([]uint8, 1<<p)
			for i := range regs {
				regs[i] = data[2+i%(len(data)-2)]
			}
		}
		valid := len(regs) == 1<<p
		for _, r := range regs {
			valid = valid && r <= 65-p
		}
		h, err := NewHLLFromRegisters(p, regs)
		if !valid {
			if !errors.Is(err, ErrInvalid) || h != nil {
				t.Fatalf("invalid registers: NewHLLFromRegisters = %v, %v", h, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("valid registers refused: %v", err)
		}
		if !bytes.Equal(h.Registers(), regs) {
			t.Fatal("registers -> HLL -> registers differs")
		}
		var dec HLL
		if err := dec.UnmarshalBinary(mustMarshal(t, h)); err != nil || !registersEqual(&dec, h) || dec.Count() != h.Count() {
			t.Fatalf("encoding round trip differs (%v)", err)
		}
		m := h.Clone()
		if err := m.Merge(&dec); err != nil || !registersEqual(m, h) || m.Count() != h.Count() {
			t.Fatalf("merge with an equal sketch changed it (%v)", err)
		}
	})
}
