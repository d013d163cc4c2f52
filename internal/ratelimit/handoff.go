package ratelimit

import (
	"math"

	"github.com/counterd/counterd/internal/engine"
)

// Handoff: in cluster mode a key's limiter state moves to the key's new
// owner when the ring changes, like counters do. A Limiter made with
// Config.KeepKeys remembers each entry's key and limit (the fingerprint
// alone cannot be placed on a ring nor re-hashed by another process, whose
// maphash seed differs); ExportEntries copies the state of the entries
// whose key a caller selects (by ring position), and ImportEntries merges
// such copies into the local state.
//
// The merge can only make a limit stricter: per (key, limit) it is a join
// (idempotent, commutative, associative) whose result, at any time at or
// after both inputs' last hit, admits no more than either input would.
// Fixed window: the later window wins, the larger count in the same
// window. Sliding window: both are shifted to the later window, then the
// per-bucket max. Buckets (GCRA): the later TAT. Sliding log: the union
// of the hits, the larger units at the same instant.

// keyRef is what an entry remembers with Config.KeepKeys (in its aux).
type keyRef struct {
	key string
	lim Limit
}

// Entry is the state of one (key, limit) as it moves between nodes. The
// fields are the algorithm's state (see the state type): State for every
// algorithm but SlidingLog, whose admitted hits are in Log as
// [unix ns, units] pairs, oldest first.
type Entry struct {
	Key   string     `json:"key"`
	Limit Limit      `json:"limit"`
	State [3]int64   `json:"state"`
	Log   [][2]int64 `json:"log,omitempty"`
}

// markDirty records that the locked entry was charged, for
// ExportChanged.
func (l *Limiter) markDirty(le *engine.LimEntry) {
	if l.keep {
		le.MarkChanged()
	}
}

// ExportEntries returns a copy of the state of every entry whose key
// match accepts (nil: all) and that is not back to full capacity. It needs
// Config.KeepKeys (without it there is nothing to export). Safe for
// concurrent use with checks; an entry is copied under its lock, so each
// copy is consistent, though checks may change it right after.
func (l *Limiter) ExportEntries(match func(key string) bool) []Entry {
	return l.export(match, false)
}

// ExportChanged is ExportEntries limited to the entries charged since the
// last ExportChanged (match or not), for periodic replication: each call
// clears the mark of every entry it visits.
func (l *Limiter) ExportChanged(match func(key string) bool) []Entry {
	return l.export(match, true)
}

func (l *Limiter) export(match func(key string) bool, changed bool) []Entry {
	now := l.now()
	var out []Entry
	l.tab.RangeLimiters(changed, func(le *engine.LimEntry) {
		if changed {
			le.ClearChanged()
		}
		a := auxOf(le)
		if a == nil || a.kr.key == "" {
			return // not kept (Config.KeepKeys unset)
		}
		ls := le.State()
		if ls.Exp > now && ls.Exp != math.MaxInt64 && (match == nil || match(a.kr.key)) {
			en := Entry{Key: a.kr.key, Limit: a.kr.lim, State: ls.S}
			if a.kr.lim.Algorithm == SlidingLog {
				en.Log = a.log.records()
			}
			out = append(out, en)
		}
	})
	return out
}

// records copies the hits of g, oldest first (nil for a nil g).
func (g *hitLog) records() [][2]int64 {
	if g == nil || g.size == 0 {
		return nil
	}
	out := make([][2]int64, g.size)
	for i := range out {
		j := (g.head + i) % len(g.ts)
		out[i] = [2]int64{g.ts[j], g.n[j]}
	}
	return out
}

// setRecords replaces the hits of g with recs (oldest first).
func (g *hitLog) setRecords(recs [][2]int64) {
	g.ts, g.n = make([]int64, max(4, len(recs))), make([]int64, max(4, len(recs)))
	g.head, g.size, g.sum = 0, len(recs), 0
	for i, r := range recs {
		g.ts[i], g.n[i] = r[0], r[1]
		g.sum += r[1]
	}
}

// ImportEntries merges entries into the local state (see the package's
// handoff notes) and returns how many it merged. mark counts the merged
// entries as charged for ExportChanged: set it when this node takes the
// keys over (handoff) and must pass their state on; leave it unset for a
// copy (replication), or the copy would be sent back. Every entry is
// validated first: if one is invalid, the error wraps ErrInvalidEntry and
// nothing changes. Entries already back to full capacity are skipped.
// Safe for concurrent use with checks.
func (l *Limiter) ImportEntries(entries []Entry, mark bool) (int, error) {
	if l.closed.Load() {
		return 0, ErrClosed
	}
	now := l.now()
	specs := make([]spec, len(entries))
	for i := range entries {
		sp, err := validateEntry(&entries[i])
		if err != nil {
			return 0, err
		}
		specs[i] = sp
	}
	n := 0
	for i := range entries {
		en, sp := &entries[i], &specs[i]
		if imp := entryExpiryOf(sp, en); imp <= now {
			continue
		}
		h1, h2 := fingerprint(hashKey(en.Key), limitHash(&en.Limit))
		var le engine.LimEntry
		if err := l.lockEntry(&le, h1, h2); err != nil {
			return n, err
		}
		l.remember(&le, en.Key, &en.Limit)
		ls := le.State()
		var g *hitLog
		if sp.alg == SlidingLog {
			g = newLog(&le)
			g.setRecords(mergeLogs(g.records(), en.Log))
		} else {
			st := state(en.State)
			if sp.burst > 0 {
				// A TAT further ahead than the bucket allows (the
				// sender's clock runs ahead): an empty bucket.
				st[0] = min(st[0], now+sp.tol)
			}
			ls.S = mergeState(sp, state(ls.S), st)
		}
		ls.Exp = entryExpiry(sp, &ls, g)
		le.SetState(&ls)
		if mark {
			l.markDirty(&le)
		}
		le.Unlock()
		n++
	}
	return n, nil
}

