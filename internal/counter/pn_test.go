package counter

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

func TestPNAdd(t *testing.T) {
	type add struct {
		replica string
		delta   int64
		err     error
	}
	tests := []struct {
		name  string
		adds  []add
		value int64
		slots []PNSlot
	}{
		{"empty", nil, 0, nil},
		{"zero delta creates nothing", []add{{"a", 0, nil}}, 0, nil},
		{"empty replica", []add{{"", 1, ErrInvalid}}, 0, nil},
		{
			"increments and decrements per replica",
			[]add{{"b", 5, nil}, {"a", 3, nil}, {"b", -2, nil}, {"c", -4, nil}},
			2, []PNSlot{{"a", 3, 0}, {"b", 5, 2}, {"c", 0, 4}},
		},
		{
			"value overflow refused",
			[]add{{"a", math.MaxInt64, nil}, {"b", 1, ErrOverflow}, {"a", -1, nil}, {"b", 1, nil}},
			math.MaxInt64, []PNSlot{{"a", math.MaxInt64, 1}, {"b", 1, 0}},
		},
		{
			"negative value overflow refused",
			[]add{{"a", math.MinInt64, nil}, {"a", -1, ErrOverflow}},
			math.MinInt64, []PNSlot{{"a", 0, 1 << 63}},
		},
		{
			"slot overflow refused while the value fits",
			[]add{
				{"a", math.MaxInt64, nil}, {"a", math.MinInt64, nil}, // P=2^63-1 N=2^63
				{"a", math.MaxInt64, nil}, {"a", math.MinInt64, nil}, // P=2^64-2 N=2^64
			},
			0, nil, // filled below: the last add overflows N
		},
	}
	tests[len(tests)-1].adds[3].err = ErrOverflow
	tests[len(tests)-1].value = math.MaxInt64 - 1
	tests[len(tests)-1].slots = []PNSlot{{"a", math.MaxUint64 - 1, 1 << 63}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewPN()
			for i, a := range tc.adds {
				err := c.Add(a.replica, a.delta)
				if a.err == nil && err != nil || a.err != nil && !errors.Is(err, a.err) {
					t.Fatalf("add %d (%q, %d): error %v, want %v", i, a.replica, a.delta, err, a.err)
				}
			}
			if c.Value() != tc.value {
				t.Errorf("Value() = %d, want %d", c.Value(), tc.value)
			}
			if got := c.Slots(); !slices.Equal(got, tc.slots) {
				t.Errorf("Slots() = %v, want %v", got, tc.slots)
			}
			d := new(PN)
			if err := d.UnmarshalBinary(mustMarshal(t, c)); err != nil || !d.Equal(c) || d.Value() != c.Value() {
				t.Fatalf("round trip: %v, %v vs %v", err, d.Slots(), c.Slots())
			}
		})
	}
}

func TestPNMergeSaturates(t *testing.T) {
	a, b := NewPN(), NewPN()
	_ = a.Add("a", math.MaxInt64)
	_ = b.Add("b", math.MaxInt64)
	a.Merge(b)
	if a.Value() != math.MaxInt64 {
		t.Fatalf("merged value = %d, want saturation at MaxInt64", a.Value())
	}
	if err := a.Add("a", 1); !errors.Is(err, ErrOverflow) {
		t.Fatalf("Add away from zero on a saturated counter: %v, want ErrOverflow", err)
	}
	if err := a.Add("a", -10); err != nil {
		t.Fatalf("Add towards zero on a saturated counter: %v", err)
	}
	if err := a.Add("b", math.MinInt64); err != nil || a.Value() != math.MaxInt64-11 {
		t.Fatalf("back in range: value %d, err %v; want %d", a.Value(), err, int64(math.MaxInt64-11))
	}
	// The exact value survives an encoding round trip.
	c := new(PN)
	if err := c.UnmarshalBinary(mustMarshal(t, a)); err != nil || c.Value() != a.Value() {
		t.Fatalf("round trip: %d, %v", c.Value(), err)
	}
}

