package counter

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestFloatAdd(t *testing.T) {
	// Each case: increments applied in turn from 0, and the texts Redis 7.0
	// (x86-64) answers for them.
	cases := []struct {
		name  string
		incrs []string
		want  []string
	}{
		{"tenths", []string{"0.1", "0.2"}, []string{"0.1", "0.3"}},
		{"big", []string{"1e30", "1"}, []string{"1000000000000000000024696061952", "1000000000000000000024696061952"}},
		{"tiny rounds to 0", []string{"1e-20", "0"}, []string{"0", "0"}},
		{"hex", []string{"0x1p3", "1"}, []string{"8", "9"}},
		{"exponent", []string{"5.0e3", "0"}, []string{"5000", "5000"}},
		{"int then tenth", []string{"1", "0.1"}, []string{"1", "1.1"}},
		{"tie to even down", []string{"0.000003814697265625"}, []string{"0.00000381469726562"}},
		{"tie to even up", []string{"0.000011444091796875"}, []string{"0.00001144409179688"}},
		{"negative zero", []string{"-0"}, []string{"0"}},
		{"plus sign", []string{"+1.5", "-3"}, []string{"1.5", "-1.5"}},
		{"int64 max plus 1", []string{"9223372036854775807", "1"}, []string{"9223372036854775807", "9223372036854775808"}},
		{"points", []string{".5", "5."}, []string{"0.5", "5.5"}},
		{"exact zero tiny exponent", []string{"0e-9999"}, []string{"0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var x Float
			for i, in := range c.incrs {
				got, err := x.Add(in)
				if err != nil || got != c.want[i] {
					t.Fatalf("add %q = %q, %v; want %q", in, got, err, c.want[i])
				}
			}
		})
	}
}

func TestFloatRefuses(t *testing.T) {
	for _, in := range []string{"", " 1", "1 ", "nan", "NaN", "1e-5000", "1e5000", "abc", "1e", "0x", "0xp1", ".", "-", "+", "1..2", "1e+", "infx", "0x1p", "\t1", "1\x00x", "\x00"} {
		var x Float
		x.Add("2.5")
		if _, err := x.Add(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("add %q: err %v, want ErrInvalid", in, err)
		}
		if x.Text() != "2.5" {
			t.Errorf("add %q changed the value to %q", in, x.Text())
		}
	}
	for _, in := range []string{"inf", "-Infinity", "INF"} {
		var x Float
		if _, err := x.Add(in); !errors.Is(err, ErrOverflow) {
			t.Errorf("add %q: err %v, want ErrOverflow", in, err)
		}
	}
	var x Float
	if _, err := x.Add("1e4932"); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Add("1e4932"); !errors.Is(err, ErrOverflow) {
		t.Fatalf("sum beyond the range: %v", err)
	}
}

// FuzzParseFloat: the parser never panics, accepts only what it can print
// back canonically, and a Float's encoding round-trips.
func FuzzParseFloat(f *testing.F) {
	for _, s := range []string{"0.1", "-0", "1e30", "0x1.8p3", "inf", "nan", " 1", "1e-5000", "1e4932",
		"9223372036854775807", ".5", "5.", "1\x00x", "\x00", "0e-99999999999", "0x.8p-16445", "3.6e-4951"} {
		f.Add(s, "0.25")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		v, err := ParseFloat(a)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseFloat(%q): %v does not wrap ErrInvalid", a, err)
			}
			if CanonicalFloat(a) {
				t.Fatalf("CanonicalFloat(%q) accepts what ParseFloat refuses", a)
			}
			return
		}
		if v.IsInf() {
			return
		}
		text := formatLD(v)
		if canon := CanonicalFloat(a); canon != (a == text) {
			t.Fatalf("CanonicalFloat(%q) = %v, prints as %q", a, canon, text)
		}
		if !CanonicalFloat(text) {
			t.Fatalf("%q prints as %q, which CanonicalFloat refuses", a, text)
		}
		again, err := ParseFloat(text)
		if err != nil || formatLD(again) != text {
			t.Fatalf("%q prints as %q, which parses back to %v (%v)", a, text, again, err)
		}
		var x Float
		got, err := x.Add(a)
		if err != nil {
			t.Fatalf("add %q to 0: %v", a, err)
		}
		if got != text && !(got == "0" && text == "0") {
			t.Fatalf("0 + %q = %q, want %q", a, got, text)
		}
		if _, err := x.Add(b); err != nil && x.Text() != got {
			t.Fatalf("failed add %q changed %q to %q", b, got, x.Text())
		}
		enc, _ := x.MarshalBinary()
		var y Float
		if err := y.UnmarshalBinary(enc); err != nil || y.Text() != x.Text() {
			t.Fatalf("round trip of %q: %q, %v", x.Text(), y.Text(), err)
		}
		// A corrupt encoding is refused and leaves the receiver unchanged.
		if err := y.UnmarshalBinary(append([]byte{floatFormat}, b...)); err == nil {
			if p, perr := ParseFloat(b); b != "" && (perr != nil || formatLD(p) != b) {
				t.Fatalf("non-canonical %q decoded", b)
			}
		} else if y.Text() != x.Text() {
			t.Fatalf("failed decode changed the value")
		}
	})
}

// TestFloatProperties: integer increments within 2^53 sum exactly, as on
// an int64 counter; adding an increment and then its negation (both
// exactly representable) restores the text; the encoding round-trips.
func TestFloatProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var x Float
		var sum int64
		for _, d := range rapid.SliceOfN(rapid.Int64Range(-1<<40, 1<<40), 1, 50).Draw(t, "ints") {
			sum += d
			got, err := x.Add(strconv.FormatInt(d, 10))
			if err != nil || got != strconv.FormatInt(sum, 10) {
				t.Fatalf("after +%d: %q, %v; want %d", d, got, err, sum)
			}
			if v, ok := x.Int64(); !ok || v != sum {
				t.Fatalf("Int64 = %d, %v; want %d", v, ok, sum)
			}
		}
		// Quarters are exact in binary: x + q - q == x.
		q := strconv.FormatFloat(float64(rapid.Int64Range(-1<<20, 1<<20).Draw(t, "q"))/4, 'f', -1, 64)
		before := x.Text()
		if _, err := x.Add(q); err != nil {
			t.Fatal(err)
		}
		if _, err := x.Add(negate(q)); err != nil || x.Text() != before {
			t.Fatalf("%s + %s - %s = %s (%v)", before, q, q, x.Text(), err)
		}
		enc, _ := x.MarshalBinary()
		var y Float
		if err := y.UnmarshalBinary(enc); err != nil || y.Text() != x.Text() {
			t.Fatalf("round trip %q: %q %v", x.Text(), y.Text(), err)
		}
	})
}

func negate(s string) string {
	if strings.HasPrefix(s, "-") {
		return s[1:]
	}
	return "-" + s
}
