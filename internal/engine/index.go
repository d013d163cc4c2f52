package engine

import (
	bits64 "math/bits"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/counterd/counterd/internal/rollup"
)

// The in-memory index: ids are split over numShards shards by the top byte of
// their xxhash. Each shard keeps
//
//   - a slab of entries in fixed chunks, so *entry pointers never move;
//   - the id bytes in an arena of fixed chunks (no per-id allocation);
//   - an open-addressing table of uint32 slots: 8 bits of hash tag and the
//     entry's slab index + 1 (0 = empty, tombstone = tag 0xFF, index 0).
//
// An idle counter costs about 80 bytes of heap (entry, id bytes, slots)
// instead of the ~150 a map[string]*struct would.
//
// Concurrency: lookups take no lock. Writers to the index (insert, remove,
// resize, arena compaction) hold shard.mu and publish with atomic stores:
// slots are stored atomically, the table, chunk list and arena are
// published through atomic pointers, and an entry's idRef (arena epoch,
// offset, length) is stored atomically after its bytes are written. A
// reader that finds anything inconsistent (an arena from another epoch, an
// index past the chunk list) falls back to a lookup under shard.mu.
//
// Each entry carries its own lock word. The id reference of slot i lives in
// a separate array (chunk.refs), so lookups read only cold, read-mostly
// cache lines and a hot counter's own line moves between cores once per
// operation. A reference is never reused for another id (arena offsets only
// grow within an epoch), so "lock the entry, then check refs[i] still holds
// the reference the lookup matched" proves the slot still holds that id.
// All entry fields are guarded by the entry's lock.

const (
	numShards     = 256
	slabChunk     = 256      // entries per slab chunk
	arenaChunk    = 16 << 10 // bytes per arena chunk
	arenaOffBits  = 14       // log2(arenaChunk)
	arenaOffMask  = arenaChunk - 1
	maxShardEntry = 1<<24 - 2 // slab index + 1 must fit in 24 bits
	slotEmpty     = 0
	slotTombstone = 0xFF << 24
	slotIndexMask = 1<<24 - 1
	minTableSize  = 16
)

// entry is one counter: 40 bytes, plus 8 for its id reference in chunk.refs.
type entry struct {
	value   int64 // counter value (KindCounter) or cached value of the state
	version uint64
	updated int64 // unix nanoseconds
	ext     *ext  // nil for a plain counter without TTL
	lk      atomic.Uint32
	kind    Kind
	flags   uint8
}

// chunk is a slab chunk. refs[i] locates entry i's id in the shard's arena
// (epoch<<40 | len<<32 | offset; 0 when the slot is free); it is written
// under shard.mu and read atomically.
type chunk struct {
	e    [slabChunk]entry
	refs [slabChunk]atomic.Uint64
}

// dirtyBits is the dirty set of a slab chunk: bit i%64 of word i/64 is
// entry i. It is a separate allocation so that a chunk stays exactly a
// size class (12 KiB).
type dirtyBits [slabChunk / 64]atomic.Uint64

const (
	flagDirty         uint8 = 1 << iota // changed since the last flush; on the shard's dirty set
	flagRollReset                       // stored rollups of this id must be deleted (rollup.go)
	flagRollResetting                   // that deletion is in the flush being written
)

// ext holds what most counters do not need.
type ext struct {
	expires int64         // unix nanoseconds, 0 = none
	state   any           // *counter.Sharded, *counter.PN, *counter.HLL, *counter.Window or *counter.Hash
	roll    *rollup.State // rollups, when a spec covers the counter (rollup.go)
}

// lock spins until it holds en's lock: critical sections are a few dozen
// instructions. It waits on plain loads (so waiting cores share the cache
// line instead of stealing it from the holder) and yields the processor
// after a while, in case the holder was descheduled.
func (en *entry) lock() {
	if en.lk.CompareAndSwap(0, 1) {
		return
	}
	for spin := 0; ; spin++ {
		if en.lk.Load() == 0 && en.lk.CompareAndSwap(0, 1) {
			return
		}
		if spin >= 100 {
			runtime.Gosched()
			spin = 0
		}
	}
}

func (en *entry) unlock() { en.lk.Store(0) }

type table struct{ slots []uint32 } // slots are read and written atomically

type arena struct {
	epoch  uint64
	chunks []*[arenaChunk]byte
	used   int // bytes used in the last chunk, guarded by shard.mu
}

type shard struct {
	mu      sync.Mutex               // serializes writers of the fields below
	tab     atomic.Pointer[table]    //
	chunks  atomic.Pointer[[]*chunk] //
	ar      atomic.Pointer[arena]    //
	used    int                      // live slots, guarded by mu
	tombs   int                      // tombstones, guarded by mu
	nslab   int                      // slab entries handed out, guarded by mu
	free    []uint32                 // freed slab indexes, guarded by mu
	garbage int                      // arena bytes of freed ids, guarded by mu

	// ndirty counts the dirty bits set in the chunks (chunk.dirty): the
	// dirty set is a bitmap of 1 bit per slab entry rather than a list of
	// 4-byte indexes, and the flusher skips a shard whose count is 0.
	ndirty atomic.Int64
	dbits  atomic.Pointer[[]*dirtyBits] // one per chunk, published like chunks

	ttlMu sync.Mutex
	ttl   map[uint32]struct{} // slab indexes that had a TTL set, guarded by ttlMu
}

