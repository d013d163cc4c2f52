package rollup

import (
	"math"
	"slices"

	"github.com/counterd/counterd/internal/counter"
)

// State is one counter's rollups in memory: the open chunk of each kept
// granularity (count buckets) or the open sketch of each kept unit
// (unique counts), and what was closed but is not yet known to be stored.
//
// Memory: a count State holds at most the buckets of one hour of minutes,
// one day of hours, one month of days and one year of months, 8 bytes each
// (1016 bytes), plus chunks closed since the last flush. A sketch State
// holds the sketches of the current hour and day (sparse while small: 4
// bytes per non-zero register; dense: 2^p bytes each, 16 KiB at p = 14),
// plus sketches closed since the last flush.
//
// A State is not safe for concurrent use; see the package comment.
type State struct {
	spec     *Spec
	counts   [numGranularities]*openChunk // nil: granularity not kept
	sketches [2]*openSketch               // [0] hours, [1] days; nil: not kept
	closed   []closedItem                 // closed, not yet known to be stored
	noStore  bool                         // stored data belongs to an older life of the counter
	purged   []int64                      // horizons PurgeRanges returned last; nil: none yet
}

type openChunk struct {
	g       Granularity
	started bool
	idx     int64   // chunk index
	vals    []int64 // vals[i]: bucket chunkFirst(idx)+i; len grows with time
	lo, hi  int64   // [lo, hi) unix ns of the bucket at off: the fast path
	off     int
}

type openSketch struct {
	unit       Granularity // Hour or Day
	started    bool
	idx        int64 // hour or day number of h
	lo, hi     int64 // [lo, hi) unix ns of idx
	h          *counter.HLL
	hasClosed  bool
	lastClosed int64 // the unit closed most recently
	hasFlushed bool
	flushed    int64 // every closed unit <= flushed is stored with its unions
}

// closedItem is a closed chunk or sketch. Its data is immutable: views and
// clones share it.
type closedItem struct {
	g       Granularity // chunk granularity, or sketch unit
	sketch  bool
	idx     int64
	vals    []int64
	h       *counter.HLL
	hasPrev bool
	prev    int64  // sketches: the unit closed before this one
	gen     uint64 // flush generation that last wrote it; 0: none yet
	// late: an event-time add to a chunk or unit before the open one
	// (AddAt, AddHashAt). A late chunk's vals are deltas that the flush
	// adds to the stored chunk (ResolveLate then makes them the absolute
	// values it wrote); a late sketch is merged into the stored one. A
	// late item is changed in place while gen is 0 (views copy it) and is
	// immutable once a flush took it.
	late bool
}

func sketchSlot(unit Granularity) int {
	if unit == Day {
		return 1
	}
	return 0
}

// NewState returns an empty State keeping what spec says: count buckets
// when sketches is false, sketches when it is true. It returns nil when
// spec keeps nothing of that sort. spec must be valid and is not copied.
func NewState(spec *Spec, sketches bool) *State {
	s := &State{}
	if !s.setSpec(spec, sketches) {
		return nil
	}
	return s
}

// Sketches reports whether s keeps sketches (rather than count buckets).
func (s *State) Sketches() bool { return s.sketches[0] != nil || s.sketches[1] != nil }

// Spec returns the spec s follows.
func (s *State) Spec() *Spec { return s.spec }

// SetSpec switches s to spec. Granularities or units that spec no longer
// keeps are dropped from memory (their stored data is left to the engine's
// purge); newly kept ones start empty. It reports false when spec keeps
// nothing for s, in which case s must be discarded.
func (s *State) SetSpec(spec *Spec) bool { return s.setSpec(spec, s.Sketches()) }

func (s *State) setSpec(spec *Spec, sketches bool) bool {
	s.spec = spec
	any := false
	for g := Minute; g < numGranularities; g++ {
		keep := !sketches && spec.Retention(g) > 0
		switch {
		case keep && s.counts[g] == nil:
			s.counts[g] = &openChunk{g: g}
		case !keep:
			s.counts[g] = nil
		}
		any = any || keep
	}
	for i, unit := range [2]Granularity{Hour, Day} {
		keep := sketches && spec.SketchRetention(unit) > 0
		switch {
		case keep && s.sketches[i] == nil:
			s.sketches[i] = &openSketch{unit: unit}
		case !keep:
			s.sketches[i] = nil
		}
		any = any || keep
	}
	return any
}

// SetNoStore makes reads ignore stored data (the engine sets it while the
// stored rollups of a deleted counter of the same id are being removed).
func (s *State) SetNoStore(v bool) { s.noStore = v }

