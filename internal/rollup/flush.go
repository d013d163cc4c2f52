package rollup

import (
	"encoding/binary"
	"fmt"

	"github.com/counterd/counterd/internal/counter"
)

// Flush is what the engine writes for one State in one flush: the head (the
// open chunks and sketches, replacing the stored head) and every closed
// chunk and sketch not yet known to be stored. Its data is immutable.
type Flush struct {
	Head     []byte
	Chunks   []Chunk
	Sketches []ClosedSketch
}

// Chunk is a closed chunk of count buckets: Values[i] is bucket
// G.chunkFirst(Index)+i.
type Chunk struct {
	G      Granularity
	Index  int64
	Values []int64
	// Add: Values are deltas (a late chunk, State.AddAt) to add to the
	// stored chunk, or to the one written before in the same flush.
	Add bool
}

// ClosedSketch is the sketch of one closed hour or day. Prev is the unit
// closed before it (HasPrev false for the first), which BlockUpdates needs.
type ClosedSketch struct {
	Unit    Granularity
	Index   int64
	HasPrev bool
	Prev    int64
	Sketch  *counter.HLL
	// Late: the sketch of a unit before the open one (State.AddHashAt),
	// to merge into the stored one; LateBlockUpdates then rebuilds the
	// unions of the complete blocks that hold it or Prev, up to Upto
	// (the unit before the open one).
	Late bool
	Upto int64
}

// TakeFlush returns what to write for s in flush generation gen (> 0) and
// remembers gen on the closed items it returns; Committed(gen) drops them
// once that flush is on disk. Items returned by a flush that failed are
// returned again by the next TakeFlush.
func (s *State) TakeFlush(gen uint64) (Flush, error) {
	head, err := s.MarshalHead()
	if err != nil {
		return Flush{}, err
	}
	f := Flush{Head: head}
	for i := range s.closed {
		it := &s.closed[i]
		it.gen = gen
		switch {
		case it.sketch && it.late:
			k := s.sketches[sketchSlot(it.g)]
			if k == nil {
				continue // the unit is no longer kept: dropped below
			}
			upto := k.lastClosed
			if k.started {
				upto = k.idx - 1
			}
			f.Sketches = append(f.Sketches, ClosedSketch{Unit: it.g, Index: it.idx, HasPrev: it.hasPrev, Prev: it.prev, Sketch: it.h, Late: true, Upto: max(upto, it.idx)})
		case it.sketch:
			f.Sketches = append(f.Sketches, ClosedSketch{Unit: it.g, Index: it.idx, HasPrev: it.hasPrev, Prev: it.prev, Sketch: it.h})
		default:
			f.Chunks = append(f.Chunks, Chunk{G: it.g, Index: it.idx, Values: it.vals, Add: it.late})
		}
	}
	return f, nil
}

// Committed tells s that flush generation gen is on disk: the closed items
// it wrote leave memory.
func (s *State) Committed(gen uint64) {
	out := s.closed[:0]
	for _, it := range s.closed {
		if it.gen == 0 || it.gen > gen {
			out = append(out, it)
			continue
		}
		if it.sketch {
			if k := s.sketches[sketchSlot(it.g)]; k != nil && (!k.hasFlushed || it.idx > k.flushed) {
				k.hasFlushed, k.flushed = true, it.idx
			}
		}
	}
	clear(s.closed[len(out):])
	s.closed = out
	if len(out) == 0 {
		s.closed = nil
	}
}

// Head encoding: format byte, uvarint number of sections, then per section
// a tag byte and its fields:
//
//	tag g (0..3), an open chunk: varint chunk index, uvarint n, n varint values
//	tag 0x10|unit, a sketch unit: flags (1 open sketch, 2 a unit was closed),
//	  [varint index, uvarint length, sketch bytes], [varint last closed unit]
const (
	formatHead  byte = 0x71
	formatChunk byte = 0x72
	tagSketch   byte = 0x10
)

// MarshalHead encodes the open part of s.
func (s *State) MarshalHead() ([]byte, error) {
	b := []byte{formatHead, 0}
	n := 0
	for _, c := range s.counts {
		if c == nil || !c.started {
			continue
		}
		n++
		b = append(b, byte(c.g))
		b = binary.AppendVarint(b, c.idx)
		b = appendValues(b, c.vals)
	}
	for _, k := range s.sketches {
		if k == nil || (!k.started && !k.hasClosed) {
			continue
		}
		n++
		var flags byte
		if k.started {
			flags |= 1
		}
		if k.hasClosed {
			flags |= 2
		}
		b = append(b, tagSketch|byte(k.unit), flags)
		if k.started {
			hb, err := k.h.MarshalBinary()
			if err != nil {
				return nil, err
			}
			b = binary.AppendVarint(b, k.idx)
			b = binary.AppendUvarint(b, uint64(len(hb)))
			b = append(b, hb...)
		}
		if k.hasClosed {
			b = binary.AppendVarint(b, k.lastClosed)
		}
	}
	if n > 127 {
		panic("rollup: more head sections than fit a byte")
	}
	b[1] = byte(n)
	return b, nil
}

