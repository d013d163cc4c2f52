package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/counterd/counterd/internal/contract"
)

// Dedupe marks: the ids of the events the pipeline's consumer applied,
// each remembered until its expiry. They are not counters: a mark is an
// entry of an in-memory set, and the marks a flush takes are written in
// that flush's Pebble batch as one value, 'd' + the flush's sequence
// number (8 bytes, big endian), together with the counter changes of the
// batches that made them. Reading them back at Open restores the set, so a
// mark and the effect of its batch are on disk both or neither, across a
// crash. The janitor deletes a record once every mark in it expired.
//
// Record value: the expiry of its first mark (8 bytes, big endian unix
// ns), then per mark the varint of its expiry minus that, the uvarint of
// its length and its bytes.
const prefixMarks byte = 'd'

// MarkApplier is an AtomicApplier that also keeps dedupe marks (the
// embedded engine's, from Local): ApplyMarked applies a batch atomically
// with marks it creates, failing if one already exists, so that each mark
// costs an entry of an in-memory set and a few bytes of one value per
// flush rather than a counter and a key of its own.
type MarkApplier interface {
	AtomicApplier
	// ApplyMarked is ApplyAtomic of ops that also creates marks, each
	// expiring after ttl. All or none: if marks[k] exists (and has not
	// expired), nothing is applied and the error is a *BatchError with
	// Index len(ops)+k and an error wrapping ErrVersionConflict; a
	// failing op is a *BatchError naming it, as with ApplyAtomic. ops
	// may be empty; marks must be distinct (the caller deduplicates a
	// batch's own events).
	ApplyMarked(ctx context.Context, ops []contract.Op, marks []string, ttl time.Duration, wo contract.WriteOptions) error
	// Marked reports whether mark exists and has not expired.
	Marked(mark string) bool
	// MarkedAll sets found[k] to Marked(marks[k]) for each k (len(found)
	// >= len(marks)): the marks of a consumer's segment at once, whose
	// look-ups in a big set are cache misses that then overlap.
	MarkedAll(marks []string, found []bool)
}

// maxMarkLen bounds a mark.
const maxMarkLen = 1024

type markEntry struct {
	id  string
	exp int64    // unix ns
	h   markHash // hashMark(id), computed once by ApplyMarked (the flush's record keeps it)
}

// markRec is a flushed record: its key's sequence number, the hashes of
// its marks and the latest expiry among them.
type markRec struct {
	seq    uint64
	maxExp int64
	ids    []markHash
}

// markSet is the engine's dedupe marks.
type markSet struct {
	applyMu sync.Mutex   // serializes ApplyMarked: a mark is checked and created as one step
	hs      []markHash   // ApplyMarked's hashes of its marks (under applyMu)
	multi   multiScratch // ApplyMarked's working space (under applyMu)

	mu      sync.RWMutex
	m       markTable   // mark hash -> expiry (unix ns)
	pending []markEntry // created since the last flush took them
	spare   []markEntry // a flushed pending, empty, for the next (recycle)
	recs    []markRec   // on disk, oldest first
	seq     uint64      // of the newest record
}

func markKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefixMarks}, seq)
}

// Marked reports whether mark exists and has not expired.
func (e *Engine) Marked(mark string) bool {
	s := &e.marks
	h := hashMark(mark)
	s.mu.RLock()
	exp, ok := s.m.get(h)
	s.mu.RUnlock()
	return ok && exp > e.nowNano()
}

// MarkedAll: see MarkApplier. The marks go in blocks: hashed, then
// looked up in a loop of independent probes under one read lock (a lock
// per mark, an atomic write each, would keep the probes' cache misses
// from overlapping).
func (e *Engine) MarkedAll(marks []string, found []bool) {
	s := &e.marks
	now := e.nowNano()
	var hs [64]markHash
	for len(marks) > 0 {
		n := min(len(marks), len(hs))
		for k := range n {
			hs[k] = hashMark(marks[k])
		}
		s.mu.RLock()
		for k := range n {
			exp, ok := s.m.get(hs[k])
			found[k] = ok && exp > now
		}
		s.mu.RUnlock()
		marks, found = marks[n:], found[n:]
	}
}

