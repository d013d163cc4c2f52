package counter

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
)

func TestHashAdd(t *testing.T) {
	type step struct {
		deltas []FieldDelta
		want   []Field // returned fields; nil with err
		err    error
	}
	tests := []struct {
		name  string
		steps []step
		all   []Field
	}{
		{"empty", nil, []Field{}},
		{"no fields", []step{{nil, nil, ErrInvalid}}, []Field{}},
		{
			"create and add",
			[]step{
				{[]FieldDelta{{"b", 2}, {"a", 1}}, []Field{{"b", 2}, {"a", 1}}, nil},
				{[]FieldDelta{{"a", 10}}, []Field{{"a", 11}}, nil},
			},
			[]Field{{"a", 11}, {"b", 2}},
		},
		{
			"zero delta creates the field",
			[]step{{[]FieldDelta{{"z", 0}}, []Field{{"z", 0}}, nil}},
			[]Field{{"z", 0}},
		},
		{
			"empty field name is a field",
			[]step{{[]FieldDelta{{"", 4}}, []Field{{"", 4}}, nil}},
			[]Field{{"", 4}},
		},
		{
			"repeated name accumulates and is returned once",
			[]step{{[]FieldDelta{{"a", 1}, {"b", 5}, {"a", 2}, {"a", -10}}, []Field{{"a", -7}, {"b", 5}}, nil}},
			[]Field{{"a", -7}, {"b", 5}},
		},
		{
			"overflow of one field changes nothing",
			[]step{
				{[]FieldDelta{{"big", math.MaxInt64}, {"x", 1}}, []Field{{"big", math.MaxInt64}, {"x", 1}}, nil},
				{[]FieldDelta{{"x", 5}, {"new", 3}, {"big", 1}}, nil, ErrOverflow},
			},
			[]Field{{"big", math.MaxInt64}, {"x", 1}},
		},
		{
			"overflow through a repeated name changes nothing",
			[]step{
				{[]FieldDelta{{"a", math.MaxInt64 - 1}}, []Field{{"a", math.MaxInt64 - 1}}, nil},
				{[]FieldDelta{{"a", 1}, {"b", 1}, {"a", 1}}, nil, ErrOverflow},
			},
			[]Field{{"a", math.MaxInt64 - 1}},
		},
		{
			"negative overflow",
			[]step{
				{[]FieldDelta{{"a", math.MinInt64}}, []Field{{"a", math.MinInt64}}, nil},
				{[]FieldDelta{{"a", -1}}, nil, ErrOverflow},
			},
			[]Field{{"a", math.MinInt64}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHash()
			for i, s := range tc.steps {
				got, err := h.Add(s.deltas)
				if s.err == nil && err != nil || s.err != nil && !errors.Is(err, s.err) {
					t.Fatalf("step %d: error %v, want %v", i, err, s.err)
				}
				if !slices.Equal(got, s.want) {
					t.Fatalf("step %d: returned %v, want %v", i, got, s.want)
				}
			}
			if got := h.All(); !slices.Equal(got, tc.all) {
				t.Fatalf("All() = %v, want %v", got, tc.all)
			}
			if h.Len() != len(tc.all) {
				t.Fatalf("Len() = %d, want %d", h.Len(), len(tc.all))
			}
			for _, f := range tc.all {
				if v, ok := h.Get(f.Name); !ok || v != f.Value {
					t.Fatalf("Get(%q) = %d, %v; want %d", f.Name, v, ok, f.Value)
				}
			}
			d := new(Hash)
			if err := d.UnmarshalBinary(mustMarshal(t, h)); err != nil || !slices.Equal(d.All(), h.All()) {
				t.Fatalf("round trip: %v, %v", err, d.All())
			}
		})
	}
}

