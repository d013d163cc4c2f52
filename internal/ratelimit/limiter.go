package ratelimit

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/counterd/counterd/internal/coarse"
	"github.com/counterd/counterd/internal/engine"
)

// Defaults of Config.
const (
	DefaultEvictInterval = 5 * time.Second
	// ClockResolution is the resolution of the default clock.
	ClockResolution = coarse.Resolution
)

// Limits of one check.
const (
	MaxKeyLen = 4096 // bytes; keys are hashed, never stored
	MaxHits   = 64   // limits in one CheckMulti
)

// Config configures a Limiter. The zero value is valid.
type Config struct {
	// Clock returns the current time. Default nil: a coarse monotonic
	// clock (internal/coarse) the Limiter owns, which keeps time.Now off
	// the hot path: at most about a millisecond (ClockResolution) old
	// while checks come often, read from the system clock when they do
	// not, and no ticker waking the process while idle. Tests inject
	// their clock here (time.Now inside a testing/synctest bubble works,
	// and so does the default clock).
	Clock func() time.Time

	// EvictInterval is how often a janitor goroutine frees the state of
	// keys that returned to full capacity. Default 5s
	// (DefaultEvictInterval); negative disables the janitor (Evict frees
	// on demand).
	EvictInterval time.Duration

	// Policies are the initial policies (see Policy and LoadPolicies).
	Policies []Policy

	// KeepKeys keeps each state's key and limit beside it so that
	// ExportEntries can hand the state to another node (cluster mode).
	// Default false: keys are only hashed. It costs memory per state
	// (docs/ratelimit.md, "Memory and speed").
	KeepKeys bool

	// Table is the index the state lives in: in a server, the engine's
	// (engine.Engine.Limiters), so counters and limits share one table.
	// Default nil: a standalone index of the Limiter's own
	// (engine.NewLimiters). One Limiter per table: Len and Evict count
	// and free every limiter entry of it.
	Table *engine.Limiters
}

// Validate reports whether the config is usable.
func (c Config) Validate() error {
	_, err := compilePolicies(c.Policies)
	return err
}

// Hit is one limit of a multi-limit check: Cost units against Limit for
// Key. Cost may be 0: a query that consumes nothing.
type Hit struct {
	Key   string
	Limit Limit
	Cost  int64
}

// Limiter decides rate limits. It is safe for concurrent use. Whoever
// creates it with New must call Close, which stops its goroutines; Close
// is idempotent and checks after it fail with ErrClosed.
type Limiter struct {
	clock func() time.Time // nil: clk
	clk   *coarse.Clock    // when clock is nil
	base  int64            // unix ns at clk's monotonic 0: now is base + clk.Mono()

	tab  *engine.Limiters // Config.Table
	keep bool             // Config.KeepKeys

	pols  atomic.Pointer[policySet]
	polMu sync.Mutex // serialises policy writers

	closed    atomic.Bool
	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// New returns a Limiter. It starts the clock and janitor goroutines.
func New(cfg Config) (*Limiter, error) {
	ps, err := compilePolicies(cfg.Policies)
	if err != nil {
		return nil, err
	}
	l := &Limiter{clock: cfg.Clock, stop: make(chan struct{}), keep: cfg.KeepKeys, tab: cfg.Table}
	if l.tab == nil {
		l.tab = engine.NewLimiters()
	}
	l.pols.Store(ps)
	if l.clock == nil {
		l.clk = coarse.New()
		start := time.Now()
		l.base = start.UnixNano() - l.clk.Mono()
	}
	iv := cfg.EvictInterval
	if iv == 0 {
		iv = DefaultEvictInterval
	}
	if iv > 0 {
		l.wg.Add(1)
		go l.runJanitor(iv)
	}
	return l, nil
}

// Close stops the Limiter's goroutines. It is idempotent.
func (l *Limiter) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		close(l.stop)
		l.wg.Wait()
		if l.clk != nil {
			l.clk.Close()
		}
	})
	return nil
}

func (l *Limiter) runJanitor(iv time.Duration) {
	defer l.wg.Done()
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.Evict()
		}
	}
}

// now is the current time in unix ns.
func (l *Limiter) now() int64 {
	if l.clock != nil {
		return l.clock().UnixNano()
	}
	// Monotonic: never goes backwards, whatever the wall clock does.
	return l.base + l.clk.Mono()
}

// Now returns the Limiter's current time (its clock).
func (l *Limiter) Now() time.Time { return time.Unix(0, l.now()) }

// Evict frees the state of every key that is back to full capacity and
// returns how many entries it freed. The janitor calls it periodically.
func (l *Limiter) Evict() int { return l.tab.EvictLimiters(l.now()) }

// Len returns the number of (key, limit) states held.
func (l *Limiter) Len() int { return l.tab.LenLimiters() }

// freshWords is the state of a new entry.
var freshWords = [3]int64(freshState)

