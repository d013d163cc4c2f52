package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
)

// ownedID returns an id with prefix that node owns in tn's ring.
func ownedID(tn *testNode, owner, prefix string) string {
	for i := 0; ; i++ {
		if id := fmt.Sprintf("%s%d", prefix, i); tn.n.Ring().Owner(id) == owner {
			return id
		}
	}
}

// TestKeyedRetryReplaysAfterOwnerCrash: a keyed sync add is applied and
// replicated by n1, which then dies before its client hears the answer; the
// client's retry with the same key through a survivor must replay the
// first result, not apply again. The record reaches the survivors only by
// replication (the push that carries the state, then the new owner's
// fence), so this fails if records do not travel with the state.
func TestKeyedRetryReplaysAfterOwnerCrash(t *testing.T) {
	for _, kind := range []contract.Kind{contract.KindCounter, contract.KindPN} {
		t.Run(kind.String(), func(t *testing.T) {
			c := newTestCluster(t, "n1", "n2", "n3")
			ctx := context.Background()
			id := ownedID(c.node("n2"), "n1", "replay:"+kind.String()+":")
			op := contract.Op{Type: contract.OpAdd, ID: id, Delta: 5, Kind: kind}
			wo := contract.WriteOptions{Durability: contract.Sync, IdempotencyKey: "retry-" + id}
			first, err := c.node("n1").n.Apply(ctx, op, wo)
			if err != nil || first.Value != 5 {
				t.Fatalf("first apply on the owner: %+v, %v", first, err)
			}
			c.kill("n1")
			c.waitRing("n2", "n3")
			for _, via := range []string{"n2", "n3"} {
				again, err := c.node(via).n.Apply(ctx, op, wo)
				if err != nil {
					t.Fatalf("retry via %s: %v", via, err)
				}
				if !again.Replayed || again.Value != first.Value {
					t.Fatalf("retry via %s after the owner died: %+v, want a replay of value %d", via, again, first.Value)
				}
			}
			for _, tn := range c.running() {
				eventually(t, 5*time.Second, "survivors read the add once", func() bool {
					v, err := tn.n.Get(ctx, id)
					return err == nil && v.Value == 5
				})
			}
		})
	}
}

// TestForwardToDeadOwnerFailsOver: right after the owner of an id is
// killed, a keyed write sent through another node is not answered 503: the
// forwarder's call fails, a direct probe finds the owner gone, and the
// write goes to the new owner once the ring has dropped the dead one.
func TestForwardToDeadOwnerFailsOver(t *testing.T) {
	c := newTestCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	n2 := c.node("n2")
	id := ownedID(n2, "n1", "failover:")
	key := 0
	apply := func() (contract.Result, error) {
		key++
		return n2.n.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1, Kind: contract.KindCounter},
			contract.WriteOptions{Durability: contract.Sync, IdempotencyKey: fmt.Sprintf("fo-%d", key)})
	}
	if _, err := apply(); err != nil {
		t.Fatal(err)
	}
	c.kill("n1")
	killed := time.Now()
	res, err := apply()
	if err != nil {
		t.Fatalf("keyed write through n2 right after its owner died: %v (after %v)", err, time.Since(killed))
	}
	t.Logf("first write after the kill answered after %v", time.Since(killed).Round(time.Millisecond))
	if res.Value != 2 {
		t.Fatalf("write after failover: %+v, want value 2", res)
	}
	if got := value(n2.n.metrics.failover.WithLabelValues("rerouted")); got < 1 {
		t.Fatalf("failover rerouted %v times, want at least 1 (did the ring move before the write?)", got)
	}
}
