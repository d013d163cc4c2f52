package tiered

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/rollup"
	"github.com/counterd/counterd/internal/store/postgres"
	redisstore "github.com/counterd/counterd/internal/store/redis"
)

// Unique counts over the last N hours or days (docs/redis-tier.md, "Unique
// counts"). An hll counter whose rollup spec (its own, else its
// namespace's, as in the embedded engine) keeps uniques has, per kept unit
// (hour, day), one sketch of our HLL (internal/counter, at the spec's
// precision) per unit and per aligned block of 2^k units (k up to
// rollup.Levels), all raised by every PFADD:
//
//   - in Redis (redisstore.SketchAdd: one Lua script raising registers in
//     the 1+Levels keys of each unit), the hot copy queries read;
//   - in memory until the next flush, then merged into PostgreSQL's
//     counter_uniques (postgres.MergeSketches), the durable copy a Redis
//     miss is filled from (redisstore.SketchFill).
//
// A query of the last n units reads the fewest aligned blocks covering
// them (rollup.Decompose: at most about 2*Levels + n/2^Levels + 1 keys, one
// MGET) and merges their registers.
const (
	// sketchTTL is how long a Redis sketch key lives after its last write
	// or fill; PostgreSQL has it after that.
	sketchTTL = 25 * time.Hour
	// specCacheTTL is how long this node uses the rollup specs it read
	// from PostgreSQL before reading them again (SetRollup and
	// DeleteRollup on this node refresh them at once).
	specCacheTTL = time.Second
)

// sketchUnit is a sketch unit and the letter that names it in keys.
type sketchUnit struct {
	g      rollup.Granularity
	letter byte
}

var sketchUnits = [...]sketchUnit{{rollup.Hour, 'h'}, {rollup.Day, 'd'}}

// pendingSketch is the unit idx of id's sketches at precision p.
type pendingSketch struct {
	id     string
	p      uint8
	letter byte
	g      rollup.Granularity
	idx    int64
}

// uniques is the Backend's unique-count state.
type uniques struct {
	mu      sync.Mutex
	pending map[pendingSketch]*counter.HLL // added since the last flush
	ids     map[string]int                 // ids in pending

	flushMu sync.Mutex // serialises flushes

	specMu sync.Mutex
	specs  map[string]rollup.Spec // nil: to read
	specAt time.Time              // wall clock of the read
}

func (u *uniques) addPending(k pendingSketch, h *counter.HLL) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.pending == nil {
		u.pending, u.ids = map[pendingSketch]*counter.HLL{}, map[string]int{}
	}
	if cur, ok := u.pending[k]; ok {
		_ = cur.Merge(h) // never fails
		return
	}
	u.pending[k] = h.Clone()
	u.ids[k.id]++
}

// drop forgets the pending sketches of id ("": all).
func (u *uniques) drop(id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for k := range u.pending {
		if id == "" || k.id == id {
			delete(u.pending, k)
			delete(u.ids, k.id)
		}
	}
}

func (u *uniques) hasPending(id string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.ids[id] > 0
}

// invalidateSpecs makes the next sketchSpec read the specs again.
func (u *uniques) invalidateSpecs() {
	u.specMu.Lock()
	u.specAt = time.Time{}
	u.specMu.Unlock()
}

// sketchSpec returns the spec that keeps id's sketches (its own, else its
// namespace's); ok is false when that spec keeps none, or there is none.
func (b *Backend) sketchSpec(ctx context.Context, id string) (spec rollup.Spec, ok bool, err error) {
	u := &b.uq
	u.specMu.Lock()
	defer u.specMu.Unlock()
	if u.specs == nil || time.Since(u.specAt) > specCacheTTL {
		specs, err := b.Rollups(ctx)
		switch {
		case err == nil:
			u.specs, u.specAt = specs, time.Now()
		case u.specs == nil:
			return rollup.Spec{}, false, err
		default:
			// PostgreSQL is down: keep serving PFADDs from Redis with the
			// specs read last, and try again later.
			u.specAt = time.Now()
			b.opts.Logger.Warn("tiered: reading rollup specs failed; using the last ones read", "err", err)
		}
	}
	ns, _, _ := strings.Cut(id, ":")
	if spec, ok = u.specs[id]; !ok {
		spec, ok = u.specs[ns]
	}
	if !ok || !spec.Uniques() {
		return rollup.Spec{}, false, nil
	}
	if spec.Precision == 0 {
		spec.Precision = rollup.DefaultPrecision
	}
	return spec, true, nil
}

