package node

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/cluster/ring"
	"github.com/counterd/counterd/internal/contract"
)

// TestHashTagsRollingUpgrade: a member of a version before placement by
// hash tag (NoHashTags) keeps the whole cluster placing ids by their whole
// name, so every member agrees on owners; once it is upgraded (restarted
// with the capability), every ring places by tag, ids sharing a tag have
// one owner (a multi-key operation over them is accepted), and handoff has
// moved their state to their new replicas: every node reads the values
// written before.
func TestHashTagsRollingUpgrade(t *testing.T) {
	ctx := context.Background()
	old := map[string]bool{"n4": true}
	c := &testCluster{t: t, nodes: map[string]*testNode{}}
	c.tune = func(cfg *Config) { cfg.NoHashTags = old[cfg.NodeID] }
	startTestCluster(c, "n1", "n2", "n3", "n4")
	tags := func(want bool) func() bool {
		return func() bool {
			for _, tn := range c.running() {
				if tn.n.Ring().Tags() != want || tn.n.Ring().Len() != 4 {
					return false
				}
			}
			return true
		}
	}
	eventually(t, 10*time.Second, "rings place by whole id", tags(false))

	// Two ids of one tag that the whole-id ring places on two owners.
	whole := c.node("n1").n.Ring()
	var a, b string
	for i := 0; b == ""; i++ {
		id := fmt.Sprintf("{user:1}:hll%d", i)
		switch {
		case a == "":
			a = id
		case whole.Owner(id) != whole.Owner(a):
			b = id
		}
	}
	if _, _, err := c.node("n2").n.PFCount(ctx, a, b); !errors.Is(err, contract.ErrInvalidArgument) {
		t.Fatalf("PFCount(%s, %s) on two owners: %v, want the cross-node refusal", a, b, err)
	}
	const n = 40
	syncWO := contract.WriteOptions{Durability: contract.Sync}
	for i := 0; i < n; i++ {
		if _, err := c.node("n1").n.Apply(ctx, add(fmt.Sprintf("{user:1}:%d", i), int64(i+1)), syncWO); err != nil {
			t.Fatal(err)
		}
	}

	// Upgrade n4: restart it with the capability.
	dir := c.node("n4").dir
	c.kill("n4")
	c.waitRing("n1", "n2", "n3")
	delete(old, "n4")
	c.start("n4", dir)
	eventually(t, 15*time.Second, "rings place by hash tag", tags(true))

	s := c.node("n1").n.Ring()
	owner := s.OwnerOfHash(ring.Hash("user:1"))
	for _, tn := range c.running() {
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("{user:1}:%d", i)
			if o := tn.n.Ring().Owner(id); o != owner {
				t.Fatalf("%s places %s on %s, its tag on %s", tn.id, id, o, owner)
			}
		}
	}
	if _, _, err := c.node("n2").n.PFCount(ctx, a, b); err != nil {
		t.Fatalf("PFCount(%s, %s) of one tag: %v", a, b, err)
	}
	for _, tn := range c.running() {
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("{user:1}:%d", i)
			v, err := tn.n.Get(ctx, id)
			if err != nil || v.Value != int64(i+1) {
				t.Fatalf("%s on %s after the upgrade: %d, %v; want %d", id, tn.id, v.Value, err, i+1)
			}
		}
	}
	// Every replica in the tag's set holds the states (the handoff sent
	// them), read from its own store.
	for _, r := range s.Replicas("{user:1}:0", 0) {
		eng := c.node(r).eng
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("{user:1}:%d", i)
			eventually(t, 10*time.Second, id+" on replica "+r, func() bool {
				v, err := eng.Get(id)
				return err == nil && v.Value == int64(i+1)
			})
		}
	}
}
