package counter

import (
	"bytes"
	"encoding"
	"errors"
	"math"
	"testing"
)

func TestAddInt64(t *testing.T) {
	const (
		max = math.MaxInt64
		min = math.MinInt64
	)
	tests := []struct {
		name     string
		a, b     int64
		want     int64
		overflow bool
	}{
		{"zero", 0, 0, 0, false},
		{"small", 2, 3, 5, false},
		{"mixed signs", -7, 3, -4, false},
		{"max plus zero", max, 0, max, false},
		{"min plus zero", min, 0, min, false},
		{"max plus one", max, 1, 0, true},
		{"one plus max", 1, max, 0, true},
		{"max plus max", max, max, 0, true},
		{"min minus one", min, -1, 0, true},
		{"minus one plus min", -1, min, 0, true},
		{"min plus min", min, min, 0, true},
		{"max plus min", max, min, -1, false},
		{"min plus max", min, max, -1, false},
		{"max minus one plus one", max - 1, 1, max, false},
		{"min plus one minus one", min + 1, -1, min, false},
		{"half plus half", 1 << 62, 1<<62 - 1, max, false},
		{"half plus half overflows", 1 << 62, 1 << 62, 0, true},
		{"negative halves", -(1 << 62), -(1 << 62), min, false},
		{"negative halves overflow", -(1 << 62), -(1 << 62) - 1, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := AddInt64(tc.a, tc.b)
			if tc.overflow {
				if !errors.Is(err, ErrOverflow) {
					t.Fatalf("AddInt64(%d, %d) = %d, %v; want ErrOverflow", tc.a, tc.b, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("AddInt64(%d, %d) = %d, %v; want %d", tc.a, tc.b, got, err, tc.want)
			}
		})
	}
}

func TestI128(t *testing.T) {
	tests := []struct {
		name  string
		terms []int64
		want  int64 // clamped
		fits  bool
	}{
		{"empty", nil, 0, true},
		{"max", []int64{math.MaxInt64}, math.MaxInt64, true},
		{"max plus one", []int64{math.MaxInt64, 1}, math.MaxInt64, false},
		{"max plus one minus one", []int64{math.MaxInt64, 1, -1}, math.MaxInt64, true},
		{"min minus one", []int64{math.MinInt64, -1}, math.MinInt64, false},
		{"min min max max", []int64{math.MinInt64, math.MinInt64, math.MaxInt64, math.MaxInt64}, -2, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s i128
			for _, v := range tc.terms {
				s = s.addInt64(v)
			}
			if s.fits() != tc.fits || s.clamp() != tc.want {
				t.Fatalf("sum %v: fits=%v clamp=%d, want %v %d", tc.terms, s.fits(), s.clamp(), tc.fits, tc.want)
			}
		})
	}
	big := i128Of(math.MaxInt64).addInt64(10)
	if !sumMoveOK(big, big.addInt64(-5)) || sumMoveOK(big, big.addInt64(5)) {
		t.Fatal("sumMoveOK above the range: want towards zero allowed, away refused")
	}
	small := i128Of(math.MinInt64).addInt64(-10)
	if !sumMoveOK(small, small.addInt64(5)) || sumMoveOK(small, small.addInt64(-5)) {
		t.Fatal("sumMoveOK below the range: want towards zero allowed, away refused")
	}
	if sumMoveOK(i128Of(math.MaxInt64), i128Of(math.MaxInt64).addInt64(1)) {
		t.Fatal("sumMoveOK let a fitting sum leave the range")
	}
}

func TestDecoderVarints(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"zero", []byte{0}, true},
		{"one byte", []byte{0x7f}, true},
		{"two bytes", []byte{0x80, 0x01}, true},
		{"non-minimal zero", []byte{0x80, 0x00}, false},
		{"non-minimal one", []byte{0x81, 0x00}, false},
		{"truncated", []byte{0x80}, false},
		{"empty", nil, false},
		{"overflow", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, false},
		{"max uint64", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &decoder{b: tc.in, kind: "test"}
			_, err := d.uvarint()
			if (err == nil) != tc.ok {
				t.Fatalf("uvarint(%x) error = %v, want ok=%v", tc.in, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
		})
	}
}

// binaryCodec is what every counter kind implements.
type binaryCodec interface {
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
}

func mustMarshal(t fataler, v encoding.BinaryMarshaler) []byte {
	t.Helper()
	b, err := v.MarshalBinary()
	if err != nil {
		t.Fatal("MarshalBinary: ", err)
	}
	return b
}

// checkDecode is the body of every fuzz target. It decodes data into a fresh
// value and into a non-empty one and checks that
//   - an error wraps ErrCorrupt and leaves the non-empty receiver unchanged;
//   - a success re-encodes to an encoding that decodes to the same encoding
//     again, and, when the kind's encoding is strictly canonical, to data
//     itself (the decoder accepts exactly what the encoder produces).
//
// It returns the decoded value, or the zero T on error.
func checkDecode[T binaryCodec](t *testing.T, data []byte, fresh, filled func() T, canonical bool) (T, bool) {
	t.Helper()
	var zero T
	f := filled()
	before := mustMarshal(t, f)
	if err := f.UnmarshalBinary(data); err != nil {
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("UnmarshalBinary error %v does not wrap ErrCorrupt", err)
		}
		if after := mustMarshal(t, f); !bytes.Equal(before, after) {
			t.Fatalf("failed UnmarshalBinary changed the receiver:\n%x\n%x", before, after)
		}
		v := fresh()
		if err2 := v.UnmarshalBinary(data); err2 == nil {
			t.Fatalf("UnmarshalBinary into a fresh value accepted what a filled one rejected (%v)", err)
		}
		return zero, false
	}
	v := fresh()
	if err := v.UnmarshalBinary(data); err != nil {
		t.Fatalf("UnmarshalBinary into a fresh value: %v", err)
	}
	enc := mustMarshal(t, v)
	if after := mustMarshal(t, f); !bytes.Equal(enc, after) {
		t.Fatalf("decoding into a filled and a fresh value differ:\n%x\n%x", enc, after)
	}
	if canonical && !bytes.Equal(enc, data) {
		t.Fatalf("decoder accepted a non-canonical encoding:\n in %x\nout %x", data, enc)
	}
	w := fresh()
	if err := w.UnmarshalBinary(enc); err != nil {
		t.Fatalf("re-decoding the re-encoding: %v", err)
	}
	if enc2 := mustMarshal(t, w); !bytes.Equal(enc, enc2) {
		t.Fatalf("encoding is not a fixed point:\n%x\n%x", enc, enc2)
	}
	return v, true
}

// checkTruncations decodes every proper prefix of a valid encoding, and the
// encoding with a byte appended, and expects ErrCorrupt for each.
func checkTruncations(t *testing.T, enc []byte, fresh func() binaryCodec) {
	t.Helper()
	for i := range len(enc) {
		if err := fresh().UnmarshalBinary(enc[:i]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("prefix of %d/%d bytes: error %v, want ErrCorrupt", i, len(enc), err)
		}
	}
	if err := fresh().UnmarshalBinary(append(enc[:len(enc):len(enc)], 0)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("trailing byte: error %v, want ErrCorrupt", err)
	}
}