// lockEntry returns the entry of fingerprint (h1, h2), locked, creating
// it with fresh state.
func (l *Limiter) lockEntry(le *engine.LimEntry, h1 uint64, h2 uint32) error {
	if err := l.tab.LockLimiter(le, h1, h2, &freshWords); err != nil {
		return errorf(ErrFull, "%v", err)
	}
	return nil
}

func validateKey(key string) error {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return errorf(ErrInvalidKey, "key must be 1..%d bytes, got %d", MaxKeyLen, len(key))
	}
	return nil
}

func checkCost(sp *spec, lim *Limit, cost int64) error {
	if cost < 0 || cost > sp.capacity() {
		return errorf(ErrInvalidCost, "cost %d out of range 0..%d for %s", cost, sp.capacity(), lim.DisplayName())
	}
	return nil
}

// validateHit checks one hit's key, limit and cost and returns the
// limit's spec.
func validateHit(key string, lim *Limit, cost int64) (spec, error) {
	if err := validateKey(key); err != nil {
		return spec{}, err
	}
	sp, err := lim.spec()
	if err != nil {
		return sp, err
	}
	return sp, checkCost(&sp, lim, cost)
}

// Check applies a hit of cost units (0: a query) on key against lim. It
// is CheckMulti with one limit, without allocating.
func (l *Limiter) Check(key string, lim Limit, cost int64) (Status, error) {
	if l.closed.Load() {
		return Status{}, ErrClosed
	}
	sp, err := validateHit(key, &lim, cost)
	if err != nil {
		return Status{}, err
	}
	h1, h2 := fingerprint(hashKey(key), limitHash(&lim))
	var le engine.LimEntry
	if err := l.lockEntry(&le, h1, h2); err != nil {
		return Status{}, err
	}
	l.remember(&le, key, &lim)
	now := l.now()
	ls := le.State()
	var g *hitLog
	if sp.alg == SlidingLog {
		g = logOf(&le)
	}
	s, next := decideEntry(&sp, &ls, g, now, cost)
	if s.Allowed {
		g = commitEntry(&le, &sp, &ls, g, next, now, cost)
		l.markDirty(&le)
	}
	ls.Exp = entryExpiry(&sp, &ls, g)
	le.SetState(&ls)
	le.Unlock()
	return s, nil
}

// decideEntry decides a hit on a locked entry's state ls; g is its hitLog
// for SlidingLog (nil: no hits yet). It returns the status and, for the
// other algorithms, the state to store if the hit is charged.
func decideEntry(sp *spec, ls *engine.LimState, g *hitLog, now, cost int64) (Status, state) {
	if sp.alg == SlidingLog {
		return sp.decideLog(g, now, cost), state{}
	}
	return sp.decide((*state)(&ls.S), now, cost)
}

// commitEntry charges a hit decideEntry allowed to ls (or the entry's
// hitLog, created on the first charged SlidingLog hit) and returns the
// hitLog.
func commitEntry(le *engine.LimEntry, sp *spec, ls *engine.LimState, g *hitLog, next state, now, cost int64) *hitLog {
	if sp.alg != SlidingLog {
		ls.S = next
	} else if cost > 0 {
		if g == nil {
			g = newLog(le)
		}
		g.push(now, cost)
	}
	return g
}

// entryExpiry is when the entry's state is fresh again.
func entryExpiry(sp *spec, ls *engine.LimState, g *hitLog) int64 {
	if sp.alg == SlidingLog {
		return sp.logExpiry(g)
	}
	return sp.expiry((*state)(&ls.S))
}

// ref is one resolved limit of a check.
type ref struct {
	h1   uint64
	h2   uint32
	le   engine.LimEntry
	ls   engine.LimState // the entry's state, once locked
	sp   spec
	cost int64
	hit  int  // index in the hits
	dup  bool // same entry as the ref before it (after sorting)
	s    Status
	next state
	now  int64
	g    *hitLog // SlidingLog: the entry's log, once looked up
}

func (r *ref) decide(now int64) {
	r.now = now
	if r.sp.alg == SlidingLog && r.g == nil {
		r.g = logOf(&r.le)
	}
	r.s, r.next = decideEntry(&r.sp, &r.ls, r.g, now, r.cost)
}

func (r *ref) commit() { r.g = commitEntry(&r.le, &r.sp, &r.ls, r.g, r.next, r.now, r.cost) }

func (r *ref) expiry() int64 { return entryExpiry(&r.sp, &r.ls, r.g) }

