package engine

import (
	bits64 "math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cespare/xxhash/v2"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/rollup"
)

// The in-memory index: ids are split over numShards shards by the top byte of
// their xxhash. Each shard keeps
//
//   - a slab of 24-byte entries in fixed chunks, so *entry pointers never
//     move;
//   - the id bytes in an arena of fixed chunks (no per-id allocation), each
//     id as a length byte and its bytes;
//   - an open-addressing table of uint32 slots: 8 bits of hash tag and the
//     entry's slab index + 1 (0 = empty, tombstone = tag 0xFF, index 0).
//
// An idle counter with a 24-byte id costs about 63 bytes of heap (entry,
// id reference, id bytes, slots, chunk slack; docs/bench/history.md,
// "Engine: memory per idle counter") instead of the ~150 a
// map[string]*struct would.
//
// Concurrency: lookups take no lock. Writers to the index (insert, remove,
// resize, arena compaction) hold shard.mu and publish with atomic stores:
// slots are stored atomically, the table, chunk list and arena are
// published through atomic pointers, and an entry's id reference (a
// logical arena offset) is stored atomically after its bytes are written.
// Logical offsets only grow: a compacted arena starts where the one it
// replaces ended, so a reference and an arena that do not belong together
// fall outside the arena's range, and a reader that finds anything
// inconsistent (a reference outside its arena, an index past the chunk
// list) falls back to a lookup under shard.mu.
//
// Each entry carries its own lock word. The id reference of slot i lives in
// a separate array (chunk.refs), so lookups read only cold, read-mostly
// cache lines and a hot counter's own line moves between cores once per
// operation. A reference is never reused for another id (offsets only grow,
// until the 32-bit space wraps after 4 GiB of ids were written to one
// shard), so "lock the entry, then check refs[i] still holds the reference
// the lookup matched" proves the slot still holds that id. All entry
// fields, and the chunk's side tables at the entry's index, are guarded by
// the entry's lock.

const (
	numShards     = 256
	slabChunk     = 218     // entries per slab chunk: a chunk is one 6 KiB size class
	arenaChunk    = 4 << 10 // bytes per arena chunk
	arenaOffBits  = 12      // log2(arenaChunk)
	arenaOffMask  = arenaChunk - 1
	arenaFirst    = arenaChunk // logical offset of the first arena (0 = no id)
	maxShardEntry = 1<<24 - 2  // slab index + 1 must fit in 24 bits
	slotEmpty     = 0
	slotTombstone = 0xFF << 24
	slotIndexMask = 1<<24 - 1
	minTableSize  = 16
)

// entry is one counter: 24 bytes, plus 4 for its id reference in
// chunk.refs. What most counters do not need lives in side tables of the
// entry's chunk, found from the entry's index in its chunk (kept in the
// lock word): the ext pointer and the high 32 bits of the version (a
// cluster owner's epoch, docs/cluster.md). Flags in the lock word say
// whether an entry has either, so a plain counter never reads them.
type entry struct {
	value   int64  // counter value (KindCounter) or cached value of the state
	updated int64  // unix nanoseconds
	ver     uint32 // low 32 bits of the version
	// lk is the lock bit, the flags, the kind and the entry's index in its
	// chunk. Only the lock's holder changes the flags and the kind (with
	// atomic stores: waiters read the word to see the lock bit).
	lk atomic.Uint32
}

// The lock word.
const (
	lockBit           uint32 = 1 << iota
	flagDirty                // changed since the last flush; on the shard's dirty set
	flagRollReset            // stored rollups of this id must be deleted (rollup.go)
	flagRollResetting        // that deletion is in the flush being written
	flagExt                  // chunk.xs holds the entry's ext
	flagHi                   // chunk.hs holds the version's high 32 bits (non-zero)
	flagHot                  // chunk.ht holds the entry's hot state (hot.go)

	kindShift        = 8
	kindMask  uint32 = 0x7 << kindShift // bit 11 is flagLimChanged (limiter.go)
	idxShift         = 12
	idxMask   uint32 = 1<<9 - 1 // slabChunk entries

	// rollFlags are the flags apply.go's undo log saves and restores.
	rollFlags = flagRollReset | flagRollResetting
)

