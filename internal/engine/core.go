package engine

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble"

	"github.com/counterd/counterd/internal/coarse"
	"github.com/counterd/counterd/internal/contract"
)

// opsCounter counts mutations without a shared hot cache line: each add
// goes to the padded cell of the processor (P) running it, so a hot
// counter's adds on two cores never write the same line here.
type opsCounter struct {
	cells [64]struct {
		n atomic.Uint64
		_ [56]byte
	}
}

func (c *opsCounter) inc() { c.add(1) }

func (c *opsCounter) add(n int) {
	p := procPin()
	procUnpin()
	c.cells[p&63].n.Add(uint64(n))
}

func (c *opsCounter) load() uint64 {
	var n uint64
	for i := range c.cells {
		n += c.cells[i].n.Load()
	}
	return n
}

// Engine is one node's counter state: every counter in memory, made durable
// in Pebble by a single flusher goroutine that writes the full state of the
// counters changed since its last pass (group commit: one fsync covers every
// write waiting for it).
//
// Engine is safe for concurrent use. Call Close once when done; Close flushes
// everything to disk.
type Engine struct {
	cfg    Config
	limits contract.Limits // from cfg: what Apply and ApplyBatch accept
	db     *pebble.DB
	lock   *os.File // the data directory's lock (nil in memory)
	shards [numShards]shard
	ops    opsCounter
	hot    hotSet        // hot counters (hot.go), whose adds Stats.Ops counts
	recent recentIDs     // addPlain's per-P hint of where the last id lives
	clk    *coarse.Clock // the clock when cfg.Clock is nil
	closed atomic.Bool
	noHot  bool // no hot counters (hot.go): tests compare with it
	// noCheck: every entry of an atomic batch gets an undo record
	// (applyMultiIn, checkRun): tests compare with it.
	noCheck bool
	// noPeek: no peeks (peek.go): tests compare with it.
	noPeek bool

	// gate orders idempotent writes against the flusher's snapshot: writes
	// that record an idempotency result hold it shared, the flusher holds it
	// exclusively while it copies state, so a record and the effect it
	// describes always reach disk in the same batch.
	gate sync.RWMutex

	idem  idemTable
	marks markSet // dedupe marks (marks.go)
	fl    flusher
	roll  rollups
	disk  *diskGuard // free space and write errors of the data directory (disk.go)

	keys    atomic.Int64 // live counters
	expires atomic.Int64 // live counters with a TTL
	expMu   sync.Mutex   // serializes expireDue passes

	// quotas are the key counts per quota (quota.go); nil without quotas.
	quotas      atomic.Pointer[quotas]
	quotaReload sync.Mutex                      // serializes SetQuotas
	expireHook  atomic.Pointer[func(id string)] // SetExpireHook

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
	e.limits = contract.Limits{MaxBatch: cfg.MaxBatch, MaxShards: cfg.MaxShards}.WithDefaults()
	if cfg.Clock == nil {
		e.clk = coarse.New()
	}
	if !cfg.InMemory && cfg.FS == nil {
		lock, err := lockDir(cfg.Dir)
		if err != nil {
			e.closeClock()
			return nil, err
		}
		e.lock = lock
	}
	fs, dir := pebbleDir(cfg)
	e.disk = newDiskGuard(fs, dir, cfg.MinFreeDisk, cfg.Logger)
	db, err := openPebble(cfg, e.disk)
	if err != nil {
		e.unlockDir()
		e.closeClock()
		return nil, err
	}
	e.db = db
	if err := e.load(); err != nil {
		db.Close()
		e.unlockDir()
		e.closeClock()
		return nil, err
	}
	if cfg.Quotas != nil {
		e.SetQuotas(cfg.Quotas) // counts the keys just loaded
	}
	// From here a write that finds the disk full waits for space; a node
	// started on a disk below the reserve serves reads, read-only.
	e.disk.opened.Store(true)
	e.disk.check()
	e.idem.init(cfg.IdempotencyMemory)
	e.fl.init()
	for i := range e.shards {
		e.shards[i].kick = e.fl.kick
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
		e.disk.close() // a write waiting for space gives up: the flusher ends
		e.wg.Wait()
		e.closed.Store(true)
		err = e.flushOnce()
		close(e.done)
		if cerr := e.db.Close(); err == nil {
			err = cerr
		}
		e.unlockDir()
		e.closeClock()
	})
	return err
}

// closeClock stops the coarse clock's goroutine; reads after it read the
// system clock.
func (e *Engine) closeClock() {
	if e.clk != nil {
		e.clk.Close()
	}
}

// unlockDir releases the data directory's lock, if held.
func (e *Engine) unlockDir() {
	if e.lock != nil {
		e.lock.Close()
	}
}

// nowNano is the engine's time in unix ns: Config.Clock, or the coarse
// clock (internal/coarse: a load while something keeps it fresh, the
// system clock otherwise).
func (e *Engine) nowNano() int64 {
	if e.clk != nil {
		return e.clk.Now()
	}
	return e.cfg.Clock().UnixNano()
}

