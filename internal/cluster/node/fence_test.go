package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/counterd/counterd/internal/contract"
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

// TestOwnerOpRingFlapsAfterFence: an owner's ring changes after each of
// its operation's fences and comes back to the same nodes (membership
// flapping under load: a node suspected, then refuted). The operation
// must not run under a ring it did not fence: its write would find no
// epoch (the fencer's is the older ring's), would not be lifted to the
// epoch the replicas promised it, and would keep a previous epoch's
// versions. It is refused (unavailable) or, retried, written at the
// promised epoch.
func TestOwnerOpRingFlapsAfterFence(t *testing.T) {
	c := newTestCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	n1 := c.node("n1").n
	var id string
	for i := 0; id == ""; i++ {
		if cand := fmt.Sprintf("flap:%d", i); n1.Ring().Owner(cand) == "n1" {
			id = cand
		}
	}
	var flaps atomic.Int32
	flap := func(self string, _ uint64) {
		if self != "n1" || flaps.Add(1) > 4 { // every try of one operation
			return
		}
		s := n1.ring.Snapshot()
		n1.setRing(s.Nodes(), !s.Tags())
		n1.setRing(s.Nodes(), s.Tags())
	}
	knobs.afterFence.Store(&flap)
	t.Cleanup(func() { knobs.afterFence.Store(nil) })
	res, err := n1.Apply(ctx, add(id, 1), syncWO)
	if flaps.Load() < 4 {
		t.Fatalf("the ring flapped after %d fences, want 4", flaps.Load())
	}
	promised := c.node("n2").n.promises.get(id)
	if err != nil {
		if !errors.Is(err, contract.ErrUnavailable) {
			t.Fatalf("write while the ring flaps: %v, want unavailable", err)
		}
		if res, err = n1.Apply(ctx, add(id, 1), syncWO); err != nil {
			t.Fatal(err)
		}
		promised = c.node("n2").n.promises.get(id)
	}
	if promised.Node != "n1" || epochOf(res.Version) != promised.Epoch {
		t.Fatalf("write at version %#x (epoch %d), replicas promised epoch %d to %s", res.Version, epochOf(res.Version), promised.Epoch, promised.Node)
	}
}
