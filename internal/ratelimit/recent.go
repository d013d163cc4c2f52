package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultRecentDecisions is how many decisions a server's Recorder keeps
// (GET /ratelimit/decisions, the console's rate-limit page).
const DefaultRecentDecisions = 256

// Recorder is a Checker that keeps the last decisions of the Checker it
// wraps in a bounded ring, for GET /ratelimit/decisions. It records every
// check its front ends decide through it (HTTP, RESP RL.CHECK, gRPC), not
// the checks another node forwarded here (those are decided by Local()
// directly and recorded on the node that received them). Checks that fail
// with an error are not decisions and are not kept. Safe for concurrent
// use; recording takes one atomic add and one uncontended slot lock, and
// does not allocate.
type Recorder struct {
	c     Checker
	seq   atomic.Uint64 // decisions recorded so far
	slots []recentSlot
}

type recentSlot struct {
	mu   sync.Mutex
	seq  uint64 // 1-based sequence number; 0: empty
	at   time.Time
	key  []byte // copied: RL.CHECK's key aliases the connection's buffer
	name []byte // the first limit's Name, copied likewise
	lim  Limit  // the first hit's limit, without its Name
	n    int    // hits checked together
	st   Status
	cost int64 // the first hit's cost
}

// NewRecorder wraps c, keeping its last n decisions (n < 1: DefaultRecentDecisions).
func NewRecorder(c Checker, n int) *Recorder {
	if n < 1 {
		n = DefaultRecentDecisions
	}
	return &Recorder{c: c, slots: make([]recentSlot, n)}
}

// CheckMultiContext checks through the wrapped Checker and records the decision.
func (r *Recorder) CheckMultiContext(ctx context.Context, hits []Hit, out []Status) (Status, error) {
	st, err := r.c.CheckMultiContext(ctx, hits, out)
	if err == nil && len(hits) > 0 {
		r.record(hits, st)
	}
	return st, err
}

// CheckArgs runs RL.CHECK through r (see Limiter.CheckArgs); around a
// Limiter, without allocating, as Limiter.CheckArgs.
func (r *Recorder) CheckArgs(args [][]byte) ([4]int64, error) {
	l, ok := r.c.(*Limiter)
	if !ok {
		return CheckArgsWith(r, args)
	}
	var buf [8]Hit // stays on the stack: the calls below are concrete
	hits, err := l.appendArgsHits(buf[:0], args)
	if err != nil {
		return [4]int64{}, err
	}
	s, err := l.CheckMulti(hits, nil)
	if err != nil {
		return [4]int64{}, err
	}
	r.record(hits, s)
	return argsReply(s), nil
}

// CheckArgsContext is CheckArgs with the caller's context, whose
// credentials a Router carries to the key's owner.
func (r *Recorder) CheckArgsContext(ctx context.Context, args [][]byte) ([4]int64, error) {
	if _, ok := r.c.(*Limiter); ok {
		return r.CheckArgs(args) // a Limiter never waits nor forwards
	}
	return CheckArgsWithContext(ctx, r, args)
}

// Local is the wrapped Checker's Limiter.
func (r *Recorder) Local() *Limiter { return r.c.Local() }

// Capacity is how many decisions r keeps.
func (r *Recorder) Capacity() int { return len(r.slots) }

func (r *Recorder) record(hits []Hit, st Status) {
	seq := r.seq.Add(1)
	s := &r.slots[(seq-1)%uint64(len(r.slots))]
	now := r.c.Local().Now()
	h := &hits[0]
	s.mu.Lock()
	if s.seq < seq { // a slower writer of an older lap loses
		s.seq, s.at, s.lim, s.n, s.st, s.cost = seq, now, h.Limit, len(hits), st, h.Cost
		s.key = append(s.key[:0], h.Key...) // reuses the slot's buffer: no allocation once warm
		s.name = append(s.name[:0], h.Limit.Name...)
		s.lim.Name = ""
	}
	s.mu.Unlock()
}

// Decision is one recorded check, as GET /ratelimit/decisions answers it.
type Decision struct {
	Seq          uint64 `json:"seq"`
	Time         string `json:"time"` // RFC 3339, the Limiter's clock
	Key          string `json:"key"`
	Allowed      bool   `json:"allowed"`
	Policy       string `json:"policy"` // the first limit's name
	Limits       int    `json:"limits"` // limits checked together
	Cost         int64  `json:"cost"`
	Limit        int64  `json:"limit"`     // of the binding limit
	Remaining    int64  `json:"remaining"` // of the binding limit
	RetryAfterMS int64  `json:"retry_after_ms"`
}

// Recent returns at most max recorded decisions (max < 1: all kept),
// newest first, and how many were recorded since start.
func (r *Recorder) Recent(max int) ([]Decision, uint64) {
	total := r.seq.Load()
	n := min(uint64(len(r.slots)), total)
	if max > 0 && uint64(max) < n {
		n = uint64(max)
	}
	out := make([]Decision, 0, n)
	for seq := total; seq > 0 && uint64(len(out)) < n; seq-- {
		s := &r.slots[(seq-1)%uint64(len(r.slots))]
		s.mu.Lock()
		if s.seq == seq {
			lim := s.lim
			lim.Name = string(s.name)
			out = append(out, Decision{
				Seq: s.seq, Time: s.at.UTC().Format(time.RFC3339Nano), Key: string(s.key), Allowed: s.st.Allowed,
				Policy: lim.DisplayName(), Limits: s.n, Cost: s.cost, Limit: s.st.Limit,
				Remaining: s.st.Remaining, RetryAfterMS: CeilMillis(s.st.RetryAfter),
			})
		}
		s.mu.Unlock()
		if total-seq+1 >= uint64(len(r.slots)) {
			break
		}
	}
	return out, total
}

var _ Checker = (*Recorder)(nil)
