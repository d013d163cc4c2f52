package counter

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"testing"

	"pgregory.net/rapid"
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
				{[]FieldDelta{{Name: "b", Delta: 2}, {Name: "a", Delta: 1}}, []Field{{Name: "b", Value: 2}, {Name: "a", Value: 1}}, nil},
				{[]FieldDelta{{Name: "a", Delta: 10}}, []Field{{Name: "a", Value: 11}}, nil},
			},
			[]Field{{Name: "a", Value: 11}, {Name: "b", Value: 2}},
		},
		{
			"zero delta creates the field",
			[]step{{[]FieldDelta{{Name: "z", Delta: 0}}, []Field{{Name: "z", Value: 0}}, nil}},
			[]Field{{Name: "z", Value: 0}},
		},
		{
			"empty field name is a field",
			[]step{{[]FieldDelta{{Name: "", Delta: 4}}, []Field{{Name: "", Value: 4}}, nil}},
			[]Field{{Name: "", Value: 4}},
		},
		{
			"repeated name accumulates and is returned once",
			[]step{{[]FieldDelta{{Name: "a", Delta: 1}, {Name: "b", Delta: 5}, {Name: "a", Delta: 2}, {Name: "a", Delta: -10}}, []Field{{Name: "a", Value: -7}, {Name: "b", Value: 5}}, nil}},
			[]Field{{Name: "a", Value: -7}, {Name: "b", Value: 5}},
		},
		{
			"overflow of one field changes nothing",
			[]step{
				{[]FieldDelta{{Name: "big", Delta: math.MaxInt64}, {Name: "x", Delta: 1}}, []Field{{Name: "big", Value: math.MaxInt64}, {Name: "x", Value: 1}}, nil},
				{[]FieldDelta{{Name: "x", Delta: 5}, {Name: "new", Delta: 3}, {Name: "big", Delta: 1}}, nil, ErrOverflow},
			},
			[]Field{{Name: "big", Value: math.MaxInt64}, {Name: "x", Value: 1}},
		},
		{
			"overflow through a repeated name changes nothing",
			[]step{
				{[]FieldDelta{{Name: "a", Delta: math.MaxInt64 - 1}}, []Field{{Name: "a", Value: math.MaxInt64 - 1}}, nil},
				{[]FieldDelta{{Name: "a", Delta: 1}, {Name: "b", Delta: 1}, {Name: "a", Delta: 1}}, nil, ErrOverflow},
			},
			[]Field{{Name: "a", Value: math.MaxInt64 - 1}},
		},
		{
			"negative overflow",
			[]step{
				{[]FieldDelta{{Name: "a", Delta: math.MinInt64}}, []Field{{Name: "a", Value: math.MinInt64}}, nil},
				{[]FieldDelta{{Name: "a", Delta: -1}}, nil, ErrOverflow},
			},
			[]Field{{Name: "a", Value: math.MinInt64}},
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
		deltas = append(deltas, FieldDelta{Name: fmt.Sprintf("f%02d", i%40), Delta: int64(i)})
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
	deltas = append(deltas, FieldDelta{Name: "f00", Delta: math.MaxInt64})
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
		{"nothing", nil, 0, []Field{{Name: "a", Value: 1}, {Name: "b", Value: 2}, {Name: "c", Value: 3}}},
		{"missing", []string{"x"}, 0, []Field{{Name: "a", Value: 1}, {Name: "b", Value: 2}, {Name: "c", Value: 3}}},
		{"one", []string{"b"}, 1, []Field{{Name: "a", Value: 1}, {Name: "c", Value: 3}}},
		{"repeated name counts once", []string{"a", "a", "x", "c"}, 2, []Field{{Name: "b", Value: 2}}},
		{"all", []string{"c", "b", "a"}, 3, []Field{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHash()
			if _, err := h.Add([]FieldDelta{{Name: "c", Delta: 3}, {Name: "a", Delta: 1}, {Name: "b", Delta: 2}}); err != nil {
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
	_, _ = good.Add([]FieldDelta{{Name: "a", Delta: 1}, {Name: "bb", Delta: -1 << 40}, {Name: "", Delta: 7}})
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
	_, _ = h.Add([]FieldDelta{{Name: "clicks", Delta: 10}, {Name: "views", Delta: 1000}, {Name: "", Delta: -3}, {Name: "\xff", Delta: math.MinInt64}})
	f.Add(mustMarshal(f, h))
	f.Add([]byte{formatHash, 2, 1, 'b', 2, 1, 'a', 2})
	_, _ = h.Add([]FieldDelta{{Name: "ratio", Float: "0.1"}, {Name: "big", Float: "1e30"}})
	f.Add(mustMarshal(f, h))
	f.Add([]byte{formatHashFloat, 2, 1, 'a', 4, '1', '.', '5', 1, 'b', 0, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, ok := checkDecode(t, data, NewHash, func() *Hash {
			h := NewHash()
			_, _ = h.Add([]FieldDelta{{Name: "q", Delta: 1}})
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
			if g, ok := h.GetField(f.Name); !ok || g != f {
				t.Fatalf("GetField(%q) = %v, %v; All says %v", f.Name, g, ok, f)
			}
			if f.IsFloat() && (!CanonicalFloat(f.Float) || fieldOf(f.Name, f.Float) != f) {
				t.Fatalf("float field %v is not canonical", f)
			}
		}
	})
}

// TestHashFloatFields: HINCRBYFLOAT on fields, with Redis 7.0's answers
// (x86-64), and the integer/float boundary Redis's HINCRBY sees.
func TestHashFloatFields(t *testing.T) {
	fl := func(name, incr string) FieldDelta { return FieldDelta{Name: name, Float: incr} }
	h := NewHash()
	steps := []struct {
		deltas []FieldDelta
		want   []Field
		err    error
	}{
		{[]FieldDelta{fl("a", "0.1"), fl("a", "0.2")}, []Field{{Name: "a", Float: "0.3"}}, nil},
		{[]FieldDelta{fl("b", "1.5"), fl("b", "0.5")}, []Field{{Name: "b", Value: 2}}, nil},
		{[]FieldDelta{{Name: "b", Delta: 1}}, []Field{{Name: "b", Value: 3}}, nil},
		{[]FieldDelta{{Name: "c", Delta: 7}, fl("c", "-0.25")}, []Field{{Name: "c", Float: "6.75"}}, nil},
		{[]FieldDelta{fl("d", "1e30")}, []Field{{Name: "d", Float: "1000000000000000000024696061952"}}, nil},
		{[]FieldDelta{fl("e", "9223372036854775807"), fl("e", "1")}, []Field{{Name: "e", Float: "9223372036854775808"}}, nil},
		{[]FieldDelta{fl("z", "-0")}, []Field{{Name: "z", Value: 0}}, nil},
		// Refused, nothing changes: integer add to a float, bad text, infinity.
		{[]FieldDelta{{Name: "b", Delta: 1}, {Name: "a", Delta: 1}}, nil, ErrNotInteger},
		{[]FieldDelta{{Name: "e", Delta: 1}}, nil, ErrNotInteger},
		{[]FieldDelta{fl("b", "1"), fl("a", "abc")}, nil, ErrInvalid},
		{[]FieldDelta{fl("a", "inf")}, nil, ErrFloatRange},
		{[]FieldDelta{fl("n", "1e4932"), fl("n", "1e4932")}, nil, ErrFloatRange},
	}
	for i, s := range steps {
		got, err := h.Add(s.deltas)
		if !errors.Is(err, s.err) || (s.err == nil && !slices.Equal(got, s.want)) {
			t.Fatalf("step %d %v: %v, %v; want %v, %v", i, s.deltas, got, err, s.want, s.err)
		}
	}
	want := []Field{{Name: "a", Float: "0.3"}, {Name: "b", Value: 3}, {Name: "c", Float: "6.75"},
		{Name: "d", Float: "1000000000000000000024696061952"}, {Name: "e", Float: "9223372036854775808"}, {Name: "z"}}
	if all := h.All(); !slices.Equal(all, want) {
		t.Fatalf("All = %v, want %v", all, want)
	}
	if _, ok := h.Get("a"); ok {
		t.Fatal("Get of a float field reports an integer")
	}
	if f, ok := h.GetField("a"); !ok || f.Text() != "0.3" {
		t.Fatalf("GetField(a) = %v, %v", f, ok)
	}
	c := h.Clone()
	if n, err := c.Set([]FieldDelta{{Name: "a", Delta: 4}, {Name: "b", Float: "2.5"}, {Name: "new", Float: "0.5"}}, false); n != 1 || err != nil {
		t.Fatalf("Set = %d, %v", n, err)
	}
	if f, _ := c.GetField("a"); f != (Field{Name: "a", Value: 4}) {
		t.Fatalf("a after Set: %v", f)
	}
	if f, _ := c.GetField("b"); f != (Field{Name: "b", Float: "2.5"}) {
		t.Fatalf("b after Set: %v", f)
	}
	for _, bad := range []string{"1.50", "1e3", "-0", "0.0", " 1", "inf", "abc", "0x10", "+1"} {
		if _, err := c.Set([]FieldDelta{{Name: "x", Delta: 1}, {Name: "y", Float: bad}}, false); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Set of %q: %v", bad, err)
		}
		if _, ok := c.GetField("x"); ok {
			t.Fatalf("refused Set of %q created a field", bad)
		}
	}
	if n, _ := c.Set([]FieldDelta{{Name: "a", Float: "1.5"}, {Name: "q", Float: "2"}}, true); n != 1 {
		t.Fatalf("Set onlyAbsent created %d", n)
	}
	if f, _ := c.GetField("q"); f != (Field{Name: "q", Value: 2}) {
		t.Fatalf("float text 2 is stored as %v", f)
	}
	if h.Len() != 6 || c.Len() != 8 || c.Del("a", "b", "zz") != 2 || c.Len() != 6 {
		t.Fatalf("Len/Del: %d %d", h.Len(), c.Len())
	}
	// Encoding: float fields round-trip; a hash without them keeps 0x51.
	enc := mustMarshal(t, h)
	if enc[0] != formatHashFloat {
		t.Fatalf("format %#x", enc[0])
	}
	var back Hash
	if err := back.UnmarshalBinary(enc); err != nil || !slices.Equal(back.All(), h.All()) {
		t.Fatalf("round trip: %v, %v", back.All(), err)
	}
	c.Del("c", "d", "e", "new")
	if enc := mustMarshal(t, c); enc[0] != formatHash {
		t.Fatalf("no float field left, format %#x", enc[0])
	}
}

func TestHashFloatUnmarshalRefuses(t *testing.T) {
	for name, in := range map[string][]byte{
		"float format, no float":   {formatHashFloat, 1, 1, 'a', 0, 2},
		"integer text as float":    {formatHashFloat, 1, 1, 'a', 2, '5'},
		"non-canonical float":      {formatHashFloat, 1, 1, 'a', 5, '1', '.', '5', '0'},
		"float text beyond input":  {formatHashFloat, 1, 1, 'a', 9, '1', '.', '5'},
		"unsorted":                 {formatHashFloat, 2, 1, 'b', 4, '1', '.', '5', 1, 'a', 0, 2},
		"infinite":                 {formatHashFloat, 1, 1, 'a', 4, 'i', 'n', 'f'},
		"minus zero":               {formatHashFloat, 1, 1, 'a', 3, '-', '0'},
		"float field, int64 value": {formatHashFloat, 1, 1, 'a', 4, '0', '.', '5', 2},
	} {
		var h Hash
		if err := h.UnmarshalBinary(in); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	var h Hash
	if err := h.UnmarshalBinary([]byte{formatHashFloat, 2, 1, 'a', 4, '1', '.', '5', 1, 'b', 0, 2}); err != nil {
		t.Fatal(err)
	}
	if got := h.All(); !slices.Equal(got, []Field{{Name: "a", Float: "1.5"}, {Name: "b", Value: 1}}) {
		t.Fatal(got)
	}
}

// TestHashFloatMatchesFloat: float increments of a field answer what the
// same increments of a float counter answer, whatever integer adds come
// between while the value is an integer.
func TestHashFloatMatchesFloat(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := NewHash()
		var x Float
		for i, n := 0, rapid.IntRange(1, 20).Draw(t, "n"); i < n; i++ {
			if rapid.Bool().Draw(t, "int") {
				d := rapid.Int64Range(-1<<40, 1<<40).Draw(t, "d")
				_, ok := x.Int64()
				_, err := h.Add([]FieldDelta{{Name: "f", Delta: d}})
				if ok != (err == nil) {
					t.Fatalf("integer add to %q: %v", x.Text(), err)
				}
				if ok {
					x.Add(strconv.FormatInt(d, 10))
				}
				continue
			}
			incr := rapid.SampledFrom([]string{"0.1", "-0.3", "1.5", "2.5e-3", "1e20", "-1e20", "3", "0x1p-4", "-7.125"}).Draw(t, "incr")
			want, werr := x.Add(incr)
			got, err := h.Add([]FieldDelta{{Name: "f", Float: incr}})
			if (werr == nil) != (err == nil) || (err == nil && got[0].Text() != want) {
				t.Fatalf("+%s: %v %v, float counter %q %v", incr, got, err, want, werr)
			}
		}
		enc := mustMarshal(t, h)
		var back Hash
		if err := back.UnmarshalBinary(enc); err != nil || !slices.Equal(back.All(), h.All()) {
			t.Fatalf("round trip %v: %v %v", h.All(), back.All(), err)
		}
	})
}