// addUniques adds items to the hour and day sketches of id (and the
// blocks holding them) of the event time at (unix ns; 0: now) when id's
// spec keeps uniques; a unit past its retention is skipped. PFADD calls it
// whether or not the counter's own sketch changed: an item seen on an
// earlier day is new to today's sketch.
func (b *Backend) addUniques(ctx context.Context, id string, items [][]byte, at int64) error {
	spec, ok, err := b.sketchSpec(ctx, id)
	if err != nil || !ok || len(items) == 0 {
		return err
	}
	h, err := counter.NewHLL(spec.Precision)
	if err != nil {
		return fmt.Errorf("%w: %v", contract.ErrInvalidArgument, err)
	}
	for _, it := range items {
		h.Add(it)
	}
	regs := h.Registers()
	var set []uint32 // index<<8 | rank of the non-zero registers
	for i, r := range regs {
		if r != 0 {
			set = append(set, uint32(i)<<8|uint32(r))
		}
	}
	now := b.opts.Now().UnixNano()
	if at == 0 {
		at = now
	}
	var keys []string
	var pend []pendingSketch
	for _, su := range sketchUnits {
		ret := spec.SketchRetention(su.g)
		if ret <= 0 {
			continue
		}
		idx := su.g.Bucket(at)
		if su.g.Start(idx+1) <= now-int64(ret) {
			continue // the event's unit ended its retention ago (as the engine drops it)
		}
		for l := 0; l <= rollup.Levels(su.g); l++ {
			keys = append(keys, redisstore.SketchKey(id, spec.Precision, su.letter, l, idx>>l))
		}
		pend = append(pend, pendingSketch{id, spec.Precision, su.letter, su.g, idx})
	}
	if err := b.rs.SketchAdd(ctx, keys, len(regs), set, sketchTTL); err != nil {
		return err
	}
	for _, k := range pend {
		b.uq.addPending(k, h)
	}
	return nil
}

// flushUniques merges the sketches added since the last flush into
// PostgreSQL; on failure they stay pending for the next one.
func (b *Backend) flushUniques(ctx context.Context) error {
	u := &b.uq
	u.flushMu.Lock()
	defer u.flushMu.Unlock()
	u.mu.Lock()
	pend := u.pending
	u.pending, u.ids = nil, nil
	u.mu.Unlock()
	if len(pend) == 0 {
		return nil
	}
	rows := map[postgres.SketchID]*counter.HLL{}
	for k, h := range pend {
		for l := 0; l <= rollup.Levels(k.g); l++ {
			sid := postgres.SketchID{ID: k.id, Precision: k.p, Unit: k.letter, Level: l, Index: k.idx >> l}
			if cur, ok := rows[sid]; ok {
				_ = cur.Merge(h)
			} else {
				rows[sid] = h.Clone()
			}
		}
	}
	enc := make(map[postgres.SketchID][]byte, len(rows))
	for sid, h := range rows {
		enc[sid], _ = h.MarshalBinary() // never fails
	}
	if err := b.pg.MergeSketches(ctx, enc, mergeEncoded); err != nil {
		for k, h := range pend {
			u.addPending(k, h)
		}
		return unavailable(err)
	}
	return nil
}

// deleteUniques removes id's sketches, as the embedded engine deletes a
// counter's rollups with it: the pending ones, PostgreSQL's, and the Redis
// keys of the units the spec in force keeps (other keys expire).
func (b *Backend) deleteUniques(ctx context.Context, id string) error {
	b.uq.flushMu.Lock() // not racing with a flush of id's sketches
	defer b.uq.flushMu.Unlock()
	b.uq.drop(id)
	spec, ok, err := b.sketchSpec(ctx, id)
	if err != nil {
		return err
	}
	if ok {
		now := b.opts.Now().UnixNano()
		var keys []string
		for _, su := range sketchUnits {
			last := su.g.Bucket(now)
			first := last - int64(maxUnits(&spec, su.g)) + 1
			for l := 0; l <= rollup.Levels(su.g) && first <= last; l++ {
				for i := first >> l; i <= last>>l; i++ {
					keys = append(keys, redisstore.SketchKey(id, spec.Precision, su.letter, l, i))
				}
			}
		}
		if err := b.rs.SketchDelete(ctx, keys); err != nil {
			return err
		}
	}
	return unavailable(b.pg.DeleteSketches(ctx, id))
}