// NoStore reports what SetNoStore set.
func (s *State) NoStore() bool { return s.noStore }

// satAdd adds without leaving the int64 range: buckets saturate.
func satAdd(a, b int64) int64 {
	c := a + b
	if (a >= 0) == (b >= 0) && (c >= 0) != (a >= 0) {
		if a >= 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return c
}

// Add adds delta to the bucket of time now (unix ns) of every kept
// granularity. Buckets saturate at the int64 limits. A time before the open
// chunk (the clock went back) counts in the newest bucket. Add does not
// allocate while now stays in the current buckets.
func (s *State) Add(now, delta int64) {
	for _, c := range &s.counts {
		if c == nil {
			continue
		}
		if now >= c.lo && now < c.hi {
			c.vals[c.off] = satAdd(c.vals[c.off], delta)
			continue
		}
		s.addSlow(c, now, delta)
	}
}

func (s *State) addSlow(c *openChunk, now, delta int64) {
	b := c.g.Bucket(now)
	ci, off := c.g.chunkOf(b)
	switch {
	case !c.started:
		c.started, c.idx = true, ci
	case ci > c.idx:
		s.closeChunk(c)
		c.idx = ci
	case ci < c.idx:
		if len(c.vals) == 0 {
			c.grow(0, 1)
		}
		c.vals[len(c.vals)-1] = satAdd(c.vals[len(c.vals)-1], delta)
		return
	}
	if off >= len(c.vals) {
		c.grow(off, c.g.chunkLen(ci))
	}
	c.vals[off] = satAdd(c.vals[off], delta)
	c.off, c.lo, c.hi = off, c.g.Start(b), c.g.Start(b+1)
}

// grow extends c.vals to hold offset off, doubling its capacity but never
// beyond the chunk's length n.
func (c *openChunk) grow(off, n int) {
	if off < cap(c.vals) {
		c.vals = c.vals[:off+1]
		return
	}
	v := make([]int64, off+1, max(off+1, min(n, 2*cap(c.vals))))
	copy(v, c.vals)
	c.vals = v
}

func (s *State) closeChunk(c *openChunk) {
	if slices.ContainsFunc(c.vals, func(v int64) bool { return v != 0 }) {
		s.closed = append(s.closed, closedItem{g: c.g, idx: c.idx, vals: c.vals})
	}
	c.vals, c.lo, c.hi, c.off = nil, 0, 0, 0
}

// roll makes k's open sketch the one of time now and returns it. A time
// before the open unit (the clock went back) counts in the open unit.
func (s *State) roll(k *openSketch, now int64) *counter.HLL {
	if now >= k.lo && now < k.hi {
		return k.h
	}
	u := k.unit.Bucket(now)
	switch {
	case !k.started:
	case u > k.idx:
		if k.h.Count() > 0 {
			s.closed = append(s.closed, closedItem{g: k.unit, sketch: true, idx: k.idx, h: k.h, hasPrev: k.hasClosed, prev: k.lastClosed})
			k.hasClosed, k.lastClosed = true, k.idx
		}
	default:
		return k.h
	}
	k.started, k.idx, k.h = true, u, s.spec.newSketch()
	k.lo, k.hi = k.unit.Start(u), k.unit.Start(u+1)
	return k.h
}

// AddAt adds delta to the buckets of time t (unix ns), an event's own
// time, at time now: a t before the open chunk of a granularity counts in
// t's bucket (a late item the flush adds to the stored chunk) unless that
// bucket has ended its retention ago, where it is dropped. A t at or after
// the open chunk counts as Add(t, delta). The caller bounds t (the engine
// refuses times outside 1900..2200).
func (s *State) AddAt(t, now, delta int64) {
	for _, c := range &s.counts {
		if c == nil {
			continue
		}
		if t >= c.lo && t < c.hi {
			c.vals[c.off] = satAdd(c.vals[c.off], delta)
			continue
		}
		b := c.g.Bucket(t)
		ci, off := c.g.chunkOf(b)
		if !c.started || ci >= c.idx {
			s.addSlow(c, t, delta)
			continue
		}
		if c.g.Start(b+1) <= now-int64(s.spec.Retention(c.g)) {
			continue
		}
		it := s.lateItem(c.g, ci, false)
		if it.vals == nil {
			it.vals = make([]int64, c.g.chunkLen(ci))
		}
		it.vals[off] = satAdd(it.vals[off], delta)
	}
}

// Peek reads what Keeps and an add read first (the open chunks and
// sketches, counter.HLL.Peek) and returns a sum of it. It changes nothing: a caller about
// to add to many states peeks at them all first, so that their cache
// misses overlap rather than come one after another.
func (s *State) Peek() int64 {
	var sum int64
	for _, c := range &s.counts {
		if c != nil {
			sum += c.lo
		}
	}
	for _, k := range &s.sketches {
		if k != nil && k.h != nil {
			sum += k.h.Peek()
		}
	}
	return sum
}

// Keeps reports whether some granularity or unit s keeps still holds the
// bucket of time t at time now (it has not ended its retention ago): an
// AddAt or AddHashAt of t counts somewhere.
func (s *State) Keeps(t, now int64) bool {
	for _, c := range &s.counts {
		if c != nil && c.g.Start(c.g.Bucket(t)+1) > now-int64(s.spec.Retention(c.g)) {
			return true
		}
	}
	for _, k := range &s.sketches {
		if k != nil && k.unit.Start(k.unit.Bucket(t)+1) > now-int64(s.spec.SketchRetention(k.unit)) {
			return true
		}
	}
	return false
}

// lateItem returns the open (gen 0) late item of g (or unit) and index
// idx, appending one if there is none.
func (s *State) lateItem(g Granularity, idx int64, sketch bool) *closedItem {
	for i := len(s.closed) - 1; i >= 0; i-- {
		if it := &s.closed[i]; it.late && it.gen == 0 && it.sketch == sketch && it.g == g && it.idx == idx {
			return it
		}
	}
	s.closed = append(s.closed, closedItem{g: g, sketch: sketch, idx: idx, late: true})
	return &s.closed[len(s.closed)-1]
}

// AddHashAt is AddHash at an event's time t: a t before the open unit
// adds to a late sketch of t's unit that the flush merges into the stored
// one (dropped when that unit has ended its retention ago at now).
func (s *State) AddHashAt(t, now int64, x uint64) bool {
	return s.sketchesAt(t, now, func(h *counter.HLL) bool { return h.AddHash(x) })
}

// AddHashesAt is AddHashAt(t, now, x) for each of xs: every hash goes to
// the same sketch of each unit (t's), which takes them at once
// (counter.HLL.AddHashes).
func (s *State) AddHashesAt(t, now int64, xs []uint64) bool {
	if len(xs) == 0 {
		return false
	}
	return s.sketchesAt(t, now, func(h *counter.HLL) bool { return h.AddHashes(xs) })
}

// sketchesAt calls add with the sketch of each unit that an event at t
// goes to (AddHashAt), and reports whether one changed.
func (s *State) sketchesAt(t, now int64, add func(h *counter.HLL) bool) bool {
	changed := false
	for _, k := range &s.sketches {
		if k == nil {
			continue
		}
		if u := k.unit.Bucket(t); k.started && u < k.idx {
			if k.unit.Start(u+1) <= now-int64(s.spec.SketchRetention(k.unit)) {
				continue
			}
			it := s.lateItem(k.unit, u, true)
			if it.h == nil {
				// The unit counts as closed from now on (a reload takes
				// every unit up to the last closed as stored); the one
				// closed before it is the Prev whose blocks the flush
				// completes.
				it.h, it.hasPrev, it.prev = s.spec.newSketch(), k.hasClosed, k.lastClosed
				if !k.hasClosed || u > k.lastClosed {
					k.hasClosed, k.lastClosed = true, u
				}
			}
			if add(it.h) {
				changed = true
			}
			continue
		}
		if add(s.roll(k, t)) {
			changed = true
		}
	}
	return changed
}

// ResolveLate tells s the absolute values flush generation gen wrote for
// its late chunks, in the order TakeFlush returned them (Flush.Chunks with
// Add set): each such item becomes a closed chunk of those values, so
// that reads between the commit and Committed do not count the deltas
// twice (once stored, once in memory).
func (s *State) ResolveLate(gen uint64, abs [][]int64) {
	k := 0
	for i := range s.closed {
		it := &s.closed[i]
		if !it.late || it.sketch || it.gen != gen {
			continue
		}
		if k == len(abs) {
			return
		}
		it.vals, it.late = abs[k], false
		k++
	}
}

// AddHash adds an item, by its 64-bit hash (xxhash64 of the item, as
// counter.HLL.Add uses), to the open sketch of each kept unit, and reports
// whether a register changed.
func (s *State) AddHash(now int64, x uint64) bool {
	changed := false
	for _, k := range &s.sketches {
		if k != nil && s.roll(k, now).AddHash(x) {
			changed = true
		}
	}
	return changed
}

// MergeSketch merges h (not modified) into the open sketch of each kept
// unit, as if h's items had been added at time now. A sketch of lower
// precision lowers the open sketch's precision (see counter.HLL.Merge).
func (s *State) MergeSketch(now int64, h *counter.HLL) error {
	for _, k := range &s.sketches {
		if k != nil {
			if err := s.roll(k, now).Merge(h); err != nil {
				return err
			}
		}
	}
	return nil
}

// Clone returns a deep copy of s (closed data is immutable and shared).
func (s *State) Clone() *State {
	c := &State{spec: s.spec, noStore: s.noStore, closed: slices.Clone(s.closed), purged: slices.Clone(s.purged)}
	for i := range c.closed {
		if it := &c.closed[i]; it.late && it.gen == 0 { // changed in place: copy
			it.vals = slices.Clone(it.vals)
			if it.h != nil {
				it.h = it.h.Clone()
			}
		}
	}
	for i, o := range s.counts {
		if o != nil {
			x := *o
			x.vals = slices.Clone(o.vals)
			c.counts[i] = &x
		}
	}
	for i, k := range s.sketches {
		if k != nil {
			x := *k
			if k.h != nil {
				x.h = k.h.Clone()
			}
			c.sketches[i] = &x
		}
	}
	return c
}

// Closed reports how many closed chunks and sketches wait to be stored.
func (s *State) Closed() int { return len(s.closed) }

// Undo can put a State back as it was when BeginUndo was called, for the
// engine's atomic batches (a later op of the batch fails): it copies the
// State's small parts (the open chunks' buckets, the list of closed items
// and the buckets of its late chunks) into buffers it reuses, and records
// the sketches with counter.HLLUndo (copied only if written in place),
// instead of a deep copy of the State. Reusable.
type Undo struct {
	s        *State
	old      State
	counts   [numGranularities]openChunk
	vals     []int64 // the open chunks' buckets, then the late chunks'
	sketches [2]openSketch
	closed   []closedItem
	hs       []counter.HLLUndo // the open and the late sketches
}

// BeginUndo makes u able to put s back as it is now, until u.Rollback or
// u.End. The caller serialises access to s, as for any write.
func (s *State) BeginUndo(u *Undo) {
	u.s, u.old = s, *s
	u.vals, u.closed, u.hs = u.vals[:0], append(u.closed[:0], s.closed...), u.hs[:0]
	for i, c := range &s.counts {
		if c != nil {
			u.counts[i] = *c
			u.vals = append(u.vals, c.vals...)
		}
	}
	for i, k := range &s.sketches {
		if k != nil {
			u.sketches[i] = *k
			u.beginSketch(k.h)
		}
	}
	for i := range s.closed {
		if it := &s.closed[i]; it.late && it.gen == 0 { // changed in place
			u.vals = append(u.vals, it.vals...)
			u.beginSketch(it.h)
		}
	}
}

// beginSketch records h (nil: none) in u.hs. (An HLLUndo holds no
// pointer into u.hs, so u.hs may grow.)
func (u *Undo) beginSketch(h *counter.HLL) {
	if h != nil {
		u.hs = append(u.hs, counter.HLLUndo{})
		h.BeginUndo(&u.hs[len(u.hs)-1])
	}
}

// Rollback puts the State back as it was at BeginUndo.
func (u *Undo) Rollback() {
	s := u.s
	if s == nil {
		return
	}
	for i := len(u.hs) - 1; i >= 0; i-- {
		u.hs[i].Rollback()
	}
	*s = u.old
	vals := u.vals
	for i, c := range &s.counts {
		if c != nil {
			*c = u.counts[i]
			vals = vals[copy(c.vals, vals):]
			// grow reslices into the capacity, which it takes as zeros.
			clear(c.vals[len(c.vals):cap(c.vals)])
		}
	}
	for i, k := range &s.sketches {
		if k != nil {
			*k = u.sketches[i]
		}
	}
	copy(s.closed, u.closed) // the items as they were (a late one's vals and h fields)
	for i := range s.closed {
		if it := &s.closed[i]; it.late && it.gen == 0 {
			vals = vals[copy(it.vals, vals):]
		}
	}
	u.forget()
}

// End forgets the copies; the State keeps its writes.
func (u *Undo) End() {
	for i := range u.hs {
		u.hs[i].End()
	}
	u.forget()
}

func (u *Undo) forget() {
	clear(u.closed)
	u.s, u.old, u.counts, u.sketches = nil, State{}, [numGranularities]openChunk{}, [2]openSketch{}
	u.vals, u.closed, u.hs = u.vals[:0], u.closed[:0], u.hs[:0]
}
