package engine

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// nextFlushBatch applies batch k of TestNextFlush* with async durability:
// a counter add, a window add and a dedupe mark.
func nextFlushBatch(t *testing.T, e *Engine, k int) {
	t.Helper()
	ops := []contract.Op{
		{Type: contract.OpAdd, ID: "views", Delta: 1},
		{Type: contract.OpAdd, ID: fmt.Sprintf("recent:u%d", k), Kind: contract.KindWindow,
			Window: counter.WindowSpec{Granularity: time.Minute, Span: time.Hour}, Delta: 1},
	}
	if err := e.ApplyMarked(bg, ops, []string{fmt.Sprintf("ev%d", k)}, time.Hour, contract.WriteOptions{Durability: contract.Async}); err != nil {
		t.Fatal(err)
	}
}

// checkNextFlushBatches checks that batches 0..n-1 (nextFlushBatch) are in
// e, each once.
func checkNextFlushBatches(t *testing.T, e *Engine, n int) {
	t.Helper()
	if v := mustGet(t, e, "views"); v.Value != int64(n) {
		t.Errorf("views: %d, want %d", v.Value, n)
	}
	for k := range n {
		if v := mustGet(t, e, fmt.Sprintf("recent:u%d", k)); v.Value != 1 {
			t.Errorf("recent:u%d: %d, want 1", k, v.Value)
		}
		err := e.ApplyMarked(bg, nil, []string{fmt.Sprintf("ev%d", k)}, time.Hour, contract.WriteOptions{Durability: contract.Async})
		if !errors.Is(err, contract.ErrVersionConflict) {
			t.Errorf("mark ev%d: %v, want a version conflict (the mark exists)", k, err)
		}
	}
}

// TestNextFlushStartsNoFlush: waits for the next flush (NextFlush) after
// each of n batches start no flush of their own: one flush (here a sync
// write's, the periodic one being an hour away) ends them all, where n
// sync waits make n flushes; and what they waited for survives a power
// loss right after.
func TestNextFlushStartsNoFlush(t *testing.T) {
	const n = 20
	t.Run("sync writes", func(t *testing.T) {
		e := openMem(t, func(c *Config) { c.FlushInterval = time.Hour })
		f0 := e.Stats().Flushes
		for k := range n {
			nextFlushBatch(t, e, k)
			if _, err := e.ApplyBatch(bg, []contract.Op{{Type: contract.OpSet, ID: "progress", Value: int64(k)}}, contract.WriteOptions{Durability: contract.Sync}); err != nil {
				t.Fatal(err)
			}
		}
		if got := e.Stats().Flushes - f0; got != n {
			t.Errorf("%d sync waits made %d flushes, want %d", n, got, n)
		}
	})
	t.Run("next flush", func(t *testing.T) {
		fs, cfg := syncedOnlyConfig(t)
		e := mustOpen(t, cfg)
		f0 := e.Stats().Flushes
		var waits []FlushWait
		for k := range n {
			nextFlushBatch(t, e, k)
			waits = append(waits, e.NextFlush())
		}
		time.Sleep(20 * time.Millisecond) // (a flush started by NextFlush would have run)
		if got := e.Stats().Flushes - f0; got != 0 {
			t.Fatalf("%d waits for the next flush made %d flushes, want none", n, got)
		}
		for k, w := range waits {
			if !w.Same(waits[0]) {
				t.Fatalf("wait %d is for another flush than wait 0's, with no flush between", k)
			}
			select {
			case <-w.Done():
				t.Fatalf("wait %d ended with no flush", k)
			default:
			}
			if w.Err() == nil {
				t.Fatalf("wait %d: Err nil before its flush", k)
			}
		}
		// Any flush ends them: a sync writer's here.
		if _, err := e.ApplyBatch(bg, []contract.Op{{Type: contract.OpSet, ID: "other", Value: 1}}, contract.WriteOptions{Durability: contract.Sync}); err != nil {
			t.Fatal(err)
		}
		for k, w := range waits {
			<-w.Done()
			if err := w.Err(); err != nil {
				t.Fatalf("wait %d: %v", k, err)
			}
		}
		if got := e.Stats().Flushes - f0; got != 1 {
			t.Errorf("%d waits for the next flush and one sync write made %d flushes, want 1", n, got)
		}
		if w := e.NextFlush(); w.Same(waits[0]) {
			t.Error("a wait taken after the flush is for the flush that ended")
		}
		// Power loss now: every batch waited for is on disk; one
		// applied since (async, not flushed) is not.
		nextFlushBatch(t, e, n)
		fs.SetIgnoreSyncs(true)
		e = reopenAfterPowerLoss(t, e, fs, cfg)
		checkNextFlushBatches(t, e, n)
		if v := mustGet(t, e, fmt.Sprintf("recent:u%d", n)); v.Value != 0 {
			t.Errorf("a batch applied after the flush survived the power loss: the loss is not simulated")
		}
	})
}

// TestNextFlushPeriodic: the periodic flush ends a wait for the next
// flush, with no sync writer, and makes what it waited for durable;
// Due is when the timer starts it.
func TestNextFlushPeriodic(t *testing.T) {
	fs := strictMemDir(t, "/data")
	cfg := DefaultConfig()
	cfg.Dir, cfg.FS, cfg.NodeID = "/data", fs, "n1"
	cfg.FlushInterval = 50 * time.Millisecond
	e := mustOpen(t, cfg)
	const n = 5
	for k := range n {
		nextFlushBatch(t, e, k)
	}
	w := e.NextFlush()
	if d := time.Until(w.Due()); d > cfg.FlushInterval {
		t.Errorf("due in %v, more than the flush interval %v", d, cfg.FlushInterval)
	}
	select {
	case <-w.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the periodic flush did not end the wait")
	}
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	fs.SetIgnoreSyncs(true)
	e = reopenAfterPowerLoss(t, e, fs, cfg)
	checkNextFlushBatches(t, e, n)
}

// TestNextFlushClose: Close's final flush ends a wait taken before it; a
// wait taken after Close ends at once with ErrClosed.
func TestNextFlushClose(t *testing.T) {
	e := openMem(t, func(c *Config) { c.FlushInterval = time.Hour })
	nextFlushBatch(t, e, 0)
	w := e.NextFlush()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Done():
	default:
		t.Fatal("Close did not end a wait for the next flush")
	}
	if err := w.Err(); err != nil {
		t.Errorf("wait ended by Close's flush: %v", err)
	}
	w = e.NextFlush()
	select {
	case <-w.Done():
	default:
		t.Fatal("a wait taken after Close does not end")
	}
	if err := w.Err(); !errors.Is(err, contract.ErrClosed) {
		t.Errorf("wait taken after Close: %v, want ErrClosed", err)
	}
}
