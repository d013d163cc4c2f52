package counter

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Hash is a set of named int64 fields, like a Redis hash used with HINCRBY,
// except that Add changes several fields atomically.
//
// The zero value is an empty hash. A Hash is not safe for concurrent use: the
// caller serialises access. Get, All, Len and MarshalBinary do not modify the
// receiver, so concurrent readers are fine under a read lock.
type Hash struct {
	m map[string]int64
}

// FieldDelta is an increment of one hash field.
type FieldDelta struct {
	Name  string
	Delta int64
}

// Field is a hash field and its value.
type Field struct {
	Name  string `json:"name"`
	Value int64  `json:"value"`
}

// NewHash returns an empty hash.
func NewHash() *Hash { return &Hash{} }

// Add applies deltas atomically, in order: a missing field starts at 0 and
// is created even by a zero delta, and a name that appears more than once
// sees the earlier deltas (each intermediate value must fit, as if the adds
// ran one after the other). If any step would overflow, the error wraps
// ErrOverflow and no field changes; an empty deltas wraps ErrInvalid.
//
// It returns the new value of every touched field, once per distinct name, in
// the order of first appearance in deltas.
func (h *Hash) Add(deltas []FieldDelta) ([]Field, error) {
	if len(deltas) == 0 {
		return nil, fmt.Errorf("%w: no fields to add", ErrInvalid)
	}
	out := make([]Field, 0, len(deltas))
	// Short lists (the usual case) find repeated names by scanning out;
	// long ones use an index so that Add stays linear.
	var index map[string]int
	if len(deltas) > 16 {
		index = make(map[string]int, len(deltas))
	}
	for _, d := range deltas {
		j := -1
		if index != nil {
			if k, ok := index[d.Name]; ok {
				j = k
			}
		} else {
			for k := range out {
				if out[k].Name == d.Name {
					j = k
					break
				}
			}
		}
		if j < 0 {
			out = append(out, Field{Name: d.Name, Value: h.m[d.Name]})
			j = len(out) - 1
			if index != nil {
				index[d.Name] = j
			}
		}
		v, err := AddInt64(out[j].Value, d.Delta)
		if err != nil {
			return nil, fmt.Errorf("%w: field %q", ErrOverflow, d.Name)
		}
		out[j].Value = v
	}
	if h.m == nil {
		h.m = make(map[string]int64, len(out))
	}
	for _, f := range out {
		if _, ok := h.m[f.Name]; !ok {
			// A new name is copied: the caller's string may alias a
			// larger buffer (the RESP front end's read buffer) that the
			// hash must not keep alive.
			f.Name = strings.Clone(f.Name)
		}
		h.m[f.Name] = f.Value
	}
	return out, nil
}

// Get returns the value of field name and whether it exists.
func (h *Hash) Get(name string) (int64, bool) {
	v, ok := h.m[name]
	return v, ok
}

// All returns every field, sorted by name.
func (h *Hash) All() []Field {
	out := make([]Field, 0, len(h.m))
	for k, v := range h.m {
		out = append(out, Field{Name: k, Value: v})
	}
	slices.SortFunc(out, func(a, b Field) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Del deletes the named fields and returns how many existed (a name given
// twice counts once).
func (h *Hash) Del(names ...string) int {
	n := 0
	for _, name := range names {
		if _, ok := h.m[name]; ok {
			delete(h.m, name)
			n++
		}
	}
	return n
}

// Len returns the number of fields.
func (h *Hash) Len() int { return len(h.m) }

// Clone returns a deep copy of h.
func (h *Hash) Clone() *Hash {
	if len(h.m) == 0 {
		return &Hash{}
	}
	return &Hash{m: maps.Clone(h.m)}
}

// MarshalBinary encodes h as: format byte 0x51, uvarint field count, then per
// field, sorted by name: uvarint name length, name bytes, zigzag varint
// value. Hashes with the same fields have equal encodings.
func (h *Hash) MarshalBinary() ([]byte, error) {
	fields := h.All()
	size := 1 + binary.MaxVarintLen64
	for _, f := range fields {
		size += 2*binary.MaxVarintLen64 + len(f.Name)
	}
	b := make([]byte, 0, size)
	b = append(b, formatHash)
	b = binary.AppendUvarint(b, uint64(len(fields)))
	for _, f := range fields {
		b = binary.AppendUvarint(b, uint64(len(f.Name)))
		b = append(b, f.Name...)
		b = binary.AppendVarint(b, f.Value)
	}
	return b, nil
}

// UnmarshalBinary replaces h with the decoded hash. Input that MarshalBinary
// cannot have produced (names not strictly sorted, trailing bytes, ...)
// returns an error wrapping ErrCorrupt and leaves h unchanged.
func (h *Hash) UnmarshalBinary(data []byte) error {
	d, err := newDecoder("hash", data, formatHash)
	if err != nil {
		return err
	}
	// A field takes at least 2 bytes: the length and the value.
	n, err := d.count("fields", 2)
	if err != nil {
		return err
	}
	m := make(map[string]int64, n)
	prev := ""
	for i := range n {
		l, err := d.count("name bytes", 1)
		if err != nil {
			return err
		}
		b, err := d.bytes(l)
		if err != nil {
			return err
		}
		name := string(b)
		if i > 0 && name <= prev {
			return d.errorf("field %q does not sort after %q", name, prev)
		}
		v, err := d.varint()
		if err != nil {
			return err
		}
		m[name] = v
		prev = name
	}
	if err := d.end(); err != nil {
		return err
	}
	h.m = m
	return nil
}
