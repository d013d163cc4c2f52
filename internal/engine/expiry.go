package engine

import (
	"github.com/counterd/counterd/internal/contract"
	"math"
	"slices"
	"sync"
)

// Active expiry: each shard keeps a min-heap of the counters with a TTL,
// ordered by expiry, so the janitor's pass (expireDue) costs what expires
// rather than a scan of every counter with a TTL (the event pipeline keeps a
// marker counter with a TTL per event: millions of them).
//
// A heap item is 8 bytes, one uint64: the expiry's second since
// expiryEpoch (rounded down) in the high 32 bits and the entry's slab index
// in the low 32, so items compare as plain integers. Counters without a TTL
// have no item and cost nothing here.
//
// Deletion is lazy. The invariant: every live counter with expiry x has an
// item whose second is at most x's. So
//
//   - setting a first TTL, or one earlier than the current one, pushes an
//     item; extending a TTL (a refresh) pushes nothing: the older, earlier
//     item fires first, and the janitor then pushes the counter again at
//     its current expiry;
//   - persist and delete leave their item: it is stale, and the janitor
//     drops it when it comes due (or a compaction drops it sooner);
//   - an item is only ever decided on (dropped, re-pushed or its counter
//     deleted) by a holder of its entry's lock, so a batch's undo
//     (restore) finds the items of the state it puts back still there.
//
// When the heaps hold more than twice as many items as there are counters
// with a TTL (plus compactSlack), the janitor rebuilds them with exactly one
// item per counter with a TTL: the stale items of persists, deletes and
// shortened TTLs cost memory a bounded while, and their removal costs O(1)
// amortised per item.
type expIndex struct {
	mu sync.Mutex
	h  []uint64 // min-heap of items, guarded by mu
}

// compactSlack is the number of stale items tolerated beyond as many as
// there are counters with a TTL.
var compactSlack = 4096 // a variable for tests

// expiryEpoch is the zero second of heap items (2020-01-01 UTC, unix
// seconds): uint32 seconds from it reach 2156, past MaxTTL from today.
const expiryEpoch = 1577836800

// expSecond is the heap second of unix-nanosecond time t: rounded down and
// clamped to the uint32 range.
func expSecond(t int64) uint64 {
	s := t/1e9 - expiryEpoch
	switch {
	case s < 0:
		return 0
	case s > math.MaxUint32:
		return math.MaxUint32
	}
	return uint64(s)
}

func expItem(at int64, i uint32) uint64 { return expSecond(at)<<32 | uint64(i) }

// push adds the item of slab index i expiring at at.
func (x *expIndex) push(at int64, i uint32) {
	v := expItem(at, i)
	x.mu.Lock()
	x.h = append(x.h, v)
	heapUp(x.h, len(x.h)-1)
	x.mu.Unlock()
}

// popDue removes up to max items that are due at now (their whole second
// has passed, so the counter's expiry has too) and appends them to out.
func (x *expIndex) popDue(now int64, max int, out []uint64) []uint64 {
	// An item is due when its second s has ended: (s+1) seconds <= now.
	// Items of second s are below (s+1)<<32, so "due" is v < limit.
	limit := expSecond(now) << 32
	x.mu.Lock()
	for len(x.h) > 0 && x.h[0] < limit && len(out) < max {
		out = append(out, x.h[0])
		n := len(x.h) - 1
		x.h[0] = x.h[n]
		x.h = x.h[:n]
		heapDown(x.h, 0)
	}
	if cap(x.h) > 1024 && len(x.h) < cap(x.h)/4 {
		x.h = slices.Clip(slices.Clone(x.h))
	}
	x.mu.Unlock()
	return out
}

// len reports the number of items.
func (x *expIndex) len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.h)
}

func heapUp(h []uint64, j int) {
	v := h[j]
	for j > 0 {
		p := (j - 1) / 2
		if h[p] <= v {
			break
		}
		h[j] = h[p]
		j = p
	}
	h[j] = v
}

func heapDown(h []uint64, j int) {
	n := len(h)
	if n == 0 {
		return
	}
	v := h[j]
	for {
		c := 2*j + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1] < h[c] {
			c++
		}
		if v <= h[c] {
			break
		}
		h[j] = h[c]
		j = c
	}
	h[j] = v
}

func heapify(h []uint64) {
	for j := len(h)/2 - 1; j >= 0; j-- {
		heapDown(h, j)
	}
}

// ttlOf returns the expiry of the live counter en, or 0 when it has none
// (or is not live). Caller holds en's lock.
func ttlOf(en *entry) int64 {
	if en.kind() == contract.KindNone {
		return 0
	}
	if x := en.ext(); x != nil {
		return x.expires
	}
	return 0
}

// expireDue deletes counters whose TTL has passed: the janitor runs it
// every second. Its work is the items that come due (and, now and then, a
// rebuild of a heap that is mostly stale), not every counter with a TTL.
func (e *Engine) expireDue() {
	e.expMu.Lock()
	defer e.expMu.Unlock()
	now := e.nowNano()
	total := 0
	for no := range e.shards {
		total += e.shards[no].exp.len()
	}
	if int64(total) > 2*e.expires.Load()+int64(compactSlack) {
		for no := range e.shards {
			e.shards[no].compactExpiry()
		}
	}
	var items, again []uint64
	for no := range e.shards {
		sh := &e.shards[no]
		for {
			items = sh.exp.popDue(now, 512, items[:0])
			again = again[:0]
			for _, v := range items {
				i := uint32(v)
				en := sh.entryAt(i)
				if en == nil {
					continue
				}
				en.lock()
				switch at := ttlOf(en); {
				case at == 0: // persisted or deleted since: a stale item
				case at <= now:
					r := ref{sh: sh, shardNo: no, idx: i, e: en}
					e.expiredLocked(&r)
					e.clearLocked(&r)
				default:
					// Extended since the item was pushed (or a stale item of
					// an earlier counter in this slot): it waits again at its
					// current expiry, which is not due (at > now).
					again = append(again, expItem(at, i))
				}
				en.unlock()
			}
			if len(again) > 0 {
				sh.exp.mu.Lock()
				for _, v := range again {
					sh.exp.h = append(sh.exp.h, v)
					heapUp(sh.exp.h, len(sh.exp.h)-1)
				}
				sh.exp.mu.Unlock()
			}
			if len(items) < 512 {
				break
			}
		}
	}
}

// compactExpiry rebuilds the shard's heap with one item per counter with a
// TTL, at its current expiry. Items pushed meanwhile are kept. It locks
// entries without holding exp.mu (writers take exp.mu under an entry's
// lock).
func (s *shard) compactExpiry() {
	s.exp.mu.Lock()
	old := s.exp.h
	s.exp.h = nil
	s.exp.mu.Unlock()
	idx := make([]uint32, len(old))
	for j, v := range old {
		idx[j] = uint32(v)
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	keep := old[:0]
	for _, i := range idx {
		en := s.entryAt(i)
		if en == nil {
			continue
		}
		en.lock()
		if at := ttlOf(en); at != 0 {
			keep = append(keep, expItem(at, i))
		}
		en.unlock()
	}
	s.exp.mu.Lock()
	keep = append(keep, s.exp.h...)
	s.exp.h = slices.Clip(slices.Clone(keep))
	heapify(s.exp.h)
	s.exp.mu.Unlock()
}
