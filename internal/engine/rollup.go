package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/rollup"
)

// Rollups (docs/time.md): a counter whose namespace (the id up to its first
// ':') or id has a rollup.Spec keeps a *rollup.State in its ext: additive
// counters count their increments in minute/hour/day/month buckets, hll
// counters add their items to per-hour and per-day sketches. The state is
// changed under the entry's lock by the op that changes the counter, and
// written by the flusher in the same batch as the entry (and its
// idempotency record):
//
//	'h' + id                                  -> head: the open chunks and sketches
//	's' + id + 0 + g + be64(chunk)            -> a closed chunk of count buckets
//	'u' + id + 0 + unit + level + be64(index) -> a closed hour/day sketch (level 0)
//	                                             or a union of 2^level of them
//	'R' + key                                 -> a spec set with SetRollup
//
// (ids have no byte below 0x20, so 's'+id+0 is a prefix of no other id's
// keys.) Deleting a counter deletes its rollups: clearLocked sets
// flagRollReset and the next flush deletes the id's key ranges before it
// writes anything newer. Until that flush commits, a new counter of the same
// id ignores stored rollups (State.NoStore).
const (
	prefixRollupHead   byte = 'h'
	prefixRollupChunk  byte = 's'
	prefixRollupSketch byte = 'u'
	prefixRollupSpec   byte = 'R'
)

// rollups is the engine's rollup configuration and flush bookkeeping.
type rollups struct {
	mu      sync.Mutex                              // serialises SetRollup and DeleteRollup
	dynamic map[string]*rollup.Spec                 // set at runtime and stored; guarded by mu
	table   atomic.Pointer[map[string]*rollup.Spec] // effective specs (Config.Rollups overlaid by dynamic); nil: none
	gen     uint64                                  // flush generation; flusher only
	sk      sketchCache
}

// sketchCache keeps the encodings of the sketches recent flushes wrote, by
// key, so that a late update of a closed unit (an event time in the last
// hour, say) merges into the stored sketch without reading it back from
// Pebble each flush, nor look again for the blocks around it that are not
// stored. An entry is exactly what a committed flush wrote, or nil for a
// key a flush found absent (only a flush, which records what it writes,
// can store it): added after the commit, and the whole cache is dropped
// whenever stored sketches change another way (a rollup reset, a purge)
// or a flush fails.
type sketchCache struct {
	mu    sync.Mutex
	m     map[string][]byte
	bytes int
	epoch uint64            // counts clears
	next  map[string][]byte // written by the flush being built (flusher only)
	reset bool              // the flush being built resets a counter's rollups
	start uint64            // the epoch when the flush being built began
}

// sketchCacheMax bounds the cache (bytes of encodings); past it the
// cache starts again empty.
const sketchCacheMax = 32 << 20

func (c *sketchCache) get(key []byte) ([]byte, bool) {
	c.mu.Lock()
	v, ok := c.m[string(key)]
	c.mu.Unlock()
	return v, ok
}

// clear drops every entry (the stored sketches may differ).
func (c *sketchCache) clear() {
	c.mu.Lock()
	c.m, c.bytes = nil, 0
	c.epoch++
	c.mu.Unlock()
}

// begin starts a flush's list of written sketches.
func (c *sketchCache) begin() {
	clear(c.next)
	c.reset = false
	c.mu.Lock()
	c.start = c.epoch
	c.mu.Unlock()
}

// wrote records that the flush being built sets key to val.
func (c *sketchCache) wrote(key, val []byte) {
	if c.next == nil {
		c.next = map[string][]byte{}
	}
	c.next[string(key)] = val
}

// absent records that key is not stored: nothing but a flush, which
// records what it writes, or a reset can store it.
func (c *sketchCache) absent(key []byte) {
	if _, ok := c.next[string(key)]; !ok {
		c.wrote(key, nil)
	}
}

