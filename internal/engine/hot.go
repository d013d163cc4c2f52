package engine

import (
	"github.com/counterd/counterd/internal/contract"
	"sync"
	"sync/atomic"
	"time"
)

// Hot counters.
//
// A plain counter (KindCounter, no TTL, no rollups) whose lock is found
// held by another add turns hot: an out-of-line hotCtr, allocated then and
// hung in its chunk's ht side table (flagHot in the lock word), takes its
// adds without the entry's lock. Idle counters pay nothing for it: the
// entry stays 24 bytes, the side table is allocated for the first hot
// counter of a chunk.
//
// The hot state is one 64-bit word, changed by compare-and-swap only:
// the sum of the deltas added since the counter turned hot (high 39 bits,
// signed), a closed bit, and the number of those adds (low 24 bits). The
// word after an add is that add's linearization point, so the add returns
// exactly the value (base + sum) and the version (base version + count) a
// sequence of locked adds would have, and every add bumps the version by
// one as it does on the locked path. An add is taken only when its result
// provably fits (the delta and the sum in their bits, the count below its
// limit, base + sum in an int64); anything else falls back to the locked
// path, which folds first and so reports an overflow exactly as before.
//
// Whoever takes the entry's lock folds the hot state back into the entry
// as the first thing under the lock (entry.lock calls cool): it closes
// the word (later adds to it fail and take the locked path), adds the sum
// and count to the entry's value and version and frees the state. So
// every holder of the lock — sets, TTLs, deletes, batches, replication,
// export, idempotent writes, the flusher — sees the entry's fields as the
// whole truth, and nothing outside this file and addPlain knows about hot
// counters. The flusher's pass is such a lock: a hot counter cools at
// every flush and turns hot again at its next contended add. Two holders
// lock without the fold (entry.lockSlow(false)): Get, which reads the
// entry's fields as the base and adds one load of the word (hotCtr.view),
// so a counter read while it is counted does not fold and re-heat (an
// allocation) at every read; and addPlain's locked path, whose add goes
// into the word if the counter turned hot while it waited.
//
// Durability: a hot counter's entry is dirty (it turned hot under the lock
// right after a locked add marked it), and stays so until the flusher
// locks it, which folds every add taken before; an add taken after that
// fold finds the word closed and goes through the locked path, which marks
// the entry dirty again. Sync writes then wait for the flush as before.
type hotCtr struct {
	w    atomic.Uint64 // sum<<hotSumShift | hotClosed | count
	upd  atomic.Int64  // latest time of an add, unix ns
	base int64         // the entry's value when it turned hot (immutable)
	ver  uint64        // the entry's version when it turned hot (immutable)
	set  *hotSet       // the engine's (immutable)
	_    [24]byte      // a cache line of its own
}

// hotSet is the engine's open hot states, for Stats.Ops: a hot add is
// counted in its hot word only (an atomic add to the per-P ops counter
// would be a second locked instruction per add), and in folded when its
// state is folded. Heats and folds take mu; adds never do.
type hotSet struct {
	mu     sync.Mutex
	open   map[*hotCtr]struct{}
	folded uint64 // adds of folded hot states, guarded by mu
}

// ops returns the number of hot adds since Open.
func (s *hotSet) ops() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.folded
	for h := range s.open {
		n += h.w.Load() & hotCountMask
	}
	return n
}

const (
	hotCountBits        = 24
	hotCountMask uint64 = 1<<hotCountBits - 1
	hotClosed    uint64 = 1 << hotCountBits
	hotSumShift         = hotCountBits + 1
	hotSumMax           = 1<<(63-hotSumShift) - 1 // the sum's range: ±2^38
	hotSumMin           = -1 << (63 - hotSumShift)
)

