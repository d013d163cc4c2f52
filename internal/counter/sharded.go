package counter

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// Sharded is a counter split into N sub-counters (shards) whose value is
// their sum. Spreading increments over shards lets a caller keep contention
// and hot keys low; the value is maintained incrementally, so Value is O(1).
//
// Sharded is also a state-based CRDT across replicas (cluster nodes): the N
// shards belong to the local replica (Replica), whose slot is the pair
// (Seq, Sum) of a sequence that every Add bumps and the sum of the shards.
// The slots of the other replicas are kept as they were last merged. Merge
// keeps, per replica, the slot with the greater (Seq, Sum) — each replica
// only writes its own slot, so its Seq orders its states — which is
// commutative, associative and idempotent. The value is the sum of the Sums
// of all replicas. Slots are never dropped, so a stale copy of a departed
// replica's slot merged again never counts twice.
//
// Every Add keeps the shard and the local sum inside the int64 range, and
// refuses to take the value out of it. Merge cannot fail on that account, so
// merging replicas can produce a value outside the int64 range; Value then
// saturates, like PN.
//
// NewSharded returns an unnamed counter (Replica ""): fine on one node, but
// it must be named with SetReplica before it can Merge or be merged. An
// unnamed counter without other replicas encodes in the original format;
// named ones in the replicated format (see MarshalBinary).
//
// The zero value has no shards; use NewSharded. A Sharded is not safe for
// concurrent use: the caller serialises access. Value, Shards, Slots, Len
// and MarshalBinary do not modify the receiver, so concurrent readers are
// fine under a read lock.
type Sharded struct {
	shards  []int64
	sum     int64  // sum of shards: the local replica's Sum
	seq     uint64 // the local replica's Seq; 0 only while sum and every shard are 0
	replica string // the local replica's name; "" = unnamed
	remote  []ShardedSlot
	rsum    i128 // sum of remote Sums
}

// ShardedSlot is one replica's part of a Sharded counter: the sum of its
// shards and the sequence of its last change.
type ShardedSlot struct {
	Replica string `json:"replica"`
	Sum     int64  `json:"sum"`
	Seq     uint64 `json:"seq"`
}

// newer reports whether a supersedes b: the greater (Seq, Sum).
func (a ShardedSlot) newer(b ShardedSlot) bool {
	return a.Seq > b.Seq || (a.Seq == b.Seq && a.Sum > b.Sum)
}

// NewSharded returns an unnamed sharded counter with n shards, all zero. An
// n below 1 is taken as 1 (callers validate their own upper bound).
func NewSharded(n int) *Sharded {
	if n < 1 {
		n = 1
	}
	return &Sharded{shards: make([]int64, n)}
}

// Add adds delta to shard. It returns an error wrapping ErrInvalid when shard
// is outside [0, Len()), and one wrapping ErrOverflow when the shard, the
// local sum or the value would leave the int64 range. On error nothing
// changes.
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
	if len(s.remote) != 0 && !sumMoveOK(s.rsum.addInt64(s.sum), s.rsum.addInt64(sum)) {
		return fmt.Errorf("%w: value of the sharded counter", ErrOverflow)
	}
	s.shards[shard], s.sum = v, sum
	s.seq++ // 2^64 adds would take centuries: no overflow check
	return nil
}

// Value returns the sum over all replicas, saturated to the int64 range.
// With no other replica it is the sum of the shards.
func (s *Sharded) Value() int64 {
	if len(s.remote) == 0 {
		return s.sum
	}
	return s.rsum.addInt64(s.sum).clamp()
}

// Shards returns a copy of the local shard values.
func (s *Sharded) Shards() []int64 { return append([]int64(nil), s.shards...) }

// Len returns the number of local shards.
func (s *Sharded) Len() int { return len(s.shards) }

// Replica returns the local replica's name ("" while unnamed).
func (s *Sharded) Replica() string { return s.replica }

// local returns the local replica's slot.
func (s *Sharded) local() ShardedSlot {
	return ShardedSlot{Replica: s.replica, Sum: s.sum, Seq: s.seq}
}

// Slots returns every replica's slot sorted by replica, the local one
// included once it has been added to. Its Sums add up to the (unsaturated)
// value.
func (s *Sharded) Slots() []ShardedSlot {
	out := make([]ShardedSlot, 0, len(s.remote)+1)
	i, _ := s.findRemote(s.replica)
	out = append(out, s.remote[:i]...)
	if s.seq != 0 {
		out = append(out, s.local())
	}
	return append(out, s.remote[i:]...)
}