// ApplyMarked: see MarkApplier.
func (e *Engine) ApplyMarked(ctx context.Context, ops []contract.Op, marks []string, ttl time.Duration, wo contract.WriteOptions) error {
	if err := e.checkWrite(); err != nil {
		return err
	}
	if len(ops) == 0 && len(marks) == 0 {
		return fmt.Errorf("%w: empty batch", contract.ErrInvalidArgument)
	}
	if len(ops) > maxAtomicOps {
		return fmt.Errorf("%w: %d ops, at most %d", contract.ErrBatchTooLarge, len(ops), maxAtomicOps)
	}
	if ttl <= 0 || ttl > contract.MaxTTL {
		return fmt.Errorf("%w: mark ttl %v", contract.ErrInvalidArgument, ttl)
	}
	for i := range ops {
		if err := ops[i].ValidateDefaulted(&e.limits); err != nil {
			return &contract.BatchError{Index: i, Err: err}
		}
	}
	for k, m := range marks {
		if m == "" || len(m) > maxMarkLen {
			return &contract.BatchError{Index: len(ops) + k, Err: fmt.Errorf("%w: a mark is 1..%d bytes", contract.ErrInvalidArgument, maxMarkLen)}
		}
	}
	s := &e.marks
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	now := e.nowNano()
	hs := s.hs[:0]
	for _, m := range marks {
		hs = append(hs, hashMark(m))
	}
	s.hs = hs
	s.mu.RLock()
	for k, m := range marks {
		if exp, ok := s.m.get(hs[k]); ok && exp > now {
			s.mu.RUnlock()
			return &contract.BatchError{Index: len(ops) + k, Err: fmt.Errorf("%w: mark %q exists", contract.ErrVersionConflict, m)}
		}
	}
	s.mu.RUnlock()
	err := e.underGate(func() error { // the flusher's snapshot sees the batch and its marks, or neither
		if len(ops) > 0 {
			if err := e.applyMultiIn(ops, nil, true, &s.multi); err != nil { // the results are dropped
				return err
			}
		}
		if len(marks) > 0 {
			exp := now + int64(ttl)
			s.mu.Lock()
			for k, m := range marks {
				s.m.put(hs[k], exp)
				s.pending = append(s.pending, markEntry{m, exp, hs[k]})
			}
			s.mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return e.applied(ctx, len(ops), wo)
}

// take returns the marks created since the last flush. The flusher calls
// it holding e.gate exclusively, so it takes the marks of a batch with
// the batch's changes.
func (s *markSet) take() []markEntry {
	s.mu.Lock()
	p := s.pending
	s.pending, s.spare = s.spare, nil
	s.mu.Unlock()
	return p
}

// recycle gives back the slice of marks take returned, once flushed, to
// hold the next flush's.
func (s *markSet) recycle(p []markEntry) {
	clear(p)
	s.mu.Lock()
	if s.spare == nil {
		s.spare = p[:0]
	}
	s.mu.Unlock()
}

// requeue puts back marks whose flush failed.
func (s *markSet) requeue(p []markEntry) {
	if len(p) == 0 {
		return
	}
	s.mu.Lock()
	s.pending = append(p, s.pending...)
	s.mu.Unlock()
}

// write adds the record of p to b and returns it (not yet committed).
func (s *markSet) write(b *pebble.Batch, p []markEntry) (markRec, error) {
	r := markRec{ids: make([]markHash, len(p))}
	if len(p) == 0 {
		return r, nil
	}
	s.mu.Lock()
	s.seq++
	r.seq = s.seq
	s.mu.Unlock()
	base := p[0].exp
	n := 8
	for _, m := range p {
		n += 2*binary.MaxVarintLen64 + len(m.id)
	}
	v := binary.BigEndian.AppendUint64(make([]byte, 0, n), uint64(base))
	r.maxExp = base
	for i, m := range p {
		v = binary.AppendVarint(v, m.exp-base)
		v = binary.AppendUvarint(v, uint64(len(m.id)))
		v = append(v, m.id...)
		r.ids[i] = m.h
		r.maxExp = max(r.maxExp, m.exp)
	}
	return r, b.Set(markKey(r.seq), v, nil)
}

// committed records r, now on disk.
func (s *markSet) committed(r markRec) {
	if len(r.ids) == 0 {
		return
	}
	s.mu.Lock()
	s.recs = append(s.recs, r)
	s.mu.Unlock()
}

// decodeMarks calls fn with each mark of record value v.
func decodeMarks(v []byte, fn func(id string, exp int64)) error {
	if len(v) < 8 {
		return fmt.Errorf("%w: mark record of %d bytes", ErrCorrupt, len(v))
	}
	base := int64(binary.BigEndian.Uint64(v))
	v = v[8:]
	for len(v) > 0 {
		d, n := binary.Varint(v)
		if n <= 0 {
			return fmt.Errorf("%w: mark record: expiry", ErrCorrupt)
		}
		v = v[n:]
		l, n := binary.Uvarint(v)
		if n <= 0 || l > uint64(len(v)-n) {
			return fmt.Errorf("%w: mark record: length", ErrCorrupt)
		}
		v = v[n:]
		fn(string(v[:l]), base+d)
		v = v[l:]
	}
	return nil
}

// loadMarks reads the mark records back (Open).
func (e *Engine) loadMarks() error {
	s := &e.marks
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixMarks}, UpperBound: []byte{prefixMarks + 1}})
	if err != nil {
		return fmt.Errorf("engine: load marks: %w", err)
	}
	defer it.Close()
	now := e.nowNano()
	s.m = markTable{}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 9 {
			return fmt.Errorf("engine: load marks: %w: key %q", ErrCorrupt, k)
		}
		r := markRec{seq: binary.BigEndian.Uint64(k[1:])}
		err := decodeMarks(it.Value(), func(id string, exp int64) {
			r.maxExp = max(r.maxExp, exp)
			h := hashMark(id)
			if old, _ := s.m.get(h); exp > now && exp > old {
				s.m.put(h, exp)
				r.ids = append(r.ids, h)
			}
		})
		if err != nil {
			return fmt.Errorf("engine: load marks %d: %w", r.seq, err)
		}
		s.recs = append(s.recs, r) // an expired one is deleted by the janitor
		s.seq = max(s.seq, r.seq)
	}
	return it.Error()
}