// committed adds what the flush wrote, now on disk, and the keys it found
// absent (a nil encoding).
func (c *sketchCache) committed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer clear(c.next)
	if c.reset || c.epoch != c.start {
		// A reset in this flush, or a purge while it was built: what
		// is stored besides this flush's writes may have changed.
		c.m, c.bytes = nil, 0
		c.epoch++
		if c.epoch != c.start+1 {
			return
		}
	}
	for k, v := range c.next {
		if c.bytes+len(v)+len(k) > sketchCacheMax {
			c.m, c.bytes = nil, 0
		}
		if c.m == nil {
			c.m = map[string][]byte{}
		}
		if old, ok := c.m[k]; ok {
			c.bytes -= len(old) + len(k)
		}
		c.m[k] = v
		c.bytes += len(v) + len(k)
	}
}

// failed forgets everything after a flush whose outcome is unknown.
func (c *sketchCache) failed() {
	clear(c.next)
	c.clear()
}

// errNoRollups is in the message of the ErrNotFound of a counter without
// rollups.
var errNoRollups = errors.New("no rollups configured")

// namespace returns the part of id before its first ':' (all of it if none).
func namespace(id string) string {
	if i := strings.IndexByte(id, ':'); i >= 0 {
		return id[:i]
	}
	return id
}

// rollupSpec returns the spec that applies to id: its own, else its
// namespace's, else nil.
func (e *Engine) rollupSpec(id string) *rollup.Spec {
	t := e.roll.table.Load()
	if t == nil {
		return nil
	}
	if s, ok := (*t)[id]; ok {
		return s
	}
	return (*t)[namespace(id)]
}

// newRollState returns a fresh state for a counter of kind k under spec, or
// nil if spec keeps nothing for k.
func newRollState(spec *rollup.Spec, k contract.Kind) *rollup.State {
	switch {
	case spec == nil:
		return nil
	case k.Additive():
		return rollup.NewState(spec, false)
	case k == contract.KindHLL:
		return rollup.NewState(spec, true)
	}
	return nil
}

// attachRollLocked gives the live entry r of kind k (and id) its rollup
// state if a spec applies. Caller holds r's lock.
func (e *Engine) attachRollLocked(r *ref, id string, k contract.Kind) {
	st := newRollState(e.rollupSpec(id), k)
	if st == nil {
		return
	}
	en := r.e
	st.SetNoStore(en.flags()&(flagRollReset|flagRollResetting) != 0)
	if en.ext() == nil {
		en.setExt(&ext{})
	}
	en.ext().roll = st
}

// detachRollLocked drops r's rollup state and schedules the deletion of its
// stored rollups. Caller holds r's lock.
func (e *Engine) detachRollLocked(r *ref) {
	en := r.e
	en.ext().roll = nil
	if en.ext().state == nil && en.ext().expires == 0 {
		en.setExt(nil)
	}
	en.setFlags(flagRollReset)
	e.markDirtyLocked(r)
}

// markDirtyLocked puts r on the dirty set without a new version. Caller
// holds r's lock.
func (e *Engine) markDirtyLocked(r *ref) {
	if r.e.flags()&flagDirty == 0 {
		r.e.setFlags(flagDirty)
		r.sh.markDirty(r.idx)
	}
}

// ValidateRollupKey checks a rollup key: a namespace or an id (ValidateID's
// rules).
func ValidateRollupKey(key string) error { return contract.ValidateID(key) }

