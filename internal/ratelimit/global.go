package ratelimit

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Global limits (scope global-approx): every node of a cluster decides
// the checks it receives from its own share of the limit and forwards
// nothing on the hot path. The owner of the key (the ring's) keeps a
// ledger of the window: each node's admitted units (a UsageVector, one
// slot per node merged by max like a pn counter's) and the share it
// granted each node. Every Interval each node reports, for every global
// key it holds, its admitted units in the window and its demand (units
// asked for since its last report, admitted or not) to the key's owner,
// which answers with the node's new share of this window and of the next:
//
//	share_i = max(used_i, min(used_i + floor(R * d_i / D), L - sum_{j!=i} share_j))
//	next_i  = min(floor(L * d_i / D), L - sum_{j!=i} next_j)
//
// with R = L - sum_j used_j what is left of the window, d_i the node's
// demand, D the sum of the demands. The owner keeps sum_j share_j <= L (and
// sum_j next_j <= L) at every step, so admissions pass L only while a
// node still uses a share the owner has already shrunk: between the
// node's report and the answer to it. docs/ratelimit.md ("Global limits")
// derives the bound from that: per window at most
// sum over the non-owner nodes of what each admits during one exchange's
// round trip, <= (N-1) * ceil(rate * roundtrip) with rate the highest
// per-node admission rate; the owner exchanges with itself atomically.
//
// Only FixedWindow is supported: the window is the unit in which shares
// are granted and usage is counted.

// Scope is where a cluster decides a limit (Limit.Scope, Policy.Scope).
type Scope uint8

const (
	// ScopeOwner: on the node owning the key, exactly (the default).
	ScopeOwner Scope = iota
	// ScopeGlobalApprox: on every node from its share of the limit,
	// within a stated overshoot (docs/ratelimit.md, "Global limits").
	ScopeGlobalApprox
)

var scopeNames = [...]string{"owner", "global-approx"}

func (s Scope) String() string {
	if int(s) < len(scopeNames) {
		return scopeNames[s]
	}
	return "scope(" + strconv.Itoa(int(s)) + ")"
}

// ParseScope parses "owner" or "global-approx" (empty: owner). The error
// wraps ErrInvalidLimit.
func ParseScope(s string) (Scope, error) {
	if s == "" {
		return ScopeOwner, nil
	}
	for i, n := range scopeNames {
		if n == s {
			return Scope(i), nil
		}
	}
	return 0, errorf(ErrInvalidLimit, "unknown scope %q (owner, global-approx)", s)
}

// UsageVector is the admitted units of one window of a global limit, per
// node: a grow-only slot per node within the window. Merge takes the
// later window, and within one window the larger value of each slot, so
// it is commutative, associative and idempotent, and a stale or repeated
// report never lowers what the owner knows.
type UsageVector struct {
	Window int64
	Used   map[string]int64
}

// Merge merges o into v.
func (v *UsageVector) Merge(o UsageVector) {
	if o.Window < v.Window {
		return
	}
	if o.Window > v.Window {
		v.Window = o.Window
		clear(v.Used)
	}
	for n, u := range o.Used {
		if v.Used == nil {
			v.Used = make(map[string]int64, len(o.Used))
		}
		if u > v.Used[n] {
			v.Used[n] = u
		} else if _, ok := v.Used[n]; !ok {
			v.Used[n] = u
		}
	}
}

// Total is the units admitted in the window by all nodes.
func (v *UsageVector) Total() int64 {
	var t int64
	for _, u := range v.Used {
		t += u
	}
	return t
}

// GlobalReport is what a node tells a key's owner every interval.
type GlobalReport struct {
	Key    string
	Limit  Limit
	Window int64 // the window index (unix ns / Period) of Used
	Used   int64 // units the node admitted in Window
	Demand int64 // units asked for since the node's last report
}

// GlobalShare is the owner's answer: the node's share of Window and of
// the windows after it.
type GlobalShare struct {
	Key    string
	Limit  Limit
	Window int64
	Share  int64 // the most units the node may admit in Window
	Next   int64 // its share of later windows, until the next answer
}

// GlobalPeers is how a Global reaches the owners of its keys.
type GlobalPeers interface {
	// Owner reports whether this node owns key, or the peer that does
	// ("" if none is known).
	Owner(key string) (self bool, peer string)
	// Exchange sends reports to peer and returns the peer's answers.
	Exchange(ctx context.Context, peer string, reps []GlobalReport) ([]GlobalShare, error)
	// Nodes is the number of nodes in the cluster.
	Nodes() int
}