// mergeEncoded merges two HLL encodings (old may be nil).
func mergeEncoded(old, add []byte) ([]byte, error) {
	if old == nil {
		return add, nil
	}
	var a, c counter.HLL
	if err := a.UnmarshalBinary(old); err != nil {
		return nil, err
	}
	if err := c.UnmarshalBinary(add); err != nil {
		return nil, err
	}
	if err := a.Merge(&c); err != nil {
		return nil, err
	}
	return a.MarshalBinary()
}

// uniquesLoop flushes the pending sketches every FlushInterval until Close.
func (b *Backend) uniquesLoop() {
	b.periodically(b.uqDone, b.opts.FlushInterval, 30*time.Second, "tiered: unique-count sketch flush failed; will retry", func(ctx context.Context) error {
		err := b.flushUniques(ctx)
		if err != nil {
			b.failed.Add(1)
		}
		return err
	})
}

// maxUnits is the largest n Uniques answers for unit under spec: the
// sketch retention in whole units, at most MaxUniqueDays days or
// MaxUniqueHours hours (as the embedded engine).
func maxUnits(spec *rollup.Spec, unit rollup.Granularity) int {
	w, limit := time.Hour, rollup.MaxUniqueHours
	if unit == rollup.Day {
		w, limit = 24*time.Hour, rollup.MaxUniqueDays
	}
	return int(min(int64(limit), int64(spec.SketchRetention(unit)/w)))
}

// Uniques estimates the distinct items added to the hll counter id in the
// last n units (Hour or Day; the current unit and the n-1 before it), with
// the embedded engine's semantics: ErrNotFound when id's spec keeps no
// sketches of unit, ErrInvalidArgument unless 1 <= n <= the retention in
// units (at most 400 days or 168 hours), ErrWrongKind for a counter of
// another kind. A counter that does not exist counts 0.
func (b *Backend) Uniques(ctx context.Context, id string, unit rollup.Granularity, n int) (*rollup.Estimate, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	su, ok := unitOf(unit)
	if !ok {
		return nil, fmt.Errorf("%w: unique counts are per hour or per day, not per %s", contract.ErrInvalidArgument, unit)
	}
	if n < 1 {
		return nil, fmt.Errorf("%w: last %d %ss: at least 1", contract.ErrInvalidArgument, n, unit)
	}
	v, err := b.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if v.Exists && v.Kind != contract.KindHLL {
		return nil, fmt.Errorf("%w: %q is of kind %s; unique counts need kind hll", contract.ErrWrongKind, id, v.Kind)
	}
	return b.uniques(ctx, id, su, n, v.Exists)
}

// uniques is Uniques once the arguments and kind are checked.
func (b *Backend) uniques(ctx context.Context, id string, su sketchUnit, n int, exists bool) (*rollup.Estimate, error) {
	unit := su.g
	spec, ok, err := b.sketchSpec(ctx, id)
	if err != nil {
		return nil, err
	}
	if !ok || spec.SketchRetention(unit) <= 0 {
		return nil, engine.NoSketches(id, unit, exists)
	}
	if mx := maxUnits(&spec, unit); n > mx {
		return nil, fmt.Errorf("%w: %q: last %d %ss: the %s sketches answer 1..%d", contract.ErrInvalidArgument, id, n, unit, unit, mx)
	}
	now := b.opts.Now().UnixNano()
	last := unit.Bucket(now)
	first := last - int64(n) + 1
	union, merged, err := b.unionSketches(ctx, id, spec.Precision, su, rollup.Decompose(first, last, rollup.Levels(unit)))
	if err != nil {
		return nil, err
	}
	h, err := counter.NewHLLFromRegisters(spec.Precision, union)
	if err != nil {
		return nil, fmt.Errorf("%w: merged sketch: %v", ErrUnavailable, err)
	}
	return &rollup.Estimate{
		Unit: unit, N: n,
		From: time.Unix(0, unit.Start(first)).UTC(), To: time.Unix(0, unit.Start(last+1)).UTC(),
		Value: h.Count(), StdError: h.StdError(), Precision: spec.Precision, Merged: merged,
	}, nil
}

