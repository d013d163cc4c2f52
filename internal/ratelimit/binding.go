package ratelimit

import (
	"time"

	"github.com/cespare/xxhash/v2"
)

// This file holds what another decider of the same checks (the Redis
// decider of the tiered mode) needs to answer exactly like a Limiter.

// fewerRemaining orders statuses for the allowed binding status: fewest
// Remaining, then longest Reset, then the rest, a total order.
func fewerRemaining(a, b Status) bool {
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	if a.Reset != b.Reset {
		return a.Reset > b.Reset
	}
	return tieBefore(a, b)
}

// longerRetry orders denied statuses: longest RetryAfter, then the
// fewerRemaining order.
func longerRetry(a, b Status) bool {
	if a.RetryAfter != b.RetryAfter {
		return a.RetryAfter > b.RetryAfter
	}
	return fewerRemaining(a, b)
}

func tieBefore(a, b Status) bool {
	switch {
	case a.Limit != b.Limit:
		return a.Limit < b.Limit
	case a.RetryAfter != b.RetryAfter:
		return a.RetryAfter > b.RetryAfter
	case a.Delay != b.Delay:
		return a.Delay > b.Delay
	}
	return !a.Allowed && b.Allowed
}

// Binding is the binding status of a check whose hits have the statuses
// sts, as CheckMulti returns it.
func Binding(sts []Status) Status {
	var b binder
	for _, s := range sts {
		b.add(s)
	}
	return b.result()
}

// PrepareHits validates a check as CheckMulti does, with the same errors,
// and merges the hits of one (key, limit) pair listed several times into
// one hit with the sum of the costs. It returns the distinct hits and, for
// each of hits, the index of its distinct hit.
func PrepareHits(hits []Hit, out []Status) (distinct []Hit, index []int, err error) {
	if len(hits) == 0 {
		return nil, nil, errorf(ErrInvalidRequest, "no limits to check")
	}
	if len(hits) > MaxHits {
		return nil, nil, errorf(ErrTooManyLimits, "%d limits, at most %d", len(hits), MaxHits)
	}
	if out != nil && len(out) < len(hits) {
		return nil, nil, errorf(ErrInvalidRequest, "out has room for %d statuses, need %d", len(out), len(hits))
	}
	for i := range hits {
		h := &hits[i]
		if _, err := validateHit(h.Key, &h.Limit, h.Cost); err != nil {
			return nil, nil, err
		}
	}
	distinct = make([]Hit, 0, len(hits))
	index = make([]int, len(hits))
	for i, h := range hits {
		j := 0
		for j < len(distinct) && (distinct[j].Key != h.Key || distinct[j].Limit != h.Limit) {
			j++
		}
		if j == len(distinct) {
			distinct = append(distinct, h)
		} else {
			distinct[j].Cost += h.Cost
		}
		index[i] = j
	}
	for _, h := range distinct {
		if c := h.Limit.Capacity(); h.Cost > c {
			return nil, nil, errorf(ErrInvalidCost, "total cost %d of one limit listed several times is above its capacity %d", h.Cost, c)
		}
	}
	return distinct, index, nil
}

// GCRA returns the emission interval (Period/Limit, rounded down) and the
// tolerance (Burst intervals) with which a TokenBucket or LeakyBucket
// limit is decided; zeros for the other algorithms. The error wraps
// ErrInvalidLimit.
func (lim Limit) GCRA() (interval, tolerance time.Duration, err error) {
	sp, err := lim.spec()
	return time.Duration(sp.t), time.Duration(sp.tol), err
}

// ID is a stable 64-bit identity of the limit (every field, Name
// included), the same in every process and version: two checks share
// state exactly when they name the same key and limits with the same ID
// (collisions aside, 2^-64 per pair). Scope counts when it is not
// ScopeOwner.
func (lim Limit) ID() uint64 {
	var b [4*8 + 64]byte
	put := func(i int, v int64) {
		for k := range 8 {
			b[i+k] = byte(uint64(v) >> (8 * k))
		}
	}
	put(0, int64(lim.Algorithm))
	put(8, lim.Limit)
	put(16, int64(lim.Period))
	put(24, lim.Burst)
	if lim.Scope != ScopeOwner { // a separate state; older limits keep their ID
		return xxhash.Sum64(append(append(b[:32], lim.Name...), 0, byte(lim.Scope)))
	}
	return xxhash.Sum64(append(b[:32], lim.Name...))
}