// DefaultGlobalInterval is how often nodes exchange usage and shares.
const DefaultGlobalInterval = 100 * time.Millisecond

// GlobalConfig configures NewGlobal.
type GlobalConfig struct {
	// Self is this node's id (its slot in the owners' ledgers). Required.
	Self string
	// Interval between exchanges; default DefaultGlobalInterval. An
	// exchange may take up to 10 intervals (then it fails); a node the
	// owner has not heard from for 20 intervals loses the unused part of
	// its share.
	Interval time.Duration
	// Peers reaches the owners. Nil: every key is this node's (one node).
	Peers GlobalPeers
	// Clock, default time.Now.
	Clock func() time.Time
}

// GlobalStats counts a Global's work.
type GlobalStats struct {
	Allowed, Denied uint64
	Exchanges       uint64 // successful exchanges with an owner (remote or self)
	ExchangeErrors  uint64
	ColdFetches     uint64        // first checks of a key on this node that asked its owner for a share
	MaxRoundTrip    time.Duration // longest remote exchange so far
}

// Global decides global-approx limits on this node (see the file
// comment) and keeps the ledgers of the keys this node owns.
type Global struct {
	self     string
	interval int64
	peers    GlobalPeers
	clock    func() time.Time

	mu   sync.RWMutex
	ents map[globalKey]*globalEntry

	lmu     sync.Mutex
	ledgers map[globalKey]*ledger

	allowed, denied, exchanges, exchangeErrs, cold atomic.Uint64
	maxRTT                                         atomic.Int64
}

type globalKey struct {
	key string
	lim Limit
}

// globalEntry is this node's state of one global key.
type globalEntry struct {
	once   sync.Once // the first share (coldFetch)
	mu     sync.Mutex
	w      int64 // window of used and share
	used   int64
	share  int64
	next   int64
	demand int64 // units asked for since the last report
	last   int64 // unix ns of the last check
}

// idle reports whether e saw no demand since its last report and no check
// for two periods: its key is forgotten. Called under e.mu.
func (e *globalEntry) idle(now int64, period time.Duration) bool {
	return e.demand == 0 && now-e.last > 2*int64(period)
}

// report is e's usage report for k. Called under e.mu.
func (e *globalEntry) report(k globalKey) GlobalReport {
	return GlobalReport{Key: k.key, Limit: k.lim, Window: e.w, Used: e.used, Demand: e.demand}
}

// ledgerSlot is one node's grant in an owner's ledger.
type ledgerSlot struct {
	share, next, demand int64
	seen                int64 // unix ns of its last report
}

type ledger struct {
	usage UsageVector
	slots map[string]*ledgerSlot
	seen  int64
}

// NewGlobal returns a Global.
func NewGlobal(cfg GlobalConfig) (*Global, error) {
	if cfg.Self == "" {
		return nil, errorf(ErrInvalidRequest, "NewGlobal: Self is required")
	}
	g := &Global{self: cfg.Self, interval: int64(cfg.Interval), peers: cfg.Peers, clock: cfg.Clock,
		ents: map[globalKey]*globalEntry{}, ledgers: map[globalKey]*ledger{}}
	if g.interval <= 0 {
		g.interval = int64(DefaultGlobalInterval)
	}
	if g.clock == nil {
		g.clock = time.Now
	}
	return g, nil
}

// Interval is the time between exchanges.
func (g *Global) Interval() time.Duration { return time.Duration(g.interval) }

// Stats returns the counts so far.
func (g *Global) Stats() GlobalStats {
	return GlobalStats{Allowed: g.allowed.Load(), Denied: g.denied.Load(), Exchanges: g.exchanges.Load(),
		ExchangeErrors: g.exchangeErrs.Load(), ColdFetches: g.cold.Load(), MaxRoundTrip: time.Duration(g.maxRTT.Load())}
}

func (g *Global) now() int64 { return g.clock().UnixNano() }

func (g *Global) entry(key string, lim *Limit) *globalEntry {
	k := globalKey{key, *lim}
	g.mu.RLock()
	e := g.ents[k]
	g.mu.RUnlock()
	if e != nil {
		return e
	}
	g.mu.Lock()
	if e = g.ents[k]; e == nil {
		e = &globalEntry{w: freshWindow}
		k.key = strings.Clone(key) // key may alias a connection's buffer
		g.ents[k] = e
	}
	g.mu.Unlock()
	return e
}

