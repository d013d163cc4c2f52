package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/shed"
)

// flusher writes changed counters to Pebble: on a timer (async durability)
// and as soon as a sync writer waits (group commit). A writer that applied
// its change and then joined cycle c is covered by c, because the flusher
// swaps the cycle out before it copies any state.
type flusher struct {
	mu  sync.Mutex
	cur *cycle // next flush to start; nil until someone waits, guarded by mu

	kick chan struct{} // a sync writer is waiting

	taken []reapItem // the entries a flush took from the dirty sets (flusher only)
	// touched sums what touchWindows read (kept so the reads are not
	// dropped as dead code).
	touched int64
	kv      sortedKV // the counters a flush writes (flusher only)
	// batchSize is the room a flush's batch starts with: the last
	// flush's size and an eighth (flusher only).
	batchSize int

	// The shards' window delta records (deltarec.go; flusher only): as on
	// disk, and as the flush builds them; the shards whose record the
	// flush rewrites; scratch marks of a shard's dirty slab indexes.
	wrec, wnext [numShards]deltaRec
	recShards   []int
	seen        []uint64
	// The windows that may have a 'w' key on disk (deltarec.go; flusher
	// only, and the load): by shard, a bit per slab index; the ids of 'w'
	// keys no loaded window matched; the slab indexes whose 'w' key the
	// flush deletes, their bits cleared once it committed.
	wkeys    [numShards][]uint64
	wOrphans map[string]bool
	wDeleted []reapItem

	// due is when the timer starts the next flush (unix ns): FlushInterval
	// after the end of the last one (NextFlush).
	due atomic.Int64

	flushes   atomic.Uint64
	failures  atomic.Uint64 // failed flushes
	lastFlush atomic.Int64  // unix ns
	lastErr   atomic.Pointer[error]
}

// cycle is one flush; done is closed when it is on disk (or failed).
type cycle struct {
	done chan struct{}
	err  error
}

func (f *flusher) init() {
	f.kick = make(chan struct{}, 1)
}

// next returns the flush that will cover every change applied before the
// call: the cycle the next flush swaps out.
func (f *flusher) next() *cycle {
	f.mu.Lock()
	c := f.cur
	if c == nil {
		c = &cycle{done: make(chan struct{})}
		f.cur = c
	}
	f.mu.Unlock()
	return c
}

// FlushWaiter is implemented by the embedded engine's backend (Local).
type FlushWaiter interface {
	// NextFlush is Engine.NextFlush.
	NextFlush() FlushWait
}

// FlushWait is one of the engine's flushes (Engine.NextFlush).
type FlushWait struct {
	c   *cycle
	due time.Time
}

// NextFlush returns the engine's next flush, which makes every change
// applied before the call durable. Unlike a sync write's wait, it does
// not start that flush: it is the periodic one (FlushInterval after the
// end of the last flush, FlushWait.Due) unless a sync writer, a full
// dirty set or Close starts it sooner. Changes waited for this way cost
// no flush of their own, where each sync wait costs one: a flush writes
// every counter changed since the last, whatever their number of writes
// (tens of thousands of per-user windows for an event consumer).
//
// Done is closed once that flush ended: Err is then nil if it committed
// (the changes are on disk), else its error (a full disk, a failed write:
// the changes stay in memory, and a sync write tells when they are
// durable), or contract.ErrClosed when the engine had closed.
func (e *Engine) NextFlush() FlushWait {
	c := e.fl.next()
	select {
	case <-e.done:
		select {
		case <-c.done:
		default:
			// Made after Close's final flush: none will come.
			c = &cycle{done: make(chan struct{}), err: contract.ErrClosed}
			close(c.done)
		}
	default:
	}
	due := time.Now().Add(e.cfg.FlushInterval) // (before the flusher first set it)
	if d := e.fl.due.Load(); d != 0 {
		due = time.Unix(0, d)
	}
	return FlushWait{c: c, due: due}
}

// Done is closed when the flush ended.
func (w FlushWait) Done() <-chan struct{} { return w.c.done }

// Err is the flush's error once Done is closed: nil when the changes
// applied before NextFlush are on disk.
func (w FlushWait) Err() error {
	select {
	case <-w.c.done:
		return w.c.err
	default:
		return errFlushPending
	}
}

// Due is when the periodic flush was to start as NextFlush returned
// (a sync writer may start it sooner; it ends later by its duration).
func (w FlushWait) Due() time.Time { return w.due }

// Same reports whether w and o are the same flush.
func (w FlushWait) Same(o FlushWait) bool { return w.c == o.c }

var errFlushPending = errors.New("engine: the flush has not ended")

