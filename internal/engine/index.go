package engine

import (
	"sync"

	"github.com/cespare/xxhash/v2"
)

// The in-memory index: ids are split over numShards shards by the top byte of
// their xxhash. Each shard keeps
//
//   - a slab of entries in fixed chunks, so *entry pointers never move;
//   - the id bytes in an arena of fixed chunks (no per-id allocation);
//   - an open-addressing table of uint32 slots: 8 bits of hash tag and the
//     entry's slab index + 1 (0 = empty, tombstone = tagged 0).
//
// This keeps an idle counter near 80 bytes of heap (entry, id bytes, slots)
// instead of the ~150 a map[string]*struct would cost.
//
// Locking: shard.mu guards the table, the slab's chunk list, the arena and
// the free list. An entry's fields are guarded by its stripe lock
// (Engine.stripe); an entry is only freed by the flusher while holding both
// shard.mu and the stripe lock, and freeing bumps entry.gen, so a lookup that
// dropped shard.mu before taking the stripe lock re-checks gen.

const (
	numShards     = 256
	slabChunk     = 256       // entries per slab chunk
	arenaChunk    = 16 << 10  // bytes per arena chunk
	maxShardEntry = 1<<24 - 2 // slab index must fit in 24 bits (minus the +1 bias)
	slotEmpty     = 0
	slotTombstone = 0xFF << 24
	slotIndexMask = 1<<24 - 1
	minTableSize  = 16
	arenaOffBits  = 14 // log2(arenaChunk)
	arenaOffMask  = arenaChunk - 1
)

// entry is one counter. 48 bytes.
type entry struct {
	value   int64 // counter value (KindCounter) or cached value of the state
	version uint64
	updated int64 // unix nanoseconds
	ext     *ext  // nil for a plain counter without TTL
	idOff   uint32
	gen     uint32 // bumped when the slot is freed
	kind    Kind
	flags   uint8
	idLen   uint8
}

const (
	flagDirty uint8 = 1 << iota // changed since the last flush; on the shard's dirty list
)

// ext holds what most counters do not need.
type ext struct {
	expires int64 // unix nanoseconds, 0 = none
	state   any   // *counter.Sharded, *counter.PN, *counter.HLL, *counter.Window or *counter.Hash
}

type shard struct {
	mu      sync.RWMutex
	table   []uint32  // guarded by mu
	used    int       // live slots, guarded by mu
	tombs   int       // tombstones, guarded by mu
	chunks  [][]entry // guarded by mu (append); entries guarded by stripes
	nslab   int       // slab entries handed out, guarded by mu
	free    []uint32  // freed slab indexes, guarded by mu
	arena   [][]byte  // guarded by mu
	garbage int       // arena bytes of freed ids, guarded by mu
	live    int       // entries in the table, guarded by mu

	dirtyMu sync.Mutex
	dirty   []uint32 // slab indexes with flagDirty set, guarded by dirtyMu

	ttlMu sync.Mutex
	ttl   map[uint32]struct{} // slab indexes that had a TTL set, guarded by ttlMu
}

func hashID(id string) uint64 { return xxhash.Sum64String(id) }

func shardOf(h uint64) int { return int(h >> 56) }

func tagOf(h uint64) uint32 {
	t := uint32(h>>48) & 0xFF
	if t == 0 {
		t = 1 // tag 0 is reserved for tombstones
	}
	return t
}

// entryLocked returns the entry at slab index i. Caller holds mu (read or write).
func (s *shard) entryLocked(i uint32) *entry {
	return &s.chunks[i/slabChunk][i%slabChunk]
}

// idLocked returns the id bytes of e as a string that aliases the arena.
// Caller holds mu; the string is valid until mu is released.
func (s *shard) idBytesLocked(e *entry) []byte {
	c := s.arena[e.idOff>>arenaOffBits]
	o := e.idOff & arenaOffMask
	return c[o : o+uint32(e.idLen)]
}

// idLocked returns a copy of the id of e. Caller holds mu.
func (s *shard) idLocked(e *entry) string { return string(s.idBytesLocked(e)) }

// findLocked returns the slab index of id, or false. Caller holds mu.
func (s *shard) findLocked(id string, h uint64) (uint32, bool) {
	if len(s.table) == 0 {
		return 0, false
	}
	mask := uint64(len(s.table) - 1)
	tag := tagOf(h)
	for p := h & mask; ; p = (p + 1) & mask {
		v := s.table[p]
		if v == slotEmpty {
			return 0, false
		}
		if v>>24 == tag && v&slotIndexMask != 0 {
			i := v&slotIndexMask - 1
			e := s.entryLocked(i)
			if int(e.idLen) == len(id) && string(s.idBytesLocked(e)) == id {
				return i, true
			}
		}
	}
}

