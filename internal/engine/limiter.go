package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/cespare/xxhash/v2"

	"github.com/counterd/counterd/internal/contract"
)

// Limiter entries: the rate limiter's state (internal/ratelimit) lives in
// the same index as the counters, so there is one table of state. A
// limiter entry is an entry of the index whose id is in a reserved
// namespace and whose lock word has flagLim:
//
//   - Its id is LimiterIDPrefix (a 0x00 byte, which no counter id may
//     hold: contract.ValidateID refuses control bytes) and the 12 bytes of
//     the limit's fingerprint (h1, h2): 13 bytes in the shard's arena.
//   - Its kind is KindNone, so every counter path (reads, listings, SCAN,
//     Len, quotas, rollups, capabilities) passes over it as over a counter
//     that does not exist, and it is never put on the dirty set: limiter
//     state is soft state (docs/ratelimit.md), never flushed, never in the
//     WAL, never replicated by the engine.
//   - Its state is LimState: S[0] in entry.value, Exp in entry.updated,
//     S[1] and S[2] in the chunk's limiter side table (chunk.lim), beside
//     the fingerprint (h2 in entry.ver, h1 in the side table: a check
//     confirms its entry by them, not by the id's bytes), and an
//     optional Aux value (the ratelimit package keeps a sliding log's ring
//     and, in cluster mode, the key and limit there) in a table of that
//     side table, allocated for the first entry of the chunk that has one.
//
// A check locks the entry (LockLimiter), reads and writes its state with
// pure functions of the ratelimit package, and unlocks it: no allocation,
// no Result, no flush. Expiry: EvictLimiters frees the entries whose Exp
// passed (the ratelimit Limiter's janitor calls it with its clock).
//
// Lock order: shard.mu, then entry locks (EvictLimiters and RangeLimiters
// hold the shard's mutex and lock entries one at a time); LockLimiter and a
// multi-entry check take no shard mutex while they hold an entry lock, and
// a multi-entry check locks its entries in LimEntry.Order. Counter
// operations never lock limiter entries (their ids cannot name one), so
// the two never wait for each other.

var errShardFull = fmt.Errorf("%w: shard full", contract.ErrInvalidArgument)

// LimiterIDPrefix is the first byte of every limiter entry's id.
const LimiterIDPrefix = 0x00

// limIDLen is the length of a limiter id: the prefix and 12 bytes of
// fingerprint.
const limIDLen = 13

const (
	// flagLim marks a limiter entry (kind KindNone).
	flagLim uint32 = 1 << 7
	// flagLimChanged marks a limiter entry changed since the last
	// RangeLimiters that cleared it (ratelimit's ExportChanged). Kinds
	// take 3 bits (kindMask), so this is the nibble's top bit.
	flagLimChanged uint32 = 1 << 11
)

// Compile-time check: flagLimChanged is outside kindMask.
const _ = uint(1 - (flagLimChanged & kindMask >> 11))

// LimState is the state of one limiter entry: three words the
// algorithm defines and the unix ns at which the state is fresh again (the
// entry is freed then).
type LimState struct {
	S   [3]int64
	Exp int64
}

// limSide is a chunk's limiter side table: 5,240 bytes, in the 5,376-byte size
// class.
type limSide struct {
	aux atomic.Pointer[limAux] // first: the GC scans only this word of the table
	w   [slabChunk]limWords
}

// limWords are an entry's words in the side table.
type limWords struct {
	// h1 is the fingerprint's h1, written when the entry is created and
	// read without the lock by lookups (so their load of this line
	// overlaps with their load of the entry's).
	h1     atomic.Uint64
	s1, s2 int64 // S[1], S[2]
}

// limAux is the table of Aux values of a chunk, allocated for the first
// limiter entry of the chunk that sets one.
type limAux [slabChunk]unsafe.Pointer

// Limiters is the limiter face of an index: an Engine's (Engine.Limiters),
// or a standalone one (NewLimiters) for a Limiter without an engine.
type Limiters struct {
	shards *[numShards]shard
}

// NewLimiters returns a standalone index for limiter entries only.
func NewLimiters() *Limiters { return &Limiters{shards: new([numShards]shard)} }