func TestPNMergeTable(t *testing.T) {
	mk := func(slots ...PNSlot) *PN {
		c := NewPN()
		for _, s := range slots {
			_ = c.Add(s.Replica, int64(s.P))
			_ = c.Add(s.Replica, -int64(s.N))
		}
		return c
	}
	tests := []struct {
		name string
		a, b *PN
		want []PNSlot
	}{
		{"both empty", mk(), mk(), nil},
		{"into empty", mk(), mk(PNSlot{"a", 1, 2}), []PNSlot{{"a", 1, 2}}},
		{"from empty", mk(PNSlot{"a", 1, 2}), mk(), []PNSlot{{"a", 1, 2}}},
		{"per-slot max", mk(PNSlot{"a", 5, 1}), mk(PNSlot{"a", 3, 4}), []PNSlot{{"a", 5, 4}}},
		{
			"disjoint and shared replicas",
			mk(PNSlot{"a", 1, 0}, PNSlot{"c", 0, 3}), mk(PNSlot{"b", 2, 0}, PNSlot{"c", 1, 1}, PNSlot{"d", 9, 9}),
			[]PNSlot{{"a", 1, 0}, {"b", 2, 0}, {"c", 1, 3}, {"d", 9, 9}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.b.Clone()
			tc.a.Merge(tc.b)
			if got := tc.a.Slots(); !slices.Equal(got, tc.want) {
				t.Fatalf("Merge: %v, want %v", got, tc.want)
			}
			if !tc.b.Equal(b) {
				t.Fatal("Merge modified its argument")
			}
			var p, n uint64
			for _, s := range tc.want {
				p, n = p+s.P, n+s.N
			}
			if tc.a.Value() != int64(p-n) {
				t.Fatalf("Value() = %d, want %d", tc.a.Value(), int64(p-n))
			}
		})
	}
	c := mk(PNSlot{"a", 1, 0})
	c.Merge(nil)
	c.Merge(c)
	if !slices.Equal(c.Slots(), []PNSlot{{"a", 1, 0}}) {
		t.Fatalf("Merge(nil) or Merge(self) changed the counter: %v", c.Slots())
	}
}

// genPN draws a PN counter over a small set of replicas, so that drawn
// counters share replicas, with deltas that cannot overflow.
func genPN() *rapid.Generator[*PN] {
	return rapid.Custom(func(t *rapid.T) *PN {
		c := NewPN()
		n := rapid.IntRange(0, 12).Draw(t, "adds")
		for range n {
			r := rapid.SampledFrom([]string{"a", "b", "c", "d", "e"}).Draw(t, "replica")
			d := rapid.Int64Range(-1e12, 1e12).Draw(t, "delta")
			if err := c.Add(r, d); err != nil {
				t.Fatalf("Add(%q, %d): %v", r, d, err)
			}
		}
		return c
	})
}

func merged(cs ...*PN) *PN {
	out := NewPN()
	for _, c := range cs {
		out.Merge(c)
	}
	return out
}

func TestPNMergeLaws(t *testing.T) {
	t.Run("commutative", rapid.MakeCheck(func(t *rapid.T) {
		a, b := genPN().Draw(t, "a"), genPN().Draw(t, "b")
		ab, ba := a.Clone(), b.Clone()
		ab.Merge(b)
		ba.Merge(a)
		if !ab.Equal(ba) || ab.Value() != ba.Value() {
			t.Fatalf("a∪b = %v, b∪a = %v", ab.Slots(), ba.Slots())
		}
	}))
	t.Run("associative", rapid.MakeCheck(func(t *rapid.T) {
		a, b, c := genPN().Draw(t, "a"), genPN().Draw(t, "b"), genPN().Draw(t, "c")
		left := a.Clone()
		left.Merge(b)
		left.Merge(c)
		bc := b.Clone()
		bc.Merge(c)
		right := a.Clone()
		right.Merge(bc)
		if !left.Equal(right) || left.Value() != right.Value() {
			t.Fatalf("(a∪b)∪c = %v, a∪(b∪c) = %v", left.Slots(), right.Slots())
		}
	}))
	t.Run("idempotent", rapid.MakeCheck(func(t *rapid.T) {
		a, b := genPN().Draw(t, "a"), genPN().Draw(t, "b")
		aa := a.Clone()
		aa.Merge(a.Clone())
		if !aa.Equal(a) || aa.Value() != a.Value() {
			t.Fatalf("a∪a = %v, a = %v", aa.Slots(), a.Slots())
		}
		ab := merged(a, b)
		abb := ab.Clone()
		abb.Merge(b)
		if !abb.Equal(ab) {
			t.Fatalf("(a∪b)∪b = %v, a∪b = %v", abb.Slots(), ab.Slots())
		}
	}))
	t.Run("merge is an upper bound", rapid.MakeCheck(func(t *rapid.T) {
		a, b := genPN().Draw(t, "a"), genPN().Draw(t, "b")
		ab := merged(a, b)
		for _, s := range ab.Slots() {
			for _, x := range []*PN{a, b} {
				for _, xs := range x.Slots() {
					if xs.Replica == s.Replica && (xs.P > s.P || xs.N > s.N) {
						t.Fatalf("merged slot %v below input slot %v", s, xs)
					}
				}
			}
		}
	}))
}