// roll moves e to window w: nothing admitted yet, the share granted for
// later windows. The owner's ledger rolls the same way.
func (e *globalEntry) roll(w int64) {
	if w > e.w {
		e.w, e.used, e.share = w, 0, e.next
	}
}

// CheckMultiContext checks hits, all of scope global-approx, atomically
// against this node's shares. The first check of a key on this node asks
// the key's owner for a share (once); every other check is decided here.
// Status.Remaining is what is left of this node's share.
func (g *Global) CheckMultiContext(ctx context.Context, hits []Hit, out []Status) (Status, error) {
	if len(hits) == 1 && out == nil { // the common case, without allocating
		h := &hits[0]
		if _, err := validateHit(h.Key, &h.Limit, h.Cost); err != nil {
			return Status{}, err
		}
		if h.Limit.Scope != ScopeGlobalApprox {
			return Status{}, errorf(ErrInvalidRequest, "limit %s is not global-approx", h.Limit.DisplayName())
		}
		e := g.entry(h.Key, &h.Limit)
		e.once.Do(func() { g.coldFetch(ctx, h.Key, h.Limit, e) })
		e.mu.Lock()
		var s Status
		g.decide(e, &h.Limit, h.Cost, g.now(), true, &s)
		e.mu.Unlock()
		g.count(s.Allowed)
		return s, nil
	}
	distinct, index, err := PrepareHits(hits, out)
	if err != nil {
		return Status{}, err
	}
	ents := make([]*globalEntry, len(distinct))
	order := make([]int, len(distinct))
	for i := range distinct {
		h := &distinct[i]
		if h.Limit.Scope != ScopeGlobalApprox {
			return Status{}, errorf(ErrInvalidRequest, "limit %s is not global-approx", h.Limit.DisplayName())
		}
		e := g.entry(h.Key, &h.Limit)
		e.once.Do(func() { g.coldFetch(ctx, h.Key, h.Limit, e) })
		ents[i], order[i] = e, i
	}
	// Lock in one global order: key, then limit identity (insertion
	// sort: a handful of hits).
	less := func(a, b int) bool {
		if distinct[a].Key != distinct[b].Key {
			return distinct[a].Key < distinct[b].Key
		}
		return distinct[a].Limit.ID() < distinct[b].Limit.ID()
	}
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && less(order[j], order[j-1]); j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	for _, i := range order {
		ents[i].mu.Lock()
	}
	now := g.now()
	sts := make([]Status, len(distinct))
	allowed := true
	for i := range distinct {
		g.decide(ents[i], &distinct[i].Limit, distinct[i].Cost, now, false, &sts[i])
		allowed = allowed && sts[i].Allowed
	}
	for i := range distinct {
		e, c := ents[i], distinct[i].Cost
		if allowed {
			e.used += c
			sts[i].Remaining = max(e.share-e.used, 0)
		} else if sts[i].Allowed {
			sts[i].Remaining = max(e.share-e.used, 0) // left unchanged
		}
	}
	for _, i := range order {
		ents[i].mu.Unlock()
	}
	if out != nil {
		for i, j := range index {
			out[i] = sts[j]
		}
	}
	g.count(allowed)
	return Binding(sts), nil
}

func (g *Global) count(allowed bool) {
	if allowed {
		g.allowed.Add(1)
	} else {
		g.denied.Add(1)
	}
}

// decide evaluates cost units against e's share at now (e locked),
// committing them if commit and allowed.
func (g *Global) decide(e *globalEntry, lim *Limit, cost, now int64, commit bool, s *Status) {
	p := int64(lim.Period)
	w := floorDiv(now, p)
	e.roll(w)
	need := max(cost, 1)
	e.demand += need
	e.last = now
	room := e.share - e.used
	*s = Status{Limit: lim.Limit}
	if need <= room {
		s.Allowed = true
		if commit {
			e.used += cost
			room -= cost
		}
	} else {
		s.RetryAfter = time.Duration((w+1)*p - now)
	}
	s.Remaining = max(room, 0)
	if e.used > 0 {
		s.Reset = time.Duration((w+1)*p - now)
	}
}

