package counter

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Hash is a set of named fields, like a Redis hash used with HINCRBY and
// HINCRBYFLOAT, except that Add changes several fields atomically. A field
// holds an int64, or a float kept as the text Redis's HINCRBYFLOAT stores
// (see Float): 0.1 then 0.2 reads "0.3". A float whose text is an int64 is
// an integer field again ("1.5" plus "0.5" is the integer 2), so a field
// is in exactly one of the two forms, as in Redis, where HINCRBY accepts
// any value whose text is an integer.
//
// The zero value is an empty hash. A Hash is not safe for concurrent use: the
// caller serialises access. Get, All, Len and MarshalBinary do not modify the
// receiver, so concurrent readers are fine under a read lock.
type Hash struct {
	m map[string]int64
	f map[string]string // float fields: canonical text that is not an int64; names not in m
}

// FieldDelta is an increment of one hash field (Add), or its new value
// (Set).
type FieldDelta struct {
	Name  string
	Delta int64
	// Float, when not empty, replaces Delta: for Add a float increment in
	// ParseFloat's grammar (Redis HINCRBYFLOAT), for Set a float value in
	// canonical text (CanonicalFloat).
	Float string
}

// Field is a hash field and its value.
type Field struct {
	Name  string `json:"name"`
	Value int64  `json:"value"`
	// Float is a float field's value as decimal text (Value is 0 then);
	// empty for an integer field.
	Float string `json:"float,omitempty"`
}

// Text is the field's value as Redis answers it: the integer in decimal,
// or the float's text.
func (f Field) Text() string {
	if f.Float != "" {
		return f.Float
	}
	return strconv.FormatInt(f.Value, 10)
}

// IsFloat reports whether f holds a float (a value that is not an int64).
func (f Field) IsFloat() bool { return f.Float != "" }

// fieldOf returns the field name holding the canonical float text t (an
// integer field when t is an int64).
func fieldOf(name, t string) Field {
	x := Float{text: t}
	if t == "0" {
		x.text = ""
	}
	if v, ok := x.Int64(); ok {
		return Field{Name: name, Value: v}
	}
	return Field{Name: name, Float: t}
}

// NewHash returns an empty hash.
func NewHash() *Hash { return &Hash{} }

// field returns the current value of name, 0 when it does not exist.
func (h *Hash) field(name string) (Field, bool) {
	if v, ok := h.m[name]; ok {
		return Field{Name: name, Value: v}, true
	}
	if t, ok := h.f[name]; ok {
		return Field{Name: name, Float: t}, true
	}
	return Field{Name: name}, false
}

// Add applies deltas atomically, in order: a missing field starts at 0 and
// is created even by a zero delta, and a name that appears more than once
// sees the earlier deltas (each intermediate value must fit, as if the adds
// ran one after the other). An integer delta needs an integer field (else
// ErrNotInteger, Redis's "hash value is not an integer") and a sum within
// int64 (else ErrOverflow); a float delta (FieldDelta.Float) adds like
// Float.Add: bad text wraps ErrInvalid, an infinite increment or sum
// ErrFloatRange. On any error no field changes; an empty deltas wraps
// ErrInvalid.
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
			f, _ := h.field(d.Name)
			out = append(out, f)
			j = len(out) - 1
			if index != nil {
				index[d.Name] = j
			}
		}
		if d.Float != "" {
			f, err := addFloatField(out[j], d.Float)
			if err != nil {
				return nil, err
			}
			out[j] = f
			continue
		}
		if out[j].Float != "" {
			return nil, fmt.Errorf("%w: field %q holds %s", ErrNotInteger, d.Name, shortText(out[j].Float))
		}
		v, err := AddInt64(out[j].Value, d.Delta)
		if err != nil {
			return nil, fmt.Errorf("%w: field %q", ErrOverflow, d.Name)
		}
		out[j].Value = v
	}
	for _, f := range out {
		h.store(f)
	}
	return out, nil
}

// addFloatField returns f plus the float increment incr.
func addFloatField(f Field, incr string) (Field, error) {
	d, err := ParseFloat(incr)
	if err != nil {
		return f, fmt.Errorf("%w: field %q: increment %s", err, f.Name, shortText(incr))
	}
	x := Float{text: f.Float}
	if f.Float == "" {
		x = *FloatOf(f.Value)
	}
	if _, err := x.AddValue(d); err != nil {
		return f, fmt.Errorf("%w: field %q", ErrFloatRange, f.Name)
	}
	return fieldOf(f.Name, x.Text()), nil
}

// shortText quotes t, cut to 40 bytes, for an error message.
func shortText(t string) string {
	if len(t) > 40 {
		t = t[:40] + "..."
	}
	return strconv.Quote(t)
}

// store sets f (an integer field, or a float one whose text is canonical
// and not an int64) in h.
func (h *Hash) store(f Field) {
	_, inM := h.m[f.Name]
	_, inF := h.f[f.Name]
	if !inM && !inF {
		// A new name is copied: the caller's string may alias a larger
		// buffer (the RESP front end's read buffer) that the hash must
		// not keep alive.
		f.Name = strings.Clone(f.Name)
	}
	if f.Float == "" {
		if inF {
			delete(h.f, f.Name)
		}
		if h.m == nil {
			h.m = make(map[string]int64)
		}
		h.m[f.Name] = f.Value
		return
	}
	if inM {
		delete(h.m, f.Name)
	}
	if h.f == nil {
		h.f = make(map[string]string)
	}
	h.f[f.Name] = f.Float
}