// SetRollup makes spec the rollups of key: a namespace (every counter whose
// id starts with key+":", and the id key itself) or one id, which then
// overrides its namespace. The spec is stored (fsynced) before SetRollup
// returns and applies at once to existing counters: newly kept
// granularities start empty, dropped ones are deleted by the next purge.
func (e *Engine) SetRollup(key string, spec rollup.Spec) error {
	if err := e.checkWrite(); err != nil {
		return err
	}
	if err := ValidateRollupKey(key); err != nil {
		return err
	}
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("%w: %v", contract.ErrInvalidArgument, err)
	}
	b, err := spec.MarshalBinary()
	if err != nil {
		return fmt.Errorf("%w: %v", contract.ErrInvalidArgument, err)
	}
	e.roll.mu.Lock()
	defer e.roll.mu.Unlock()
	if err := e.commitGuarded(func() error { return e.db.Set(rollupSpecKey(key), b, pebble.Sync) }); err != nil {
		return fmt.Errorf("engine: store rollup spec: %w", err)
	}
	e.roll.dynamic[key] = &spec
	e.publishRollupsLocked()
	e.applyRollups(key)
	return nil
}

// DeleteRollup removes the spec SetRollup set for key and reports whether
// there was one. Counters that no spec covers any more lose their rollups,
// in memory and on disk (with the next flush); a spec from Config.Rollups
// for the same key applies again.
func (e *Engine) DeleteRollup(key string) (bool, error) {
	if err := e.checkWrite(); err != nil {
		return false, err
	}
	if err := ValidateRollupKey(key); err != nil {
		return false, err
	}
	e.roll.mu.Lock()
	defer e.roll.mu.Unlock()
	if _, ok := e.roll.dynamic[key]; !ok {
		return false, nil
	}
	if err := e.commitGuarded(func() error { return e.db.Delete(rollupSpecKey(key), pebble.Sync) }); err != nil {
		return false, fmt.Errorf("engine: delete rollup spec: %w", err)
	}
	delete(e.roll.dynamic, key)
	e.publishRollupsLocked()
	e.applyRollups(key)
	return true, nil
}

// Rollup returns the spec in force for key (set at runtime or configured)
// and whether there is one. For a counter id, RollupOf is what applies.
func (e *Engine) Rollup(key string) (rollup.Spec, bool) {
	if t := e.roll.table.Load(); t != nil {
		if s, ok := (*t)[key]; ok {
			return *s, true
		}
	}
	return rollup.Spec{}, false
}

// RollupOf returns the spec that applies to the counter id (its own or its
// namespace's) and whether there is one.
func (e *Engine) RollupOf(id string) (rollup.Spec, bool) {
	if s := e.rollupSpec(id); s != nil {
		return *s, true
	}
	return rollup.Spec{}, false
}

// Rollups returns every spec in force, by key.
func (e *Engine) Rollups() map[string]rollup.Spec {
	out := map[string]rollup.Spec{}
	if t := e.roll.table.Load(); t != nil {
		for k, s := range *t {
			out[k] = *s
		}
	}
	return out
}

// publishRollupsLocked rebuilds the effective table. Caller holds roll.mu.
func (e *Engine) publishRollupsLocked() {
	t := make(map[string]*rollup.Spec, len(e.cfg.Rollups)+len(e.roll.dynamic))
	for k, s := range e.cfg.Rollups {
		t[k] = &s
	}
	maps.Copy(t, e.roll.dynamic)
	if len(t) == 0 {
		e.roll.table.Store(nil)
		return
	}
	e.roll.table.Store(&t)
}

// applyRollups brings the counters that key covers in line with the specs
// in force.
func (e *Engine) applyRollups(key string) {
	for no := range e.shards {
		e.each(no, 0, func(id []byte, r *ref, _ int64) bool {
			if s := string(id); s == key || namespace(s) == key {
				e.reconcileLocked(r, s)
			}
			return true
		})
	}
}

// reconcileLocked attaches, updates or detaches the live entry r's rollup
// state to follow the spec in force for id. Caller holds r's lock.
func (e *Engine) reconcileLocked(r *ref, id string) {
	spec := e.rollupSpec(id)
	var cur *rollup.State
	if r.e.ext() != nil {
		cur = r.e.ext().roll
	}
	switch {
	case cur == nil && spec != nil:
		e.attachRollLocked(r, id, r.e.kind())
		e.markDirtyLocked(r)
	case cur != nil && spec == nil:
		e.detachRollLocked(r)
	case cur != nil && cur.Spec() != spec:
		if !cur.SetSpec(spec) {
			e.detachRollLocked(r)
			return
		}
		e.markDirtyLocked(r)
	}
}

