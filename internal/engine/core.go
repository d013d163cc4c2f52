package engine

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"
)

const numStripes = 4096

// stripe is one of the locks that guard entries. Padded to a cache line so
// two hot counters on different stripes do not share one.
type stripe struct {
	mu  sync.Mutex
	ops uint64 // mutations applied under this stripe, guarded by mu
	_   [48]byte
}

func stripeIndex(shardNo int, i uint32) uint32 {
	return (uint32(shardNo)<<24 | i) * 0x9E3779B1 >> 20 // top 12 bits: 0..4095
}

// Engine is one node's counter state: every counter in memory, made durable
// in Pebble by a single flusher goroutine that writes the full state of the
// counters changed since its last pass (group commit: one fsync covers every
// write waiting for it).
//
// Engine is safe for concurrent use. Call Close once when done; Close flushes
// everything to disk.
type Engine struct {
	cfg     Config
	db      *pebble.DB
	shards  [numShards]shard
	stripes [numStripes]stripe
	now     atomic.Int64 // coarse clock in unix ns, when cfg.Clock is nil
	closed  atomic.Bool

	// gate orders idempotent writes against the flusher's snapshot: writes
	// that record an idempotency result hold it shared, the flusher holds it
	// exclusively while it copies state, so a record and the effect it
	// describes always reach disk in the same batch.
	gate sync.RWMutex

	idem idemTable
	fl   flusher

	keys    atomic.Int64 // live counters
	expires atomic.Int64 // live counters with a TTL

	stop chan struct{} // closed when Close starts
	done chan struct{} // closed when Close has flushed
	wg   sync.WaitGroup
	once sync.Once
}

// Open opens (or creates) the engine's data directory and loads every
// counter into memory.
func Open(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, stop: make(chan struct{}), done: make(chan struct{})}
	e.now.Store(time.Now().UnixNano())
	db, err := openPebble(cfg)
	if err != nil {
		return nil, err
	}
	e.db = db
	if err := e.load(); err != nil {
		db.Close()
		return nil, err
	}
	e.idem.init(cfg.IdempotencyMemory)
	e.fl.init()
	if cfg.Clock == nil {
		e.wg.Add(1)
		go e.tickClock()
	}
	e.wg.Add(2)
	go e.flushLoop()
	go e.janitorLoop()
	return e, nil
}

// Close stops background work, flushes every change and closes the store.
// It is safe to call more than once.
func (e *Engine) Close() error {
	var err error
	e.once.Do(func() {
		close(e.stop)
		e.wg.Wait()
		e.closed.Store(true)
		err = e.flushOnce()
		close(e.done)
		if cerr := e.db.Close(); err == nil {
			err = cerr
		}
	})
	return err
}

func (e *Engine) tickClock() {
	defer e.wg.Done()
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case now := <-t.C:
			e.now.Store(now.UnixNano())
		}
	}
}

func (e *Engine) nowNano() int64 {
	if e.cfg.Clock != nil {
		return e.cfg.Clock().UnixNano()
	}
	return e.now.Load()
}

func (e *Engine) durability(wo WriteOptions) Durability {
	if wo.Durability == DurabilityDefault {
		return e.cfg.Durability
	}
	return wo.Durability
}

// ref is a resolved, possibly locked, entry.
type ref struct {
	sh      *shard
	shardNo int
	idx     uint32
	gen     uint32
	e       *entry
	stripe  uint32
}

// lookup finds id without locking its entry. With create it inserts a new
// KindNone entry (put on the dirty list, so the flusher reaps it if nothing
// is ever written to it).
func (e *Engine) lookup(id string, h uint64, create bool) (ref, bool, error) {
	no := shardOf(h)
	sh := &e.shards[no]
	sh.mu.RLock()
	i, ok := sh.findLocked(id, h)
	if ok {
		r := ref{sh: sh, shardNo: no, idx: i, e: sh.entryLocked(i), stripe: stripeIndex(no, i)}
		r.gen = r.e.gen
		sh.mu.RUnlock()
		return r, true, nil
	}
	sh.mu.RUnlock()
	if !create {
		return ref{}, false, nil
	}
	sh.mu.Lock()
	i, ok = sh.findLocked(id, h)
	if !ok {
		i, ok = sh.insertLocked(id, h)
		if !ok {
			sh.mu.Unlock()
			return ref{}, false, fmt.Errorf("%w: shard full", ErrInvalidArgument)
		}
		en := sh.entryLocked(i)
		en.flags |= flagDirty
		sh.markDirty(i)
	}
	r := ref{sh: sh, shardNo: no, idx: i, e: sh.entryLocked(i), stripe: stripeIndex(no, i)}
	r.gen = r.e.gen
	sh.mu.Unlock()
	return r, true, nil
}

