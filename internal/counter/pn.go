package counter

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

// PN is a PN-counter, a state-based CRDT: every replica owns a grow-only
// pair of slots, P (sum of its increments) and N (sum of its decrements), and
// the value is sum(P) - sum(N) over all replicas. Merge takes the per-slot
// maximum, which is commutative, associative and idempotent, so replicas that
// exchange states in any order, any number of times, converge to the same
// value as long as each replica only adds to its own slot.
//
// Add refuses (ErrOverflow) to take a slot past the uint64 range or the value
// outside the int64 range. Merge cannot fail, so merging states from replicas
// can still produce a value outside the int64 range; Value then saturates at
// math.MinInt64 or math.MaxInt64, and the exact value is kept internally (an
// Add towards zero is accepted again).
//
// The zero value is an empty counter. A PN is not safe for concurrent use:
// the caller serialises access. Value, Slots, Equal, Clone and MarshalBinary
// do not modify the receiver, so concurrent readers are fine under a read
// lock.
type PN struct {
	slots []PNSlot // sorted by Replica, unique, never both P and N zero
	p, n  i128     // sum of P and of N over slots
}

// PNSlot is one replica's pair of grow-only slots in a PN counter.
type PNSlot struct {
	Replica string `json:"replica"`
	P       uint64 `json:"p"`
	N       uint64 `json:"n"`
}

// NewPN returns an empty PN counter.
func NewPN() *PN { return &PN{} }

func (c *PN) find(replica string) (int, bool) {
	return slices.BinarySearchFunc(c.slots, replica, func(s PNSlot, r string) int {
		return strings.Compare(s.Replica, r)
	})
}

func (c *PN) value128() i128 { return c.p.sub(c.n) }

// Add records delta at replica: a positive delta grows P[replica], a
// negative one grows N[replica] by -delta, zero does nothing. It returns an
// error wrapping ErrInvalid for an empty replica name, and one wrapping
// ErrOverflow when the slot would exceed the uint64 range or the value would
// leave the int64 range. On error nothing changes. Adding to an existing
// replica does not allocate.
func (c *PN) Add(replica string, delta int64) error {
	if replica == "" {
		return fmt.Errorf("%w: empty replica name", ErrInvalid)
	}
	if delta == 0 {
		return nil
	}
	i, found := c.find(replica)
	s := PNSlot{Replica: replica}
	if found {
		s = c.slots[i]
	}
	old := c.value128()
	pSum, nSum := c.p, c.n
	if delta > 0 {
		var carry uint64
		if s.P, carry = bits.Add64(s.P, uint64(delta), 0); carry != 0 {
			return fmt.Errorf("%w: P slot of replica %q", ErrOverflow, replica)
		}
		pSum = pSum.add(i128OfU(uint64(delta)))
	} else {
		mag := uint64(^delta) + 1 // -delta, also for math.MinInt64
		var carry uint64
		if s.N, carry = bits.Add64(s.N, mag, 0); carry != 0 {
			return fmt.Errorf("%w: N slot of replica %q", ErrOverflow, replica)
		}
		nSum = nSum.add(i128OfU(mag))
	}
	if !sumMoveOK(old, old.addInt64(delta)) {
		return fmt.Errorf("%w: value of the pn counter", ErrOverflow)
	}
	if found {
		c.slots[i] = s
	} else {
		c.slots = slices.Insert(c.slots, i, s)
	}
	c.p, c.n = pSum, nSum
	return nil
}

// Value returns sum(P) - sum(N), saturated to the int64 range (see PN).
func (c *PN) Value() int64 { return c.value128().clamp() }