// loadRollupSpecs reads the stored specs; load calls it before the counters.
func (e *Engine) loadRollupSpecs() error {
	e.roll.dynamic = map[string]*rollup.Spec{}
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixRollupSpec}, UpperBound: []byte{prefixRollupSpec + 1}})
	if err != nil {
		return fmt.Errorf("engine: load rollup specs: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		var s rollup.Spec
		if err := s.UnmarshalBinary(it.Value()); err != nil {
			return fmt.Errorf("engine: rollup spec %q: %w", it.Key()[1:], err)
		}
		e.roll.dynamic[string(it.Key()[1:])] = &s
	}
	if err := it.Error(); err != nil {
		return err
	}
	e.roll.mu.Lock()
	e.publishRollupsLocked()
	e.roll.mu.Unlock()
	return nil
}

// loadRollupHeads gives every loaded counter its rollup state: decoded from
// its head, or fresh when a spec applies and nothing was stored yet. A head
// that no spec covers any more is left on disk, unread.
func (e *Engine) loadRollupHeads() error {
	if e.roll.table.Load() == nil {
		return nil
	}
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixRollupHead}, UpperBound: []byte{prefixRollupHead + 1}})
	if err != nil {
		return fmt.Errorf("engine: load rollups: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		id := string(it.Key()[1:])
		h := hashID(id)
		sh := &e.shards[shardOf(h)]
		_, en, _, ok := sh.findLocked(id, h)
		if !ok || en.kind() == contract.KindNone {
			continue
		}
		spec := e.rollupSpec(id)
		if newRollState(spec, en.kind()) == nil {
			continue
		}
		st, err := rollup.UnmarshalHead(spec, en.kind() == contract.KindHLL, it.Value())
		if err != nil {
			return fmt.Errorf("engine: load rollups of %q: %w", id, err)
		}
		if st == nil {
			continue
		}
		if en.ext() == nil {
			en.setExt(&ext{})
		}
		en.ext().roll = st
	}
	if err := it.Error(); err != nil {
		return err
	}
	for no := range e.shards {
		sh := &e.shards[no]
		a := sh.ar.Load()
		for i := 0; i < sh.nslab; i++ {
			en, rp := sh.at(uint32(i))
			id, ok := idOf(a, rp.Load())
			if !ok || en.kind() == contract.KindNone || (en.ext() != nil && en.ext().roll != nil) {
				continue
			}
			r := ref{sh: sh, shardNo: no, idx: uint32(i), e: en}
			e.attachRollLocked(&r, string(id), en.kind())
		}
	}
	return nil
}

// Keys.

func rollupSpecKey(key string) []byte { return append([]byte{prefixRollupSpec}, key...) }

func rollupHeadKey(id string) []byte { return append([]byte{prefixRollupHead}, id...) }

// sortable maps an int64 to a big-endian uint64 that sorts like it.
func appendSortable(b []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(v)^1<<63)
}

func rollupChunkKey(id string, g rollup.Granularity, idx int64) []byte {
	b := make([]byte, 0, len(id)+12)
	b = append(b, prefixRollupChunk)
	b = append(b, id...)
	b = append(b, 0, byte(g))
	return appendSortable(b, idx)
}

func rollupSketchKey(id string, unit rollup.Granularity, level int, idx int64) []byte {
	b := make([]byte, 0, len(id)+13)
	b = append(b, prefixRollupSketch)
	b = append(b, id...)
	b = append(b, 0, byte(unit), byte(level))
	return appendSortable(b, idx)
}

