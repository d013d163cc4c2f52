package engine

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/rollup"
)

// TestApplyAtomicUndoSharedEntries: a batch names counters several times
// (a window, an HLL with a rollup, a counter with a rollup: the event
// pipeline's ops, one per bucket of the events' times); when a later op
// fails, every counter is as before, state, rollups and all, and the undo
// copies recycled by the batches that succeeded do not leak into any
// counter.
func TestApplyAtomicUndoSharedEntries(t *testing.T) {
	e := openMem(t)
	if err := e.SetRollup("likes", rollup.Spec{Hour: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := e.SetRollup("viewers", rollup.Spec{UniqueDays: 30 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	spec := counter.WindowSpec{Granularity: time.Minute, Span: time.Hour}
	now := time.Now().UnixNano()
	minute := int64(time.Minute)
	batch := func(round int, marker string) []contract.Op {
		var ops []contract.Op
		for k := range 3 {
			at := (now/minute - int64(k)) * minute
			ops = append(ops,
				contract.Op{Type: contract.OpAdd, Kind: contract.KindWindow, Window: spec, ID: "recent:u1", Delta: int64(round + k + 1), At: at},
				contract.Op{Type: contract.OpPFAdd, ID: "viewers:p1", Items: [][]byte{[]byte{byte('a' + round), byte('0' + k)}}, At: at},
				contract.Op{Type: contract.OpAdd, ID: "likes:p1", Delta: 1, At: at},
			)
		}
		return append(ops, contract.Op{Type: contract.OpSet, ID: marker, Value: 1, CheckVersion: true})
	}
	ids := []string{"recent:u1", "viewers:p1", "likes:p1"}
	export := func() map[string]State {
		m := map[string]State{}
		for _, id := range ids {
			s, ok, err := e.Export(id)
			if err != nil || !ok {
				t.Fatalf("export %s: %v %v", id, ok, err)
			}
			s.UpdatedAt = 0
			m[id] = s
		}
		return m
	}
	series := func() *rollup.Series {
		s, err := e.Series("likes:p1", rollup.Hour, time.Unix(0, now).Add(-3*time.Hour), time.Unix(0, now).Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for round := range 4 {
		if err := e.ApplyAtomic(ctx, batch(round, "m"+string(rune('0'+round))), contract.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		before, beforeSeries := export(), series()
		// The same marker again: the last op fails, after every other
		// op changed its counter.
		err := e.ApplyAtomic(ctx, batch(round+10, "m0"), contract.WriteOptions{})
		var be *contract.BatchError
		if !errors.As(err, &be) || be.Index != 9 || !errors.Is(err, contract.ErrVersionConflict) {
			t.Fatalf("round %d: %v, want a version conflict at op 9", round, err)
		}
		if after := export(); !reflect.DeepEqual(after, before) {
			t.Fatalf("round %d: a failed batch changed counters:\nbefore %+v\nafter  %+v", round, before, after)
		}
		if s := series(); !reflect.DeepEqual(s, beforeSeries) {
			t.Fatalf("round %d: a failed batch changed the likes rollup: %+v, want %+v", round, s, beforeSeries)
		}
	}
	v, err := e.Get("recent:u1")
	if err != nil {
		t.Fatal(err)
	}
	// Rounds 0..3 added round+k+1 for k = 0, 1, 2: 6+9+12+15.
	if v.Value != 42 {
		t.Errorf("recent:u1 = %d, want 42", v.Value)
	}
	if n, _, _ := e.PFCount("viewers:p1"); n != 12 {
		t.Errorf("viewers:p1 = %d, want 12", n)
	}
}
