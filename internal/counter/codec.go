package counter

import (
	"encoding/binary"
	"fmt"
)

// Format bytes: the first byte of every encoding. Each kind has its own so
// that handing one kind's bytes to another kind's UnmarshalBinary fails
// instead of decoding garbage. A future incompatible layout gets a new byte.
const (
	formatSharded byte = 0x11
	formatPN      byte = 0x21
	formatHLL     byte = 0x31
	formatWindow  byte = 0x41
	formatHash    byte = 0x51
	// formatHashFloat is a hash with float fields (hash.go); one without
	// keeps formatHash, so its encoding did not change.
	formatHashFloat byte = 0x52
)

// decoder reads the varint-based encodings of this package. Every failure
// wraps ErrCorrupt. Varints must be minimally encoded, so that each value
// has exactly one encoding.
type decoder struct {
	b    []byte
	kind string
}

func newDecoder(kind string, data []byte, format byte) (*decoder, error) {
	d := &decoder{b: data, kind: kind}
	f, err := d.byte()
	if err != nil {
		return nil, err
	}
	if f != format {
		return nil, d.errorf("format byte %#02x, want %#02x", f, format)
	}
	return d, nil
}

func (d *decoder) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrCorrupt, d.kind, fmt.Sprintf(format, args...))
}

func (d *decoder) byte() (byte, error) {
	if len(d.b) == 0 {
		return 0, d.errorf("unexpected end of input")
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c, nil
}

func (d *decoder) uvarint() (uint64, error) {
	v, n := binary.Uvarint(d.b)
	switch {
	case n == 0:
		return 0, d.errorf("unexpected end of input")
	case n < 0:
		return 0, d.errorf("varint overflows 64 bits")
	case n > 1 && d.b[n-1] == 0:
		return 0, d.errorf("varint is not minimally encoded")
	}
	d.b = d.b[n:]
	return v, nil
}

// varint reads a zigzag-encoded signed varint.
func (d *decoder) varint() (int64, error) {
	u, err := d.uvarint()
	if err != nil {
		return 0, err
	}
	return int64(u>>1) ^ -int64(u&1), nil
}

// count reads a length prefix of elements that take at least minSize bytes
// each and rejects one that the rest of the input cannot hold, so that no
// allocation is sized beyond what the input can justify.
func (d *decoder) count(what string, minSize int) (int, error) {
	n, err := d.uvarint()
	if err != nil {
		return 0, err
	}
	if n > uint64(len(d.b)/minSize) {
		return 0, d.errorf("%d %s cannot fit in the %d bytes left", n, what, len(d.b))
	}
	return int(n), nil
}

func (d *decoder) bytes(n int) ([]byte, error) {
	if n < 0 || n > len(d.b) {
		return nil, d.errorf("%d bytes wanted, %d left", n, len(d.b))
	}
	b := d.b[:n:n]
	d.b = d.b[n:]
	return b, nil
}

func (d *decoder) end() error {
	if len(d.b) != 0 {
		return d.errorf("%d trailing bytes", len(d.b))
	}
	return nil
}
