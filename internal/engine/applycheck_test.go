package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/rollup"
)

// checkIDs are the counters of TestApplyBatchCheckedModel: plain
// counters, counters and sketches with rollups, windows, sketches, a
// sharded counter and a float.
var checkIDs = []string{"c:0", "c:1", "likes:0", "w:0", "w:1", "h:0", "viewers:0", "s:0", "f:0"}

// TestApplyBatchCheckedModel: random atomic batches (adds near overflow,
// wrong kinds, event times too late for a window or a rollup, counters
// created, expired, deleted, several ops per counter) give the same
// error or results and leave the same counters, window buckets, sketches
// and rollups as on an engine where every entry gets an undo record
// (noCheck); and a batch that fails leaves everything as it was. An op
// that checkRun lets through without a record and that then fails
// panics (applyMultiIn), which fails the test too.
func TestApplyBatchCheckedModel(t *testing.T) {
	var failed, applied atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		var clock atomic.Int64
		ea, eb := modelPair(t, &clock, func(e *Engine) { e.noCheck = true })
		defer ea.Close()
		defer eb.Close()
		spec := counter.WindowSpec{Granularity: time.Minute, Span: 10 * time.Minute}
		delta := rapid.SampledFrom([]int64{1, 1, 2, -1, 7, math.MaxInt64, math.MinInt64, math.MaxInt64 / 2, math.MaxInt64/2 + 1})
		gen := rapid.Custom(func(rt *rapid.T) contract.Op {
			id := rapid.SampledFrom(checkIDs).Draw(rt, "id")
			now := clock.Load()
			var at int64
			switch rapid.IntRange(0, 4).Draw(rt, "when") {
			case 1: // in the last few hours (some too late for the window or the rollup)
				at = now - int64(rapid.IntRange(0, 240).Draw(rt, "min ago"))*int64(time.Minute) - rapid.Int64Range(0, int64(time.Minute)).Draw(rt, "ago")
			case 2: // about the window's span ago
				at = now - int64(rapid.IntRange(0, 20).Draw(rt, "min ago"))*int64(time.Minute) - rapid.Int64Range(0, int64(time.Minute)).Draw(rt, "ago")
			case 3: // slightly ahead
				at = now + rapid.Int64Range(0, int64(time.Minute)).Draw(rt, "ahead")
			}
			op := contract.Op{ID: id, At: at}
			typ := rapid.IntRange(0, 9).Draw(rt, "type")
			if id[0] == 'w' && typ >= 7 {
				typ = 0 // mostly adds: windows that live through rounds
			}
			switch typ {
			case 0, 1, 2, 3:
				op.Type, op.Delta = contract.OpAdd, delta.Draw(rt, "delta")
				switch id[0] {
				case 'w':
					if rapid.IntRange(0, 3).Draw(rt, "kind") > 0 {
						op.Kind, op.Window = contract.KindWindow, spec
					}
				case 's':
					op.Kind, op.Shard = contract.KindSharded, rapid.IntRange(1, 4).Draw(rt, "shard") // not a random one
				case 'f':
					op.Kind, op.Float, op.Delta = contract.KindFloat, "1.5", 0
				}
			case 4, 5, 6:
				op.Type = contract.OpPFAdd
				for range rapid.IntRange(1, 3).Draw(rt, "items") {
					op.Items = append(op.Items, []byte{byte(rapid.IntRange(0, 255).Draw(rt, "item"))})
				}
			case 7:
				op.Type, op.Value, op.At = contract.OpSet, rapid.Int64Range(-5, 5).Draw(rt, "value"), 0
				if rapid.Bool().Draw(rt, "ttl") {
					op.TTL = time.Duration(rapid.IntRange(1, 3600).Draw(rt, "ttl s")) * time.Second
				}
			case 8:
				op.Type, op.At = contract.OpDelete, 0
			case 9:
				op.Type, op.At, op.TTL = contract.OpExpire, 0, time.Duration(rapid.IntRange(-1, 600).Draw(rt, "expire s"))*time.Second
			}
			return op
		})
		ctx := context.Background()
		for round := range rapid.IntRange(1, 12).Draw(rt, "rounds") {
			clock.Add(int64(rapid.IntRange(0, 40).Draw(rt, "step min"))*int64(time.Minute) + rapid.Int64Range(0, int64(time.Minute)).Draw(rt, "step"))
			ops := rapid.SliceOfN(gen, 1, 12).Draw(rt, "ops")
			before := checkSnapshot(rt, ea)
			ra, errA := ea.ApplyBatch(ctx, ops, contract.WriteOptions{})
			rb, errB := eb.ApplyBatch(ctx, ops, contract.WriteOptions{})
			if fmt.Sprint(errA) != fmt.Sprint(errB) || !reflect.DeepEqual(ra, rb) {
				rt.Fatalf("round %d: checked: %v %+v\nwith undo records: %v %+v", round, errA, ra, errB, rb)
			}
			a, b := checkSnapshot(rt, ea), checkSnapshot(rt, eb)
			if d := snapshotDiff(a, b); d != "" {
				rt.Fatalf("round %d: checked and undo-recorded engines differ:%s", round, d)
			}
			var be *contract.BatchError
			if errA != nil {
				if !errors.As(errA, &be) {
					rt.Fatalf("round %d: %v, want a BatchError", round, errA)
				}
				if d := snapshotDiff(before, a); d != "" {
					rt.Fatalf("round %d: failed batch (%v) changed counters:%s", round, errA, d)
				}
				failed.Add(1)
			} else {
				applied.Add(1)
			}
		}
	})
	if failed.Load() == 0 || applied.Load() == 0 {
		t.Fatalf("%d batches failed, %d applied: the cases do not cover both", failed.Load(), applied.Load())
	}
}