func TestHashManyFields(t *testing.T) {
	// Beyond 16 deltas Add indexes names with a map; same semantics.
	h := NewHash()
	var deltas []FieldDelta
	for i := range 100 {
		deltas = append(deltas, FieldDelta{fmt.Sprintf("f%02d", i%40), int64(i)})
	}
	got, err := h.Add(deltas)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 40 || h.Len() != 40 {
		t.Fatalf("got %d fields, hash has %d; want 40", len(got), h.Len())
	}
	for k, f := range got {
		want := int64(k + (k + 40) + (k+80)*btoi(k+80 < 100))
		if f.Name != fmt.Sprintf("f%02d", k) || f.Value != want {
			t.Fatalf("field %d = %v, want f%02d=%d", k, f, k, want)
		}
	}
	deltas = append(deltas, FieldDelta{"f00", math.MaxInt64})
	before := h.All()
	if _, err := h.Add(deltas); !errors.Is(err, ErrOverflow) {
		t.Fatalf("overflow in a long list: %v", err)
	}
	if !slices.Equal(h.All(), before) {
		t.Fatal("failed Add changed the hash")
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestHashDel(t *testing.T) {
	tests := []struct {
		name  string
		del   []string
		n     int
		after []Field
	}{
		{"nothing", nil, 0, []Field{{"a", 1}, {"b", 2}, {"c", 3}}},
		{"missing", []string{"x"}, 0, []Field{{"a", 1}, {"b", 2}, {"c", 3}}},
		{"one", []string{"b"}, 1, []Field{{"a", 1}, {"c", 3}}},
		{"repeated name counts once", []string{"a", "a", "x", "c"}, 2, []Field{{"b", 2}}},
		{"all", []string{"c", "b", "a"}, 3, []Field{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHash()
			if _, err := h.Add([]FieldDelta{{"c", 3}, {"a", 1}, {"b", 2}}); err != nil {
				t.Fatal(err)
			}
			if n := h.Del(tc.del...); n != tc.n {
				t.Fatalf("Del(%q) = %d, want %d", tc.del, n, tc.n)
			}
			if got := h.All(); !slices.Equal(got, tc.after) {
				t.Fatalf("All() = %v, want %v", got, tc.after)
			}
			for _, name := range tc.del {
				if _, ok := h.Get(name); ok {
					t.Fatalf("Get(%q) found a deleted field", name)
				}
			}
		})
	}
	var zero Hash
	if zero.Del("a") != 0 || zero.Len() != 0 || len(zero.All()) != 0 {
		t.Fatal("zero Hash is not empty")
	}
}

func TestHashCodecErrors(t *testing.T) {
	good := NewHash()
	_, _ = good.Add([]FieldDelta{{"a", 1}, {"bb", -1 << 40}, {"", 7}})
	checkTruncations(t, mustMarshal(t, good), func() binaryCodec { return new(Hash) })
	tests := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"wrong format", []byte{formatPN, 0}},
		{"unsorted", []byte{formatHash, 2, 1, 'b', 2, 1, 'a', 2}},
		{"duplicate", []byte{formatHash, 2, 1, 'a', 2, 1, 'a', 4}},
		{"duplicate empty", []byte{formatHash, 2, 0, 2, 0, 4}},
		{"count beyond input", []byte{formatHash, 4, 1, 'a', 2}},
		{"name beyond input", []byte{formatHash, 1, 5, 'a', 2}},
		{"non-minimal value", []byte{formatHash, 1, 1, 'a', 0x82, 0x00}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := good.Clone()
			if err := h.UnmarshalBinary(tc.in); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("UnmarshalBinary(%x) = %v, want ErrCorrupt", tc.in, err)
			}
			if !slices.Equal(h.All(), good.All()) {
				t.Fatal("failed UnmarshalBinary changed the receiver")
			}
		})
	}
}

func FuzzHashUnmarshal(f *testing.F) {
	f.Add(mustMarshal(f, NewHash()))
	h := NewHash()
	_, _ = h.Add([]FieldDelta{{"clicks", 10}, {"views", 1000}, {"", -3}, {"\xff", math.MinInt64}})
	f.Add(mustMarshal(f, h))
	f.Add([]byte{formatHash, 2, 1, 'b', 2, 1, 'a', 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, ok := checkDecode(t, data, NewHash, func() *Hash {
			h := NewHash()
			_, _ = h.Add([]FieldDelta{{"q", 1}})
			return h
		}, true)
		if !ok {
			return
		}
		all := h.All()
		if len(all) != h.Len() {
			t.Fatalf("All() has %d fields, Len() %d", len(all), h.Len())
		}
		for i, f := range all {
			if i > 0 && all[i-1].Name >= f.Name {
				t.Fatal("All() is not strictly sorted")
			}
			if v, ok := h.Get(f.Name); !ok || v != f.Value {
				t.Fatalf("Get(%q) = %d, %v; All says %d", f.Name, v, ok, f.Value)
			}
		}
	})
}
