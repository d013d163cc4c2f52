package consumer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/pipeline/rules"
	"github.com/counterd/counterd/internal/pipeline/stream"
)

// Consumption on backends whose batches are not atomic across counters
// (a cluster, the tiered store): through contract.CounterMarker. An
// event's effects are coalesced per counter, each coalesced op carrying
// the ids of the events it holds, and every op is applied atomically with
// a dedupe mark per (counter, event id) beside its counter. An op whose
// counter already has one of its marks is not applied: the events named
// are dropped from it (they changed that counter before: a redelivery, a
// copy, a concurrent consumer) and the op is made again of the others.
// So each counter's change from an event is applied once wherever the
// counter lives, however ownership moves. PFADD ops are idempotent and
// carry no marks. See docs/pipeline.md, "Where it applies".

// contrib is one hit's share of a coalesced op: event ev's hit-th op.
type contrib struct {
	ev, hit int32
	mark    string // "" for an op without marks (pfadd)
	key     opKey
	state   uint8 // contribPending, contribDone, contribDropped
	alone   bool  // its op failed with others: applied alone from then on
}

const (
	contribPending uint8 = iota
	contribDone
	contribDropped
)

// cmOp is one coalesced op being built, and the contributions it holds.
type cmOp struct {
	op      contract.Op
	marks   []string
	contrib []int // indexes in the contributions
}

// counterMark is an event's mark on a counter: the event's key (its
// marker id without the prefix: the id, or a hash of a long one), and
// when the event has ops of several kinds of change for one counter (a
// window add and a rollup bucket, say), a suffix telling them apart.
func counterMark(p *pending, n int) string {
	k := p.marker[len(MarkerPrefix):]
	if strings.ContainsFunc(k, func(r rune) bool { return r < 0x20 }) {
		// Control bytes (a NUL PostgreSQL text cannot hold): a hash.
		sum := sha256.Sum256([]byte(k))
		k = "#" + hex.EncodeToString(sum[:16])
	}
	if n > 0 {
		k += "/" + strconv.Itoa(n)
	}
	return k
}

// applyCounterMarked applies evs (live events of a segment) through
// a.cmark and reports whether it applied anything.
func (a *Applier) applyCounterMarked(ctx context.Context, rs *rules.Set, evs []pending, dead [][]stream.DeadLetter) (bool, error) {
	if len(evs) == 0 {
		return false, nil
	}
	maxItems, ttl := a.maxItems(), dedupeTTL(rs)
	// The contributions, event after event, and each event's marks.
	var cs []contrib
	for k := range evs {
		p := &evs[k]
		var keys []opKey // this event's marked op keys, in order
		for j := range p.hits {
			op := &p.hits[j].Op
			key := opKey{op.Type, op.ID, op.Window, op.At}
			c := contrib{ev: int32(k), hit: int32(j), key: key}
			if op.Type != contract.OpPFAdd {
				at := slices.Index(keys, key)
				if at < 0 {
					keys, at = append(keys, key), len(keys)
				}
				n := 0 // earlier keys of this event on the same counter
				for _, x := range keys[:at] {
					if x.id == key.id {
						n++
					}
				}
				c.mark = counterMark(p, n)
			}
			cs = append(cs, c)
		}
	}
	dup := make([]bool, len(evs))    // a counter had one of its marks
	deadEv := make([]bool, len(evs)) // dead-lettered
	applied := false
	for round := 0; ; round++ {
		ops := a.buildMarked(evs, cs, deadEv, maxItems)
		if len(ops) == 0 {
			break
		}
		if round > len(cs)+2 {
			return false, errors.New("consumer: marked ops kept coming back after every contribution they named was dropped")
		}
		for len(ops) > 0 {
			n := min(len(ops), a.maxOps)
			chunk := ops[:n]
			ops = ops[n:]
			mops := make([]contract.MarkedOp, len(chunk))
			for i := range chunk {
				mops[i] = contract.MarkedOp{Op: chunk[i].op, Marks: chunk[i].marks}
			}
			seen, err := a.cmark.ApplyCounterMarked(ctx, mops, ttl, contract.WriteOptions{Durability: contract.Sync})
			applied = true
			var be *contract.BatchError
			if err != nil && (errors.Is(err, contract.ErrUnavailable) || !errors.As(err, &be) || be.Index < 0 || be.Index >= len(chunk)) {
				return false, fmt.Errorf("consumer: apply marked ops: %w", err)
			}
			if err != nil {
				a.failedMarked(evs, cs, &chunk[be.Index], be.Err, deadEv, dead)
				break // build again: the ops before it may be applied; their marks tell
			}
			if len(seen) != len(chunk) {
				return false, fmt.Errorf("consumer: apply marked ops: %d seen lists for %d ops", len(seen), len(chunk))
			}
			for i := range chunk {
				o := &chunk[i]
				if len(seen[i]) == 0 {
					for _, ci := range o.contrib {
						cs[ci].state = contribDone
					}
					continue
				}
				dropped := false
				for _, ci := range o.contrib {
					if slices.Contains(seen[i], cs[ci].mark) {
						cs[ci].state = contribDropped
						dup[cs[ci].ev] = true
						dropped = true
					}
				}
				if !dropped {
					return false, fmt.Errorf("consumer: apply marked ops: %q: seen marks %q are none of the op's", o.op.ID, seen[i])
				}
			}
		}
	}
	var nApplied, nDup int
	newest := int64(0)
	for k := range evs {
		switch {
		case deadEv[k]:
		case dup[k]:
			nDup++
		default:
			nApplied++
			newest = max(newest, evs[k].ts)
		}
	}
	a.m.Events.WithLabelValues("duplicate").Add(float64(nDup))
	a.m.Events.WithLabelValues("applied").Add(float64(nApplied))
	a.m.Batches.Inc()
	a.advanceNewest(newest)
	return applied, nil
}

