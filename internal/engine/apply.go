package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/rollup"
)

// Add adds delta to the additive counter id (creating a KindCounter).
func (e *Engine) Add(ctx context.Context, id string, delta int64, wo contract.WriteOptions) (contract.Result, error) {
	if wo.IdempotencyKey == "" && !e.closed.Load() && e.disk.state.Load() == diskOK {
		var res contract.Result
		if done, err := e.addPlain(id, delta, &res); done {
			if err == nil {
				err = e.finishPlain(ctx, wo)
			}
			if err != nil {
				return contract.Result{}, err
			}
			return res, nil
		}
	}
	return e.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: id, Delta: delta}, wo)
}

// addPlain is the path of the hottest operation, an add to an existing
// plain counter (entry.plainCounter: KindCounter, no TTL, no rollups): one
// lock-free lookup, the entry's lock, the add. It builds no Op and does
// not go through Apply's dispatch. done is false, with nothing changed,
// when id is not such a counter (missing, another kind, a TTL); the
// caller then takes the general path, which decides everything again
// under the lock.
func (e *Engine) addPlain(id string, delta int64, res *contract.Result) (done bool, err error) {
	cell := e.recent.cell()
	sh, i, en, rp, idRef, ok := e.recentFind(cell, id)
	if !ok || e.limits.RedisHashTags {
		// An id found through the hint is valid (recentIDs).
		if err := e.limits.ValidateID(id); err != nil {
			return true, err
		}
	}
	if !ok {
		h := hashID(id)
		no := shardOf(h)
		sh = &e.shards[no]
		if i, en, rp, idRef, ok = sh.findRef(id, h); !ok {
			return false, nil
		}
		cell.Store(uint64(no)<<32 | uint64(i+1))
	}
	if h := en.hotOf(); h != nil && rp.Load() == idRef {
		// A hot counter (hot.go): h was loaded before the id was checked,
		// and an open h proves the entry was not locked (so not reused)
		// since h was hung there, so h is this id's.
		// The add is counted in the hot word (Stats.Ops reads it there).
		if v, ver, ok := hotAdd(h, delta, e.nowNano()); ok {
			*res = contract.Result{ID: id, Kind: contract.KindCounter, Value: v, Version: ver, Changed: true}
			return true, nil
		}
	}
	// Locked without the fold: a counter another add made hot while this
	// one waited takes this add in its word (open: only the lock's
	// holders close it), rather than fold and turn hot again at once.
	contended := false
	if g := hotGuess(i); !en.lk.CompareAndSwap(g, g|lockBit) {
		contended = en.lockSlow(false)
	}
	if rp.Load() != idRef || !en.plainCounter() {
		// Freed and reused since the lookup, or not a plain counter
		// (nothing read or changed: a hot state stays).
		en.unlock()
		return false, nil
	}
	if h := en.hotOf(); h != nil {
		if v, ver, ok := hotAdd(h, delta, e.nowNano()); ok {
			en.unlock()
			*res = contract.Result{ID: id, Kind: contract.KindCounter, Value: v, Version: ver, Changed: true}
			return true, nil
		}
		en.cool() // the add does not fit the word: fold, and add under the lock
	}
	err = e.addPlainLocked(sh, i, en, id, delta, res)
	if err == nil {
		e.ops.inc()
		if contended && !e.noHot {
			en.heat(sh, i, &e.hot)
		}
	}
	en.unlock()
	return true, err
}

// recentIDs remembers, per processor (P), where the id of the last
// addPlain on that P lives: shard<<32 | slab index+1 (0: none). A hot
// counter's adds then skip hashing the id and probing the table; the
// entry's id is still compared with the id asked for, as a probe does,
// and checked again under the entry's lock, so a stale hint (the entry
// freed or reused) only costs the normal lookup. One word per P, read
// and written atomically: no lock, no allocation, nothing a concurrent
// P can tear.
//
// An id the hint finds needs no validation: a hint is stored only for an
// id that passed it, and a slot only takes ids that passed ValidateID
// (every insert after Open validates: Apply's ops, Merge's states), so an
// id equal to the one at a hinted slot is either the id the hint was
// stored for or one inserted since, valid either way. (Limits'
// RedisHashTags rule, which Merge does not apply, is still checked.)
type recentIDs struct {
	cells [64]struct {
		loc atomic.Uint64
		_   [56]byte
	}
}