// coldFetch asks the owner of key for this node's first share. If the
// owner cannot be reached the node takes 1/N of the limit for the
// current window (docs/ratelimit.md states what that adds).
func (g *Global) coldFetch(ctx context.Context, key string, lim Limit, e *globalEntry) {
	g.cold.Add(1)
	now := g.now()
	rep := GlobalReport{Key: key, Limit: lim, Window: floorDiv(now, int64(lim.Period)), Demand: 1}
	if g.peers == nil {
		g.applyOne(g.serveOne(now, g.self, &rep), now)
		return
	}
	self, peer := g.peers.Owner(key)
	if self {
		g.applyOne(g.serveOne(now, g.self, &rep), now)
		return
	}
	if peer != "" {
		ctx, cancel := context.WithTimeout(ctx, g.exchangeTimeout())
		start := time.Now()
		shares, err := g.peers.Exchange(ctx, peer, []GlobalReport{rep})
		cancel()
		if err == nil {
			g.noteRTT(time.Since(start))
			g.exchanges.Add(1)
			g.Apply(shares)
			return
		}
		g.exchangeErrs.Add(1)
	}
	n := int64(max(g.peers.Nodes(), 1))
	e.mu.Lock()
	e.roll(rep.Window)
	if e.w == rep.Window && e.share == 0 {
		e.share = lim.Limit / n
	}
	e.mu.Unlock()
}

// exchangeTimeout bounds one exchange. A node has at most one exchange
// per owner in flight (the next round starts when this one ends), which
// the overshoot bound relies on, so it may be generous.
func (g *Global) exchangeTimeout() time.Duration { return 10 * time.Duration(g.interval) }