// rollupRange returns the key range of every key of id under prefix.
func rollupRange(prefix byte, id string) (lo, hi []byte) {
	lo = append(append([]byte{prefix}, id...), 0)
	hi = append(append([]byte{prefix}, id...), 1)
	return lo, hi
}

// Flushing.

// rollFlush is what the flusher took from one entry.
type rollFlush struct {
	id     string
	shard  int
	idx    uint32
	idRef  uint32
	reset  bool // delete the id's stored rollups first
	state  bool // data holds the entry's state
	closed bool // data has closed chunks or sketches
	data   rollup.Flush
	// late: the absolute values written for data's late chunks (Chunk.Add),
	// in order, for State.ResolveLate before the commit.
	late [][]int64
}

// takeRollupLocked returns what the flusher must write for the dirty entry
// en, if anything. Caller holds en's lock, the gate and the shard's mutex.
func (e *Engine) takeRollupLocked(en *entry, id []byte, no int, i uint32, idRef uint32, gen uint64) (rollFlush, bool, error) {
	hasState := en.kind() != contract.KindNone && en.ext() != nil && en.ext().roll != nil
	if en.flags()&flagRollReset == 0 && !hasState {
		return rollFlush{}, false, nil
	}
	rf := rollFlush{id: string(id), shard: no, idx: i, idRef: idRef}
	if en.flags()&flagRollReset != 0 {
		rf.reset = true
		en.clearFlags(flagRollReset)
		en.setFlags(flagRollResetting)
	}
	if hasState {
		d, err := en.ext().roll.TakeFlush(gen)
		if err != nil {
			return rf, true, err
		}
		rf.state, rf.data = true, d
		rf.closed = len(d.Chunks)+len(d.Sketches) > 0
	}
	return rf, true, nil
}

// writeRollups adds the rollup writes of rfs to b. It reads stored sketches
// (block unions need their halves), so it runs outside the gate; only the
// flusher writes rollup keys, so what it reads is what it last committed,
// or what this batch already holds.
func (e *Engine) writeRollups(b *pebble.Batch, rfs []rollFlush) error {
	var written map[string]*counter.HLL // sketch keys set in this batch
	var chunks map[string][]int64       // chunk keys set in this batch
	e.roll.sk.begin()
	for k := range rfs {
		rf := &rfs[k]
		if rf.reset {
			e.roll.sk.reset = true
			for _, p := range []byte{prefixRollupChunk, prefixRollupSketch} {
				lo, hi := rollupRange(p, rf.id)
				if err := b.DeleteRange(lo, hi, nil); err != nil {
					return err
				}
			}
			if !rf.state {
				if err := b.Delete(rollupHeadKey(rf.id), nil); err != nil {
					return err
				}
			}
		}
		if !rf.state {
			continue
		}
		if err := b.Set(rollupHeadKey(rf.id), rf.data.Head, nil); err != nil {
			return err
		}
		rf.late = rf.late[:0]
		for _, c := range rf.data.Chunks {
			key := rollupChunkKey(rf.id, c.G, c.Index)
			vals := c.Values
			if c.Add {
				// A late chunk: its deltas on top of what is stored (or
				// was set earlier in this batch).
				base, ok := chunks[string(key)]
				if !ok && !rf.reset {
					var err error
					if base, err = readChunk(e.db, rf.id, c.G, c.Index, key); err != nil {
						return err
					}
				}
				vals = make([]int64, max(len(base), len(c.Values)))
				copy(vals, base)
				for i, x := range c.Values {
					vals[i] = satAdd(vals[i], x)
				}
				rf.late = append(rf.late, vals)
			}
			if err := b.Set(key, rollup.MarshalChunk(vals), nil); err != nil {
				return err
			}
			if chunks == nil {
				chunks = map[string][]int64{}
			}
			chunks[string(key)] = vals
		}
		for _, cs := range rf.data.Sketches {
			read := func(level int, idx int64) (*counter.HLL, error) {
				key := rollupSketchKey(rf.id, cs.Unit, level, idx)
				if h, ok := written[string(key)]; ok {
					return h, nil
				}
				if rf.reset {
					return nil, nil
				}
				if v, ok := e.roll.sk.get(key); ok {
					if v == nil {
						return nil, nil // known not stored
					}
					return decodeSketch(v)
				}
				h, err := readSketch(e.db, key)
				if err == nil && h == nil {
					e.roll.sk.absent(key)
				}
				return h, err
			}
			var ws []rollup.SketchWrite
			var err error
			if cs.Late {
				var base *counter.HLL
				if base, err = read(0, cs.Index); err == nil {
					ws, err = rollup.LateBlockUpdates(cs, base, read)
				}
			} else {
				ws, err = rollup.BlockUpdates(cs, read)
			}
			if err != nil {
				return fmt.Errorf("engine: rollups of %q: %w", rf.id, err)
			}
			for _, w := range ws {
				val, err := w.Sketch.MarshalBinary()
				if err != nil {
					return err
				}
				key := rollupSketchKey(rf.id, cs.Unit, w.Level, w.Index)
				if err := b.Set(key, val, nil); err != nil {
					return err
				}
				e.roll.sk.wrote(key, val)
				if written == nil {
					written = map[string]*counter.HLL{}
				}
				written[string(key)] = w.Sketch
			}
		}
	}
	return nil
}