// chunk is a slab chunk. refs[i] locates entry i's id in the shard's arena
// (a logical offset; 0 when the slot is free); it is written under shard.mu
// and read atomically. xs, hs, ht and lim are the side tables, allocated for
// the first entry of the chunk that needs them.
type chunk struct {
	xs   atomic.Pointer[[slabChunk]*ext]
	hs   atomic.Pointer[[slabChunk]uint32]
	ht   atomic.Pointer[[slabChunk]atomic.Pointer[hotCtr]]
	lim  atomic.Pointer[limSide] // limiter entries' state (limiter.go)
	e    [slabChunk]entry
	refs [slabChunk]atomic.Uint32
}

// Compile-time checks: a chunk with its allocation header fits the
// 6144-byte size class, every kind fits its 3 bits, every index in a chunk
// its 9 bits, and an entry is 24 bytes.
const (
	_ = uint(6144 - 8 - unsafe.Sizeof(chunk{}))
	_ = uint(kindMask>>kindShift - uint32(contract.KindLast))
	_ = uint(idxMask - (slabChunk - 1))
	_ = uint(24-unsafe.Sizeof(entry{})) + uint(unsafe.Sizeof(entry{})-24)
)

func newChunk() *chunk {
	c := new(chunk)
	for i := range c.e {
		c.e[i].lk.Store(uint32(i) << idxShift)
	}
	return c
}

// chunk returns the chunk en is in, from en's index in it. en must be an
// entry of a slab chunk.
func (en *entry) chunk() *chunk {
	i := int(en.lk.Load() >> idxShift & idxMask)
	return (*chunk)(unsafe.Add(unsafe.Pointer(en), -int(unsafe.Offsetof(chunk{}.e))-i*int(unsafe.Sizeof(entry{}))))
}

func (en *entry) index() int { return int(en.lk.Load() >> idxShift & idxMask) }

// dirtyBits is the dirty set of a slab chunk: bit i%64 of word i/64 is
// entry i. It is a separate allocation so that a chunk stays exactly a
// size class.
type dirtyBits [(slabChunk + 63) / 64]atomic.Uint64

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
//
// A hot counter (hot.go) is folded back into the entry as the lock is
// taken, so every holder sees the entry's fields as the whole truth.
func (en *entry) lock() {
	if w := en.lk.Load(); w&lockBit == 0 && en.lk.CompareAndSwap(w, w|lockBit) {
		if w&flagHot != 0 {
			en.cool()
		}
		return
	}
	en.lockSlow(true)
}

// lockAs is lock for a caller that can guess the unlocked word: one
// compare-and-swap with the guess takes the entry's cache line exclusive at
// once, where lock's load first fetches it shared and the swap then fetches
// it again (a second move between cores when a hot counter's line
// alternates between them). It reports whether it had to wait for another
// holder. The guess must not have flagHot (lock folds a hot counter).
func (en *entry) lockAs(guess uint32) (contended bool) {
	if !en.lk.CompareAndSwap(guess, guess|lockBit) {
		return en.lockSlow(true)
	}
	return false
}

// tryLock takes en's lock if it is free and en is not hot (lock would
// fold it), without waiting: for a caller that holds other entries'
// locks, which must not wait for one (a holder of that one may be
// waiting for one of its).
func (en *entry) tryLock() bool {
	w := en.lk.Load()
	return w&(lockBit|flagHot) == 0 && en.lk.CompareAndSwap(w, w|lockBit)
}

// hotGuess is the unlocked word of a plain counter at slab index i that
// changed since the last flush: what a hot counter's word almost always is.
func hotGuess(i uint32) uint32 {
	return i%slabChunk<<idxShift | uint32(contract.KindCounter)<<kindShift | flagDirty
}

// lockSlow is lock after a failed first attempt, with the fold of a hot
// counter or (fold false) without. It reports whether it saw the lock
// held by someone else (contention: hot.go's signal).
func (en *entry) lockSlow(fold bool) (contended bool) {
	for spin := 0; ; spin++ {
		w := en.lk.Load()
		if w&lockBit == 0 && en.lk.CompareAndSwap(w, w|lockBit) {
			if fold && w&flagHot != 0 {
				en.cool()
			}
			return contended
		}
		contended = contended || w&lockBit != 0
		if spin >= 100 {
			runtime.Gosched()
			spin = 0
		}
	}
}