// waitDurable blocks until every change applied before the call is on disk.
// The wait is on I/O, not CPU: the request's admission slot is given to
// the next request meanwhile (shed.IOWait).
func (e *Engine) waitDurable(ctx context.Context) error {
	defer shed.IOWait(ctx).Resume()
	f := &e.fl
	c := f.next()
	select {
	case f.kick <- struct{}{}:
	default:
	}
	stuck := e.disk.stuckChan()
	if e.disk.waiting.Load() > 0 {
		// A flush is stuck waiting for space (disk.go): c runs after it.
		return e.stuckErr()
	}
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	case <-stuck:
		// A write to Pebble failed or waits for space (disk.go): the
		// flush may not end until space returns. The change stays in
		// memory and is flushed then, but it was not made durable now.
		select {
		case <-c.done:
			return c.err
		default:
			return e.stuckErr()
		}
	case <-e.stop:
		// Close runs a final flush after the loop ends, which covers c
		// unless c was created after it.
		select {
		case <-c.done:
			return c.err
		case <-e.done:
			select {
			case <-c.done:
				return c.err
			default:
				return contract.ErrClosed
			}
		}
	}
}

// stuckErr is waitDurable's error when the flush it waits for is stuck on a
// full disk.
func (e *Engine) stuckErr() error {
	err := e.disk.err()
	if err == nil {
		err = fmt.Errorf("%w: a write to the data directory waits for space", contract.ErrInsufficientStorage)
	}
	return fmt.Errorf("%w (the change is kept in memory and flushed when space returns)", err)
}

func (e *Engine) flushLoop() {
	defer e.wg.Done()
	// The timer runs from the end of the last flush, whatever started it:
	// while sync writers (an event consumer's polls) make flushes often,
	// the timer adds none of its own, and an async change still waits at
	// most FlushInterval (the last flush before it was at most that long
	// before the next).
	t := time.NewTimer(e.cfg.FlushInterval)
	defer t.Stop()
	e.fl.due.Store(time.Now().Add(e.cfg.FlushInterval).UnixNano())
	every := e.cfg.DiskCheckInterval
	if every <= 0 {
		every = time.Second
	}
	dt := time.NewTicker(every)
	defer dt.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		case <-e.fl.kick:
		case <-dt.C:
			if e.disk.state.Load() == diskOK {
				e.disk.check() // turn read-only before a write finds the disk full
				continue
			}
			// Read-only: flush what was acknowledged if there is room
			// now, and resume (flushOnce reads the free space).
		}
		if err := e.flushOnce(); err != nil && !errors.Is(err, contract.ErrInsufficientStorage) {
			// (A full disk is logged once, when the node turns read-only.)
			e.cfg.Logger.Error("flush failed", "err", err)
		}
		t.Reset(e.cfg.FlushInterval) // (Go 1.23 timers: no stale tick after Reset)
		e.fl.due.Store(time.Now().Add(e.cfg.FlushInterval).UnixNano())
	}
}