// insertLocked adds id, which must not be present, and returns its new
// entry's slab index. The entry starts as KindNone. Caller holds mu for write.
func (s *shard) insertLocked(id string, h uint64) (uint32, bool) {
	if (s.used+s.tombs+1)*4 >= len(s.table)*3 {
		s.resizeLocked()
	}
	var i uint32
	if n := len(s.free); n > 0 {
		i = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		if s.nslab >= maxShardEntry {
			return 0, false
		}
		if s.nslab%slabChunk == 0 {
			s.chunks = append(s.chunks, make([]entry, slabChunk))
		}
		i = uint32(s.nslab)
		s.nslab++
	}
	// Set every field but gen: a stale lookup may be reading gen under the
	// stripe lock to learn that its entry was freed.
	e := s.entryLocked(i)
	e.value, e.version, e.updated, e.ext = 0, 0, 0, nil
	e.kind, e.flags = KindNone, 0
	e.idLen, e.idOff = uint8(len(id)), s.appendIDLocked(id)
	s.placeLocked(h, tagOf(h)<<24|(i+1))
	s.used++
	s.live++
	return i, true
}

func (s *shard) placeLocked(h uint64, v uint32) {
	mask := uint64(len(s.table) - 1)
	for p := h & mask; ; p = (p + 1) & mask {
		switch s.table[p] {
		case slotEmpty:
			s.table[p] = v
			return
		case slotTombstone:
			s.table[p] = v
			s.tombs--
			return
		}
	}
}

// resizeLocked rebuilds the table without tombstones, doubling it if it is
// more than half full.
func (s *shard) resizeLocked() {
	n := len(s.table)
	if n == 0 {
		n = minTableSize
	} else if s.used*2 >= n {
		n *= 2
	}
	old := s.table
	s.table = make([]uint32, n)
	s.tombs = 0
	for _, v := range old {
		if v == slotEmpty || v == slotTombstone {
			continue
		}
		e := s.entryLocked(v&slotIndexMask - 1)
		s.placeLocked(xxhash.Sum64(s.idBytesLocked(e)), v)
	}
}

func (s *shard) appendIDLocked(id string) uint32 {
	n := len(s.arena)
	if n == 0 || len(s.arena[n-1])+len(id) > arenaChunk {
		s.arena = append(s.arena, make([]byte, 0, arenaChunk))
		n++
	}
	c := s.arena[n-1]
	off := uint32(n-1)<<arenaOffBits | uint32(len(c))
	s.arena[n-1] = append(c, id...)
	return off
}

// removeLocked frees slab index i (holding id with hash h). Caller holds mu
// for write and the entry's stripe lock.
func (s *shard) removeLocked(i uint32, h uint64) {
	mask := uint64(len(s.table) - 1)
	want := i + 1
	for p := h & mask; ; p = (p + 1) & mask {
		v := s.table[p]
		if v == slotEmpty {
			panic("engine: index invariant broken: removing an entry that is not in the table")
		}
		if v != slotTombstone && v&slotIndexMask == want {
			s.table[p] = slotTombstone
			break
		}
	}
	e := s.entryLocked(i)
	s.garbage += int(e.idLen)
	*e = entry{gen: e.gen + 1}
	// The slot is reused by insertLocked, which resets the other fields.
	s.free = append(s.free, i)
	s.used--
	s.tombs++
	s.live--
	if s.garbage > arenaChunk*4 && s.garbage*2 > len(s.arena)*arenaChunk {
		s.compactArenaLocked()
	}
}

// compactArenaLocked copies live ids into a fresh arena. Entries' idOff
// change, which is why readers resolve ids only while holding mu.
func (s *shard) compactArenaLocked() {
	old := s.arena
	s.arena = nil
	s.garbage = 0
	for _, v := range s.table {
		if v == slotEmpty || v == slotTombstone {
			continue
		}
		e := s.entryLocked(v&slotIndexMask - 1)
		c := old[e.idOff>>arenaOffBits]
		o := e.idOff & arenaOffMask
		e.idOff = s.appendIDLocked(string(c[o : o+uint32(e.idLen)]))
	}
}

// markDirty puts slab index i on the dirty list. Caller holds the entry's
// stripe lock and has just set flagDirty.
func (s *shard) markDirty(i uint32) {
	s.dirtyMu.Lock()
	s.dirty = append(s.dirty, i)
	s.dirtyMu.Unlock()
}

// trackTTL remembers that slab index i has a TTL, for active expiry.
func (s *shard) trackTTL(i uint32) {
	s.ttlMu.Lock()
	if s.ttl == nil {
		s.ttl = make(map[uint32]struct{})
	}
	s.ttl[i] = struct{}{}
	s.ttlMu.Unlock()
}