// hotAdd adds delta to the open hot state h and returns the counter's new
// value and version; ok is false, with nothing changed, when h is closed or
// the add does not provably fit (the caller takes the locked path). now is
// the add's time.
func hotAdd(h *hotCtr, delta, now int64) (v int64, ver uint64, ok bool) {
	if delta > hotSumMax || delta < hotSumMin {
		return 0, 0, false
	}
	for {
		o := h.w.Load()
		n := o&hotCountMask + 1
		s := int64(o)>>hotSumShift + delta
		if o&hotClosed != 0 || n > hotCountMask || s > hotSumMax || s < hotSumMin {
			return 0, 0, false
		}
		if v, ok = addInt64(h.base, s); !ok {
			return 0, 0, false
		}
		// The time goes in before the add, so a fold that sees the add
		// sees its time too.
		for u := h.upd.Load(); u < now && !h.upd.CompareAndSwap(u, now); u = h.upd.Load() {
		}
		if h.w.CompareAndSwap(o, uint64(s)<<hotSumShift|n) {
			return v, h.ver + n, true
		}
	}
}

// hotOf returns en's hot state, nil if it has none. No lock needed.
func (en *entry) hotOf() *hotCtr {
	if en.lk.Load()&flagHot == 0 {
		return nil
	}
	ht := en.chunk().ht.Load()
	if ht == nil {
		return nil
	}
	return ht[en.index()].Load()
}

// heat makes the plain counter en (slab index i of sh) hot, its state
// one of set's. Caller holds en's lock. The entry is made dirty if it is
// not (it is after an add): a hot counter must be on the dirty set until
// the flusher folds it.
func (en *entry) heat(sh *shard, i uint32, set *hotSet) {
	if en.flags()&flagDirty == 0 {
		en.setFlags(flagDirty)
		sh.markDirty(i)
	}
	c := en.chunk()
	ht := c.ht.Load()
	if ht == nil {
		c.ht.CompareAndSwap(nil, new([slabChunk]atomic.Pointer[hotCtr]))
		ht = c.ht.Load()
	}
	h := &hotCtr{base: en.value, ver: en.version(), set: set}
	h.upd.Store(en.updated)
	set.mu.Lock()
	if set.open == nil {
		set.open = make(map[*hotCtr]struct{})
	}
	set.open[h] = struct{}{}
	set.mu.Unlock()
	ht[en.index()].Store(h)
	en.setFlags(flagHot)
}

// cool folds en's hot state into en and frees it. Caller has just taken
// en's lock and en has flagHot.
func (en *entry) cool() {
	slot := &en.chunk().ht.Load()[en.index()]
	h := slot.Load()
	o := h.w.Or(hotClosed)
	en.value = h.base + int64(o)>>hotSumShift // hotAdd proved it fits
	en.setVersion(h.ver + o&hotCountMask)
	if u := h.upd.Load(); u > en.updated {
		en.updated = u
	}
	slot.Store(nil)
	en.clearFlags(flagHot)
	s := h.set
	s.mu.Lock()
	delete(s.open, h)
	if len(s.open) == 0 {
		s.open = nil // a map keeps its size: a burst's is dropped once all are folded
	}
	s.folded += o & hotCountMask
	s.mu.Unlock()
}

// view completes v, a view of h's entry filled from its fields (the base),
// with the adds in h's word. Caller holds the entry's lock, so h is open.
func (h *hotCtr) view(v *contract.View) {
	o := h.w.Load()
	v.Value = h.base + int64(o)>>hotSumShift
	v.Version = h.ver + o&hotCountMask
	if u := h.upd.Load(); u > v.UpdatedAt.UnixNano() {
		v.UpdatedAt = time.Unix(0, u).UTC()
	}
}

// acquireKeepHot is acquire(id, false) for Get: a hot counter is left
// hot (see view).
func (e *Engine) acquireKeepHot(id string) (ref, bool) {
	h := hashID(id)
	for {
		r, ok, _ := e.lookup(id, h, false)
		if !ok {
			return r, false
		}
		r.e.lockSlow(false)
		if r.sh.refOf(r.idx) == r.idRef {
			return r, true
		}
		r.e.unlock() // freed since the lookup: look again
	}
}
