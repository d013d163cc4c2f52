package node

import (
	"context"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
)

// TestStaleCopyDoesNotResurrectDelete: a copy of a counter exported before
// its delete (as a push batch or anti-entropy answer in flight would carry
// it) arrives after the delete on the owner and on a replica; the counter
// stays deleted on both, and a write after the delete still replicates.
func TestStaleCopyDoesNotResurrectDelete(t *testing.T) {
	c := newTestCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	const id = "tomb:x"
	owner := c.node(c.running()[0].n.ring.Snapshot().Owner(id))
	var replica *testNode
	for _, tn := range c.running() {
		if tn != owner {
			replica = tn
			break
		}
	}
	if _, err := owner.n.Apply(ctx, add(id, 5), syncWO); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the replica holds the counter", func() bool {
		v, err := replica.eng.Get(id)
		return err == nil && v.Value == 5
	})
	stale, ok, err := replica.n.export(id)
	if err != nil || !ok {
		t.Fatalf("export from the replica: %v %v", ok, err)
	}
	if _, err := owner.n.Apply(ctx, contract.Op{Type: contract.OpDelete, ID: id}, syncWO); err != nil {
		t.Fatal(err)
	}
	// A sync delete is acknowledged once a write quorum holds it: the
	// replica picked here may be the one whose push is still in flight.
	eventually(t, 5*time.Second, "the replica holds the tombstone", func() bool {
		v, err := replica.eng.Get(id)
		return err == nil && !v.Exists
	})
	for _, tn := range []*testNode{owner, replica} {
		tn.n.serveReplicate(ctx, &replicateRequest{States: []State{stale}})
		if v, err := tn.eng.Get(id); err != nil || v.Exists {
			t.Fatalf("%s: stale copy brought the counter back: %+v, %v", tn.id, v, err)
		}
	}
	if v, err := owner.n.Get(ctx, id); err != nil || v.Exists {
		t.Fatalf("read after the stale copy: %+v, %v", v, err)
	}

	// Written again after the delete, in a later clock tick: newer than
	// the tombstone.
	deleted := owner.eng.Now()
	eventually(t, time.Second, "the owner's clock moves on", func() bool { return owner.eng.Now().After(deleted) })
	if _, err := owner.n.Apply(ctx, add(id, 2), syncWO); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the new write reaches the replica", func() bool {
		v, err := replica.eng.Get(id)
		return err == nil && v.Exists && v.Value == 2
	})
}

func TestTombsExpireAndBound(t *testing.T) {
	var tb tombs
	old := time.Now().Add(-2 * tombRetention).UnixNano()
	tb.add("a", old)
	tb.add("b", time.Now().UnixNano())
	if _, ok := tb.at["a"]; ok {
		t.Error("a tombstone past the retention is still kept")
	}
	if len(tb.filter([]State{{ID: "b", UpdatedAt: 1}})) != 0 {
		t.Error("a state older than b's delete passed")
	}
	if len(tb.filter([]State{{ID: "b", UpdatedAt: time.Now().Add(time.Hour).UnixNano()}})) != 1 {
		t.Error("a state newer than b's delete was dropped")
	}
	for i := 0; i < tombMax+10; i++ {
		tb.add(string(rune('c'+i%20))+string(rune(i)), time.Now().UnixNano())
	}
	if n := len(tb.order) - tb.head; n > tombMax || len(tb.at) > tombMax {
		t.Errorf("%d tombstones kept (%d ids), bound %d", n, len(tb.at), tombMax)
	}
}