// acquire resolves id and locks its stripe. The caller unlocks
// e.stripes[r.stripe].mu. ok is false if the id does not exist and create
// is false.
func (e *Engine) acquire(id string, create bool) (r ref, ok bool, err error) {
	h := hashID(id)
	for {
		r, ok, err = e.lookup(id, h, create)
		if !ok || err != nil {
			return r, ok, err
		}
		e.stripes[r.stripe].mu.Lock()
		if r.e.gen == r.gen {
			return r, true, nil
		}
		// Freed by the flusher between lookup and lock: look again.
		e.stripes[r.stripe].mu.Unlock()
	}
}

// acquireAll resolves ids (creating them when create) and locks their
// stripes in a global order. It returns one ref per id (zero ref for a
// missing id when !create) and the sorted stripes to unlock.
func (e *Engine) acquireAll(ids []string, create bool) ([]ref, []uint32, error) {
	refs := make([]ref, len(ids))
	for {
		stripes := make([]uint32, 0, len(ids))
		for i, id := range ids {
			r, ok, err := e.lookup(id, hashID(id), create)
			if err != nil {
				return nil, nil, err
			}
			if ok {
				refs[i] = r
				stripes = append(stripes, r.stripe)
			} else {
				refs[i] = ref{}
			}
		}
		sort.Slice(stripes, func(a, b int) bool { return stripes[a] < stripes[b] })
		stripes = dedupe(stripes)
		for _, s := range stripes {
			e.stripes[s].mu.Lock()
		}
		valid := true
		for _, r := range refs {
			if r.e != nil && r.e.gen != r.gen {
				valid = false
				break
			}
		}
		if valid {
			return refs, stripes, nil
		}
		e.unlockAll(stripes)
	}
}

func (e *Engine) unlockAll(stripes []uint32) {
	for i := len(stripes) - 1; i >= 0; i-- {
		e.stripes[stripes[i]].mu.Unlock()
	}
}

func dedupe(s []uint32) []uint32 {
	if len(s) < 2 {
		return s
	}
	out := s[:1]
	for _, v := range s[1:] {
		if v != out[len(out)-1] {
			out = append(out, v)
		}
	}
	return out
}

// touch records a mutation of r: new version and time, and the dirty mark.
// Caller holds r's stripe lock.
func (e *Engine) touch(r *ref, now int64) {
	en := r.e
	en.version++
	en.updated = now
	e.stripes[r.stripe].ops++
	if en.flags&flagDirty == 0 {
		en.flags |= flagDirty
		r.sh.markDirty(r.idx)
	}
}

// liveLocked reports whether r holds a counter, expiring it first if its TTL
// has passed. Caller holds r's stripe lock.
func (e *Engine) liveLocked(r *ref, now int64) bool {
	en := r.e
	if en == nil || en.kind == KindNone {
		return false
	}
	if x := en.ext; x != nil && x.expires != 0 && x.expires <= now {
		e.clearLocked(r)
		return false
	}
	return true
}

// clearLocked deletes r's counter (the flusher deletes it on disk and frees
// the slot). Caller holds r's stripe lock.
func (e *Engine) clearLocked(r *ref) {
	en := r.e
	if en.kind != KindNone {
		e.keys.Add(-1)
	}
	if en.ext != nil && en.ext.expires != 0 {
		e.expires.Add(-1)
	}
	en.kind, en.value, en.ext = KindNone, 0, nil
	en.version = 0
	if en.flags&flagDirty == 0 {
		en.flags |= flagDirty
		r.sh.markDirty(r.idx)
	}
}

// setExpiresLocked sets (or with 0 clears) r's expiry. Caller holds r's
// stripe lock and r is live.
func (e *Engine) setExpiresLocked(r *ref, at int64) {
	en := r.e
	had := en.ext != nil && en.ext.expires != 0
	switch {
	case at == 0 && had:
		en.ext.expires = 0
		e.expires.Add(-1)
		if en.ext.state == nil {
			en.ext = nil
		}
	case at != 0:
		if en.ext == nil {
			en.ext = &ext{}
		}
		en.ext.expires = at
		if !had {
			e.expires.Add(1)
			r.sh.trackTTL(r.idx)
		}
	}
}

func (e *Engine) checkOpen() error {
	if e.closed.Load() {
		return ErrClosed
	}
	return nil
}

// Flush makes every change so far durable.
func (e *Engine) Flush(ctx context.Context) error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	return e.waitDurable(ctx)
}
