package counter

import (
	"encoding/binary"
	"fmt"
)

// Sharded is a counter split into N sub-counters (shards) whose value is
// their sum. Spreading increments over shards lets a caller keep contention
// and hot keys low; the value is maintained incrementally, so Value is O(1).
//
// Every Add keeps both the shard and the sum inside the int64 range, so the
// sum of the shards always fits in an int64.
//
// The zero value has no shards; use NewSharded. A Sharded is not safe for
// concurrent use: the caller serialises access. Value, Shards and Len do not
// modify the receiver, so concurrent readers are fine under a read lock.
type Sharded struct {
	shards []int64
	sum    int64
}

// NewSharded returns a sharded counter with n shards, all zero. An n below 1
// is taken as 1 (callers validate their own upper bound).
func NewSharded(n int) *Sharded {
	if n < 1 {
		n = 1
	}
	return &Sharded{shards: make([]int64, n)}
}

// Add adds delta to shard. It returns an error wrapping ErrInvalid when shard
// is outside [0, Len()), and one wrapping ErrOverflow when the shard or the
// sum would leave the int64 range. On error nothing changes.
func (s *Sharded) Add(shard int, delta int64) error {
	if shard < 0 || shard >= len(s.shards) {
		return fmt.Errorf("%w: shard %d outside [0, %d)", ErrInvalid, shard, len(s.shards))
	}
	v, err := AddInt64(s.shards[shard], delta)
	if err != nil {
		return fmt.Errorf("%w: shard %d", ErrOverflow, shard)
	}
	sum, err := AddInt64(s.sum, delta)
	if err != nil {
		return fmt.Errorf("%w: sum of shards", ErrOverflow)
	}
	s.shards[shard], s.sum = v, sum
	return nil
}

// Value returns the sum of the shards.
func (s *Sharded) Value() int64 { return s.sum }

// Shards returns a copy of the shard values.
func (s *Sharded) Shards() []int64 { return append([]int64(nil), s.shards...) }

// Len returns the number of shards.
func (s *Sharded) Len() int { return len(s.shards) }

// Clone returns a deep copy of s.
func (s *Sharded) Clone() *Sharded {
	return &Sharded{shards: s.Shards(), sum: s.sum}
}

// MarshalBinary encodes s as: format byte 0x11, uvarint shard count, then
// each shard as a zigzag varint.
func (s *Sharded) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+2*len(s.shards))
	b = append(b, formatSharded)
	b = binary.AppendUvarint(b, uint64(len(s.shards)))
	for _, v := range s.shards {
		b = binary.AppendVarint(b, v)
	}
	return b, nil
}

// UnmarshalBinary replaces s with the decoded counter. Input that is not an
// encoding produced by MarshalBinary (no shards, a sum outside the int64
// range, trailing bytes, ...) returns an error wrapping ErrCorrupt and leaves
// s unchanged.
func (s *Sharded) UnmarshalBinary(data []byte) error {
	d, err := newDecoder("sharded", data, formatSharded)
	if err != nil {
		return err
	}
	n, err := d.count("shards", 1)
	if err != nil {
		return err
	}
	if n == 0 {
		return d.errorf("no shards")
	}
	shards := make([]int64, n)
	var sum i128
	for i := range shards {
		if shards[i], err = d.varint(); err != nil {
			return err
		}
		sum = sum.addInt64(shards[i])
	}
	if err := d.end(); err != nil {
		return err
	}
	if !sum.fits() {
		return d.errorf("sum of shards overflows int64")
	}
	s.shards, s.sum = shards, sum.clamp()
	return nil
}