// Limiters returns the limiter face of the engine's index.
func (e *Engine) Limiters() *Limiters { return &Limiters{shards: &e.shards} }

// LimEntry is a limiter entry, locked by LockLimiter (or ResolveLimiter
// and Lock). Its methods are for the lock's holder.
type LimEntry struct {
	en    *entry
	w     *limWords // en's words in its chunk's side table (set when resolved)
	ls    *limSide  // that side table, which never moves while the chunk lives
	h1    uint64
	h2    uint32
	order uint32
}

// hashIDBytes is the hash of a stored id: hashID, but for a limiter id
// the fingerprint's h1, which is already a uniform hash (it saves hashing
// the id on every check).
func hashIDBytes(b []byte) uint64 {
	if len(b) == limIDLen && b[0] == LimiterIDPrefix {
		return binary.LittleEndian.Uint64(b[1:])
	}
	return xxhash.Sum64(b)
}

// limID writes the id of fingerprint (h1, h2) to b.
func limID(b *[limIDLen]byte, h1 uint64, h2 uint32) string {
	b[0] = LimiterIDPrefix
	binary.LittleEndian.PutUint64(b[1:], h1)
	binary.LittleEndian.PutUint32(b[9:], h2)
	// The engine copies the id when it stores it and never keeps this one.
	return unsafe.String(&b[0], limIDLen)
}

// ResolveLimiter sets le to the entry of fingerprint (h1, h2), creating
// it with state fresh (an Exp of math.MaxInt64: never freed before its
// first SetState) if there is none. The entry is not locked: call Lock. It
// fails only when the shard is full.
func (t *Limiters) ResolveLimiter(le *LimEntry, h1 uint64, h2 uint32, fresh *[3]int64) error {
	if t.probe(le, h1, h2) {
		le.Unlock()
		return nil
	}
	return t.insert(le, h1, h2, fresh, false)
}

// LockLimiter is ResolveLimiter and Lock, until the lock holds.
func (t *Limiters) LockLimiter(le *LimEntry, h1 uint64, h2 uint32, fresh *[3]int64) error {
	if t.probe(le, h1, h2) {
		return nil
	}
	return t.insert(le, h1, h2, fresh, true)
}

// probe looks the fingerprint up without the shard's lock and sets le to
// its entry, locked, or returns false (not found, or a race with a writer
// of the index: the caller goes through insert). A candidate (a slot with
// h1's tag) is passed over unless its side table holds h1 (read
// atomically, so a lookup reads no id bytes and never locks a counter),
// then confirmed under its entry's lock (Lock).
func (t *Limiters) probe(le *LimEntry, h1 uint64, h2 uint32) bool {
	no := shardOf(h1)
	sh := &t.shards[no]
	tab := sh.tab.Load()
	if tab == nil {
		return false
	}
	mask := uint64(len(tab.slots) - 1)
	tag := tagOf(h1)
	for p, n := h1&mask, 0; n < len(tab.slots); p, n = (p+1)&mask, n+1 {
		v := atomic.LoadUint32(&tab.slots[p])
		if v == slotEmpty {
			return false
		}
		if v>>24 != tag || v&slotIndexMask == 0 {
			continue
		}
		i := v&slotIndexMask - 1
		cp := sh.chunks.Load()
		if int(i/slabChunk) >= len(*cp) {
			return false
		}
		c := (*cp)[i/slabChunk]
		ls := c.lim.Load()
		if ls == nil || ls.w[i%slabChunk].h1.Load() != h1 {
			continue // a counter, or another limiter entry
		}
		*le = limEntry(&c.e[i%slabChunk], &ls.w[i%slabChunk], ls, h1, h2, no, i)
		if le.Lock() {
			return true
		}
	}
	return false
}

