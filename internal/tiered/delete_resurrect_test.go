// These tests show that a delete is ordered against the deltas around it
// in PostgreSQL by the counter's lives, so a deleted counter does not come
// back (docs/redis-tier.md, "Deletes and lives").

package tiered_test

import (
	"context"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/tiered"
)

// TestDeleteNotResurrectedByOtherNode: a counter deleted on one node
// stays deleted for another node sharing Redis and PostgreSQL, even while
// the delete has not reached PostgreSQL (which still holds the value the
// deleting node flushed before it). Flushes are made by hand (FlushInterval
// 1 h), so the window is hit every run.
func TestDeleteNotResurrectedByOtherNode(t *testing.T) {
	manual := func(o *tiered.Options) { o.FlushInterval = time.Hour }
	e := setup{}.env(t, manual)
	b2 := e.second(t, manual)
	ctx := context.Background()

	apply(t, e.b, add("z", contract.KindNone, 1))
	if err := e.b.Flush(ctx); err != nil { // PostgreSQL: z = 1
		t.Fatal(err)
	}
	if _, err := e.b.Apply(ctx, contract.Op{Type: contract.OpDelete, ID: "z"}, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The delete is in node 1's write-behind only.
	if v := view(t, b2, "z"); v.Exists {
		t.Errorf("node 2 reads z = %d after node 1 deleted it, want missing", v.Value)
	}
	if r := apply(t, b2, add("z", contract.KindNone, 1)); r.Value != 1 {
		t.Fatalf("node 2: add 1 after node 1 deleted z = %d, want 1", r.Value)
	}
	// Both write-behinds commit (the deleting node's last); PostgreSQL must
	// then hold what Redis holds: the add made after the delete.
	if err := b2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	e.flushRedis(t)
	if v := view(t, b2, "z"); !v.Exists || v.Value != 1 {
		t.Fatalf("after both flushes and a loss of Redis data, z = %+v, want 1", v)
	}
}

// TestDeleteOrderedAfterOtherNodesDeltas: node 2 adds (its delta still in
// its write-behind), node 1 deletes; whichever node flushes first,
// PostgreSQL must end without the counter, as Redis does.
func TestDeleteOrderedAfterOtherNodesDeltas(t *testing.T) {
	manual := func(o *tiered.Options) { o.FlushInterval = time.Hour }
	e := setup{}.env(t, manual)
	b2 := e.second(t, manual)
	ctx := context.Background()

	apply(t, b2, add("z", contract.KindNone, 1))
	if _, err := e.b.Apply(ctx, contract.Op{Type: contract.OpDelete, ID: "z"}, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if v := view(t, e.b, "z"); v.Exists {
		t.Fatalf("after both flushes z = %d (read through from PostgreSQL), want missing", v.Value)
	}
	e.flushRedis(t)
	if v := view(t, e.b, "z"); v.Exists {
		t.Fatalf("after both flushes and a loss of Redis data, z = %d, want missing (deleted)", v.Value)
	}
}

// TestDeleteBetweenAddScriptAndHandOver: a delete of the same node that
// runs between an add's Redis script and the hand-over of its delta (as
// GETDEL draining a key under concurrent INCRs does) must not leave that
// delta in PostgreSQL: Redis dropped it with the key, and the next add's
// read-through would count it a second time.
func TestDeleteBetweenAddScriptAndHandOver(t *testing.T) {
	e := setup{}.env(t, func(o *tiered.Options) { o.FlushInterval = time.Hour })
	ctx := context.Background()
	once := false
	restore := tiered.AfterAddScript(func(id string) {
		if id != "g" || once {
			return
		}
		once = true
		if _, err := e.b.Apply(ctx, contract.Op{Type: contract.OpDelete, ID: "g"}, contract.WriteOptions{}); err != nil {
			t.Error(err)
		}
	})
	apply(t, e.b, add("g", contract.KindNone, 1)) // Redis: 1, then deleted
	restore()
	if v := view(t, e.b, "g"); v.Exists {
		t.Errorf("g = %d after the delete, want missing", v.Value)
	}
	if r := apply(t, e.b, add("g", contract.KindNone, 1)); r.Value != 1 {
		t.Fatalf("add 1 after the delete: g = %d, want 1", r.Value)
	}
}