// resolveLate gives the states of rfs the absolute values of the late
// chunks writeRollups put in flush generation gen's batch, before it is
// committed (State.ResolveLate).
func (e *Engine) resolveLate(rfs []rollFlush, gen uint64) {
	for _, rf := range rfs {
		if len(rf.late) == 0 {
			continue
		}
		r, ok := e.relock(rf)
		if !ok {
			continue
		}
		if x := r.e.ext(); x != nil && x.roll != nil {
			x.roll.ResolveLate(gen, rf.late)
		}
		r.e.unlock()
	}
}

// readChunk reads one stored chunk (nil: none).
func readChunk(db *pebble.DB, id string, g rollup.Granularity, idx int64, key []byte) ([]int64, error) {
	v, closer, err := db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	vals, err := rollup.DecodeChunk(g, idx, v, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: rollups of %q: %v", ErrCorrupt, id, err)
	}
	return vals, nil
}

// satAdd adds without leaving the int64 range, as rollup buckets do.
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

// rollupsCommitted tells the states of rfs that flush generation gen is on
// disk.
func (e *Engine) rollupsCommitted(rfs []rollFlush, gen uint64) {
	for _, rf := range rfs {
		if !rf.reset && !rf.closed {
			continue
		}
		r, ok := e.relock(rf)
		if !ok {
			continue
		}
		en := r.e
		en.clearFlags(flagRollResetting)
		if x := en.ext(); x != nil && x.roll != nil {
			x.roll.Committed(gen)
			if en.flags()&flagRollReset == 0 {
				x.roll.SetNoStore(false)
			}
		}
		en.unlock()
	}
}

// rollupsFailed undoes takeRollupLocked's flag change after a failed flush
// (closed items stay in their states and are written again).
func (e *Engine) rollupsFailed(rfs []rollFlush) {
	for _, rf := range rfs {
		if !rf.reset {
			continue
		}
		if r, ok := e.relock(rf); ok {
			if r.e.flags()&flagRollResetting != 0 {
				r.e.clearFlags(flagRollResetting)
				r.e.setFlags(flagRollReset)
			}
			r.e.unlock()
		}
	}
}

// relock locks rf's entry if it still holds rf's id.
func (e *Engine) relock(rf rollFlush) (ref, bool) {
	sh := &e.shards[rf.shard]
	en := sh.entryAt(rf.idx)
	if en == nil {
		return ref{}, false
	}
	r := ref{sh: sh, shardNo: rf.shard, idx: rf.idx, idRef: rf.idRef, e: en}
	return r, r.lock()
}