// Set sets fields to their values (Delta, or Float: canonical float text),
// in order (a later value of a name wins), or with onlyAbsent only the
// fields that do not exist yet (Redis HSETNX). It returns how many fields
// it created. A Float that is not canonical (CanonicalFloat) wraps
// ErrInvalid and changes nothing.
func (h *Hash) Set(fields []FieldDelta, onlyAbsent bool) (int, error) {
	for _, f := range fields {
		if f.Float != "" && !CanonicalFloat(f.Float) {
			return 0, fmt.Errorf("%w: field %q: %s is not a float in canonical text", ErrInvalid, f.Name, shortText(f.Float))
		}
	}
	n := 0
	for _, f := range fields {
		_, exists := h.field(f.Name)
		if !exists {
			n++
		} else if onlyAbsent {
			continue
		}
		if f.Float != "" {
			h.store(fieldOf(f.Name, f.Float))
		} else {
			h.store(Field{Name: f.Name, Value: f.Delta})
		}
	}
	return n, nil
}

// Get returns the value of field name when it is an integer field, and
// whether it is one (false for a float field: see GetField).
func (h *Hash) Get(name string) (v int64, ok bool) {
	v, ok = h.m[name]
	return v, ok
}

// GetField returns field name, integer or float, and whether it exists.
func (h *Hash) GetField(name string) (Field, bool) { return h.field(name) }

// All returns every field, sorted by name.
func (h *Hash) All() []Field {
	out := make([]Field, 0, h.Len())
	for k, v := range h.m {
		out = append(out, Field{Name: k, Value: v})
	}
	for k, t := range h.f {
		out = append(out, Field{Name: k, Float: t})
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
		} else if _, ok := h.f[name]; ok {
			delete(h.f, name)
			n++
		}
	}
	return n
}

// Len returns the number of fields.
func (h *Hash) Len() int { return len(h.m) + len(h.f) }

// Clone returns a deep copy of h.
func (h *Hash) Clone() *Hash {
	c := &Hash{}
	if len(h.m) > 0 {
		c.m = maps.Clone(h.m)
	}
	if len(h.f) > 0 {
		c.f = maps.Clone(h.f)
	}
	return c
}

// MarshalBinary encodes h as: format byte 0x51, uvarint field count, then per
// field, sorted by name: uvarint name length, name bytes, zigzag varint
// value. A hash with float fields uses format byte 0x52 and, after each
// name, a uvarint tag: 0 then the zigzag varint of an integer field, or
// 1 + the length of a float field's text then the text. Hashes with the
// same fields have equal encodings.
func (h *Hash) MarshalBinary() ([]byte, error) {
	fields := h.All()
	size := 1 + binary.MaxVarintLen64
	for _, f := range fields {
		size += 3*binary.MaxVarintLen64 + len(f.Name) + len(f.Float)
	}
	b := make([]byte, 0, size)
	format := formatHash
	if len(h.f) > 0 {
		format = formatHashFloat
	}
	b = append(b, format)
	b = binary.AppendUvarint(b, uint64(len(fields)))
	for _, f := range fields {
		b = binary.AppendUvarint(b, uint64(len(f.Name)))
		b = append(b, f.Name...)
		if format == formatHashFloat {
			if f.Float != "" {
				b = binary.AppendUvarint(b, 1+uint64(len(f.Float)))
				b = append(b, f.Float...)
				continue
			}
			b = append(b, 0)
		}
		b = binary.AppendVarint(b, f.Value)
	}
	return b, nil
}

// UnmarshalBinary replaces h with the decoded hash. Input that MarshalBinary
// cannot have produced (names not strictly sorted, trailing bytes, a float
// text that is not canonical or is an int64, format 0x52 without a float
// field, ...) returns an error wrapping ErrCorrupt and leaves h unchanged.
func (h *Hash) UnmarshalBinary(data []byte) error {
	format := formatHash
	if len(data) > 0 && data[0] == formatHashFloat {
		format = formatHashFloat
	}
	d, err := newDecoder("hash", data, format)
	if err != nil {
		return err
	}
	// A field takes at least 2 bytes: the length and the value.
	n, err := d.count("fields", 2)
	if err != nil {
		return err
	}
	m := make(map[string]int64, n)
	var fm map[string]string
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
		prev = name
		if format == formatHashFloat {
			tag, err := d.uvarint()
			if err != nil {
				return err
			}
			if tag > 0 {
				if tag-1 > uint64(len(d.b)) {
					return d.errorf("float text of %d bytes, %d left", tag-1, len(d.b))
				}
				t, _ := d.bytes(int(tag - 1))
				f := fieldOf(name, string(t))
				if !CanonicalFloat(string(t)) || f.Float == "" {
					return d.errorf("field %q: %q is not a canonical non-integer float", name, t)
				}
				if fm == nil {
					fm = make(map[string]string)
				}
				fm[name] = f.Float
				continue
			}
		}
		v, err := d.varint()
		if err != nil {
			return err
		}
		m[name] = v
	}
	if err := d.end(); err != nil {
		return err
	}
	if format == formatHashFloat && len(fm) == 0 {
		return d.errorf("format %#02x without a float field", format)
	}
	h.m, h.f = m, fm
	return nil
}