// cell returns the running P's cell (the P may change right after; the
// cell is only a hint, so that is harmless).
func (r *recentIDs) cell() *atomic.Uint64 {
	p := procPin()
	procUnpin()
	return &r.cells[p&63].loc
}

// recentFind looks id up at the location cell remembers: like
// shard.findRef, without the hash and the table.
func (e *Engine) recentFind(cell *atomic.Uint64, id string) (*shard, uint32, *entry, *atomic.Uint32, uint32, bool) {
	loc := cell.Load()
	if loc == 0 {
		return nil, 0, nil, nil, 0, false
	}
	sh := &e.shards[uint8(loc>>32)]
	i := uint32(loc) - 1
	en, rp := sh.at(i)
	if en == nil {
		return nil, 0, nil, nil, 0, false
	}
	ref := rp.Load()
	if b, ok := idOf(sh.ar.Load(), ref); !ok || string(b) != id {
		return nil, 0, nil, nil, 0, false
	}
	return sh, i, en, rp, ref, true
}

// addPlainLocked adds delta to the plain counter en (slab index i of sh),
// whose lock the caller holds: what INCR on a counter without TTL does.
func (e *Engine) addPlainLocked(sh *shard, i uint32, en *entry, id string, delta int64, res *contract.Result) error {
	v, ok := addInt64(en.value, delta)
	if !ok {
		return overflow(id)
	}
	en.value = v
	en.ver++ // touch, by hand: touch is too big to inline
	en.updated = e.nowNano()
	if en.lk.Load()&flagDirty == 0 || en.ver == 0 {
		touchSlow(sh, i, en)
	}
	*res = contract.Result{ID: id, Kind: contract.KindCounter, Value: v, Version: en.version(), Changed: true}
	return nil
}

// finishPlain ends an addPlain that succeeded (and counted its op): it
// waits for durability as Apply does.
func (e *Engine) finishPlain(ctx context.Context, wo contract.WriteOptions) error {
	if e.durability(wo) == contract.Sync {
		return e.waitDurable(ctx)
	}
	return nil
}

// Apply applies one mutation.
func (e *Engine) Apply(ctx context.Context, op contract.Op, wo contract.WriteOptions) (contract.Result, error) {
	if err := e.checkWrite(); err != nil {
		return contract.Result{}, err
	}
	if wo.IdempotencyKey == "" && op.PlainAdd() {
		var res contract.Result
		if done, err := e.addPlain(op.ID, op.Delta, &res); done {
			if err == nil {
				err = e.finishPlain(ctx, wo)
			}
			if err != nil {
				return contract.Result{}, err
			}
			return res, nil
		}
	}
	if err := op.ValidateDefaulted(&e.limits); err != nil {
		return contract.Result{}, err
	}
	if wo.IdempotencyKey != "" {
		res, err := e.applyIdempotent(ctx, []contract.Op{op}, wo, false)
		if err != nil {
			return contract.Result{}, err
		}
		return res[0], nil
	}
	var res contract.Result
	var err error
	if op.Type == contract.OpPFMerge {
		out := []contract.Result{{}}
		err = e.applyMulti([]contract.Op{op}, out, false)
		res = out[0]
	} else {
		err = e.applySingle(&op, &res)
	}
	if err != nil {
		return contract.Result{}, err
	}
	e.ops.inc()
	if e.durability(wo) == contract.Sync {
		if err := e.waitDurable(ctx); err != nil {
			return contract.Result{}, err
		}
	}
	return res, nil
}