// buildMarked coalesces the pending contributions of live events into
// ops: one per key (a merge that cannot be made, an overflow or too many
// items, starts another), one per contribution marked alone.
func (a *Applier) buildMarked(evs []pending, cs []contrib, deadEv []bool, maxItems int) []cmOp {
	var ops []cmOp
	last := map[opKey]int{} // the op a key merges into
	for ci := range cs {
		c := &cs[ci]
		if c.state != contribPending {
			continue
		}
		if deadEv[c.ev] {
			c.state = contribDropped
			continue
		}
		src := &evs[c.ev].hits[c.hit].Op
		if j, ok := last[c.key]; ok && !c.alone {
			o := &ops[j]
			sameEv := len(o.contrib) > 0 && cs[o.contrib[len(o.contrib)-1]].ev == c.ev
			if merge(&o.op, src, maxItems) {
				o.contrib = append(o.contrib, ci)
				if c.mark != "" && !(sameEv && o.marks[len(o.marks)-1] == c.mark) {
					o.marks = append(o.marks, c.mark)
				}
				continue
			}
		}
		o := cmOp{op: *src, contrib: []int{ci}}
		o.op.Items = slices.Clip(o.op.Items)
		if len(o.op.Fields) > 0 {
			o.op.Fields = slices.Clone(o.op.Fields)
		}
		if c.mark != "" {
			o.marks = []string{c.mark}
		}
		if !c.alone {
			last[c.key] = len(ops)
		}
		ops = append(ops, o)
	}
	return ops
}

// failedMarked handles op o refused with err: an op of one event
// dead-letters the event (its changes to other counters stay applied:
// they are not atomic with this one); an op of several is applied again
// one contribution at a time, to find the event it is.
func (a *Applier) failedMarked(evs []pending, cs []contrib, o *cmOp, err error, deadEv []bool, dead [][]stream.DeadLetter) {
	ev := cs[o.contrib[0]].ev
	one := true
	for _, ci := range o.contrib {
		if cs[ci].ev != ev {
			one = false
		}
	}
	if !one {
		for _, ci := range o.contrib {
			cs[ci].alone = true
		}
		return
	}
	p := &evs[ev]
	deadEv[ev] = true
	a.deadApply(dead, p, int(cs[o.contrib[0]].hit), &o.op, err)
}