// entryExpiryOf is when an imported entry's state is fresh again.
func entryExpiryOf(sp *spec, en *Entry) int64 {
	if sp.alg == SlidingLog {
		if len(en.Log) == 0 {
			return 0
		}
		return en.Log[len(en.Log)-1][0] + sp.period
	}
	st := state(en.State)
	return sp.expiry(&st)
}

// validateEntry checks an imported entry: a valid key and limit, and a
// state its algorithm can reach.
func validateEntry(en *Entry) (spec, error) {
	bad := func(format string, args ...any) (spec, error) {
		return spec{}, errorf(ErrInvalidEntry, "key %q, %s: "+format, append([]any{truncate(en.Key, 64), en.Limit.DisplayName()}, args...)...)
	}
	if err := validateKey(en.Key); err != nil {
		return bad("%v", err)
	}
	sp, err := en.Limit.spec()
	if err != nil {
		return bad("%v", err)
	}
	if en.Limit.Name != "" {
		if err := validatePolicyName(en.Limit.Name); err != nil {
			return bad("%v", err)
		}
	}
	st := en.State
	if sp.alg != SlidingLog && len(en.Log) > 0 {
		return bad("a log for %s", sp.alg)
	}
	switch sp.alg {
	case FixedWindow, SlidingWindow:
		if st[1] < 0 || st[1] > sp.limit || st[2] < 0 || st[2] > sp.limit || (sp.alg == FixedWindow && st[2] != 0) {
			return bad("counts %d, %d out of range 0..%d", st[1], st[2], sp.limit)
		}
		if st[0] == freshWindow {
			if st[1] != 0 || st[2] != 0 {
				return bad("counts in no window")
			}
		} else if st[0] < 0 || st[0] > math.MaxInt64/sp.period-2 {
			return bad("window %d out of range", st[0])
		}
	case TokenBucket, LeakyBucket:
		if st[1] != 0 || st[2] != 0 {
			return bad("state %v is not a TAT", st)
		}
		if st[0] != freshWindow && (st[0] < 0 || st[0] > math.MaxInt64/2) {
			return bad("TAT %d out of range", st[0])
		}
	case SlidingLog:
		if st != [3]int64(freshState) && st != [3]int64{} {
			return bad("state %v for a log", st)
		}
		if len(en.Log) > 2*MaxLogLimit {
			return bad("%d log records, at most %d", len(en.Log), 2*MaxLogLimit)
		}
		for i, r := range en.Log {
			if r[0] < 0 || r[0] > math.MaxInt64/2 || r[1] < 1 || r[1] > sp.limit || (i > 0 && r[0] <= en.Log[i-1][0]) {
				return bad("log record %d %v: times must increase, units be 1..%d", i, r, sp.limit)
			}
		}
	}
	return sp, nil
}

// mergeState joins two states of one (key, limit); see the handoff notes.
func mergeState(sp *spec, a, b state) state {
	switch sp.alg {
	case FixedWindow:
		if a[0] != b[0] {
			if a[0] > b[0] {
				return a
			}
			return b
		}
		return state{a[0], max(a[1], b[1]), 0}
	case SlidingWindow:
		w := max(a[0], b[0])
		a, b = shiftWindow(a, w), shiftWindow(b, w)
		return state{w, max(a[1], b[1]), max(a[2], b[2])}
	}
	return state{max(a[0], b[0])}
}

// shiftWindow expresses a sliding window state in window w >= st[0].
func shiftWindow(st state, w int64) state {
	switch st[0] {
	case w:
		return st
	case w - 1:
		return state{w, 0, st[1]}
	}
	return state{w, 0, 0}
}

// mergeLogs joins two logs (oldest first): every instant of either, with
// the larger units where both have one.
func mergeLogs(a, b [][2]int64) [][2]int64 {
	out := make([][2]int64, 0, len(a)+len(b))
	for len(a) > 0 || len(b) > 0 {
		switch {
		case len(b) == 0 || len(a) > 0 && a[0][0] < b[0][0]:
			out, a = append(out, a[0]), a[1:]
		case len(a) == 0 || b[0][0] < a[0][0]:
			out, b = append(out, b[0]), b[1:]
		default:
			out = append(out, [2]int64{a[0][0], max(a[0][1], b[0][1])})
			a, b = a[1:], b[1:]
		}
	}
	return out
}
