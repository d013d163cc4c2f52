package counter

import (
	"encoding/binary"
	"math/bits"
)

// Window deltas: a store that writes every changed window at each of its
// flushes (the engine's) stores a window's whole encoding once, calls
// MarkBase, and then, while DeltaOK, stores only AppendDelta: the head and
// the buckets written since MarkBase. ApplyDelta puts a delta back over
// the decoded base (UnmarshalBinary of the whole encoding): the result
// encodes as the window did when the delta was made. A per-user window of
// 60 buckets with a hit or two per flush then costs its flush a few
// buckets instead of all of them (both the reads of its slots, cache
// misses for tens of thousands of windows, and the bytes written).
//
// Delta encoding: format byte 0x42, zigzag varint head bucket, uvarint
// count of buckets, and per bucket, oldest first, the uvarint distance
// head-bucket and the zigzag varint count (zero allowed: a bucket whose
// hits cancelled out since the base). Buckets written since the base that
// left the head's window are not in it: the base's content of their slot
// is older still, so out of the window too.
const formatWindowDelta byte = 0x42

// DeltaOK reports whether AppendDelta can stand for w's full encoding
// over the base of the last MarkBase: w has one (and DropBase was not
// called since), at most 64 buckets, and at most a quarter of its slots
// were written since (past that the store writes the whole window again,
// so that a delta stays small).
func (w *Window) DeltaOK() bool {
	return w.based && w.started && w.n <= 64 && bits.OnesCount64(w.since)*4 <= int(w.n)
}

// MarkBase records that the caller stored w's full encoding (of now):
// AppendDelta encodes the writes after it.
func (w *Window) MarkBase() { w.based, w.since = true, 0 }

// DropBase forgets the base (storing it failed, or the store no longer
// knows what it holds): DeltaOK is false until the next MarkBase.
func (w *Window) DropBase() { w.based = false }

// AppendDelta appends the delta encoding of w's writes since MarkBase to
// b. Only meaningful when DeltaOK.
func (w *Window) AppendDelta(b []byte) []byte {
	b = append(b, formatWindowDelta)
	b = binary.AppendVarint(b, w.head)
	if w.ring == nil || w.n > 64 {
		return append(b, 0)
	}
	at := len(b)
	b = append(b, 0) // the count: at most 64 buckets, one byte
	b, n := w.appendMasked(b, w.since, true)
	b[at] = byte(n)
	return b
}

// ApplyDelta applies a delta of AppendDelta to w, the decoded base it was
// made over. Input that is not a valid delta for w (a head before w's,
// buckets outside the head's window or out of order, trailing bytes, ...)
// returns an error wrapping ErrCorrupt and leaves w unchanged. w's base
// is not marked (MarkBase): w is a new window to its store.
func (w *Window) ApplyDelta(data []byte) error {
	d, err := newDecoder("window delta", data, formatWindowDelta)
	if err != nil {
		return err
	}
	if w.g == 0 {
		return d.errorf("zero Window")
	}
	head, err := d.varint()
	if err != nil {
		return err
	}
	if head < w.minB || head > w.maxB {
		return d.errorf("head bucket %d outside the representable range", head)
	}
	if w.started && head < w.head {
		return d.errorf("head bucket %d before the base's %d", head, w.head)
	}
	var set []wslot
	n, err := w.decodeBuckets(d, head, true, func(x, count int64) {
		set = append(set, wslot{num: x, count: count})
	})
	if err != nil {
		return err
	}
	if err := d.end(); err != nil {
		return err
	}
	if w.ring == nil && n > 0 {
		w.ring = make([]wslot, w.n)
	}
	for _, sl := range set {
		i := w.slotIndex(sl.num)
		w.ring[i] = sl
		w.used |= 1 << (uint64(i) & 63)
	}
	w.started, w.head = true, head
	w.total = w.sumRange(w.lo(head), head)
	w.based, w.since = false, 0
	return nil
}

// decodeBuckets reads the bucket list that follows a head bucket in a
// window's encoding and in its delta: the number of buckets, then each
// bucket's distance before head (oldest first) and its count. Each is
// checked against the window of head (zero counts only where zeroOK: a
// delta may clear a bucket) and handed to put; it returns their number.
func (w *Window) decodeBuckets(d *decoder, head int64, zeroOK bool, put func(x, count int64)) (int, error) {
	n, err := d.count("buckets", 2)
	if err != nil {
		return 0, err
	}
	width := uint64(head - w.lo(head)) // head - first bucket of its window
	if uint64(n) > width+1 {
		return 0, d.errorf("%d buckets in a window of %d", n, width+1)
	}
	prev := uint64(0)
	for k := range n {
		dist, err := d.uvarint()
		if err != nil {
			return 0, err
		}
		if dist > width {
			return 0, d.errorf("bucket %d before the head is outside its window", dist)
		}
		if k > 0 && dist >= prev {
			return 0, d.errorf("buckets are not oldest first")
		}
		prev = dist
		count, err := d.varint()
		if err != nil {
			return 0, err
		}
		if count == 0 && !zeroOK {
			return 0, d.errorf("bucket with a zero count")
		}
		x := head - int64(dist)
		if x < w.minB {
			return 0, d.errorf("bucket %d outside the representable range", x)
		}
		put(x, count)
	}
	return n, nil
}