// flushOnce writes every dirty counter and pending idempotency record in one
// Pebble batch with fsync, then frees the slots of deleted counters. Only
// the flush loop and Close call it. A batch the data directory has no room
// for (diskGuard.admitFlush) is not committed: what it took stays dirty in
// memory, and the storage state is read again at every call, so writes
// resume once space returns.
func (e *Engine) flushOnce() error {
	f := &e.fl
	f.mu.Lock()
	c := f.cur
	f.cur = nil
	f.mu.Unlock()
	e.disk.check()
	taken := f.taken[:0]

	// Sized as the last flush's: Pebble keeps no batch buffer above 1 MiB,
	// and one grown from empty copies itself at each doubling.
	b := e.db.NewBatchWithSize(f.batchSize)
	var reap []reapItem
	var buf, vbuf []byte // key and value scratch: Batch.Set copies them
	kv := &f.kv
	kv.reset()
	var rfs []rollFlush // rollups to write, taken with their entries
	var list []uint32   // one shard's dirty slab indexes
	e.roll.gen++
	gen := e.roll.gen

	e.gate.Lock()
	for no := range e.shards {
		sh := &e.shards[no]
		list = sh.takeDirty(list[:0])
		if len(list) == 0 {
			continue
		}
		sh.mu.Lock()
		a := sh.ar.Load()
		f.touched += touchWindows(sh, list)
		rec := &f.wnext[no]
		rec.reset()
		for _, i := range list {
			en, rp := sh.at(i)
			en.lock()
			idRef := rp.Load()
			id, _ := idOf(a, idRef)
			en.clearFlags(flagDirty)
			taken = append(taken, reapItem{no, i, idRef})
			key := append(buf[:0], prefixCounter)
			key = append(key, id...)
			w := windowOf(en)
			switch {
			case en.kind() == contract.KindNone:
				kv.add(key, nil, true)
				key[0] = prefixWindowDelta // (a window's, if it was one)
				kv.add(key, nil, true)
				f.wDeleted = append(f.wDeleted, reapItem{no, i, idRef})
				reap = append(reap, reapItem{no, i, idRef})
			case w != nil && w.DeltaOK():
				// Into the shard's record (deltarec.go).
				vbuf = w.AppendDelta(appendHeader(vbuf[:0], en))
				rec.add(i, idRef, id, vbuf, 0)
			default:
				val, err := encodeEntry(vbuf[:0], en)
				if err != nil {
					en.unlock()
					sh.mu.Unlock()
					e.gate.Unlock()
					b.Close()
					e.rollupsFailed(rfs)
					e.dropBases(taken)
					f.recordsWritten(false, true)
					f.wKeysDeleted(false)
					return e.failCycle(c, fmt.Errorf("engine: encode %q: %w", id, err))
				}
				kv.add(key, val, false)
				vbuf = val
				if w != nil {
					// The whole window: the base of its next deltas,
					// which replace the last base's (and its 'w' key,
					// if it may have one).
					w.MarkBase()
					if f.mayHaveWKey(no, i, id) {
						key[0] = prefixWindowDelta
						kv.add(key, nil, true)
						f.wDeleted = append(f.wDeleted, reapItem{no, i, idRef})
					}
				}
			}
			if rf, ok, err := e.takeRollupLocked(en, id, no, i, idRef, gen); ok {
				rfs = append(rfs, rf)
				if err != nil {
					en.unlock()
					sh.mu.Unlock()
					e.gate.Unlock()
					b.Close()
					e.markAllDirty()
					e.rollupsFailed(rfs)
					f.recordsWritten(false, true)
					f.wKeysDeleted(false)
					return e.failCycle(c, fmt.Errorf("engine: encode rollups of %q: %w", id, err))
				}
			}
			en.unlock()
			buf = key
		}
		f.growSeen(sh.nslab)
		buf = f.carryDeltas(sh, no, list, kv, buf)
		sh.mu.Unlock()
	}
	recs := e.idem.takePending()
	stored := e.idem.takeStored()
	marks := e.marks.take()
	e.gate.Unlock()
	kv.writeSorted(b)

	for _, r := range recs {
		b.Set(idemKey(r.Key), r.encode(), nil)
	}
	err := writeStored(b, stored)
	var mrec markRec
	if err == nil {
		mrec, err = e.marks.write(b, marks)
	}
	if err == nil {
		err = e.writeRollups(b, rfs)
	}
	if err == nil {
		e.resolveLate(rfs, gen)
	}
	refused := false
	if err == nil && !b.Empty() {
		if err = e.disk.admitFlush(uint64(b.Len())); err != nil {
			refused = true
		} else {
			gen := e.disk.faultGen()
			err = b.Commit(pebble.Sync)
			if err == nil {
				// Pebble's Apply returns nil after a Fatalf that
				// recorded a storage fault instead of panicking.
				err = e.disk.faultSince(gen)
			}
		}
	}
	f.batchSize = min(b.Len()+b.Len()/8, maxBatchHint)
	b.Close()
	f.taken = taken[:0]
	f.recordsWritten(err == nil, refused)
	f.wKeysDeleted(err == nil)
	if err != nil {
		// The windows written whole are not bases of the next deltas.
		e.dropBases(taken)
		if refused {
			// Nothing reached Pebble: what was taken is dirty again.
			e.remarkDirty(taken)
		} else {
			// We no longer know what reached disk: write everything next time.
			e.markAllDirty()
		}
		e.idem.requeue(recs)
		e.idem.requeueStored(stored)
		e.marks.requeue(marks)
		e.rollupsFailed(rfs)
		e.roll.sk.failed()
		return e.failCycle(c, fmt.Errorf("engine: flush: %w", err))
	}
	e.roll.sk.committed()
	e.rollupsCommitted(rfs, gen)
	e.marks.committed(mrec)
	e.marks.recycle(marks)
	e.idem.markFlushed(recs)
	f.flushes.Add(1)
	f.lastFlush.Store(time.Now().UnixNano())
	f.lastErr.Store(nil)
	if c != nil {
		close(c.done)
	}
	e.reap(reap)
	return nil
}

func (e *Engine) failCycle(c *cycle, err error) error {
	e.fl.lastErr.Store(&err)
	e.fl.failures.Add(1)
	if c != nil {
		c.err = err
		close(c.done)
	}
	return err
}