// ApplyBatch applies ops atomically: either every op applies or none does
// (the error names the failing op's index). Locks on every counter involved
// are held together, so no reader sees half a batch.
func (e *Engine) ApplyBatch(ctx context.Context, ops []contract.Op, wo contract.WriteOptions) ([]contract.Result, error) {
	if err := e.checkWrite(); err != nil {
		return nil, err
	}
	if err := contract.ValidateBatch(ops, e.limits); err != nil {
		return nil, err
	}
	if wo.IdempotencyKey != "" {
		return e.applyIdempotent(ctx, ops, wo, true)
	}
	res := make([]contract.Result, len(ops))
	if err := e.applyMulti(ops, res, true); err != nil {
		return nil, err
	}
	if err := e.applied(ctx, len(ops), wo); err != nil {
		return nil, err
	}
	return res, nil
}

// applied counts n ops a write applied and, when the write is sync, waits
// until they are on disk.
func (e *Engine) applied(ctx context.Context, n int, wo contract.WriteOptions) error {
	e.ops.add(n)
	if e.durability(wo) == contract.Sync {
		return e.waitDurable(ctx)
	}
	return nil
}

// creates reports whether op may create its counter.
func creates(op *contract.Op) bool {
	switch op.Type {
	case contract.OpAdd, contract.OpSet, contract.OpPFAdd, contract.OpPFMerge, contract.OpHAdd, contract.OpHSet:
		return true
	}
	return false
}

// applySingle applies an op that touches one counter.
func (e *Engine) applySingle(op *contract.Op, res *contract.Result) error {
	r, ok, err := e.acquire(op.ID, creates(op))
	if err != nil {
		return err
	}
	if !ok {
		*res = contract.Result{ID: op.ID}
		return nil
	}
	en := r.e
	if op.Type == contract.OpAdd && en.plainCounter() && (op.Kind == contract.KindNone || op.Kind == contract.KindCounter) {
		// Fast path for the hottest operation: a plain counter without TTL.
		err := e.addPlainLocked(r.sh, r.idx, en, op.ID, op.Delta, res)
		en.unlock()
		return err
	}
	err = e.applyLocked(&r, op, nil, e.nowNano(), res, true)
	en.unlock()
	return err
}

// applyMulti applies ops atomically under the locks of every id involved.
// In a batch the error of a failing op is a *BatchError naming it.
func (e *Engine) applyMulti(ops []contract.Op, res []contract.Result, batch bool) error {
	return e.applyMultiIn(ops, res, batch, nil)
}

// multiScratch is the working space of applyMulti, kept by a caller that
// applies batch after batch (ApplyMarked, under its lock) so that their
// slices are reused rather than allocated each batch.
type multiScratch struct {
	ids    []string
	pos    []int
	refs   []ref
	keys   []uint64
	keyBuf []uint64 // acquireAllIn's spare for sorting keys
	locked []*entry
	saved  []savedEntry
	undo   []bool // per ref: its entry has an undo record (applyMultiIn)
	wcheck counter.AddCheck
	peeked int64 // a sum of what the peeks read (peek.go), kept so that they read
	// undos keeps the undo records of windows, sketches and rollups
	// from one batch to the next (a consumer's batch records thousands).
	undos undoRecs
	// sink takes every op's result when the caller drops them
	// (applyMultiIn with res nil).
	sink contract.Result
}

// done drops the scratch's references to entries and states.
func (sc *multiScratch) done() {
	clear(sc.ids)
	clear(sc.refs)
	clear(sc.locked)
	clear(sc.saved)
	sc.sink = contract.Result{}
	sc.wcheck = counter.AddCheck{}
}

