package ratelimit

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"time"
)

// Algorithm is a rate limiting algorithm. docs/ratelimit.md states the
// exact semantics of each.
type Algorithm uint8

const (
	// FixedWindow counts hits per window [k*Period, (k+1)*Period) aligned
	// to the Unix epoch; up to 2*Limit hits can pass around a boundary.
	FixedWindow Algorithm = iota + 1
	// SlidingWindow is the two-bucket weighted sliding window counter:
	// usage = prev*(Period-elapsed)/Period + cur, a hit passes if
	// usage+cost <= Limit.
	SlidingWindow
	// SlidingLog is the exact sliding window: a hit passes if the costs of
	// the hits admitted in (now-Period, now] plus its own are <= Limit.
	// It stores one timestamp per admitted hit, so Limit is at most
	// MaxLogLimit.
	SlidingLog
	// TokenBucket is GCRA: a bucket of Burst tokens (default Limit)
	// refilled continuously at Limit per Period.
	TokenBucket
	// LeakyBucket is a queue of Burst slots (default Limit) drained at
	// Limit per Period. It admits exactly what TokenBucket admits, and
	// Status.Delay says how long the admitted hit waits in the queue.
	LeakyBucket
)

// DefaultAlgorithm is used where a limit names no algorithm.
const DefaultAlgorithm = SlidingWindow

var algorithmNames = [...]string{"", "fixed_window", "sliding_window", "sliding_log", "token_bucket", "leaky_bucket"}

func (a Algorithm) String() string {
	if a > 0 && int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return "algorithm(" + strconv.Itoa(int(a)) + ")"
}

// ParseAlgorithm parses an algorithm name as printed by String; "gcra"
// is accepted for TokenBucket. The error wraps ErrInvalidLimit.
func ParseAlgorithm(s string) (Algorithm, error) {
	for i, n := range algorithmNames {
		if i > 0 && n == s {
			return Algorithm(i), nil
		}
	}
	if s == "gcra" {
		return TokenBucket, nil
	}
	return 0, errorf(ErrInvalidLimit, "unknown algorithm %q (fixed_window, sliding_window, sliding_log, token_bucket, leaky_bucket)", s)
}