// touchWindows reads what the flush reads of the entries list of sh
// (their lock words, ids and windows: counter.Window.Touch) before it
// encodes them, touchGroup entries at a time, one step of each entry
// after the other: the step's loads (the entries, then their ext, then
// their windows, then the windows' slots) do not wait on each other, so
// the cache misses of the group overlap, where encoding each entry in
// turn waits for each of its misses in turn (a consumer keeps tens of
// thousands of per-user windows dirty; one shard's, a few hundred, fit
// in the cache). The group's entries are locked together with tryLock
// (never waiting while holding the others'; an entry it cannot lock is
// left for the encoding to read), since each lock's atomic swap holds
// back the loads after it. Caller holds sh.mu.
func touchWindows(sh *shard, list []uint32) int64 {
	var s int64
	a := sh.ar.Load()
	var ens [touchGroup]*entry
	var refs [touchGroup]uint32
	var xs [touchGroup]*ext
	var ws [touchGroup]*counter.Window
	for len(list) > 0 {
		grp := list[:min(len(list), touchGroup)]
		list = list[len(grp):]
		for k, i := range grp {
			en, rp := sh.at(i)
			ens[k], refs[k] = en, rp.Load()
			s += int64(en.lk.Load())
		}
		for k := range grp {
			if id, ok := idOf(a, refs[k]); ok {
				s += int64(len(id))
			}
		}
		n := 0
		for _, en := range ens[:len(grp)] {
			if en.tryLock() {
				ens[n] = en
				n++
			}
		}
		for k, en := range ens[:n] {
			xs[k] = en.ext()
		}
		nw := 0
		for k := range n {
			if x := xs[k]; x != nil {
				if w, ok := x.state.(*counter.Window); ok {
					ws[nw] = w
					nw++
				}
			}
		}
		s += counter.TouchAll(ws[:nw])
		for _, en := range ens[:n] {
			en.unlock()
		}
	}
	return s
}

// maxBatchHint bounds the room a flush's batch starts with (one that
// wrote everything is not the measure of the next).
const maxBatchHint = 16 << 20

// touchGroup is how many entries touchWindows reads at a time: enough
// misses in flight to keep the memory busy, few enough for the
// processor to have the loads of all of them under way at once.
const touchGroup = 16

// sortedKV collects a flush's counter keys and values to add them to its
// batch in key order: Pebble inserts a batch's keys into its memtable
// (a skiplist) one after the other, and a key just after the previous one
// is found from where that one went, in a few steps, where a key anywhere
// costs a search from the top (the engine's dirty counters come in hash
// order). Each key is there once (an entry is taken once a flush).
type sortedKV struct {
	buf  []byte
	ents []kvEnt
}

type kvEnt struct {
	k, v, end int // key at buf[k:v], value at buf[v:end]
	del       bool
	// p0, p1: the key's first 16 bytes, zero-padded, big endian: keys
	// whose prefixes differ are in the order of their prefixes (a
	// comparison of two integers), others compare in full.
	p0, p1 uint64
}

// keyPrefix returns the first 16 bytes of k, zero-padded, as two
// big-endian integers.
func keyPrefix(k []byte) (uint64, uint64) {
	var p [16]byte
	copy(p[:], k)
	return binary.BigEndian.Uint64(p[:8]), binary.BigEndian.Uint64(p[8:])
}

func (s *sortedKV) reset() {
	if cap(s.buf) > 16<<20 {
		s.buf, s.ents = nil, nil // a flush of everything: not kept
	}
	s.buf, s.ents = s.buf[:0], s.ents[:0]
}

func (s *sortedKV) add(k, v []byte, del bool) {
	e := kvEnt{k: len(s.buf), del: del}
	e.p0, e.p1 = keyPrefix(k)
	s.buf = append(s.buf, k...)
	e.v = len(s.buf)
	s.buf = append(s.buf, v...)
	e.end = len(s.buf)
	s.ents = append(s.ents, e)
}

func (s *sortedKV) Len() int      { return len(s.ents) }
func (s *sortedKV) Swap(i, j int) { s.ents[i], s.ents[j] = s.ents[j], s.ents[i] }
func (s *sortedKV) Less(i, j int) bool {
	x, y := &s.ents[i], &s.ents[j]
	if x.p0 != y.p0 {
		return x.p0 < y.p0
	}
	if x.p1 != y.p1 {
		return x.p1 < y.p1
	}
	return bytes.Compare(s.buf[x.k:x.v], s.buf[y.k:y.v]) < 0
}

