package counter

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestSharded(t *testing.T) {
	type add struct {
		shard int
		delta int64
		err   error
	}
	tests := []struct {
		name   string
		n      int
		adds   []add
		value  int64
		shards []int64
	}{
		{"empty", 3, nil, 0, []int64{0, 0, 0}},
		{"n below one is one", 0, []add{{0, 5, nil}, {1, 1, ErrInvalid}}, 5, []int64{5}},
		{"spread", 4, []add{{0, 1, nil}, {1, 2, nil}, {3, -10, nil}, {1, 2, nil}}, -5, []int64{1, 4, 0, -10}},
		{"shard out of range", 2, []add{{2, 1, ErrInvalid}, {-1, 1, ErrInvalid}, {1, 7, nil}}, 7, []int64{0, 7}},
		{
			"sum overflow refused, state unchanged", 2,
			[]add{{0, math.MaxInt64, nil}, {1, 1, ErrOverflow}, {1, -1, nil}, {1, 1, nil}},
			math.MaxInt64, []int64{math.MaxInt64, 0},
		},
		{
			"negative sum overflow refused", 2,
			[]add{{0, math.MinInt64, nil}, {1, -1, ErrOverflow}},
			math.MinInt64, []int64{math.MinInt64, 0},
		},
		{
			"shard overflow while the sum fits", 2,
			[]add{{0, math.MaxInt64, nil}, {1, -1, nil}, {0, 1, ErrOverflow}, {1, 1, nil}},
			math.MaxInt64, []int64{math.MaxInt64, 0},
		},
		{
			"sum back inside after opposite shards", 2,
			[]add{{0, math.MaxInt64, nil}, {1, math.MinInt64, nil}, {0, -5, nil}},
			-6, []int64{math.MaxInt64 - 5, math.MinInt64},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSharded(tc.n)
			for i, a := range tc.adds {
				err := s.Add(a.shard, a.delta)
				if a.err == nil && err != nil || a.err != nil && !errors.Is(err, a.err) {
					t.Fatalf("add %d (%d, %d): error %v, want %v", i, a.shard, a.delta, err, a.err)
				}
			}
			if s.Value() != tc.value {
				t.Errorf("Value() = %d, want %d", s.Value(), tc.value)
			}
			if got := s.Shards(); !slices.Equal(got, tc.shards) {
				t.Errorf("Shards() = %v, want %v", got, tc.shards)
			}
			if s.Len() != len(tc.shards) {
				t.Errorf("Len() = %d, want %d", s.Len(), len(tc.shards))
			}
			c := new(Sharded)
			if err := c.UnmarshalBinary(mustMarshal(t, s)); err != nil {
				t.Fatalf("round trip: %v", err)
			}
			if c.Value() != s.Value() || !slices.Equal(c.Shards(), s.Shards()) {
				t.Fatalf("round trip: got %v (%d), want %v (%d)", c.Shards(), c.Value(), s.Shards(), s.Value())
			}
		})
	}
}

func TestShardedCopies(t *testing.T) {
	s := NewSharded(2)
	_ = s.Add(0, 3)
	sh := s.Shards()
	sh[0] = 100
	c := s.Clone()
	_ = c.Add(1, 4)
	if s.Shards()[0] != 3 || s.Value() != 3 || c.Value() != 7 {
		t.Fatalf("Shards or Clone alias the receiver: s=%v c=%v", s.Shards(), c.Shards())
	}
}

func TestShardedCodecErrors(t *testing.T) {
	good := NewSharded(3)
	_ = good.Add(0, -5)
	_ = good.Add(2, 1<<40)
	enc := mustMarshal(t, good)
	checkTruncations(t, enc, func() binaryCodec { return new(Sharded) })
	r := formatShardedReplicated
	tests := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"wrong format", []byte{formatPN, 1, 0}},
		{"no shards", []byte{formatSharded, 0}},
		{"count beyond input", []byte{formatSharded, 5, 0, 0}},
		{"sum overflows", []byte{formatSharded, 2, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 2}},
		{"non-minimal varint", []byte{formatSharded, 1, 0x80, 0x00}},
		{"huge count", []byte{formatSharded, 0xff, 0xff, 0xff, 0xff, 0x0f}},
		// The replicated format (sharded_crdt_test.go).
		{"no name", []byte{r, 0, 1, 1, 2, 0}},
		{"no shards after the name", []byte{r, 1, 'a', 1, 0, 0}},
		{"shards without seq", []byte{r, 1, 'a', 0, 1, 2, 0}},
		{"remote seq 0", []byte{r, 1, 'a', 1, 1, 2, 1, 1, 'b', 0, 2}},
		{"remote named like local", []byte{r, 1, 'a', 1, 1, 2, 1, 1, 'a', 1, 2}},
		{"remote empty name", []byte{r, 1, 'a', 1, 1, 2, 1, 0, 1, 2}},
		{"unsorted remotes", []byte{r, 1, 'a', 1, 1, 2, 2, 1, 'c', 1, 2, 1, 'b', 1, 2}},
		{"duplicate remotes", []byte{r, 1, 'a', 1, 1, 2, 2, 1, 'b', 1, 2, 1, 'b', 2, 2}},
		{"local sum overflows", []byte{r, 1, 'a', 1, 2, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 2, 0}},
		{"huge remote count", []byte{r, 1, 'a', 1, 1, 2, 0xff, 0xff, 0xff, 0xff, 0x0f}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSharded(1)
			_ = s.Add(0, 9)
			if err := s.UnmarshalBinary(tc.in); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("UnmarshalBinary(%x) = %v, want ErrCorrupt", tc.in, err)
			}
			if s.Value() != 9 || s.Len() != 1 {
				t.Fatalf("failed UnmarshalBinary changed the receiver")
			}
		})
	}
}

func FuzzShardedUnmarshal(f *testing.F) {
	for _, shards := range [][]int64{{0}, {1, -1, 5}, {math.MaxInt64, 0}, {math.MinInt64}, {1, 2, 3, 4, 5, 6, 7, 8}} {
		s := NewSharded(len(shards))
		for i, v := range shards {
			_ = s.Add(i, v)
		}
		f.Add(mustMarshal(f, s))
	}
	f.Add([]byte{formatSharded})
	f.Add([]byte{formatSharded, 2, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, ok := checkDecode(t, data, func() *Sharded { return new(Sharded) },
			func() *Sharded { s := NewSharded(2); _ = s.Add(1, 42); return s }, true)
		if !ok {
			return
		}
		var sum i128
		for _, x := range s.Slots() { // the local slot is the sum of the shards
			sum = sum.addInt64(x.Sum)
		}
		if sum.clamp() != s.Value() {
			t.Fatalf("Value() = %d, slots %v", s.Value(), s.Slots())
		}
		// The decoded counter keeps working: Add respects the sum bound.
		if err := s.Add(0, 1); err == nil && s.Value() == math.MinInt64 {
			t.Fatal("Add wrapped around")
		}
	})
}