// MarshalText implements encoding.TextMarshaler.
func (a Algorithm) MarshalText() ([]byte, error) {
	if a == 0 || int(a) >= len(algorithmNames) {
		return nil, errorf(ErrInvalidLimit, "unknown algorithm %d", a)
	}
	return []byte(a.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// Bounds of a Limit.
const (
	MinPeriod   = time.Millisecond
	MaxPeriod   = 366 * 24 * time.Hour
	MaxLimit    = 1 << 40 // also the largest Burst and cost
	MaxLogLimit = 1 << 16 // SlidingLog keeps up to Limit timestamps per key
)

// Limit is one rate limit: Limit units per Period under Algorithm.
//
// A key's state is identified by the key and the whole Limit (Name
// included): two checks share state exactly when they name the same key
// and an equal Limit. Changing any field of a policy's limit therefore
// starts fresh state for it.
type Limit struct {
	// Name identifies the limit in headers (RateLimit-Policy) and answers.
	// Empty: a name derived from the other fields.
	Name      string
	Algorithm Algorithm
	// Limit is the number of units per Period, 1..MaxLimit.
	Limit int64
	// Period is the window (or the refill period), MinPeriod..MaxPeriod.
	Period time.Duration
	// Burst is the bucket size of TokenBucket and the queue size of
	// LeakyBucket, 1..MaxLimit; 0 means Limit. Other algorithms require 0.
	Burst int64
	// Scope says where the limit is decided in cluster mode: ScopeOwner
	// (the default) on the node that owns the key, ScopeGlobalApprox on
	// every node from its own share of the limit (global.go). It is part
	// of the limit's identity; a single Limiter decides both exactly.
	Scope Scope
}

// Validate reports whether the limit is usable. The error wraps
// ErrInvalidLimit.
func (lim Limit) Validate() error {
	_, err := lim.spec()
	return err
}

// Capacity is the most units a single hit may cost: Burst for the
// buckets, Limit otherwise.
func (lim Limit) Capacity() int64 {
	if (lim.Algorithm == TokenBucket || lim.Algorithm == LeakyBucket) && lim.Burst > 0 {
		return lim.Burst
	}
	return lim.Limit
}

// DisplayName is Name, or a name derived from the limit when Name is
// empty, such as "sliding_window-100-60s".
func (lim Limit) DisplayName() string {
	if lim.Name != "" {
		return lim.Name
	}
	return lim.Algorithm.String() + "-" + strconv.FormatInt(lim.Limit, 10) + "-" + formatPeriod(lim.Period)
}

// formatPeriod prints whole seconds as "60s" and anything else in ms.
func formatPeriod(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
}

func (lim Limit) String() string {
	s := fmt.Sprintf("%s %d/%s", lim.Algorithm, lim.Limit, lim.Period)
	if lim.Burst != 0 {
		s += fmt.Sprintf(" burst %d", lim.Burst)
	}
	if lim.Scope != ScopeOwner {
		s += " " + lim.Scope.String()
	}
	if lim.Name != "" {
		s = lim.Name + ": " + s
	}
	return s
}

// Status is the outcome of one check against one limit (or, from
// CheckMulti, the binding limit of several). Durations are exact; front
// ends round them up.
type Status struct {
	// Allowed reports whether the hit passed. A denied hit consumes nothing.
	Allowed bool
	// Limit is the limit's Limit (units per Period).
	Limit int64
	// Remaining is how many more units would pass right now, after this
	// hit if it was allowed.
	Remaining int64
	// Reset is how long until the state is back to full capacity if no
	// more hits arrive (0: it already is).
	Reset time.Duration
	// RetryAfter, for a denied hit, is how long until the same hit would
	// pass if no other hits arrive; 0 when allowed.
	RetryAfter time.Duration
	// Delay, for an allowed LeakyBucket hit, is how long it waits in the
	// queue before it may proceed; 0 otherwise.
	Delay time.Duration
}

// state is the per-entry state of a rate limit. Its meaning depends on
// the algorithm:
//
//	FixedWindow:   [0] window index, [1] units in it
//	SlidingWindow: [0] window index, [1] units in it, [2] units in the one before
//	TokenBucket, LeakyBucket: [0] theoretical arrival time (TAT), unix ns
//	SlidingLog:    unused (the hits are in a hitLog)
type state [3]int64

// freshWindow is the window index of fresh state: no window matches it.
const freshWindow = math.MinInt64 / 4

var freshState = state{freshWindow, 0, 0}

// spec is a validated Limit with its derived values, times in unix ns.
type spec struct {
	alg    Algorithm
	limit  int64
	period int64
	burst  int64 // buckets: capacity in units
	t      int64 // buckets: emission interval, period/limit rounded down
	tol    int64 // buckets: burst*t, the most the TAT may run ahead of now
}

func (lim Limit) spec() (spec, error) {
	sp := spec{alg: lim.Algorithm, limit: lim.Limit, period: int64(lim.Period)}
	if lim.Algorithm == 0 || int(lim.Algorithm) >= len(algorithmNames) {
		return sp, errorf(ErrInvalidLimit, "unknown algorithm %d", lim.Algorithm)
	}
	if lim.Limit < 1 || lim.Limit > MaxLimit {
		return sp, errorf(ErrInvalidLimit, "limit %d out of range 1..%d", lim.Limit, int64(MaxLimit))
	}
	if lim.Period < MinPeriod || lim.Period > MaxPeriod {
		return sp, errorf(ErrInvalidLimit, "period %s out of range %s..%s", lim.Period, MinPeriod, MaxPeriod)
	}
	switch lim.Scope {
	case ScopeOwner:
	case ScopeGlobalApprox:
		if lim.Algorithm != FixedWindow {
			return sp, errorf(ErrInvalidLimit, "scope %s supports fixed_window only, not %s", lim.Scope, lim.Algorithm)
		}
	default:
		return sp, errorf(ErrInvalidLimit, "unknown scope %d", lim.Scope)
	}
	switch lim.Algorithm {
	case TokenBucket, LeakyBucket:
		b := lim.Burst
		if b == 0 {
			b = lim.Limit
		}
		if b < 1 || b > MaxLimit {
			return sp, errorf(ErrInvalidLimit, "burst %d out of range 1..%d", lim.Burst, int64(MaxLimit))
		}
		sp.t = sp.period / sp.limit
		if sp.t < 1 {
			return sp, errorf(ErrInvalidLimit, "limit %d per %s is more than one per nanosecond", lim.Limit, lim.Period)
		}
		if hi, lo := bits.Mul64(uint64(b), uint64(sp.t)); hi != 0 || lo > 1<<61 {
			return sp, errorf(ErrInvalidLimit, "burst %d times the interval %s is too long", b, time.Duration(sp.t))
		}
		sp.burst, sp.tol = b, b*sp.t
	default:
		if lim.Burst != 0 {
			return sp, errorf(ErrInvalidLimit, "burst applies to token_bucket and leaky_bucket only, not %s", lim.Algorithm)
		}
		if lim.Algorithm == SlidingLog && lim.Limit > MaxLogLimit {
			return sp, errorf(ErrInvalidLimit, "sliding_log limit %d above %d (use sliding_window)", lim.Limit, MaxLogLimit)
		}
	}
	return sp, nil
}

// capacity is the most units one hit may cost.
func (sp *spec) capacity() int64 {
	if sp.burst > 0 {
		return sp.burst
	}
	return sp.limit
}

// decide evaluates a hit of cost units (0: a query that consumes nothing
// and is allowed if a hit of 1 would be) at now against st. It returns the
// status and the state to store if the hit is committed. cost is within
// 0..capacity. SlidingLog is decided by decideLog.
func (sp *spec) decide(st *state, now, cost int64) (Status, state) {
	switch sp.alg {
	case FixedWindow:
		return sp.decideFixed(st, now, cost)
	case SlidingWindow:
		return sp.decideSliding(st, now, cost)
	default:
		return sp.decideBucket(st, now, cost)
	}
}

func (sp *spec) decideFixed(st *state, now, cost int64) (Status, state) {
	p := sp.period
	w := floorDiv(now, p)
	var cur int64
	if st[0] == w {
		cur = st[1]
	}
	s := Status{Limit: sp.limit}
	room := sp.limit - cur
	if max(cost, 1) <= room {
		s.Allowed = true
		cur += cost
		room -= cost
	} else {
		s.RetryAfter = time.Duration((w+1)*p - now)
	}
	s.Remaining = max(room, 0)
	next := state{w, cur, 0}
	s.Reset = untilExpiry(sp.expiry(&next), now)
	return s, next
}

func (sp *spec) decideSliding(st *state, now, cost int64) (Status, state) {
	p, l := sp.period, sp.limit
	w := floorDiv(now, p)
	e := now - w*p
	var cur, prev int64
	switch st[0] {
	case w:
		cur, prev = st[1], st[2]
	case w - 1:
		prev = st[1]
	}
	// The previous window's units count with weight (p-e)/p; rounding the
	// weighted count up makes "need <= room" exactly
	// prev*(p-e)/p + cur + need <= l in real numbers.
	room := l - cur
	if prev > 0 {
		room -= mulDivCeil(prev, p-e, p)
	}
	need := max(cost, 1)
	s := Status{Limit: l}
	if need <= room {
		s.Allowed = true
		cur += cost
		room -= cost
	} else {
		s.RetryAfter = time.Duration(sp.slidingRetry(e, cur, prev, need))
	}
	s.Remaining = max(room, 0)
	next := state{w, cur, prev}
	s.Reset = untilExpiry(sp.expiry(&next), now)
	return s, next
}

// slidingRetry is the time from elapsed e (in the current window) until
// a hit of need units passes, given no other hits: the previous window's
// weight falls linearly, and at the boundary cur becomes prev.
func (sp *spec) slidingRetry(e, cur, prev, need int64) int64 {
	p, l := sp.period, sp.limit
	// This window: need ceil(prev*x/p) <= r where x = p-e' is what is left
	// of the window, i.e. x <= floor(r*p/prev).
	if r := l - cur - need; r >= 0 && prev > 0 {
		if e2 := p - mulDivFloor(r, p, prev, p); e2 < p {
			return e2 - e
		}
	}
	// The next window: prev' = cur, cur' = 0 (need <= l by validation).
	var e2 int64
	if cur > 0 {
		e2 = p - mulDivFloor(l-need, p, cur, p)
	}
	if e2 < p {
		return p - e + e2
	}
	return 2*p - e // the window after that is empty
}

func (sp *spec) decideBucket(st *state, now, cost int64) (Status, state) {
	t := sp.t
	tat := max(st[0], now)
	s := Status{Limit: sp.limit}
	if ahead := tat + max(cost, 1)*t - now; ahead <= sp.tol {
		s.Allowed = true
		if sp.alg == LeakyBucket && cost > 0 {
			s.Delay = time.Duration(tat - now)
		}
		tat += cost * t
	} else {
		s.RetryAfter = time.Duration(ahead - sp.tol)
	}
	s.Remaining = (sp.tol - (tat - now)) / t
	s.Reset = time.Duration(tat - now)
	return s, state{tat}
}

// expiry is the time at which st is equivalent to fresh state: the entry
// may be freed then.
func (sp *spec) expiry(st *state) int64 {
	switch sp.alg {
	case FixedWindow:
		if st[1] == 0 {
			return 0
		}
		return (st[0] + 1) * sp.period
	case SlidingWindow:
		switch {
		case st[1] > 0:
			return (st[0] + 2) * sp.period
		case st[2] > 0:
			return (st[0] + 1) * sp.period
		}
		return 0
	case TokenBucket, LeakyBucket:
		return st[0]
	}
	return 0
}

func untilExpiry(exp, now int64) time.Duration {
	if exp <= now {
		return 0
	}
	return time.Duration(exp - now)
}

// hitLog is the state of a SlidingLog limit: the admitted hits of the
// last period, oldest first, in a ring. Hits at the same instant share
// one record.
type hitLog struct {
	ts, n []int64 // ring buffers, len is the capacity
	head  int
	size  int
	sum   int64 // units of the hits in the ring
}

// prune drops the hits at or before cutoff (they left the window).
func (g *hitLog) prune(cutoff int64) {
	for g.size > 0 && g.ts[g.head] <= cutoff {
		g.sum -= g.n[g.head]
		g.head = (g.head + 1) % len(g.ts)
		g.size--
	}
	if g.size == 0 {
		g.head = 0
	}
}

func (g *hitLog) newest() int64 {
	return g.ts[(g.head+g.size-1)%len(g.ts)]
}

func (g *hitLog) push(ts, n int64) {
	if g.size > 0 && g.newest() == ts {
		g.n[(g.head+g.size-1)%len(g.n)] += n
		g.sum += n
		return
	}
	if g.size == len(g.ts) {
		g.resize(max(4, 2*len(g.ts)))
	}
	i := (g.head + g.size) % len(g.ts)
	g.ts[i], g.n[i] = ts, n
	g.size++
	g.sum += n
}

// resize moves the ring into buffers of capacity c >= size.
func (g *hitLog) resize(c int) {
	ts, n := make([]int64, c), make([]int64, c)
	for i := 0; i < g.size; i++ {
		j := (g.head + i) % len(g.ts)
		ts[i], n[i] = g.ts[j], g.n[j]
	}
	g.ts, g.n, g.head = ts, n, 0
}

// decideLog is decide for SlidingLog; g may be nil (no hits yet). It
// prunes g (which does not change its meaning) but does not record the
// hit: commitLog does.
func (sp *spec) decideLog(g *hitLog, now, cost int64) Status {
	s := Status{Limit: sp.limit}
	var used int64
	if g != nil {
		g.prune(now - sp.period)
		used = g.sum
	}
	room := sp.limit - used
	need := max(cost, 1)
	newest := int64(0)
	if g != nil && g.size > 0 {
		newest = g.newest()
	}
	if need <= room {
		s.Allowed = true
		room -= cost
		if cost > 0 {
			newest = now
		}
	} else {
		// The hit passes once enough of the oldest hits have left.
		left := used
		for i := 0; i < g.size; i++ {
			j := (g.head + i) % len(g.ts)
			left -= g.n[j]
			if sp.limit-left >= need {
				s.RetryAfter = time.Duration(g.ts[j] + sp.period - now)
				break
			}
		}
	}
	s.Remaining = max(room, 0)
	if room < sp.limit {
		s.Reset = untilExpiry(newest+sp.period, now)
	}
	return s
}

// logExpiry is the time at which g holds no hit of the window any more.
func (sp *spec) logExpiry(g *hitLog) int64 {
	if g == nil || g.size == 0 {
		return 0
	}
	return g.newest() + sp.period
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// mulDivFloor returns min(floor(a*b/c), limit) for a, b >= 0 and c > 0,
// without overflow.
func mulDivFloor(a, b, c, limit int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return limit
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > uint64(limit) {
		return limit
	}
	return int64(q)
}

// mulDivCeil returns ceil(a*b/c) for a, b >= 0, c > 0 and b <= c (so the
// result is at most a).
func mulDivCeil(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		q++
	}
	return int64(q)
}
