package engine

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/contract"
)

// TestMayHaveMarkerCounters: after any sequence of sets and deletes of
// ids with and without MarkerCounterPrefix (and ids that only look like
// it), MayHaveMarkerCounters is true whenever a marker counter exists,
// and after the flushes that reap deleted counters exactly then.
func TestMayHaveMarkerCounters(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		e := openMem(t)
		defer e.Close()
		ids := []string{MarkerCounterPrefix + "a", MarkerCounterPrefix + "b", MarkerCounterPrefix, "_events", "_event:c", "x_events:d", "views:p1"}
		live := map[string]bool{}
		anyLive := func() bool {
			for id, ok := range live {
				if ok && isMarkerCounter(id) {
					return true
				}
			}
			return false
		}
		for range rapid.IntRange(0, 40).Draw(rt, "steps") {
			id := rapid.SampledFrom(ids).Draw(rt, "id")
			switch rapid.IntRange(0, 2).Draw(rt, "op") {
			case 0:
				if _, err := e.Apply(bg, contract.Op{Type: contract.OpSet, ID: id, Value: 1}, contract.WriteOptions{}); err != nil {
					rt.Fatal(err)
				}
				live[id] = true
			case 1:
				if _, err := e.Apply(bg, contract.Op{Type: contract.OpDelete, ID: id}, contract.WriteOptions{}); err != nil {
					rt.Fatal(err)
				}
				live[id] = false
			case 2:
				// A flush reaps the deleted counters after its waiters
				// return: the next one starts after that.
				for range 2 {
					if err := e.Flush(bg); err != nil {
						rt.Fatal(err)
					}
				}
				if got, want := e.MayHaveMarkerCounters(), anyLive(); got != want {
					rt.Fatalf("after a flush: MayHaveMarkerCounters %v, want %v (%v)", got, want, live)
				}
			}
			if anyLive() && !e.MayHaveMarkerCounters() {
				rt.Fatalf("a marker counter exists but MayHaveMarkerCounters is false (%v)", live)
			}
		}
	})
}

// TestMayHaveMarkerCountersReopen: marker counters loaded from disk
// count.
func TestMayHaveMarkerCountersReopen(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if e.MayHaveMarkerCounters() {
		t.Fatal("an empty engine has marker counters")
	}
	if _, err := e.Apply(bg, contract.Op{Type: contract.OpSet, ID: MarkerCounterPrefix + "x", Value: 1}, contract.WriteOptions{Durability: contract.Sync}); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = mustOpen(t, cfg)
	if !e.MayHaveMarkerCounters() {
		t.Fatal("the marker counter on disk is not counted after a restart")
	}
	if _, err := e.Apply(bg, contract.Op{Type: contract.OpDelete, ID: MarkerCounterPrefix + "x"}, contract.WriteOptions{Durability: contract.Sync}); err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(bg); err != nil {
		t.Fatal(err)
	}
	if e.MayHaveMarkerCounters() {
		t.Fatal("the deleted marker counter still counts after a flush")
	}
}