// CoarseClock returns the engine's coarse clock, nil when Config.Clock is
// set. A front end whose goroutine reads the monotonic clock anyway (the
// Redis-protocol event loop) drives it (coarse.Clock.Drive), which spares
// the clock its ticker under load.
func (e *Engine) CoarseClock() *coarse.Clock { return e.clk }

func (e *Engine) durability(wo contract.WriteOptions) contract.Durability {
	if wo.Durability == contract.DurabilityDefault {
		return e.cfg.Durability
	}
	return wo.Durability
}

// ref is a resolved entry, locked or not. idRef is the id reference the
// lookup matched; it must still be there once the entry is locked.
type ref struct {
	sh      *shard
	shardNo int
	idx     uint32
	idRef   uint32
	e       *entry
}

// lock locks r's entry and reports whether it still holds r's id; if not,
// the entry is left unlocked and the caller looks the id up again.
func (r *ref) lock() bool {
	r.e.lockAs(hotGuess(r.idx))
	if r.sh.refOf(r.idx) == r.idRef {
		return true
	}
	r.e.unlock()
	return false
}

func (r *ref) order() uint32 { return uint32(r.shardNo)<<24 | r.idx }

// lookup finds id without locking its entry. With create it inserts a new
// KindNone entry (put on the dirty set, so the flusher reaps it if nothing
// is ever written to it).
func (e *Engine) lookup(id string, h uint64, create bool) (ref, bool, error) {
	no := shardOf(h)
	sh := &e.shards[no]
	if i, en, idRef, ok := sh.find(id, h); ok {
		return ref{sh: sh, shardNo: no, idx: i, e: en, idRef: idRef}, true, nil
	}
	// A lock-free miss can be spurious while the shard is reorganised.
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, en, idRef, ok := sh.findLocked(id, h)
	if !ok {
		if !create {
			return ref{}, false, nil
		}
		if i, en, idRef, ok = sh.insertLocked(id, h); !ok {
			return ref{}, false, fmt.Errorf("%w: shard full", contract.ErrInvalidArgument)
		}
		en.lock()
		en.setFlags(flagDirty)
		sh.markDirty(i)
		en.unlock()
	}
	return ref{sh: sh, shardNo: no, idx: i, e: en, idRef: idRef}, true, nil
}

// acquire resolves id and locks its entry; the caller calls r.e.unlock().
// ok is false if the id does not exist and create is false.
func (e *Engine) acquire(id string, create bool) (r ref, ok bool, err error) {
	h := hashID(id)
	for {
		r, ok, err = e.lookup(id, h, create)
		if !ok || err != nil {
			return r, ok, err
		}
		if r.lock() {
			return r, true, nil
		}
		// Freed by the flusher between lookup and lock: look again.
	}
}

// acquireAllIn resolves ids (creating them when create) and locks their
// entries in a global order, with the slices of sc (nil: new ones). It
// returns one ref per id (zero ref for a missing id when !create) and the
// distinct locked refs, for unlockAll.
func (e *Engine) acquireAllIn(ids []string, create bool, sc *multiScratch) ([]ref, []*entry, error) {
	if sc == nil {
		sc = &multiScratch{}
	}
	refs := slices.Grow(sc.refs[:0], len(ids))[:len(ids)]
	sc.refs = refs
	// keys sorts the refs found by lock order: order() in the high 32 bits,
	// the index in refs in the low (a plain integer sort, no closure).
	keys := slices.Grow(sc.keys[:0], len(ids))
	defer func() { sc.keys = keys }()
	var hs [peekBlock]uint64 // the hashes of ids[at:ahead] (peekIDs)
	for {
		keys = keys[:0]
		at, ahead := 0, 0
		for i, id := range ids {
			if i >= ahead {
				at, ahead = i, min(i+peekBlock, len(ids))
				sc.peeked += e.peekIDs(ids[at:ahead], &hs)
			}
			r, ok, err := e.lookup(id, hs[i-at], create)
			if err != nil {
				return nil, nil, err
			}
			refs[i] = ref{}
			if ok {
				refs[i] = r
				keys = append(keys, uint64(r.order())<<32|uint64(i))
			}
		}
		keys, sc.keyBuf = sortLockKeys(keys, sc.keyBuf)
		locked := slices.Grow(sc.locked[:0], len(keys))
		sc.locked = locked
		valid := true
		var prev *ref
		for _, k := range keys {
			r := &refs[uint32(k)]
			if prev != nil && prev.e == r.e {
				if prev.idRef != r.idRef {
					valid = false
					break
				}
				continue
			}
			prev = r
			if !r.lock() {
				valid = false
				break
			}
			locked = append(locked, r.e)
		}
		sc.locked = locked
		if valid {
			return refs, locked, nil
		}
		unlockAll(locked)
	}
}