func (s *Sharded) findRemote(replica string) (int, bool) {
	return slices.BinarySearchFunc(s.remote, replica, func(x ShardedSlot, r string) int {
		return strings.Compare(x.Replica, r)
	})
}

// Equal reports whether s and o hold the same replicated state: the same
// slots (wherever they are local, and however the local sums are spread
// over shards). A nil o equals a counter without slots.
func (s *Sharded) Equal(o *Sharded) bool {
	if o == nil {
		return s.seq == 0 && len(s.remote) == 0
	}
	return slices.Equal(s.Slots(), o.Slots())
}

// Clone returns a deep copy of s.
func (s *Sharded) Clone() *Sharded {
	c := *s
	c.shards, c.remote = s.Shards(), slices.Clone(s.remote)
	return &c
}

// SetReplica names the local replica. Naming an unnamed counter makes its
// shards (old data: every shard) that replica's. Renaming a named one
// freezes the old name's slot as another replica's and starts the shards of
// the new name from its slot if one was merged before (else from zero). It
// returns an error wrapping ErrInvalid for an empty name.
func (s *Sharded) SetReplica(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty replica name", ErrInvalid)
	}
	if name == s.replica {
		return nil
	}
	if s.replica == "" {
		s.replica = name
		return nil
	}
	if s.seq != 0 {
		s.insertRemote(s.local())
	}
	mine := ShardedSlot{Replica: name}
	if i, ok := s.findRemote(name); ok {
		mine = s.remote[i]
		s.rsum = s.rsum.sub(i128Of(mine.Sum))
		s.remote = slices.Delete(s.remote, i, i+1)
	}
	s.replica = name
	s.resetLocal(mine)
	return nil
}

// resetLocal makes x the local slot: the shards hold x.Sum in shard 0.
func (s *Sharded) resetLocal(x ShardedSlot) {
	clear(s.shards)
	s.shards[0], s.sum, s.seq = x.Sum, x.Sum, x.Seq
}

// insertRemote adds the slot of a replica not in s.remote.
func (s *Sharded) insertRemote(x ShardedSlot) {
	i, _ := s.findRemote(x.Replica)
	s.remote = slices.Insert(s.remote, i, x)
	s.rsum = s.rsum.addInt64(x.Sum)
}

// Merge folds o into s: per replica, the newer slot wins (see Sharded); a
// newer slot of s's own replica (its writes lost here, kept elsewhere)
// replaces the local shards. It reports whether s changed. Both counters
// must be named (ErrInvalid otherwise, unless o has no slots); on error
// nothing changes. A nil o does nothing.
func (s *Sharded) Merge(o *Sharded) (bool, error) {
	if o == nil || o == s {
		return false, nil
	}
	if o.replica == "" && o.seq != 0 {
		return false, fmt.Errorf("%w: merge from an unnamed sharded counter", ErrInvalid)
	}
	if s.replica == "" {
		return false, fmt.Errorf("%w: merge into an unnamed sharded counter", ErrInvalid)
	}
	changed := false
	join := func(x ShardedSlot) {
		if x.Seq == 0 {
			return
		}
		if x.Replica == s.replica {
			if x.newer(s.local()) {
				s.resetLocal(x)
				changed = true
			}
			return
		}
		i, ok := s.findRemote(x.Replica)
		switch {
		case !ok:
			s.insertRemote(x)
		case x.newer(s.remote[i]):
			s.rsum = s.rsum.sub(i128Of(s.remote[i].Sum)).addInt64(x.Sum)
			s.remote[i] = x
		default:
			return
		}
		changed = true
	}
	join(o.local())
	for _, x := range o.remote {
		join(x)
	}
	return changed, nil
}

// Format bytes of Sharded: formatSharded (0x11) is the original single-node
// layout, formatShardedReplicated carries the replica slots.
const formatShardedReplicated byte = 0x12

// MarshalBinary encodes s. An unnamed counter without other replicas uses
// the original format: byte 0x11, uvarint shard count, then each shard as a
// zigzag varint. Any other uses format 0x12: uvarint name length and the
// local replica's name, uvarint Seq, uvarint shard count and the shards as
// zigzag varints, uvarint count of other replicas, then per replica (sorted
// by name) uvarint name length, name, uvarint Seq, zigzag varint Sum.
func (s *Sharded) MarshalBinary() ([]byte, error) {
	size := 1 + 3*binary.MaxVarintLen64 + len(s.replica) + 2*len(s.shards)
	for _, x := range s.remote {
		size += 3*binary.MaxVarintLen64 + len(x.Replica)
	}
	b := make([]byte, 0, size)
	if s.replica == "" && len(s.remote) == 0 {
		b = append(b, formatSharded)
		return appendShards(b, s.shards), nil
	}
	b = append(b, formatShardedReplicated)
	b = appendName(b, s.replica)
	b = binary.AppendUvarint(b, s.seq)
	b = appendShards(b, s.shards)
	b = binary.AppendUvarint(b, uint64(len(s.remote)))
	for _, x := range s.remote {
		b = appendName(b, x.Replica)
		b = binary.AppendUvarint(b, x.Seq)
		b = binary.AppendVarint(b, x.Sum)
	}
	return b, nil
}

