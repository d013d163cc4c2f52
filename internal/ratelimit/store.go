package ratelimit

import (
	"hash/maphash"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// The store: 256 shards picked by the top byte of an entry's h1. A shard
// has a slab of entries in chunks (published copy-on-write, so an entry
// never moves) and an open-addressing index of uint32 slots, each an 8-bit
// tag of h1 and the entry's index + 1. Lookups read the index without a
// lock and confirm a candidate under its entry lock; a lookup that misses
// (also one that races a change of the index) retries under the shard's
// mutex, which every insert, free and index change holds.
//
// Lock order: shard.mu, then entry locks, never the other way round while
// waiting (the janitor only TryLocks entries; checks hold no entry lock
// while they take a shard mutex).
const (
	shardBits = 8
	numShards = 1 << shardBits
	chunkBits = 8
	chunkSize = 1 << chunkBits
	// maxEntries per shard: the slot keeps 24 bits of index.
	maxEntries = 1<<24 - 2
	minSlots   = 16
)

// entry is the state of one (key, limit). 48 bytes, no pointers (the GC
// does not scan the slab).
type entry struct {
	h1   uint64        // fingerprint, and the shard, slot and tag
	h2   uint32        // more fingerprint
	word atomic.Uint32 // entryLocked | entryLive | entryDirty
	exp  int64         // unix ns at which st is fresh again; the janitor frees the entry then
	st   state
}

const (
	entryLocked = 1
	entryLive   = 2
	entryDirty  = 4 // charged since the last ExportChanged (Config.KeepKeys only)
)

func (e *entry) lock() {
	for i := 0; ; i++ {
		w := e.word.Load()
		if w&entryLocked == 0 && e.word.CompareAndSwap(w, w|entryLocked) {
			return
		}
		if i > 16 {
			runtime.Gosched()
		}
	}
}

func (e *entry) tryLock() bool {
	w := e.word.Load()
	return w&entryLocked == 0 && e.word.CompareAndSwap(w, w|entryLocked)
}

func (e *entry) unlock() { e.word.Store(e.word.Load() &^ entryLocked) }

// holds reports whether the locked entry is live and has this fingerprint.
func (e *entry) holds(h1 uint64, h2 uint32) bool {
	return e.word.Load()&entryLive != 0 && e.h1 == h1 && e.h2 == h2
}

// chunk is exactly 12 KiB, a malloc size class: nothing is wasted.
type chunk struct {
	e [chunkSize]entry
}

type table struct {
	slots []atomic.Uint32
	mask  uint64
}

type shard struct {
	tab    atomic.Pointer[table]
	chunks atomic.Pointer[[]*chunk]

	mu   sync.Mutex // guards n, live, free, and every change of tab, chunks and entry identities
	n    uint32     // entries allocated from the slab
	live int        // entries in the index
	free []uint32   // freed entry indexes, reused first

	logMu sync.Mutex         // guards logs (a leaf lock)
	logs  map[uint32]*hitLog // SlidingLog state by entry index; a log is used under its entry's lock

	keys []*keyChunk // guarded by mu: each entry's key and limit by index, with Config.KeepKeys (handoff.go)

	_ [64]byte // keep shards' hot words on separate cache lines
}

func (sh *shard) entryAt(idx uint32) *entry {
	return &(*sh.chunks.Load())[idx>>chunkBits].e[idx&(chunkSize-1)]
}

// log returns the hitLog of entry idx, creating it if alloc is set; nil
// if there is none. The caller holds the entry's lock.
func (sh *shard) log(idx uint32, alloc bool) *hitLog {
	sh.logMu.Lock()
	defer sh.logMu.Unlock()
	g := sh.logs[idx]
	if g == nil && alloc {
		if sh.logs == nil {
			sh.logs = make(map[uint32]*hitLog)
		}
		g = new(hitLog)
		sh.logs[idx] = g
	}
	return g
}

func (sh *shard) dropLog(idx uint32) {
	sh.logMu.Lock()
	delete(sh.logs, idx)
	sh.logMu.Unlock()
}

func slotTag(h1 uint64) uint32 { return uint32(h1>>48) & 0xff }

// lookupLocked finds the entry with the fingerprint without the shard
// lock and returns it locked, or nil (not found, or a race: retry under
// the lock).
func (sh *shard) lookupLocked(h1 uint64, h2 uint32) (*entry, uint32) {
	t := sh.tab.Load()
	if t == nil {
		return nil, 0
	}
	tag := slotTag(h1)
	pos := h1 & t.mask
	for range len(t.slots) {
		v := t.slots[pos].Load()
		if v == 0 {
			return nil, 0
		}
		if v>>24 == tag {
			idx := v&0xffffff - 1
			e := sh.entryAt(idx)
			e.lock()
			if e.holds(h1, h2) {
				return e, idx
			}
			e.unlock()
		}
		pos = (pos + 1) & t.mask
	}
	return nil, 0
}

// findOrInsert returns the index of the entry with the fingerprint,
// creating it with fresh state if there is none; kr, when not nil, is the
// key and limit to remember for a new entry (Config.KeepKeys). The entry
// is not locked: the caller locks it and checks that it still holds the
// fingerprint.
func (sh *shard) findOrInsert(h1 uint64, h2 uint32, kr *keyRef) (uint32, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if idx, ok := sh.findLocked(h1, h2); ok {
		return idx, nil
	}
	var idx uint32
	if n := len(sh.free); n > 0 {
		idx = sh.free[n-1]
		sh.free = sh.free[:n-1]
	} else {
		if sh.n >= maxEntries {
			return 0, errorf(ErrFull, "%d entries in one shard", sh.n)
		}
		idx = sh.n
		if idx&(chunkSize-1) == 0 {
			old := sh.chunks.Load()
			var cs []*chunk
			if old != nil {
				cs = append(cs, *old...)
			}
			cs = append(cs, new(chunk))
			sh.chunks.Store(&cs)
		}
		sh.n++
	}
	e := sh.entryAt(idx)
	e.lock() // a stale reader may hold it for a moment
	e.h1, e.h2 = h1, h2
	e.exp = math.MaxInt64 // until the first check stores the real expiry
	e.st = freshState
	e.word.Store(entryLive) // unlocks
	sh.insertSlot(h1, idx)
	if kr != nil {
		sh.rememberLocked(idx, kr)
	}
	return idx, nil
}

// findLocked looks the fingerprint up under sh.mu (entry identities do
// not change while it is held).
func (sh *shard) findLocked(h1 uint64, h2 uint32) (uint32, bool) {
	t := sh.tab.Load()
	if t == nil {
		return 0, false
	}
	tag := slotTag(h1)
	for pos := h1 & t.mask; ; pos = (pos + 1) & t.mask {
		v := t.slots[pos].Load()
		if v == 0 {
			return 0, false
		}
		if v>>24 == tag {
			idx := v&0xffffff - 1
			if e := sh.entryAt(idx); e.h1 == h1 && e.h2 == h2 {
				return idx, true
			}
		}
	}
}

// insertSlot adds idx to the index, growing it to keep the load at most
// 0.8. Caller holds sh.mu.
func (sh *shard) insertSlot(h1 uint64, idx uint32) {
	t := sh.tab.Load()
	if t == nil || (sh.live+1)*5 > len(t.slots)*4 {
		n := minSlots
		if t != nil {
			n = 2 * len(t.slots)
		}
		t = sh.rebuild(n)
	}
	place(t, h1, slotTag(h1)<<24|(idx+1))
	sh.live++
}

func place(t *table, h1 uint64, v uint32) {
	pos := h1 & t.mask
	for t.slots[pos].Load() != 0 {
		pos = (pos + 1) & t.mask
	}
	t.slots[pos].Store(v)
}

// rebuild copies the index into a new table of n slots and publishes it.
func (sh *shard) rebuild(n int) *table {
	nt := &table{slots: make([]atomic.Uint32, n), mask: uint64(n - 1)}
	if t := sh.tab.Load(); t != nil {
		for i := range t.slots {
			if v := t.slots[i].Load(); v != 0 {
				place(nt, sh.entryAt(v&0xffffff-1).h1, v)
			}
		}
	}
	sh.tab.Store(nt)
	return nt
}

// removeSlot deletes idx from the index by backward shifting, so probes
// never need tombstones. Caller holds sh.mu.
func (sh *shard) removeSlot(h1 uint64, idx uint32) {
	t := sh.tab.Load()
	i := h1 & t.mask
	for t.slots[i].Load()&0xffffff != idx+1 {
		i = (i + 1) & t.mask
	}
	for j := i; ; {
		j = (j + 1) & t.mask
		v := t.slots[j].Load()
		if v == 0 {
			break
		}
		k := sh.entryAt(v&0xffffff-1).h1 & t.mask // home slot of v
		// v may move to i unless its home lies cyclically in (i, j].
		if (i <= j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue
		}
		t.slots[i].Store(v)
		i = j
	}
	t.slots[i].Store(0)
	sh.live--
	if len(t.slots) > minSlots && sh.live*10 < len(t.slots) {
		sh.rebuild(len(t.slots) / 2)
	}
}

// evict frees the entries of the shard whose state expired at or before
// now and that nobody holds. It returns how many it freed.
func (sh *shard) evict(now int64) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	freed := 0
	for idx := uint32(0); idx < sh.n; idx++ {
		e := sh.entryAt(idx)
		if e.word.Load()&^entryDirty != entryLive || !e.tryLock() {
			continue
		}
		if e.word.Load()&entryLive == 0 || e.exp > now {
			e.unlock()
			continue
		}
		sh.dropLog(idx)
		sh.forgetLocked(idx)
		sh.removeSlot(e.h1, idx)
		e.word.Store(0) // unlocks; not live
		sh.free = append(sh.free, idx)
		freed++
	}
	return freed
}

