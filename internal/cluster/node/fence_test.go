package node

import (
	"slices"
	"testing"
)

// TestFencerStaleRingKeepsNewerClaims: an operation that took its ring
// snapshot before a change (its fence starts late, after another
// operation fenced the new ring) must not take the fencer back to the old
// version: that would throw away the epochs claimed at the new one, and
// the owner's writes under the new ring would not be lifted to its epoch.
func TestFencerStaleRingKeepsNewerClaims(t *testing.T) {
	var f fencer
	f.init()
	ids := []string{"a", "b"}
	if todo, stale := f.pending(4, ids, true); stale || !slices.Equal(todo, ids) {
		t.Fatalf("v4: pending %v, stale %v; want both ids", todo, stale)
	}
	f.markDone(4, ids, map[string]uint32{"a": 3, "b": 3})
	// The ring moves to v5; an operation fences a there.
	if todo, stale := f.pending(5, ids, true); stale || !slices.Equal(todo, ids) {
		t.Fatalf("v5: pending %v, stale %v; want both ids", todo, stale)
	}
	f.markDone(5, []string{"a"}, map[string]uint32{"a": 7})
	// A late operation still holding the v4 snapshot.
	if todo, stale := f.pending(4, ids, true); !stale || len(todo) != 0 {
		t.Fatalf("v4 after v5: pending %v, stale %v; want stale", todo, stale)
	}
	if e := f.epoch(5, "a"); e != 7 {
		t.Fatalf("epoch of a at v5 after a stale fence: %d, want 7", e)
	}
	if todo, stale := f.pending(5, ids, true); stale || !slices.Equal(todo, []string{"b"}) {
		t.Fatalf("v5 again: pending %v, stale %v; want [b]", todo, stale)
	}
	// A fence of v4 that ends after v5 began records nothing.
	f.markDone(4, []string{"b"}, map[string]uint32{"b": 9})
	if e := f.epoch(5, "b"); e != 0 {
		t.Fatalf("epoch of b at v5 after a v4 fence ended: %d, want 0", e)
	}
}