// expireMarks forgets the marks that expired and deletes the records whose
// marks all did (janitor).
func (e *Engine) expireMarks() error {
	s := &e.marks
	now := e.nowNano()
	var gone []uint64
	s.mu.Lock()
	kept := s.recs[:0]
	for _, r := range s.recs {
		if r.maxExp > now {
			kept = append(kept, r)
			continue
		}
		for _, id := range r.ids {
			if exp, ok := s.m.get(id); ok && exp <= now {
				s.m.del(id) // (a later record may hold it again, unexpired: kept)
			}
		}
		gone = append(gone, r.seq)
	}
	clear(s.recs[len(kept):])
	s.recs = kept
	s.mu.Unlock()
	if len(gone) == 0 {
		return nil
	}
	b := e.db.NewBatch()
	defer b.Close()
	for _, seq := range gone {
		if err := b.Delete(markKey(seq), nil); err != nil {
			return err
		}
	}
	// Not synced: a record that comes back after a crash holds only
	// expired marks, which loading skips.
	return b.Commit(pebble.NoSync)
}

// MarkCount is how many marks the engine holds (expired ones until the
// janitor forgets them).
func (e *Engine) MarkCount() int {
	s := &e.marks
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m.n
}

func (l local) ApplyMarked(ctx context.Context, ops []contract.Op, marks []string, ttl time.Duration, wo contract.WriteOptions) error {
	return l.e.ApplyMarked(ctx, ops, marks, ttl, wo)
}

func (l local) Marked(mark string) bool { return l.e.Marked(mark) }

func (l local) MarkedAll(marks []string, found []bool) { l.e.MarkedAll(marks, found) }

// markExpireInterval is how often the janitor forgets expired marks.
const markExpireInterval = 10 * time.Second

// markHash is a mark's 128-bit hash (two maphash sums with seeds of this
// process): the in-memory set keeps hashes, not the marks' strings, so it
// holds no pointers for the GC to scan and compares without reading
// strings. The records on disk keep the marks themselves, hashed again
// when they are loaded. Two marks collide with probability about 2^-128
// per pair; the seeds are random per process, so no input can aim at a
// collision.
type markHash struct{ a, b uint64 }

var markSeedA, markSeedB = maphash.MakeSeed(), maphash.MakeSeed()

func hashMark(m string) markHash {
	return markHash{maphash.String(markSeedA, m), maphash.String(markSeedB, m) | 1} // b != 0: a slot's hash is never zero
}

// markTable is a set of mark hashes with their expiries: open addressing
// with linear probing and backward-shift deletion (no tombstones), at most
// half full. The zero value is empty.
type markTable struct {
	slots []markSlot // len a power of two, or none
	n     int
}

// markSlot is a mark's hash and expiry; b == 0: empty.
type markSlot struct {
	h   markHash
	exp int64
}

func (t *markTable) get(h markHash) (int64, bool) {
	if len(t.slots) == 0 {
		return 0, false
	}
	mask := uint64(len(t.slots) - 1)
	for i := h.a & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.h == h {
			return s.exp, true
		}
		if s.h.b == 0 {
			return 0, false
		}
	}
}

// put sets h's expiry, adding h if it is new.
func (t *markTable) put(h markHash, exp int64) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	mask := uint64(len(t.slots) - 1)
	for i := h.a & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.h == h {
			s.exp = exp
			return
		}
		if s.h.b == 0 {
			*s = markSlot{h, exp}
			t.n++
			return
		}
	}
}

// del removes h if present.
func (t *markTable) del(h markHash) {
	if len(t.slots) == 0 {
		return
	}
	mask := uint64(len(t.slots) - 1)
	i := h.a & mask
	for ; ; i = (i + 1) & mask {
		if t.slots[i].h == h {
			break
		}
		if t.slots[i].h.b == 0 {
			return
		}
	}
	// Backward shift: move up each later slot of the run whose home is
	// not between the hole and it (cyclically).
	for j := (i + 1) & mask; t.slots[j].h.b != 0; j = (j + 1) & mask {
		home := t.slots[j].h.a & mask
		if (j-home)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = markSlot{}
	t.n--
	if len(t.slots) > 1024 && 8*t.n < len(t.slots) {
		t.resize(len(t.slots) / 2)
	}
}

func (t *markTable) grow() { t.resize(max(2*len(t.slots), 64)) }

func (t *markTable) resize(n int) {
	old := t.slots
	t.slots = make([]markSlot, n)
	mask := uint64(n - 1)
	for _, s := range old {
		if s.h.b == 0 {
			continue
		}
		i := s.h.a & mask
		for t.slots[i].h.b != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}