// fingerprint of a key: two independent 64-bit hashes.
type keyHash struct{ a, b uint64 }

var keySeed = maphash.MakeSeed()

func hashKey(key string) keyHash {
	return keyHash{xxhash.Sum64String(key), maphash.String(keySeed, key)}
}

// limitHash mixes every field of a Limit (its identity).
func limitHash(lim *Limit) uint64 {
	h := uint64(lim.Algorithm)*0x9e3779b97f4a7c15 ^ uint64(lim.Limit)*0xc2b2ae3d27d4eb4f
	h = mix64(h) ^ uint64(lim.Period)*0x165667b19e3779f9 ^ uint64(lim.Burst)*0x27d4eb2f165667c5
	if lim.Name != "" {
		h ^= xxhash.Sum64String(lim.Name) * 0xff51afd7ed558ccd
	}
	if lim.Scope != ScopeOwner {
		h ^= uint64(lim.Scope) * 0x94d049bb133111eb
	}
	return mix64(h)
}

// fingerprint of a (key, limit) pair: h1 picks shard, slot and tag.
func fingerprint(k keyHash, lh uint64) (uint64, uint32) {
	return mix64(k.a ^ lh), uint32(mix64(k.b+lh*0x9e3779b97f4a7c15) >> 32)
}

// mix64 is the murmur3 finalizer.
func mix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