func hashID(id string) uint64 { return xxhash.Sum64String(id) }

func shardOf(h uint64) int { return int(h >> 56) }

func tagOf(h uint64) uint32 {
	t := uint32(h>>48) & 0xFF
	if t == 0 || t == 0xFF {
		t = 1 // 0xFF tags tombstones
	}
	return t
}

// at returns the entry at slab index i and its id reference, or nil if the
// chunk list seen does not reach it.
func (s *shard) at(i uint32) (*entry, *atomic.Uint64) {
	cp := s.chunks.Load()
	if cp == nil || int(i/slabChunk) >= len(*cp) {
		return nil, nil
	}
	c := (*cp)[i/slabChunk]
	return &c.e[i%slabChunk], &c.refs[i%slabChunk]
}

func (s *shard) entryAt(i uint32) *entry { en, _ := s.at(i); return en }

func (s *shard) refOf(i uint32) uint64 {
	_, r := s.at(i)
	return r.Load()
}

// idOf returns the bytes of the id that ref locates in arena a, or false if
// it is not in a (freed, or a was replaced by a compaction).
func idOf(a *arena, ref uint64) ([]byte, bool) {
	if ref == 0 || a == nil || ref>>40 != a.epoch {
		return nil, false
	}
	n, off := uint32(ref>>32)&0xFF, uint32(ref)
	c := int(off >> arenaOffBits)
	if c >= len(a.chunks) {
		return nil, false
	}
	o := off & arenaOffMask
	return a.chunks[c][o : o+n], true
}

// idLocked returns a copy of the id of slab index i. Caller holds mu.
func (s *shard) idLocked(i uint32) string {
	b, _ := idOf(s.ar.Load(), s.refOf(i))
	return string(b)
}

// find returns the slab index, entry and id reference of id without
// locking. A miss may be spurious while a writer reorganises the shard;
// callers that must know call findLocked.
func (s *shard) find(id string, h uint64) (uint32, *entry, uint64, bool) {
	t := s.tab.Load()
	if t == nil {
		return 0, nil, 0, false
	}
	a := s.ar.Load()
	mask := uint64(len(t.slots) - 1)
	tag := tagOf(h)
	for p, n := h&mask, 0; n < len(t.slots); p, n = (p+1)&mask, n+1 {
		v := atomic.LoadUint32(&t.slots[p])
		if v == slotEmpty {
			return 0, nil, 0, false
		}
		if v>>24 != tag || v&slotIndexMask == 0 {
			continue
		}
		i := v&slotIndexMask - 1
		en, rp := s.at(i)
		if en == nil {
			return 0, nil, 0, false
		}
		ref := rp.Load()
		if b, ok := idOf(a, ref); ok && string(b) == id {
			return i, en, ref, true
		}
	}
	return 0, nil, 0, false
}

// findLocked is find under mu, where it cannot miss spuriously.
func (s *shard) findLocked(id string, h uint64) (uint32, *entry, uint64, bool) {
	return s.find(id, h)
}

// insertLocked adds id, which must not be present, and returns its new
// entry (KindNone, unlocked) and id reference. Caller holds mu.
func (s *shard) insertLocked(id string, h uint64) (uint32, *entry, uint64, bool) {
	t := s.tab.Load()
	if t == nil || (s.used+s.tombs+1)*4 >= len(t.slots)*3 {
		t = s.resizeLocked()
	}
	var i uint32
	if n := len(s.free); n > 0 {
		i = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		if s.nslab >= maxShardEntry {
			return 0, nil, 0, false
		}
		if s.nslab%slabChunk == 0 {
			var old []*chunk
			if cp := s.chunks.Load(); cp != nil {
				old = *cp
			}
			var oldBits []*dirtyBits
			if bp := s.dbits.Load(); bp != nil {
				oldBits = *bp
			}
			nb := append(oldBits[:len(oldBits):len(oldBits)], new(dirtyBits))
			s.dbits.Store(&nb) // before the chunk: markDirty finds the bits of any chunk it sees
			nc := append(old[:len(old):len(old)], new(chunk))
			s.chunks.Store(&nc)
		}
		i = uint32(s.nslab)
		s.nslab++
	}
	en, rp := s.at(i)
	// Lock it: scans (Scan, the janitor) lock entries by slab index.
	en.lock()
	en.value, en.version, en.updated, en.ext = 0, 0, 0, nil
	en.kind, en.flags = KindNone, 0
	ref := s.appendIDLocked(id)
	rp.Store(ref)
	en.unlock()
	s.placeLocked(t, h, tagOf(h)<<24|(i+1))
	s.used++
	return i, en, ref, true
}