func readSketch(db *pebble.DB, key []byte) (*counter.HLL, error) {
	v, closer, err := db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return decodeSketch(v)
}

func decodeSketch(v []byte) (*counter.HLL, error) {
	h := new(counter.HLL)
	if err := h.UnmarshalBinary(v); err != nil {
		return nil, fmt.Errorf("%w: sketch: %v", ErrCorrupt, err)
	}
	return h, nil
}

// Reading.

// rollupStore reads one counter's stored rollups (rollup.Store).
type rollupStore struct {
	db *pebble.DB
	id string
}

func (s rollupStore) Chunks(g rollup.Granularity, from, to int64, fn func(int64, []int64) error) error {
	if from > to || to == math.MaxInt64 {
		return nil
	}
	lo, hi := rollupChunkKey(s.id, g, from), rollupChunkKey(s.id, g, to+1)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	var buf []int64
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		idx := int64(binary.BigEndian.Uint64(k[len(k)-8:]) ^ 1<<63)
		vals, err := rollup.DecodeChunk(g, idx, it.Value(), buf)
		buf = vals
		if err != nil {
			it.Close()
			return fmt.Errorf("%w: rollups of %q: %v", ErrCorrupt, s.id, err)
		}
		if err := fn(idx, vals); err != nil {
			it.Close()
			return err
		}
	}
	return it.Close()
}

func (s rollupStore) Sketch(unit rollup.Granularity, level int, idx int64) (*counter.HLL, error) {
	return readSketch(s.db, rollupSketchKey(s.id, unit, level, idx))
}

// Now returns the engine's time (Config.Clock, or the coarse clock):
// front ends resolve relative times in queries with it.
func (e *Engine) Now() time.Time { return time.Unix(0, e.nowNano()) }

// rollupErr maps rollup and counter errors to the engine's sentinels.
func rollupErr(id string, err error) error {
	switch {
	case errors.Is(err, rollup.ErrInvalid):
		return fmt.Errorf("%w: %q: %v", contract.ErrInvalidArgument, id, err)
	case errors.Is(err, counter.ErrOverflow):
		return fmt.Errorf("%w: %q: %v", contract.ErrOverflow, id, err)
	}
	return err
}

// Series returns the rollup buckets of granularity g of the additive
// counter id over [from, to) (aligned outward to g), summed from the
// coarsest kept granularity at or below g that covers the range. A missing
// counter reads as zeros if a spec covers its id. Errors: ErrNotFound when
// no spec covers id, ErrWrongKind for a counter that is not additive,
// ErrInvalidArgument for a bad range (see rollup.CountsView.Series),
// ErrOverflow when the total leaves the int64 range.
func (e *Engine) Series(id string, g rollup.Granularity, from, to time.Time) (*rollup.Series, error) {
	if err := contract.ValidateID(id); err != nil {
		return nil, err
	}
	now := e.nowNano()
	var v *rollup.CountsView
	if r, ok, _ := e.acquire(id, false); ok {
		var err error
		if e.liveLocked(&r, now) {
			switch x := r.e.ext(); {
			case !r.e.kind().Additive():
				err = fmt.Errorf("%w: %q is of kind %s; series need an additive kind", contract.ErrWrongKind, id, r.e.kind())
			case x != nil && x.roll != nil:
				v = x.roll.CountsView()
			}
		}
		r.e.unlock()
		if err != nil {
			return nil, err
		}
	}
	if v == nil {
		st := newRollState(e.rollupSpec(id), contract.KindCounter)
		if st == nil {
			return nil, fmt.Errorf("%w: %q: %v (count buckets)", contract.ErrNotFound, id, errNoRollups)
		}
		st.SetNoStore(true) // a missing counter has no history
		v = st.CountsView()
	}
	s, err := v.Series(rollupStore{e.db, id}, g, from.UnixNano(), to.UnixNano(), now)
	if err != nil {
		return nil, rollupErr(id, err)
	}
	return s, nil
}