// applyMultiIn is applyMulti with the working space of sc (nil: new).
// res nil (with sc): the caller drops the results (ApplyMarked), so they
// are not kept, and an add to a window does not sum the window for its.
func (e *Engine) applyMultiIn(ops []contract.Op, res []contract.Result, batch bool, sc *multiScratch) error {
	var undos *undoRecs // nil: the pools
	if sc == nil {
		sc = &multiScratch{}
	} else {
		defer sc.done()
		undos = &sc.undos
	}
	ids := sc.ids[:0]
	pos := slices.Grow(sc.pos[:0], len(ops))[:len(ops)] // index in ids of ops[i].ID
	create, own := false, true
	for i := range ops {
		pos[i] = len(ids)
		ids = append(ids, ops[i].ID)
		ids = append(ids, ops[i].Sources...)
		create = create || creates(&ops[i])
		own = own && len(ops[i].Sources) == 0
	}
	sc.ids, sc.pos = ids, pos
	refs, locked, err := e.acquireAllIn(ids, create, sc)
	if err != nil {
		return err
	}
	defer unlockAll(locked)
	now := e.nowNano()
	// Undo log: a copy of every entry an op may fail on, restored if one
	// does. acquireAllIn left sc.keys in lock order, where the refs to
	// one entry are a run: an entry named by several ops (a consumer
	// batch names a counter once per bucket of its events' times) is
	// checked and copied once. An entry whose ops checkRun proves to
	// succeed (most of a consumer's batch: adds to live counters and
	// windows, pfadds to live sketches) needs no copy: its ops are
	// applied after every other op succeeded (below).
	saved := slices.Grow(sc.saved[:0], len(refs))[:len(refs)]
	clear(saved)
	sc.saved = saved
	undo := slices.Grow(sc.undo[:0], len(refs))[:len(refs)]
	clear(undo)
	sc.undo = undo
	withUndo := 0 // refs with a record
	keys := sc.keys
	check := own && !e.noCheck
	ahead := 0 // the entries of keys before it were peeked at (peek.go)
	for s := 0; s < len(keys); {
		if check && !e.noPeek && s >= ahead {
			ahead = min(s+peekBlock, len(keys))
			sc.peeked += peekAhead(refs, ops, keys[s:ahead], now)
		}
		i := uint32(keys[s])
		en, t := refs[i].e, s+1
		for t < len(keys) && refs[uint32(keys[t])].e == en {
			t++
		}
		// (An op that reads other entries, PFMERGE's sources, is applied
		// in batch order with every entry copied.)
		if !check || !e.checkRun(&refs[i], ops, keys[s:t], now, &sc.wcheck) {
			saved[i] = save(en, undos)
			saved[i].taken = true
			for _, k := range keys[s:t] {
				undo[uint32(k)] = true
			}
			withUndo += t - s
		}
		s = t
	}
	defer endUndo(saved, undos) // before the unlock (deferred calls run last first)
	// The ops on entries with an undo record first, in batch order, then
	// the others: an op's outcome depends on its own entry alone, which
	// its ops reach in batch order either way, so the first op to fail is
	// the one that fails in batch order, and it fails before anything
	// without an undo record has changed.
	if withUndo > 0 {
		if i, err := e.applyPass(ops, refs, pos, res, true, now, sc, false); err != nil {
			if !batch {
				return err
			}
			return &contract.BatchError{Index: i, Err: err}
		}
	}
	if withUndo < len(refs) {
		if i, err := e.applyPass(ops, refs, pos, res, false, now, sc, check && !e.noPeek); err != nil {
			// A bug of checkRun: the batch is half applied and has no
			// record to undo it.
			panic(fmt.Sprintf("engine: op %d of a batch failed after its check passed: %v", i, err))
		}
	}
	return nil
}

