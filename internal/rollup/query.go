package rollup

import (
	"fmt"
	"math"
	"time"

	"github.com/counterd/counterd/internal/counter"
)

// Store reads the stored (closed) rollups of one counter. The engine
// implements it over Pebble; tests use a map.
type Store interface {
	// Chunks calls fn, in index order, for each stored chunk of g whose
	// index is in [from, to]. fn must not keep vals.
	Chunks(g Granularity, from, to int64, fn func(idx int64, vals []int64) error) error
	// Sketch returns the stored sketch of unit at level (0: one unit, k:
	// the union of the aligned 2^k units) and index, or nil if there is
	// none.
	Sketch(unit Granularity, level int, idx int64) (*counter.HLL, error)
}

// CountsView is a copy of a count State's memory, taken under the
// counter's lock and read after it is released.
type CountsView struct {
	spec    Spec
	noStore bool
	mem     [numGranularities]map[int64][]int64 // chunk index -> values
	late    [numGranularities]map[int64][]int64 // chunk index -> deltas not yet in a stored or mem chunk
}

// CountsView copies what Series needs from s.
func (s *State) CountsView() *CountsView {
	v := &CountsView{spec: *s.spec, noStore: s.noStore}
	put := func(g Granularity, idx int64, vals []int64) {
		if v.mem[g] == nil {
			v.mem[g] = make(map[int64][]int64, 2)
		}
		v.mem[g][idx] = vals
	}
	for _, it := range s.closed {
		switch {
		case it.sketch:
		case it.late:
			if v.late[it.g] == nil {
				v.late[it.g] = make(map[int64][]int64, 1)
			}
			d := v.late[it.g][it.idx]
			if d == nil {
				d = make([]int64, len(it.vals))
				v.late[it.g][it.idx] = d
			}
			for i, x := range it.vals {
				d[i] = satAdd(d[i], x)
			}
		default:
			put(it.g, it.idx, it.vals) // immutable
		}
	}
	for _, c := range s.counts {
		if c != nil && c.started {
			put(c.g, c.idx, append([]int64(nil), c.vals...))
		}
	}
	return v
}

// Series is a run of consecutive buckets of one granularity.
type Series struct {
	Granularity Granularity // of the buckets
	Source      Granularity // the stored granularity they were summed from
	From, To    time.Time   // [From, To): aligned to Granularity
	Values      []int64     // Values[i] is the count of the bucket starting at Start(i)
	Total       int64       // sum of Values
	first       int64       // bucket number of Values[0]
}

// Start returns the start of bucket i.
func (s *Series) Start(i int) time.Time {
	return time.Unix(0, s.Granularity.Start(s.first+int64(i))).UTC()
}

// MaxSeriesBuckets bounds the buckets of one Series query.
const MaxSeriesBuckets = 100000