// Uniques estimates the distinct items the hll counter id saw in the last n
// units (rollup.Day or rollup.Hour) including the current one, by merging
// stored sketches. A missing counter reads as 0 if a spec covers its id.
// Errors: ErrNotFound when no spec keeps that unit for id, ErrWrongKind for
// a counter that is not an hll, ErrInvalidArgument for n outside
// 1..retention (at most 400 days or 168 hours).
func (e *Engine) Uniques(id string, unit rollup.Granularity, n int) (*rollup.Estimate, error) {
	if err := contract.ValidateID(id); err != nil {
		return nil, err
	}
	now := e.nowNano()
	var v *rollup.SketchView
	isHLL := false
	if r, ok, _ := e.acquire(id, false); ok {
		var err error
		if e.liveLocked(&r, now) {
			isHLL = r.e.kind() == contract.KindHLL
			switch x := r.e.ext(); {
			case r.e.kind() != contract.KindHLL:
				err = fmt.Errorf("%w: %q is of kind %s; unique counts need kind hll", contract.ErrWrongKind, id, r.e.kind())
			case x != nil && x.roll != nil:
				v, _ = x.roll.SketchView(unit)
			}
		}
		r.e.unlock()
		if err != nil {
			return nil, err
		}
	}
	if v == nil {
		st := newRollState(e.rollupSpec(id), contract.KindHLL)
		var ok bool
		if st != nil {
			st.SetNoStore(true)
			v, ok = st.SketchView(unit)
		}
		if !ok {
			return nil, NoSketches(id, unit, isHLL)
		}
	}
	est, err := v.Uniques(rollupStore{e.db, id}, n, now)
	if err != nil {
		return nil, rollupErr(id, err)
	}
	return est, nil
}

// Purging.

// purgeRollups deletes stored rollups past their retention (and those of
// granularities no longer kept). It deletes the keys it finds one by one
// rather than with range deletions, so that a purge of many counters does
// not leave Pebble with a range tombstone per counter. Deletions of derived
// data: written without fsync, redone after a crash (a State forgets what
// it purged when the node restarts).
func (e *Engine) purgeRollups() error {
	if e.roll.table.Load() == nil {
		return nil
	}
	type item struct {
		id     string
		ranges []rollup.PurgeRange
	}
	var items []item
	for no := range e.shards {
		e.each(no, 0, func(id []byte, r *ref, now int64) bool {
			if x := r.e.ext(); x != nil && x.roll != nil {
				if pr := x.roll.PurgeRanges(now); len(pr) > 0 {
					items = append(items, item{string(id), pr})
				}
			}
			return true
		})
	}
	if len(items) == 0 {
		return nil
	}
	// Stored sketches are deleted: the cache of written ones goes, now
	// and once the deletions are in.
	e.roll.sk.clear()
	defer e.roll.sk.clear()
	b := e.db.NewBatch()
	defer b.Close()
	iter, err := e.db.NewIter(nil)
	if err != nil {
		return err
	}
	defer iter.Close()
	for _, it := range items {
		for _, p := range it.ranges {
			key := func(idx int64) []byte {
				if p.Sketch {
					return rollupSketchKey(it.id, p.G, p.Level, idx)
				}
				return rollupChunkKey(it.id, p.G, idx)
			}
			hi := key(p.To) // p.To is excluded, also when it is math.MaxInt64
			for iter.SeekGE(key(p.From)); iter.Valid() && bytes.Compare(iter.Key(), hi) < 0; iter.Next() {
				if err := b.Delete(iter.Key(), nil); err != nil {
					return err
				}
			}
		}
		if b.Len() > 4<<20 {
			if err := b.Commit(pebble.NoSync); err != nil {
				return err
			}
			b.Reset()
		}
	}
	if err := iter.Error(); err != nil {
		return err
	}
	return b.Commit(pebble.NoSync)
}