// applyPass applies the ops of applyMultiIn whose entry has an undo
// record (withUndo) or those whose entry has none; if one fails it
// restores every entry with a record and returns the op's index and
// error. peek (ops that read no other entry, without withUndo): the
// entries are peeked at ahead (peekChecked).
func (e *Engine) applyPass(ops []contract.Op, refs []ref, pos []int, res []contract.Result, withUndo bool, now int64, sc *multiScratch, peek bool) (int, error) {
	ahead := 0 // with peek: the ops before it were peeked at (peek.go)
	for i := range ops {
		if peek && i >= ahead {
			ahead = peekChecked(refs, ops, i, now, sc)
		}
		p := pos[i]
		if sc.undo[p] != withUndo {
			continue
		}
		r := &refs[p]
		var srcs []ref
		if n := len(ops[i].Sources); n > 0 {
			srcs = refs[p+1 : p+1+n]
		}
		out := &sc.sink
		if res != nil {
			out = &res[i]
		}
		if r.e == nil { // missing and not created: delete/expire/hdel of nothing
			*out = contract.Result{ID: ops[i].ID}
			continue
		}
		if err := e.applyLocked(r, &ops[i], srcs, now, out, res != nil); err != nil {
			for j := range refs {
				if sc.saved[j].taken {
					e.restore(&refs[j], sc.saved[j])
				}
			}
			return i, err
		}
	}
	return 0, nil
}

// checkRun reports whether the ops named by keys (indices into ops in
// their low 32 bits, in batch order), all on the locked entry r and none
// reading another entry, certainly succeed when applied in that order at
// now, so that r needs no undo record. It covers what a consumer's batch
// does to counters that exist (adds to counters and windows, pfadds to
// sketches) by the conditions under which applyAdd and applyPFAdd fail;
// anything else (a counter created or expired, another op or kind) is
// refused, as is an add it cannot prove (counter.AddCheck). It changes
// nothing.
func (e *Engine) checkRun(r *ref, ops []contract.Op, keys []uint64, now int64, wc *counter.AddCheck) bool {
	en := r.e
	k := en.kind()
	x := en.ext()
	if k == contract.KindNone || (x != nil && x.expires != 0 && x.expires <= now) {
		return false // created, or expired by its first op (liveLocked)
	}
	var roll *rollup.State
	if x != nil {
		roll = x.roll
	}
	v := en.value
	var spec counter.WindowSpec
	switch k {
	case contract.KindCounter, contract.KindHLL:
	case contract.KindWindow:
		w := x.state.(*counter.Window)
		w.CheckAdds(wc)
		spec = w.Spec()
	default:
		return false
	}
	for _, key := range keys {
		op := &ops[uint32(key)]
		if op.At != 0 && roll != nil && !roll.Keeps(op.At, now) {
			return false
		}
		switch {
		case op.Type == contract.OpPFAdd && k == contract.KindHLL:
		case op.Type != contract.OpAdd || k == contract.KindHLL || (op.Kind != contract.KindNone && op.Kind != k):
			return false
		case k == contract.KindCounter:
			var ok bool
			if v, ok = addInt64(v, op.Delta); !ok {
				return false
			}
		case op.At == 0: // a window's add at now (addLocked)
			if !wc.Add(time.Unix(0, now), op.Delta, true) {
				return false
			}
		default: // a window's add at event time
			at := min(op.At, now)
			if windowLate(spec, at, now) || !wc.Add(time.Unix(0, at), op.Delta, false) {
				return false
			}
		}
	}
	return true
}

// savedEntry is an undo record: an entry's fields and a deep copy of its
// state, or for a window the record of its writes (counter.WindowUndo:
// the slots an add writes, not a copy of the ring).
type savedEntry struct {
	value, updated int64
	version        uint64
	kind           contract.Kind
	flags          uint32 // the rollup flags
	hasExt         bool
	exp            int64
	state          any
	roll           *rollup.State
	wundo          *counter.WindowUndo // state is the window itself, recording
	hundo          *counter.HLLUndo    // state is the sketch itself, recording
	rundo          *rollup.Undo        // roll is the entry's own, recording
	taken          bool                // the copy of its entry (the first ref to it)
}