func unitOf(g rollup.Granularity) (sketchUnit, bool) {
	for _, su := range sketchUnits {
		if su.g == g {
			return su, true
		}
	}
	return sketchUnit{}, false
}

// unionSketches returns the register-wise maximum of id's sketches of
// blocks (filling Redis misses from PostgreSQL) and how many of them were
// not empty.
func (b *Backend) unionSketches(ctx context.Context, id string, p uint8, su sketchUnit, blocks []rollup.Block) ([]byte, int, error) {
	keys := make([]string, len(blocks))
	for i, blk := range blocks {
		keys[i] = redisstore.SketchKey(id, p, su.letter, blk.Level, blk.Index)
	}
	vals, err := b.rs.SketchGet(ctx, keys)
	if err != nil {
		return nil, 0, mapErr(err)
	}
	m := 1 << p
	var miss []int
	for i, v := range vals {
		if len(v) != m+1 || v[m] != 1 {
			miss = append(miss, i)
		}
	}
	if len(miss) > 0 {
		if err := b.fillSketches(ctx, id, p, su, blocks, keys, vals, miss); err != nil {
			return nil, 0, err
		}
	}
	union := make([]byte, m)
	merged := 0
	for _, v := range vals {
		regs := v[:m]
		if strings.Count(regs, "\x00") == m {
			continue // empty
		}
		merged++
		maxRegisters(union, regs)
	}
	return union, merged, nil
}

// maxRegisters raises each register of dst to src's when higher, 8 at a
// time: registers are below 64, so in ((a|H)-b)&H (H: 0x80 in every byte)
// no byte borrows from the next and each byte's top bit says a >= b.
func maxRegisters(dst []byte, src string) {
	const h = 0x8080808080808080
	s := unsafe.Slice(unsafe.StringData(src), len(src))
	i := 0
	for ; i+8 <= len(dst); i += 8 {
		a, b := binary.LittleEndian.Uint64(dst[i:]), binary.LittleEndian.Uint64(s[i:])
		ge := ((a | h) - b) & h
		mask := ge >> 7 * 0xff // 0xff in the bytes where a >= b
		binary.LittleEndian.PutUint64(dst[i:], a&mask|b&^mask)
	}
	for ; i < len(dst); i++ {
		dst[i] = max(dst[i], s[i])
	}
}

// fillSketches reads the sketches vals[miss] (missing in Redis, or only
// holding what was added since they were created) from PostgreSQL, merges
// them into Redis and puts the merged values in vals.
func (b *Backend) fillSketches(ctx context.Context, id string, p uint8, su sketchUnit, blocks []rollup.Block, keys, vals []string, miss []int) error {
	if b.uq.hasPending(id) {
		// What PostgreSQL fills a miss from must hold this node's
		// additions (a key created after a loss lacks those before it).
		if err := b.flushUniques(ctx); err != nil {
			return err
		}
	}
	sids := make([]postgres.SketchID, len(miss))
	for j, i := range miss {
		sids[j] = postgres.SketchID{ID: id, Precision: p, Unit: su.letter, Level: blocks[i].Level, Index: blocks[i].Index}
	}
	stored, err := b.pg.Sketches(ctx, sids)
	if err != nil {
		return unavailable(err)
	}
	m := 1 << p
	for j, i := range miss {
		regs := make([]byte, m)
		if enc, ok := stored[sids[j]]; ok {
			var h counter.HLL
			if err := h.UnmarshalBinary(enc); err != nil {
				return fmt.Errorf("%w: stored sketch %v: %v", ErrUnavailable, sids[j], err)
			}
			regs = h.Registers()
		}
		v, err := b.rs.SketchFill(ctx, keys[i], regs, sketchTTL)
		if err != nil {
			return mapErr(err)
		}
		if len(v) != m+1 {
			return fmt.Errorf("%w: sketch %s has %d bytes, want %d", ErrUnavailable, keys[i], len(v), m+1)
		}
		vals[i] = v
	}
	return nil
}