// CheckMulti applies all hits atomically: it consumes from every limit
// only if every limit allows its hit; otherwise it consumes nothing. It
// returns the binding status: when denied, the denied limit with the
// longest RetryAfter; when allowed, the limit with the fewest Remaining
// (and the longest Delay of all). If out is not nil it must have room for
// len(hits) statuses: out[i] is the status of hits[i] on its own (an
// allowed hit of a denied check reports the state it left unchanged).
//
// A (key, limit) pair listed twice is one limit hit with the sum of the
// costs. At most MaxHits hits.
func (l *Limiter) CheckMulti(hits []Hit, out []Status) (Status, error) {
	if l.closed.Load() {
		return Status{}, ErrClosed
	}
	if len(hits) == 0 {
		return Status{}, errorf(ErrInvalidRequest, "no limits to check")
	}
	if len(hits) > MaxHits {
		return Status{}, errorf(ErrTooManyLimits, "%d limits, at most %d", len(hits), MaxHits)
	}
	if out != nil && len(out) < len(hits) {
		return Status{}, errorf(ErrInvalidRequest, "out has room for %d statuses, need %d", len(out), len(hits))
	}
	var buf [8]ref
	refs := buf[:0]
	var kh keyHash
	for i := range hits {
		h := &hits[i]
		sp, err := validateHit(h.Key, &h.Limit, h.Cost)
		if err != nil {
			return Status{}, err
		}
		if i == 0 || h.Key != hits[i-1].Key {
			kh = hashKey(h.Key)
		}
		h1, h2 := fingerprint(kh, limitHash(&h.Limit))
		refs = append(refs, ref{h1: h1, h2: h2, sp: sp, cost: h.Cost, hit: i})
	}
	if err := l.lockAll(hits, refs); err != nil {
		return Status{}, err
	}
	now := l.now()
	allowed := true
	for i := range refs {
		r := &refs[i]
		if r.dup {
			continue
		}
		for j := i + 1; j < len(refs) && refs[j].dup; j++ {
			r.cost += refs[j].cost
		}
		if r.cost > r.sp.capacity() {
			l.unlockAll(refs)
			return Status{}, errorf(ErrInvalidCost, "total cost %d of one limit listed several times is above its capacity %d", r.cost, r.sp.capacity())
		}
		r.decide(now)
		allowed = allowed && r.s.Allowed
	}
	for i := range refs {
		r := &refs[i]
		if r.dup {
			r.s = refs[i-1].s
			continue
		}
		if allowed {
			r.commit()
			l.markDirty(&r.le)
		} else if r.s.Allowed {
			// Report the state this check left unchanged.
			r.cost = 0
			r.decide(now)
		}
		r.ls.Exp = r.expiry()
		r.le.SetState(&r.ls)
	}
	l.unlockAll(refs)
	return combine(refs, out), nil
}

// lockAll resolves every ref to its entry, creating missing ones, and
// locks them in the engine's lock order (LimEntry.Order), so checks that
// share entries never wait for each other in a cycle. Entries freed
// between resolving and locking make it start over. It loads each
// entry's state.
func (l *Limiter) lockAll(hits []Hit, refs []ref) error {
	for {
		for i := range refs {
			r := &refs[i]
			if err := l.tab.ResolveLimiter(&r.le, r.h1, r.h2, &freshWords); err != nil {
				return errorf(ErrFull, "%v", err)
			}
		}
		// Insertion sort: a handful of refs.
		for i := 1; i < len(refs); i++ {
			for j := i; j > 0 && refs[j].le.Order() < refs[j-1].le.Order(); j-- {
				refs[j], refs[j-1] = refs[j-1], refs[j]
			}
		}
		ok := true
		for i := range refs {
			r := &refs[i]
			r.dup = i > 0 && r.le.Order() == refs[i-1].le.Order()
			if r.dup {
				continue
			}
			if !r.le.Lock() {
				l.unlockAll(refs[:i])
				ok = false
				break
			}
			h := &hits[r.hit]
			l.remember(&r.le, h.Key, &h.Limit)
			r.ls = r.le.State()
		}
		if ok {
			return nil
		}
	}
}

func (l *Limiter) unlockAll(refs []ref) {
	for i := range refs {
		if !refs[i].dup {
			refs[i].le.Unlock()
		}
	}
}

// combine fills out (by hit index) and returns the binding status.
func combine(refs []ref, out []Status) Status {
	var b binder
	for i := range refs {
		if out != nil {
			out[refs[i].hit] = refs[i].s
		}
		b.add(refs[i].s)
	}
	return b.result()
}

// binder picks the binding status of several: if any is denied, the
// denied one with the longest RetryAfter; else the one with the fewest
// Remaining (then the longest Reset), with the longest Delay of all. Ties
// are broken on the other fields (binding.go), so the result does not
// depend on the order of the hits.
type binder struct {
	n        int
	minRem   Status
	maxRetry Status
	denied   bool
	delay    time.Duration
}

func (b *binder) add(s Status) {
	if b.n == 0 || fewerRemaining(s, b.minRem) {
		b.minRem = s
	}
	if !s.Allowed && (!b.denied || longerRetry(s, b.maxRetry)) {
		b.maxRetry, b.denied = s, true
	}
	b.delay = max(b.delay, s.Delay)
	b.n++
}

func (b *binder) result() Status {
	if b.denied {
		s := b.maxRetry
		s.Delay = 0
		return s
	}
	s := b.minRem
	s.Delay = b.delay
	return s
}