func save(en *entry, undos *undoRecs) savedEntry {
	s := savedEntry{value: en.value, updated: en.updated, version: en.version(), kind: en.kind(), flags: en.flags() & rollFlags}
	if en.ext() != nil {
		s.hasExt, s.exp = true, en.ext().expires
		switch st := en.ext().state.(type) {
		case *counter.Window:
			s.state, s.wundo = st, takeUndo(undos.window(), &windowUndos)
			st.BeginUndo(s.wundo)
		case *counter.HLL:
			s.state, s.hundo = st, takeUndo(undos.hll(), &hllUndos)
			st.BeginUndo(s.hundo)
		default:
			s.state = cloneState(st)
		}
		if r := en.ext().roll; r != nil {
			s.roll, s.rundo = r, takeUndo(undos.roll(), &rollUndos)
			r.BeginUndo(s.rundo)
		}
	}
	return s
}

// restore puts back s. The dirty mark stays: the entry is on the dirty set.
func (e *Engine) restore(r *ref, s savedEntry) {
	en := r.e
	wasLive, wasTTL := en.kind() != contract.KindNone, en.ext() != nil && en.ext().expires != 0
	en.value, en.updated = s.value, s.updated
	en.setVersion(s.version)
	en.setKind(s.kind)
	en.clearFlags(rollFlags)
	en.setFlags(s.flags)
	en.setExt(nil)
	if s.wundo != nil {
		s.wundo.Rollback() // the window is as it was, put back below
	}
	if s.hundo != nil {
		s.hundo.Rollback() // the sketch is as it was, put back below
	}
	if s.rundo != nil {
		s.rundo.Rollback() // the rollups are as they were, put back below
	}
	if s.hasExt {
		en.setExt(&ext{expires: s.exp, state: s.state, roll: s.roll})
	}
	isLive, isTTL := en.kind() != contract.KindNone, en.ext() != nil && en.ext().expires != 0
	e.keys.Add(b2i(isLive) - b2i(wasLive))
	if q := e.quotaSet(); q != nil && isLive != wasLive {
		e.quotaAddLocked(q, r, idAtLocked(r), b2i(isLive)-b2i(wasLive))
	}
	e.expires.Add(b2i(isTTL) - b2i(wasTTL))
}

// windowUndos, hllUndos and rollUndos recycle the undo records of
// windows, sketches and rollups.
var (
	windowUndos = sync.Pool{New: func() any { return new(counter.WindowUndo) }}
	hllUndos    = sync.Pool{New: func() any { return new(counter.HLLUndo) }}
	rollUndos   = sync.Pool{New: func() any { return new(rollup.Undo) }}
)

// undoRecs are spare undo records a multiScratch keeps. A nil
// *undoRecs has none: records come from and go back to the pools.
type undoRecs struct {
	w []*counter.WindowUndo
	h []*counter.HLLUndo
	r []*rollup.Undo
}

func (u *undoRecs) window() *[]*counter.WindowUndo {
	if u == nil {
		return nil
	}
	return &u.w
}

func (u *undoRecs) hll() *[]*counter.HLLUndo {
	if u == nil {
		return nil
	}
	return &u.h
}

func (u *undoRecs) roll() *[]*rollup.Undo {
	if u == nil {
		return nil
	}
	return &u.r
}

// takeUndo returns a spare record of free (nil: none), else one of pool.
func takeUndo[T any](free *[]*T, pool *sync.Pool) *T {
	if free != nil {
		if n := len(*free); n > 0 {
			u := (*free)[n-1]
			(*free)[n-1] = nil
			*free = (*free)[:n-1]
			return u
		}
	}
	return pool.Get().(*T)
}

// endUndoRec ends the recording of u (End, a no-op for one rolled back)
// and gives it back to free (nil: to pool).
func endUndoRec[T any, P interface {
	*T
	End()
}](u P, free *[]*T, pool *sync.Pool) {
	if u == nil {
		return
	}
	u.End()
	if free != nil {
		*free = append(*free, (*T)(u))
	} else {
		pool.Put((*T)(u))
	}
}