// appendValues appends uvarint n and n varints, trailing zeros left out.
func appendValues(b []byte, vals []int64) []byte {
	n := len(vals)
	for n > 0 && vals[n-1] == 0 {
		n--
	}
	b = binary.AppendUvarint(b, uint64(n))
	for _, v := range vals[:n] {
		b = binary.AppendVarint(b, v)
	}
	return b
}

// UnmarshalHead returns the State that MarshalHead encoded, following spec
// (sections spec does not keep are skipped). It returns nil and no error
// when nothing spec keeps remains.
func UnmarshalHead(spec *Spec, sketches bool, data []byte) (*State, error) {
	d := decoder{b: data}
	if f := d.byte(); f != formatHead {
		return nil, fmt.Errorf("%w: head: format byte %#x", ErrCorrupt, f)
	}
	s := NewState(spec, sketches)
	for n := d.byte(); n > 0 && d.err == nil; n-- {
		tag := d.byte()
		switch {
		case tag < byte(numGranularities):
			g := Granularity(tag)
			idx := d.varint()
			if d.err == nil && !g.validChunk(idx) {
				d.fail("chunk %d out of range", idx)
			}
			vals := d.values(g.chunkLen(idx))
			if s != nil && s.counts[g] != nil && d.err == nil {
				c := s.counts[g]
				c.started, c.idx, c.vals = true, idx, vals
			}
		case tag == tagSketch|byte(Hour) || tag == tagSketch|byte(Day):
			unit := Granularity(tag &^ tagSketch)
			flags := d.byte()
			if flags&^3 != 0 {
				d.fail("sketch flags %#x", flags)
			}
			var k openSketch
			k.unit = unit
			if flags&1 != 0 {
				k.started, k.idx = true, d.varint()
				if d.err == nil && !unit.validBucket(k.idx) {
					d.fail("sketch unit %d out of range", k.idx)
				}
				raw := d.bytes(int(d.uvarint()))
				k.h = new(counter.HLL)
				if d.err == nil {
					if err := k.h.UnmarshalBinary(raw); err != nil {
						d.fail("sketch: %v", err)
					}
				}
				k.lo, k.hi = unit.Start(k.idx), unit.Start(k.idx+1)
			}
			if flags&2 != 0 {
				k.hasClosed, k.lastClosed = true, d.varint()
				if d.err == nil && !unit.validBucket(k.lastClosed) {
					d.fail("sketch unit %d out of range", k.lastClosed)
				}
				// The head is written in the same batch as the closed
				// units it remembers.
				k.hasFlushed, k.flushed = true, k.lastClosed
			}
			if s != nil && s.sketches[sketchSlot(unit)] != nil && d.err == nil {
				*s.sketches[sketchSlot(unit)] = k
			}
		default:
			d.fail("unknown section %#x", tag)
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return s, nil
}

// MarshalChunk encodes a chunk's values: format byte, uvarint n, n varints
// (trailing zeros left out).
func MarshalChunk(vals []int64) []byte {
	return appendValues([]byte{formatChunk}, vals)
}

// DecodeChunk decodes what MarshalChunk wrote for a chunk of g with index
// idx, reusing buf's storage when it is large enough (buf may be nil).
func DecodeChunk(g Granularity, idx int64, data []byte, buf []int64) ([]int64, error) {
	d := decoder{b: data}
	if f := d.byte(); f != formatChunk {
		return nil, fmt.Errorf("%w: chunk: format byte %#x", ErrCorrupt, f)
	}
	if !g.validChunk(idx) {
		return nil, fmt.Errorf("%w: chunk %d out of range", ErrCorrupt, idx)
	}
	vals := d.valuesInto(g.chunkLen(idx), buf)
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	return vals, d.err
}

// decoder reads varints; the first failure sticks in err.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.fail("unexpected end of input")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	u := d.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.fail("%d bytes wanted, %d left", n, len(d.b))
		return nil
	}
	b := d.b[:n:n]
	d.b = d.b[n:]
	return b
}

// values reads uvarint n (at most max) and n varints.
func (d *decoder) values(max int) []int64 { return d.valuesInto(max, nil) }

func (d *decoder) valuesInto(max int, buf []int64) []int64 {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(max) || n > uint64(len(d.b)) {
		d.fail("%d values in a chunk of %d", n, max)
		return nil
	}
	vals := buf[:0]
	if uint64(cap(buf)) < n {
		vals = make([]int64, n)
	}
	vals = vals[:n]
	for i := range vals {
		vals[i] = d.varint()
	}
	return vals
}