func (g *Global) noteRTT(d time.Duration) {
	for {
		old := g.maxRTT.Load()
		if int64(d) <= old || g.maxRTT.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

// Apply installs an owner's answers.
func (g *Global) Apply(shares []GlobalShare) {
	now := g.now()
	for i := range shares {
		g.applyOne(shares[i], now)
	}
}

func (g *Global) applyOne(s GlobalShare, now int64) {
	g.mu.RLock()
	e := g.ents[globalKey{s.Key, s.Limit}]
	g.mu.RUnlock()
	if e == nil {
		return
	}
	e.mu.Lock()
	e.applyLocked(&s, now)
	e.mu.Unlock()
}

func (e *globalEntry) applyLocked(s *GlobalShare, now int64) {
	e.roll(floorDiv(now, int64(s.Limit.Period)))
	switch {
	case s.Window == e.w:
		e.share, e.next = s.Share, s.Next
	case s.Window < e.w: // the owner's ledger of e.w starts from Next
		e.share, e.next = s.Next, s.Next
	default: // this node's clock is behind the owner's
		e.next = s.Share
	}
}

// Reports returns this node's report of every global key it holds whose
// owner is not this node (owned tells), and resets their demand. Keys
// idle for two periods are forgotten.
func (g *Global) Reports(owned func(key string) bool) []GlobalReport {
	now := g.now()
	var out []GlobalReport
	var idle []globalKey
	g.mu.RLock()
	for k, e := range g.ents {
		if owned != nil && owned(k.key) {
			continue
		}
		e.mu.Lock()
		e.roll(floorDiv(now, int64(k.lim.Period)))
		if e.idle(now, k.lim.Period) {
			idle = append(idle, k)
		} else {
			out = append(out, e.report(k))
			e.demand = 0
		}
		e.mu.Unlock()
	}
	g.mu.RUnlock()
	g.forget(idle, now)
	return out
}

func (g *Global) forget(idle []globalKey, now int64) {
	if len(idle) == 0 {
		return
	}
	g.mu.Lock()
	for _, k := range idle {
		if e := g.ents[k]; e != nil {
			e.mu.Lock()
			if e.idle(now, k.lim.Period) {
				delete(g.ents, k)
			}
			e.mu.Unlock()
		}
	}
	g.mu.Unlock()
}

// ExchangeSelf reports the keys this node owns to its own ledger and
// installs the answers, each under its entry's lock, so that this node
// never admits on a share its ledger has shrunk.
func (g *Global) ExchangeSelf(owned func(key string) bool) {
	now := g.now()
	var idle []globalKey
	g.mu.RLock()
	for k, e := range g.ents {
		if owned != nil && !owned(k.key) {
			continue
		}
		e.mu.Lock()
		e.roll(floorDiv(now, int64(k.lim.Period)))
		if e.idle(now, k.lim.Period) {
			idle = append(idle, k)
		} else {
			rep := e.report(k)
			e.demand = 0
			s := g.serveOne(now, g.self, &rep)
			e.applyLocked(&s, now)
		}
		e.mu.Unlock()
	}
	g.mu.RUnlock()
	g.exchanges.Add(1)
	g.forget(idle, now)
}

// Exchange runs one round: the keys this node owns with its own ledger,
// the others' reports to their owners (in parallel, each within
// 10 Intervals), and installs the answers. It also forgets the ledgers
// nobody reported to for two periods.
func (g *Global) Exchange(ctx context.Context) error {
	if g.peers == nil {
		g.ExchangeSelf(nil)
		g.sweep()
		return nil
	}
	owned := func(key string) bool { self, _ := g.peers.Owner(key); return self }
	g.ExchangeSelf(owned)
	byPeer := map[string][]GlobalReport{}
	for _, r := range g.Reports(owned) {
		if _, p := g.peers.Owner(r.Key); p != "" {
			byPeer[p] = append(byPeer[p], r)
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for p, reps := range byPeer {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, g.exchangeTimeout())
			defer cancel()
			start := time.Now()
			shares, err := g.peers.Exchange(ctx, p, reps)
			if err != nil {
				g.exchangeErrs.Add(1)
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			g.noteRTT(time.Since(start))
			g.exchanges.Add(1)
			g.Apply(shares)
		})
	}
	wg.Wait()
	g.sweep()
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// Serve is the owner's side of an exchange: it merges the reports of
// node from into this node's ledgers and returns the node's shares.
func (g *Global) Serve(from string, reps []GlobalReport) ([]GlobalShare, error) {
	if from == "" {
		return nil, errorf(ErrInvalidRequest, "global report without a node id")
	}
	for i := range reps {
		r := &reps[i]
		if _, err := validateHit(r.Key, &r.Limit, 0); err != nil {
			return nil, err
		}
		if r.Limit.Scope != ScopeGlobalApprox || r.Used < 0 || r.Demand < 0 || r.Used > MaxLimit || r.Demand > 1<<50 {
			return nil, errorf(ErrInvalidRequest, "malformed global report for %s", r.Limit.DisplayName())
		}
	}
	now := g.now()
	out := make([]GlobalShare, len(reps))
	for i := range reps {
		out[i] = g.serveOne(now, from, &reps[i])
	}
	return out, nil
}

func (g *Global) serveOne(now int64, from string, r *GlobalReport) GlobalShare {
	L, p := r.Limit.Limit, int64(r.Limit.Period)
	w := floorDiv(now, p)
	k := globalKey{r.Key, r.Limit}
	g.lmu.Lock()
	defer g.lmu.Unlock()
	l := g.ledgers[k]
	if l == nil {
		l = &ledger{usage: UsageVector{Window: w}, slots: map[string]*ledgerSlot{}}
		k.key = strings.Clone(k.key)
		g.ledgers[k] = l
	}
	if w > l.usage.Window { // roll: as the nodes do
		l.usage.Merge(UsageVector{Window: w})
		for _, s := range l.slots {
			s.share = s.next
		}
	}
	if r.Window == w {
		l.usage.Merge(UsageVector{Window: w, Used: map[string]int64{from: r.Used}})
	}
	sl := l.slots[from]
	if sl == nil {
		sl = &ledgerSlot{}
		l.slots[from] = sl
	}
	sl.demand, sl.seen, l.seen = r.Demand, now, now
	stale := now - 2*int64(g.exchangeTimeout())
	var sumU, sumD, otherS, otherN int64
	for n, s := range l.slots {
		u := l.usage.Used[n]
		if s.seen < stale { // silent: its unused share goes back
			s.demand, s.share, s.next = 0, u, 0
		}
		sumU += u
		sumD += s.demand
		if n != from {
			otherS += max(s.share, u)
			otherN += s.next
		}
	}
	u := l.usage.Used[from]
	target, tn := u, int64(0)
	if sumD > 0 {
		target += mulDivFloor(max(L-sumU, 0), sl.demand, sumD, L)
		tn = mulDivFloor(L, sl.demand, sumD, L)
	}
	sl.share = max(u, min(target, L-otherS))
	sl.next = max(0, min(tn, L-otherN))
	return GlobalShare{Key: r.Key, Limit: r.Limit, Window: w, Share: sl.share, Next: sl.next}
}

// sweep forgets ledgers nobody reported to for two periods.
func (g *Global) sweep() {
	now := g.now()
	g.lmu.Lock()
	for k, l := range g.ledgers {
		if now-l.seen > 2*int64(k.lim.Period)+2*int64(g.exchangeTimeout()) {
			delete(g.ledgers, k)
		}
	}
	g.lmu.Unlock()
}
