package engine

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/rollup"
)

// TestApplyBatchPeekModel: random atomic batches bigger than a peek's
// block (peek.go), over windows, counters and sketches with and without
// rollups, some missing, some ops failing (too late, wrong kind), give
// the same error or results and leave the same counters as on an engine
// that does not peek (noPeek). Peeks only read: this checks that they
// change nothing, at a block's edges too, and that their reads stay in
// bounds (a window's ring, a shard's table, the batch's refs).
func TestApplyBatchPeekModel(t *testing.T) {
	var ids []string
	for i := range 12 {
		n := strconv.Itoa(i)
		ids = append(ids, "w:"+n, "c:"+n, "likes:"+n, "h:"+n, "viewers:"+n)
	}
	rapid.Check(t, func(rt *rapid.T) {
		var clock atomic.Int64
		ea, eb := modelPair(t, &clock, func(e *Engine) { e.noPeek = true })
		defer ea.Close()
		defer eb.Close()
		spec := counter.WindowSpec{Granularity: time.Minute, Span: 10 * time.Minute}
		gen := rapid.Custom(func(rt *rapid.T) contract.Op {
			id := rapid.SampledFrom(ids).Draw(rt, "id")
			now := clock.Load()
			op := contract.Op{ID: id, Type: contract.OpAdd, Delta: rapid.Int64Range(-3, 3).Draw(rt, "delta")}
			if rapid.Bool().Draw(rt, "at") {
				// Up to an hour ago (some too late for the window) or a
				// little ahead.
				op.At = now - rapid.Int64Range(-int64(time.Minute), int64(time.Hour)).Draw(rt, "ago")
			}
			switch {
			case id[0] == 'w':
				op.Kind, op.Window = contract.KindWindow, spec
			case id[0] == 'h' || id[0] == 'v':
				op.Type, op.Delta = contract.OpPFAdd, 0
				op.Items = [][]byte{{byte(rapid.IntRange(0, 255).Draw(rt, "item"))}}
			}
			switch rapid.IntRange(0, 19).Draw(rt, "other") {
			case 0: // the wrong kind for some
				op.Type, op.Items, op.Kind, op.Window = contract.OpPFAdd, [][]byte{{1}}, contract.KindNone, counter.WindowSpec{}
			case 1:
				op = contract.Op{Type: contract.OpDelete, ID: id}
			}
			return op
		})
		ctx := context.Background()
		for round := range rapid.IntRange(1, 6).Draw(rt, "rounds") {
			clock.Add(rapid.Int64Range(0, int64(20*time.Minute)).Draw(rt, "step"))
			ops := rapid.SliceOfN(gen, 1, 3*peekBlock+5).Draw(rt, "ops")
			ra, errA := ea.ApplyBatch(ctx, ops, contract.WriteOptions{})
			rb, errB := eb.ApplyBatch(ctx, ops, contract.WriteOptions{})
			if fmt.Sprint(errA) != fmt.Sprint(errB) || !reflect.DeepEqual(ra, rb) {
				rt.Fatalf("round %d: peeking: %v %+v\nnot peeking: %v %+v", round, errA, ra, errB, rb)
			}
			a, b := peekSnapshot(ea, ids), peekSnapshot(eb, ids)
			if d := snapshotDiff(a, b); d != "" {
				rt.Fatalf("round %d: peeking and not peeking engines differ:%s", round, d)
			}
		}
	})
}

// peekSnapshot is each of ids' state, value and rollups on e.
func peekSnapshot(e *Engine, ids []string) []string {
	var out []string
	now := time.Unix(0, e.nowNano())
	for _, id := range ids {
		s, ok, err := e.Export(id)
		v, gerr := e.Get(id)
		out = append(out, fmt.Sprintf("%s: %v %+v %v | %+v %v", id, ok, s, err, v, gerr))
		switch id[0] {
		case 'l':
			sr, err := e.Series(id, rollup.Hour, now.Add(-4*time.Hour), now.Add(time.Hour))
			out = append(out, fmt.Sprintf("series %+v %v", sr, err))
		case 'v':
			u, err := e.Uniques(id, rollup.Hour, 3)
			out = append(out, fmt.Sprintf("uniques %+v %v", u, err))
		}
	}
	return out
}