// The methods below are for the lock's holder.

func (en *entry) unlock() { en.lk.Store(en.lk.Load() &^ lockBit) }

func (en *entry) kind() contract.Kind { return contract.Kind(en.lk.Load() & kindMask >> kindShift) }

func (en *entry) setKind(k contract.Kind) {
	en.lk.Store(en.lk.Load()&^kindMask | uint32(k)<<kindShift&kindMask)
}

// flags returns the lock word; callers test flag bits in it.
func (en *entry) flags() uint32 { return en.lk.Load() }

func (en *entry) setFlags(f uint32) { en.lk.Store(en.lk.Load() | f) }

func (en *entry) clearFlags(f uint32) { en.lk.Store(en.lk.Load() &^ f) }

// plainCounter reports whether en is a KindCounter without ext (no TTL,
// no rollups): the add fast path.
func (en *entry) plainCounter() bool {
	return en.lk.Load()&(kindMask|flagExt) == uint32(contract.KindCounter)<<kindShift
}

func (en *entry) version() uint64 {
	if en.lk.Load()&flagHi == 0 {
		return uint64(en.ver)
	}
	return en.versionHi()
}

//go:noinline
func (en *entry) versionHi() uint64 {
	return uint64(en.chunk().hs.Load()[en.index()])<<32 | uint64(en.ver)
}

func (en *entry) setVersion(v uint64) {
	en.ver = uint32(v)
	hi := uint32(v >> 32)
	w := en.lk.Load()
	switch {
	case hi != 0:
		c := en.chunk()
		hs := c.hs.Load()
		if hs == nil {
			c.hs.CompareAndSwap(nil, new([slabChunk]uint32))
			hs = c.hs.Load()
		}
		hs[en.index()] = hi
		if w&flagHi == 0 {
			en.lk.Store(w | flagHi)
		}
	case w&flagHi != 0:
		en.chunk().hs.Load()[en.index()] = 0
		en.lk.Store(w &^ flagHi)
	}
}

// carry moves the version's high half up when its low half wrapped.
//
//go:noinline
func (en *entry) carry() { en.setVersion(en.version() + 1<<32) }

func (en *entry) ext() *ext {
	if en.lk.Load()&flagExt == 0 {
		return nil
	}
	return en.chunk().xs.Load()[en.index()]
}

func (en *entry) setExt(x *ext) {
	w := en.lk.Load()
	switch {
	case x != nil:
		c := en.chunk()
		xs := c.xs.Load()
		if xs == nil {
			c.xs.CompareAndSwap(nil, new([slabChunk]*ext))
			xs = c.xs.Load()
		}
		xs[en.index()] = x
		if w&flagExt == 0 {
			en.lk.Store(w | flagExt)
		}
	case w&flagExt != 0:
		en.chunk().xs.Load()[en.index()] = nil
		en.lk.Store(w &^ flagExt)
	}
}

// reset makes en an empty KindNone entry with no flags (its lock bit and
// index are kept).
func (en *entry) reset() {
	en.setExt(nil)
	en.setVersion(0)
	en.value, en.updated = 0, 0
	en.lk.Store(en.lk.Load() & (lockBit | idxMask<<idxShift))
}

type table struct{ slots []uint32 } // slots are read and written atomically

// arena holds a shard's ids. Offsets are logical: the byte at logical
// offset base+c*arenaChunk+o is chunks[c][o]. Each id is a length byte
// followed by its bytes, never across two chunks.
type arena struct {
	base   uint32
	chunks []*[arenaChunk]byte
	used   int // bytes used in the last chunk, guarded by shard.mu
}

