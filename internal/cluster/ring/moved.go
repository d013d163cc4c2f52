package ring

import (
	"fmt"
	"slices"
)

// Range is an arc of the ring whose owner changed between two snapshots.
// It holds the positions h with Start < h <= End; when Start >= End the arc
// wraps past 2^64-1 to 0 (Start == End means the whole ring).
type Range struct {
	Start, End uint64
	From, To   string // owner in the old and in the new snapshot ("" if that ring was empty)
}

// Contains reports whether ring position h lies in the range.
func (r Range) Contains(h uint64) bool {
	if r.Start < r.End {
		return h > r.Start && h <= r.End
	}
	return h > r.Start || h <= r.End // wrapping (or whole ring when equal)
}

// String formats the range for logs.
func (r Range) String() string {
	return fmt.Sprintf("(%#016x, %#016x] %s->%s", r.Start, r.End, r.From, r.To)
}

// Moved returns the arcs of the ring whose owner differs between old and new,
// in ring order, with adjacent arcs of the same From/To merged. It is the
// handoff plan: every id whose position (Snapshot.Pos) falls in a returned
// range must move from From to To. Either snapshot may be empty; nil
// snapshots count as empty. The ranges are positions, so they describe the
// moves only when both snapshots place ids alike (Tags equal): a change of
// placement also moves ids with a hash tag, which Diff finds.
//
// Cost: O((p_old + p_new) log) where p is the number of ring points.
func Moved(old, new *Snapshot) []Range {
	var bounds []uint64
	if old != nil {
		for _, p := range old.points {
			bounds = append(bounds, p.hash)
		}
	}
	if new != nil {
		for _, p := range new.points {
			bounds = append(bounds, p.hash)
		}
	}
	if len(bounds) == 0 {
		return nil
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	owner := func(s *Snapshot, h uint64) string {
		if s == nil {
			return ""
		}
		return s.OwnerOfHash(h)
	}
	// Between two consecutive boundaries (b[i-1], b[i]] no point of either
	// ring lies strictly inside, so every position in the arc has the owner
	// of b[i] in each ring. The first arc wraps: (b[last], b[0]].
	var out []Range
	for i, b := range bounds {
		start := bounds[len(bounds)-1]
		if i > 0 {
			start = bounds[i-1]
		}
		from, to := owner(old, b), owner(new, b)
		if from == to {
			continue
		}
		if n := len(out); n > 0 && out[n-1].End == start && out[n-1].From == from && out[n-1].To == to {
			out[n-1].End = b
			continue
		}
		out = append(out, Range{Start: start, End: b, From: from, To: to})
	}
	// The first and last arcs are adjacent through the wrap.
	if n := len(out); n > 1 && out[n-1].End == out[0].Start && out[n-1].From == out[0].From && out[n-1].To == out[0].To {
		out[0].Start = out[n-1].Start
		out = out[:n-1]
	}
	return out
}

// Move is one id whose owner changed.
type Move struct {
	ID       string
	From, To string
}

// Diff returns the ids among ids whose owner differs between old and new
// (nil snapshots count as empty), in the order given. Each snapshot places
// ids its own way (Tags).
func Diff(old, new *Snapshot, ids []string) []Move {
	var out []Move
	for _, id := range ids {
		var from, to string
		if old != nil {
			from = old.Owner(id)
		}
		if new != nil {
			to = new.Owner(id)
		}
		if from != to {
			out = append(out, Move{ID: id, From: from, To: to})
		}
	}
	return out
}