// endUndo ends the recording of the windows, sketches and rollups of a
// batch (a no-op for one rolled back) and recycles the records, into
// undos (nil: the pools). Caller holds the entries' locks.
func endUndo(saved []savedEntry, undos *undoRecs) {
	for i := range saved {
		endUndoRec(saved[i].wundo, undos.window(), &windowUndos)
		endUndoRec(saved[i].hundo, undos.hll(), &hllUndos)
		endUndoRec(saved[i].rundo, undos.roll(), &rollUndos)
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func cloneState(s any) any {
	switch v := s.(type) {
	case *counter.Sharded:
		return v.Clone()
	case *counter.PN:
		return v.Clone()
	case *counter.HLL:
		return v.Clone()
	case *counter.Window:
		return v.Clone()
	case *counter.Hash:
		b, _ := v.MarshalBinary()
		c := counter.NewHash()
		_ = c.UnmarshalBinary(b)
		return c
	case *counter.Float:
		return v.Clone()
	}
	return s
}

func wrongKind(id string, have contract.Kind, op contract.OpType) error {
	return fmt.Errorf("%w: %q is of kind %s; %s needs %s", contract.ErrWrongKind, id, have, op, op.Needs())
}

func overflow(id string) error {
	return fmt.Errorf("%w: %q", contract.ErrOverflow, id)
}

// mapErr turns a counter package error into the engine's sentinel.
func mapErr(id string, err error) error {
	switch {
	case errors.Is(err, counter.ErrOverflow):
		return overflow(id)
	case errors.Is(err, counter.ErrNotInteger):
		return fmt.Errorf("%w: %q: %v", contract.ErrNotInteger, id, err)
	case errors.Is(err, counter.ErrFloatRange):
		return fmt.Errorf("%w: %q: %v", contract.ErrFloatRange, id, err)
	case errors.Is(err, counter.ErrPrecision), errors.Is(err, counter.ErrInvalid):
		return fmt.Errorf("%w: %q: %v", contract.ErrInvalidArgument, id, err)
	}
	return err
}

// create makes the none entry r a counter of kind k. Caller holds the stripe
// lock and has validated everything the new state needs.
func (e *Engine) create(r *ref, k contract.Kind, op *contract.Op) error {
	en := r.e
	var st any
	switch k {
	case contract.KindSharded:
		n := op.Shards
		if n == 0 {
			n = e.cfg.DefaultShards
		}
		s := counter.NewSharded(n)
		_ = s.SetReplica(e.cfg.NodeID) // Config.Validate: NodeID is not empty
		st = s
	case contract.KindPN:
		st = counter.NewPN()
	case contract.KindWindow:
		spec := op.Window
		if spec == (counter.WindowSpec{}) {
			spec = e.cfg.DefaultWindow
		}
		w, err := counter.NewWindow(spec)
		if err != nil {
			return fmt.Errorf("%w: %v", contract.ErrInvalidArgument, err)
		}
		st = w
	case contract.KindHLL:
		p := op.HLLPrecision
		if p == 0 {
			p = e.cfg.HLLPrecision
		}
		h, err := counter.NewHLL(p)
		if err != nil {
			return fmt.Errorf("%w: %v", contract.ErrInvalidArgument, err)
		}
		st = h
	case contract.KindHash:
		st = counter.NewHash()
	case contract.KindFloat:
		st = &counter.Float{}
	}
	if q := e.quotaSet(); q != nil {
		if err := e.quotaReserveLocked(q, r, op.ID); err != nil {
			return err
		}
	}
	en.setKind(k)
	en.value = 0
	en.setVersion(0)
	if st != nil {
		en.setExt(&ext{state: st})
	}
	e.attachRollLocked(r, op.ID, k)
	e.keys.Add(1)
	return nil
}

// applyLocked applies op to r (and, for PFMERGE, reads srcs) with the
// function of op's type (ops.go). On error the entry is unchanged. Caller
// holds every involved lock. values false: the caller does not read
// res.Value (an add leaves it 0).
func (e *Engine) applyLocked(r *ref, op *contract.Op, srcs []ref, now int64, res *contract.Result, values bool) error {
	live := e.liveLocked(r, now)
	*res = contract.Result{ID: op.ID}
	// A switch, not a table of funcs: an indirect call would move r, op
	// and res to the heap on every write.
	switch op.Type {
	case contract.OpAdd:
		return e.applyAdd(r, op, now, live, res, values)
	case contract.OpSet:
		return e.applySet(r, op, now, live, res)
	case contract.OpDelete:
		return e.applyDelete(r, live, res)
	case contract.OpExpire:
		return e.applyExpire(r, op, now, live, res)
	case contract.OpPFAdd:
		return e.applyPFAdd(r, op, now, live, res)
	case contract.OpPFMerge:
		return e.applyPFMerge(r, op, srcs, now, live, res)
	case contract.OpHAdd:
		return e.applyHAdd(r, op, now, live, res)
	case contract.OpHDel:
		return e.applyHDel(r, op, now, live, res)
	case contract.OpHSet:
		return e.applyHSet(r, op, now, live, res)
	}
	return fmt.Errorf("%w: unknown op type %d", contract.ErrInvalidArgument, op.Type)
}

// expiry is now+ttl; validate bounds ttl by MaxTTL so it cannot overflow.
func expiry(now int64, ttl time.Duration) int64 { return now + int64(ttl) }

// addLocked adds op.Delta to the additive counter r. On error nothing changes.
func (e *Engine) addLocked(r *ref, op *contract.Op, now int64) error {
	en := r.e
	switch en.kind() {
	case contract.KindCounter:
		v, err := counter.AddInt64(en.value, op.Delta)
		if err != nil {
			return overflow(op.ID)
		}
		en.value = v
	case contract.KindSharded:
		s := en.ext().state.(*counter.Sharded)
		i := op.Shard - 1
		if op.Shard == 0 {
			i = rand.IntN(s.Len())
		}
		if err := s.Add(i, op.Delta); err != nil {
			return mapErr(op.ID, err)
		}
		en.value = s.Value()
	case contract.KindPN:
		p := en.ext().state.(*counter.PN)
		if err := p.Add(e.cfg.NodeID, op.Delta); err != nil {
			return mapErr(op.ID, err)
		}
		en.value = p.Value()
	case contract.KindWindow:
		w := en.ext().state.(*counter.Window)
		if op.At == 0 {
			if err := w.Add(time.Unix(0, now), op.Delta); err != nil {
				return mapErr(op.ID, err)
			}
			break
		}
		// Event time: the add counts in At's bucket if that bucket is in
		// the window of now (and of the newest bucket seen). A future At
		// counts now: the window never runs ahead of the clock (its ring
		// would then refuse buckets the window of now still holds).
		at := min(op.At, now)
		spec := w.Spec()
		if windowLate(spec, at, now) {
			return tooLate(op.ID, op.At, "the window "+spec.Span.String())
		}
		ok, err := w.TryAdd(time.Unix(0, at), op.Delta)
		if err != nil {
			return mapErr(op.ID, err)
		}
		if !ok {
			return tooLate(op.ID, op.At, "the window "+spec.Span.String()+" of its newest bucket")
		}
	}
	return nil
}

// windowLate reports whether the bucket of time at (at most now) is
// older than the window of now of a window of spec.
func windowLate(spec counter.WindowSpec, at, now int64) bool {
	g := int64(spec.Granularity)
	return floorDiv(at, g) <= floorDiv(now, g)-int64(spec.Buckets())
}

// floorDiv is a/b rounded toward minus infinity (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// addInt64 is a+b and whether it did not overflow.
func addInt64(a, b int64) (int64, bool) {
	c := a + b
	return c, (c > a) == (b > 0)
}