// writeSorted adds the pairs to b in key order.
func (s *sortedKV) writeSorted(b *pebble.Batch) {
	sort.Sort(s) // (not slices.SortFunc: its instantiation grows the binary)
	for _, e := range s.ents {
		if e.del {
			b.Delete(s.buf[e.k:e.v], nil)
		} else {
			b.Set(s.buf[e.k:e.v], s.buf[e.v:e.end], nil)
		}
	}
}

type reapItem struct {
	shard int
	idx   uint32
	idRef uint32
}

// reap frees the slots of counters whose deletion is on disk, unless they
// were written again since.
func (e *Engine) reap(items []reapItem) {
	for _, it := range items {
		sh := &e.shards[it.shard]
		sh.mu.Lock()
		r := ref{sh: sh, shardNo: it.shard, idx: it.idx, idRef: it.idRef, e: sh.entryAt(it.idx)}
		if r.lock() {
			if r.e.kind() == contract.KindNone && r.e.flags()&flagDirty == 0 {
				sh.removeLocked(it.idx, hashID(sh.idLocked(it.idx))) // unlocks
			} else {
				r.e.unlock()
			}
		}
		sh.mu.Unlock()
	}
}

// remarkDirty puts the entries a refused flush took back on the dirty set.
func (e *Engine) remarkDirty(items []reapItem) {
	for _, it := range items {
		sh := &e.shards[it.shard]
		sh.mu.Lock()
		en := sh.entryAt(it.idx)
		en.lock()
		if sh.refOf(it.idx) == it.idRef && en.flags()&flagDirty == 0 {
			en.setFlags(flagDirty)
			sh.markDirty(it.idx)
		}
		en.unlock()
		sh.mu.Unlock()
	}
}

// dropBases forgets the stored bases of the windows among items (a flush
// that wrote them whole failed): each is written whole again next time.
func (e *Engine) dropBases(items []reapItem) {
	for _, it := range items {
		sh := &e.shards[it.shard]
		sh.mu.Lock()
		en := sh.entryAt(it.idx)
		en.lock()
		if w := windowOf(en); w != nil && sh.refOf(it.idx) == it.idRef {
			w.DropBase()
		}
		en.unlock()
		sh.mu.Unlock()
	}
}

// windowOf returns en's window, or nil. Caller holds en's lock.
func windowOf(en *entry) *counter.Window {
	if x := en.ext(); x != nil {
		w, _ := x.state.(*counter.Window)
		return w
	}
	return nil
}

// markAllDirty puts every entry on the dirty set, so the next flush writes
// the whole state (after a failed flush, when we no longer know what reached
// disk).
func (e *Engine) markAllDirty() {
	for no := range e.shards {
		sh := &e.shards[no]
		sh.mu.Lock()
		for i := 0; i < sh.nslab; i++ {
			en := sh.entryAt(uint32(i))
			en.lock()
			if w := windowOf(en); w != nil {
				w.DropBase() // written whole next time
			}
			if sh.refOf(uint32(i)) != 0 && en.flags()&(flagDirty|flagLim) == 0 { // limiter entries are never flushed
				en.setFlags(flagDirty)
				sh.markDirty(uint32(i))
			}
			en.unlock()
		}
		sh.mu.Unlock()
	}
}

// janitorLoop expires counters whose TTL passed and purges old idempotency
// records.
func (e *Engine) janitorLoop() {
	defer e.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	purgeEvery := e.cfg.IdempotencyRetention / 24
	if purgeEvery < time.Minute {
		purgeEvery = time.Minute
	}
	lastPurge := time.Now()
	rollEvery := e.cfg.RollupPurgeInterval
	if rollEvery <= 0 {
		rollEvery = 10 * time.Minute
	}
	lastRollPurge := time.Now()
	lastMarks := time.Now()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		}
		e.expireDue()
		if e.disk.state.Load() != diskOK {
			continue // purges write to Pebble: not while it is short of space
		}
		if time.Since(lastMarks) >= markExpireInterval {
			lastMarks = time.Now()
			if err := e.expireMarks(); err != nil {
				e.cfg.Logger.Warn("dedupe mark purge failed", "err", err)
			}
		}
		if time.Since(lastRollPurge) >= rollEvery {
			lastRollPurge = time.Now()
			if err := e.purgeRollups(); err != nil {
				e.cfg.Logger.Warn("rollup purge failed", "err", err)
			}
		}
		if time.Since(lastPurge) >= purgeEvery {
			lastPurge = time.Now()
			if err := e.purgeIdempotency(); err != nil {
				e.cfg.Logger.Warn("idempotency purge failed", "err", err)
			}
		}
	}
}