// end is the logical offset after a's last chunk.
func (a *arena) end() uint64 { return uint64(a.base) + uint64(len(a.chunks))*arenaChunk }

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
	// kick wakes the flusher (the engine's flusher.kick; set by Open) when
	// ndirty reaches dirtyKick.
	kick chan struct{}

	exp expIndex // counters with a TTL by expiry (expiry.go)

	nlim int // limiter entries (limiter.go), guarded by mu
	// markers counts the ids in the index that are marker counters'
	// (isMarkerCounter; written under mu, read without it).
	markers atomic.Int64
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
func (s *shard) at(i uint32) (*entry, *atomic.Uint32) {
	cp := s.chunks.Load()
	if cp == nil || int(i/slabChunk) >= len(*cp) {
		return nil, nil
	}
	c := (*cp)[i/slabChunk]
	return &c.e[i%slabChunk], &c.refs[i%slabChunk]
}

func (s *shard) entryAt(i uint32) *entry { en, _ := s.at(i); return en }

func (s *shard) refOf(i uint32) uint32 {
	_, r := s.at(i)
	return r.Load()
}

// idOf returns the bytes of the id that ref locates in arena a, or false if
// it is not in a (freed, or a is an older or newer arena than ref's).
// (0 is below every arena's base.)
func idOf(a *arena, ref uint32) ([]byte, bool) {
	if a == nil || ref < a.base || (ref-a.base)>>arenaOffBits >= uint32(len(a.chunks)) {
		return nil, false
	}
	rel := ref - a.base
	o := rel & arenaOffMask
	// A record never crosses its chunk's end; min keeps a torn one in it.
	return a.chunks[rel>>arenaOffBits][o+1 : min(o+1+uint32(a.chunks[rel>>arenaOffBits][o]), arenaChunk)], true
}

// idLocked returns a copy of the id of slab index i. Caller holds mu.
func (s *shard) idLocked(i uint32) string {
	b, _ := idOf(s.ar.Load(), s.refOf(i))
	return string(b)
}

// find returns the slab index, entry and id reference of id without
// locking. A miss may be spurious while a writer reorganises the shard;
// callers that must know call findLocked.
func (s *shard) find(id string, h uint64) (uint32, *entry, uint32, bool) {
	i, en, _, ref, ok := s.findRef(id, h)
	return i, en, ref, ok
}

// findRef is find that also returns where the entry's id reference lives
// (its chunk's refs[i], which never moves), so that a caller can check it
// again once the entry is locked without looking the chunk up again.
func (s *shard) findRef(id string, h uint64) (uint32, *entry, *atomic.Uint32, uint32, bool) {
	t := s.tab.Load()
	if t == nil {
		return 0, nil, nil, 0, false
	}
	a := s.ar.Load()
	mask := uint64(len(t.slots) - 1)
	tag := tagOf(h)
	for p, n := h&mask, 0; n < len(t.slots); p, n = (p+1)&mask, n+1 {
		v := atomic.LoadUint32(&t.slots[p])
		if v == slotEmpty {
			return 0, nil, nil, 0, false
		}
		if v>>24 != tag || v&slotIndexMask == 0 {
			continue
		}
		i := v&slotIndexMask - 1
		en, rp := s.at(i)
		if en == nil {
			return 0, nil, nil, 0, false
		}
		ref := rp.Load()
		if b, ok := idOf(a, ref); ok && string(b) == id {
			return i, en, rp, ref, true
		}
	}
	return 0, nil, nil, 0, false
}

// findLocked is find under mu, where it cannot miss spuriously.
func (s *shard) findLocked(id string, h uint64) (uint32, *entry, uint32, bool) {
	return s.find(id, h)
}

// insertLocked adds id, which must not be present, and returns its new
// entry (KindNone, unlocked) and id reference. Caller holds mu.
func (s *shard) insertLocked(id string, h uint64) (uint32, *entry, uint32, bool) {
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
			nc := append(old[:len(old):len(old)], newChunk())
			s.chunks.Store(&nc)
		}
		i = uint32(s.nslab)
		s.nslab++
	}
	en, rp := s.at(i)
	// Lock it: scans (Scan, the janitor) lock entries by slab index.
	en.lock()
	en.reset()
	ref := s.appendIDLocked(id)
	rp.Store(ref)
	en.unlock()
	if isMarkerCounter(id) {
		s.markers.Add(1)
	}
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
			s.placeLocked(t, hashIDBytes(b), v)
		}
	}
	s.tab.Store(t)
	return t
}