// modelPair opens two in-memory engines on one clock (set to a fixed
// start), with rollups of "likes" (hourly) and "viewers" (hourly uniques):
// the engine under test and a reference engine that slow applies to
// (forced onto the path under comparison). The caller closes both.
func modelPair(t *testing.T, clock *atomic.Int64, slow func(*Engine)) (e, ref *Engine) {
	clock.Store(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	open := func() *Engine {
		e := openMem(t, func(c *Config) { c.Clock = func() time.Time { return time.Unix(0, clock.Load()) } })
		if err := e.SetRollup("likes", rollup.Spec{Hour: 3 * time.Hour}); err != nil {
			t.Fatal(err)
		}
		if err := e.SetRollup("viewers", rollup.Spec{UniqueHours: 3 * time.Hour}); err != nil {
			t.Fatal(err)
		}
		return e
	}
	e, ref = open(), open()
	slow(ref)
	return e, ref
}

// checkSnapshot is what a client can see of checkIDs on e: each one's
// state (kind, version, TTL, encoding: a window's buckets, a sketch's
// registers), value, and rollups.
func checkSnapshot(rt *rapid.T, e *Engine) []string {
	var out []string
	now := time.Unix(0, e.nowNano())
	for _, id := range checkIDs {
		s, ok, err := e.Export(id)
		v, gerr := e.Get(id)
		out = append(out, fmt.Sprintf("%s: %v %+v %v | %+v %v", id, ok, s, err, v, gerr))
	}
	sr, err := e.Series("likes:0", rollup.Hour, now.Add(-4*time.Hour), now.Add(time.Hour))
	out = append(out, fmt.Sprintf("series %+v %v", sr, err))
	u, err := e.Uniques("viewers:0", rollup.Hour, 3)
	out = append(out, fmt.Sprintf("uniques %+v %v", u, err))
	return out
}

// snapshotDiff lists the lines of checkSnapshot that differ, "" if none.
func snapshotDiff(a, b []string) string {
	var d string
	for i := range a {
		if a[i] != b[i] {
			d += "\n- " + a[i] + "\n+ " + b[i]
		}
	}
	return d
}

// TestApplyBatchCheckedExpired: an expired counter starts again from
// zero, so the adds of a batch that would fit its old value can overflow
// its new one: the batch fails at its second op and leaves nothing.
func TestApplyBatchCheckedExpired(t *testing.T) {
	for _, noCheck := range []bool{false, true} {
		var clock atomic.Int64
		clock.Store(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano())
		e := openMem(t, func(c *Config) { c.Clock = func() time.Time { return time.Unix(0, clock.Load()) } })
		e.noCheck = noCheck
		ctx := context.Background()
		if _, err := e.Apply(ctx, contract.Op{Type: contract.OpSet, ID: "c", Value: math.MinInt64, TTL: time.Second}, contract.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		clock.Add(int64(2 * time.Second))
		_, err := e.ApplyBatch(ctx, []contract.Op{
			{Type: contract.OpAdd, ID: "c", Delta: math.MaxInt64},
			{Type: contract.OpAdd, ID: "c", Delta: math.MaxInt64 / 2},
		}, contract.WriteOptions{})
		var be *contract.BatchError
		if !errors.As(err, &be) || be.Index != 1 || !errors.Is(err, contract.ErrOverflow) {
			t.Fatalf("noCheck %v: %v, want an overflow at op 1", noCheck, err)
		}
		if v, err := e.Get("c"); err != nil || v.Exists {
			t.Fatalf("noCheck %v: %+v %v, want no counter", noCheck, v, err)
		}
	}
}