// insert finds the fingerprint's entry under the shard's lock, creating
// it, and sets le to it, unlocked, or with lock set, locked: it locks it
// under the shard's lock (shard.mu, then the entry: the documented order),
// where it cannot be freed, so it needs no second look.
func (t *Limiters) insert(le *LimEntry, h1 uint64, h2 uint32, fresh *[3]int64, lock bool) error {
	var b [limIDLen]byte
	id := limID(&b, h1, h2)
	h := h1 // hashIDBytes of id
	no := shardOf(h)
	sh := &t.shards[no]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, en, ls, ok := sh.findLimLocked(h1, h2)
	if !ok {
		if i, en, _, ok = sh.insertLocked(id, h); !ok {
			return errShardFull
		}
		en.lock()
		ls = limSideOf(en)
		w := &ls.w[i%slabChunk]
		en.value, en.updated, en.ver = fresh[0], math.MaxInt64, h2
		w.s1, w.s2 = fresh[1], fresh[2]
		w.h1.Store(h1)
		en.setFlags(flagLim)
		sh.nlim++
		*le = limEntry(en, w, ls, h1, h2, no, i)
		if !lock {
			en.unlock()
		}
		return nil // a new entry: locked from its creation if lock is set
	}
	*le = limEntry(en, &ls.w[i%slabChunk], ls, h1, h2, no, i)
	if lock && !le.Lock() {
		panic("engine: limiter entry changed under its shard's lock")
	}
	return nil
}

// findLimLocked finds the limiter entry of fingerprint (h1, h2) under the
// shard's mutex (where no entry is created or freed, so the side table's
// h1 and the entry's ver are stable): by the fingerprint, not the id's
// bytes in the arena, which a limiter entry's lookup never needs to read.
func (s *shard) findLimLocked(h1 uint64, h2 uint32) (uint32, *entry, *limSide, bool) {
	t := s.tab.Load()
	if t == nil {
		return 0, nil, nil, false
	}
	cp := s.chunks.Load()
	mask := uint64(len(t.slots) - 1)
	tag := tagOf(h1)
	for p, n := h1&mask, 0; n < len(t.slots); p, n = (p+1)&mask, n+1 {
		v := atomic.LoadUint32(&t.slots[p])
		if v == slotEmpty {
			return 0, nil, nil, false
		}
		if v>>24 != tag || v&slotIndexMask == 0 {
			continue
		}
		i := v&slotIndexMask - 1
		c := (*cp)[i/slabChunk]
		ls := c.lim.Load()
		if ls == nil || ls.w[i%slabChunk].h1.Load() != h1 {
			continue
		}
		en := &c.e[i%slabChunk]
		if en.lk.Load()&flagLim != 0 && en.ver == h2 {
			return i, en, ls, true
		}
	}
	return 0, nil, nil, false
}

// limLock spins until it holds en's lock, yielding after a few tries
// (limiter critical sections are a few dozen instructions). A limiter
// entry is never hot, so there is nothing to fold.
func (en *entry) limLock(guess uint32) {
	if en.lk.CompareAndSwap(guess, guess|lockBit) {
		return
	}
	for i := 0; ; i++ {
		w := en.lk.Load()
		if w&lockBit == 0 && en.lk.CompareAndSwap(w, w|lockBit) {
			return
		}
		if i > 16 {
			runtime.Gosched()
		}
	}
}

// Lock locks the entry and reports whether it still holds the
// fingerprint resolved; if not (freed by EvictLimiters since, perhaps
// reused), it is left unlocked and the caller resolves it again.
func (le *LimEntry) Lock() bool {
	en := le.en
	en.limLock(le.order&slotIndexMask%slabChunk<<idxShift | flagLim)
	if en.lk.Load()&flagLim != 0 && en.ver == le.h2 && le.w.h1.Load() == le.h1 {
		return true
	}
	en.unlock()
	return false
}

// Order is the entry's place in the lock order of multi-entry checks
// (shard, then slab index): equal for the same entry.
func (le *LimEntry) Order() uint32 { return le.order }

// Unlock releases the entry.
func (le *LimEntry) Unlock() { le.en.unlock() }

// State returns the entry's state.
func (le *LimEntry) State() LimState {
	return LimState{S: [3]int64{le.en.value, le.w.s1, le.w.s2}, Exp: le.en.updated}
}

// SetState stores the entry's state.
func (le *LimEntry) SetState(s *LimState) {
	le.en.value, le.w.s1, le.w.s2, le.en.updated = s.S[0], s.S[1], s.S[2], s.Exp
}

// SetExp stores when the state is fresh again.
func (le *LimEntry) SetExp(exp int64) { le.en.updated = exp }