// sortLockKeys sorts keys (lock order in the high 32 bits, the low 32
// bits increasing along keys, as acquireAllIn appends them) and returns
// them sorted and the other of the two buffers (tmp: a spare, grown if
// needed). A chunk of a consumer names thousands of ids: a least
// significant digit radix sort of the high half, stable, so it leaves
// keys of one lock in their (increasing) order: what a comparison sort
// of the whole keys gives, in four passes over them instead of n log n
// comparisons.
func sortLockKeys(keys, tmp []uint64) (sorted, spare []uint64) {
	if len(keys) < 256 {
		slices.Sort(keys)
		return keys, tmp
	}
	tmp = slices.Grow(tmp[:0], len(keys))[:len(keys)]
	src, dst := keys, tmp
	for shift := 32; shift < 64; shift += 8 {
		var at [256]int
		for _, k := range src {
			at[byte(k>>shift)]++
		}
		if at[byte(src[0]>>shift)] == len(src) {
			continue // one digit for all (a small shard index, the shard of a few)
		}
		n := 0
		for d, c := range at {
			at[d] = n
			n += c
		}
		for _, k := range src {
			d := byte(k >> shift)
			dst[at[d]] = k
			at[d]++
		}
		src, dst = dst, src
	}
	return src, dst
}

func unlockAll(locked []*entry) {
	for i := len(locked) - 1; i >= 0; i-- {
		locked[i].unlock()
	}
}

// touch records a mutation of r: new version and time, and the dirty mark.
// Caller holds r's lock.
func (e *Engine) touch(r *ref, now int64) {
	en := r.e
	en.ver++
	en.updated = now
	if en.flags()&flagDirty == 0 || en.ver == 0 {
		touchSlow(r.sh, r.idx, en)
	}
}

// touchSlow is the rest of touch, once per flush interval: the dirty mark
// (and the version's carry into its high half, once per 2^32 changes).
func touchSlow(sh *shard, i uint32, en *entry) {
	if en.ver == 0 {
		en.carry()
	}
	if en.flags()&flagDirty == 0 {
		en.setFlags(flagDirty)
		sh.markDirty(i)
	}
}

// liveLocked reports whether r holds a counter, expiring it first if its TTL
// has passed. Caller holds r's lock.
func (e *Engine) liveLocked(r *ref, now int64) bool {
	en := r.e
	if en == nil || en.kind() == contract.KindNone {
		return false
	}
	if x := en.ext(); x != nil && x.expires != 0 && x.expires <= now {
		e.expiredLocked(r)
		e.clearLocked(r)
		return false
	}
	return true
}

// clearLocked deletes r's counter (the flusher deletes it on disk and frees
// the slot). Caller holds r's lock.
func (e *Engine) clearLocked(r *ref) {
	en := r.e
	if en.kind() != contract.KindNone {
		e.keys.Add(-1)
		e.quotaGoneLocked(r)
	}
	if x := en.ext(); x != nil {
		if x.expires != 0 {
			e.expires.Add(-1) // its expiry item stays until due (expiry.go)
		}
		if x.roll != nil {
			en.setFlags(flagRollReset) // a deleted counter has no history
		}
	}
	en.setKind(contract.KindNone)
	en.value = 0
	en.setExt(nil)
	en.setVersion(0)
	if en.flags()&flagDirty == 0 {
		en.setFlags(flagDirty)
		r.sh.markDirty(r.idx)
	}
}

// setExpiresLocked sets (or with 0 clears) r's expiry. Caller holds r's
// lock and r is live.
func (e *Engine) setExpiresLocked(r *ref, at int64) {
	en := r.e
	x := en.ext()
	had := x != nil && x.expires != 0
	switch {
	case at == 0 && had:
		x.expires = 0
		e.expires.Add(-1) // its expiry item stays until due (expiry.go)
		if x.state == nil && x.roll == nil {
			en.setExt(nil)
		}
	case at != 0:
		if x == nil {
			x = &ext{}
			en.setExt(x)
		}
		old := x.expires
		x.expires = at
		switch {
		case !had:
			e.expires.Add(1)
			r.sh.exp.push(at, r.idx)
		case expSecond(at) < expSecond(old):
			// Earlier than the item already there: a new one (the old one
			// goes stale). A later expiry (a refresh) keeps the item: the
			// janitor moves it when it comes due (expiry.go).
			r.sh.exp.push(at, r.idx)
		}
	}
}

func (e *Engine) checkOpen() error {
	if e.closed.Load() {
		return contract.ErrClosed
	}
	return nil
}

// checkWrite is checkOpen for a write: it also refuses while the storage
// is not writable (disk.go), before anything is applied.
func (e *Engine) checkWrite() error {
	if e.closed.Load() {
		return contract.ErrClosed
	}
	return e.disk.writable()
}

// Flush makes every change so far durable.
func (e *Engine) Flush(ctx context.Context) error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	return e.waitDurable(ctx)
}
