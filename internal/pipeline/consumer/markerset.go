package consumer

import "hash/maphash"

// markerSet is the set of the markers of a segment's events (a duplicate
// within the segment is dropped before the engine sees it). It replaces a
// map[string]struct{} cleared after every segment: an open-addressing
// table (linear probing) of the markers' hashes and indexes into keys,
// reused from one segment to the next; a probe compares a hash and then
// the marker itself, so a collision of hashes costs a comparison, never
// a wrong answer. At most half full.
type markerSet struct {
	slots []opSlot // len a power of two, or none; j indexes keys (+1; 0: empty)
	keys  []string
}

var markerSeed = maphash.MakeSeed()

// add adds mk and reports whether it was new.
func (t *markerSet) add(mk string) bool {
	if 2*(len(t.keys)+1) > len(t.slots) {
		t.grow()
	}
	h := fold(maphash.String(markerSeed, mk))
	mask := uint32(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.j == 0 {
			t.keys = append(t.keys, mk)
			*s = opSlot{h, int32(len(t.keys))}
			return true
		}
		if s.h == h && t.keys[s.j-1] == mk {
			return false
		}
	}
}

// reset empties t, keeping its size; it drops the references to the
// markers.
func (t *markerSet) reset() {
	if len(t.keys) == 0 {
		return
	}
	clear(t.slots)
	clear(t.keys)
	t.keys = t.keys[:0]
}

func (t *markerSet) grow() { t.slots = growSlots(t.slots) }
