package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// TestLimiterOnEngineTable: a Limiter whose state lives in an engine's
// index (as the server wires it) decides exactly as a standalone one,
// hands its state off (KeepKeys), and its entries stay out of the
// engine's counters: no key counted, none listed, none dirty (no flush
// or WAL per check), and the janitor's Evict frees them when fresh again.
func TestLimiterOnEngineTable(t *testing.T) {
	clk := newFakeClock()
	ecfg := engine.DefaultConfig()
	ecfg.InMemory, ecfg.Clock, ecfg.FlushInterval = true, clk.Now, time.Hour
	e, err := engine.Open(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	l, err := New(Config{Clock: clk.Now, EvictInterval: -1, KeepKeys: true, Table: e.Limiters()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lims := []Limit{
		{Algorithm: FixedWindow, Limit: 3, Period: time.Minute},
		{Algorithm: SlidingLog, Limit: 3, Period: time.Minute},
		{Algorithm: TokenBucket, Limit: 3, Period: time.Minute},
	}
	ctx := context.Background()
	if _, err := e.Add(ctx, "user:1", 5, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, lim := range lims {
		for i := range 4 {
			s := mustCheck(t, l, "user:1", lim, 1)
			if s.Allowed != (i < 3) {
				t.Fatalf("%s hit %d: %+v", lim.Algorithm, i+1, s)
			}
		}
	}
	if l.Len() != len(lims) || e.Len() != 1 {
		t.Fatalf("Len: limiter %d, engine %d; want %d limiter entries and the one counter", l.Len(), e.Len(), len(lims))
	}
	if d := e.Stats().DirtyKeys; d != 0 {
		t.Fatalf("%d dirty keys after checks: limiter state must never be flushed", d)
	}
	if ids, _ := e.Scan(0, "", 100); len(ids) != 1 || ids[0] != "user:1" {
		t.Fatalf("Scan = %q, want the counter only", ids)
	}
	if v, err := e.Get("user:1"); err != nil || v.Value != 5 {
		t.Fatalf("counter user:1 = %+v, %v; want 5", v, err)
	}
	// Handoff from the engine's table into a standalone Limiter.
	out := l.ExportEntries(nil)
	if len(out) != len(lims) {
		t.Fatalf("exported %d entries, want %d", len(out), len(lims))
	}
	other := newLimiter(t, clk.Now)
	if n, err := other.ImportEntries(out, false); err != nil || n != len(lims) {
		t.Fatalf("import: %d, %v", n, err)
	}
	for _, lim := range lims {
		if s := mustCheck(t, other, "user:1", lim, 1); s.Allowed {
			t.Fatalf("%s after handoff: %+v, want denied", lim.Algorithm, s)
		}
	}
	clk.Advance(2 * time.Minute)
	if n := l.Evict(); n != len(lims) {
		t.Fatalf("evicted %d, want %d", n, len(lims))
	}
	if l.Len() != 0 || e.Len() != 1 {
		t.Fatalf("after Evict: limiter %d, engine %d entries", l.Len(), e.Len())
	}
	if s := mustCheck(t, l, "user:1", lims[0], 1); !s.Allowed || s.Remaining != 2 {
		t.Fatalf("fresh state after eviction: %+v", s)
	}
}
