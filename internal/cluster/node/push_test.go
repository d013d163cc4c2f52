package node

import (
	"context"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
)

// A pn add reaches its owner by the push the change itself starts: with
// the periodic push (PushInterval) and anti-entropy an hour apart, the
// owner still reads every add within seconds.
func TestPushOnChange(t *testing.T) {
	c := startTestCluster(&testCluster{t: t, nodes: map[string]*testNode{}, antiEntropy: time.Hour,
		tune: func(cfg *Config) { cfg.PushInterval = time.Hour }}, "n1", "n2", "n3")
	ctx := context.Background()
	a, owner := c.node("n1").n, c.node("n2").n
	id := idOwnedBy(a, "n2", "push:")
	// The owner's first read of an id pulls it from the replicas; the
	// adds after it reach the owner only by pushes.
	for want := int64(1); want <= 3; want++ {
		op := add(id, 1)
		op.Kind = contract.KindPN
		if _, err := a.Apply(ctx, op, contract.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "the owner reads the add", func() bool {
			v, err := owner.Get(ctx, id)
			return err == nil && v.Value == want
		})
	}
}