func appendName(b []byte, name string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(name))), name...)
}

func appendShards(b []byte, shards []int64) []byte {
	b = binary.AppendUvarint(b, uint64(len(shards)))
	for _, v := range shards {
		b = binary.AppendVarint(b, v)
	}
	return b
}

// UnmarshalBinary replaces s with the decoded counter. Data in the original
// format decodes as an unnamed counter (its shards are the local replica's)
// with Seq 1, or 0 when every shard is 0. Input that is not an encoding
// produced by MarshalBinary (no shards, a local sum outside the int64 range,
// replicas not strictly sorted, an empty name, a remote slot with Seq 0 or
// named like the local replica, trailing bytes, ...) returns an error
// wrapping ErrCorrupt and leaves s unchanged.
func (s *Sharded) UnmarshalBinary(data []byte) error {
	if len(data) > 0 && data[0] == formatShardedReplicated {
		return s.unmarshalReplicated(data)
	}
	d, err := newDecoder("sharded", data, formatSharded)
	if err != nil {
		return err
	}
	shards, sum, err := d.shards()
	if err != nil {
		return err
	}
	if err := d.end(); err != nil {
		return err
	}
	var seq uint64
	if slices.ContainsFunc(shards, func(v int64) bool { return v != 0 }) {
		seq = 1
	}
	*s = Sharded{shards: shards, sum: sum, seq: seq}
	return nil
}

func (s *Sharded) unmarshalReplicated(data []byte) error {
	d, err := newDecoder("sharded", data, formatShardedReplicated)
	if err != nil {
		return err
	}
	name, err := d.name()
	if err != nil {
		return err
	}
	seq, err := d.uvarint()
	if err != nil {
		return err
	}
	shards, sum, err := d.shards()
	if err != nil {
		return err
	}
	if seq == 0 && slices.ContainsFunc(shards, func(v int64) bool { return v != 0 }) {
		return d.errorf("shards without a sequence")
	}
	// A remote slot takes at least 4 bytes: length, one name byte, Seq, Sum.
	n, err := d.count("replicas", 4)
	if err != nil {
		return err
	}
	remote := make([]ShardedSlot, 0, n)
	var rsum i128
	for i := range n {
		x := ShardedSlot{}
		if x.Replica, err = d.name(); err != nil {
			return err
		}
		if x.Seq, err = d.uvarint(); err != nil {
			return err
		}
		if x.Sum, err = d.varint(); err != nil {
			return err
		}
		switch {
		case x.Seq == 0:
			return d.errorf("replica %q has sequence 0", x.Replica)
		case x.Replica == name:
			return d.errorf("replica %q is also the local one", x.Replica)
		case i > 0 && remote[i-1].Replica >= x.Replica:
			return d.errorf("replica %q does not sort after %q", x.Replica, remote[i-1].Replica)
		}
		remote = append(remote, x)
		rsum = rsum.addInt64(x.Sum)
	}
	if err := d.end(); err != nil {
		return err
	}
	if len(remote) == 0 {
		remote = nil
	}
	*s = Sharded{shards: shards, sum: sum, seq: seq, replica: name, remote: remote, rsum: rsum}
	return nil
}

// name reads a non-empty length-prefixed name.
func (d *decoder) name() (string, error) {
	l, err := d.count("name bytes", 1)
	if err != nil {
		return "", err
	}
	if l == 0 {
		return "", d.errorf("empty replica name")
	}
	b, err := d.bytes(l)
	return string(b), err
}

// shards reads a shard count (at least 1) and the shards, whose sum must
// fit in an int64.
func (d *decoder) shards() ([]int64, int64, error) {
	n, err := d.count("shards", 1)
	if err != nil {
		return nil, 0, err
	}
	if n == 0 {
		return nil, 0, d.errorf("no shards")
	}
	shards := make([]int64, n)
	var sum i128
	for i := range shards {
		if shards[i], err = d.varint(); err != nil {
			return nil, 0, err
		}
		sum = sum.addInt64(shards[i])
	}
	if !sum.fits() {
		return nil, 0, d.errorf("sum of shards overflows int64")
	}
	return shards, sum.clamp(), nil
}
