package engine

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"github.com/counterd/counterd/internal/contract"
	"math/big"
	"strings"
)

// Sorted listings and overflowing aggregates, written once on top of the
// Backend interface so every backend (embedded, cluster, tiered) answers
// them alike: a backend's Scan visits its ids in its own order (hash
// order, node by node), and its Aggregate fails when the sum passes 64
// bits.

// listScanCount is how many ids ListSorted and AggregateOverflow ask
// Scan for at a time.
const listScanCount = 1000

// ListSorted returns, in byte order, the first limit ids matching the
// Redis glob pattern ("" matches every id) and accepted by keep (nil keeps
// all) that sort strictly after after ("" starts at the beginning), and
// whether more such ids follow. Paging with after set to the last id of
// the previous page visits every id that exists during the whole listing
// exactly once, whatever the backend's Scan order. Each page scans every
// id matching pattern (keeping only limit+1 of them in memory): a page
// costs a full scan of the pattern's ids.
func ListSorted(ctx context.Context, b contract.Backend, pattern string, keep func(string) bool, after string, limit int) (ids []string, more bool, err error) {
	if limit <= 0 {
		return nil, false, fmt.Errorf("%w: list limit %d", contract.ErrInvalidArgument, limit)
	}
	top := &smallest{max: limit + 1, in: map[string]struct{}{}}
	var cursor uint64
	for {
		page, next, err := b.Scan(ctx, cursor, pattern, listScanCount)
		if err != nil {
			return nil, false, err
		}
		for _, id := range page {
			if id > after && (keep == nil || keep(id)) {
				top.offer(id)
			}
		}
		if next == 0 {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		cursor = next
	}
	ids = top.sorted()
	if len(ids) > limit {
		return ids[:limit], true, nil
	}
	return ids, false, nil
}

// smallest keeps the max smallest distinct strings offered to it (a
// max-heap: the largest kept is on top, and goes when a smaller one comes).
type smallest struct {
	max int
	h   []string
	in  map[string]struct{}
}

func (s *smallest) Len() int           { return len(s.h) }
func (s *smallest) Less(i, j int) bool { return s.h[i] > s.h[j] }
func (s *smallest) Swap(i, j int)      { s.h[i], s.h[j] = s.h[j], s.h[i] }
func (s *smallest) Push(x any)         { s.h = append(s.h, x.(string)) }
func (s *smallest) Pop() any {
	x := s.h[len(s.h)-1]
	s.h = s.h[:len(s.h)-1]
	return x
}

// offer keeps id if it is among the max smallest seen. A Scan may return
// an id twice: a kept id is not kept again, and one that went is at least
// the largest kept since, so it is not taken back.
func (s *smallest) offer(id string) {
	if _, dup := s.in[id]; dup {
		return
	}
	if len(s.h) == s.max {
		if id >= s.h[0] {
			return
		}
		delete(s.in, heap.Pop(s).(string))
	}
	heap.Push(s, id)
	s.in[id] = struct{}{}
}

// sorted returns the kept strings in ascending order.
func (s *smallest) sorted() []string {
	out := make([]string, len(s.h))
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = heap.Pop(s).(string)
	}
	return out
}

// OverflowError is the error of an aggregate whose sum does not fit in 64
// bits, with what the sum covers: the number of additive counters and
// their exact sum. errors.Is(err, ErrOverflow) holds.
type OverflowError struct {
	Prefix string
	Count  int
	Sum    *big.Int
	Err    error // the backend's overflow error
}

func (e *OverflowError) Error() string {
	return fmt.Sprintf("%v (sum exceeds 64 bits: %d counters, sum %s)", e.Err, e.Count, e.Sum)
}

func (e *OverflowError) Unwrap() error { return e.Err }

// AggregateOverflow is b.Aggregate, except that a sum past 64 bits fails
// with an *OverflowError that says how many additive counters start with
// prefix and what they sum to. Those figures are read counter by counter
// (Scan, then Get), not at one instant like the aggregate: a counter
// written meanwhile is counted with the value its Get read. The ids seen
// are kept in memory to count each once.
func AggregateOverflow(ctx context.Context, b contract.Backend, prefix string) (contract.Aggregate, error) {
	a, err := b.Aggregate(ctx, prefix)
	if err == nil || !errors.Is(err, contract.ErrOverflow) {
		return a, err
	}
	oe := &OverflowError{Prefix: prefix, Sum: new(big.Int), Err: err}
	pattern := escapeGlob(prefix) + "*"
	var cursor uint64
	var v big.Int
	seen := map[string]struct{}{} // a Scan may list an id twice
	for {
		ids, next, serr := b.Scan(ctx, cursor, pattern, listScanCount)
		if serr != nil {
			return contract.Aggregate{}, err // the overflow, without the figures
		}
		for _, id := range ids {
			if _, dup := seen[id]; dup || !strings.HasPrefix(id, prefix) {
				continue
			}
			seen[id] = struct{}{}
			view, gerr := b.Get(ctx, id)
			if gerr != nil {
				return contract.Aggregate{}, err
			}
			if !view.Exists || !view.Kind.Additive() {
				continue
			}
			oe.Count++
			oe.Sum.Add(oe.Sum, v.SetInt64(view.Value))
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	if oe.Sum.IsInt64() {
		// The counters changed between the aggregate and the scan: the
		// figures read do not show an overflow; say so with the error.
		return contract.Aggregate{}, err
	}
	return contract.Aggregate{}, oe
}

// escapeGlob escapes the Redis glob metacharacters of s, so it matches
// itself only.
func escapeGlob(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