// appendIDLocked copies id into the arena and returns its reference.
func (s *shard) appendIDLocked(id string) uint32 {
	a := s.ar.Load()
	if a == nil {
		a = &arena{base: arenaFirst}
		s.ar.Store(a)
	}
	if len(a.chunks) == 0 || a.used+1+len(id) > arenaChunk {
		if a.end()+arenaChunk > 1<<32 {
			// The logical offsets would wrap: start again from the
			// bottom with the live ids (a reference can only be
			// reused after 4 GiB of ids were written to this shard).
			s.compactArenaLocked(arenaFirst)
			a = s.ar.Load()
		}
		if len(a.chunks) == 0 || a.used+1+len(id) > arenaChunk {
			// Publish a new arena value (same base, one more chunk):
			// readers may be reading the old value's chunk list.
			chunks := append(a.chunks[:len(a.chunks):len(a.chunks)], new([arenaChunk]byte))
			a = &arena{base: a.base, chunks: chunks}
			s.ar.Store(a)
		}
	}
	c := len(a.chunks) - 1
	a.chunks[c][a.used] = byte(len(id))
	copy(a.chunks[c][a.used+1:], id)
	ref := a.base + uint32(c)<<arenaOffBits + uint32(a.used)
	a.used += 1 + len(id)
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
	a := s.ar.Load()
	if b, ok := idOf(a, rp.Load()); ok {
		s.garbage += 1 + len(b)
		if isMarkerCounter(b) {
			s.markers.Add(-1)
		}
	}
	rp.Store(0)
	en.reset()
	en.unlock()
	s.free = append(s.free, i)
	s.used--
	s.tombs++
	if s.garbage > arenaChunk*16 && s.garbage*2 > len(a.chunks)*arenaChunk {
		s.compactArenaLocked(a.end())
	}
}

// compactArenaLocked copies live ids into a new arena starting at logical
// offset base, past the end of the current one, or at the bottom if the
// offsets would wrap before the live ids fit. Readers holding a reference
// into the old arena find it outside the new one and look again under mu.
func (s *shard) compactArenaLocked(base uint64) {
	old := s.ar.Load()
	t := s.tab.Load()
	var live []*atomic.Uint32
	size := uint64(0)
	if t != nil {
		for _, v := range t.slots {
			if v == slotEmpty || v == slotTombstone {
				continue
			}
			_, rp := s.at(v&slotIndexMask - 1)
			b, _ := idOf(old, rp.Load())
			live = append(live, rp)
			size += uint64(1 + len(b))
		}
	}
	// Each chunk but the last wastes less than one longest id.
	need := (size/(arenaChunk-1-contract.MaxIDLen) + 2) * arenaChunk
	if base < arenaFirst || base+need > 1<<32 {
		base = arenaFirst
	}
	s.ar.Store(&arena{base: uint32(base)})
	refs := make([]uint32, len(live))
	for i, rp := range live {
		b, _ := idOf(old, rp.Load())
		refs[i] = s.appendIDLocked(string(b))
	}
	for i, rp := range live {
		rp.Store(refs[i])
	}
	s.garbage = 0
}

// markDirty puts slab index i on the dirty set. Caller holds the entry's
// lock and has just set flagDirty.
func (s *shard) markDirty(i uint32) {
	bp := s.dbits.Load()
	j := i % slabChunk
	(*bp)[i/slabChunk][j/64].Or(1 << (j % 64))
	if s.ndirty.Add(1) == dirtyKick {
		select {
		case s.kick <- struct{}{}:
		default: // already woken
		}
	}
}

// dirtyKick is the dirty count of one shard at which the flusher is woken
// before its interval: a stream of new or changed counters (a bulk load,
// redis-cli --pipe) is then flushed in batches of about numShards x
// dirtyKick entries (a few MB) instead of one batch of everything changed
// in a flush interval, which at a million new counters a second held
// 50 MB and more of batch at once. Each flush is still one atomic batch.
const dirtyKick = 512

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