// Merge folds o into c: each slot becomes the maximum of the two. A nil o
// does nothing. Merge is commutative, associative and idempotent.
func (c *PN) Merge(o *PN) {
	if o == nil || o == c || len(o.slots) == 0 {
		return
	}
	// In place when c already has every replica of o (the common case
	// between long-lived replicas): no allocation.
	inPlace := true
	for _, s := range o.slots {
		if _, ok := c.find(s.Replica); !ok {
			inPlace = false
			break
		}
	}
	if inPlace {
		for _, s := range o.slots {
			i, _ := c.find(s.Replica)
			c.slots[i].P = max(c.slots[i].P, s.P)
			c.slots[i].N = max(c.slots[i].N, s.N)
		}
	} else {
		out := make([]PNSlot, 0, len(c.slots)+len(o.slots))
		a, b := c.slots, o.slots
		for len(a) > 0 || len(b) > 0 {
			switch {
			case len(b) == 0 || (len(a) > 0 && a[0].Replica < b[0].Replica):
				out = append(out, a[0])
				a = a[1:]
			case len(a) == 0 || b[0].Replica < a[0].Replica:
				out = append(out, b[0])
				b = b[1:]
			default:
				out = append(out, PNSlot{Replica: a[0].Replica, P: max(a[0].P, b[0].P), N: max(a[0].N, b[0].N)})
				a, b = a[1:], b[1:]
			}
		}
		c.slots = out
	}
	c.p, c.n = sumSlots(c.slots)
}

func sumSlots(slots []PNSlot) (p, n i128) {
	for _, s := range slots {
		p = p.add(i128OfU(s.P))
		n = n.add(i128OfU(s.N))
	}
	return p, n
}

// Slots returns a copy of the slots, sorted by replica. Replicas whose P
// and N are both zero do not appear.
func (c *PN) Slots() []PNSlot { return slices.Clone(c.slots) }

// Clone returns a deep copy of c.
func (c *PN) Clone() *PN { return &PN{slots: slices.Clone(c.slots), p: c.p, n: c.n} }

// Equal reports whether c and o have the same slots. A nil o equals an
// empty counter.
func (c *PN) Equal(o *PN) bool {
	if o == nil {
		return len(c.slots) == 0
	}
	return slices.Equal(c.slots, o.slots)
}

// MarshalBinary encodes c as: format byte 0x21, uvarint slot count, then per
// slot (sorted by replica): uvarint name length, name bytes, uvarint P,
// uvarint N. Equal counters have equal encodings.
func (c *PN) MarshalBinary() ([]byte, error) {
	size := 1 + binary.MaxVarintLen64
	for _, s := range c.slots {
		size += 3*binary.MaxVarintLen64 + len(s.Replica)
	}
	b := make([]byte, 0, size)
	b = append(b, formatPN)
	b = binary.AppendUvarint(b, uint64(len(c.slots)))
	for _, s := range c.slots {
		b = binary.AppendUvarint(b, uint64(len(s.Replica)))
		b = append(b, s.Replica...)
		b = binary.AppendUvarint(b, s.P)
		b = binary.AppendUvarint(b, s.N)
	}
	return b, nil
}

// UnmarshalBinary replaces c with the decoded counter. Input that
// MarshalBinary cannot have produced (replicas not strictly sorted, an empty
// replica name, a slot with P and N both zero, trailing bytes, ...) returns
// an error wrapping ErrCorrupt and leaves c unchanged.
func (c *PN) UnmarshalBinary(data []byte) error {
	d, err := newDecoder("pn", data, formatPN)
	if err != nil {
		return err
	}
	// A slot takes at least 4 bytes: length, one name byte, P and N.
	n, err := d.count("slots", 4)
	if err != nil {
		return err
	}
	slots := make([]PNSlot, 0, n)
	for i := range n {
		l, err := d.count("name bytes", 1)
		if err != nil {
			return err
		}
		if l == 0 {
			return d.errorf("slot %d has an empty replica name", i)
		}
		name, err := d.bytes(l)
		if err != nil {
			return err
		}
		s := PNSlot{Replica: string(name)}
		if s.P, err = d.uvarint(); err != nil {
			return err
		}
		if s.N, err = d.uvarint(); err != nil {
			return err
		}
		if s.P == 0 && s.N == 0 {
			return d.errorf("slot %q is empty", s.Replica)
		}
		if i > 0 && slots[i-1].Replica >= s.Replica {
			return d.errorf("replica %q does not sort after %q", s.Replica, slots[i-1].Replica)
		}
		slots = append(slots, s)
	}
	if err := d.end(); err != nil {
		return err
	}
	c.slots = slots
	c.p, c.n = sumSlots(slots)
	return nil
}