// Series returns g's buckets over [from, to) (unix ns, aligned outward to
// g) at time now. It sums them from the coarsest kept granularity at or
// below g that covers the range (if none covers all of it, the one that
// covers most). Buckets that ended before their retention are 0; so are
// buckets nothing was counted in. It fails with ErrInvalid for an empty or
// out-of-range range, more than MaxSeriesBuckets buckets, or when no
// granularity at or below g is kept, and with counter.ErrOverflow when the
// total leaves the int64 range.
func (v *CountsView) Series(st Store, g Granularity, from, to, now int64) (*Series, error) {
	if g >= numGranularities {
		return nil, fmt.Errorf("%w: granularity %d", ErrInvalid, g)
	}
	if from >= to || from < minTime || to > maxTime {
		return nil, fmt.Errorf("%w: range [%v, %v) is empty or outside 1900..2200", ErrInvalid,
			time.Unix(0, from).UTC(), time.Unix(0, to).UTC())
	}
	src, ok := v.source(g, from, now)
	if !ok {
		return nil, fmt.Errorf("%w: no %s or finer buckets are kept", ErrInvalid, g)
	}
	b0, b1 := g.Bucket(from), g.Bucket(to-1)
	if b1-b0+1 > MaxSeriesBuckets {
		return nil, fmt.Errorf("%w: %d %s buckets, at most %d", ErrInvalid, b1-b0+1, g, MaxSeriesBuckets)
	}
	out := &Series{Granularity: g, Source: src, Values: make([]int64, b1-b0+1), first: b0}
	out.From, out.To = time.Unix(0, g.Start(b0)).UTC(), time.Unix(0, g.Start(b1+1)).UTC()
	s0, s1 := src.Bucket(g.Start(b0)), src.Bucket(g.Start(b1+1)-1)
	c0, _ := src.chunkOf(s0)
	c1, _ := src.chunkOf(s1)
	// A bucket is visible until it has ended retention ago.
	horizon := now - int64(v.spec.Retention(src))
	vals := out.Values
	add := func(idx int64, cv []int64) {
		first := src.chunkFirst(idx)
		for off, x := range cv {
			sb := first + int64(off)
			if x == 0 || sb < s0 || sb > s1 || src.Start(sb+1) <= horizon {
				continue
			}
			ob := sb - b0
			if src != g {
				ob = g.Bucket(src.Start(sb)) - b0
			}
			vals[ob] = satAdd(vals[ob], x)
		}
	}
	mem := v.mem[src]
	if !v.noStore {
		err := st.Chunks(src, c0, c1, func(idx int64, cv []int64) error {
			if _, ok := mem[idx]; !ok { // memory is newer
				add(idx, cv)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	for idx, cv := range mem {
		if idx >= c0 && idx <= c1 {
			add(idx, cv)
		}
	}
	for idx, cv := range v.late[src] { // late deltas count on top of either
		if idx >= c0 && idx <= c1 {
			add(idx, cv)
		}
	}
	for _, x := range vals {
		t, err := counter.AddInt64(out.Total, x)
		if err != nil {
			return nil, fmt.Errorf("%w: series total", counter.ErrOverflow)
		}
		out.Total = t
	}
	return out, nil
}

// source picks the granularity a query of g's buckets from time from reads.
func (v *CountsView) source(g Granularity, from, now int64) (Granularity, bool) {
	best, found := g, false
	var bestH int64
	for s := int(g); s >= int(Minute); s-- {
		r := v.spec.Retention(Granularity(s))
		if r <= 0 {
			continue
		}
		h := now - int64(r)
		if h <= from {
			return Granularity(s), true
		}
		if !found || h < bestH {
			best, bestH, found = Granularity(s), h, true
		}
	}
	return best, found
}

// SketchView is a copy of what a sketch State holds for one unit, taken
// under the counter's lock and read after it is released.
type SketchView struct {
	spec       Spec
	unit       Granularity
	noStore    bool
	mem        []memSketch
	hasFlushed bool
	flushed    int64
}

type memSketch struct {
	idx int64
	h   *counter.HLL
}

// SketchView copies what Uniques needs for unit (Hour or Day) from s; ok is
// false when s does not keep that unit.
func (s *State) SketchView(unit Granularity) (v *SketchView, ok bool) {
	if unit != Hour && unit != Day {
		return nil, false
	}
	k := s.sketches[sketchSlot(unit)]
	if k == nil {
		return nil, false
	}
	v = &SketchView{spec: *s.spec, unit: unit, noStore: s.noStore, hasFlushed: k.hasFlushed, flushed: k.flushed}
	for _, it := range s.closed {
		switch {
		case !it.sketch || it.g != unit:
		case it.late && it.gen == 0: // changed in place
			v.mem = append(v.mem, memSketch{it.idx, it.h.Clone()})
		default:
			v.mem = append(v.mem, memSketch{it.idx, it.h}) // immutable
		}
	}
	if k.started {
		v.mem = append(v.mem, memSketch{k.idx, k.h.Clone()})
	}
	return v, true
}

// Estimate is a unique count over the last N units.
type Estimate struct {
	Unit      Granularity
	N         int
	From, To  time.Time // [From, To): the N whole units, the last being the current one
	Value     uint64    // estimated distinct items
	StdError  float64   // relative standard error of Value, 1.04/sqrt(2^Precision)
	Precision uint8     // of the merged sketch
	Merged    int       // sketches merged to answer
}

// Bounds returns Value -/+ z standard errors, clamped at 0 (z = 1.96 is a
// 95% interval).
func (e *Estimate) Bounds(z float64) (lo, hi uint64) {
	d := z * e.StdError * float64(e.Value)
	l := math.Max(0, math.Round(float64(e.Value)-d))
	return uint64(l), uint64(math.Round(float64(e.Value) + d))
}

// MaxUnits returns the largest N that Uniques accepts for the view's unit:
// the retention in whole units, at most MaxUniqueDays days or
// MaxUniqueHours hours.
func (v *SketchView) MaxUnits() int {
	w := int64(time.Hour)
	limit := MaxUniqueHours
	if v.unit == Day {
		w, limit = nsDay, MaxUniqueDays
	}
	return int(min(int64(limit), int64(v.spec.SketchRetention(v.unit))/w))
}

// Uniques estimates the distinct items of the last n units at time now
// (the current unit and the n-1 before it) by merging the open and closed
// sketches in memory and at most about 2*log2(n) stored sketches. It fails
// with ErrInvalid unless 1 <= n <= MaxUnits().
func (v *SketchView) Uniques(st Store, n int, now int64) (*Estimate, error) {
	if max := v.MaxUnits(); n < 1 || n > max {
		return nil, fmt.Errorf("%w: last %d %ss: the %s sketches answer 1..%d", ErrInvalid, n, v.unit, v.unit, max)
	}
	if now < minTime || now >= maxTime {
		return nil, fmt.Errorf("%w: time outside 1900..2200", ErrInvalid)
	}
	u := v.unit.Bucket(now)
	a := u - int64(n) + 1
	union := v.spec.newSketch()
	merged := 0
	merge := func(h *counter.HLL) error {
		merged++
		return union.Merge(h)
	}
	for _, m := range v.mem {
		if m.idx >= a && m.idx <= u {
			if err := merge(m.h); err != nil {
				return nil, err
			}
		}
	}
	if v.hasFlushed && !v.noStore {
		for _, blk := range Decompose(a, min(u, v.flushed), levels(v.unit)) {
			h, err := st.Sketch(v.unit, blk.Level, blk.Index)
			if err != nil {
				return nil, err
			}
			if h != nil {
				if err := merge(h); err != nil {
					return nil, err
				}
			}
		}
	}
	return &Estimate{
		Unit: v.unit, N: n,
		From: time.Unix(0, v.unit.Start(a)).UTC(), To: time.Unix(0, v.unit.Start(u+1)).UTC(),
		Value: union.Count(), StdError: union.StdError(), Precision: union.Precision(), Merged: merged,
	}, nil
}

func levels(unit Granularity) int {
	if unit == Day {
		return DayLevels
	}
	return HourLevels
}

// Block is an aligned block of 2^Level units: [Index<<Level, (Index+1)<<Level).
type Block struct {
	Level int
	Index int64
}

// Decompose splits the units [a, b] into the fewest aligned blocks of at
// most 2^maxLevel units, in order: at most 2*maxLevel + (b-a+1)>>maxLevel + 1.
func Decompose(a, b int64, maxLevel int) []Block {
	var out []Block
	for a <= b {
		k := 0
		for k < maxLevel {
			size := int64(1) << (k + 1)
			if a&(size-1) != 0 || a+size-1 > b {
				break
			}
			k++
		}
		out = append(out, Block{k, a >> k})
		a += int64(1) << k
	}
	return out
}

// SketchWrite is a stored sketch to write: level 0 is one unit, level k the
// union of the aligned block of 2^k units.
type SketchWrite struct {
	Level  int
	Index  int64
	Sketch *counter.HLL
}

// BlockUpdates returns the sketches to store when unit c.Index closes: its
// own (level 0) and the union of every aligned block that is complete now
// and was not complete when c.Prev closed, built from its two halves. read
// returns a stored sketch (or one written earlier in the same batch) or
// nil; BlockUpdates does not modify what read returns. Blocks are returned
// by increasing level, so a later block may read an earlier one.
//
// Why every complete block is then stored: a block that ends after Prev
// and holds data holds Prev or c (units in between saw nothing), so it is
// the block of Prev or of c at its level.
func BlockUpdates(c ClosedSketch, read func(level int, idx int64) (*counter.HLL, error)) ([]SketchWrite, error) {
	out := []SketchWrite{{0, c.Index, c.Sketch}}
	local := map[Block]*counter.HLL{{0, c.Index}: c.Sketch}
	get := func(b Block) (*counter.HLL, error) {
		if h, ok := local[b]; ok {
			return h, nil
		}
		return read(b.Level, b.Index)
	}
	L := levels(c.Unit)
	for k := 1; k <= L; k++ {
		var cands []int64
		if c.HasPrev {
			j := c.Prev >> k
			if end := (j+1)<<k - 1; end > c.Prev && end <= c.Index && j != c.Index>>k {
				cands = append(cands, j)
			}
		}
		if j := c.Index >> k; (j+1)<<k-1 == c.Index {
			cands = append(cands, j)
		}
		for _, j := range cands {
			left, err := get(Block{k - 1, 2 * j})
			if err != nil {
				return nil, err
			}
			right, err := get(Block{k - 1, 2*j + 1})
			if err != nil {
				return nil, err
			}
			u, err := unionOf(left, right)
			if err != nil {
				return nil, err
			}
			if u == nil {
				continue
			}
			local[Block{k, j}] = u
			out = append(out, SketchWrite{k, j, u})
		}
	}
	return out, nil
}

// unionOf is the union of a block's two halves, either of which may be
// nil (no sketch); nil when both are. A half is returned as it is when
// the other is nil, else the union is a new sketch.
func unionOf(left, right *counter.HLL) (*counter.HLL, error) {
	switch {
	case left == nil:
		return right, nil
	case right == nil:
		return left, nil
	}
	u := left.Clone()
	if err := u.Merge(right); err != nil {
		return nil, err
	}
	return u, nil
}

// LateBlockUpdates returns what to write for a late sketch c (c.Late):
// c's unit merged into base, the stored (or already written) sketch of
// that unit (nil: none), then the unions of every complete block (ending
// at or before c.Upto) that holds c's unit or c.Prev, rebuilt from their
// halves. read is as for BlockUpdates. A union is idempotent, so writing
// a late sketch twice (a retried flush) changes nothing.
func LateBlockUpdates(c ClosedSketch, base *counter.HLL, read func(level int, idx int64) (*counter.HLL, error)) ([]SketchWrite, error) {
	h := c.Sketch.Clone()
	if base != nil {
		h = base.Clone()
		if err := h.Merge(c.Sketch); err != nil {
			return nil, err
		}
	}
	out := []SketchWrite{{0, c.Index, h}}
	local := map[Block]*counter.HLL{{0, c.Index}: h}
	get := func(b Block) (*counter.HLL, error) {
		if h, ok := local[b]; ok {
			return h, nil
		}
		return read(b.Level, b.Index)
	}
	for k := 1; k <= levels(c.Unit); k++ {
		cands := []int64{c.Index >> k}
		if c.HasPrev && c.Prev>>k != c.Index>>k {
			cands = append(cands, c.Prev>>k)
		}
		for _, j := range cands {
			if (j+1)<<k-1 > c.Upto {
				continue // not complete: written when its last unit closes
			}
			left, err := get(Block{k - 1, 2 * j})
			if err != nil {
				return nil, err
			}
			right, err := get(Block{k - 1, 2*j + 1})
			if err != nil {
				return nil, err
			}
			u, err := unionOf(left, right)
			if err != nil {
				return nil, err
			}
			if u == nil {
				continue
			}
			local[Block{k, j}] = u
			out = append(out, SketchWrite{k, j, u})
		}
	}
	return out, nil
}

// Horizons says which stored data a purge may delete at some time: chunks
// of granularity g with an index below Chunks[g], and sketches of unit u
// (0: hours, 1: days) at level k with an index below Sketches[u][k].
// math.MaxInt64 means everything (not kept).
type Horizons struct {
	Chunks   [numGranularities]int64
	Sketches [2][DayLevels + 1]int64
}

// Horizons returns what s lets a purge delete at time now.
func (s *Spec) Horizons(now int64) Horizons {
	var h Horizons
	for g := Minute; g < numGranularities; g++ {
		h.Chunks[g] = math.MaxInt64
		if r := int64(s.Retention(g)); r > 0 {
			// Keep the chunk holding the last hidden instant: it may
			// hold visible buckets.
			h.Chunks[g], _ = g.chunkOf(g.Bucket(now - r - 1))
		}
	}
	for i, unit := range [2]Granularity{Hour, Day} {
		v := SketchView{spec: *s, unit: unit}
		n := int64(v.MaxUnits())
		for k := range h.Sketches[i] {
			h.Sketches[i][k] = math.MaxInt64
			if n > 0 && k <= levels(unit) {
				first := unit.Bucket(now) - n + 1 // the oldest unit a query reads
				h.Sketches[i][k] = -floorDiv(-first, int64(1)<<k)
			}
		}
	}
	return h
}

// Levels returns the highest block level stored for unit (Hour or Day).
func Levels(unit Granularity) int { return levels(unit) }

// PurgeRange is stored data that may be deleted: the indexes [From, To) of
// the chunks of granularity G, or (Sketch) of the sketches of unit G at
// Level. From is math.MinInt64 and To math.MaxInt64 when unbounded.
type PurgeRange struct {
	Sketch bool
	G      Granularity
	Level  int
	From   int64
	To     int64
}

// PurgeRanges returns the stored data of s's counter that may be deleted at
// time now and that s has not returned before: everything of what s's spec
// does not keep, and what is past its retention. The first call after a
// State is made returns unbounded ranges.
func (s *State) PurgeRanges(now int64) []PurgeRange {
	h := s.spec.Horizons(now)
	var cur []int64 // the horizons, in the order of s.purged
	var out []PurgeRange
	if s.Sketches() {
		for i, unit := range [2]Granularity{Hour, Day} {
			cur = append(cur, h.Sketches[i][:levels(unit)+1]...)
		}
	} else {
		cur = append(cur, h.Chunks[:]...)
	}
	if s.purged == nil {
		s.purged = make([]int64, len(cur))
		for i := range s.purged {
			s.purged[i] = math.MinInt64
		}
	}
	k := 0
	emit := func(r PurgeRange) {
		if cur[k] > s.purged[k] {
			r.From, r.To = s.purged[k], cur[k]
			out = append(out, r)
			s.purged[k] = cur[k]
		}
		k++
	}
	if s.Sketches() {
		for _, unit := range [2]Granularity{Hour, Day} {
			for l := 0; l <= levels(unit); l++ {
				emit(PurgeRange{Sketch: true, G: unit, Level: l})
			}
		}
	} else {
		for g := Minute; g < numGranularities; g++ {
			emit(PurgeRange{G: g})
		}
	}
	return out
}