func (s *shard) placeLocked(t *table, h uint64, v uint32) {
	mask := uint64(len(t.slots) - 1)
	for p := h & mask; ; p = (p + 1) & mask {
		switch atomic.LoadUint32(&t.slots[p]) {
		case slotEmpty:
			atomic.StoreUint32(&t.slots[p], v)
			return
		case slotTombstone:
			atomic.StoreUint32(&t.slots[p], v)
			s.tombs--
			return
		}
	}
}

// resizeLocked publishes a new table without tombstones, doubled if it is
// more than half full. Readers of the old table still find every live id.
func (s *shard) resizeLocked() *table {
	n := minTableSize
	old := s.tab.Load()
	if old != nil {
		n = len(old.slots)
		if s.used*2 >= n {
			n *= 2
		}
	}
	t := &table{slots: make([]uint32, n)}
	s.tombs = 0
	if old != nil {
		a := s.ar.Load()
		for _, v := range old.slots {
			if v == slotEmpty || v == slotTombstone {
				continue
			}
			b, _ := idOf(a, s.refOf(v&slotIndexMask-1))
			s.placeLocked(t, xxhash.Sum64(b), v)
		}
	}
	s.tab.Store(t)
	return t
}

// appendIDLocked copies id into the arena and returns its idRef.
func (s *shard) appendIDLocked(id string) uint64 {
	a := s.ar.Load()
	if a == nil {
		a = &arena{epoch: 1}
		s.ar.Store(a)
	}
	if len(a.chunks) == 0 || a.used+len(id) > arenaChunk {
		// Publish a new arena value (same epoch, one more chunk): readers
		// may be reading the old value's chunk list.
		chunks := append(a.chunks[:len(a.chunks):len(a.chunks)], new([arenaChunk]byte))
		a = &arena{epoch: a.epoch, chunks: chunks}
		s.ar.Store(a)
	}
	c := len(a.chunks) - 1
	copy(a.chunks[c][a.used:], id)
	ref := a.epoch<<40 | uint64(len(id))<<32 | uint64(c)<<arenaOffBits | uint64(a.used)
	a.used += len(id)
	return ref
}

// removeLocked frees slab index i, whose entry is locked by the caller, and
// unlocks it. Caller holds mu.
func (s *shard) removeLocked(i uint32, h uint64) {
	t := s.tab.Load()
	mask := uint64(len(t.slots) - 1)
	want := i + 1
	for p := h & mask; ; p = (p + 1) & mask {
		v := atomic.LoadUint32(&t.slots[p])
		if v == slotEmpty {
			panic("engine: index invariant broken: removing an entry that is not in the table")
		}
		if v != slotTombstone && v&slotIndexMask == want {
			atomic.StoreUint32(&t.slots[p], slotTombstone)
			break
		}
	}
	en, rp := s.at(i)
	s.garbage += int(rp.Load()>>32) & 0xFF
	rp.Store(0)
	en.value, en.version, en.updated, en.ext, en.kind, en.flags = 0, 0, 0, nil, KindNone, 0
	en.unlock()
	s.free = append(s.free, i)
	s.used--
	s.tombs++
	if a := s.ar.Load(); s.garbage > arenaChunk*4 && s.garbage*2 > len(a.chunks)*arenaChunk {
		s.compactArenaLocked()
	}
}

// compactArenaLocked copies live ids into an arena of the next epoch.
// Readers holding an idRef of the old epoch see it does not match and look
// again under mu.
func (s *shard) compactArenaLocked() {
	old := s.ar.Load()
	na := &arena{epoch: old.epoch + 1}
	refs := make(map[*atomic.Uint64]uint64)
	s.ar.Store(na)
	t := s.tab.Load()
	for _, v := range t.slots {
		if v == slotEmpty || v == slotTombstone {
			continue
		}
		_, rp := s.at(v&slotIndexMask - 1)
		b, _ := idOf(old, rp.Load())
		refs[rp] = s.appendIDLocked(string(b))
	}
	for rp, ref := range refs {
		rp.Store(ref)
	}
	s.garbage = 0
}

// markDirty puts slab index i on the dirty set. Caller holds the entry's
// lock and has just set flagDirty.
func (s *shard) markDirty(i uint32) {
	bp := s.dbits.Load()
	(*bp)[i/slabChunk][i%slabChunk/64].Or(1 << (i % 64))
	s.ndirty.Add(1)
}

// takeDirty empties the dirty set and returns it, in slab order, appended
// to list.
func (s *shard) takeDirty(list []uint32) []uint32 {
	if s.ndirty.Load() == 0 {
		return list
	}
	bp := s.dbits.Load()
	if bp == nil {
		return list
	}
	n := 0
	for ci, d := range *bp {
		for w := range d {
			bits := d[w].Swap(0)
			for bits != 0 {
				b := uint32(bits64.TrailingZeros64(bits))
				bits &= bits - 1
				list = append(list, uint32(ci)*slabChunk+uint32(w)*64+b)
				n++
			}
		}
	}
	s.ndirty.Add(-int64(n))
	return list
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
