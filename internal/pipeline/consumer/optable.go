package consumer

import "github.com/counterd/counterd/internal/contract"

// opTable finds the op of a chunk that an op of the same key (type, id,
// window spec and event-time bucket: opKey) merges into. It replaces a
// map[opKey]int, whose hashing of the whole key struct and comparison
// through the key's type functions cost a fifth of a microsecond per
// event: an open-addressing table (linear probing) of the keys' hashes
// and indexes into the chunk's ops, whose fields are the keys, so a probe
// compares a hash and then the fields themselves. At most half full;
// reset keeps its size.
type opTable struct {
	slots []opSlot // len a power of two, or none
	n     int
}

// opSlot: the hash of an op's key, folded to 32 bits (fold), and its
// index in the ops + 1 (0: empty). Eight bytes, so that a table of a
// batch's ops (tens of thousands of slots) takes half the cache lines it
// took with the whole hash: a probe of a table that big misses the cache
// more often than not, and most of find's time was that miss.
type opSlot struct {
	h uint32
	j int32
}

// fold is the hash a slot keeps of a 64-bit hash h; a table's slot for
// it is fold(h) & mask.
func fold(h uint64) uint32 { return uint32(h ^ h>>32) }

// opHash hashes op's key (opKey's fields) given idh, the hash of its id
// (rules.Hit.IDHash: the rules hashed it as they built it).
func opHash(op *contract.Op, idh uint64) uint64 {
	h := idh
	// Mix the other fields in (multiply-xorshift): a collision only costs
	// a comparison of the fields.
	for _, x := range [...]uint64{uint64(op.Type), uint64(op.At), uint64(op.Window.Granularity), uint64(op.Window.Span), b2u(op.Window.Fixed)} {
		h = (h ^ x) * 0x9e3779b97f4a7c15
		h ^= h >> 29
	}
	return h
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// sameKey reports whether a and b have the same opKey.
func sameKey(a, b *contract.Op) bool {
	return a.Type == b.Type && a.At == b.At && a.Window == b.Window && a.ID == b.ID
}

func (t *opTable) reset() {
	clear(t.slots)
	t.n = 0
}

// find returns the index in ops of the op with op's key (hash h), or -1.
func (t *opTable) find(ops []contract.Op, op *contract.Op, h uint64) int {
	if len(t.slots) == 0 {
		return -1
	}
	mask := uint32(len(t.slots) - 1)
	f := fold(h)
	for i := f & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.j == 0 {
			return -1
		}
		if s.h == f && sameKey(&ops[s.j-1], op) {
			return int(s.j - 1)
		}
	}
}

// put makes j (an index in ops whose op has hash h) the op of its key,
// replacing the one the key had.
func (t *opTable) put(ops []contract.Op, h uint64, j int) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	mask := uint32(len(t.slots) - 1)
	f := fold(h)
	for i := f & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.j == 0 {
			*s = opSlot{f, int32(j + 1)}
			t.n++
			return
		}
		if s.h == f && sameKey(&ops[s.j-1], &ops[j]) {
			s.j = int32(j + 1)
			return
		}
	}
}

func (t *opTable) grow() { t.slots = growSlots(t.slots) }

// growSlots returns a table twice as big as old (at least 1024 slots)
// holding old's slots (opTable, markerSet).
func growSlots(old []opSlot) []opSlot {
	slots := make([]opSlot, max(2*len(old), 1024))
	mask := uint32(len(slots) - 1)
	for _, s := range old {
		if s.j == 0 {
			continue
		}
		i := s.h & mask
		for slots[i].j != 0 {
			i = (i + 1) & mask
		}
		slots[i] = s
	}
	return slots
}