// Aux returns the entry's Aux value (nil: none): a pointer the caller
// owns, kept alive by the entry (8 bytes a slot, where an interface would
// take 16).
func (le *LimEntry) Aux() unsafe.Pointer {
	if a := le.ls.aux.Load(); a != nil {
		return a[le.en.index()]
	}
	return nil
}

// SetAux stores the entry's Aux value; it is dropped when the entry is
// freed.
func (le *LimEntry) SetAux(v unsafe.Pointer) {
	ls := le.ls
	a := ls.aux.Load()
	if a == nil {
		if v == nil {
			return
		}
		ls.aux.CompareAndSwap(nil, new(limAux))
		a = ls.aux.Load()
	}
	a[le.en.index()] = v
}

// MarkChanged marks the entry changed (RangeLimiters reports it).
func (le *LimEntry) MarkChanged() {
	if w := le.en.lk.Load(); w&flagLimChanged == 0 {
		le.en.lk.Store(w | flagLimChanged)
	}
}

// Changed reports whether the entry is marked changed.
func (le *LimEntry) Changed() bool { return le.en.lk.Load()&flagLimChanged != 0 }

// ClearChanged clears the changed mark.
func (le *LimEntry) ClearChanged() { le.en.lk.Store(le.en.lk.Load() &^ flagLimChanged) }

// limSideOf returns the side table of en's chunk, allocating it (entries
// of one chunk may race to allocate it: the first wins). It never moves
// nor is freed while the chunk lives.
func limSideOf(en *entry) *limSide {
	c := en.chunk()
	ls := c.lim.Load()
	if ls == nil {
		c.lim.CompareAndSwap(nil, new(limSide))
		ls = c.lim.Load()
	}
	return ls
}

// LenLimiters returns the number of limiter entries.
func (t *Limiters) LenLimiters() int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += sh.nlim
		sh.mu.Unlock()
	}
	return n
}

// EvictLimiters frees the limiter entries whose state is fresh again at
// now (Exp <= now) and that nobody holds, and returns how many it freed.
func (t *Limiters) EvictLimiters(now int64) int {
	freed := 0
	for no := range t.shards {
		sh := &t.shards[no]
		sh.mu.Lock()
		for i := 0; i < sh.nslab; i++ {
			en := sh.entryAt(uint32(i))
			if w := en.lk.Load(); w&(flagLim|lockBit) != flagLim || !en.lk.CompareAndSwap(w, w|lockBit) {
				continue
			}
			if en.updated > now {
				en.unlock()
				continue
			}
			ls := limSideOf(en)
			if a := ls.aux.Load(); a != nil {
				a[en.index()] = nil
			}
			w := &ls.w[i%slabChunk]
			h1 := w.h1.Load()
			w.h1.Store(0)                  // lookups pass over it
			sh.removeLocked(uint32(i), h1) // unlocks
			sh.nlim--
			freed++
		}
		sh.mu.Unlock()
	}
	return freed
}

// RangeLimiters calls fn for every limiter entry, locked; with changed,
// only for those marked changed (fn clears the mark if it wants). fn must
// not lock other entries nor call back into the Limiters.
func (t *Limiters) RangeLimiters(changed bool, fn func(le *LimEntry)) {
	want := flagLim
	if changed {
		want |= flagLimChanged
	}
	for no := range t.shards {
		sh := &t.shards[no]
		sh.mu.Lock()
		for i := 0; i < sh.nslab; i++ {
			en := sh.entryAt(uint32(i))
			if en.lk.Load()&want != want {
				continue
			}
			en.lockSlow(false)
			if en.lk.Load()&want == want { // only the holder changes flags
				ls := limSideOf(en)
				w := &ls.w[i%slabChunk]
				le := limEntry(en, w, ls, w.h1.Load(), en.ver, no, uint32(i))
				fn(&le)
			}
			en.unlock()
		}
		sh.mu.Unlock()
	}
}

// limEntry is the LimEntry of entry en (index i in shard no) with its
// side words w in ls and fingerprint (h1, h2).
func limEntry(en *entry, w *limWords, ls *limSide, h1 uint64, h2 uint32, no int, i uint32) LimEntry {
	return LimEntry{en: en, w: w, ls: ls, h1: h1, h2: h2, order: uint32(no)<<24 | i}
}