// TestPNReplicasConverge simulates replicas that each apply their own adds
// and exchange states by merging, in a random order, so that each one sees
// only a subset of all adds at any time. Each replica's value must be the sum
// of the adds it has seen, and the merge of all replicas the sum of all adds.
func TestPNReplicasConverge(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nr := rapid.IntRange(1, 5).Draw(t, "replicas")
		names := make([]string, nr)
		states := make([]*PN, nr)
		// seen[i][j]: how many of replica j's adds replica i has seen; a
		// replica's state is its own adds plus prefixes of the others'.
		seen := make([][]int, nr)
		adds := make([][]int64, nr)
		for i := range nr {
			names[i] = fmt.Sprintf("node-%d", i)
			states[i] = NewPN()
			seen[i] = make([]int, nr)
		}
		expected := func(i int) int64 {
			var v int64
			for j := range nr {
				for _, d := range adds[j][:seen[i][j]] {
					v += d
				}
			}
			return v
		}
		var total int64
		steps := rapid.IntRange(0, 60).Draw(t, "steps")
		for range steps {
			i := rapid.IntRange(0, nr-1).Draw(t, "at")
			if rapid.Bool().Draw(t, "add") {
				d := rapid.Int64Range(-1e9, 1e9).Draw(t, "delta")
				if err := states[i].Add(names[i], d); err != nil {
					t.Fatal(err)
				}
				adds[i] = append(adds[i], d)
				seen[i][i]++
				total += d
			} else {
				j := rapid.IntRange(0, nr-1).Draw(t, "from")
				states[i].Merge(states[j].Clone())
				for k := range nr {
					seen[i][k] = max(seen[i][k], seen[j][k])
				}
			}
			if got, want := states[i].Value(), expected(i); got != want {
				t.Fatalf("replica %d value %d, want %d (sum of the adds it saw)", i, got, want)
			}
		}
		// Merge everything in a random order: always the sum of all adds.
		order := rapid.Permutation(states).Draw(t, "order")
		all := merged(order...)
		if all.Value() != total {
			t.Fatalf("merge of all replicas = %d, sum of all adds = %d", all.Value(), total)
		}
		if !all.Equal(merged(states...)) {
			t.Fatal("merge order changed the result")
		}
	})
}

func TestPNCodecErrors(t *testing.T) {
	good := NewPN()
	_ = good.Add("alpha", 3)
	_ = good.Add("beta", -300)
	checkTruncations(t, mustMarshal(t, good), func() binaryCodec { return new(PN) })
	tests := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"wrong format", []byte{formatHash, 0}},
		{"empty name", []byte{formatPN, 1, 0, 1, 0}},
		{"zero slot", []byte{formatPN, 1, 1, 'a', 0, 0}},
		{"unsorted", []byte{formatPN, 2, 1, 'b', 1, 0, 1, 'a', 1, 0}},
		{"duplicate", []byte{formatPN, 2, 1, 'a', 1, 0, 1, 'a', 2, 0}},
		{"count beyond input", []byte{formatPN, 3, 1, 'a', 1, 0}},
		{"name beyond input", []byte{formatPN, 1, 9, 'a', 1, 0}},
		{"huge count", []byte{formatPN, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good.Clone()
			if err := c.UnmarshalBinary(tc.in); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("UnmarshalBinary(%x) = %v, want ErrCorrupt", tc.in, err)
			}
			if !c.Equal(good) || c.Value() != good.Value() {
				t.Fatal("failed UnmarshalBinary changed the receiver")
			}
		})
	}
}

func FuzzPNUnmarshal(f *testing.F) {
	seeds := []*PN{NewPN()}
	c := NewPN()
	_ = c.Add("local", 5)
	_ = c.Add("remote", -7)
	_ = c.Add("local", -1)
	seeds = append(seeds, c)
	big := NewPN()
	_ = big.Add("a", math.MaxInt64)
	_ = big.Add("a", math.MinInt64)
	_ = big.Add("zzz", math.MaxInt64)
	seeds = append(seeds, big)
	for _, s := range seeds {
		f.Add(mustMarshal(f, s))
	}
	f.Add([]byte{formatPN, 1, 1, 'a', 0, 0})
	f.Add([]byte{formatPN, 2, 1, 'b', 1, 0, 1, 'a', 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, ok := checkDecode(t, data, NewPN, func() *PN {
			c := NewPN()
			_ = c.Add("x", 1)
			return c
		}, true)
		if !ok {
			return
		}
		// Value is the saturated sum(P) - sum(N) of the slots.
		var v i128
		for _, s := range c.Slots() {
			v = v.add(i128OfU(s.P)).sub(i128OfU(s.N))
		}
		if c.Value() != v.clamp() {
			t.Fatalf("Value() = %d, want %d", c.Value(), v.clamp())
		}
		// Merge laws hold for decoded states too.
		d := c.Clone()
		d.Merge(c)
		if !d.Equal(c) {
			t.Fatal("decoded counter: merge is not idempotent")
		}
	})
}
